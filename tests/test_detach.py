"""benchmarks/detach.sh: a command started detached keeps running after the call and reports its own exit status."""

import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(shutil.which("setsid") is None, reason="needs setsid (util-linux)")
def test_start_then_wait_packs_the_output_and_the_exit_status(tmp_path):
    if Path("/tmp/detach/pid").exists():
        pid = Path("/tmp/detach/pid").read_text().strip()
        if pid and subprocess.run(["kill", "-0", pid], capture_output=True).returncode == 0:
            pytest.skip("another detached command is running on this machine")
    env = dict(os.environ, OUT=str(tmp_path / "o1"), WAIT="0")
    cmd = ["bash", str(ROOT / "benchmarks" / "detach.sh")]
    r = subprocess.run(cmd + ["start", "bash", "-c", "echo 7 > $DOUT/x; sleep 2; echo done; exit 3"], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "still running after 0 s" in r.stdout
    r = subprocess.run(cmd + ["start", "true"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "a command is still running" in r.stderr
    env = dict(env, OUT=str(tmp_path / "o2"), WAIT="30")
    r = subprocess.run(cmd + ["wait"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.rstrip().endswith("DONE rc=3") and "done" in r.stdout
    with tarfile.open(tmp_path / "o2" / "detach.tgz") as t:
        assert t.extractfile("out/x").read() == b"7\n" and t.extractfile("rc").read() == b"3\n"
    r = subprocess.run(cmd + ["bogus"], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "usage: bash benchmarks/detach.sh start CMD" in r.stderr
