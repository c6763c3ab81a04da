// The chat page served at "/": plain HTML and JavaScript, no build step. It streams replies from
// /v1/chat/completions over SSE (fetch + a ReadableStream reader) and keeps the conversation in the page. When
// the model reads images (/v1/models says modalities.vision), a picture can go with a message (a data: URI).
#pragma once

namespace cachet::server {

inline constexpr const char* kChatPage = R"HTML(<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>cachet chat</title>
<style>
  body { font-family: system-ui, sans-serif; max-width: 46rem; margin: 2rem auto; padding: 0 1rem; color: #222; }
  h1 { font-size: 1.3rem; }
  #log { border: 1px solid #ccc; border-radius: 6px; padding: 0.5rem 1rem; min-height: 12rem; }
  .msg { margin: 0.6rem 0; white-space: pre-wrap; }
  .user b { color: #0a58ca; } .assistant b { color: #198754; }
  form { display: flex; gap: 0.5rem; margin-top: 1rem; }
  #prompt { flex: 1; padding: 0.5rem; font-size: 1rem; }
  button { padding: 0.5rem 1rem; font-size: 1rem; }
  #status { color: #777; font-size: 0.85rem; margin-top: 0.5rem; min-height: 1rem; }
  #attach { display: none; } #attach.on { display: inline-block; padding: 0.5rem; cursor: pointer; color: #0a58ca; }
  #attach.picked { font-weight: bold; }
  #image { position: absolute; opacity: 0; width: 1px; height: 1px; }
  .msg img { display: block; max-width: 12rem; max-height: 9rem; margin: 0.3rem 0; border-radius: 4px; }
</style>
</head>
<body>
<h1>cachet chat <small id="model"></small></h1>
<div id="log"></div>
<form id="form">
  <label id="attach" title="attach an image">Image<input id="image" type="file" accept="image/*"></label>
  <input id="prompt" autocomplete="off" placeholder="Ask something..." autofocus>
  <button id="send" type="submit">Send</button>
  <button id="stop" type="button" disabled>Stop</button>
</form>
<div id="status"></div>
<script>
const log = document.getElementById('log'), form = document.getElementById('form');
const promptBox = document.getElementById('prompt'), statusLine = document.getElementById('status');
const sendBtn = document.getElementById('send'), stopBtn = document.getElementById('stop');
const imageInput = document.getElementById('image'), attach = document.getElementById('attach');
const messages = [];
let model = null, controller = null;

function readImage(file) {
  return new Promise((ok, fail) => {
    const r = new FileReader();
    r.onload = () => ok(r.result);
    r.onerror = () => fail(r.error);
    r.readAsDataURL(file);
  });
}

function add(role, text, image) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  const who = document.createElement('b');
  who.textContent = role === 'user' ? 'You: ' : 'Assistant: ';
  const body = document.createElement('span');
  body.className = 'body';
  body.textContent = text;
  div.append(who);
  if (image) {
    const img = document.createElement('img');
    img.src = image;
    div.append(img);
  }
  div.append(body);
  log.append(div);
  return body;
}

async function loadModel() {
  const r = await fetch('/v1/models');
  const j = await r.json();
  model = j.data[0].id;
  document.getElementById('model').textContent = '(' + model + ')';
  if (j.data[0].modalities && j.data[0].modalities.vision) attach.classList.add('on');
}

form.addEventListener('submit', async (e) => {
  e.preventDefault();
  const text = promptBox.value.trim();
  if (!text || controller) return;
  promptBox.value = '';
  if (!model) await loadModel();
  const file = imageInput.files[0];
  const image = file ? await readImage(file) : null;
  imageInput.value = '';
  attach.classList.remove('picked');
  messages.push({role: 'user', content: image ? [{type: 'image_url', image_url: {url: image}}, {type: 'text', text}]
                                              : text});
  add('user', text, image);
  const out = add('assistant', '');
  out.id = 'reply-' + messages.length;
  controller = new AbortController();
  sendBtn.disabled = true; stopBtn.disabled = false;
  statusLine.textContent = 'generating...';
  const t0 = performance.now();
  let reply = '', first = 0, tokens = 0;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: {'Content-Type': 'application/json'}, signal: controller.signal,
      body: JSON.stringify({model, messages, stream: true, temperature: 0, max_tokens: 256})
    });
    if (!r.ok) throw new Error((await r.json()).error.message);
    const reader = r.body.getReader(), dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buf += dec.decode(value, {stream: true});
      let i;
      while ((i = buf.indexOf('\n\n')) >= 0) {
        const ev = buf.slice(0, i); buf = buf.slice(i + 2);
        if (!ev.startsWith('data: ')) continue;
        const data = ev.slice(6);
        if (data === '[DONE]') continue;
        const delta = JSON.parse(data).choices[0]?.delta?.content || '';
        if (delta) {
          if (!first) first = performance.now();
          tokens++;
          reply += delta;
          out.textContent = reply;
        }
      }
    }
    messages.push({role: 'assistant', content: reply});
    out.parentElement.dataset.done = '1';
    statusLine.textContent = (first ? 'first token ' + Math.round(first - t0) + ' ms, ' : 'no text, ') + tokens +
                             ' chunks in ' + Math.round(performance.now() - t0) + ' ms';
  } catch (err) {
    statusLine.textContent = err.name === 'AbortError' ? 'stopped' : 'error: ' + err.message;
    if (reply) messages.push({role: 'assistant', content: reply});
    else if (err.name !== 'AbortError') messages.pop();  // a refused turn (a bad image) leaves the history
    out.parentElement.dataset.done = '1';
  } finally {
    controller = null;
    sendBtn.disabled = false; stopBtn.disabled = true;
  }
});
stopBtn.addEventListener('click', () => controller && controller.abort());
imageInput.addEventListener('change', () => attach.classList.toggle('picked', imageInput.files.length > 0));
loadModel().catch(() => {});
</script>
</body>
</html>
)HTML";

}  // namespace cachet::server
