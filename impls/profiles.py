"""Semantic profiles: every rule on which sampling engines disagree, as data.

A :class:`Profile` is a frozen record of field values. The reference sampler
(:mod:`impls.reference`) reads these fields and never asks which engine it is
imitating, so running the reference under an engine's profile *predicts* that
engine. The default profile is ``trtllm`` (SEMANTICS.md: the system the seed
``000_fabad194daba9a8c.txt`` describes in detail); the others are deltas from
it, built with :func:`dataclasses.replace`, and every field that differs from
the default carries a citation in :attr:`Profile.citations`.

Adding an engine means adding a profile here (and an adapter under
``impls/``), never a branch in the pipeline.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

__all__ = ["Profile", "PROFILES", "TRTLLM", "HF", "get_profile", "profile_diff"]

SEED_TRTLLM = "seed:000_fabad194daba9a8c.txt"


@dataclass(frozen=True)
class Profile:
    """The semantic knobs of one sampler, read by the reference pipeline.

    Attributes
    ----------
    name : str
        Short identifier (``"trtllm"``, ``"hf"``, ...).
    description : str
        One line for the report.
    mode_source : {"params", "do_sample"}
        How GREEDY vs SAMPLING is decided. ``"params"``: from the sampling
        parameters (SEMANTICS §1.1 rules 2-4). ``"do_sample"``: from the
        row's ``do_sample`` flag (Hugging Face), which the adapter resolves as
        ``do_sample`` if given, else "any of temperature/top_k/top_p/min_p set".
    greedy_when_unset : bool
        Whether a row with temperature, top_k, top_p all unset is greedy
        (§1.1 rule 3) rather than random sampling with neutral filters.
    explicit_greedy : frozenset of str
        Which explicit spellings force GREEDY (§1.1 rule 2): any of
        ``"top_k_1"``, ``"top_p_0"``, ``"min_p_1"``, ``"temperature_0"``.
    min_p_forces_sampling, top_p_decay_forces_sampling : bool
        The traps of §1.1 rule 3: an otherwise unset row with ``min_p > 0``
        (or an active top-p decay) samples instead of being greedy.
    temperature_zero : {"greedy", "error"}
        What ``temperature == 0`` means when the row samples.
    top_p_zero_valid : bool
        Whether ``top_p == 0`` is accepted (trtllm: yes, it means greedy).
    top_k_disabled_below : int
        Smallest accepted ``top_k``: 0 (trtllm, hf) or -1 (vLLM's "off").
    validate_penalties : bool
        Reject NaN penalties and a repetition penalty ``<= 0`` per request.
    rewrite_order : tuple of str
        Order of the logits rewrites (§1.2): names among ``"logit_bias"``,
        ``"repetition"``, ``"presence_frequency"``, ``"min_length"``,
        ``"bad_words"``, ``"no_repeat_ngram"``.
    presence_counts_prompt : bool
        Whether presence/frequency counts include the prompt (after
        ``prompt_ignore_length``) or only generated tokens.
    penalty_clamp_finite : bool
        Clamp penalised logits to ``±finfo.max`` while passing non-finite
        inputs through unchanged (trtllm). If False, plain float arithmetic.
    history_out_of_range : {"ignore", "error"}
        Token ids outside ``[0, V)`` in prompt/generated histories.
    min_length_counts_prompt : bool
        Whether ``min_length`` counts prompt tokens as well as generated ones.
    temperature_first : bool
        Temperature is applied before the filters (every engine here but
        llama.cpp, whose chain puts it last).
    filter_order : tuple of str
        Order of ``"min_p"``, ``"top_k"``, ``"top_p"`` after temperature.
    filters_renormalise : bool
        Each filter sees the renormalised survivors of the previous one
        (trtllm fused op) rather than the original distribution (joint).
    top_k_ties : {"keep_all", "exactly_k"}
        Tokens tied with the k-th largest value: all kept, or exactly k.
    top_p_rule : {"mass_above", "ascending_cumsum"}
        ``"mass_above"``: keep a token iff the mass strictly above it is
        ``< top_p`` (ties at the boundary kept; FlashInfer's rule).
        ``"ascending_cumsum"``: sort ascending (stable), remove tokens whose
        inclusive cumulative mass is ``<= 1 - top_p``, always keep the last
        (Hugging Face ``TopPLogitsWarper``; vLLM's native path).
    rng : {"canonical", "other"}
        ``"canonical"``: draws follow DESIGN.md decision 1, so stochastic
        tokens are comparable token for token. ``"other"``: only support and
        distribution can be compared.
    raw_logprobs_stage : {"after_rewrites", "before_processing"}
        Which logits RAW logprobs are the ``log_softmax`` of (at T = 1).
    rank_rule : {"strict_plus_one", "greater_equal"}
        Rank of a token: 1 + #tokens with strictly greater logprob, or the
        number of tokens with logprob ``>=`` it.
    finish_order : tuple of str
        Precedence of ``"end_id"``, ``"length"``, ``"stop_words"``.
    stop_words_see_prompt : bool
        Whether a stop word may straddle the prompt/generated boundary.
    global_seed : int
        Seed of unseeded rows (§1.6).
    unseeded_offset_base : int
        First Philox offset of unseeded rows (§1.6: ``2**62``).
    citations : dict
        Field name → where the value was read (seed section,
        ``repo:path@version`` or bug URL).
    """

    name: str
    description: str
    mode_source: str = "params"
    greedy_when_unset: bool = True
    explicit_greedy: frozenset = frozenset({"top_k_1", "top_p_0", "min_p_1", "temperature_0"})
    min_p_forces_sampling: bool = True
    top_p_decay_forces_sampling: bool = True
    temperature_zero: str = "greedy"
    top_p_zero_valid: bool = True
    top_k_disabled_below: int = 0
    validate_penalties: bool = True
    rewrite_order: tuple = ("logit_bias", "repetition", "presence_frequency",
                            "min_length", "bad_words", "no_repeat_ngram")
    presence_counts_prompt: bool = True
    penalty_clamp_finite: bool = True
    history_out_of_range: str = "ignore"
    min_length_counts_prompt: bool = False
    temperature_first: bool = True
    filter_order: tuple = ("min_p", "top_k", "top_p")
    filters_renormalise: bool = True
    top_k_ties: str = "keep_all"
    top_p_rule: str = "mass_above"
    rng: str = "canonical"
    raw_logprobs_stage: str = "after_rewrites"
    rank_rule: str = "strict_plus_one"
    finish_order: tuple = ("end_id", "length", "stop_words")
    stop_words_see_prompt: bool = True
    global_seed: int = 42
    unseeded_offset_base: int = 1 << 62
    citations: dict = field(default_factory=dict, compare=False, hash=False)

    def semantic_fields(self) -> dict:
        """Return ``{field: value}`` for every semantic field.

        Excludes ``name``, ``description`` and ``citations``. Used by
        :func:`profile_diff` and the report's profile table.
        """
        skip = {"name", "description", "citations"}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in skip}


#: Default profile: TensorRT-LLM's PyTorch sampler (fused production path).
TRTLLM = Profile(
    name="trtllm",
    description="TensorRT-LLM PyTorch sampler, fused path (the default profile)",
    citations={
        "explicit_greedy": f"{SEED_TRTLLM} § 采样参数 (greedy inference rules); SEMANTICS §1.1",
        "greedy_when_unset": f"{SEED_TRTLLM} § 采样参数; SEMANTICS §1.1 rule 3",
        "min_p_forces_sampling": "SEMANTICS §1.1 rule 3",
        "top_p_decay_forces_sampling": "SEMANTICS §1.1 rule 3",
        "rewrite_order": f"{SEED_TRTLLM} § 三处 logits 改写,顺序不能错",
        "presence_counts_prompt": "SEMANTICS §1.3 (prompt tokens count, after prompt_ignore_length)",
        "penalty_clamp_finite": f"{SEED_TRTLLM} § 罚项 (occurrence_penalized_logits clamp)",
        "filter_order": "SEMANTICS §1.5 (fused op: min_p first)",
        "top_k_ties": "SEMANTICS §1.5",
        "top_p_rule": "SEMANTICS §1.5 (FlashInfer's rule, adopted by the reference)",
        "rng": "DESIGN.md decision 1",
        "raw_logprobs_stage": f"{SEED_TRTLLM} § 概率输出的两种口径 (RAW gathered from the in-place rewritten logits)",
        "rank_rule": "SEMANTICS §1.7",
        "finish_order": f"{SEED_TRTLLM} § 结束判定 (END_ID, then LENGTH, then STOP_WORDS)",
        "global_seed": f"{SEED_TRTLLM} § 三套计数器 (_SeedManager)",
        "unseeded_offset_base": f"{SEED_TRTLLM} § 三套计数器 (UNSEEDED_OFFSET_BASE = 1 << 62)",
    },
)

_HF_SRC = "huggingface/transformers:src/transformers/generation/logits_process.py@v5.24.0"
_HF_UTILS = "huggingface/transformers:src/transformers/generation/utils.py@v5.24.0"
_HF_CFG = "huggingface/transformers:src/transformers/generation/configuration_utils.py@v5.24.0"

#: Hugging Face transformers 5.x ``generate`` logits processors and warpers.
HF = dataclasses.replace(
    TRTLLM,
    name="hf",
    description="Hugging Face transformers 5.x logits processors, warpers and multinomial sampling",
    mode_source="do_sample",
    explicit_greedy=frozenset(),
    min_p_forces_sampling=False,
    top_p_decay_forces_sampling=False,
    temperature_zero="error",
    top_p_zero_valid=True,
    validate_penalties=True,
    rewrite_order=("logit_bias", "repetition", "no_repeat_ngram", "bad_words", "min_length"),
    presence_counts_prompt=False,
    penalty_clamp_finite=False,
    filter_order=("top_k", "top_p", "min_p"),
    top_p_rule="ascending_cumsum",
    rng="other",
    raw_logprobs_stage="after_rewrites",
    citations={
        "mode_source": f"{_HF_CFG} (do_sample=False is greedy decoding)",
        "explicit_greedy": f"{_HF_UTILS} (_get_logits_processor: no parameter value switches to greedy)",
        "min_p_forces_sampling": f"{_HF_CFG} (do_sample decides)",
        "top_p_decay_forces_sampling": f"{_HF_CFG} (no top-p decay)",
        "temperature_zero": f"{_HF_SRC} TemperatureLogitsWarper (strictly positive float required)",
        "rewrite_order": f"{_HF_UTILS} _get_logits_processor",
        "presence_counts_prompt": "n/a: transformers has no presence/frequency penalty",
        "penalty_clamp_finite": f"{_HF_SRC} RepetitionPenaltyLogitsProcessor (plain torch.where, no clamp)",
        "filter_order": f"{_HF_UTILS} _get_logits_processor (temperature, top-k, top-p, min-p)",
        "top_p_rule": f"{_HF_SRC} TopPLogitsWarper (ascending cumsum <= 1 - top_p removed)",
        "rng": f"{_HF_UTILS} _sample (torch.multinomial)",
        "raw_logprobs_stage": f"{_HF_UTILS} _sample (output_logits are the processed scores' inputs)",
    },
)

PROFILES = {p.name: p for p in (TRTLLM, HF)}


def get_profile(name: str) -> Profile:
    """Return the registered profile called ``name``.

    Raises
    ------
    KeyError
        If no profile has that name; the message lists the known ones.
    """
    try:
        return PROFILES[name]
    except KeyError:
        raise KeyError(f"unknown profile {name!r}; known: {', '.join(sorted(PROFILES))}") from None


def profile_diff(a: Profile, b: Profile) -> list[str]:
    """Return the names of the semantic fields whose values differ between two profiles."""
    fa, fb = a.semantic_fields(), b.semantic_fields()
    return [k for k in fa if fa[k] != fb[k]]
