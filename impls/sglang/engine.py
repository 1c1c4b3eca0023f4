"""SGLang's own machinery, driven without a model or a scheduler process.

Imported lazily (it imports SGLang). Paths are relative to ``python/sglang/srt/`` of
sgl-project/sglang@v0.5.23.

What is SGLang's and what is glue:

* :func:`runtime` publishes SGLang's server arguments once per process through its own test
  entry point (``runtime_context.py RuntimeContext.override_server_args``: ``ServerArgs``
  resolved as at launch), with the defaults a CPU server takes (``sampling_backend =
  "pytorch"``, no deterministic inference) and ``sampling_mask_max_tokens`` raised to cover
  any vocabulary, and seeds torch's generator with ``set_random_seed`` as
  ``Scheduler.__init__`` does. The tensor-parallel group is a stand-in holding a real gloo
  process group of one rank (the ``Sampler`` all-reduces token ids over it, an identity here,
  when a batch has grammars: ``layers/sampler.py Sampler._sync_token_ids_across_tp``).
* :func:`make_request` builds a real ``managers/schedule_batch.py Req`` around a
  ``SamplingParams`` that went through ``__post_init__``, ``verify`` and ``normalize`` (its
  per-request validation). The tokenizer is a stand-in that knows only the EOS id. A row with a
  ``token_bitmask`` gets a grammar (``Req.grammar``): SGLang's ``XGrammarGrammar`` with its
  ``GrammarMatcher`` stood in by the case's words (:func:`_case_bitmask_grammar_class`). A row
  with ``logits_processors`` gets ``custom_logit_processor`` (:mod:`.processors`) and
  ``custom_params``; ``req.output_ids`` holds the row's output tokens, as the server's request
  does when it is sampled. Such a row still asks the sampling mask, the adapter's instrument:
  ``TokenizerManager._validate_one_request`` refuses ``return_sampling_mask`` beside a custom processor
  other than ``DisallowedTokensLogitsProcessor`` (its masks are meant for replay on
  unprocessed logits), but ``Sampler.forward`` computes the mask from the probabilities it
  sampled from, after the processors, and sampling does not depend on it.
* :func:`batch_info` builds each request's ``SamplingBatchInfo.from_schedule_batch`` (which
  creates its ``BatchedPenalizerOrchestrator``), feeds it the request's output tokens one step
  at a time with ``cumulate_output_tokens`` (as ``Scheduler`` does after every decode step),
  and merges the requests with ``SamplingBatchInfo.merge_batch`` (as the scheduler merges new
  requests into the running batch). The batch object handed to them is glue: a list of
  ``Req`` and a device.
* :func:`run_batch` takes ``copy_for_forward`` (the overlap schedule's path: additive
  penalties accumulated, then the repetition scaling), ``ModelRunner._preprocess_logits``
  (grammar mask, penalties, logit bias) and ``Sampler.forward`` with logprobs and the
  request's sampling mask (``return_sampling_mask`` with ``sampling_logprobs_mode =
  "support"``: SGLang's report of the kept tokens and their renormalised logprobs).
* :func:`finish_reason` runs ``Req.update_finish_state`` on the request with the new token.
"""

from __future__ import annotations

import array
import logging
import types
import warnings
from dataclasses import dataclass
from typing import Optional, Sequence

import torch

from ..base import Row, RowError
from .translate import classify_validation_error, eos_ids, sampling_kwargs

__all__ = ["runtime", "parallel_sample_num", "make_request", "batch_info", "run_batch", "Draws", "finish_reason",
           "reason_name", "BatchOutput", "path_description", "RANDOM_SEED"]

#: The server's ``random_seed`` (``ServerArgs.random_seed``; left unset, SGLang draws one at launch).
RANDOM_SEED = 42

_RUNTIME: dict = {}


def runtime() -> dict:
    """Publish SGLang's server arguments and build its ``Sampler``, once per process.

    Returns
    -------
    dict
        ``server_args`` (the published ``ServerArgs``), ``sampler`` (``layers/sampler.py
        Sampler``), ``modules`` (the SGLang classes the adapter calls).

    Raises
    ------
    ImportError
        SGLang is not installed.
    """
    if _RUNTIME:
        return _RUNTIME
    warnings.filterwarnings("ignore", module=r"sglang\..*")
    logging.getLogger("sglang").setLevel(logging.ERROR)
    from sglang.srt.runtime_context import get_context, get_parallel
    server_args = get_context().override_server_args(
        device="cpu", sampling_backend="pytorch", random_seed=RANDOM_SEED,
        sampling_mask_max_tokens=1 << 30, enable_custom_logit_processor=True).install()
    # one rank: the Sampler all-reduces token ids over this group (MIN) under SYNC_TOKEN_IDS_ACROSS_TP or when
    # the batch has grammars (layers/sampler.py Sampler._sync_token_ids_across_tp): a real gloo group of one
    # rank, built on its own store so the process's default group stays uninitialised
    from datetime import timedelta
    import torch.distributed as dist
    one_rank = dist.ProcessGroupGloo(dist.HashStore(), 0, 1, timedelta(seconds=60))
    get_parallel().override_permanently(tp_group=types.SimpleNamespace(device_group=one_rank))
    from sglang.srt.constrained.xgrammar_backend import XGrammarGrammar
    from sglang.srt.layers.logits_processor import LogitsProcessorOutput
    from sglang.srt.layers.sampler import Sampler
    from sglang.srt.managers import schedule_batch
    from sglang.srt.managers.tokenizer_manager import TokenizerManager
    from sglang.srt.model_executor.model_runner import ModelRunner
    from sglang.srt.sampling.sampling_batch_info import SamplingBatchInfo
    from sglang.srt.sampling.sampling_params import SamplingParams
    from sglang.srt.utils.common import set_random_seed
    set_random_seed(RANDOM_SEED)
    _RUNTIME.update(server_args=server_args, sampler=Sampler(), modules=types.SimpleNamespace(
        LogitsProcessorOutput=LogitsProcessorOutput, Req=schedule_batch.Req, SamplingBatchInfo=SamplingBatchInfo,
        SamplingParams=SamplingParams, ModelRunner=ModelRunner, schedule_batch=schedule_batch,
        TokenizerManager=TokenizerManager, set_random_seed=set_random_seed,
        CaseBitmaskGrammar=_case_bitmask_grammar_class(XGrammarGrammar)))
    from . import processors
    _RUNTIME["processor_str"] = processors.CaseLogitProcessor.to_str()
    return _RUNTIME


def parallel_sample_num(prompt: Sequence[int], params: dict) -> int:
    """How many copies SGLang makes of one request: ``GenerateReqInput.normalize_batch_and_arguments``.

    Parameters
    ----------
    prompt : sequence of int
        The request's prompt ids (``input_ids``).
    params : dict
        Its ``sampling_params`` as a client sends them (``n``, ``beam_width``).

    Returns
    -------
    int
        ``parallel_sample_num``: ``n``, or 1 for a beam request (io_struct.py@v0.5.23
        ``_handle_beam_search_parallel_sampling``). ``TokenizerManager._handle_batch_request`` then
        sends that many copies of the tokenized request, each with a new rid and the same
        ``sampling_params`` (seed included), after a ``max_new_tokens = 0`` request that only
        caches the prompt.

    Raises
    ------
    ValueError
        What SGLang's normalisation raises for these inputs.
    """
    from sglang.srt.managers.io_struct import GenerateReqInput
    obj = GenerateReqInput(input_ids=[int(t) for t in prompt], sampling_params=dict(params))
    obj.normalize_batch_and_arguments()
    return int(obj.parallel_sample_num)


def path_description() -> dict:
    """The code paths the adapter drives, for the run record."""
    import sglang
    from sglang.srt.environ import envs
    sa = runtime()["server_args"]
    return {"sglang": sglang.__version__, "sampling_backend": sa.sampling_backend,
            "enable_deterministic_inference": bool(sa.enable_deterministic_inference),
            "schedule": "overlap (SamplingBatchInfo.copy_for_forward: accumulated penalties)",
            "filters": "layers/sampler.py top_k_top_p_min_p_sampling_from_probs_torch",
            "unfiltered_draw": "layers/sampler.py sampling_from_probs_torch ("
                               + ("Gumbel-max on torch's generator" if envs.SGLANG_OPT_USE_GUMBEL_SAMPLE.get()
                                  else "torch.multinomial") + ")",
            "greedy": "torch.argmax when every request's top_k <= 1 (SamplingBatchInfo.is_all_greedy)"}


class _Tokenizer:
    """Stand-in tokenizer: the EOS id is all SGLang reads here (``min_new_tokens.py``, ``_check_token_based_finish``)."""

    additional_stop_token_ids = None

    def __init__(self, eos: Optional[int]):
        self.eos_token_id = eos

    def encode(self, text, add_special_tokens=False):  # pragma: no cover - stop strings are n/a
        raise RowError("unsupported", "stop strings need a tokenizer")

    def decode(self, ids):  # pragma: no cover
        raise RowError("unsupported", "stop strings need a tokenizer")


def _case_bitmask_grammar_class(XGrammarGrammar):
    """The grammar object of a row with a ``token_bitmask``: SGLang's ``XGrammarGrammar``, matcher stood in.

    A case gives the grammar's output, the packed int32 words of its next-token bitmask, not a
    grammar (SEMANTICS §1.4a). This subclass of ``constrained/xgrammar_backend.py
    XGrammarGrammar`` replaces **only** what the compiled grammar's ``GrammarMatcher`` does:
    ``fill_vocab_mask`` writes the case's words into the request's row of the batch bitmask
    (where ``matcher.fill_next_token_bitmask(vocab_mask, idx)`` writes the matcher's), and
    ``is_terminated`` is False (the matcher has not reached its end). Everything else is
    SGLang's and xgrammar's: ``allocate_vocab_mask`` (``_allocate_token_bitmask``: a
    ``get_bitmask_shape(batch, vocab)`` int32 tensor of ``-1``, every token allowed, so rows
    without a grammar stay unconstrained), ``move_vocab_mask``, and ``apply_vocab_mask``,
    whose CPU branch is xgrammar's ``apply_token_bitmask_inplace(logits, vocab_mask,
    backend="cpu")``; ``SamplingBatchInfo.update_regex_vocab_mask`` fills the rows through
    ``BaseGrammarObject.fill_vocab_mask_batched`` and ``GrammarMask.apply`` applies them inside
    ``SamplingBatchInfo.apply_logits_bias`` (after the penalties, before the logit bias).
    """

    from sglang.srt.constrained.base_grammar_backend import BaseGrammarObject

    class CaseBitmaskGrammar(XGrammarGrammar):
        def __init__(self, words, vocab_size: int):
            BaseGrammarObject.__init__(self)  # no GrammarMatcher: the case's words are the matcher's output
            self.vocab_size = int(vocab_size)
            self.words = torch.tensor([w - (1 << 32) if w >= (1 << 31) else w for w in (int(x) for x in words)],
                                      dtype=torch.int32)

        def is_terminated(self):
            return False

        def fill_vocab_mask(self, vocab_mask: torch.Tensor, idx: int) -> None:
            vocab_mask[idx].copy_(self.words)

    return CaseBitmaskGrammar


class _Batch:
    """The part of a ``ScheduleBatch`` that ``SamplingBatchInfo`` and the penalizers read (weak-referenceable)."""

    def __init__(self, reqs: list):
        self.reqs = reqs
        self.device = "cpu"


def make_request(row: Row, rid: str, top_logprobs: int, mask: bool = True, tokenizer=None,
                 stop: Sequence[str] = (), no_stop_trim: bool = False):
    """A ``Req`` for ``row`` whose ``SamplingParams`` passed SGLang's own validation.

    Parameters
    ----------
    row : Row
    rid : str
    top_logprobs : int
        ``top_logprobs_num`` (the adapter asks for the whole vocabulary: the RAW logprobs).
    mask : bool
        Ask for the sampling mask (the kept set and its logprobs).
    tokenizer : object, optional
        The tokenizer ``SamplingParams.normalize`` and the ``Req`` read (a scenario's:
        :class:`impls.sglang.scenario.CaseTokenizer`); default the stand-in that knows only the EOS id.
    stop : sequence of str
        ``SamplingParams.stop`` (stop strings; they need ``tokenizer``).
    no_stop_trim : bool
        ``SamplingParams.no_stop_trim`` (keep the matched stop string in the output text).

    Returns
    -------
    Req

    Raises
    ------
    RowError
        SGLang's rejection, kind by :func:`.translate.classify_validation_error`.

    Notes
    -----
    ``logprob_token_ids`` becomes the request's ``token_ids_logprob`` (a flat list of ids), checked
    first by ``managers/tokenizer_manager.py TokenizerManager._validate_token_ids_logprob`` (an id
    outside ``[0, vocab_size)`` is a ``ValueError`` naming ``token_ids_logprob``), called with a
    stand-in ``self`` that carries only ``model_config.vocab_size``.
    """
    m = runtime()["modules"]
    eos = eos_ids(row)
    ids = None if row.logprob_token_ids is None else [int(t) for t in row.logprob_token_ids]
    kwargs = sampling_kwargs(row)
    procs = row.logits_processors or ()
    if procs:
        from .processors import custom_params
        kwargs["custom_params"] = custom_params(procs)
    if stop:
        kwargs["stop"] = list(stop)
    if no_stop_trim:
        kwargs["no_stop_trim"] = True
    tok = tokenizer if tokenizer is not None else _Tokenizer(eos[0] if eos else None)
    try:
        if ids is not None:
            m.TokenizerManager._validate_token_ids_logprob(
                types.SimpleNamespace(model_config=types.SimpleNamespace(vocab_size=row.vocab)),
                types.SimpleNamespace(token_ids_logprob=ids))
        sp = m.SamplingParams(**kwargs)
        sp.verify(row.vocab)
        sp.normalize(tok)
    except RowError:
        raise
    except (ValueError, TypeError, OverflowError) as e:
        raise RowError(classify_validation_error(e), f"SGLang rejected the request: {e}") from None
    req = m.Req(rid, "", array.array("q", [int(t) for t in row.prompt]), sp, return_logprob=True,
                top_logprobs_num=top_logprobs, token_ids_logprob=ids, eos_token_ids=set(eos) or None,
                vocab_size=row.vocab, return_sampling_mask=mask,
                sampling_logprobs_mode="support" if mask else "selected",
                custom_logit_processor=runtime()["processor_str"] if procs else None)
    # the tokens the request generated so far, as the server's Req holds them when it is sampled (read by
    # custom processors through custom_params["__req__"]; the penalizers are fed them by batch_info)
    req.output_ids = array.array("q", [int(t) for t in row.generated])
    req.tokenizer = tok
    if row.token_bitmask is not None:
        # the request's compiled grammar (Req.grammar), its matcher stood in by the case's words
        req.grammar = m.CaseBitmaskGrammar(row.token_bitmask, row.vocab)
    return req


def batch_info(reqs: Sequence, histories: Sequence[Sequence[int]], vocab: int):
    """One ``SamplingBatchInfo`` for ``reqs``: each request's own, fed its output tokens, then merged.

    Parameters
    ----------
    reqs : sequence of Req
    histories : sequence of sequence of int
        Each request's output tokens so far (``Row.generated``).
    vocab : int

    Returns
    -------
    (SamplingBatchInfo, _Batch)
        The merged info and the batch it reads (keep both alive: the penalizers hold a weak
        reference to the batch).
    """
    m = runtime()["modules"]
    merged, batch = None, None
    for req, hist in zip(reqs, histories):
        b = _Batch([req])
        info = m.SamplingBatchInfo.from_schedule_batch(b, vocab)
        orch = info.penalizer_orchestrator
        for tok in hist:
            orch.cumulate_output_tokens(torch.tensor([int(tok)], dtype=torch.int64))
        if merged is None:
            merged, batch = info, b
        else:
            merged.merge_batch(info)  # before the batch's reqs grow (orchestrator.py merge)
            batch.reqs = batch.reqs + b.reqs
    return merged, batch


@dataclass
class BatchOutput:
    """What one ``Sampler.forward`` call gave, per row.

    Attributes
    ----------
    tokens : list of int
    rewritten : torch.Tensor
        ``(n, V)`` float32, the logits after ``_preprocess_logits``.
    logprobs : list of float
        ``next_token_logprobs``.
    top_ids, top_vals : list of list
        ``next_token_top_logprobs_idx`` / ``_val`` (the whole vocabulary, sorted).
    support : list of (list of int, list of float) or None
        The sampling mask: kept ids and their renormalised logprobs; None for a row without it.
    selected_logprob : list of float or None
        The mask's logprob of the sampled token.
    all_greedy : bool
        ``SamplingBatchInfo.is_all_greedy`` (the batch took argmax).
    token_ids_logprobs : list of (list of (int, float)) or None
        Per row, ``next_token_token_ids_logprobs_idx`` / ``_val`` paired: the logprobs of the
        request's ``token_ids_logprob`` in its order (empty for a row that asked none); None
        when no row of the batch asked.
    """

    tokens: list
    rewritten: torch.Tensor
    logprobs: list
    top_ids: list
    top_vals: list
    support: Optional[list]
    selected_logprob: Optional[list]
    all_greedy: bool
    token_ids_logprobs: Optional[list] = None


def run_batch(rows: Sequence[Row], reqs: Sequence, logits: torch.Tensor) -> BatchOutput:
    """One decode step of SGLang's sampling for ``rows`` (``logits`` ``(n, V)``, one dtype).

    Raises
    ------
    Exception
        Whatever SGLang raises for the batch (the session makes it every row's ``engine_error``).
    """
    rt = runtime()
    m = rt["modules"]
    info, batch = batch_info(reqs, [r.generated for r in rows], logits.shape[-1])
    fwd = info.copy_for_forward()
    # model_executor/forward_batch_info.py ForwardBatch.init_new: grammars = [req.grammar for req in reqs]
    # when the batch has one (ScheduleBatch.has_grammar = any(req.grammar for req in reqs)), else None
    fwd.grammars = [r.grammar for r in reqs] if any(r.grammar for r in reqs) else None
    out = m.LogitsProcessorOutput(next_token_logits=logits.clone())
    m.ModelRunner._preprocess_logits(None, out, fwd)   # update_regex_vocab_mask, then apply_logits_bias
    rewritten = out.next_token_logits.clone()
    if fwd.has_custom_logit_processor:
        # the rewritten logits the Sampler samples from include the custom processors
        # (Sampler._preprocess_logits: apply_custom_logit_processor, then sanitize_nan_logits), which
        # Sampler.forward runs on out.next_token_logits in place; for the report, the same method on a copy
        rewritten = rt["sampler"]._preprocess_logits(rewritten, fwd)
    positions = torch.tensor([len(r.prompt) + len(r.generated) for r in rows], dtype=torch.int64)
    V = logits.shape[-1]
    # as ScheduleBatch.prepare_for_decode/prepare_for_extend build them (schedule_batch.py: top_logprobs_nums,
    # token_ids_logprobs = [r.logprob.token_ids_logprob for r in reqs])
    ids = rt["sampler"].forward(out, fwd, True, [r.logprob.top_logprobs_num for r in reqs],
                                [r.logprob.token_ids_logprob for r in reqs], positions)
    mask = out.sampling_mask_output
    support = selected = None
    if mask is not None:
        support, selected = [], []
        for j in range(len(rows)):
            n = int(mask.lengths[j])
            support.append(([int(t) for t in mask.token_ids[j, :n].tolist()],
                             [float(v) for v in mask.support_logprobs[j, :n].tolist()]))
            selected.append(float(mask.selected_logprobs[j]))
    asked = None
    if out.next_token_token_ids_logprobs_val is not None:
        # layers/logprob_processor.py get_token_ids_logprobs: per row logprobs[i, token_ids] (a tensor under
        # no_copy_to_cpu) and the ids as given
        asked = [list(zip([int(t) for t in idx], [float(v) for v in torch.as_tensor(val).tolist()]))
                 for idx, val in zip(out.next_token_token_ids_logprobs_idx, out.next_token_token_ids_logprobs_val)]
    return BatchOutput(tokens=[int(t) for t in ids.tolist()], rewritten=rewritten,
                       logprobs=[float(v) for v in out.next_token_logprobs.tolist()],
                       top_ids=[t.tolist() for t in out.next_token_top_logprobs_idx],
                       top_vals=[t.tolist() for t in out.next_token_top_logprobs_val],
                       support=support, selected_logprob=selected, all_greedy=bool(fwd.is_all_greedy),
                       token_ids_logprobs=asked)


class Draws:
    """Batches of ``n`` identical requests for ``row``, drawn without logprobs or masks.

    The production path exactly (``Sampler.forward`` with ``return_logprob`` off): one
    ``from_schedule_batch`` over the ``n`` requests, fed the shared output tokens once; each
    :meth:`draw` takes ``copy_for_forward``, ``_preprocess_logits`` and ``Sampler.forward`` on a
    fresh copy of the logits.
    """

    def __init__(self, row: Row, n: int):
        rt = runtime()
        m = rt["modules"]
        self.row, self.n = row, n
        self.batch = _Batch([make_request(row, f"draw{i}", 0, mask=False) for i in range(n)])
        self.info = m.SamplingBatchInfo.from_schedule_batch(self.batch, row.vocab)
        for tok in row.generated:
            self.info.penalizer_orchestrator.cumulate_output_tokens(torch.full((n,), int(tok), dtype=torch.int64))
        self.logits = row.logits.to(torch.float32).unsqueeze(0).expand(n, row.vocab)
        self.positions = torch.full((n,), len(row.prompt) + len(row.generated), dtype=torch.int64)

    def draw(self) -> torch.Tensor:
        """``(n,)`` int64 token ids."""
        rt = runtime()
        m = rt["modules"]
        fwd = self.info.copy_for_forward()
        reqs = self.batch.reqs
        fwd.grammars = [r.grammar for r in reqs] if any(r.grammar for r in reqs) else None  # as in run_batch
        out = m.LogitsProcessorOutput(next_token_logits=self.logits.clone())
        m.ModelRunner._preprocess_logits(None, out, fwd)
        ids = rt["sampler"].forward(out, fwd, False, [0] * self.n, [None] * self.n, self.positions)
        return ids.to(torch.int64)


def finish_reason(req, row: Row, token: int) -> str:
    """``Req.update_finish_state`` once ``token`` is appended to the row's output tokens.

    Returns
    -------
    str
        ``"end_id"`` (``FINISH_MATCHED_TOKEN`` of an EOS id), ``"stop_words"`` (of a stop token id),
        ``"length"`` (``FINISH_LENGTH``), ``"none"`` (not finished), or ``"stop_words"`` for a
        ``FINISH_MATCHED_STR`` (SGLang's out-of-vocabulary guard reports one too).
    """
    req.output_ids = [int(t) for t in row.generated] + [int(token)]
    req.finished_reason = None
    req.update_finish_state()
    return reason_name(req)


def reason_name(req) -> str:
    """Our name of ``req.finished_reason`` (see :func:`finish_reason`); ``"none"`` when it is unset."""
    sb = runtime()["modules"].schedule_batch
    reason = req.finished_reason
    if reason is None:
        return "none"
    if isinstance(reason, sb.FINISH_LENGTH):
        return "length"
    if isinstance(reason, sb.FINISH_MATCHED_TOKEN):
        eos = set(req.eos_token_ids or ()) | ({req.tokenizer.eos_token_id} - {None})
        return "end_id" if reason.matched in eos else "stop_words"
    return "stop_words"
