"""SGLang's FlashInfer sampling path as an implementation under test, from the wheels' Python sources.

A CUDA SGLang server samples with ``sampling_backend = "flashinfer"`` (its default where
FlashInfer imports): ``Sampler._sample_from_probs`` (sglang/srt/layers/sampler.py@v0.5.23) calls
FlashInfer's ``top_k_top_p_sampling_from_probs(filter_apply_order="joint")`` for a batch where no
request sets ``min_p > 0``, and for a batch where one does, every row goes through
``top_k_renorm_prob``, ``top_p_renorm_prob`` (``sgl_kernel``'s Python wrappers, forwarded to
``flashinfer.sampling``) and ``min_p_sampling_from_probs`` (``need_min_p_sampling``, decided by
``SamplingBatchInfo.from_schedule_batch``). SGLang cannot be installed on the project's GPU
machine and ``sgl_kernel``'s compiled extension does not load there, so :mod:`.bundle` copies
the few files needed out of the ``sglang`` 0.5.23 and ``sglang-kernel`` 0.4.10 wheels into
``.whl/sglang-src`` (SHA-256 per file, checked against each wheel's RECORD) and :mod:`.loader`
executes them with small stand-ins for the rest of SGLang.

``sglang-flashinfer`` (profile :data:`impls.profiles.SGLANG_FLASHINFER`)
    ``SamplingBatchInfo.from_schedule_batch`` and ``Sampler.forward`` on each step's batch
    (:mod:`.session`), on CUDA with the process's FlashInfer. Validation and mode resolution are
    the reference's under the profile (SGLang's ``SamplingParams`` needs msgspec); the request
    values are those ``SamplingParams.__post_init__`` leaves. The reported distribution is
    SGLang's own sampling mask (``return_sampling_mask``). Penalties, logit bias, ``min_length``,
    logprobs and finish rules are applied outside the sampler (``ModelRunner``,
    ``Req.update_finish_state``, not bundled): such rows are ``n/a`` here; the CPU adapter
    ``sglang`` covers them on SGLang's pytorch backend.

``describe()`` records the bundle's distributions, versions and every file's SHA-256.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import CliOption, Row, active
from ..profiles import SGLANG_FLASHINFER, Profile
from ..registry import Entry

__all__ = ["SglangFlashInferImpl", "IMPLEMENTATIONS", "FEATURES", "row_unsupported"]

#: The features the implementation expresses (the filters and the seed SGLang ignores).
FEATURES = frozenset({"temperature", "top_k", "top_p", "min_p", "seed"})

_OPTION = CliOption("--sglang-src", "SAMPCHECK_SGLANG_SRC", "PATH",
                    "the SGLang source bundle for --impl sglang-flashinfer (default ./.whl/sglang-src; build it "
                    "with python -m impls.sglang_gpu.bundle)", path=True)

#: Row fields SGLang applies outside ``Sampler.forward``, with their neutral values.
_NEUTRAL = {"repetition_penalty": 1.0, "presence_penalty": 0.0, "frequency_penalty": 0.0, "min_length": 0}


def row_unsupported(row: Row) -> Optional[str]:
    """Why a row asks for more than SGLang's ``Sampler.forward`` as driven here, or None.

    Penalties, ``min_new_tokens`` and logit bias are applied by ``ModelRunner._preprocess_logits``
    before the sampler, logprobs by the logprob processor, finish rules by
    ``Req.update_finish_state`` (none bundled); what ``SamplingParams`` has no field for is
    :func:`impls.sglang.translate.unsupported_reason`'s.
    """
    from ..sglang.translate import unsupported_reason
    why = unsupported_reason(row)
    if why:
        return why
    for f, neutral in _NEUTRAL.items():
        v = getattr(row, f)
        if v is not None and v != neutral:
            return f"{f}: SGLang applies it in ModelRunner._preprocess_logits, which sglang-flashinfer does not drive"
    if row.logit_bias:
        return "logit_bias: SGLang applies it in ModelRunner._preprocess_logits, not driven here"
    if row.logprobs is not None:
        return "logprobs: Sampler.forward's logprobs are not driven here (sglang covers them on the CPU)"
    if row.stop_words or active(row.no_repeat_ngram_size):
        return "stop words: Req.update_finish_state is not driven here"
    return None


class SglangFlashInferImpl:
    """``sglang-flashinfer``: SGLang 0.5.23's ``Sampler`` with the FlashInfer backend (module docstring)."""

    name = "sglang-flashinfer"
    profile: Profile = SGLANG_FLASHINFER
    features = FEATURES
    devices = frozenset({"cuda"})
    slow = False
    cli_options = (_OPTION,)
    #: SGLang's code decides the batch's branch, filters and draws (its SamplingBatchInfo and Sampler,
    #: sgl_kernel's wrappers, FlashInfer's kernels) and that a seed is not read (from_schedule_batch
    #: without deterministic inference); the reference validates and resolves modes (SamplingParams is
    #: not loadable: msgspec).
    stages = {"validation": "reference", "filters": "own", "draw": "own", "seeds": "own"}
    from_engine = ("sglang/srt/sampling/sampling_batch_info.py SamplingBatchInfo.from_schedule_batch "
                   "(need_min_p_sampling and the batch tensors); sglang/srt/layers/sampler.py Sampler.forward, "
                   "_sample_from_probs (the flashinfer backend's branches), _build_sampling_mask_output; "
                   "sgl_kernel/sampling.py top_k_renorm_probs, top_p_renorm_probs; FlashInfer's sampling kernels")
    from_harness = ("validation and mode resolution (reference, sglang-flashinfer profile); the request values as "
                    "SamplingParams.__post_init__ leaves them; the server configuration and the stand-ins of "
                    "impls/sglang_gpu/loader.py")

    def version(self) -> str:
        """``"0.5.23 (sglang-kernel 0.4.10, flashinfer 0.7.2.post1)"``.

        Raises
        ------
        impls.sglang_gpu.loader.BundleError
            No usable bundle (call :meth:`available` first).
        """
        from . import loader
        eng = loader.load(kind="cuda")
        extra = [f"{n} {v}" for n, v in eng.versions().items() if n != eng.manifest["distribution"]]
        return f"{eng.version} ({', '.join(extra + [f'flashinfer {_flashinfer_version()}'])})"

    def available(self, device: str) -> Optional[str]:
        """``None`` on CUDA with FlashInfer importable and the bundle loaded, else the reason."""
        if not str(device).startswith("cuda"):
            return ("SGLang's flashinfer sampling backend runs FlashInfer's CUDA kernels (--device cuda); the CPU "
                    "server's pytorch backend is the sglang implementation")
        if not torch.cuda.is_available():
            return "no CUDA device"
        try:
            import flashinfer.sampling  # noqa: F401
        except Exception as e:  # ImportError, or a broken install
            return f"flashinfer is not importable: {type(e).__name__}: {e}"
        from . import loader
        try:
            loader.load(kind="cuda")
        except loader.BundleError as e:
            return str(e)
        return None

    def describe(self, device: str = "cuda") -> dict:
        """Facts recorded with the run.

        Returns
        -------
        dict
            ``bundle`` (its path), ``versions`` (``sglang``, ``sglang-kernel``), ``files`` (path ->
            sha256), ``flashinfer``, ``sampling_backend``, ``from_engine``, ``from_harness``.
        """
        from . import loader
        eng = loader.load(kind="cuda")
        return {"bundle": loader.shown_path(eng.root), "versions": eng.versions(), "files": eng.files(),
                "flashinfer": _flashinfer_version(), "sampling_backend": eng.config.kernel.sampling_backend,
                "from_engine": self.from_engine, "from_harness": self.from_harness}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why ``row`` is ``n/a`` here (:func:`row_unsupported`), or ``None``."""
        return row_unsupported(row)

    def open_session(self, device: str = "cuda"):
        """A fresh :class:`~impls.sglang_gpu.session.SglangFlashInferSession` (torch's generators seeded 42)."""
        from .session import SglangFlashInferSession
        return SglangFlashInferSession(self.profile, device)


def _flashinfer_version() -> str:
    from importlib import metadata
    try:
        return metadata.version("flashinfer-python")
    except metadata.PackageNotFoundError:
        return "not installed"


IMPLEMENTATIONS = (Entry("sglang-flashinfer", SglangFlashInferImpl),)
