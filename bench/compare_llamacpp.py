#!/usr/bin/env python3
"""Side by side, one run: cachet_bench and llama.cpp on the same GGUF files and thread counts, alternating the
two engines per repetition so machine noise hits both. Prints a markdown table of median prefill (pp) and
decode (tg) tokens/s and the ratios (the median of each repetition's cachet / llama.cpp pair).

  .venv/bin/python bench/compare_llamacpp.py -m MODEL.gguf [-m ...] -t 1 -t 2 [-r 5] [-p 128] [-n 256]
      [--llama-bench ~/.cache/cachet/llama.cpp/native/bin/llama-bench] [--isa avx2]

llama.cpp is its own llama-bench (scripts/setup_llamacpp.sh builds it) with --llama-bench: pp = `-p P -n 0`,
tg = `-p 0 -n N -d P` (decode of N tokens after P in context, as cachet_bench measures), flash attention at
its default (auto); without it, llama-cpp-python (bench/llamacpp_bench.py). --isa forces cachet's kernel table
(CACHET_ISA), e.g. the AVX2 table against llama.cpp's AVX2 build on a machine that also has AVX-512.
--ik-llama-bench adds ik_llama.cpp's llama-bench (../shared/peers.md) as a third engine, prefill only
(`-p P -n 0` with --ik-args, default its best prefill flags `-rtr 1 -fa 1`; add `-fmoe 1` for MoE files): its
llama-bench has no decode-at-depth test to match cachet_bench's tg.
"""
import argparse
import json
import os
import pathlib
import shlex
import statistics
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")][-1]


def bench_one(binary, model, threads, args):
    """One repetition of one llama-bench test (llama.cpp's or ik_llama.cpp's), its tokens/s."""
    out = subprocess.run([binary, "-m", model, "-t", str(threads), "-r", "1", "-o", "json"] + args, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)[0]["avg_ts"]


def llama_bench(binary, model, threads, n_prompt, n_gen):
    """llama.cpp's own llama-bench: one repetition each of prefill and of decode at depth n_prompt."""
    def one(args):
        return bench_one(binary, model, threads, args)
    return {"pp_tok_s": one(["-p", str(n_prompt), "-n", "0"]),
            "tg_tok_s": one(["-p", "0", "-n", str(n_gen), "-d", str(n_prompt)])}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", action="append", required=True)
    ap.add_argument("-t", "--threads", action="append", type=int)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("-p", "--n-prompt", type=int, default=128)
    ap.add_argument("-n", "--n-gen", type=int, default=256)
    ap.add_argument("--bench", default=str(ROOT / "build" / "bench" / "cachet_bench"))
    ap.add_argument("--llama-bench", help="llama.cpp's llama-bench binary (else llama-cpp-python)")
    ap.add_argument("--isa", help="CACHET_ISA for cachet (a kernel table this CPU runs)")
    ap.add_argument("--ik-llama-bench", help="ik_llama.cpp's llama-bench binary: a third engine, prefill only")
    ap.add_argument("--ik-args", default="-rtr 1 -fa 1", help="ik_llama.cpp's llama-bench flags")
    a = ap.parse_args()
    if a.isa:
        os.environ["CACHET_ISA"] = a.isa
    threads = a.threads or [2]
    # The machine is shared: its read bandwidth moves by 30% over minutes. So it is measured right before
    # every repetition and each run's roofline uses its own measurement.
    bws = {t: [] for t in threads}
    # Prefill roofline: multiply-adds per prompt token (cachet_bench counts them from the file) over the peak of
    # the instruction most of them run on in the kernel table (its int8 dot product for quantized weights, its
    # bf16 one or f32 FMA for float ones: bench/peak.h), measured once per thread count, in G MAC/s.
    peaks = {}
    for t in threads:
        p = run_json([a.bench, "--peak-flops", "-t", str(t), "-r", "3"])
        peaks[t] = {"f32": p["gflops"] / 2, "int8": p["int8_gmacs"], "bf16": p["bf16_gmacs"]}
    kinds = set()
    rows = []
    for model in a.model:
        for t in threads:
            ours = {"pp": [], "tg": []}
            theirs = {"pp": [], "tg": []}
            ik = []
            roofs = []
            flops = 0.0
            for rep in range(a.reps):
                bw_now = run_json([a.bench, "--bandwidth", "-t", str(t), "-r", "1"])["read_gbs"]
                bws[t].append(bw_now)

                def run_ours():
                    return run_json([a.bench, "-m", model, "-t", str(t), "-r", "1", "-p", str(a.n_prompt),
                                     "-n", str(a.n_gen)])

                def run_theirs():
                    return (llama_bench(a.llama_bench, model, t, a.n_prompt, a.n_gen) if a.llama_bench else
                            run_json([sys.executable, str(ROOT / "bench" / "llamacpp_bench.py"), "-m", model, "-t",
                                      str(t), "-r", "1", "-p", str(a.n_prompt), "-n", str(a.n_gen)]))

                def run_ik():
                    return bench_one(a.ik_llama_bench, model, t, ["-p", str(a.n_prompt), "-n", "0"] +
                                     shlex.split(a.ik_args)) if a.ik_llama_bench else float("nan")

                # Which engine goes first rotates, so none always meets the machine's next phase first.
                runs = [run_ours, run_theirs, run_ik]
                got = {}
                for i in range(3):
                    f = runs[(rep + i) % 3]
                    got[f] = f()
                j, k = got[run_ours], got[run_theirs]
                ik.append(got[run_ik])
                ours["pp"].append(j["pp_tok_s"])
                ours["tg"].append(j["tg_tok_s"])
                flops = j.get("prefill_flops_per_token", 0.0)
                kind = j.get("prefill_peak_kind", "f32")
                # Decode roofline: every weight byte read once per token (the embedding lookup reads one row;
                # a tied head reads the whole matrix) plus the KV cache and a hybrid's recurrent state (read and
                # written), over the measured read bandwidth.
                per_tok = (j.get("weight_bytes_read_per_token", j["weight_bytes"]) +
                           j["kv_bytes_per_token"] * (a.n_prompt + a.n_gen // 2) + j.get("state_bytes_per_token", 0))
                roofs.append(j["tg_tok_s"] / (bw_now * 1e9 / per_tok))
                theirs["pp"].append(k["pp_tok_s"])
                theirs["tg"].append(k["tg_tok_s"])
            med = {k: statistics.median(v) for k, v in ours.items()}
            lmed = {k: statistics.median(v) for k, v in theirs.items()}
            # The ratio of each repetition's pair, run back to back: the machine's bandwidth moves in phases of
            # minutes (31-66 GB/s in one run), which a ratio of two medians taken from different phases
            # does not cancel.
            pairs = {k: statistics.median(o / th for o, th in zip(ours[k], theirs[k])) for k in ours}
            peak = peaks[t].get(kind, 0.0)
            kinds.add(kind)
            ik_pair = statistics.median(o / x for o, x in zip(ours["pp"], ik)) if a.ik_llama_bench else float("nan")
            rows.append((os.path.basename(model) + f" ({kind})", t, med["pp"], lmed["pp"], pairs["pp"], med["tg"],
                         lmed["tg"], pairs["tg"], statistics.median(roofs),
                         med["pp"] * flops / 2 / (peak * 1e9) if peak else float("nan"),
                         lmed["pp"] * flops / 2 / (peak * 1e9) if peak else float("nan"),
                         statistics.median(ik), ik_pair))
            print(json.dumps({"model": model, "threads": t, "cachet": ours, "llama.cpp": theirs, "ik_llama.cpp": ik}),
                  file=sys.stderr)
    print(f"pp = prefill of {a.n_prompt} tokens, tg = decode of {a.n_gen} tokens after it; medians of {a.reps} "
          f"alternating runs (which engine goes first alternates too); ratios are the medians of each "
          f"repetition's pair; read bandwidth measured before each run, "
          f"{', '.join(f'{t}T {min(bws[t]):.1f}-{max(bws[t]):.1f} GB/s' for t in threads)}; roofline = median of "
          f"each run's decode tok/s x bytes per token / that run's bandwidth; pp / peak = prefill tok/s x "
          f"multiply-adds per prompt token / the peak of the kind named after the model ("
          f"{'; '.join(f'{t}T ' + ', '.join(f'{k} {peaks[t][k]:.0f}' for k in sorted(kinds)) for t in threads)}"
          f" G MAC/s)\n")
    ik_head = (" ik_llama.cpp pp tok/s | pp ratio to ik |", "---|---|") if a.ik_llama_bench else ("", "")
    if a.ik_llama_bench:
        print(f"ik_llama.cpp: {a.ik_llama_bench} {a.ik_args}, prefill only\n")
    print("| model | threads | cachet pp tok/s | llama.cpp pp tok/s | pp ratio | cachet tg tok/s | "
          "llama.cpp tg tok/s | tg ratio | tg / roofline | pp / peak (cachet, llama.cpp) |" + ik_head[0])
    print("|---|---|---|---|---|---|---|---|---|---|" + ik_head[1])
    for r in rows:
        ik_cols = f" {r[11]:.1f} | {r[12]:.2f}x |" if a.ik_llama_bench else ""
        print(f"| {r[0]} | {r[1]} | {r[2]:.1f} | {r[3]:.1f} | {r[4]:.2f}x | {r[5]:.1f} | {r[6]:.1f} | {r[7]:.2f}x | "
              f"{r[8]:.0%} | {r[9]:.0%}, {r[10]:.0%} |" + ik_cols)


if __name__ == "__main__":
    main()
