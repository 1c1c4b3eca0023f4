"""A scripted "model" registered in vLLM's model registry: the case's logits, served through vLLM's engine.

Imported lazily (it imports vLLM). A scenario's logits come from a
:class:`~impls.reference.scripted.ScriptedModel`, a pure function of one
sequence's history ``(prompt, generated)``. :class:`ScriptedLlamaForCausalLM`
makes vLLM's engine ask that function for every sequence of every step: it is
a subclass of vLLM's ``LlamaForCausalLM`` (model_executor/models/llama.py@v0.32.0)
registered with ``ModelRegistry.register_model`` under :data:`ARCHITECTURE`
and named by a local ``config.json`` (a tiny llama config: one layer, the
case's vocabulary; ``load_format="dummy"``, so no weights are read). Its
``forward`` never runs the transformer; it keeps what a real model keeps, the
tokens of each sequence, and hands ``compute_logits`` their histories.

How the history of each sequence is recovered (only from what vLLM hands the
model; the case's expectations are never seen):

1. ``forward(input_ids, positions)`` runs inside vLLM's forward context
   (``vllm.forward_context.get_forward_context``), whose ``attn_metadata``
   holds, per attention layer, the step's ``CPUAttentionMetadata``
   (v1/attention/backends/cpu_attn.py@v0.32.0): ``query_start_loc`` (where
   each sequence's tokens start in the flat batch), ``block_table`` (its KV
   cache blocks) and ``slot_mapping`` (the KV slot each input token is written
   to). The model writes each input token id into a **token-id cache** at its
   slot, as a real model writes keys and values there, and reads a
   sequence's history back through its block table: position ``q`` of
   sequence ``i`` lives in slot ``block_table[i, q // B] * B + q % B`` (``B``
   the cache block size). The slot computed for each input token is checked
   against ``slot_mapping``.
2. A sequence whose query starts at position 0 is new; its query is its
   whole prompt (the engine is built with prefix caching off and a token
   budget above the model length, so a prompt is never split or skipped).
   The prompt names the case request through the driver's
   :class:`Binding` (:meth:`Binding.sequence`), which gives the request's
   scripted model; the sequence, keyed by its first KV block, remembers that
   model and its prompt length. Requests with the same prompt must share one
   scripted model (the driver refuses scenarios where they do not).
3. ``forward`` returns hidden states whose first component is each token's
   index in the flat batch. vLLM's model runner gathers the rows it samples
   from (``hidden_states[logits_indices]``, gpu_model_runner.py@v0.32.0
   ``execute_model``) and calls ``compute_logits`` on them outside the
   forward context; the index says whose history each row is, and the row is
   ``model.logits(prompt, generated)`` of that history.

A history the scripted model has no row for (a ``table`` model past its end
with ``after_last = "error"``) gives a zero row and is recorded in
:attr:`Binding.errors`; the driver fails that request (``bad_logits``), as the
reference does. Every history served is recorded in :attr:`Binding.served`,
so the driver can check that vLLM's outputs are the sequences the model was
asked about.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Optional

import torch
from vllm import ModelRegistry
from vllm.forward_context import get_forward_context, is_forward_context_available
from vllm.model_executor.models.llama import LlamaForCausalLM

from ..reference.scripted import ModelError

__all__ = ["ARCHITECTURE", "Binding", "ScriptedLlamaForCausalLM", "register", "write_config", "bind", "unbind"]

#: The architecture name ``config.json`` gives and ``ModelRegistry.register_model`` registers.
ARCHITECTURE = "SampcheckScriptedForCausalLM"

#: engine key (``config.json`` field ``sampcheck_engine``) -> the :class:`Binding` of the run in progress.
_BINDINGS: dict = {}


@dataclass
class Binding:
    """What a scripted engine serves during one scenario.

    Attributes
    ----------
    models : dict
        ``tuple(prompt) -> ScriptedModel``: the scripted model of the case
        request(s) with that prompt.
    served : set of (int, tuple, tuple)
        ``(id(model), prompt, generated)`` of every history whose logits were
        served.
    errors : list of (tuple, tuple, str)
        ``(prompt, generated, message)`` of histories the scripted model had
        no logits for.
    extends : (tuple, ScriptedModel) or None
        Beam search: the one request's prompt and model; a new sequence may
        be that prompt followed by generated tokens (:meth:`sequence`).
    constant : torch.Tensor or None
        Draw-only runs (:func:`impls.vllm.loop.sample_counts`): ``(V,)``
        float32 logits served to every sequence whatever its history;
        histories are then neither rebuilt nor recorded (:attr:`models`,
        :attr:`served` unused), so a step costs no more for long outputs.
    """

    models: dict = field(default_factory=dict)
    served: set = field(default_factory=set)
    errors: list = field(default_factory=list)
    extends: Optional[tuple] = None
    constant: Optional[torch.Tensor] = None

    def sequence(self, tokens: tuple) -> tuple:
        """``(scripted model, prompt length)`` of a new sequence whose first query holds ``tokens``.

        ``tokens`` is a request's prompt (:attr:`models`), or, with
        :attr:`extends` = ``(prompt, model)`` set, that prompt followed by
        generated tokens: ``LLM.beam_search`` submits each beam as a new
        request whose prompt is the beam's whole history.

        Raises
        ------
        RuntimeError
            When no request of the scenario has that prompt (a prompt vLLM
            split, or a recomputed sequence after a preemption: the driver's
            engine settings are meant to rule both out).
        """
        tokens = tuple(tokens)
        if tokens in self.models:
            return self.models[tokens], len(tokens)
        if self.extends is not None and tokens[:len(self.extends[0])] == tuple(self.extends[0]):
            return self.extends[1], len(self.extends[0])
        raise RuntimeError(f"scripted model: a new sequence's prompt {list(tokens)} is not the prompt of any "
                           "request of the scenario (a chunked prefill or a preempted sequence?)")


def bind(key: str, binding: Optional[Binding]) -> None:
    """Make the engine ``key`` serve ``binding`` (None: serve nothing)."""
    if binding is None:
        _BINDINGS.pop(key, None)
    else:
        _BINDINGS[key] = binding


def unbind(key: str) -> None:
    """Stop serving the engine ``key``."""
    _BINDINGS.pop(key, None)


@dataclass
class _Row:
    model: object
    prompt: tuple
    generated: tuple


class ScriptedLlamaForCausalLM(LlamaForCausalLM):
    """vLLM's ``LlamaForCausalLM`` whose logits are the bound scripted model's (module docstring).

    Parameters
    ----------
    vllm_config : vllm.config.VllmConfig
        As vLLM's model loader passes it; ``hf_config.sampcheck_engine``
        names the :class:`Binding` to serve, ``cache_config.block_size`` is
        the KV block size ``B``.
    prefix : str
    """

    def __init__(self, *, vllm_config, prefix: str = "", **kwargs):
        super().__init__(vllm_config=vllm_config, prefix=prefix, **kwargs)
        self._key = getattr(vllm_config.model_config.hf_config, "sampcheck_engine", None)
        self._block_size = int(vllm_config.cache_config.block_size)
        self._tokens: dict = {}    # KV slot -> token id (the token-id cache)
        self._seqs: dict = {}      # first KV block -> (scripted model, prompt length)
        self._rows: list = []      # flat token index -> _Row of the last forward (None: not served)

    def forward(self, input_ids: Optional[torch.Tensor], positions: torch.Tensor, intermediate_tensors=None,
                inputs_embeds=None, **kwargs) -> torch.Tensor:
        """Record the step's tokens and histories; return ``(N, hidden)`` float states holding each token's index.

        Parameters
        ----------
        input_ids : torch.Tensor
            ``(N,)`` int token ids of the flat batch (padding included).
        positions : torch.Tensor
            ``(N,)`` int positions of those tokens in their sequences.

        Returns
        -------
        torch.Tensor
            ``(N, hidden_size)`` in the model dtype; component 0 of row ``t``
            is ``t``.

        Raises
        ------
        RuntimeError
            A slot that does not follow the block table, or a new sequence
            whose prompt names no request (:meth:`Binding.sequence`).
        """
        n = int(positions.shape[0])
        hidden = torch.zeros(n, self.config.hidden_size, dtype=self.lm_head.weight.dtype,
                             device=positions.device)
        hidden[:, 0] = torch.arange(n, dtype=hidden.dtype, device=positions.device)
        self._rows = [None] * n
        binding = _BINDINGS.get(self._key)
        md = get_forward_context().attn_metadata if is_forward_context_available() else None
        if binding is None or not isinstance(md, dict) or not md or input_ids is None:
            return hidden  # a dummy or profiling run: nothing to serve
        if binding.constant is not None:
            return hidden  # a draw-only run: compute_logits serves the one row to every position
        meta = next(iter(md.values()))
        B = self._block_size
        ids = input_ids.tolist()
        pos = positions.tolist()
        starts = meta.query_start_loc.tolist()
        table = meta.block_table.tolist()
        slots = meta.slot_mapping.tolist()
        for i in range(len(starts) - 1):
            q0, q1 = starts[i], starts[i + 1]
            if q1 <= q0:
                continue
            blocks = table[i]

            def slot(p: int) -> int:
                return blocks[p // B] * B + p % B

            for t in range(q0, q1):
                if slot(pos[t]) != slots[t]:
                    raise RuntimeError(f"scripted model: token {t} at position {pos[t]} has KV slot {slots[t]}, "
                                       f"its block table gives {slot(pos[t])}")
                self._tokens[slots[t]] = ids[t]
            if pos[q0] == 0:
                self._seqs[blocks[0]] = binding.sequence(tuple(ids[q0:q1]))
            model, plen = self._seqs[blocks[0]]
            for t in range(q0, q1):
                hist = tuple(self._tokens[slot(p)] for p in range(pos[t] + 1))
                if len(hist) >= plen:  # a position that predicts a generated token
                    self._rows[t] = _Row(model, hist[:plen], hist[plen:])
        return hidden

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """``(R, V)`` float32 logits: the scripted model's row for each sampled position's history.

        ``hidden_states`` are the rows vLLM gathered from :meth:`forward`'s
        output (component 0: the flat token index). A row that served no
        history (a dummy run) is zeros; so is a history the scripted model
        has no logits for (recorded in :attr:`Binding.errors`).
        """
        V = int(self.config.vocab_size)
        out = torch.zeros(hidden_states.shape[0], V, dtype=torch.float32, device=hidden_states.device)
        binding = _BINDINGS.get(self._key)
        if binding is not None and binding.constant is not None:
            out[:] = binding.constant.to(out.dtype)
            return out
        for r, t in enumerate(hidden_states[:, 0].tolist()):
            t = int(t)
            row = self._rows[t] if 0 <= t < len(self._rows) else None
            if row is None or binding is None:
                continue
            try:
                logits = row.model.logits(row.prompt, row.generated)
            except ModelError as e:
                binding.errors.append((row.prompt, row.generated, str(e)))
                continue
            binding.served.add((id(row.model), row.prompt, row.generated))
            out[r] = logits.to(out.dtype)
        return out


_REGISTERED = False


def register() -> None:
    """Register :class:`ScriptedLlamaForCausalLM` as :data:`ARCHITECTURE` (once per process)."""
    global _REGISTERED
    if not _REGISTERED:
        ModelRegistry.register_model(ARCHITECTURE, ScriptedLlamaForCausalLM)
        _REGISTERED = True


#: The tiny llama the scripted model is built as: one layer, one head of 64 (vLLM's CPU attention kernels
#: take head sizes 32, 64, 80, 96, 112, 128, ...; 16 is refused), float32 so that logits pass unrounded.
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 1,
              "num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64, "rms_norm_eps": 1e-5,
              "tie_word_embeddings": False, "torch_dtype": "float32"}


def write_config(directory: str, vocab: int, max_model_len: int, key: str) -> str:
    """Write the model directory's ``config.json`` and return the directory.

    Parameters
    ----------
    directory : str
        An existing directory.
    vocab : int
        ``vocab_size``: the width of every logits row.
    max_model_len : int
        ``max_position_embeddings`` (vLLM derives ``max_model_len`` from it).
    key : str
        ``sampcheck_engine``: the :class:`Binding` key the model serves.
    """
    cfg = dict(TINY_LLAMA, architectures=[ARCHITECTURE], vocab_size=int(vocab),
               max_position_embeddings=int(max_model_len), sampcheck_engine=key)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(cfg, f)
    return directory
