"""Tensor parallelism over MPI (`mpirun -np N cachet ... --tp N`, src/distributed/mpi_tp.h): every rank holds a shard of
every layer; the results are compared with one process. exact mode: logits bitwise equal to --tp 1; reduce mode
(two all-reduces per layer): within 1e-4 of the largest logit on float weights in f32 arithmetic (1e-2 on the
AVX512-BF16 table, whose activations are rounded to bf16). The MPI library is Debian's
Open MPI, installed by scripts/setup.sh: its absence is a failure here, not a skip. MPICH, the second
implementation (also installed by setup), runs the same program as `cachet-mpich`: exactness on two
architectures and the default model's greedy ids."""
import functools
import json
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "bench"))
import loadgen  # noqa: E402

ENV = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
PROMPT_IDS = "1,7,42,99,3,250,17,8,64,5,300,2,11"


@functools.lru_cache(maxsize=None)
def launcher_of(binary):
    """The mpirun of the MPI the binary was built with (`cachet info --cpu --json`: "mpi")."""
    lib = json.loads(subprocess.run([binary, "info", "--cpu", "--json"], check=True, capture_output=True,
                                    text=True).stdout)["mpi"]
    if lib.startswith("MPICH"):
        assert shutil.which("mpirun.mpich"), "mpirun.mpich not found: scripts/setup.sh installs mpich"
        return ("mpirun.mpich",)
    assert lib.startswith("Open MPI"), f"{binary}: built without MPI ({lib!r})"
    run = shutil.which("mpirun.openmpi") or shutil.which("mpirun")
    assert run, "mpirun not found: scripts/setup.sh installs openmpi-bin"
    return (run, "--bind-to", "none")


def launcher(binary):
    return list(launcher_of(binary))


@pytest.fixture(scope="session")
def mpich_bin(cachet_bin):
    path = pathlib.Path(cachet_bin).with_name("cachet-mpich")
    assert path.exists(), f"{path} missing: CMake builds it when MPICH is installed (scripts/setup.sh installs it)"
    return str(path)


def mpirun(n, args, check=True, env=None):
    cmd = launcher(args[0]) + ["-np", str(n)] + args + ["--tp", str(n)]
    r = subprocess.run(cmd, env={**ENV, **(env or {})}, capture_output=True, text=True, timeout=300)
    if check:
        assert r.returncode == 0, r.stderr[-3000:]
    return r


def logits(cachet_bin, model, out, tp=1, mode="exact", extra=(), tp_bin=None, env=None):
    args = [tp_bin if tp > 1 and tp_bin else cachet_bin, "logits", "-m", str(model), "--prompt-ids", PROMPT_IDS, "-o", str(out), "-t", "1", *extra]
    if tp == 1:
        subprocess.run(args, check=True, capture_output=True, env={**os.environ, **(env or {})})
    else:
        mpirun(tp, args + ["--tp-mode", mode], env=env)
    return np.fromfile(out, dtype=np.float32)


def synth(cachet_bin, path, arch, dtype, heads=8, kv=4, ff=768, head_dim=32, extra=()):
    subprocess.run([cachet_bin, "synth", "-o", str(path), "--arch", arch, "--n-embd", "256", "--n-head", str(heads),
                    "--n-head-kv", str(kv), "--head-dim", str(head_dim), "--n-ff", str(ff), "--n-layer", "2",
                    "--n-vocab", "512", "--type", dtype, "--seed", "7", *extra], check=True, capture_output=True)
    return path


def shape_for(n):
    """Heads that split into n ranks: 2 -> 4 KV heads of 2 queries; 3 -> 3 KV heads of 4 (q_dim 768, whole
    256-blocks for the K-quants)."""
    return dict(heads=8, kv=4, head_dim=32) if n == 2 else dict(heads=12, kv=3, head_dim=64)


@pytest.mark.parametrize("arch,dtype", [("llama", "Q8_0"), ("qwen2", "F16"), ("gemma2", "Q4_K"), ("phi3", "F16")])
@pytest.mark.parametrize("n", [2, 3])
def test_exact_mode_is_bitwise_tp1(cachet_bin, tmp_path, arch, dtype, n):
    m = synth(cachet_bin, tmp_path / f"{arch}.gguf", arch, dtype, **shape_for(n))
    ref = logits(cachet_bin, m, tmp_path / "ref.bin")
    got = logits(cachet_bin, m, tmp_path / "tp.bin", tp=n)
    assert ref.shape == got.shape
    assert np.array_equal(ref, got), f"max diff {np.abs(ref - got).max()}"


@functools.lru_cache(maxsize=None)
def cpu_info(binary, isa=""):
    env = {**os.environ, "CACHET_ISA": isa} if isa else None
    return json.loads(subprocess.run([binary, "info", "--cpu", "--json"], check=True, capture_output=True, text=True,
                                     env=env).stdout)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gemma2"])
@pytest.mark.parametrize("n", [2, 3])
def test_reduce_mode_within_1e4(cachet_bin, tmp_path, arch, n):
    # In f32 arithmetic. The AVX512-BF16 table rounds activations to bf16 before F16/BF16 weights (8 significant
    # bits): a last-bit change of a partial sum may move a rounding, or be absorbed by all of them, so on such a
    # CPU this runs on the AVX-512 table and the bf16 table has its own bound below.
    env = {"CACHET_ISA": "avx512"} if cpu_info(cachet_bin)["float_weights"] == "bf16" else None
    if env:
        assert cpu_info(cachet_bin, "avx512")["float_weights"] == "f32"
    m = synth(cachet_bin, tmp_path / f"{arch}.gguf", arch, "F16", **shape_for(n))
    ref = logits(cachet_bin, m, tmp_path / "ref.bin", env=env)
    got = logits(cachet_bin, m, tmp_path / "tp.bin", tp=n, mode="reduce", env=env)
    err = np.abs(ref - got).max() / np.abs(ref).max()
    assert err < 1e-4, err
    assert not np.array_equal(ref, got)  # a real partial-sum path: the sums' order differs


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_reduce_mode_bf16_table_within_bf16_rounding(cachet_bin, tmp_path, arch):
    if cpu_info(cachet_bin)["float_weights"] != "bf16":
        pytest.skip("this CPU's table computes float weights in f32 (test_reduce_mode_within_1e4 covers it)")
    m = synth(cachet_bin, tmp_path / f"{arch}.gguf", arch, "F16", **shape_for(3))
    ref = logits(cachet_bin, m, tmp_path / "ref.bin")
    got = logits(cachet_bin, m, tmp_path / "tp.bin", tp=3, mode="reduce")
    # Measured on a Sapphire Rapids-class Xeon: 4.1e-4 (llama), 1.0e-3 (gemma2); one bf16 rounding is 2^-9 relative.
    assert np.abs(ref - got).max() / np.abs(ref).max() < 1e-2


def test_moe_layers_split_by_expert_columns(cachet_bin, tmp_path):
    m = synth(cachet_bin, tmp_path / "moe.gguf", "llama", "F32", ff=256, extra=("--experts", "4", "--experts-used", "2"))
    ref = logits(cachet_bin, m, tmp_path / "ref.bin")
    got = logits(cachet_bin, m, tmp_path / "tp.bin", tp=2)
    assert np.abs(ref - got).max() / np.abs(ref).max() < 1e-4


def test_too_many_ranks_is_a_clear_error(cachet_bin, tmp_path):
    m = synth(cachet_bin, tmp_path / "m.gguf", "llama", "F16", heads=4, kv=2, head_dim=64)
    r = mpirun(3, [cachet_bin, "logits", "-m", str(m), "--prompt-ids", "1,2", "-o", str(tmp_path / "x.bin")],
               check=False)
    assert r.returncode != 0
    assert "--tp 3 but the model has 2 KV heads" in r.stderr


def test_wrong_process_count_is_a_clear_error(cachet_bin, tmp_path):
    m = synth(cachet_bin, tmp_path / "m.gguf", "llama", "F16")
    r = subprocess.run(launcher(cachet_bin) + ["-np", "2", cachet_bin, "logits", "-m", str(m), "--prompt-ids", "1,2", "-o",
                        str(tmp_path / "x.bin"), "--tp", "3"], env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "mpirun started 2 process(es)" in r.stderr


def run_json(cachet_bin, model, tp, prompt, n=64):
    args = [cachet_bin, "run", "-m", model, "-p", prompt, "-n", str(n), "--temp", "0", "--ignore-eos", "-t", "1",
            "--format", "json"]
    if tp == 1:
        out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    else:
        out = mpirun(tp, args).stdout
    return json.loads(out)


@pytest.mark.parametrize("n", [2, 3])
def test_default_model_greedy_64_tokens(cachet_bin, default_model, n):
    prompt = "The three primary colors are"
    ref = run_json(cachet_bin, default_model, 1, prompt)
    got = run_json(cachet_bin, default_model, n, prompt)
    assert len(ref["token_ids"]) == 64
    assert got["token_ids"] == ref["token_ids"]


@pytest.mark.parametrize("arch,dtype", [("llama", "Q8_0"), ("qwen2", "F16")])
@pytest.mark.parametrize("n", [2, 3])
def test_mpich_exact_mode_is_bitwise_tp1(cachet_bin, mpich_bin, tmp_path, arch, dtype, n):
    m = synth(cachet_bin, tmp_path / f"{arch}.gguf", arch, dtype, **shape_for(n))
    ref = logits(cachet_bin, m, tmp_path / "ref.bin")
    got = logits(cachet_bin, m, tmp_path / "tp.bin", tp=n, tp_bin=mpich_bin)
    assert ref.shape == got.shape
    assert np.array_equal(ref, got), f"max diff {np.abs(ref - got).max()}"


def test_mpich_default_model_greedy_64_tokens(cachet_bin, mpich_bin, default_model):
    prompt = "The three primary colors are"
    ref = run_json(cachet_bin, default_model, 1, prompt)
    got = run_json(mpich_bin, default_model, 2, prompt)
    assert len(ref["token_ids"]) == 64
    assert got["token_ids"] == ref["token_ids"]


def serve(cachet_bin, model, tp):
    port = loadgen.free_port()
    args = [cachet_bin, "serve", "-m", model, "--port", str(port), "-t", "1", "--parallel", "8"]
    if tp > 1:
        args = launcher(cachet_bin) + ["-np", str(tp)] + args + ["--tp", str(tp)]
    proc = subprocess.Popen(args, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    loadgen.wait_ready(port, proc, "/health")
    return proc, port


def post(port, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.loads(r.read())


def test_server_batch_prefix_cache_and_forks_equal_tp1(cachet_bin, default_model):
    """Requests in one continuous batch, sharing a prefix (the radix cache's copy-on-write block copies must be
    mirrored on the other rank) and n=3 forks: the same greedy text as one process."""
    import concurrent.futures as cf
    shared = "You are a helpful assistant. Answer in one short sentence. " * 3
    bodies = [{"prompt": shared + q, "max_tokens": 24, "temperature": 0, "n": k}
              for q, k in [("What is the sun?", 1), ("Name a fruit.", 3), ("What is rain?", 1), ("Count to five.", 2)]]
    results = {}
    for tp in (1, 2):
        proc, port = serve(cachet_bin, default_model, tp)
        try:
            post(port, bodies[0])  # the shared prefix is in the cache before the batch
            with cf.ThreadPoolExecutor(len(bodies)) as ex:
                outs = list(ex.map(lambda b: post(port, b), bodies))
            results[tp] = [[c["text"] for c in o["choices"]] for o in outs]
            cached = [o["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) for o in outs]
            assert max(cached) > 0, cached
        finally:
            proc.terminate()
            _, err = proc.communicate(timeout=60)
            assert proc.returncode == 0 or tp == 1 or b"error" not in err, err[-2000:]
    assert results[2] == results[1]


@pytest.fixture
def two_hosts():
    """Two network namespaces joined by a veth (scripts/netns_hosts.sh): rank 0 on 10.77.X.1, rank 1 on .2."""
    root = pathlib.Path(__file__).resolve().parents[2]
    name, x = f"ct{os.getpid() % 10000}", 100 + os.getpid() % 100
    subprocess.run(["bash", str(root / "scripts/netns_hosts.sh"), "up", name, str(x)], check=True, capture_output=True)
    try:
        yield name, x, root / "scripts/netns_rsh.sh"
    finally:
        subprocess.run(["bash", str(root / "scripts/netns_hosts.sh"), "down", name], capture_output=True)


def test_tcp_between_two_network_namespaces(cachet_bin, default_model, tmp_path, two_hosts):
    name, x, rsh = two_hosts
    net = f"10.77.{x}.0/24"
    base = ["ip", "netns", "exec", f"{name}-a", launcher(cachet_bin)[0], "--host", f"10.77.{x}.1,10.77.{x}.2", "-np", "2",
            "--mca", "plm_rsh_agent", str(rsh), "--mca", "pml", "ob1", "--mca", "btl", "self,tcp",
            "--mca", "btl_tcp_if_include", net, "--mca", "oob_tcp_if_include", net,
            "-x", "OMPI_ALLOW_RUN_AS_ROOT", "-x", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"]
    where = subprocess.run(base + ["sh", "-c", "ip -4 -o addr show | grep -o '10.77[.0-9]*'"], env=ENV,
                           capture_output=True, text=True, timeout=120)
    assert sorted(where.stdout.split()) == [f"10.77.{x}.1", f"10.77.{x}.2"], where.stdout + where.stderr
    m = synth(cachet_bin, tmp_path / "q.gguf", "qwen2", "Q8_0")
    ref = logits(cachet_bin, m, tmp_path / "ref.bin")
    r = subprocess.run(base + [cachet_bin, "logits", "-m", str(m), "--prompt-ids", PROMPT_IDS, "-o",
                               str(tmp_path / "tp.bin"), "-t", "1", "--tp", "2"], env=ENV, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert np.array_equal(ref, np.fromfile(tmp_path / "tp.bin", dtype=np.float32))
    prompt = "The three primary colors are"
    r = subprocess.run(base + [cachet_bin, "run", "-m", default_model, "-p", prompt, "-n", "64", "--temp", "0",
                               "--ignore-eos", "-t", "1", "--format", "json", "--tp", "2"], env=ENV,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    assert json.loads(r.stdout)["token_ids"] == run_json(cachet_bin, default_model, 1, prompt)["token_ids"]


def test_dead_rank_fails_in_flight_requests_and_the_job(cachet_bin, default_model):
    """A worker killed mid-request: rank 0's in-flight requests get a 503 naming why, the job exits non-zero."""
    import signal
    import threading
    import time
    proc, port = serve(cachet_bin, default_model, 2)
    try:
        workers = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        assert len(workers) == 2, workers
        out = {}

        def ask():
            try:
                post(port, {"prompt": "Tell me a long story.", "max_tokens": 400, "ignore_eos": True})
                out["status"] = 200
            except urllib.error.HTTPError as e:
                out["status"], out["body"] = e.code, e.read().decode()

        t = threading.Thread(target=ask)
        t.start()
        time.sleep(0.5)
        rank1 = [w for w in workers if b"OMPI_COMM_WORLD_RANK=1\0" in pathlib.Path(f"/proc/{w}/environ").read_bytes()]
        assert len(rank1) == 1
        os.kill(int(rank1[0]), signal.SIGKILL)
        t.join(timeout=30)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read().decode()
    assert out.get("status") == 503, out
    assert "tensor-parallel rank has died" in out["body"]
    assert rc != 0
    assert "failing 1 in-flight request(s)" in err, err[-2000:]


def test_info_says_whose_share_it_shows(cachet_bin, default_model):
    """SmolLM2's 9 query / 3 KV heads dealt over 2 ranks: rank 0 holds 6 / 2 and says so."""
    r = mpirun(2, [cachet_bin, "info", "-m", default_model])
    assert "tensor parallel: 2 ranks" in r.stdout and "(6 query / 2 KV heads" in r.stdout, r.stdout[-500:]
