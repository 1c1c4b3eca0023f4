"""Stage provenance: whose code decided a verdict (DESIGN.md, "Statuses"; docs/results.md).

An implementation declares, per pipeline stage (:data:`impls.base.STAGES`), whose code
performs it: ``own``, ``adapter`` or ``reference`` (:data:`impls.base.PROVENANCE`;
attribute ``stages``). A case *exercises* a stage when

* it declares a feature that the stage performs (:data:`FEATURE_STAGES`: ``top_p`` ->
  ``filters``, ``repetition_penalty`` -> ``penalties``, ...), or
* it checks an output the stage produces (:data:`OUTPUT_STAGES`: ``logprob`` ->
  ``logprobs``, ...; the token of every row -> ``draw``), or an error kind the stage raises
  (:data:`ERROR_STAGES`: ``invalid_top_p`` -> ``validation``, ``nan_logits`` -> ``filters``),
* or its kind always runs it (a scenario: ``decode``; beam requests: ``beam``; drafts:
  ``speculative``; :meth:`harness.corpus.kinds.CheckKind.exercised_stages`).

A session may report that some of its results took a stage from other code than the
implementation declares (``stages_used``; vLLM's seeded rows its engine loop could not draw are
seeded by the adapter): the case's provenance then says so for that stage.

A verdict (``pass``, ``known-diff``, ``known-bug``, ``fail``) is **decided by the
implementation's own code** when every stage the case exercises is ``own`` for it. Otherwise
the result carries the qualifier ``borrowed``, naming the stages that were not: the status
is unchanged, and every count the report, the run records and ``sampcheck diff`` show
splits it (``pass 80, own code 52``). A reference implementation's stages are all its own:
its verdicts are about the reference.
"""

from __future__ import annotations

from typing import Optional

from harness.corpus import outputs
from impls.base import STAGES, stage_provenance
from impls.params import ERRORS, FEATURES

__all__ = ["FEATURE_STAGES", "OUTPUT_STAGES", "ERROR_STAGES", "VERDICTS", "exercised", "provenance"]

#: The stage that performs each feature (:data:`impls.params.FEATURES`).
FEATURE_STAGES = {
    "temperature": "filters", "top_k": "filters", "top_p": "filters", "min_p": "filters",
    "top_p_decay": "decode", "beam_search": "beam",
    "repetition_penalty": "penalties", "presence_penalty": "penalties", "frequency_penalty": "penalties",
    "prompt_ignore_length": "penalties", "penalty_last_n": "penalties",
    "logit_bias": "logit_bias",
    "min_length": "bans", "bad_words": "bans", "no_repeat_ngram": "bans",
    "allowed_token_ids": "bans", "token_bitmask": "bans",
    # a custom processor's arithmetic is the case's (impls/processors.py); where it runs among the
    # rewrites, on which rows and with which request's state is the engine's: a logits rewrite (§1.2)
    "logits_processors": "logit_bias",
    "end_id": "finish", "ignore_eos": "finish", "stop_words": "finish", "max_new_tokens": "finish",
    "max_seq_len": "finish", "finish_reason": "finish", "end_id_set": "finish", "stop_strings": "finish",
    "seed": "seeds", "canonical_rng": "draw",
    "n": "decode",  # the fan-out into children is the engine's request loop (LLMEngine.add_request, generate())
    "logprobs": "logprobs", "processed_logits": "logit_bias", "logprobs_mode": "logprobs",
    "logprob_token_ids": "logprobs",
    "low_precision_logits": "filters",
    "min_keep": "filters", "typical_p": "filters", "top_n_sigma": "filters", "xtc": "filters", "dynatemp": "filters",
    "dry": "penalties", "mirostat": "filters",
}
#: The stage that produces each checked output key (single-step ``expect`` keys and scenario keys).
OUTPUT_STAGES = {
    **outputs.STAGES,   # a single-step row's outputs, declared with them
    "tokens": "draw", "finish_step": "finish",
    "scheduled": "decode", "offsets": "seeds", "top_p": "decode", "error_step": "decode",
    "emitted": "speculative", "drafts": "speculative", "accepted": "speculative", "rewind": "speculative",
    "beam_tokens": "beam", "predecessors": "beam", "beams": "beam", "cum_logprobs": "beam", "scores": "beam",
    "beam_finish_reasons": "beam", "text": "finish", "stop_reason": "finish",
}
#: The stage that raises each error kind (:data:`impls.params.ERRORS`): the row's validation, or
#: the step that finds the distribution undefined.
ERROR_STAGES = {kind: ("filters" if kind in ("nan_logits", "posinf_logits", "no_valid_token") else "validation")
                for kind in ERRORS}
#: Statuses that are verdicts on the implementation's outputs (the others say it was not judged).
VERDICTS = ("pass", "known-diff", "known-bug", "fail")


def exercised(case) -> list:
    """The stages ``case`` exercises (the module docstring's rule), in pipeline order.

    Raises
    ------
    KeyError
        A feature, output key or error kind without a stage in the tables above (a new one
        must be given its stage here).
    """
    found = {FEATURE_STAGES[f] for f in case.features}
    found |= set(case.kind.exercised_stages(case, OUTPUT_STAGES, ERROR_STAGES))
    return [s for s in STAGES if s in found]


def provenance(case, impl, status: str, overrides: Optional[dict] = None) -> Optional[dict]:
    """The provenance of a verdict: ``{"stages": {stage: provenance}, "own_code": bool, "borrowed": [...]}``.

    Parameters
    ----------
    case : harness.corpus.load.Case
    impl : Implementation
        Its ``stages`` (:func:`impls.base.stage_provenance`; for a scenario its
        ``scenario_stages`` override them); a stage it does not declare reads ``"none"``.
    status : str
        Only :data:`VERDICTS` get a provenance (None for ``n/a``, ``skip``, ``error``).
    overrides : dict, optional
        ``{stage: provenance}`` the implementation's sessions reported for this case's results
        where they differ from its declaration (``stages_used``, :meth:`harness.judge.judge.Judge.note_stages`).

    Returns
    -------
    dict or None
        ``stages``: each exercised stage with whose code performs it; ``own_code``: all of
        them ``own``; ``borrowed``: the others, in pipeline order.
    """
    if status not in VERDICTS:
        return None
    declared = {**stage_provenance(impl, scenario=case.kind.runs_scenarios), **(overrides or {})}
    stages = {s: declared.get(s, "none") for s in exercised(case)}
    borrowed = [s for s, p in stages.items() if p != "own"]
    return {"stages": stages, "own_code": not borrowed, "borrowed": borrowed}
