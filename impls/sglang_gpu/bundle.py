"""The source bundle of ``sglang-flashinfer``: the few SGLang and ``sgl_kernel`` files it loads, out of their wheels.

SGLang's sampler on a CUDA server (``sampling_backend = "flashinfer"``) is Python that calls
FlashInfer's sampling functions, partly through ``sgl_kernel``'s pure-Python
``sampling.py``. Neither SGLang (no network, no pydantic or msgspec, Python 3.12) nor
``sgl_kernel``'s compiled extension (built for torch 2.14) can be installed or loaded on the
project's GPU machine, so this module copies **only** the files of :data:`SPECS` out of the
``sglang`` 0.5.23 and ``sglang-kernel`` 0.4.10 distributions (installed ``site-packages`` or
wheel files) into a folder with a ``MANIFEST.json`` (per file: path, distribution, SHA-256),
each checked against its wheel's ``RECORD`` (:mod:`impls._bundle`). The loader
(:mod:`.loader`) verifies the manifest before executing anything::

    python -m impls.sglang_gpu.bundle --out .whl/sglang-src \\
        --from sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl \\
        --from sglang_kernel-0.4.10-cp310-abi3-manylinux2014_x86_64.whl   # or a site-packages with both

(``pip download --no-deps sglang==0.5.23 sglang-kernel==0.4.10 -d /tmp/w`` fetches the two
wheels; nothing is installed.) Nothing of SGLang is vendored in the project: the bundle is a
build output, like ``.whl/``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from .. import _bundle
from .._bundle import MANIFEST, SCHEMA, BundleError

__all__ = ["SGLANG", "SGL_KERNEL", "SPECS", "FILES", "MANIFEST", "SCHEMA", "BundleError", "make_bundle", "verify",
           "read_manifest", "main"]

_TOOL = "python -m impls.sglang_gpu.bundle"

#: SGLang's files, relative to the ``sglang/`` package: executed whole, in load order (each
#: one's imports of other sglang modules are an earlier entry or a stand-in of :mod:`.loader`),
#: or read.
SGLANG = _bundle.Spec(
    package="sglang",
    loaded={
        "srt/environ.py": "envs (SGLANG_OPT_USE_GUMBEL_SAMPLE, SGLANG_TRACE_SAMPLER_E2E and the NaN switches, read "
                          "from the process environment; stdlib only)",
        "srt/utils/async_probe.py": "maybe_detect_nan, sanitize_nan_logits (Sampler.forward's NaN handling)",
        "srt/arg_groups/choices.py": "BUILT_IN_SAMPLING_BACKENDS (imported by sampler.py)",
        "kernels/ops/sampling/__init__.py": "softmax: the sampler's softmax (torch.softmax unless the Cake kernel "
                                            "of SM 10.3 applies)",
        "srt/sampling/penaltylib/orchestrator.py": "BatchedPenalizerOrchestrator (built by from_schedule_batch)",
        "srt/sampling/penaltylib/frequency_penalty.py": "BatchedFrequencyPenalizer (built, not required)",
        "srt/sampling/penaltylib/min_new_tokens.py": "BatchedMinNewTokensPenalizer (built, not required)",
        "srt/sampling/penaltylib/presence_penalty.py": "BatchedPresencePenalizer (built, not required)",
        "srt/sampling/penaltylib/repetition_penalty.py": "BatchedRepetitionPenalizer, apply_scaling_penalties",
        "srt/sampling/penaltylib/__init__.py": "the penaltylib package",
        "srt/sampling/sampling_batch_info.py": "SamplingBatchInfo.from_schedule_batch: the batch tensors and "
                                               "is_all_greedy, need_top_k/top_p/min_p_sampling (the min-p switch)",
        "srt/layers/sampler.py": "Sampler.forward and _sample_from_probs: the FlashInfer backend's branches "
                                 "(top_k_renorm_prob -> top_p_renorm_prob -> min_p_sampling_from_probs when "
                                 "need_min_p_sampling, else top_k_top_p_sampling_from_probs joint), the "
                                 "sampling mask, argmax for all-greedy batches",
    },
    read={
        "srt/sampling/sampling_params.py": "TOP_K_ALL and _SAMPLING_EPS (constants; the file needs msgspec)",
        "srt/layers/logits_processor.py": "the class definitions SamplingMaskStatus, SamplingMaskOutput and "
                                          "LogitsProcessorOutput (executed alone; the file imports the model "
                                          "machinery)",
    },
    what="SGLang", tool=_TOOL)

#: ``sgl_kernel``'s files (``sglang-kernel`` 0.4.10), relative to ``sgl_kernel/``.
SGL_KERNEL = _bundle.Spec(
    package="sgl_kernel",
    loaded={
        "utils.py": "_to_tensor_scalar_tuple (imported by sampling.py)",
        "sampling.py": "top_k_renorm_prob, top_p_renorm_prob: forwarded to flashinfer.sampling when it imports "
                       "(what sampler.py calls on CUDA)",
    },
    what="sglang-kernel", tool=_TOOL)

#: The bundle's packages, SGLang's first (it names the bundle).
SPECS = (SGLANG, SGL_KERNEL)
#: Every file of a bundle, relative to the bundle's root.
FILES = tuple(f"{s.package}/{rel}" for s in SPECS for rel in s.files)
_WHAT = "the sglang wheel> --from <the sglang-kernel wheel"


def make_bundle(out, sources: Sequence) -> dict:
    """Copy :data:`FILES` from ``sources`` into ``out`` and write its :data:`MANIFEST`.

    Parameters
    ----------
    out : path-like
        The bundle's folder (created; its ``sglang/`` and ``sgl_kernel/`` files and manifest are
        replaced).
    sources : sequence of path-like
        ``site-packages`` folders or wheel files; each package is taken from the first one that
        holds it (one site-packages with both installs serves for both).

    Returns
    -------
    dict
        The manifest written (:func:`impls._bundle.make_bundle`): ``distributions`` lists
        ``sglang`` and ``sglang-kernel`` with their versions.

    Raises
    ------
    BundleError
        No source holds a package, a file is missing, or a file's SHA-256 differs from its
        distribution's RECORD.
    """
    if not sources:
        raise BundleError("nothing to copy from: pass --from with the sglang wheel (or a site-packages holding "
                          "sglang/) and --from with the sglang-kernel wheel (or one holding sgl_kernel/)")
    return _bundle.make_bundle(out, SPECS, sources)


def read_manifest(root) -> dict:
    """The manifest of the bundle at ``root``.

    Raises
    ------
    BundleError
        No such folder, no manifest, or a manifest that does not parse or lacks a field.
    """
    return _bundle.read_manifest(root, _TOOL, _WHAT)


def verify(root) -> dict:
    """Check the bundle at ``root`` against its manifest (every file of :data:`FILES`); return the manifest.

    Raises
    ------
    BundleError
        Naming every file that is unlisted, missing or modified (with both hashes).
    """
    return _bundle.verify(root, SPECS, _WHAT)


def versions(m: dict) -> dict:
    """``{distribution name: version}`` of a manifest (``{"sglang": "0.5.23", "sglang-kernel": "0.4.10"}``)."""
    return {d["name"]: d["version"] for d in m.get("distributions") or [{"name": m["distribution"],
                                                                          "version": m["version"]}]}


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m impls.sglang_gpu.bundle --out DIR --from PATH [--from PATH]``: build a bundle; print its summary."""
    ap = argparse.ArgumentParser(prog=_TOOL, description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the bundle folder (e.g. .whl/sglang-src)")
    ap.add_argument("--from", dest="sources", action="append", default=[],
                    help="the sglang wheel, the sglang-kernel wheel, or a site-packages holding sglang/ and/or "
                         "sgl_kernel/ with their .dist-info (repeat)")
    args = ap.parse_args(argv)
    try:
        m = make_bundle(args.out, args.sources)
    except BundleError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(_bundle.summary(args.out, m))
    return 0


if __name__ == "__main__":
    sys.exit(main())
