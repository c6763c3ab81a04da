import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "oracle"))


@pytest.fixture(scope="session")
def cachet_bin() -> str:
    b = os.environ.get("CACHET_BIN", str(ROOT / "build" / "cachet"))
    assert os.path.exists(b), f"cachet binary not found at {b}: build first"
    return b


@pytest.fixture(scope="session")
def shared_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CACHET_SHARED_DIR", str(ROOT.parent / "shared")))


@pytest.fixture(scope="session")
def default_model() -> str:
    """The default model; scripts/setup.sh fetches it, so its absence is a failure, not a skip."""
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "fetch_model.py")], check=True,
                         capture_output=True, text=True)
    path = out.stdout.strip().splitlines()[-1]
    assert os.path.exists(path), path
    return path


@pytest.fixture(scope="session")
def llamacpp_models() -> pathlib.Path:
    """llama.cpp's models/ directory (vocab test files, templates) inside the llama-cpp-python sdist that
    scripts/setup_oracles.sh unpacks; its absence is a failure."""
    src = pathlib.Path(os.environ.get("CACHET_LLAMACPP_SRC",
                                      pathlib.Path.home() / ".cache" / "cachet" / "llama.cpp" / "src-0.3.36"))
    d = src / "vendor" / "llama.cpp" / "models"
    assert d.is_dir(), f"{d} is missing: bash scripts/setup_oracles.sh"
    return d
