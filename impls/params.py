"""The parameter registry: every field a case can give a row or a request, declared once.

Each :class:`Param` says its name, its TOML type and JSON schema, what leaving it unset
means, the feature a case using it must declare, the error kinds its validation raises
and the rule (with its SEMANTICS section), a one-line doc and the source of the rule.
From these declarations come:

* :class:`impls.base.Row` (:func:`row_fields`: the dataclass fields, in order);
* the case loader's schema of a row and of a scenario request
  (:func:`row_schema`, :func:`request_schema`) and the feature each field needs
  (:func:`field_feature`);
* the feature list (:data:`FEATURES`, ``cases/features.txt``) and the error kinds
  (:data:`ERRORS`);
* the field tables of ``cases/README.md`` and the field list of ``sampcheck case new``'s
  template (:func:`markdown_table`, :func:`template_comment`), written by
  ``sampcheck docs`` and checked by a test.

Adding a row parameter that only the reference understands is one :class:`Param` in
:data:`PARAMS` plus its rule's code in :mod:`impls.reference` (which reads it by name,
``row.<name>``). This module imports nothing of the project but :mod:`impls.processors`
(the registry of custom logits processor kinds, which imports nothing of the project): the
lowest layer of :mod:`impls`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
import numbers
from typing import Any, Callable, Optional, Union

from . import processors as _processors

__all__ = ["Param", "PARAMS", "FEATURES", "ERRORS", "param", "row_fields", "row_schema", "request_schema", "not_a_number",
           "field_feature", "step_fields", "request_fields", "markdown_table", "template_comment",
           "parse_seed", "end_id_set", "SCOPES", "bitmask_words", "bitmask_word_count", "bitmask_allows",
           "MAX_VOCAB", "MAX_N", "MAX_SEED_CHARS", "GENERATOR", "MODEL", "LOGPROBS_MODES"]

#: Where a field may appear: ``row`` (single-step rows, their ``defaults``, and scenario
#: requests), ``step`` (single-step rows only: the logits, the history and the slot of one
#: step are the scenario's business), ``request`` (scenario requests only; not a
#: :class:`~impls.base.Row` field), ``internal`` (set by the harness, never by a case).
SCOPES = ("row", "step", "request", "internal")

#: The fixed feature list, in order (``cases/features.txt`` is generated from it): what an
#: implementation must express to run a case (unsupported: ``n/a``). Feature -> what it covers.
FEATURES = {
    "temperature": "temperature scaling (SEMANTICS §1.1, §1.5)",
    "top_k": "top-k filtering",
    "top_p": "top-p (nucleus) filtering",
    "min_p": "min-p filtering",
    "top_p_decay": "TensorRT-LLM's top-p decay across steps (§2)",
    "beam_search": "beam search (§3)",
    "repetition_penalty": "the multiplicative repetition penalty (§1.3)",
    "presence_penalty": "the additive presence penalty (§1.3)",
    "frequency_penalty": "the additive frequency penalty (§1.3)",
    "prompt_ignore_length": "a prompt prefix the penalties ignore (§1.3)",
    "penalty_last_n": "a window of the most recent tokens the penalties count (§1.3; llama.cpp)",
    "min_keep": "the least tokens top-p, min-p, typical-p and XTC keep (§1.5; llama.cpp)",
    "typical_p": "locally typical sampling (§1.5; llama.cpp, transformers)",
    "top_n_sigma": "top-n-sigma: logits within n standard deviations of the largest (§1.5; llama.cpp)",
    "xtc": "exclude top choices: the likely tokens but the least likely of them removed, at random (§1.5; llama.cpp)",
    "dynatemp": "dynamic temperature from the entropy of the kept tokens (§1.5; llama.cpp)",
    "dry": "DRY: a penalty on the token that would extend a repetition of the history's end (§1.3; llama.cpp)",
    "mirostat": "mirostat v1/v2: a kept set steered by a per-slot surprise target mu across steps (§1.5a; llama.cpp)",
    "logit_bias": "a sparse additive logit bias (§1.2)",
    "min_length": "banning the end id before a minimum length (§1.4)",
    "bad_words": "banned token sequences (§1.4)",
    "allowed_token_ids": "a whitelist: every token not listed is banned (§1.4a; vLLM)",
    "token_bitmask": "a structured-output (grammar) bitmask: packed int32 words, a 0 bit bans its token (§1.4a)",
    "logits_processors": "custom logits processors named from impls/processors.py, with per-request state (§1.4b)",
    "no_repeat_ngram": "no-repeat n-gram bans (§1.4)",
    "end_id": "an end (EOS) id (§1.8)",
    "end_id_set": "an EOS set: end_id given as an array of ids, any of which ends the request (§1.4, §1.8)",
    "ignore_eos": "generation past the end id (§1.8)",
    "stop_words": "stop sequences (§1.8)",
    "stop_strings": "stop strings matched on the text of a toy tokenizer defined in the case, spanning tokens (§1.8a)",
    "max_new_tokens": "a limit on generated tokens (§1.8)",
    "max_seq_len": "a limit on prompt plus generated tokens (§1.8)",
    "seed": "per-request seeds (§1.6)",
    "n": "parallel sampling: one request fans out into n children, each its own sequence (§2a)",
    "logprobs": "logprobs of the sampled token, rank and top logprobs, or of the whole vocabulary (§1.7)",
    "logprobs_mode": "which logits the returned logprobs are read from: raw or processed, normalised or not (§1.7)",
    "logprob_token_ids": "the logprobs of given token ids, whatever was sampled (§1.7)",
    "processed_logits": "the logits after bias, penalties and bans, as an output (§1.2)",
    "canonical_rng": "the canonical Philox draw, token for token (DESIGN.md decision 1)",
    "low_precision_logits": "logits handed over in bfloat16 or float16 (§1)",
    "finish_reason": "finish reasons as an output (§1.8)",
}

#: Every per-row error kind, in order: kind -> when it is raised. A row rejected with one
#: of these carries it instead of a token (DESIGN.md, "Per-row errors").
ERRORS = {
    "invalid_temperature": "a temperature the profile rejects",
    "invalid_top_p": "a top_p the profile rejects",
    "invalid_top_k": "a top_k the profile rejects",
    "invalid_min_p": "a min_p outside [0, 1] or NaN",
    "invalid_penalty": "a NaN penalty, a repetition penalty <= 0, or one outside the profile's bound",
    "invalid_sampler_param": "a NaN or out-of-domain min_keep, typical_p, top_n_sigma, XTC, dynamic-temperature or DRY value",
    "invalid_top_p_decay": "a top_p_decay outside (0, 1], or an active decay with beam search or drafts",
    "invalid_top_p_min": "a top_p_min outside (0, 1]",
    "invalid_seed": "a seed that is not an integer in [-2**63, 2**64)",
    "invalid_length": "a negative length limit, or limits the profile finds inconsistent",
    "invalid_end_id": "an end id (or an id of an EOS set) outside [-1, V)",
    "invalid_bad_words": "an empty bad word or an id outside [0, V)",
    "invalid_stop_words": "an empty stop word or stop string, or an id outside [0, V)",
    "invalid_allowed_token_ids": "an empty allowed_token_ids list or an id outside [0, V)",
    "invalid_token_bitmask": "a token_bitmask of fewer than ceil(V / 32) words (a row given through the API)",
    "invalid_logit_bias": "a logit bias id outside [0, V) or a NaN bias",
    "invalid_token_id": "a history id the profile rejects",
    "invalid_logprobs": "a logprobs count below -1, or a logprob_token_ids id outside [0, V)",
    "nan_logits": "NaN logits (input, or produced by a rewrite)",
    "posinf_logits": "a +inf logit in a sampling row",
    "no_valid_token": "every token -inf after bias, penalties and bans",
    "duplicate_slot": "a slot used twice in one step, or still held by a running request",
    "bad_logits": "logits that are not one row of numbers",
    "invalid_beam_width": "a beam width outside [1, max_beam_width]",
    "invalid_d2t": "a draft-to-target table on a request that does not decode greedily",
    "invalid_draft": "draft tokens outside the vocabulary, or drafts with beam search",
    "invalid_n": "n > 1 on a request that decodes greedily, where the profile rejects it (n_greedy)",
}


def parse_seed(value) -> int:
    """A TOML seed (an integer, or a decimal or ``0x`` string for seeds >= 2**63) as a Python int.

    Raises
    ------
    ValueError
        ``not an integer: <value>``.
    """
    try:
        if isinstance(value, str):
            return int(value, 16) if value.lower().startswith("0x") else int(value)
        return int(value)
    except ValueError:
        raise ValueError(f"not an integer: {value!r}") from None


def _pairs(value) -> list:
    return [(int(t), float(v)) for t, v in value]


def _is_id_list(value) -> bool:
    return isinstance(value, (list, tuple))


def _end_id(value):
    # An int stays an int (every adapter written for one id keeps working); an array (an EOS
    # set) becomes a tuple of ints, in the order given.
    return tuple(int(t) for t in value) if _is_id_list(value) else value


def bitmask_words(value) -> tuple:
    """A TOML ``token_bitmask`` as a tuple of uint32 words (int32 words read as their 32 bits).

    Raises
    ------
    ValueError
        A word that is not an integer in ``[-2**31, 2**32)``.
    """
    out = []
    for j, w in enumerate(value):
        if isinstance(w, bool) or not isinstance(w, int) or not -(1 << 31) <= w < (1 << 32):
            raise ValueError(f"word {j} = {w!r}: each word must be an integer in [-2**31, 2**32) (an int32 or "
                             "uint32 bit pattern)")
        out.append(w & 0xFFFFFFFF)
    return tuple(out)


def bitmask_word_count(vocab: int) -> int:
    """Words of a token bitmask over ``vocab`` tokens: ``ceil(vocab / 32)`` (xgrammar's ``bitmask_size``)."""
    return (int(vocab) + 31) // 32


def _bitmask_vocab_check(value, vocab: int) -> Optional[str]:
    n = bitmask_word_count(vocab)
    if len(value) != n:
        return f"has {len(value)} words; a vocabulary of {vocab} tokens needs ceil({vocab} / 32) = {n}"
    return None


def bitmask_allows(words, vocab: int) -> list:
    """The token ids a packed bitmask allows: bit ``j % 32`` of word ``j // 32`` set.

    Parameters
    ----------
    words : sequence of int
        uint32 words (:func:`bitmask_words`), ``ceil(vocab / 32)`` of them.
    vocab : int

    Returns
    -------
    list of int
        Ascending ids in ``[0, vocab)``.

    Source: xgrammar 0.2.8 ``apply_token_bitmask_inplace`` (matcher.py: "0 means the token is
    masked"; ``get_bitmask_value(bitmask, i, j)`` is the j-th bit of row i), the kernel vLLM
    0.32.0 (v1/structured_output/utils.py ``apply_grammar_bitmask``) and SGLang 0.5.23
    (constrained/xgrammar_backend.py ``apply_vocab_mask``) call.
    """
    return [j for j in range(int(vocab)) if (int(words[j >> 5]) >> (j & 31)) & 1]


def end_id_set(value) -> tuple:
    """The EOS set an ``end_id`` value names: its ids in the order given, without ``-1`` or repeats.

    Parameters
    ----------
    value : None, int, or sequence of int
        A row's ``end_id``: None (unset), one id (``-1``: none), or an array of ids (an
        EOS set; a ``-1`` in it names no token and is dropped).

    Returns
    -------
    tuple of int
        ``()`` when no end id is set; ``(id,)`` for an int; the distinct ids of an array,
        first occurrence first. Ids outside ``[0, V)`` other than ``-1`` are kept (a
        profile whose validation skips ``end_id_range`` accepts them): they never match a
        token and ban nothing. The first id is the one an engine with a single EOS id
        gets as that id (vLLM's ``eos_token_id``; SEMANTICS §1.8).
    """
    if value is None:
        return ()
    ids = value if _is_id_list(value) else (value,)
    return tuple(dict.fromkeys(int(t) for t in ids if int(t) != -1))


@dataclass(frozen=True)
class Param:
    """One field a case can set on a row or a request.

    Attributes
    ----------
    name : str
        The TOML key, and the :class:`~impls.base.Row` attribute (``row.<name>``).
    schema : dict
        JSON schema of the TOML value (the case loader's).
    type : str
        The type as ``cases/README.md`` shows it.
    doc : str
        One line: what it is.
    unset : str
        What leaving it out means ("" when nothing special: the rule is off).
    feature : str or None
        The feature (:data:`FEATURES`) a case using it must declare.
    errors : tuple of str
        Error kinds (:data:`ERRORS`) its validation can raise.
    rule : str
        The validation rule in words, with its SEMANTICS section.
    citation : str
        Where the rule comes from (seed section, ``repo:path@version``), "" for plain inputs.
    scope : str
        One of :data:`SCOPES`.
    annotation : object
        The Row field's type annotation.
    default : object
        The Row field's value when the case leaves it out (``None``: unset).
    factory : callable or None
        For a mutable default (``list``).
    convert : callable or None
        TOML value -> Row value (may raise ``ValueError`` with the reason).
    feature_when : callable or None
        ``feature_when(value) -> bool``: the feature is needed only for such values
        (``logits_dtype``: not float32); None: whenever the field is set.
    value_features : tuple of (str, callable, str)
        ``(feature, when, words)`` triples: a value for which ``when(value)`` holds needs
        ``feature`` instead of :attr:`feature` (the first triple that holds wins);
        ``words`` names those values in the docs table (``end_id``: an array needs
        ``end_id_set``).
    vocab_check : callable or None
        ``vocab_check(value, V) -> str or None``: a reason the TOML value cannot belong to a
        row of vocabulary ``V`` (the case loader's error; ``token_bitmask``: the word count),
        or None.
    """

    name: str
    schema: dict
    type: str
    doc: str
    unset: str = ""
    feature: Optional[str] = None
    errors: tuple = ()
    rule: str = ""
    citation: str = ""
    scope: str = "row"
    annotation: Any = Any
    default: Any = None
    factory: Optional[Callable] = None
    convert: Optional[Callable] = None
    feature_when: Optional[Callable] = None
    value_features: tuple = ()
    vocab_check: Optional[Callable] = None

    @property
    def row_field(self) -> bool:
        """Whether it is an attribute of :class:`~impls.base.Row` (every scope but ``request``; not ``logits_dtype``)."""
        return self.scope != "request" and self.name != "logits_dtype"


_NUM = {"type": "number"}
_INT = {"type": "integer"}
#: The values of a row's ``logprobs_mode`` (vLLM's ``LogprobsMode``, v1/sample/sampler.py@v0.32.0).
LOGPROBS_MODES = ("raw_logprobs", "raw_logits", "processed_logprobs", "processed_logits")
_BOOL = {"type": "boolean"}
_INTS = {"type": "array", "items": _INT}
_WORDS = {"type": "array", "items": _INTS}
#: ``[[id, value], ...]``: a token id (an integer: a TOML float such as ``0.7`` is refused, never
#: truncated) and a number.
_PAIRS = {"type": "array", "items": {"type": "array", "minItems": 2, "items": [_INT, _NUM], "additionalItems": False}}
#: The largest vocabulary of one row (a generator's ``vocab``; cases/README.md, "Limits").
MAX_VOCAB = 1 << 20
#: The most children a request may fan out into (``n``): a statistical check over children needs 1000
#: (cases/README.md, "Statistical scenarios"); vLLM's own limit is ``VLLM_MAX_N_SEQUENCES`` (16384).
MAX_N = 1024
#: The longest seed written as a string (``"0x"`` and 16 hex digits, or 20 decimal digits, hold any
#: seed in ``[-2**63, 2**64)``; the row's rule rejects larger ones at run time, as ``invalid_seed``).
MAX_SEED_CHARS = 64
#: A generated row of logits (cases/README.md, "Generated logits"). ``seed`` is NumPy's
#: ``default_rng`` seed, which must be >= 0; ``low``/``high`` are checked by the loader
#: (finite, ``low <= high``: NumPy refuses the rest only when the row is built).
GENERATOR = {
    "type": "object",
    "required": ["dist", "vocab"],
    "additionalProperties": False,
    "properties": {
        "dist": {"enum": ["normal", "uniform", "constant"]},
        "vocab": {"type": "integer", "minimum": 1, "maximum": MAX_VOCAB},
        "seed": {"type": "integer", "minimum": 0}, "sigma": _NUM, "mean": _NUM, "low": _NUM, "high": _NUM, "value": _NUM,
        "set": _PAIRS,
    },
}
_SEED = "seed:000_fabad194daba9a8c.txt"
_LLAMA = "abetlen/llama-cpp-python:vendor/llama.cpp/src/llama-sampler.cpp@v0.3.36"
_LOGITS_ROW = {"type": "array", "minItems": 1, "items": _NUM}


def _model_kind(kind: str, required: list, props: dict) -> dict:
    return {"if": {"required": ["kind"], "properties": {"kind": {"const": kind}}},
            "then": {"required": required, "additionalProperties": False, "properties": {"kind": {}, **props}}}


#: A scripted model table (cases/README.md, "Models"; :func:`impls.reference.scripted.make_model`):
#: each kind's fields, typed (a TOML float is never taken for a token id, a vocab or a seed).
MODEL = {"type": "object", "required": ["kind"], "properties": {"kind": {"enum": ["table", "context", "toy"]}},
         "allOf": [
             _model_kind("table", ["steps"], {"steps": {"type": "array", "minItems": 1, "items": _LOGITS_ROW},
                                              "after_last": {"enum": ["repeat", "error"]}}),
             _model_kind("context", ["default"], {"default": _LOGITS_ROW, "rules": {"type": "array", "items": {
                 "type": "object", "required": ["after", "logits"], "additionalProperties": False,
                 "properties": {"after": _INTS, "logits": _LOGITS_ROW}}}}),
             _model_kind("toy", ["vocab", "seed"], {
                 "vocab": {"type": "integer", "minimum": 1, "maximum": MAX_VOCAB},
                 "seed": {"type": "integer", "minimum": 0}, "n": {"type": "integer", "minimum": 0},
                 "sigma": _NUM, "mean": _NUM, "set": _PAIRS}),
         ]}
_O = Optional

#: Every field, in :class:`~impls.base.Row` order (request-only fields last).
PARAMS = (
    Param("logits", {"if": {"type": "array"}, "then": {"minItems": 1, "items": _NUM}, "else": GENERATOR},
          "array of floats (`inf`, `-inf`, `nan` allowed) or a generator table",
          "the row's logits over the vocabulary; its length is the vocabulary V", scope="step",
          errors=("nan_logits", "posinf_logits", "bad_logits"),
          rule="1-D; NaN rejected (nan_logits; a greedy row may hold NaN where the profile's greedy_degenerate "
               "says argmax, a sampling row where its nan_logits says first_unmasked); +inf rejected in a sampling row (posinf_logits), or taken with probability 1 where the profile's posinf_logits says argmax (SEMANTICS §1, §5)", annotation="torch.Tensor"),
    Param("logits_dtype", {"enum": ["float32", "bfloat16", "float16"]}, '`"float32"` (default), `"bfloat16"`, '
          '`"float16"`', "the dtype the logits are handed over in", unset="float32",
          feature="low_precision_logits", feature_when=lambda v: v != "float32", scope="step"),
    Param("temperature", _NUM, "float", "temperature: the logits are divided by it before the filters",
          unset="not given: with top_k and top_p also unset, the row is greedy under profiles with "
                "greedy_when_unset (§1.1 rule 3); a sampling row then uses 1",
          feature="temperature", errors=("invalid_temperature",),
          rule=">= 0 (vllm: in [0, 2]); 0 is greedy where the profile lists it (§1.1 rules 2, 5); a sampling "
               "row with 0 is invalid_temperature under temperature_zero = 'error'",
          citation=f"{_SEED} § 采样参数", annotation=_O[float]),
    Param("top_k", _INT, "int", "keep the k most likely tokens (ties at the k-th kept where the profile says so)",
          unset="no top-k (the profile's unset_top_k: 50 for hf)", feature="top_k", errors=("invalid_top_k",),
          rule=">= 0 (vllm: >= -1); 0 and k >= V are off; 1 is greedy under trtllm (§1.1, §1.5)",
          citation=f"{_SEED} § 采样参数", annotation=_O[int]),
    Param("top_p", _NUM, "float", "keep the most likely tokens up to this probability mass",
          unset="no top-p", feature="top_p", errors=("invalid_top_p",),
          rule="in [0, 1] (vllm: (0, 1]); 1 is off; 0 is greedy under trtllm (§1.1, §1.5)",
          citation=f"{_SEED} § 采样参数", annotation=_O[float]),
    Param("min_p", _NUM, "float", "drop tokens whose probability is below min_p times the largest",
          unset="no min-p", feature="min_p", errors=("invalid_min_p",),
          rule="in [0, 1]; 0 is off; 1 is greedy under trtllm; alone it forces sampling (§1.1 rule 3, §1.5)",
          citation=f"{_SEED} § 采样参数", annotation=_O[float]),
    Param("top_p_decay", _NUM, "float", "TensorRT-LLM's top-p decay: top_p shrinks by this factor per token",
          unset="no decay", feature="top_p_decay", errors=("invalid_top_p_decay",),
          rule="in (0, 1]; 1 is a no-op; rejected with beam search (§2)", citation=f"{_SEED} § Top-P Decay",
          annotation=_O[float]),
    Param("top_p_min", _NUM, "float", "the floor of the decayed top-p", unset="1e-6", feature="top_p_decay",
          errors=("invalid_top_p_min",), rule="in (0, 1] (§2)", citation=f"{_SEED} § Top-P Decay",
          annotation=_O[float]),
    Param("top_p_reset_ids", _INTS, "array of int", "tokens that reset the decayed top-p to its start",
          feature="top_p_decay", rule="§2", citation=f"{_SEED} § Top-P Decay", annotation=_O[list]),
    Param("use_beam_search", _BOOL, "bool", "decode with beam search (a one-step row: the argmax of "
          "log_softmax(x / T))", unset="false", feature="beam_search", rule="§1.1 rule 1, §3",
          annotation=bool, default=False),
    Param("do_sample", _BOOL, "bool", "Hugging Face's switch between greedy and sampling; other profiles ignore it",
          unset="false for a spelling in the profile's explicit_greedy (hf: temperature 0), else any of "
          "temperature, top_k, top_p, min_p set (profiles with mode_source = 'do_sample')",
          rule="§1.1", annotation=_O[bool]),
    Param("repetition_penalty", _NUM, "float", "divide a seen token's positive logit by it, multiply a negative one",
          unset="off", feature="repetition_penalty", errors=("invalid_penalty",),
          rule="> 0 and not NaN; 1 is off (§1.3)", citation=f"{_SEED} § 罚项", annotation=_O[float]),
    Param("presence_penalty", _NUM, "float", "subtract it from the logit of every seen token", unset="off",
          feature="presence_penalty", errors=("invalid_penalty",),
          rule="not NaN (vllm: in [-2, 2]); 0 is off (§1.3)", citation=f"{_SEED} § 罚项", annotation=_O[float]),
    Param("frequency_penalty", _NUM, "float", "subtract it times a token's count from its logit", unset="off",
          feature="frequency_penalty", errors=("invalid_penalty",),
          rule="not NaN (vllm: in [-2, 2]); 0 is off (§1.3)", citation=f"{_SEED} § 罚项", annotation=_O[float]),
    Param("prompt_ignore_length", _INT, "int", "a prompt prefix the penalties do not count", unset="0",
          feature="prompt_ignore_length", rule="<= 0 has no effect; which penalty it applies to is the profile's "
          "prompt_ignore_length_scope (§1.3)", annotation=_O[int]),
    Param("penalty_last_n", _INT, "int", "only the last n tokens of the history (prompt then generated) count for "
          "the repetition, presence and frequency penalties", unset="the whole history",
          feature="penalty_last_n", errors=("invalid_penalty",),
          rule=">= 0; 0 turns the three penalties off; the window is taken before each penalty's own scope "
               "(presence_counts_prompt, prompt_ignore_length) (§1.3)",
          citation="ggml-org/llama.cpp:src/llama-sampling.cpp@0344068c llama_sampler_init_penalties, "
                   "llama_sampler_penalties_accept, llama_sampler_penalties_apply (a ring buffer of the last "
                   "penalty_last_n accepted tokens; 0 disables; init clamps a negative value to 0)",
          annotation=_O[int]),
    Param("min_keep", _INT, "int", "the least tokens top-p, min-p, typical-p and XTC keep", unset="0 (the filters "
          "keep at least one token anyway)", feature="min_keep", errors=("invalid_sampler_param",),
          rule=">= 0 (§1.5); top-k and top-n-sigma ignore it", annotation=_O[int],
          citation=f"{_LLAMA} llama_sampler_top_p_apply, llama_sampler_min_p_apply, llama_sampler_typical_apply, "
                   "llama_sample_xtc_apply (min_keep bounds each cut)"),
    Param("typical_p", _NUM, "float", "locally typical sampling: keep the tokens whose surprise is closest to the "
          "entropy, up to this probability mass", unset="off (1.0)", feature="typical_p",
          errors=("invalid_sampler_param",),
          rule="in (0, 1]; 1 is off; the boundary is the profile's typical_p_rule (§1.5)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sampler_typical_apply; huggingface/transformers:src/transformers/generation/"
                   "logits_process.py@v5.24.0 TypicalLogitsWarper"),
    Param("top_n_sigma", _NUM, "float", "keep the tokens whose logit is at least max - n * sigma (sigma: the "
          "population standard deviation of the finite logits)", unset="off", feature="top_n_sigma",
          errors=("invalid_sampler_param",), rule="not NaN; <= 0 is off (§1.5)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sampler_top_n_sigma_apply"),
    Param("xtc_probability", _NUM, "float", "XTC: the chance, per step, that the likely tokens but the least "
          "likely of them are removed", unset="off (0)", feature="xtc", errors=("invalid_sampler_param",),
          rule="in [0, 1]; 0 is off; the coin is drawn from the row's stream (§1.5)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sample_xtc_apply"),
    Param("xtc_threshold", _NUM, "float", "XTC: a token is likely when its probability is at least this",
          unset="0.1", feature="xtc", errors=("invalid_sampler_param",),
          rule="not NaN; above 0.5 XTC is off (§1.5)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sample_xtc_apply; ggml-org/llama.cpp common/common.h (xtc_threshold = 0.10f)"),
    Param("dynatemp_range", _NUM, "float", "dynamic temperature: the temperature moves within temperature +- range "
          "with the normalised entropy of the kept tokens", unset="off (0)", feature="dynatemp",
          errors=("invalid_sampler_param",), rule="not NaN; <= 0 is off (§1.5)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sampler_temp_ext_apply"),
    Param("dynatemp_exponent", _NUM, "float", "dynamic temperature: the normalised entropy is raised to this power",
          unset="1.0", feature="dynatemp", errors=("invalid_sampler_param",), rule="not NaN (§1.5)",
          annotation=_O[float], citation=f"{_LLAMA} llama_sampler_temp_ext_apply"),
    Param("dry_multiplier", _NUM, "float", "DRY: the penalty's scale; the token that would extend a repetition "
          "of n tokens loses multiplier * base ** (n - allowed_length)", unset="off (0)", feature="dry",
          errors=("invalid_sampler_param",), rule="not NaN; 0 is off (§1.3)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sampler_dry_apply"),
    Param("dry_base", _NUM, "float", "DRY: the base of the penalty's growth with the repetition's length",
          unset="1.75", feature="dry", errors=("invalid_sampler_param",), rule="not NaN; below 1 DRY is off (§1.3)",
          annotation=_O[float], citation=f"{_LLAMA} llama_sampler_init_dry; common/common.h (dry_base = 1.75f)"),
    Param("dry_allowed_length", _INT, "int", "DRY: repetitions shorter than this are not penalised", unset="2",
          feature="dry", annotation=_O[int], citation=f"{_LLAMA} llama_sampler_dry_apply; common/common.h"),
    Param("dry_penalty_last_n", _INT, "int", "DRY: how many of the most recent tokens (prompt then generated) "
          "are scanned", unset="the whole history", feature="dry", errors=("invalid_sampler_param",),
          rule=">= 0; 0 is off (§1.3)", annotation=_O[int], citation=f"{_LLAMA} llama_sampler_init_dry"),
    Param("dry_sequence_breakers", _WORDS, "array of arrays of int", "DRY: token sequences a repetition may not "
          "reach across (a one-token breaker is never penalised itself)", feature="dry",
          rule="each a non-empty token-id sequence (§1.3); llama.cpp takes strings through a model's vocabulary",
          annotation=list, factory=list, citation=f"{_LLAMA} llama_sampler_dry_apply (restart sequences)"),
    Param("mirostat", {**_INT, "minimum": -(1 << 31), "maximum": (1 << 31) - 1}, "int",
          "mirostat version: 1 (mirostat, m = 100) or 2 (mirostat 2.0); the chain is then the logit bias, the "
          "temperature and mirostat alone (penalties, DRY and the other filters are not applied)",
          unset="off (0)", feature="mirostat", errors=("invalid_sampler_param",),
          rule="0, 1 or 2 (common_sampler_init aborts on any other version); mu starts at 2 * tau and moves after "
               "every sampled token, per slot (§1.5a)", annotation=_O[int],
          citation=f"{_LLAMA} llama_sampler_mirostat_apply, llama_sampler_mirostat_v2_apply; "
                   "abetlen/llama-cpp-python:vendor/llama.cpp/common/sampling.cpp@v0.3.36 common_sampler_init "
                   "(mirostat 1/2: temp then mirostat, m = 100)"),
    Param("mirostat_tau", _NUM, "float", "mirostat: the target surprise in bits (mu starts at 2 * tau)",
          unset="5.0", feature="mirostat", errors=("invalid_sampler_param",),
          rule="not NaN (llama.cpp takes any value); read only when mirostat is 1 or 2 (§1.5a)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sampler_init_mirostat, llama_sampler_init_mirostat_v2 (mu = 2.0f * tau); "
                   "abetlen/llama-cpp-python:vendor/llama.cpp/common/common.h@v0.3.36 common_params_sampling "
                   "(mirostat_tau = 5.00f)"),
    Param("mirostat_eta", _NUM, "float", "mirostat: the learning rate of mu (mu -= eta * (surprise - tau))",
          unset="0.1", feature="mirostat", errors=("invalid_sampler_param",),
          rule="not NaN (llama.cpp takes any value); 0 keeps mu at 2 * tau (§1.5a)", annotation=_O[float],
          citation=f"{_LLAMA} llama_sampler_mirostat_apply, llama_sampler_mirostat_v2_apply (the update of mu); "
                   "abetlen/llama-cpp-python:vendor/llama.cpp/common/common.h@v0.3.36 common_params_sampling "
                   "(mirostat_eta = 0.10f)"),
    Param("logit_bias", _PAIRS, "array of `[id, value]` pairs", "a sparse additive bias (may be -inf: a ban)",
          feature="logit_bias", errors=("invalid_logit_bias",),
          rule="ids in [0, V); NaN values rejected unless the profile skips the check; a token listed twice sums "
               "or keeps the last (logit_bias_duplicates) (§1.2)",
          citation=f"{_SEED} § 三处 logits 改写,顺序不能错", annotation=list, factory=list, convert=_pairs),
    Param("min_length", _INT, "int", "ban the end id (every id of an EOS set) while fewer tokens were generated",
          unset="0",
          feature="min_length", errors=("invalid_length",), rule=">= 0 (§1.4)", citation=f"{_SEED} § 罚项",
          annotation=_O[int]),
    Param("end_id", {"anyOf": [_INT, {"type": "array", "minItems": 1, "items": _INT}]},
          "int (`-1`: none), or array of int (an EOS set)",
          "the end (EOS) id, or an EOS set: sampling any id of it finishes the request", unset="no end id",
          feature="end_id", value_features=(("end_id_set", _is_id_list, "an array"),),
          errors=("invalid_end_id",),
          rule="each id -1 or in [0, V) (a -1 in an array names no token); min_length bans every id of the set; "
               "an id after the first finishes as end_id, or as a stop word under end_id_set_others_reason = "
               "'stop_words' (vllm) (§1.4, §1.8)",
          citation="vllm-project/vllm:vllm/sampling_params.py@v0.32.0 SamplingParams."
                   "update_from_generation_config; huggingface/transformers:src/transformers/generation/"
                   "stopping_criteria.py@v5.24.0 EosTokenCriteria",
          annotation=_O[Union[int, tuple]], convert=_end_id),
    Param("ignore_eos", _BOOL, "bool", "sampling the end id (any id of an EOS set) does not finish the request",
          unset="false",
          feature="ignore_eos", rule="§1.8", annotation=bool, default=False),
    Param("bad_words", _WORDS, "array of arrays of int", "token sequences never to complete (the last id is banned "
          "when the rest ends the history)", feature="bad_words", errors=("invalid_bad_words",),
          rule="each non-empty with ids in [0, V) (§1.4)", annotation=list, factory=list),
    Param("allowed_token_ids", _INTS, "array of int", "a whitelist: every token not listed is banned (-inf)",
          unset="every token allowed", feature="allowed_token_ids", errors=("invalid_allowed_token_ids",),
          rule="non-empty, ids in [0, V); applied at 'allowed_token_ids' in the profile's rewrite_order, so "
               "logprobs taken before it do not see it (§1.4a)",
          citation="vllm-project/vllm:vllm/sampling_params.py@v0.32.0 SamplingParams._validate_allowed_token_ids; "
                   "vllm/v1/sample/sampler.py@v0.32.0 Sampler.apply_logits_processors",
          annotation=_O[list]),
    Param("token_bitmask", {"type": "array", "minItems": 1, "items": _INT},
          "array of int (int32 words; uint32 values accepted)",
          "a structured-output (grammar) bitmask: bit j % 32 of word j // 32 allows token j; a 0 bit bans it",
          unset="no bitmask", feature="token_bitmask", scope="step", errors=("invalid_token_bitmask",),
          rule="exactly ceil(V / 32) words (a load error otherwise); applied where the profile's "
               "token_bitmask_stage says: to the model's logits before the sampler (every logprob sees it) or "
               "at 'token_bitmask' in its rewrite_order (§1.4a)",
          citation="vllm-project/vllm:vllm/v1/structured_output/utils.py@v0.32.0 apply_grammar_bitmask "
                   "(xgrammar apply_token_bitmask_inplace); sgl-project/sglang:python/sglang/srt/sampling/"
                   "sampling_batch_info.py@v0.5.23 SamplingBatchInfo.apply_logits_bias",
          annotation=_O[tuple], convert=bitmask_words, vocab_check=_bitmask_vocab_check),
    Param("logits_processors", _processors.SCHEMA, "array of tables `{kind = \"...\", ...}`",
          "custom logits processors (the kinds of impls/processors.py, with their arguments), applied in this order",
          unset="none", feature="logits_processors",
          rule="each a kind of impls/processors.py with its arguments (a load error otherwise: unknown kind or "
               "argument, a missing one, a NaN bias, a token id outside [0, V)); run at 'custom' in the profile's "
               "rewrite_order, the argmax-invariant kinds at 'custom' in its filter_order where it has one "
               "(after the temperature, sampling rows only); a stateful kind reads the request's steps so far, "
               "never its batch position (§1.4b)",
          citation="vllm-project/vllm:vllm/v1/sample/logits_processor/interface.py@v0.32.0 LogitsProcessor, "
                   "BatchUpdate; huggingface/transformers:src/transformers/generation/utils.py@v5.24.0 "
                   "GenerationMixin._get_logits_processor (logits_processor merged before the warpers)",
          annotation=_O[tuple], convert=_processors.parse, vocab_check=_processors.vocab_check),
    Param("stop_words", _WORDS, "array of arrays of int", "token sequences that finish the request",
          feature="stop_words", errors=("invalid_stop_words",), rule="each non-empty with ids in [0, V) (§1.8)",
          annotation=list, factory=list),
    Param("no_repeat_ngram_size", _INT, "int", "ban any token that would repeat an n-gram of the history",
          unset="off", feature="no_repeat_ngram", errors=("invalid_length",), rule=">= 0; 0 is off (§1.4)",
          annotation=_O[int]),
    Param("max_new_tokens", _INT, "int", "the most tokens generated", unset="no limit (the profile's "
          "unset_max_new_tokens: 20 for hf, 16 for vllm)", feature="max_new_tokens", errors=("invalid_length",),
          rule=">= 0 (hf, vllm: > 0) (§1.8)", annotation=_O[int]),
    Param("max_seq_len", _INT, "int", "the most tokens, prompt included", unset="no limit",
          feature="max_seq_len", errors=("invalid_length",), rule=">= 0 (§1.8)", annotation=_O[int]),
    Param("prompt", _INTS, "array of int", "the prompt: the history before the first generated token",
          errors=("invalid_token_id",), rule="ids outside [0, V) are ignored or rejected (history_out_of_range) "
          "(§1.3, §5)", annotation=list, factory=list),
    Param("generated", _INTS, "array of int", "the tokens generated before this step", scope="step",
          errors=("invalid_token_id",), rule="as prompt", annotation=list, factory=list),
    Param("seed", {"anyOf": [_INT, {"type": "string", "maxLength": MAX_SEED_CHARS,
                                     "pattern": "^(0[xX][0-9a-fA-F]+|-?[0-9]+)$"}]},
          'int, or a string `"0x..."`/decimal for seeds at or above `2**63`', "the request's seed",
          unset="unseeded: the global stream at the slot's offset (§1.6)", feature="seed", errors=("invalid_seed",),
          rule="an integer in [-2**63, 2**64), read as its uint64 bits (§1.6)", citation=f"{_SEED} § 三套计数器",
          annotation=_O[int], convert=parse_seed),
    Param("slot", {"type": "integer", "minimum": 0}, "int (a case row's default: its index in its batch; a Row "
          "made in Python: 0)",
          "the sequence slot: seed offsets and penalty state are per slot", errors=("duplicate_slot",),
          rule="one row per slot per step (§2)", annotation=int, default=0),
    Param("request_id", {}, "-", "the owner of the slot: a new owner restarts the slot's stream (§2)",
          scope="internal", annotation=Any),
    Param("draft_position", {}, "-", "speculative verification: the draft tokens ahead of this row in its request's "
          "chain (row i of a verification has i); counted by min_length only, never by the penalties or other bans",
          unset="0 (every row that is not a verification row)", rule="§1.4, §4",
          citation="vllm-project/vllm:vllm/v1/sample/logits_processor/builtin.py@v0.32.0 MinTokensLogitsProcessor."
                   "apply_with_spec_decode (draft position i masked iff current_len + i < min_tokens); "
                   "NVIDIA/TensorRT-LLM:tensorrt_llm/_torch/pyexecutor/sampler/token_ban.py@0a1f13c0 "
                   "TokenBanHandler._add_min_length_bans (step s banned iff generated + s < min_length)",
          scope="internal", annotation=int, default=0),
    Param("logprobs", {"type": "integer", "minimum": -1}, "int", "how many top logprobs to return (0: only the "
          "sampled token's; -1: every token's, as vocab_logprobs)", unset="none requested", feature="logprobs",
          rule="§1.7; -1 returns the whole vector in id order (vLLM: logprobs=-1)", scope="step",
          citation="vllm-project/vllm:vllm/v1/sample/sampler.py@v0.32.0 Sampler.forward (num_logprobs == -1: the "
                   "full unsorted logprobs)",
          annotation=_O[int]),
    Param("logprobs_mode", {"enum": list(LOGPROBS_MODES)},
          '`"raw_logprobs"`, `"raw_logits"`, `"processed_logprobs"`, `"processed_logits"`',
          "which vector logprob, rank, top_logprobs, vocab_logprobs and token_logprobs are read from",
          unset="raw_logprobs", feature="logprobs_mode", scope="step",
          rule="raw: the logits at the profile's raw_logprobs_stage, log-softmaxed (raw_logprobs) or not "
               "(raw_logits); processed: after the rewrites and, in a sampling row, temperature and the filters "
               "(filtered tokens -inf), log-softmaxed or not; a greedy row's processed vector is its rewritten "
               "logits (§1.7)",
          citation="vllm-project/vllm:vllm/v1/sample/sampler.py@v0.32.0 Sampler.forward, Sampler.sample "
                   "(LogprobsMode); huggingface/transformers:src/transformers/generation/utils.py@v5.24.0 "
                   "GenerationMixin._sample (output_logits, output_scores)"),
    Param("logprob_token_ids", _INTS, "array of int", "token ids whose logprobs to return, in this order, "
          "as token_logprobs", unset="none requested", feature="logprob_token_ids", errors=("invalid_logprobs",),
          scope="step", rule="ids in [0, V); read from the logprobs_mode's vector (§1.7)",
          citation="vllm-project/vllm:vllm/sampling_params.py@v0.32.0 SamplingParams.logprob_token_ids, "
                   "_validate_logprobs; vllm/v1/sample/sampler.py Sampler.gather_specific_token_logprobs",
          annotation=_O[list]),
    # -- scenario requests only (impls.reference.scenario_types.RequestSpec) ----------------------------
    Param("id", {"type": "string", "pattern": r"^[\w.-]+$"}, "string", "the request's id (unique in the scenario)",
          scope="request"),
    Param("arrive", {"type": "integer", "minimum": 0}, "int", "the first step it is scheduled at", unset="0",
          scope="request"),
    Param("pause", {"type": "array", "items": {"type": "integer", "minimum": 0}}, "array of int",
          "steps it is not scheduled at (its state is kept)", scope="request"),
    Param("beam_width", _INT, "int", "beams of a beam-search request", unset="1", feature="beam_search",
          errors=("invalid_beam_width",), rule="in [1, max_beam_width] (§3)", scope="request"),
    Param("length_penalty", _NUM, "float", "beam scores are divided by length ** length_penalty",
          unset="the profile's beam_length_penalty_unset", feature="beam_search", rule="§3", scope="request"),
    Param("early_stopping", {"anyOf": [_BOOL, {"const": "never"}]}, 'bool or `"never"`',
          "when a beam request stops", unset="the profile's beam_early_stopping_unset", feature="beam_search",
          rule="§3", scope="request"),
    Param("diversity_rate", _NUM, "float", "TensorRT-LLM's beam diversity rate", feature="beam_search",
          rule="§3", scope="request"),
    Param("n", {"type": "integer", "minimum": 1, "maximum": MAX_N}, "int", "parallel sampling: the request fans "
          "out into n children, named `<id>#0` ... `<id>#<n-1>`, child i in slot `slot + i`",
          unset="1: the request is its own (only) sequence", feature="n", errors=("invalid_seed", "invalid_n"),
          rule=f"in [1, {MAX_N}]; child i's seed is the profile's child_seed_rule of the request's seed (vLLM, "
               "TensorRT-LLM: seed + i), an unseeded request's children follow child_unseeded; a child seed past "
               "2**64 - 1 wraps or rejects the request (child_seed_overflow); n > 1 on a greedy request is n "
               "identical children or invalid_n (n_greedy); not with beam search (§2a)",
          citation="vllm-project/vllm:vllm/v1/engine/parallel_sampling.py@v0.32.0 "
                   "ParentRequest._get_child_sampling_params; NVIDIA/TensorRT-LLM:cpp/tensorrt_llm/batch_manager/"
                   "llmRequest.cpp@119c6e60 LlmRequest::createChildRequest",
          scope="request"),
    Param("child_stream", {}, "-", "a child of an n request drawing from one generator its n children share "
          "(child_seed_rule 'shared_stream'): ``(i, n)``, its k-th draw takes offset k * n + i of the request's "
          "seed", unset="None: the row's own stream (offsets 0, 1, 2, ...)", rule="§2a",
          citation="huggingface/transformers:src/transformers/generation/utils.py@v5.24.0 "
                   "GenerationMixin._expand_inputs_for_generation, GenerationMixin._sample",
          scope="internal", annotation=Any),
    Param("draft_len", {"type": "integer", "minimum": 0, "maximum": 64}, "int", "draft tokens per step (K)",
          unset="0: no speculation", rule="§4", scope="request"),
    Param("drafts", _WORDS, "array of arrays of int", "literal draft tokens per step (else the draft model "
          "proposes them); -1 pads a list", errors=("invalid_draft",),
          rule="at most draft_len each; the first -1 ends the drafts examined that step (that position emits the "
               "target's own token; what follows is never read); any other id outside [0, V) is invalid_draft (§4)",
          citation="flashinfer-ai/flashinfer#879 and PR #3551 (chain_speculative_sampling: -1 pads, a negative id is "
                   "an immediate rejection); vllm-project/vllm:vllm/v1/sample/rejection_sampler.py@v0.32.0 "
                   "rejection_random_sample_kernel (draft_token_id < 0: padding, rejected)",
          scope="request"),
    Param("stop", {"type": "array", "items": {"type": "string"}}, "array of strings",
          "stop strings: the request finishes when its text completes one (matched on the toy tokenizer's text, "
          "across tokens)", unset="none", feature="stop_strings", errors=("invalid_stop_words",),
          rule="each non-empty (an empty one is invalid_stop_words at admission unless the profile's "
               "validation_skips has empty_stop_string); needs [scenario.tokenizer]; a match must end in the text of "
               "the token just generated; the earliest-ending match wins (stop_string_pick), seen over the prompt's "
               "text too where stop_words_see_prompt; the output text is cut at the match (stop_string_trim); plain "
               "requests only (§1.8a)",
          citation="vllm-project/vllm:vllm/v1/engine/detokenizer.py@v0.32.0 check_stop_strings, "
                   "BaseIncrementalDetokenizer.update; huggingface/transformers:src/transformers/generation/"
                   "stopping_criteria.py@v5.24.0 StopStringCriteria",
          scope="request"),
    Param("include_stop_str_in_output", _BOOL, "bool",
          "keep the matched stop string in the output text (the text after it in its token is cut either way)",
          unset="false", feature="stop_strings",
          rule="read where the profile's stop_string_trim is 'text'; 'start' and 'none' ignore it (§1.8a)",
          citation="vllm-project/vllm:vllm/v1/engine/detokenizer.py@v0.32.0 check_stop_strings (include_in_output: "
                   "truncate to the end of the stop string, else to its start)",
          scope="request"),
    Param("d2t", _INTS, "array of int", "draft-to-target offsets: token += d2t[token]", errors=("invalid_d2t",),
          rule="one per draft token id; greedy requests only (§4)", scope="request"),
    Param("model", MODEL, "table", "a scripted model for this request (overrides the scenario's)",
          scope="request"),
)

_BY_NAME = {p.name: p for p in PARAMS}


def param(name: str) -> Param:
    """The declaration of ``name``.

    Raises
    ------
    KeyError
        Not a declared field.
    """
    return _BY_NAME[name]


def row_fields() -> list:
    """``[(name, annotation, dataclasses.field)]`` of :class:`~impls.base.Row`, in declaration order."""
    out = []
    for p in PARAMS:
        if not p.row_field:
            continue
        if p.name == "logits":
            out.append((p.name, p.annotation))
        elif p.factory is not None:
            out.append((p.name, p.annotation, dataclasses.field(default_factory=p.factory)))
        else:
            out.append((p.name, p.annotation, dataclasses.field(default=p.default)))
    return out


def not_a_number(row) -> Optional[tuple]:
    """``(error kind, message)`` for the first numeric field of ``row`` whose value is not a real number, else None.

    Numeric fields: those whose schema type is ``number`` or ``integer``; a real number is a
    :class:`numbers.Real` (Python's and NumPy's ints and floats, ``bool`` included). The case schema refuses
    anything else; a row given through the API gets its row's error from this check, which every
    implementation's admission runs first, instead of a comparison's ``TypeError`` for the whole batch. The kind
    is the field's first declared error (:attr:`Param.errors`), ``invalid_sampler_param`` when it has none.
    """
    for p in PARAMS:
        if not p.row_field or p.schema.get("type") not in ("number", "integer"):
            continue
        v = getattr(row, p.name, None)
        if v is not None and not isinstance(v, numbers.Real):
            kind = p.errors[0] if p.errors else "invalid_sampler_param"
            return kind, f"{p.name}={v!r}: must be a number"
    return None


def step_fields() -> list:
    """The fields a single-step row (or its ``defaults``) takes, in order."""
    return [p for p in PARAMS if p.scope in ("row", "step")]


def request_fields() -> list:
    """The fields a scenario request (or the scenario's ``defaults``) takes, in order."""
    return [p for p in PARAMS if p.scope in ("row", "request")]


def row_schema() -> dict:
    """JSON-schema ``properties`` of a single-step row (every :func:`step_fields` entry)."""
    return {p.name: p.schema for p in step_fields()}


def request_schema() -> dict:
    """JSON-schema ``properties`` of a scenario request (every :func:`request_fields` entry)."""
    return {p.name: p.schema for p in request_fields()}


def field_feature(name: str, value=None) -> Optional[str]:
    """The feature a case setting field ``name`` (to ``value``) must declare, or None."""
    p = _BY_NAME.get(name)
    if p is None or p.feature is None:
        return None
    for feature, when, _ in p.value_features:
        if when(value):
            return feature
    if p.feature_when is not None and not p.feature_when(value):
        return None
    return p.feature


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_table(scope: str) -> str:
    """The field table of ``cases/README.md`` for ``"step"`` (rows) or ``"request"`` (scenario requests).

    Columns: field, type, feature, meaning (the doc; unset meaning; the rule and error kinds).
    """
    fields = step_fields() if scope == "step" else request_fields()
    lines = ["| field | type | feature | meaning |", "| --- | --- | --- | --- |"]
    for p in fields:
        meaning = p.doc[0].upper() + p.doc[1:]
        if p.unset:
            meaning += f". Unset: {p.unset}"
        if p.rule:
            meaning += f". Rule: {p.rule}"
        if p.errors:
            meaning += ". Errors: " + ", ".join(f"`{e}`" for e in p.errors)
        feat = f"`{p.feature}`" + (" (when not float32)" if p.feature_when is not None else "") if p.feature else "–"
        feat += "".join(f"; {words}: `{f}`" for f, _, words in p.value_features)
        lines.append(f"| `{p.name}` | {_cell(p.type)} | {feat} | {_cell(meaning)} |")
    return "\n".join(lines) + "\n"


def template_comment() -> str:
    """The comment block of ``sampcheck case new``'s template listing every row field (name, type, doc)."""
    lines = ["# The fields a row takes (impls/params.py; the table in cases/README.md, 'Row fields'):"]
    width = max(len(p.name) for p in step_fields())
    for p in step_fields():
        alt = "".join(f"; {words}: {f}" for f, _, words in p.value_features)
        feat = f" [feature {p.feature}{alt}]" if p.feature else ""
        lines.append(f"#   {p.name:<{width}}  {p.type.replace('`', '')}: {p.doc}{feat}")
    return "\n".join(lines) + "\n"
