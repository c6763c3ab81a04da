#!/usr/bin/env python3
"""llama.cpp's prefill/decode tokens/s for a GGUF file, through llama-cpp-python, measured the way
cachet_bench measures ours: a random prompt of n_prompt ids prefilled in one batch, then n_gen tokens
decoded one at a time. Prints one JSON line. Run with the same file and thread count as cachet_bench."""
import argparse
import json
import random
import statistics
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("-p", "--n-prompt", type=int, default=128)
    ap.add_argument("-n", "--n-gen", type=int, default=256)
    ap.add_argument("-r", "--reps", type=int, default=5)
    ap.add_argument("--flash-attn", action="store_true")
    a = ap.parse_args()

    import llama_cpp
    llm = llama_cpp.Llama(a.model, n_ctx=a.n_prompt + a.n_gen + 16, n_batch=max(512, a.n_prompt),
                          n_ubatch=max(512, a.n_prompt), n_threads=a.threads, n_threads_batch=a.threads,
                          flash_attn=a.flash_attn, verbose=False, logits_all=False)
    n_vocab = llm.n_vocab()
    rng = random.Random(1)
    prompt = [rng.randrange(3, n_vocab) for _ in range(a.n_prompt)]
    ctx = llm.ctx
    batch = llama_cpp.llama_batch_init(max(512, a.n_prompt), 0, 1)

    def decode(tokens, pos0):
        batch.n_tokens = len(tokens)
        for i, t in enumerate(tokens):
            batch.token[i] = t
            batch.pos[i] = pos0 + i
            batch.n_seq_id[i] = 1
            batch.seq_id[i][0] = 0
            batch.logits[i] = i == len(tokens) - 1
        rc = llama_cpp.llama_decode(ctx, batch)
        assert rc == 0, rc

    def greedy():
        logits = llama_cpp.llama_get_logits_ith(ctx, -1)
        best, bv = 0, logits[0]
        for i in range(1, n_vocab):
            if logits[i] > bv:
                best, bv = i, logits[i]
        return best

    mem = llama_cpp.llama_get_memory(ctx)
    pp, tg = [], []
    for r in range(a.reps + 1):  # first run warms up
        llama_cpp.llama_memory_clear(mem, True)
        t0 = time.perf_counter()
        decode(prompt, 0)
        t1 = time.perf_counter()
        tok = prompt[-1]
        t_dec = 0.0
        for i in range(a.n_gen):
            s = time.perf_counter()
            decode([tok], a.n_prompt + i)
            t_dec += time.perf_counter() - s
            tok = 5 + (i * 7919) % (n_vocab - 10)  # the token fed does not change decode cost
        if r:
            pp.append(a.n_prompt / (t1 - t0))
            tg.append(a.n_gen / t_dec)
    print(json.dumps({"what": "llama.cpp", "model": a.model, "threads": a.threads, "flash_attn": a.flash_attn,
                      "n_prompt": a.n_prompt, "n_gen": a.n_gen, "pp_tok_s": statistics.median(pp),
                      "tg_tok_s": statistics.median(tg), "pp_runs": pp, "tg_runs": tg,
                      "system_info": llama_cpp.llama_print_system_info().decode()}))


if __name__ == "__main__":
    main()
