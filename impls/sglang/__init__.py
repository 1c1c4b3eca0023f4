"""Adapter for SGLang's sampler (profile ``sglang``), on the CPU with its pytorch sampling backend.

It drives SGLang's **own** code without a model or a scheduler process (:mod:`.engine`):
``SamplingParams`` validation and normalisation, a real ``Req`` per row, the penalizers of
``sampling/penaltylib`` fed with the row's output tokens, ``SamplingBatchInfo`` built and
merged as the scheduler builds it, ``ModelRunner._preprocess_logits`` (penalties, logit bias),
``Sampler.forward`` (temperature, softmax, ``top_k_top_p_min_p_sampling_from_probs_torch``,
logprobs, the sampling mask) and ``Req.update_finish_state``. See :mod:`.translate` for the
Row -> ``SamplingParams`` mapping and :mod:`.session` for the step.

``logprob_token_ids`` is the request's ``token_ids_logprob``, validated by
``managers/tokenizer_manager.py TokenizerManager._validate_token_ids_logprob`` and read by
``layers/logprob_processor.py get_token_ids_logprobs`` inside ``Sampler.forward``.
``token_bitmask`` is the request's grammar: SGLang's ``constrained/xgrammar_backend.py
XGrammarGrammar`` whose ``GrammarMatcher`` alone is stood in by the case's words; the batch bitmask
is allocated, filled and applied by SGLang (``SamplingBatchInfo.update_regex_vocab_mask``,
``GrammarMask.apply`` in ``apply_logits_bias``) with xgrammar's CPU kernel (finding
``sglang-cpu-bitmask-kernel-writes-past-row``). ``allowed_token_ids`` is ``n/a``: SGLang 0.5.23's
``SamplingParams`` has no such field (the closest is the ``DisallowedTokensLogitsProcessor``
custom processor, a ban list). ``logits_processors`` is the request's ``custom_logit_processor``
(:mod:`.processors`, with the server argument ``enable_custom_logit_processor``), run by
``layers/sampler.py apply_custom_logit_processor`` from ``Sampler._preprocess_logits``.

Server arguments are SGLang's defaults on a CPU (``sampling_backend = "pytorch"``, the
overlap schedule, no deterministic inference, so ``sampling_seed`` is validated and not read:
profile field ``seeds_honoured``). The FlashInfer backend of a CUDA server (sequential
renormalisation when a batch has ``min_p > 0``) is not driven here.

Multi-step scenarios (:meth:`SglangImpl.run_scenario`, :mod:`.scenario`) keep a real ``Req`` per
request across steps: SGLang validates it, samples it through the same batch path, and its
``Req.update_finish_state`` decides the finish (stop strings on the case's toy tokenizer, stop
token ids, EOS, ``max_new_tokens``); SGLang's output streamer and detokenizer make the text. The
adapter schedules (stage ``decode``: ``adapter``); ``n > 1`` is fanned out into copies of the
request as SGLang's tokenizer manager sends them; beam search and drafts are ``n/a``.

Install: ``pip install torch==2.14.1 torchvision==0.29.1 sglang==0.5.23`` (a CUDA build of
torch, about 10 GB with SGLang's dependencies, that imports on a CPU), or ``tox -e sglang``.
``import impls.sglang`` works without SGLang; ``available`` says why it cannot run.
"""

from __future__ import annotations

from typing import Optional

from ..base import Row
from ..profiles import SGLANG, Profile
from ..registry import Entry
from .translate import SUPPORTED_FEATURES, unsupported_reason

__all__ = ["SglangImpl", "IMPLEMENTATIONS", "SCENARIO_FEATURES"]

#: What :meth:`SglangImpl.run_scenario` expresses: the single-step features less the observations a
#: scenario does not report (logprobs, processed and low-precision logits, ``logprob_token_ids``) and
#: less a given grammar bitmask (a grammar's matcher advances with the request's tokens; the case's
#: words stand in for one step only), plus stop strings (``Req._check_str_based_finish`` on the case's
#: toy tokenizer) and ``n`` (the copies ``GenerateReqInput`` and the tokenizer manager make, :mod:`.scenario`).
SCENARIO_FEATURES = ((SUPPORTED_FEATURES - {"logprobs", "processed_logits", "low_precision_logits",
                                            "logprob_token_ids", "token_bitmask"}) | {"stop_strings", "n"})


class SglangImpl:
    """SGLang's sampler as an implementation under test.

    Parameters
    ----------
    profile : Profile
        Default :data:`impls.profiles.SGLANG`.

    Attributes
    ----------
    name : str
        ``"sglang"``.
    features : frozenset of str
        :data:`.translate.SUPPORTED_FEATURES`.
    """

    name = "sglang"
    features = SUPPORTED_FEATURES
    devices = frozenset({"cpu"})
    slow = False
    #: ``SamplingParams`` validates; the penalizers, ``SamplingBatchInfo`` and ``Sampler`` rewrite, filter,
    #: draw and compute logprobs; ``Req.update_finish_state`` finishes. ``seeds``: SGLang's
    #: ``from_schedule_batch`` decides what a request's seed does (nothing, without deterministic
    #: inference); the only seeding is SGLang's ``set_random_seed`` with the server's ``random_seed``,
    #: called once per session where ``Scheduler.__init__`` calls it. The adapter keeps no per-request
    #: seed state.
    stages = {"validation": "own", "logit_bias": "own", "penalties": "own", "bans": "own", "filters": "own",
              "draw": "own", "seeds": "own", "logprobs": "own", "finish": "own"}
    #: :meth:`run_scenario`: SGLang's ``Req`` objects validate, are sampled and decide their finish across
    #: steps, but the adapter schedules (arrivals, pauses, which requests run at each step, the end of the
    #: run): SGLang's scheduler is not driven (:mod:`.scenario`).
    scenario_stages = {"decode": "adapter"}
    #: What :meth:`run_scenario` expresses (:data:`SCENARIO_FEATURES`).
    scenario_features = SCENARIO_FEATURES

    def __init__(self, profile: Profile = SGLANG):
        self.profile = profile

    def version(self) -> str:
        """``sglang.__version__``.

        Raises
        ------
        ImportError
            When SGLang is not installed (call :meth:`available` first).
        """
        import sglang
        return sglang.__version__

    def available(self, device: str) -> Optional[str]:
        """``None`` when SGLang's sampler imports and ``device`` is the CPU, else the reason."""
        if not str(device).startswith("cpu"):
            return ("the adapter drives SGLang's pytorch sampling backend on the CPU; a CUDA server's FlashInfer "
                    "backend is not driven")
        try:
            from . import engine
            engine.runtime()
        except BaseException as e:  # ImportError, or a broken install
            if isinstance(e, KeyboardInterrupt):
                raise
            return f"sglang is not importable: {type(e).__name__}: {e}"
        return None

    def describe(self, device: str = "cpu") -> dict:
        """Facts recorded with the run: the server arguments and code paths (:func:`.engine.path_description`)."""
        from . import engine
        return {**engine.path_description(),
                "sglang_path": "SamplingParams, Req, penaltylib, SamplingBatchInfo.from_schedule_batch/merge_batch/"
                               "copy_for_forward, ModelRunner._preprocess_logits, Sampler.forward, "
                               "Req.update_finish_state; no model, no scheduler process (engine.py)"}

    def unsupported(self, row: Row) -> Optional[str]:
        """Why SGLang cannot express ``row`` (the harness reports ``n/a``), or ``None``.

        See :func:`.translate.unsupported_reason`.
        """
        return unsupported_reason(row)

    def run_scenario(self, spec, device: str = "cpu"):
        """Decode a multi-step scenario with SGLang's per-request code (:func:`.scenario.run_scenario`).

        Raises
        ------
        ScenarioUnsupported
            Beam search, draft tokens, an engine ``max_seq_len``, a request field the adapter
            cannot express, two requests in one slot at once (:func:`.scenario.unsupported_reason`).
        """
        from .scenario import run_scenario
        return run_scenario(spec)

    def open_session(self, device: str = "cpu"):
        """A fresh :class:`~impls.sglang.session.SglangSession`.

        Raises
        ------
        ImportError
            When SGLang is not installed.
        """
        from .session import SglangSession
        return SglangSession(self.profile, device)


IMPLEMENTATIONS = (Entry("sglang", SglangImpl),)
