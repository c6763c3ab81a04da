"""Tensor parallelism on this machine, written down as docs/tensor_parallel.md's report asks:
1. latency of the per-layer collectives by size (2-32 KB) and transport: shared memory, TCP loopback, TCP
   between two network namespaces (scripts/netns_hosts.sh; needs root), from build/bench/bench_collectives;
2. per-token communication volume of each mode for the given models (from their shapes);
3. decode tok/s at TP=1 and TP=2 (engines alternating, medians), and the split of a TP=2 token into compute
   and communication, with the projection to N hosts that split gives.
Usage: python bench/tp_bench.py --out bench/results/DIR/tp.md [--model FILE ...] [--runs 3]"""
import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
CACHET = ROOT / "build" / "cachet"
ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
MPI = ["mpirun", "--bind-to", "none", "--oversubscribe"]


def collectives(reps):
    rows = []
    exe = str(ROOT / "build" / "bench" / "bench_collectives")
    runs = [("shared memory", MPI + ["-np", "2", exe, str(reps), "shm"]),
            ("TCP loopback", MPI + ["-np", "2", "--mca", "btl", "self,tcp", "--mca", "btl_tcp_if_include", "lo",
                                    exe, str(reps), "tcp-lo"])]
    ns = f"tpb{os.getpid() % 1000}"
    netns = subprocess.run(["bash", str(ROOT / "scripts/netns_hosts.sh"), "up", ns, "91"], capture_output=True).returncode == 0
    if netns:
        net = "10.77.91.0/24"
        runs.append(("TCP between namespaces", ["ip", "netns", "exec", f"{ns}-a", "mpirun", "--host",
                                                "10.77.91.1,10.77.91.2", "-np", "2", "--mca", "plm_rsh_agent",
                                                str(ROOT / "scripts/netns_rsh.sh"), "--mca", "pml", "ob1", "--mca",
                                                "btl", "self,tcp", "--mca", "btl_tcp_if_include", net, "--mca",
                                                "oob_tcp_if_include", net, "-x", "OMPI_ALLOW_RUN_AS_ROOT", "-x",
                                                "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", exe, str(reps), "tcp-netns"]))
    try:
        for name, cmd in runs:
            out = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600)
            if out.returncode != 0:
                print(out.stderr[-2000:], file=sys.stderr)
                continue
            for line in out.stdout.splitlines():
                r = json.loads(line)
                r["transport"] = name
                rows.append(r)
    finally:
        if netns:
            subprocess.run(["bash", str(ROOT / "scripts/netns_hosts.sh"), "down", ns], capture_output=True)
    return rows


def shape(model):
    """The model's config as `cachet info` prints it ("  n_embd = 576  (...)")."""
    cfg = {}
    out = subprocess.run([str(CACHET), "info", "-m", model], capture_output=True, text=True, check=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[1] == "=" and parts[0] in ("n_embd", "n_layer", "n_head", "n_head_kv",
                                                                 "head_dim", "n_ff"):
            cfg[parts[0]] = int(parts[2])
    return cfg


def decode(model, tp, threads, n=96):
    args = [str(CACHET), "run", "-m", model, "--prompt-ids", "1 2 3 4 5 6 7 8", "-n", str(n), "--temp", "0",
            "--ignore-eos", "-t", str(threads), "--format", "json"]
    if tp > 1:
        args = MPI + ["-np", str(tp)] + args + ["--tp", str(tp)]
    out = subprocess.run(args, env=ENV, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(out.stderr[-2000:])
    return json.loads(out.stdout)["timings"]["decode_tok_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--model", action="append", default=[])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--collectives-only", action="store_true")
    a = ap.parse_args()
    models = a.model or [str(pathlib.Path.home() / ".cache/cachet/models/SmolLM2-135M-Instruct.Q4_1.gguf")]
    lines = ["# Tensor parallelism on this machine", "",
             f"CPU: {cpu_name()}, {os.cpu_count()} cores. `python bench/tp_bench.py` (medians).", "",
             "## Collectives (2 ranks), microseconds: median (p90)", "",
             "| transport | op | 2 KB | 4 KB | 8 KB | 16 KB | 32 KB |", "|---|---|---|---|---|---|---|"]
    rows = collectives(a.reps)
    lat = {}
    for (tr, op) in dict.fromkeys((r["transport"], r["op"]) for r in rows):
        cells = []
        for b in (2048, 4096, 8192, 16384, 32768):
            r = next(x for x in rows if x["transport"] == tr and x["op"] == op and x["bytes"] == b)
            lat[(tr, op, b)] = r["median_us"]
            cells.append(f"{r['median_us']:.1f} ({r['p90_us']:.1f})")
        lines.append(f"| {tr} | {op} | " + " | ".join(cells) + " |")
    lines += ["", "## Per model: communication per token, decode at TP=1 and TP=2", ""]
    for m in ([] if a.collectives_only else models):
        c = shape(m)
        d, L, ff = c["n_embd"], c["n_layer"], c["n_ff"]
        qd = c["n_head"] * c.get("head_dim", d // c["n_head"])
        exact_b = 4 * L * (qd + ff + 2 * d)  # whole rows gathered per layer: attention out, FFN act, 2 x d
        reduce_b = 4 * L * 2 * d             # two all-reduces of d per layer
        res = {k: [] for k in ("tp1_t2", "tp1_t1", "tp2_t1")}
        for _ in range(a.runs):  # engines alternating
            res["tp1_t2"].append(decode(m, 1, 2))
            res["tp2_t1"].append(decode(m, 2, 1))
            res["tp1_t1"].append(decode(m, 1, 1))
        med = {k: statistics.median(v) for k, v in res.items()}
        t1, t2 = 1e3 / med["tp1_t1"], 1e3 / med["tp2_t1"]  # ms per token: one core; two ranks of one core
        comm = t2 - t1 / 2
        lines += [f"### {pathlib.Path(m).name}: n_embd {d}, {L} layers, q_dim {qd}, n_ff {ff}", "",
                  f"- rows joined per decoded token: exact {exact_b / 1024:.1f} KiB in {4 * L} all-gathers (each "
                  f"rank receives (N-1)/N of it), reduce {reduce_b / 1024:.1f} KiB in {2 * L} all-reduces (each "
                  f"rank receives N-1 partial copies)",
                  f"- decode tok/s (medians of {a.runs}): TP=1 x 2 threads {med['tp1_t2']:.1f}, TP=2 x 1 thread "
                  f"{med['tp2_t1']:.1f}, TP=1 x 1 thread {med['tp1_t1']:.1f}; TP=2 / TP=1 on the same 2 cores "
                  f"{med['tp2_t1'] / med['tp1_t2']:.2f}x",
                  f"- split of a TP=2 token: {t2:.2f} ms = compute {t1 / 2:.2f} ms (half of one core's "
                  f"{t1:.2f} ms) + communication and waiting {comm:.2f} ms",
                  f"- projection to N hosts of one such core each (compute / N + the measured communication, "
                  f"which grows with log N at best): " + ", ".join(
                      f"N={n}: {1e3 / (t1 / n + comm):.0f} tok/s" for n in (1, 2, 4, 8)), ""]
    pathlib.Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    pathlib.Path(a.out).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    main()
