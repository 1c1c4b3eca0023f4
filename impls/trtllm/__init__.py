"""Adapter for TensorRT-LLM's PyTorch sampler, loaded from a source checkout (profile ``trtllm``/``trtllm-cba``).

TensorRT-LLM's wheels cannot be installed on these machines, but the
arithmetic of its ``TorchSampler`` is largely plain PyTorch. This adapter
imports those functions **from a TensorRT-LLM source checkout the user points
to** (``sampcheck run --impl trtllm --trtllm-src PATH``, or the environment
variable ``SAMPCHECK_TRTLLM_SRC``) by file path, with the smallest stand-ins
for what they import (:mod:`.loader`), and runs the corpus through them under
profile ``trtllm``, or ``trtllm-cba`` where the checkout runs every beam mode on
the candidate-beams array (:attr:`TrtllmImpl.profile`; :mod:`.session` says,
stage by stage, which part of the pipeline is the engine's and which the
reference's). Without a checkout the
adapter is ``skip``, with that reason. Nothing of TensorRT-LLM is vendored.

Beam search: which path runs is read from the checkout
(:attr:`.loader.Engine.beam_path`). Where ``beam_search.py`` still has the
regular step (@095443e5), each step of a beam request with ``early_stopping
= True`` (finished beams frozen in their slots) selects its beams with the
engine's ``beam_search_sampling_batch``, and requests with ``early_stopping``
False or ``"never"`` (the candidate-beams array) are ``n/a``. Where the
regular step is gone and ``sampler_strategy.py`` sends every mode to the
candidate-beams array (@50aec1cb with sampler_strategy.py@029e223d), every
beam request is decoded by the engine's ``sample`` ->
``beam_search_sampling_batch_cba`` over a per-request store, and its output
ranked by ``_prepare_beam_history_cba`` (:mod:`.cba`).

**Unverified here:** the full ``TorchSampler`` (``sampler.py``: request
grouping, strategy dispatch, the overlap scheduler), its production sampling
kernels (FlashInfer's fused top-k/top-p sampling from probabilities, with the
per-row seed and offset of ``_SeedManager``), the embedding-bias Triton
kernel, the greedy single-step finish test of newer ``sampler.py`` commits
(the host-side END_ID/LENGTH check that skips ``finish_reasons.py``), the logprob
kernels (``logprobs.py``, ``ops/logprobs_triton.py``), beam search's
candidate-beams-array path on a checkout that still has the regular step,
and speculative decoding (``two_model_spec_dec.py``). Cases needing them are
``n/a``.
"""

from __future__ import annotations

from typing import Optional

from ..base import CliOption, Row
from ..profiles import TRTLLM, TRTLLM_CBA, Profile
from ..registry import Entry
from . import loader

__all__ = ["TrtllmImpl", "PIPELINE", "UNVERIFIED", "IMPLEMENTATIONS"]


#: Where each stage of the step comes from (``describe()["pipeline"]``); ``{v}``, ``{tb}``, ``{sm}`` are the
#: commits of ops/vanilla.py, token_ban.py and seed_manager.py.
PIPELINE = (
    ("validation and mode resolution", "reference",
     "impls/reference/modes.py resolve (SamplingParams._validate and params_imply_greedy_decoding need "
     "tensorrt_llm.bindings; not loaded)"),
    ("top-p decay runtime value", "engine",
     "ops/vanilla.py@{v} Fusions.top_p_decay_update (eager body of _top_p_decay_update_impl), replayed over the "
     "row's generated tokens from the request's top_p; defaults as top_p_decay.py@5c470e44 TopPDecayHandler "
     "(top_p_min 1e-6, reset id -1)"),
    ("logit bias", "adapter",
     "dense add of impls/reference/rewrites.py apply_logit_bias (embedding_bias.py@1aa09db7 is a Triton kernel "
     "on CUDA fp32 logits only)"),
    ("occurrence penalties", "engine",
     "ops/vanilla.py@{v} Fusions.update_occurrence_workspace + Fusions._apply_occurrence_penalties_impl "
     "(eager) -> occurrence_penalized_logits; the counted tokens (prompt[prompt_ignore_length:] + generated, "
     "the ignored prefix as a repetition-only mask, ids outside [0, V) dropped) follow the PenaltyStore "
     "docstring of penalties.py@0a0ceb0c, which is not loaded"),
    ("bans: min_length end id, bad words, no-repeat-ngram", "engine",
     "token_ban.py@{tb} SynchronousTokenBanHandler.generate_ban_list + apply_ban_list on a stand-in request"),
    ("greedy argmax", "engine", "ops/vanilla.py@{v} greedy_search_sampling_batch"),
    ("temperature, min-p, top-k, top-p: kept set and distribution", "engine",
     "ops/vanilla.py@{v} top_k_top_p_sampling_batch (the vanilla op; its multinomial token must lie in the "
     "support)"),
    ("the draw", "reference",
     "canonical Philox Gumbel-max (DESIGN.md decision 1) over the engine's kept set, seeds and offsets of "
     "impls/reference/seeds.py; TensorRT-LLM's draw is FlashInfer's CUDA sampling kernel"),
    ("seed bookkeeping", "engine (observed only)",
     "seed_manager.py@{sm} _SeedManager driven alongside; its (seed, offset) per row is in "
     "extra['engine_seed_offset'], not used for the draw"),
    ("RAW/PROCESSED logprobs, rank, top logprobs", "reference",
     "impls/reference/logprobs.py on the engine's rewritten logits and distribution (logprobs.py needs Triton "
     "kernels)"),
    ("finish reasons", "engine",
     "finish_reasons.py@{fr} FinishReasonsHandler (stop words, then length, then end id, each overwriting), "
     "admitted and written per step as sampler.py's setup_sampler_step / sample_async drive it, its CUDA "
     "buffers placed on the CPU (impls/trtllm/finish.py); without the file: impls/reference/finish.py"),
    ("speculative decoding", "n/a", "two_model_spec_dec.py not loaded: scenarios with draft tokens are n/a"),
)

#: The beam-search stages of the step, by :attr:`.loader.Engine.beam_path` (``{bs}``: commit of beam_search.py,
#: ``{ss}``: of sampler_strategy.py); ``describe()["pipeline"]`` lists those of the loaded checkout's path.
BEAM_PIPELINE = {
    "regular": (
        ("beam search (early_stopping True: frozen slots)", "engine + reference",
         "beam_search.py@{bs} beam_search_sampling_batch chooses the beams (temperature, log-softmax, finished "
         "beams masked, beam_candidate_topk with length penalty and diversity); the beams' rewritten logits, the "
         "re-parenting of histories and counts and the finish reasons are impls/reference/beam.py's"),
        ("beam search (early_stopping False / never: candidate-beams array)", "n/a",
         "_cba_step_math of beam_search.py is not driven on a checkout that still has the regular step: such "
         "requests are n/a"),
    ),
    "candidate_beams": (
        ("beam search dispatch (every early_stopping mode)", "engine",
         "sampler_strategy.py@{ss} sample with the request's BeamSearch strategy tuple (fields as "
         "resolve_sampling_strategy fills them; BeamSearchEarlyStop.from_raw) -> "
         "beam_search_sampling_batch_cba"),
        ("beam step: candidates, finished pool, done verdict", "engine",
         "beam_search.py@{bs} beam_search_sampling_batch_cba (eager _cba_step_math): temperature, log-softmax, "
         "harvest of latched beams, beam_candidate_topk (diversity rate), end-id candidates into the pool by "
         "cum / (gen + 1) ** length_penalty, slots refilled, done verdict (TRUE: pool full), predecessors and "
         "cumulative logprobs, over a per-request store laid out as BeamSearchStore / _CBAFields"),
        ("beam inputs, re-parenting, finish handling", "reference + adapter",
         "the beams' rewritten logits and the re-parenting of histories and counts are impls/reference/beam.py's; "
         "the tokens written into original_tokens, the finish reasons (impls/reference/finish.py) written into "
         "first_finish_reasons where NOT_FINISHED, the stop-word latch (pending_harvest) and the stop test "
         "(prepare_cba_group_host's should_stop) stand in for sampler.py and finish_reasons.py (impls/trtllm/cba.py)"),
        ("beam output", "engine",
         "beam_search.py@{bs} _prepare_beam_history_cba (best W of pool and running paths by normalised score) and "
         "finalize_beam; per-beam reasons and scores attached by the adapter in the engine's ranking"),
    ),
}

#: What stays unverified whatever the checkout (``describe()["unverified"]``).
UNVERIFIED = (
    "the full TorchSampler (sampler.py: request grouping, strategy dispatch, overlap scheduler)",
    "its production sampling kernels: FlashInfer's fused top-k/top-p sampling with per-row seed/offset (CUDA)",
    "the compiled (Inductor) kernels of the torch.compile'd ops: their eager Python bodies run here",
    "embedding_bias.py, logprobs.py, two_model_spec_dec.py",
    "sampler.py's greedy single-step finish test (END_ID then LENGTH on the host, no stop words), which newer "
    "commits take instead of finish_reasons.py for an all-greedy batch",
    "beam_search.py's radix top-k for rows over 10000 tokens, and its candidate-beams-array path on a checkout "
    "that still has the regular step",
    "around the candidate-beams step: sampler.py's writes of the emitted tokens, finish_reasons.py's per-beam "
    "reasons and stop-word latch, the request-state transitions (the adapter stands in for them)",
)


class TrtllmImpl:
    """TensorRT-LLM's sampler functions, from a source checkout, as an implementation under test.

    Parameters
    ----------
    src : str, optional
        The checkout (default: ``$SAMPCHECK_TRTLLM_SRC``).
    profile : Profile, optional
        Fixes the profile; by default it is read from the checkout (:attr:`profile`).
    """

    name = "trtllm"

    def __init__(self, src: Optional[str] = None, profile: Optional[Profile] = None):
        self._profile = profile
        self.src = loader.find_checkout(src)
        self._engine = None

    @property
    def profile(self) -> Profile:
        """The profile that predicts the loaded checkout, by what it defines (never its version).

        :data:`impls.profiles.TRTLLM_CBA` when the checkout's beam path
        (:attr:`.loader.Engine.beam_path`) is ``"candidate_beams"`` (every
        ``early_stopping`` mode on the candidate-beams array:
        beam_search.py@50aec1cb with sampler_strategy.py@029e223d), else
        :data:`impls.profiles.TRTLLM` (the regular frozen-slots step of
        beam_search.py@095443e5, or no beam step). The checkout is loaded on
        first use; without a checkout, or one that does not load,
        :data:`~impls.profiles.TRTLLM` (the harness reads the profile before
        :meth:`available`, which then gives the reason to ``skip``).
        A profile passed to the constructor is returned as is.
        """
        if self._profile is not None:
            return self._profile
        try:
            path = self.engine().beam_path
        except loader.CheckoutError:
            return TRTLLM
        return TRTLLM_CBA if path == "candidate_beams" else TRTLLM

    #: What a given checkout cannot run (beam search without a beam path, the candidate-beams-array
    #: path where the regular step is still there, draft tokens) is ``n/a`` through :meth:`run_scenario` and
    #: :meth:`unsupported`, whose reasons name the file or the path. No ``end_id_set``: a request
    #: has one end id (``SamplingParams.end_id: Optional[int]``, tensorrt_llm/sampling_params.py
    #: @a98a9061; ``LlmRequest.py_end_id``), the one ``token_ban.py``'s ``_add_min_length_bans``
    #: bans; other EOS ids can only be ``stop_token_ids``, which a case writes as ``stop_words``.
    features = frozenset({
        "temperature", "top_k", "top_p", "min_p", "top_p_decay", "beam_search", "repetition_penalty",
        "presence_penalty", "frequency_penalty", "prompt_ignore_length", "logit_bias", "min_length", "bad_words",
        "no_repeat_ngram", "end_id", "ignore_eos", "stop_words", "max_new_tokens", "max_seq_len", "seed",
        "logprobs", "processed_logits", "canonical_rng", "low_precision_logits", "finish_reason",
    })
    devices = frozenset({"cpu"})
    slow = False
    #: As :data:`PIPELINE` says, stage by stage, for a checkout whose ``finish_reasons.py`` loads
    #: (:attr:`stages` gives the loaded checkout's).
    STAGES = {"validation": "reference", "logit_bias": "adapter", "penalties": "own", "bans": "own",
              "filters": "own", "draw": "reference", "seeds": "reference", "logprobs": "reference",
              "finish": "own", "decode": "reference", "beam": "adapter"}
    cli_options = (CliOption("--trtllm-src", loader.ENV_VAR, "PATH",
                             f"a TensorRT-LLM source checkout for --impl trtllm (default: ${loader.ENV_VAR}); its "
                             "pure-PyTorch sampler functions are loaded from it by file path", path=True),)

    @property
    def stages(self) -> dict:
        """:data:`STAGES`, with ``finish`` the reference's when the loaded checkout's
        ``finish_reasons.py`` is absent or did not load (no checkout: :data:`STAGES` as declared)."""
        try:
            eng = self.engine()
        except loader.CheckoutError:
            return dict(self.STAGES)
        return {**self.STAGES, **({} if eng.finish_reasons is not None else {"finish": "reference"})}

    def _finish_problem(self, eng) -> Optional[str]:
        """Why ``finish_reasons.py`` is not driven (the loader's message), or None."""
        if eng.finish_reasons is not None:
            return None
        return eng.optional_missing.get("finish_reasons.py", f"{loader.SAMPLER_DIR}/finish_reasons.py is not loaded")

    def engine(self) -> loader.Engine:
        """The loaded checkout.

        Raises
        ------
        loader.CheckoutError
            No checkout given, or it cannot be loaded (the message says why).
        """
        if self._engine is None:
            if self.src is None:
                raise loader.CheckoutError(f"no TensorRT-LLM source checkout: pass --trtllm-src PATH or set "
                                           f"{loader.ENV_VAR}")
            self._engine = loader.load(self.src)
        return self._engine

    def available(self, device: str) -> Optional[str]:
        """``None`` when the checkout loads (CPU only), else the reason."""
        if str(device).startswith("cuda"):
            return "the source-loaded TensorRT-LLM adapter runs on CPU only"
        try:
            self.engine()
        except loader.CheckoutError as e:
            return str(e)
        return None

    def version(self) -> str:
        """``<tensorrt_llm/version.py or 0>+src.<commit of ops/vanilla.py> (source checkout …)``.

        The first word is a PEP 440 version, so ``findings.toml`` ranges can
        match it; the rest lists every commit the loaded files were read at,
        and names the files whose content no longer matches the sha256 that
        ``COMMIT.txt`` recorded for them.
        """
        eng = self.engine()
        commits = eng.commits()
        head = commits[0][:8] if commits else "unknown"
        base = eng.version or "0"
        at = ", ".join(c[:8] for c in commits) or "unknown commits"
        changed = [rel.rsplit("/", 1)[-1] for rel, f in eng.files.items()
                   if f.get("recorded_sha256") and f["recorded_sha256"] != f["sha256"]]
        mod = f"; MODIFIED since recorded: {', '.join(changed)}" if changed else ""
        return f"{base}+src.{head} (TensorRT-LLM source, files at {at}{mod})"

    def describe(self, device: str = "cpu") -> dict:
        """Facts recorded with the run: the files loaded with their commits and sha256, and whose each stage is.

        The checkout's location is not recorded: the commits and digests identify the source, and a
        record must not depend on the machine it was made on.
        """
        eng = self.engine()
        c = {rel.rsplit("/", 1)[-1]: (f.get("commit") or "unknown")[:8] for rel, f in eng.files.items()}
        fmt = {"v": c.get("vanilla.py", "?"), "tb": c.get("token_ban.py", "?"), "sm": c.get("seed_manager.py", "?"),
               "bs": c.get("beam_search.py", "?"), "ss": c.get("sampler_strategy.py", "?"),
               "fr": c.get("finish_reasons.py", "?")}
        path = eng.beam_path
        finish_problem = self._finish_problem(eng)
        # a file the checkout has but that did not load is the user's to fix: said at the run's start
        broken = [why for rel, why in eng.optional_missing.items()
                  if (eng.root / loader.SAMPLER_DIR / rel).is_file()]
        files = {rel: {"commit": f.get("commit"), "sha256": f["sha256"],
                       **({"modified_since_recorded": True}
                          if f.get("recorded_sha256") and f["recorded_sha256"] != f["sha256"] else {})}
                 for rel, f in eng.files.items()}
        return {
            "source": "NVIDIA/TensorRT-LLM source checkout, loaded by file path (impls/trtllm/loader.py)",
            "tensorrt_llm_version": eng.version or "unknown (no tensorrt_llm/version.py in the checkout)",
            "files": files,
            "pipeline": [{"stage": s, "from": who, "what": what.format(**fmt)} if not (s == "finish reasons" and
                                                                                        finish_problem) else
                         {"stage": s, "from": "reference",
                          "what": f"impls/reference/finish.py: finish_reasons.py is not driven ({finish_problem})"}
                         for s, who, what in PIPELINE + BEAM_PIPELINE.get(path, ())]
                        + ([{"stage": "beam search", "from": "n/a",
                             "what": eng.beam_unavailable() + ": cases with beam search are n/a"}]
                           if path is None else []),
            "beam_path": path,
            "unverified": list(UNVERIFIED) + ([f"finish_reasons.py ({finish_problem})"] if finish_problem else []),
            **({"warnings": [f"{why}; the stages that file carries fall back (finish reasons: the reference's)"
                             if "finish_reasons.py" in why else why for why in broken]} if broken else {}),
            "stand_ins": ["tensorrt_llm._utils.prefer_pinned -> False", "tensorrt_llm.logger (records warnings)",
                          "llm_request.LlmRequest (empty class)",
                          "sampler_common.RequestSeeds / request_random_seed",
                          "ops.logprobs_triton (raises if called)"]
                         + (["tensorrt_llm._utils.nvtx_range (no-op)",
                             "tensorrt_llm.bindings.executor.FinishReason (the C++ enum's values)",
                             "llm_request.LlmRequestState (names only)",
                             "logprobs / sampler_common CUDA helpers (raise if called)",
                             "sampler_common._get_beam_width_in (the real rule: 1 in the context phase, else the "
                             "request's width)",
                             "ops.flashinfer.radix_topk_op (raises: rows over 10000 tokens)",
                             "tensorrt_llm._torch.flashinfer_utils.IS_FLASHINFER_AVAILABLE -> False",
                             "tensorrt_llm.executor.result.Logprob (named tuple)",
                             "sampler_features._SideStreamCopier (raises if made)"]
                            if eng.beam_search is not None else [])
                         + (["sampler_strategy.py's FlashInfer op wrappers and sampler_common request helpers "
                             "(raise if called)", "tensorrt_llm.sampling_params.SamplingParams (methods raise), "
                             "LogprobMode", "tensorrt_llm._utils.maybe_pin_memory (identity)",
                             "top_p_decay.TopPDecayMetadata (raises if made)"]
                            if eng.sampler_strategy is not None else [])
                         + (["sampler_common.int_tensor (the real body)",
                             "_torch.utils.torch_multi_arange (by its docstring's definition)",
                             "CUDA device arguments placed on the CPU while finish_reasons.py runs "
                             "(loader.cuda_on_cpu)"]
                            if eng.finish_reasons is not None else []),
            "engine_warnings": eng.warnings(),
        }

    def unsupported(self, row: Row) -> Optional[str]:
        """Why TensorRT-LLM (as loaded) cannot express ``row``, or ``None``."""
        if row.use_beam_search:
            eng = self.engine()
            if eng.beam_path is None:
                return "beam search: " + eng.beam_unavailable()
            return "beam search runs in scenarios only (beam_search.py drives whole beam requests)"
        if row.top_p_reset_ids is not None and len(row.top_p_reset_ids) > 1:
            return ("TensorRT-LLM keeps one top-p reset id per request (SamplingParams.top_p_reset_ids is an int; "
                    "top_p_decay.py@5c470e44 TopPDecayStore.top_p_decay_reset_ids_cuda)")
        return None

    def open_session(self, device: str = "cpu"):
        """A fresh :class:`~impls.trtllm.session.TrtllmSession`.

        Raises
        ------
        loader.CheckoutError
            When the checkout cannot be loaded.
        """
        from .session import TrtllmSession
        return TrtllmSession(self.engine(), self.profile, device)

    def run_scenario(self, spec, device: str = "cpu"):
        """Decode a multi-step scenario on a fresh session (the reference's scenario runner).

        Beam requests run on the checkout's beam path
        (:attr:`.loader.Engine.beam_path`): ``"candidate_beams"`` decodes every
        one with the engine's step (:func:`.cba.run_scenario`); ``"regular"``
        only those with ``early_stopping = True``.

        Raises
        ------
        impls.reference.scenario.ScenarioUnsupported
            For beam search without a beam path, for a request the regular
            path does not take (candidate-beams array on a checkout that still
            has the regular step), and for draft tokens (not loaded from the
            checkout).
        """
        from ..reference.scenario import ScenarioUnsupported, run_scenario
        eng = self.engine()
        path = eng.beam_path
        for r in spec.requests:
            if r.use_beam_search and path is None:
                raise ScenarioUnsupported(f"request {r.id}: beam search ({eng.beam_unavailable()})")
            if r.use_beam_search and path == "regular":
                es = self.profile.beam_early_stopping_unset if r.early_stopping is None else r.early_stopping
                if not (es is True and self.profile.beam_early_stopping_true == "frozen_slots"):
                    raise ScenarioUnsupported(f"request {r.id}: beam search with early_stopping={es!r} takes "
                                              "TensorRT-LLM's candidate-beams-array path (_cba_step_math), which is "
                                              "not driven from the checkout")
            if r.draft_len or r.drafts:
                raise ScenarioUnsupported(f"request {r.id}: speculative decoding (the acceptance step of "
                                          "TensorRT-LLM is not loaded from the checkout)")
        if path == "candidate_beams":
            from .cba import run_scenario as run_cba
            result = run_cba(spec, self.profile, self.open_session(device))
        else:
            result = run_scenario(spec, self.profile, self.open_session(device))
        if eng.finish_reasons is None or any(r.use_beam_search for r in spec.requests):
            # beam requests: their finish reasons are the adapter's stand-in (impls/trtllm/cba.py) or the
            # reference's (impls/reference/beam.py), never finish_reasons.py
            result.stages_used["finish"] = "reference"
        return result


IMPLEMENTATIONS = (Entry("trtllm", TrtllmImpl),)
