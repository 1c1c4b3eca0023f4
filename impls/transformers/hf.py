"""Hugging Face's own generation code, driven without a model.

Imported lazily (it imports transformers). :class:`ModelFree` borrows the
model-free methods of ``GenerationMixin`` (transformers 5.24.0,
``src/transformers/generation/utils.py``) and runs them in the order
``GenerationMixin.generate`` does:

1. ``_prepare_generation_config(None, **kwargs)``: the user's arguments over
   the global defaults of ``GenerationConfig._get_default_generation_params``
   (so an unset ``top_k`` becomes 50 and an unset length 20 new tokens),
   then ``GenerationConfig.update`` -> ``validate`` (``max_new_tokens <= 0``
   raises);
2. ``_prepare_special_tokens``: ``eos_token_id`` -> ``_eos_token_tensor``;
3. ``_prepare_generated_length`` and ``_validate_generated_length``
   (``max_length`` from ``max_new_tokens`` + prompt length; a prompt as long
   as ``max_length`` raises);
4. ``_get_logits_processor``: the processors in HF's order, then (with
   ``do_sample``) the warpers temperature, top-k, top-p, min-p;
5. ``_get_stopping_criteria``: ``MaxLengthCriteria``, ``EosTokenCriteria``.

The token is then chosen as ``GenerationMixin._sample`` does: ``softmax`` of
the processed scores and ``torch.multinomial(probs, 1)`` when sampling,
``torch.argmax`` when not. A seed goes through transformers' own
``set_seed`` (:func:`set_seed`, ``src/transformers/trainer_utils.py``), what
a user calls before ``generate()``, inside :func:`isolated_rng`.
"""

from __future__ import annotations

import contextlib
import inspect
import random
import warnings
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
import transformers
from transformers import GenerationConfig, trainer_utils
from transformers.generation import logits_process as lp
from transformers.generation import stopping_criteria as sc
from transformers.generation.utils import GenerationMixin

from .. import processors as _procs
from ..base import Row, RowError, error_kind
from .translate import generate_kwargs

__all__ = ["ModelFree", "Prepared", "prepare", "run_processors", "version", "WARPER_TYPES",
           "classify_value_error", "quiet", "CaseProcessors", "set_seed", "isolated_rng", "global_generator"]

#: Processors ``_get_logits_processor`` appends only under ``do_sample``
#: (the former "logits warpers"); everything before them is a rewrite.
#: Compatibility shim (transformers 4.57.6): ``TopHLogitsWarper`` is new in 5.x,
#: so the tuple takes only the classes this version has.
WARPER_TYPES = tuple(getattr(lp, _name) for _name in (
    "TemperatureLogitsWarper", "TopHLogitsWarper", "TopKLogitsWarper", "TopPLogitsWarper",
    "MinPLogitsWarper", "TypicalLogitsWarper", "EpsilonLogitsWarper", "EtaLogitsWarper",
) if hasattr(lp, _name))

# ValueError messages of transformers 5.24.0 -> our error kinds (first match wins).
_MESSAGE_KINDS = (
    ("`num_return_sequences`", "invalid_n"),  # GenerationConfig.validate: greedy with num_return_sequences > 1
    ("`temperature`", "invalid_temperature"),
    ("`top_p`", "invalid_top_p"),
    ("`top_k`", "invalid_top_k"),
    ("`min_p`", "invalid_min_p"),
    ("`typical_p`", "invalid_sampler_param"),
    ("`penalty`", "invalid_penalty"),
    ("`bad_words_ids`", "invalid_bad_words"),
    ("`sequence_bias`", "invalid_logit_bias"),
    ("`prompt_ignore_length`", "invalid_length"),
    ("`ngram_size`", "invalid_length"),
    ("`max_new_tokens`", "invalid_length"),
    ("`max_length`", "invalid_length"),
    ("`min_length`", "invalid_length"),
    ("`min_new_tokens`", "invalid_length"),
    ("`prompt_length_to_skip`", "invalid_length"),
)


def classify_value_error(e: Exception) -> str:
    """Map a transformers ``ValueError`` raised while building processors to an error kind.

    Parameters
    ----------
    e : Exception

    Returns
    -------
    str
        One of the error kinds of ``cases/README.md`` (``invalid_temperature``,
        ``invalid_top_p``, ...); ``invalid_parameter`` when no rule matches.

    The table follows the messages of ``TemperatureLogitsWarper``,
    ``TopPLogitsWarper``, ``TopKLogitsWarper``, ``MinPLogitsWarper``,
    ``RepetitionPenaltyLogitsProcessor``, ``NoBadWordsLogitsProcessor``,
    ``SequenceBiasLogitsProcessor``, ``NoRepeatNGramLogitsProcessor``
    (logits_process.py), ``GenerationConfig.validate``
    (configuration_utils.py) and ``GenerationMixin._validate_generated_length``
    (utils.py), all @v5.24.0.
    """
    return error_kind(str(e), _MESSAGE_KINDS, "invalid_parameter")


@contextlib.contextmanager
def quiet():
    """Silence transformers' warnings (restored on exit) and its logger output below ERROR.

    The logger's verbosity is lowered to ERROR once and left there: each change of a logging
    level clears the level caches of every logger of the process (``logging._clear_cache``,
    about 2 ms once torch is imported), which on the corpus cost about 2 s per run when it was
    set and restored around every call.
    """
    log = transformers.utils.logging
    if log.get_verbosity() < log.ERROR:
        log.set_verbosity_error()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def set_seed(seed) -> None:
    """Seed as a transformers user does before ``generate()``: ``transformers.set_seed(seed)``.

    ``set_seed`` (``src/transformers/trainer_utils.py``, the same body in v5.24.0 and v4.57.6)
    calls ``random.seed``, ``numpy.random.seed``, ``torch.manual_seed`` and
    ``torch.cuda.manual_seed_all`` in that order. ``numpy.random.seed`` accepts only
    ``0 <= seed < 2**32`` (numpy 2.4: ``ValueError: Seed must be between 0 and 2**32 - 1``), so
    a negative seed or one at or above ``2**32`` is refused before torch is seeded: that is
    transformers' own answer for such a seed (profile ``hf``: ``validation_extras``
    ``"seed_uint32"``). Call it inside :func:`isolated_rng`: it seeds process-global generators.

    Parameters
    ----------
    seed : int

    Raises
    ------
    RowError
        ``invalid_seed`` with ``set_seed``'s message when it refuses ``seed``.
    """
    try:
        trainer_utils.set_seed(seed)
    except (ValueError, TypeError, OverflowError) as e:
        raise RowError("invalid_seed", f"seed {seed!r}: transformers.set_seed refused it: {e}") from None


def global_generator(device: torch.device) -> torch.Generator:
    """torch's default generator of ``device``: what ``torch.multinomial`` without ``generator=`` draws
    from (``GenerationMixin._sample``) and what ``torch.manual_seed`` seeds."""
    if device.type == "cuda":
        return torch.cuda.default_generators[device.index if device.index is not None else torch.cuda.current_device()]
    return torch.default_generator


@contextlib.contextmanager
def isolated_rng():
    """The process's random generators restored on exit: torch's CPU generator and, once CUDA is
    initialised, every CUDA device's (``torch.random.fork_rng``), Python's ``random`` and NumPy's
    global state, every one that :func:`set_seed` seeds. A seeded request's draws then leave the
    process as they found it (the next unseeded draw is not steered by an earlier seed)."""
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_initialized() else []
    py, npy = random.getstate(), np.random.get_state()
    try:
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        random.setstate(py)
        np.random.set_state(npy)


class CaseProcessors(lp.LogitsProcessor):
    """A case's custom logits processors (:mod:`impls.processors`) as one transformers ``LogitsProcessor``.

    Passed as ``generate(logits_processor=[...])``: ``_merge_criteria_processor_list``
    (utils.py@v5.24.0) appends a processor of a type ``generate`` does not build after its own
    processors, and ``_get_logits_processor`` appends the warpers (temperature, top-k, top-p,
    min-p) after that merge, so it runs last among the rewrites and before the temperature, on
    greedy rows too. A request's steps ``n`` are the tokens generated so far: the length of
    ``input_ids`` less the prompt's (``generate`` never reorders the rows of its batch, and the
    adapter gives each request its own call).

    Parameters
    ----------
    procs : sequence of impls.processors.Processor
    prompt_len : int
        Tokens of ``input_ids`` that are the prompt.
    """

    def __init__(self, procs, prompt_len: int):
        self.procs = tuple(procs)
        self.prompt_len = int(prompt_len)

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        """Each row's processors, in order, at ``n = input_ids.shape[-1] - prompt_len``."""
        n = input_ids.shape[-1] - self.prompt_len
        return torch.stack([_procs.apply_all(scores[b], self.procs, n) for b in range(scores.shape[0])])


class _ModelConfig:
    """The few ``PretrainedConfig`` attributes the borrowed methods read (a decoder-only model)."""

    is_encoder_decoder = False
    max_position_embeddings = None

    def _get_generation_parameters(self) -> dict:
        return {}


class ModelFree:
    """A stand-in for a decoder-only model, carrying ``GenerationMixin``'s model-free methods.

    Parameters
    ----------
    device : str or torch.device

    Notes
    -----
    The methods are ``GenerationMixin``'s own functions (utils.py@v5.24.0),
    bound to this object; they read only ``self.config`` (here
    ``is_encoder_decoder = False``, no ``max_position_embeddings``),
    ``self.generation_config`` (an empty ``GenerationConfig()``: a model whose
    ``generation_config.json`` sets nothing) and ``self.device``.
    """

    _prepare_generation_config = GenerationMixin._prepare_generation_config
    _prepare_special_tokens = GenerationMixin._prepare_special_tokens
    _prepare_generated_length = GenerationMixin._prepare_generated_length
    _validate_generated_length = GenerationMixin._validate_generated_length
    _get_logits_processor = GenerationMixin._get_logits_processor
    _get_stopping_criteria = GenerationMixin._get_stopping_criteria
    _merge_criteria_processor_list = GenerationMixin._merge_criteria_processor_list

    def __init__(self, device="cpu"):
        self.config = _ModelConfig()
        self.generation_config = GenerationConfig()
        self.device = torch.device(device)


@dataclass
class Prepared:
    """One row, ready to sample: HF's processors and criteria plus the inputs.

    Attributes
    ----------
    do_sample : bool
    input_ids : torch.Tensor
        ``(1, len(prompt) + len(generated))`` int64, the history.
    processors : list
        ``LogitsProcessor`` instances before the warpers (HF order).
    warpers : list
        The warpers (temperature, top-k, top-p, min-p), empty when greedy.
    criteria : StoppingCriteriaList
        ``_get_stopping_criteria``'s list (``MaxLengthCriteria`` and, with an
        EOS id, ``EosTokenCriteria``).
    stop_criteria : list
        One ``EosTokenCriteria`` for the single-token stop words (kept out of
        the merged list: ``_merge_criteria_processor_list`` would let a custom
        ``EosTokenCriteria`` replace the EOS one).
    generation_config : GenerationConfig
    """

    do_sample: bool
    input_ids: torch.Tensor
    processors: list
    warpers: list
    criteria: object
    stop_criteria: list = field(default_factory=list)
    generation_config: Optional[object] = None

    def names(self) -> list:
        """Class names of the processors then the warpers, in application order."""
        return [type(p).__name__ for p in self.processors + self.warpers]


#: Compatibility shim (transformers 4.57.6): ``_prepare_special_tokens`` gained
#: its ``batch_size`` argument in 5.x; pass it only where the signature has it.
_SPECIAL_TOKENS_EXTRA = ({"batch_size": 1} if "batch_size" in inspect.signature(
    GenerationMixin._prepare_special_tokens).parameters else {})


def _history(row: Row, device) -> torch.Tensor:
    ids = [int(t) for t in list(row.prompt) + list(row.generated)]
    return torch.tensor([ids], dtype=torch.long, device=device).reshape(1, len(ids))


def _allowed_fn(row: Row):
    """``prefix_allowed_tokens_fn`` for ``row.allowed_token_ids`` (the same list at every step), or None."""
    if row.allowed_token_ids is None:
        return None
    allowed = [int(t) for t in row.allowed_token_ids]
    return lambda batch_id, input_ids: allowed


def prepare(row: Row, model: ModelFree) -> Prepared:
    """Build HF's processors, warpers and stopping criteria for one row.

    Parameters
    ----------
    row : Row
    model : ModelFree

    Returns
    -------
    Prepared

    Raises
    ------
    RowError
        A ``ValueError`` of transformers while building (an invalid
        parameter), with the kind of :func:`classify_value_error`.
    """
    device = model.device
    kw = generate_kwargs(row)
    prompt_ids = torch.tensor([[int(t) for t in row.prompt]], dtype=torch.long, device=device).reshape(1, len(row.prompt))
    prompt_len = prompt_ids.shape[1]
    custom = lp.LogitsProcessorList()
    try:
        with quiet():
            # generate(): has_default_* are computed before the defaults are merged in.
            has_default_max_length = kw.get("max_length") is None
            has_default_min_length = kw.get("min_length") is None
            gc, _ = model._prepare_generation_config(None, **kw)
            model._prepare_special_tokens(gc, kwargs_has_attention_mask=True, device=device,
                                          **_SPECIAL_TOKENS_EXTRA)
            gc = model._prepare_generated_length(
                generation_config=gc, has_default_max_length=has_default_max_length,
                has_default_min_length=has_default_min_length, model_input_name="input_ids",
                input_ids_length=prompt_len, inputs_tensor=prompt_ids)
            model._validate_generated_length(gc, prompt_len, has_default_max_length)
            if row.prompt_ignore_length is not None and gc.repetition_penalty is not None and gc.repetition_penalty != 1.0:
                # The documented route (RepetitionPenaltyLogitsProcessor docstring): a custom processor that
                # _merge_criteria_processor_list puts in the default one's place.
                custom.append(lp.RepetitionPenaltyLogitsProcessor(
                    gc.repetition_penalty, prompt_ignore_length=int(row.prompt_ignore_length)))
            if row.logits_processors:
                custom.append(CaseProcessors(row.logits_processors, prompt_len))
            procs = model._get_logits_processor(
                generation_config=gc, input_ids_seq_length=prompt_len, encoder_input_ids=prompt_ids,
                prefix_allowed_tokens_fn=_allowed_fn(row), logits_processor=custom, device=device, model_kwargs={})
            crit = model._get_stopping_criteria(gc, sc.StoppingCriteriaList(), tokenizer=None)
    except ValueError as e:
        raise RowError(classify_value_error(e), f"transformers: {e}".splitlines()[0]) from None
    procs = list(procs)
    split = next((i for i, p in enumerate(procs) if isinstance(p, WARPER_TYPES)), len(procs))
    stops = sorted({int(w[0]) for w in row.stop_words if len(w) == 1})
    stop_crit = [sc.EosTokenCriteria(torch.tensor(stops, dtype=torch.long, device=device))] if stops else []
    return Prepared(do_sample=bool(gc.do_sample), input_ids=_history(row, device), processors=procs[:split],
                    warpers=procs[split:], criteria=crit, stop_criteria=stop_crit, generation_config=gc)


def run_processors(procs: list, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
    """Apply ``procs`` in order as ``LogitsProcessorList.__call__`` does.

    Parameters
    ----------
    procs : list of LogitsProcessor
    input_ids : torch.Tensor
        ``(1, L)`` int64.
    scores : torch.Tensor
        ``(1, V)`` float32.

    Returns
    -------
    torch.Tensor
        ``(1, V)`` float32.

    Raises
    ------
    RowError
        ``invalid_bad_words`` / ``invalid_logit_bias`` when
        ``NoBadWordsLogitsProcessor`` / ``SequenceBiasLogitsProcessor`` reject
        an id ``>= V`` (checked on first call); ``invalid_allowed_token_ids`` when
        ``PrefixConstrainedLogitsProcessor`` gets an empty list (ValueError) or an
        id ``>= V`` (IndexError); ``invalid_token_id`` when a
        history id breaks ``RepetitionPenaltyLogitsProcessor`` or
        ``NoRepeatNGramLogitsProcessor`` (a negative id: ``gather`` /
        ``scatter`` out of range).
    """
    for p in procs:
        try:
            with quiet():
                scores = p(input_ids, scores)
        except ValueError as e:
            kind = ("invalid_bad_words" if isinstance(p, lp.NoBadWordsLogitsProcessor)
                    else "invalid_logit_bias" if isinstance(p, lp.SequenceBiasLogitsProcessor)
                    else "invalid_allowed_token_ids" if isinstance(p, lp.PrefixConstrainedLogitsProcessor)
                    else classify_value_error(e))
            raise RowError(kind, f"transformers {type(p).__name__}: {e}".splitlines()[0]) from None
        except (RuntimeError, IndexError) as e:
            if isinstance(p, lp.PrefixConstrainedLogitsProcessor):   # an allowed id >= V indexes past the mask
                raise RowError("invalid_allowed_token_ids",
                               f"transformers {type(p).__name__}: {e}".splitlines()[0]) from None
            raise RowError("invalid_token_id",
                           f"transformers {type(p).__name__} failed on the history: {e}".splitlines()[0]) from None
    return scores


def version() -> str:
    """``transformers.__version__``."""
    return transformers.__version__
