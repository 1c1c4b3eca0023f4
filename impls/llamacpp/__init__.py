"""Adapter for llama.cpp's sampler chain, through llama-cpp-python's C bindings (profile ``llamacpp``).

It drives llama.cpp's **own** samplers (``src/llama-sampler.cpp`` of the llama.cpp that
llama-cpp-python 0.3.36 bundles) without a model: each row becomes a
``llama_token_data_array`` and a chain of ``llama_sampler_init_*`` samplers in the order of
``common_params_sampling::samplers`` (:data:`CHAIN_ORDER`), ending with ``dist`` seeded with
the request's seed (:mod:`.session`). What llama.cpp's sampler API lacks (bans, stop rules,
finish reasons, logprobs, beam search, drafts) is ``n/a``; so are DRY's sequence breakers
(strings tokenised through a model's vocabulary; DRY itself runs, without breakers). Mirostat
(``mirostat`` 1 or 2) takes common's chain for it: the logit bias, ``llama_sampler_init_temp``,
then the slot's mirostat sampler (:mod:`.session`).

**Scenarios** (:meth:`LlamaCppImpl.run_scenario`): the reference's scenario driver
(:func:`impls.reference.scenario.run_scenario`: scripted models, admission, scheduling, histories,
slot release) under the ``llamacpp`` profile, with every sampling step decided by llama.cpp's
chain (a :class:`~.session.LlamaSession`, whose per-slot ``dist``, XTC and mirostat samplers live
as long as the request holding the slot: a new request in a slot gets new ones). llama.cpp's
sampler API has no finish rules, so the finish reason of each sampled token is the reference's
(:func:`impls.reference.finish.finish_reason` under the profile): :attr:`LlamaCppImpl.scenario_stages`
says so, with ``decode`` and the admission's ``validation``. Beam search, drafts and rows the chain
cannot express are refused (``ScenarioUnsupported``, ``n/a``).

A scenario with stop strings, custom logits processors or ``min_length`` (no stage of the C chain
has them) runs instead through llama-cpp-python's own loop, ``Llama.create_completion`` on a tiny
GGUF model whose vocabulary is the case's toy tokenizer, a scripted-model logits processor in
front of the case's processors (:mod:`.completion`, :mod:`.tiny_gguf`): llama-cpp-python then
samples, matches the stop strings and decides the finish reasons
(:attr:`LlamaCppImpl.completion_stages`, reported as the result's ``stages_used``). Each result
names the path that ran (``path`` in its details).

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

__all__ = ["LlamaCppImpl", "LlamaScenarioSession", "CHAIN_ORDER", "CHAIN_PATH", "FEATURES", "SCENARIO_FEATURES",
           "IMPLEMENTATIONS", "scenario_unsupported"]

#: The chain, as ``common_sampler_init`` builds it (``common/sampling.cpp``): the logit bias,
#: then ``common_params_sampling::samplers``' default order (``common/common.h``), then
#: ``dist`` (added by the session). ``temperature`` is ``llama_sampler_init_temp_ext``.
CHAIN_ORDER = ("logit_bias", "penalties", "dry", "top_n_sigma", "top_k", "typical_p", "top_p", "min_p", "xtc",
               "temperature")

#: What the adapter expresses through the chain.
FEATURES = frozenset({"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                      "frequency_penalty", "penalty_last_n", "logit_bias", "seed", "min_keep", "typical_p",
                      "top_n_sigma", "xtc", "dynatemp", "dry", "processed_logits", "mirostat"})

#: What :meth:`LlamaCppImpl.run_scenario` expresses: the chain's features, plus the finish rules the
#: reference's driver applies to llama.cpp's tokens (``finish``: ``reference``), plus what
#: llama-cpp-python's ``create_completion`` loop adds (:mod:`.completion`): stop strings, custom
#: logits processors, ``min_length`` (its ``MinTokensLogitsProcessor``).
SCENARIO_FEATURES = FEATURES | frozenset({"end_id", "end_id_set", "ignore_eos", "stop_words", "max_new_tokens",
                                          "max_seq_len", "finish_reason", "stop_strings", "logits_processors",
                                          "min_length"})

#: What a result of the C-chain scenario path says it ran (``ScenarioResult.path``).
CHAIN_PATH = ("the reference's scenario driver, llama.cpp's sampler chain per step through the C bindings "
              "(impls/llamacpp/session.py)")


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
    if row.mirostat is not None and row.mirostat not in (0, 1, 2):
        return (f"mirostat={row.mirostat!r}: common_sampler_init aborts on another version (GGML_ASSERT); the "
                "sampler API has no version parameter")
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


def scenario_unsupported(spec) -> Optional[str]:
    """Why :meth:`LlamaCppImpl.run_scenario` cannot run ``spec`` (beam search, drafts), or ``None``."""
    for r in spec.requests:
        if r.use_beam_search or r.beam_width != 1:
            return f"request {r.id!r}: beam search (llama.cpp's sampler API has none)"
        if r.draft_len or r.drafts is not None or r.d2t is not None:
            return f"request {r.id!r}: draft tokens (llama.cpp's sampler API has no speculative verification)"
    return None


class LlamaScenarioSession:
    """What the reference's scenario driver needs of a session, with llama.cpp's chain picking the tokens.

    :meth:`step` hands the rows to a :class:`~.session.LlamaSession` (its per-slot samplers keyed by
    slot, request and seed: a new request in a slot starts fresh ``dist``, XTC and mirostat
    samplers) and adds the reference's finish reason of each token. A row the chain cannot express
    (:func:`_unsupported`) stops the scenario (``ScenarioUnsupported``).

    Parameters
    ----------
    order : sequence of str
    profile : Profile
        The finish rules (:func:`impls.reference.finish.finish_reason`).
    """

    #: The working dtype the driver reads (beam search only, which is refused).
    dtype = torch.float32

    def __init__(self, order, profile: Profile):
        from .session import LlamaSession
        self.inner = LlamaSession(order)
        self.profile = profile

    def step(self, rows) -> list:
        """One step of the driver's plain rows: llama.cpp's token, the reference's finish reason."""
        from ..reference.finish import finish_reason
        from ..reference.scenario_types import ScenarioUnsupported
        for row in rows:
            why = _unsupported(row)
            if why:
                raise ScenarioUnsupported(f"request {row.request_id!r}: {why}")
        out = self.inner.step(rows)
        for row, r in zip(rows, out):
            if r.error is None:
                r.finish_reason = finish_reason(row, r.token, self.profile)
        return out


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
    #: :meth:`run_scenario`: the reference's driver admits the requests (its validation under the profile),
    #: schedules the steps, keeps the histories and decides finish reasons; llama.cpp samples every token.
    scenario_stages = {"validation": "reference", "decode": "reference", "finish": "reference"}
    #: The completion path (:mod:`.completion`): llama-cpp-python's custom-sampler stage runs the
    #: case's processors and ``MinTokensLogitsProcessor`` (``bans``), its chain filters and draws
    #: with the request's seed, ``create_completion`` matches stop strings and ends requests
    #: (``finish``); the reference admits them (``validation``); the adapter serves them one at a
    #: time and labels their steps (``decode``). :meth:`run_scenario` reports them as the result's
    #: ``stages_used``, which the judge folds into that case's provenance.
    completion_stages = {"validation": "reference", "decode": "adapter", "bans": "own", "filters": "own",
                         "draw": "own", "seeds": "own", "finish": "own"}
    #: What :meth:`run_scenario` expresses (:data:`SCENARIO_FEATURES`).
    scenario_features = SCENARIO_FEATURES

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
                "llamacpp_path": "llama_sampler_chain_* on a llama_token_data_array, no model (session.py)",
                "llamacpp_scenario_paths": "stop strings, logits_processors or min_length: Llama.create_completion "
                                           "on a tiny GGUF model (completion.py); otherwise " + CHAIN_PATH}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why the chain cannot express ``row`` (the harness reports ``n/a``), or ``None``."""
        return _unsupported(row)

    def open_session(self, device: str = "cpu"):
        """A fresh :class:`~impls.llamacpp.session.LlamaSession` (no slot generators yet)."""
        from .session import LlamaSession
        return LlamaSession(self.order)


    def run_scenario(self, spec, device: str = "cpu"):
        """Decode a multi-step scenario: llama-cpp-python's completion loop, or the reference's driver with llama.cpp
        sampling every step.

        See the module docstring, "Scenarios". A scenario with stop strings, custom processors or
        ``min_length`` takes :func:`.completion.run_scenario`; every other the C chain.

        Raises
        ------
        impls.reference.scenario.ScenarioUnsupported
            Beam search or drafts (:func:`scenario_unsupported`), a row the chain cannot express,
            or what the completion loop cannot (:func:`.completion.unsupported_reason`).
        """
        from ..reference.scenario import ScenarioUnsupported, run_scenario
        from .completion import needs_completion

        if needs_completion(spec):
            from .completion import run_scenario as run_completion
            out = run_completion(spec, self.profile)
            out.stages_used = dict(self.completion_stages)   # in place of scenario_stages, for this result
            return out
        why = scenario_unsupported(spec)
        if why:
            raise ScenarioUnsupported(why)
        out = run_scenario(spec, self.profile, LlamaScenarioSession(self.order, self.profile))
        out.path = CHAIN_PATH
        return out


IMPLEMENTATIONS = (Entry("llamacpp", LlamaCppImpl),)
