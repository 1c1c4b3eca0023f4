"""Hugging Face's own beam search, driven through ``generate()`` (profile ``hf``).

The single-step adapter (:mod:`impls.transformers`) drives HF's processors
without a model; beam search cannot be driven that way, because
``GenerationMixin._beam_search`` keeps beams, scores and the finished pool
across steps inside one ``generate()`` call. This module gives ``generate``
a minimal model instead: :class:`ScriptedLM`, whose ``forward`` returns the
scripted model's logits (:mod:`impls.reference.scripted`) for each row's
history. The model is input data; ``generate``'s loop (candidate selection,
finished hypotheses, length normalisation, early stopping, stopping criteria)
is what is tested.

:class:`impls.transformers.TransformersBeamImpl` runs the beam-search requests of a scenario
(``run_scenario``), one ``generate`` call per request (HF shares one
``GenerationConfig`` per call): ``num_beams = num_return_sequences = W``,
``do_sample = False`` (beam search, not beam sampling: a temperature is then
not applied, as the ``hf`` profile predicts), ``use_cache = False``,
``output_scores`` and ``return_dict_in_generate`` for ``sequences_scores``
and ``beam_indices``; the other arguments come from
:func:`impls.transformers.translate.generate_kwargs`. The output beams are
``sequences`` (best first) with ``cum_logprobs = sequences_scores *
generated_length ** length_penalty``; the per-step predecessor map is not
reconstructed (``beam_indices`` keeps only the surviving paths).

Scenarios it cannot express raise
:class:`~impls.reference.scenario.ScenarioUnsupported` (``n/a``): requests
without beam search, draft tokens, ``diversity_rate``, presence/frequency
penalties, stop words, seeds are irrelevant (no draws) and ignored.

Imported lazily: it imports transformers.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import FEATURES, Row
from ..reference.scenario import RequestResult, StepRecord

__all__ = ["ScriptedLM", "run_beam_request", "BEAM_FEATURES"]

#: Features the beam driver can express.
BEAM_FEATURES = frozenset({"beam_search", "temperature", "repetition_penalty", "no_repeat_ngram", "bad_words",
                           "end_id", "max_new_tokens", "max_seq_len", "min_length", "logit_bias", "seed",
                           "finish_reason"}) & frozenset(FEATURES)


#: Observations ``generate()`` gives back (no per-step predecessor map, no finish step).
REPORTED = frozenset({"error", "error_step", "tokens", "finish_reason", "beams", "cum_logprobs", "scores",
                      "beam_finish_reasons"})


def _model_class():
    """Build :class:`ScriptedLM` on first use (transformers is imported lazily)."""
    global ScriptedLM
    if not isinstance(ScriptedLM, type):
        from transformers import GenerationMixin, PretrainedConfig, PreTrainedModel
        from transformers.modeling_outputs import CausalLMOutputWithPast

        class _Config(PretrainedConfig):
            model_type = "sampcheck-scripted"

        class _ScriptedLM(PreTrainedModel, GenerationMixin):
            """A decoder-only "model" whose logits are a scripted model's (see the module docstring).

            Parameters
            ----------
            scripted : ScriptedModel
            prompt_len : int
                Length of the prompt at the start of every row of ``input_ids``.
            """

            config_class = _Config
            main_input_name = "input_ids"

            def __init__(self, scripted, prompt_len: int):
                super().__init__(_Config(vocab_size=scripted.vocab, is_encoder_decoder=False))
                self.scripted, self.prompt_len = scripted, prompt_len
                self._anchor = torch.nn.Parameter(torch.zeros(1))  # gives the module a device and dtype

            def forward(self, input_ids=None, **kwargs):
                """``(batch, seq, V)`` logits; only the last position is meaningful (the only one used).

                ``self.last_ids`` keeps the first row's history of the last call (where a failing step was).
                """
                P = self.prompt_len
                self.last_ids = input_ids[0].tolist()
                rows = [self.scripted.logits(ids[:P], ids[P:]) for ids in input_ids.tolist()]
                last = torch.stack(rows).unsqueeze(1)
                return CausalLMOutputWithPast(logits=last.expand(-1, input_ids.shape[1], -1))

            def prepare_inputs_for_generation(self, input_ids, **kwargs):
                """The whole history every step (no cache)."""
                return {"input_ids": input_ids}

        ScriptedLM = _ScriptedLM
    return ScriptedLM


ScriptedLM = None  # built by _model_class()


def _unsupported(req) -> Optional[str]:
    f = req.fields
    if not req.use_beam_search:
        return f"request {req.id!r} does not use beam search (only beam scenarios go through generate())"
    if req.draft_len:
        return f"request {req.id!r} has draft tokens"
    if req.diversity_rate:
        return "diversity_rate: Hugging Face 5.x has no beam-search diversity term (group beam search left for the Hub)"
    if f.get("presence_penalty") or f.get("frequency_penalty"):
        return "presence/frequency penalties do not exist in transformers"
    if f.get("stop_words") or f.get("top_p_decay") is not None or f.get("ignore_eos"):
        return "stop words, top-p decay and ignore_eos are not expressed by the beam driver"
    if f.get("do_sample"):
        return "beam sampling (do_sample=True) is not deterministic"
    return None


def run_beam_request(req, model, device: str = "cpu") -> RequestResult:
    """Run one beam-search request through ``generate()`` and return its result.

    Parameters
    ----------
    req : RequestSpec
    model : ScriptedModel
    device : str

    Returns
    -------
    RequestResult
        ``beams``, ``cum_logprobs``, ``scores``, ``tokens`` (first beam);
        ``error`` when transformers rejects the arguments (``ValueError``).
    """
    from .hf import classify_value_error, quiet
    from .translate import generate_kwargs

    cls = _model_class()
    prompt = list(req.fields.get("prompt", []))
    lm = cls(model, len(prompt)).to(device).eval()
    row = Row(logits=torch.zeros(model.vocab), **req.fields)
    kw = generate_kwargs(row)
    kw.update(do_sample=False, num_beams=req.beam_width, num_return_sequences=req.beam_width, use_cache=False,
              output_scores=True, return_dict_in_generate=True)
    for k in ("temperature", "top_k", "top_p", "min_p"):
        kw.pop(k, None)  # warpers only exist with do_sample
    if req.length_penalty is not None:
        kw["length_penalty"] = float(req.length_penalty)
    if req.early_stopping is not None:
        kw["early_stopping"] = req.early_stopping
    kw["pad_token_id"] = kw.get("eos_token_id") if kw.get("eos_token_id") is not None else 0
    res = RequestResult(req.id)
    try:
        with quiet(), torch.no_grad():
            out = lm.generate(torch.tensor([prompt], dtype=torch.long, device=device), **kw)
    except ValueError as e:
        res.error, res.message, res.error_step = classify_value_error(e), str(e), 0
        return res
    lp = float(kw.get("length_penalty", lm.generation_config.length_penalty
                      if lm.generation_config.length_penalty is not None else 1.0))
    beams, cums, scores = [], [], []
    eos = kw.get("eos_token_id")
    for i in range(req.beam_width):
        n_gen = int((out.beam_indices[i] >= 0).sum())
        toks = out.sequences[i, len(prompt):len(prompt) + n_gen].tolist()
        score = float(out.sequences_scores[i])
        beams.append(toks)
        scores.append(score)
        cums.append(score * float(n_gen) ** lp)
    res.beams, res.cum_logprobs, res.scores = beams, cums, scores
    res.beam_finish_reasons = ["end_id" if eos is not None and b and b[-1] == eos else "length" for b in beams]
    res.tokens = list(beams[0])
    res.finish_reason = res.beam_finish_reasons[0]
    res.steps = [StepRecord(s) for s in range(max(len(b) for b in beams))]
    return res
