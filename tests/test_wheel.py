"""An installed sampcheck carries its corpus (issue #19 item 8): build the wheel, install it into a fresh
virtualenv with torch 2.13.0, and run a few cases from an empty temporary folder.

Slow and networked (pip builds the wheel in an isolated environment and installs torch and the
dependencies from the index): it runs only with ``SAMPCHECK_WHEEL_TEST=1``, which ``tox -e wheel``
sets (CI runs that env). It imports nothing of the harness, so it runs without the project
installed: ``pytest --noconftest tests/test_wheel.py``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
#: What the wheel is built from (setup.py copies cases/ and golden/ into the package).
SOURCES = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "harness", "impls", "cases", "golden")
CASES = ["greedy/argmax-ties-lowest-id", "filters/min-p-before-top-p", "seeds/batch-order-independent"]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("SAMPCHECK_WHEEL_TEST") != "1",
                       reason="builds a wheel and a fresh virtualenv from the index (about a minute): "
                              "SAMPCHECK_WHEEL_TEST=1, as 'tox -e wheel' sets"),
]


def _run(argv, cwd, env, timeout=900):
    t0 = time.monotonic()
    cp = subprocess.run([str(a) for a in argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    print(f"[{time.monotonic() - t0:5.1f} s] {' '.join(str(a) for a in argv[:4])} ... -> {cp.returncode}")
    return cp


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """``(bin folder, clean environment)`` of a fresh virtualenv holding torch 2.13.0 and the built wheel."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:  # a copy: building writes build/ and *.egg-info beside the sources
        (shutil.copytree if (ROOT / name).is_dir() else shutil.copy)(ROOT / name, src / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAMPCHECK_", "PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if ".tox" not in p)
    cp = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", tmp / "dist", src], tmp, env)
    assert cp.returncode == 0, cp.stderr
    wheel, = (tmp / "dist").glob("sampcheck-*.whl")
    cp = _run([sys.executable, "-m", "venv", tmp / "venv"], tmp, env)
    assert cp.returncode == 0, cp.stderr
    bin_ = tmp / "venv" / "bin"
    cp = _run([bin_ / "python", "-m", "pip", "install", "-q", "torch==2.13.0", wheel], tmp, env)
    assert cp.returncode == 0, cp.stderr
    return bin_, env


def test_the_installed_wheel_runs_the_corpus_from_an_empty_folder(venv, tmp_path):
    bin_, env = venv
    here = tmp_path / "empty"
    here.mkdir()
    argv = [bin_ / "sampcheck", "run", *[a for c in CASES for a in ("--cases", c)], "--impl", "reference",
            "--impl", "reference-hf", "--no-progress", "--junit-xml", "junit.xml"]
    cp = _run(argv, here, env)
    assert cp.returncode == 0, cp.stdout + cp.stderr
    doc = json.loads((here / "reports" / "latest-subset" / "results.json").read_text())
    statuses = {(r["case"], r["impl"]): r["status"] for r in doc["results"]}
    assert statuses == {(c, i): "pass" for c in CASES for i in ("reference", "reference-hf")} | {
        ("filters/min-p-before-top-p", "reference-hf"): "known-diff"}
    assert doc["run"]["cases_declared"] == len(list((ROOT / "cases").rglob("*.toml"))) - 1  # all but findings.toml
    assert ET.parse(here / "junit.xml").getroot().attrib["tests"] == "6"
    # the package's own files, not a checkout's
    where = _run([bin_ / "python", "-c", "import harness.corpus.load as l; print(l.CASES_DIR)"], here, env)
    assert where.stdout.strip().endswith("site-packages/harness/_data/cases"), where.stdout
    # the golden files travel too
    cp = _run([bin_ / "sampcheck", "golden", "check", *[a for c in CASES for a in ("--cases", c)]], here, env)
    assert cp.returncode == 0 and f"golden check: {len(CASES)} case(s), 0 problem(s)" in cp.stdout, cp.stderr
    # the installed copy is not written to
    cp = _run([bin_ / "sampcheck", "case", "new", "greedy", "my-case"], here, env)
    assert cp.returncode == 2 and "is the copy installed with the sampcheck package" in cp.stderr, cp.stderr


def test_sampcheck_cases_still_overrides_the_packaged_corpus(venv, tmp_path):
    bin_, env = venv
    corpus = tmp_path / "mine"
    (corpus / "greedy").mkdir(parents=True)
    shutil.copy(ROOT / "cases" / "greedy" / "argmax-ties-lowest-id.toml", corpus / "greedy")
    cp = _run([bin_ / "sampcheck", "run", "--no-progress", "--out", "r"], tmp_path, {**env, "SAMPCHECK_CASES": str(corpus)})
    assert cp.returncode == 0, cp.stdout + cp.stderr
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    assert [(r["case"], r["status"]) for r in doc["results"]] == [("greedy/argmax-ties-lowest-id", "pass")]
    assert doc["run"]["cases_declared"] == 1
