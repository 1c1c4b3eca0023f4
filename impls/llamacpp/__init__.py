"""Adapter for llama.cpp's sampler chain, through llama-cpp-python's C bindings (profile ``llamacpp``).

It drives llama.cpp's **own** samplers (``src/llama-sampler.cpp`` of the llama.cpp that
llama-cpp-python 0.3.36 bundles) without a model: each row becomes a
``llama_token_data_array`` and a chain of ``llama_sampler_init_*`` samplers in the order of
``common_params_sampling::samplers`` (:data:`CHAIN_ORDER`), ending with ``dist`` seeded with
the request's seed (:mod:`.session`). What llama.cpp's sampler API lacks (bans, stop rules,
finish reasons, logprobs, beam search, drafts) is ``n/a``; so are DRY's sequence breakers
(strings tokenised through a model's vocabulary; DRY itself runs, without breakers) and
mirostat (not wired yet).

``import impls.llamacpp`` works without llama-cpp-python; ``available`` says why it cannot run.
Install: ``CMAKE_ARGS="-DGGML_NATIVE=OFF" pip install llama-cpp-python==0.3.36`` (an sdist; about 7
minutes on 2 cores), or ``tox -e llamacpp``.
"""

from __future__ import annotations

import operator
from typing import Optional

import torch

from ..base import Row
from ..reference.philox import seed_bits
from ..profiles import LLAMACPP, Profile
from ..registry import Entry

__all__ = ["LlamaCppImpl", "CHAIN_ORDER", "FEATURES", "IMPLEMENTATIONS"]

#: The chain, as ``common_sampler_init`` builds it (``common/sampling.cpp``): the logit bias,
#: then ``common_params_sampling::samplers``' default order (``common/common.h``), then
#: ``dist`` (added by the session). ``temperature`` is ``llama_sampler_init_temp_ext``.
CHAIN_ORDER = ("logit_bias", "penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc",
               "temperature")

#: What the adapter expresses through the chain.
FEATURES = frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                      "frequency_penalty", "penalty_last_n", "logit_bias", "seed", "min_keep", "typical_p",
                      "top_n_sigma", "xtc", "dynatemp", "dry", "processed_logits"})


def _unsupported(row: Row) -> Optional[str]:
    """What a row asks that the chain cannot take, or whose outcome the reference does not model."""
    if row.logits.dim() == 1 and not bool(row.logits.isfinite().all()) and bool(
            (row.logits.isnan() | row.logits.isposinf()).any()):
        return ("NaN or +inf logits: llama.cpp's samplers take them as numbers (expf(NaN) in dist's sum); "
                "the reference does not model what they then pick")
    if row.seed is not None:
        try:
            seed_bits(operator.index(row.seed))
        except (TypeError, ValueError):
            return ("a seed that is not an integer in [-2**63, 2**64): llama.cpp's uint32_t seed keeps any integer's "
                    "low 32 bits; the reference's rule rejects it (invalid_seed)")
    if row.temperature is not None and (row.temperature != row.temperature or row.temperature < 0):
        return "a negative or NaN temperature: llama.cpp's temp sampler takes it as greedy, the reference rejects it"
    for name, lo, hi in (("top_p", 0.0, 1.0), ("min_p", 0.0, 1.0)):
        v = getattr(row, name)
        if v is not None and not lo <= v <= hi:
            return (f"{name}={v!r}: llama.cpp takes any value (no check), the reference's rule for one outside "
                    f"[{lo:g}, {hi:g}] is an error")
    for name in ("repetition_penalty", "presence_penalty", "frequency_penalty"):
        v = getattr(row, name)
        if v is not None and (v != v or (name == "repetition_penalty" and v <= 0)):
            return f"{name}={v!r}: llama.cpp applies it unchecked; the reference does not model the arithmetic"
    if row.dry_sequence_breakers:
        return ("DRY sequence breakers: llama_sampler_init_dry takes them as strings and tokenises them through "
                "a model's vocabulary (llama_vocab), which this model-free adapter has not")
    e = row.dynatemp_exponent
    if e is not None and e != e and row.dynatemp_range is not None and row.dynatemp_range > 0:
        return ("a NaN dynatemp_exponent: llama.cpp's dynamic temperature becomes NaN and every logit with it; "
                "the reference does not model what dist then picks")
    for name in ("top_k", "penalty_last_n", "dry_allowed_length", "dry_penalty_last_n"):
        v = getattr(row, name)
        if v is not None and not -(1 << 31) <= v < (1 << 31):
            return f"{name}={v}: llama.cpp's int32_t parameter would wrap it; the reference takes the value as given"
    dyn = row.dynatemp_range is not None and row.dynatemp_range > 0
    if dyn and row.temperature is not None and row.temperature <= 0:
        return ("temperature <= 0 with a dynamic temperature: llama.cpp samples at a temperature in [0, range], the "
                "reference resolves the row as greedy")
    # -inf candidates stay in llama.cpp's array (given, biased to -inf, or set by top-n-sigma) and are counted
    # where the reference counts only the alive tokens: typical-p's entropy (0 * log 0 = NaN: an arbitrary
    # order), dynamic temperature's log(size), XTC's min_keep test
    neg = (bool(torch.isneginf(row.logits).any()) or any(b == float("-inf") for _, b in (row.logit_bias or ()))
           or (row.top_n_sigma is not None and row.top_n_sigma > 0))
    typical = row.typical_p is not None and not row.typical_p >= 1
    xtc_keep = row.xtc_probability is not None and (row.min_keep or 0) > 0
    if neg and (typical or dyn or xtc_keep):
        return ("-inf candidates with typical-p, dynamic temperature or XTC's min_keep: llama.cpp counts them in "
                "its array (typical-p's entropy becomes NaN, log(size) and min_keep count them); the reference "
                "counts the alive tokens")
    if row.logit_bias and any(not 0 <= int(t) < row.vocab or b != b for t, b in row.logit_bias):
        return "a logit bias outside the vocabulary or NaN: llama.cpp skips or adds it unchecked"
    return None


class LlamaCppImpl:
    """llama.cpp's sampler chain as an implementation under test.

    Parameters
    ----------
    profile : Profile
        Default :data:`impls.profiles.LLAMACPP`.

    Attributes
    ----------
    name : str
        ``"llamacpp"``.
    features : frozenset of str
        :data:`FEATURES`.
    """

    name = "llamacpp"
    features = FEATURES
    devices = frozenset({"cpu"})
    slow = False
    #: llama.cpp's samplers bias, penalise, filter and draw; each slot's ``dist`` sampler keeps its
    #: generator across steps. ``validation``: its samplers accept every value and decide the mode
    #: themselves (temperature <= 0 is greedy in ``llama_sampler_temp_impl``); the profile models
    #: that (``validation_skips``), and values whose outcome it does not model are ``n/a``.
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "filters": "own", "draw": "own",
              "seeds": "own"}

    def __init__(self, profile: Profile = LLAMACPP, order=CHAIN_ORDER):
        self.profile = profile
        self.order = tuple(order)

    def version(self) -> str:
        """The installed llama-cpp-python's version (``llama_cpp.__version__``)."""
        import llama_cpp
        return llama_cpp.__version__

    def available(self, device: str) -> Optional[str]:
        """``None`` when llama-cpp-python's library loads and ``device`` is the CPU, else the reason."""
        if not str(device).startswith("cpu"):
            return "llama.cpp's samplers run on the CPU"
        try:
            import llama_cpp  # noqa: F401
            llama_cpp.llama_sampler_init_dist  # noqa: B018
        except BaseException as e:  # ImportError, or a library that does not load
            if isinstance(e, KeyboardInterrupt):
                raise
            return f"llama_cpp is not importable: {type(e).__name__}: {e}"
        return None

    def describe(self, device: str = "cpu") -> dict:
        """Facts recorded with the run: the chain order and the library's system info."""
        import llama_cpp
        info = llama_cpp.llama_print_system_info()
        return {"chain": " -> ".join(self.order + ("dist",)),
                "system_info": info.decode() if isinstance(info, bytes) else str(info),
                "llamacpp_path": "llama_sampler_chain_* on a llama_token_data_array, no model (session.py)"}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why the chain cannot express ``row`` (the harness reports ``n/a``), or ``None``."""
        return _unsupported(row)

    def open_session(self, device: str = "cpu"):
        """A fresh :class:`~impls.llamacpp.session.LlamaSession` (no slot generators yet)."""
        from .session import LlamaSession
        return LlamaSession(self.order)


IMPLEMENTATIONS = (Entry("llamacpp", LlamaCppImpl),)
