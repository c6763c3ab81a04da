// The live dashboard served at /dashboard: plain HTML and JavaScript, no build step. It polls /dashboard/state
// twice a second and draws the KV block pool (free / held by requests / kept by the prefix cache), the radix
// tree's largest nodes (their text, length, hits, locks), running and waiting requests, and the prefix cache's
// hit rate over time.
#pragma once

namespace cachet::server {

inline constexpr const char* kDashboardPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cachet dashboard</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 60rem; margin: 1.5rem auto; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.3rem; } h2 { font-size: 1rem; margin: 1.2rem 0 0.4rem; }
  .bar { display: flex; height: 1.6rem; border: 1px solid #aaa; border-radius: 4px; overflow: hidden; }
  .bar div { height: 100%; transition: width 0.3s; }
  .free { background: #e9ecef; } .used { background: #0d6efd; } .cached { background: #20c997; }
  .legend span { display: inline-block; margin-right: 1rem; font-size: 0.85rem; }
  .legend i { display: inline-block; width: 0.8rem; height: 0.8rem; margin-right: 0.3rem; vertical-align: -1px; }
  table { border-collapse: collapse; width: 100%; font-size: 0.85rem; }
  th, td { border-bottom: 1px solid #ddd; padding: 0.25rem 0.4rem; text-align: left; }
  td.text { font-family: ui-monospace, monospace; white-space: pre-wrap; max-width: 36rem; overflow: hidden; }
  .stats span { margin-right: 1.5rem; }
  canvas { border: 1px solid #ddd; border-radius: 4px; }
</style>
</head>
<body>
<h1>cachet dashboard <small id="model"></small></h1>
<div class="stats"><span>running <b id="running">-</b></span><span>waiting <b id="waiting">-</b></span>
<span>steps <b id="steps">-</b></span><span>hit rate <b id="hitrate">-</b></span></div>
<h2>KV block pool</h2>
<div class="bar"><div id="b-used" class="used"></div><div id="b-cached" class="cached"></div><div id="b-free" class="free"></div></div>
<div class="legend"><span><i class="used"></i>held by requests <b id="n-used">-</b></span>
<span><i class="cached"></i>prefix cache only <b id="n-cached">-</b></span><span><i class="free"></i>free <b id="n-free">-</b></span>
<span>of <b id="n-total">-</b> blocks</span></div>
<div id="states" hidden><h2>Recurrent state slots (hybrid model)</h2>
<div class="bar"><div id="s-used" class="used"></div><div id="s-free" class="free"></div></div>
<div class="legend"><span><i class="used"></i>held (sequences and <b id="ns-ckpt">-</b> checkpoints) <b id="ns-used">-</b></span>
<span>of <b id="ns-total">-</b> slots, <b id="ns-bytes">-</b> MiB each</span></div></div>
<h2>Prefix cache hit rate (prompt tokens served from the cache, per interval)</h2>
<canvas id="chart" width="900" height="140"></canvas>
<h2>Radix tree: largest nodes (<span id="n-nodes">0</span>)</h2>
<table><thead><tr><th>depth</th><th>tokens</th><th>hits</th><th>locks</th><th>text</th></tr></thead>
<tbody id="nodes"></tbody></table>
<script>
const $ = (id) => document.getElementById(id);
const history = [];
let last = null;
function draw() {
  const c = $("chart"), g = c.getContext("2d");
  g.clearRect(0, 0, c.width, c.height);
  g.strokeStyle = "#ccc"; g.beginPath(); g.moveTo(0, c.height - 1); g.lineTo(c.width, c.height - 1); g.stroke();
  g.strokeStyle = "#20c997"; g.lineWidth = 2; g.beginPath();
  history.forEach((v, i) => {
    const x = c.width - (history.length - 1 - i) * 6, y = c.height - 4 - v * (c.height - 8);
    i ? g.lineTo(x, y) : g.moveTo(x, y);
  });
  g.stroke();
}
async function tick() {
  try {
    const key = new URLSearchParams(location.hash.slice(1)).get("key");
    const s = await (await fetch("/dashboard/state" + (key ? "?key=" + encodeURIComponent(key) : ""))).json();
    $("model").textContent = s.model;
    $("running").textContent = s.running; $("waiting").textContent = s.waiting; $("steps").textContent = s.steps;
    const total = Math.max(1, s.blocks_total), cachedOnly = Math.max(0, s.blocks_used - s.blocks_held_by_requests);
    const used = s.blocks_held_by_requests, free = s.blocks_total - s.blocks_used;
    $("b-used").style.width = (100 * used / total) + "%"; $("b-cached").style.width = (100 * cachedOnly / total) + "%";
    $("b-free").style.width = (100 * free / total) + "%";
    $("n-used").textContent = used; $("n-cached").textContent = cachedOnly; $("n-free").textContent = free;
    $("n-total").textContent = s.blocks_total;
    $("states").hidden = !(s.state_slots_total > 0);
    if (s.state_slots_total > 0) {
      $("s-used").style.width = (100 * s.state_slots_used / s.state_slots_total) + "%";
      $("s-free").style.width = (100 - 100 * s.state_slots_used / s.state_slots_total) + "%";
      $("ns-used").textContent = s.state_slots_used; $("ns-ckpt").textContent = s.state_checkpoints; $("ns-total").textContent = s.state_slots_total;
      $("ns-bytes").textContent = (s.state_bytes_per_slot / 1048576).toFixed(1);
    }
    if (last) {
      const dq = s.prefix_query_tokens - last.prefix_query_tokens, dh = s.prefix_hit_tokens - last.prefix_hit_tokens;
      if (dq > 0) { history.push(dh / dq); if (history.length > 150) history.shift(); }
    }
    last = s;
    $("hitrate").textContent = s.prefix_query_tokens > 0
        ? (100 * s.prefix_hit_tokens / s.prefix_query_tokens).toFixed(1) + "%" : "-";
    $("n-nodes").textContent = s.nodes.length;
    const tb = $("nodes"); tb.innerHTML = "";
    for (const n of s.nodes) {
      const tr = document.createElement("tr");
      for (const v of [n.depth, n.tokens, n.hits, n.locks]) {
        const td = document.createElement("td"); td.textContent = v; tr.appendChild(td);
      }
      const td = document.createElement("td"); td.className = "text"; td.textContent = n.text; tr.appendChild(td);
      tb.appendChild(tr);
    }
    draw();
  } catch (e) { /* the server may be restarting: try again */ }
}
tick(); setInterval(tick, 500);
</script>
</body>
</html>
)HTML";

}  // namespace cachet::server
