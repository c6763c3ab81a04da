"""The README's first command, after its setup part (which CI runs itself), prints a real reply."""
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_first_command_prints_a_real_reply(cachet_bin, default_model):
    readme = (ROOT / "README.md").read_text()
    block = re.search(r"```bash\n(.*?)\n```", readme, re.S).group(1)
    first = block.splitlines()[0]
    prefix = "bash scripts/setup.sh && "
    assert first.startswith(prefix), first
    r = subprocess.run(["bash", "-c", first[len(prefix):]], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "Paris" in r.stdout, r.stdout
