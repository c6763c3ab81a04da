"""What an image costs the other users: one client streams a text reply from `cachet serve` while a second sends a
one-image question; the text stream's largest gap between tokens (and its tokens while the image is encoded),
with the encoder spread over steps (--encoder-layers-per-step 1, the default) and with the whole image in one
step (0). The default model (SmolLM2-135M, whose tokens are text) with a synthetic Gemma 3-shaped projector
(SigLIP 27 x 1152, 896 px, F16) written 576 wide for it, and bench/vision_encoder.py's 896 x 896 photo (written
there first). Medians of --reps runs, the two settings alternating.

  python3 bench/vision_interleave.py [--reps 3] [--threads 2]
"""
import argparse
import base64
import json
import os
import socket
import statistics
import subprocess
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "cachet", "bench-models")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(port, body, stream=False):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    return urllib.request.urlopen(req, timeout=600)


def one_run(a, per_step):
    port = free_port()
    srv = subprocess.Popen([a.cachet, "serve", "-m", a.model, "--mmproj", a.mmproj, "-t", str(a.threads), "--port",
                            str(port), "--encoder-layers-per-step", str(per_step)],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(600):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                break
            except Exception:
                time.sleep(0.5)
        times = []
        image_sent = threading.Event()
        image_done = {}

        def text_stream():
            r = post(port, {"messages": [{"role": "user", "content": "Tell a long story."}], "max_tokens": a.tokens,
                            "stream": True, "temperature": 0, "ignore_eos": True})
            for line in r:
                if line.startswith(b"data: ") and b"[DONE]" not in line:
                    times.append(time.monotonic())
                    if len(times) == a.warm:
                        image_sent.set()

        def image_question():
            image_sent.wait()
            with open(a.image, "rb") as f:
                url = "data:image/jpeg;base64," + base64.b64encode(f.read()).decode()
            t0 = time.monotonic()
            image_done["start"] = t0
            post(port, {"messages": [{"role": "user", "content": [
                {"type": "image_url", "image_url": {"url": url}}, {"type": "text", "text": "What is it?"}]}],
                "max_tokens": 1}).read()
            image_done["end"] = time.monotonic()

        th = [threading.Thread(target=text_stream), threading.Thread(target=image_question)]
        for t in th:
            t.start()
        for t in th:
            t.join()
        s, e = image_done["start"], image_done["end"]
        during = [t for t in times if s <= t <= e]
        gaps = [b - a_ for a_, b in zip(times, times[1:]) if b > s and a_ < e]
        return {"max_gap_s": round(max(gaps), 2) if gaps else None, "tokens_during_image": len(during),
                "image_ttft_s": round(e - s, 2)}
    finally:
        srv.terminate()
        srv.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cachet", default=os.path.join(ROOT, "build", "cachet"))
    ap.add_argument("--mmproj", default=os.path.join(CACHE, "mmproj-gemma3-shape-576-f16.gguf"))
    ap.add_argument("--model", default=os.path.join(os.path.expanduser("~"), ".cache", "cachet", "models",
                                                    "SmolLM2-135M-Instruct.Q4_1.gguf"))
    ap.add_argument("--image", default=os.path.join(CACHE, "bench-photo-896x896.jpg"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=400, help="the text reply's length")
    ap.add_argument("--warm", type=int, default=5, help="text tokens before the image is sent")
    a = ap.parse_args()
    if not os.path.exists(a.mmproj):
        subprocess.run([a.cachet, "synth", "-o", a.mmproj, "--arch", "mmproj-gemma3", "--type", "F16", "--n-embd",
                        "1152", "--n-ff", "4304", "--n-layer", "27", "--n-head", "16", "--image-size", "896",
                        "--patch-size", "14", "--merge", "4", "--proj-dim", "576"], check=True,
                       stdout=subprocess.DEVNULL)
    runs = {1: [], 0: []}
    for _ in range(a.reps):
        for per_step in (1, 0):
            runs[per_step].append(one_run(a, per_step))
    out = {"threads": a.threads, "reps": a.reps}
    for per_step, rs in runs.items():
        key = "split" if per_step else "whole"
        for k in ("max_gap_s", "tokens_during_image", "image_ttft_s"):
            vals = [r[k] for r in rs if r[k] is not None]
            out[f"{key}_{k}"] = statistics.median(vals) if vals else None
        out[f"{key}_runs"] = rs
    print(json.dumps(out))


if __name__ == "__main__":
    main()
