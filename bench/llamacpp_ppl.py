#!/usr/bin/env python3
"""llama.cpp's perplexity of a GGUF on a text, through llama-cpp-python, by the method of llama.cpp's
`llama-perplexity` tool (which the Python package does not ship): tokenize the whole text (BOS as the model
says), cut it into chunks of n_ctx tokens, put BOS first in each chunk when the model adds one, evaluate each
chunk from an empty cache with logits for every position, and score the second half. `cachet perplexity`
implements the same; this is its oracle. Also: --quantize TYPE writes llama.cpp's own quantization of an
F16/F32 file (llama_model_quantize), so both quantizers can be compared on one engine.
Prints one JSON line."""
import argparse
import ctypes
import json
import math
import time

import numpy as np

FTYPES = {"Q4_0": 2, "Q4_1": 3, "Q8_0": 7, "Q5_0": 8, "Q5_1": 9, "Q2_K": 10, "Q3_K_S": 11, "Q3_K_M": 12,
          "Q3_K_L": 13, "Q4_K_S": 14, "Q4_K_M": 15, "Q5_K_S": 16, "Q5_K_M": 17, "Q6_K": 18, "F16": 1}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("-f", "--file")
    ap.add_argument("-c", "--ctx", type=int, default=512)
    ap.add_argument("--chunks", type=int, default=0)
    ap.add_argument("-t", "--threads", type=int, default=2)
    ap.add_argument("--quantize", metavar="TYPE", choices=sorted(FTYPES))
    ap.add_argument("-o", "--output", help="output of --quantize")
    a = ap.parse_args()
    import llama_cpp

    if a.quantize:
        params = llama_cpp.llama_model_quantize_default_params()
        params.ftype = FTYPES[a.quantize]
        params.nthread = a.threads
        rc = llama_cpp.llama_model_quantize(a.model.encode(), a.output.encode(), ctypes.byref(params))
        print(json.dumps({"quantized": a.output, "type": a.quantize, "rc": rc}))
        return

    llm = llama_cpp.Llama(a.model, n_ctx=a.ctx, n_batch=a.ctx, n_ubatch=a.ctx, n_threads=a.threads,
                          n_threads_batch=a.threads, logits_all=True, verbose=False)
    text = open(a.file, encoding="utf-8").read()
    add_bos = llama_cpp.llama_vocab_get_add_bos(llama_cpp.llama_model_get_vocab(llm.model))
    tokens = llm.tokenize(text.encode(), add_bos=bool(add_bos), special=False)
    n_chunks = len(tokens) // a.ctx
    if a.chunks:
        n_chunks = min(n_chunks, a.chunks)
    first = a.ctx // 2
    nll, scored = 0.0, 0
    t0 = time.time()
    for c in range(n_chunks):
        ids = tokens[c * a.ctx:(c + 1) * a.ctx]
        if add_bos:
            ids[0] = llm.token_bos()
        llm.reset()
        llm.eval(ids)
        logits = np.asarray(llm.scores[:a.ctx], dtype=np.float64)
        for i in range(first, a.ctx - 1):
            row = logits[i]
            mx = row.max()
            nll += math.log(np.exp(row - mx).sum()) + mx - row[ids[i + 1]]
            scored += 1
    print(json.dumps({"ppl": math.exp(nll / scored), "nll": nll / scored, "chunks": n_chunks, "ctx": a.ctx,
                      "scored_tokens": scored, "text_tokens": len(tokens), "seconds": time.time() - t0}))


if __name__ == "__main__":
    main()
