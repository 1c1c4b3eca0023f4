"""Speculative decoding: drafting and verification (SEMANTICS §4).

A request with ``draft_len = K > 0`` emits, per step, the accepted prefix of
``K`` draft tokens plus one target token. :func:`speculative_step` runs, for
all such requests of a scenario step:

1. **draft batch**: draft token ``j`` is drawn from the draft model's logits
   on ``prompt + finalised + d_<j`` with the request's filters only
   (temperature, top-k, top-p, min-p: draft batches get no penalties,
   TensorRT-LLM penalties.py@0a0ceb0c ``PenaltyHandler.apply``
   ``is_draft_batch``). Sampling draft rows draw as **unseeded** rows
   (global seed, the shared counter): they never touch a slot's counter
   (seed 000 § 槽位换主与草稿批). The draft probabilities ``q_j`` are the
   distribution the draft was drawn from (same filtering). ``d2t``
   translates a draft id into the target vocabulary (``token +=
   d2t[token]``) and is greedy-only (checked at admission). Literal
   ``drafts`` in the case replace the draw (``q`` still comes from the
   draft model);
2. the plain rows of the target batch (:meth:`.scenario._Runner.plain`);
3. **verification**, rows ``i = 0..K`` with the target model's logits on
   ``prompt + finalised + d_<=i``; the rewrites (penalties, bans) read the
   **finalised** history only, as TensorRT-LLM's per-slot counts serve every
   verification row of a request (penalties.py@0a0ceb0c ``apply``: request
   ``r`` owns ``num_steps`` rows, one counts row per slot).

   * greedy target: ``t_i = argmax``; accept ``d_{i+1}`` while it equals
     ``t_i``; the first target token that differs (or ``t_K``) is emitted
     after them (two_model_spec_dec.py@00be09f7
     ``_process_draft_tokens_greedy``);
   * sampling target: all ``K + 1`` rows draw with the slot's next ``K + 1``
     Philox offsets (a request drawing ``N`` tokens occupies ``N`` rows,
     seed_manager.py@2341856e ``make_row_seeds``). Draft ``d_{i+1}`` is
     rejected iff ``u_i > min(1, p_i(d) / q_i(d))``, where ``u_i`` is the
     canonical uniform of word ``V`` of row ``i`` (one past the vocabulary:
     independent of the row's Gumbel noise); at the first rejection the
     emitted token is drawn from ``normalise(max(0, p_i - q_i))`` by
     Gumbel-max with row ``i``'s uniforms; if all are accepted the bonus
     token is row ``K``'s canonical draw (two_model_spec_dec.py@00be09f7
     ``get_rejected_indices``, ``sample_rejected``).

   Emission stops at the first token that finishes the request (an
   accepted draft included: no correction token then). ``rewind =
   draft_len - accepted`` (the declared ``K``: padded drafts occupy KV cache
   too, seed 000 § 验收: ``py_rewind_len`` keeps the padded length). Only emitted tokens are finalised, so rejected drafts never
   reach the penalty counts.

The acceptance uniform and the residual draw are this project's canonical
choices: TensorRT-LLM draws them from one shared ``torch.Generator``
(``TorchSampler.get_generator``), so they are not seed-isolated there.

**Verification hook.** A session that defines ``verify_chain`` (the
reference's does not) verifies the *sampling* requests itself, everything
else staying as above (drafting, the target rows and their distributions,
the ``K + 1`` offsets taken from the slot, emission and finish rules, the
accounting): :func:`_verify_chain` hands it ``q`` ``(K, V)``, the drafts,
``p`` ``(K + 1, V)``, the seed and the first offset, and emits what it
returns. :mod:`impls.flashinfer` uses it to run FlashInfer's
``chain_speculative_sampling``. Greedy requests keep the canonical path.
"""

from __future__ import annotations

from typing import Optional

import torch

from ..base import Row, RowError
from .draw import gumbel_scores
from .filters import processed_probs
from .finish import finish_reason
from .modes import GREEDY, SAMPLING, effective_seed
from .philox import uniforms
from .scenario_types import StepRecord, fail_request
from .scripted import ModelError

__all__ = ["speculative_step", "target_distribution", "DRAFT_FIELDS"]

#: Row fields a draft row keeps from its request (mode and filters only).
DRAFT_FIELDS = ("temperature", "top_k", "top_p", "min_p", "do_sample")


class _Cache:
    """Per-run memo of filtered rows keyed by (request parameters, history): replicas share them."""

    def __init__(self, runner):
        self.runner = runner
        self.sig: dict = {}
        self.rows: dict = {}

    def signature(self, req) -> tuple:
        key = id(req)
        if key not in self.sig:
            self.sig[key] = (id(req.model), tuple(sorted((k, repr(v)) for k, v in req.fields.items() if k != "seed")))
        return self.sig[key]

    def filtered(self, kind: str, req, history: tuple, base: tuple):
        """``(res, x, keep, probs)`` of a draft (``kind="draft"``) or target row.

        ``history`` is what the model sees (finalised + drafts); ``base``
        what the rewrites see (finalised only).
        """
        key = (kind, self.signature(req), tuple(req.fields.get("prompt", [])), history, base)
        hit = self.rows.get(key)
        if hit is not None:
            return hit
        runner, session = self.runner, self.runner.session
        prompt = req.fields.get("prompt", [])
        if kind == "draft":
            if runner.spec.draft_model is None:
                raise RowError("invalid_draft", "verifying drafts by rejection sampling needs the draft "
                               "probabilities: the scenario has no draft_model")
            x = runner.spec.draft_model.logits(prompt, list(history))
            row = Row(logits=x, slot=req.slot, **{k: req.fields[k] for k in DRAFT_FIELDS if k in req.fields})
        else:
            x = runner.model_of(req).logits(prompt, list(history))
            row = req.row(x, list(base))
        res, _x0, y = session._prepare(row)
        if res.mode == SAMPLING:
            keep = session._kept(res, y)
            probs = processed_probs(y, keep, res.temperature)
        else:
            if not (y > float("-inf")).any():
                raise RowError("no_valid_token", "every token is -inf after bias, penalties and bans")
            keep = None
            probs = torch.zeros_like(y)
            probs[int(torch.argmax(y))] = 1.0
        hit = (res, y, keep, probs)
        self.rows[key] = hit
        return hit


def _gumbel(rows: list, u: torch.Tensor, dtype) -> list:
    """Canonical Gumbel-max for ``rows = [(x, keep, temperature)]`` with uniforms ``u`` ``(R, V)``."""
    x = torch.stack([r[0] for r in rows])
    keep = torch.stack([r[1] for r in rows])
    # the uniforms come from the CPU Philox; the rows live on the session's device
    t = torch.tensor([r[2] for r in rows], dtype=dtype, device=x.device)
    return torch.argmax(gumbel_scores(x, keep, t, u[:, :x.shape[-1]].to(x.device)), dim=-1).tolist()


def _uniforms(pairs: list, words: int) -> torch.Tensor:
    seeds = torch.tensor([p[0] for p in pairs], dtype=torch.int64)
    offs = torch.tensor([p[1] for p in pairs], dtype=torch.int64)
    return uniforms(seeds, offs, words)


def _drafts(runner, cache: _Cache, states: list, step: int) -> dict:
    """Step 1 of the module docstring: ``{id: (draft tokens, [q_j or None])}``."""
    out = {}
    todo = []
    for st in states:
        req = st.request
        n = len(st.result.steps)
        if req.drafts is not None:
            lit = [int(t) for t in (req.drafts[n] if n < len(req.drafts) else [])]
            out[req.id] = (lit, [])
        else:
            out[req.id] = ([], [])
            todo.append(st)
    dtype = runner.session.dtype
    for j in range(max((st.request.draft_len for st in todo), default=0)):
        draws, draw_pairs = [], []
        for st in list(todo):
            req = st.request
            if j >= req.draft_len or req.id not in out:
                continue
            toks, qs = out[req.id]
            try:
                res, y, keep, q = cache.filtered("draft", req, tuple(st.generated) + tuple(toks), ())
            except (RowError, ModelError) as e:
                fail_request(st, e if isinstance(e, RowError) else RowError("bad_logits", f"draft model: {e}"), step)
                del out[req.id]
                continue
            qs.append(q)
            if res.mode == SAMPLING:
                draws.append((st, y, keep, res.temperature))
                draw_pairs.append(runner.session.seeds.take_unseeded())
            else:
                toks.append(int(torch.argmax(y)))
        if draws:
            u = _uniforms(draw_pairs, max(d[1].shape[-1] for d in draws))
            by_v: dict = {}
            for k, d in enumerate(draws):
                by_v.setdefault(d[1].shape[-1], []).append(k)
            for V, ks in by_v.items():
                toks_v = _gumbel([draws[k][1:] for k in ks], u[ks], dtype)
                for k, t in zip(ks, toks_v):
                    out[draws[k][0].request.id][0].append(int(t))
    for st in states:
        req = st.request
        if req.id not in out or req.d2t is None or req.drafts is not None:
            continue
        toks = out[req.id][0]
        out[req.id] = ([t + int(req.d2t[t]) for t in toks], out[req.id][1])
    return out


def _q_for_literal(cache, st, toks: list) -> list:
    # q_i for literal drafts: the draft model on the same history, the request's filtering.
    qs = []
    for i in range(len(toks)):
        _res, _y, _keep, q = cache.filtered("draft", st.request, tuple(st.generated) + tuple(toks[:i]), ())
        qs.append(q)
    return qs


def _verify_chain(hook, rows: list, toks: list, qs: list, V: int, seed, offsets: list, emit) -> int:
    """Verification by the session's ``verify_chain`` hook (an implementation's own kernel).

    ``hook(draft_probs, draft_ids, target_probs, seed, offset)`` gets the
    draft distributions ``(K, V)``, the draft ids ``(K,)`` int64, the target
    distributions ``(K + 1, V)`` (the same processed rows the canonical path
    reads), the request's Philox seed and the first of its ``K + 1`` offsets;
    it returns the tokens it emits (accepted drafts, then the correction or
    bonus token) and the number of accepted drafts ``n``. The contract
    checks of the canonical path stay here: a draft distribution over another
    vocabulary, or a draft with ``q(d) = 0`` at a position the verification
    examined (``0..n``), is ``invalid_draft``. Emission stops at the first
    finishing token, as on the canonical path; returns the accepted count.
    """
    K = len(toks)
    for q in qs[:K]:
        if q.shape[-1] != V:
            raise RowError("invalid_draft", f"draft distribution over {q.shape[-1]} tokens, target vocabulary {V}")
    dtype = rows[0][3].dtype
    draft_probs = torch.stack([q.to(dtype) for q in qs[:K]]) if K else torch.zeros((0, V), dtype=dtype)
    target_probs = torch.stack([r[3] for r in rows])
    out, n = hook(draft_probs, torch.tensor(toks, dtype=torch.int64), target_probs, seed, offsets[0])
    out, n = [int(t) for t in out], int(n)
    for i in range(min(n + 1, K)):
        if float(qs[i][toks[i]]) <= 0:
            raise RowError("invalid_draft", f"draft token {toks[i]} has probability 0 under the draft distribution")
    accepted = 0
    for j, t in enumerate(out):
        if j < n:
            accepted += 1
        if emit(t):
            break
    return accepted


def _verify(runner, cache: _Cache, st, step: int, toks: list, qs: list, u_rows: Optional[torch.Tensor],
            offsets: list, seed) -> None:
    req, profile = st.request, runner.profile
    K = len(toks)
    base = tuple(st.generated)
    rows = [cache.filtered("target", req, base + tuple(toks[:i]), base) for i in range(K + 1)]
    res = rows[0][0]
    V = rows[0][1].shape[-1]
    for t in toks:
        if not 0 <= t < V:
            raise RowError("invalid_draft", f"draft token {t} outside the target vocabulary [0, {V})")
    emitted, reason = [], "none"

    def emit(t: int) -> bool:
        nonlocal reason
        r = finish_reason(req.row(rows[0][1], list(base) + emitted), t, profile)
        emitted.append(int(t))
        reason = r
        return r != "none"

    def canonical() -> int:
        # The canonical verification (module docstring, item 3): the accepted prefix, then the
        # correction or bonus token unless an accepted draft finished the request.
        accepted = 0
        for i in range(K):
            d = toks[i]
            if res.mode == GREEDY:
                ok = d == int(torch.argmax(rows[i][3]))
            else:
                p_d, q_d = float(rows[i][3][d]), float(qs[i][d])
                if q_d <= 0:
                    raise RowError("invalid_draft", f"draft token {d} has probability 0 under the draft distribution")
                ok = not float(u_rows[i, V]) > min(1.0, p_d / q_d)
            if not ok:
                break
            accepted += 1
            if emit(d):
                return accepted
        i = accepted
        if res.mode == GREEDY:
            emit(int(torch.argmax(rows[i][3])))
        elif i < K:
            r = torch.clamp(rows[i][3] - qs[i].to(rows[i][3].dtype), min=0)
            if not (r > 0).any():
                r = rows[i][3]  # p == q to rounding: the residual is undefined, draw from p
            logr = torch.where(r > 0, torch.log(r), torch.full_like(r, float("-inf")))
            emit(_gumbel([(logr, r > 0, 1.0)], u_rows[i:i + 1], logr.dtype)[0])
        else:
            emit(_gumbel([(rows[K][1], rows[K][2], res.temperature)], u_rows[K:K + 1], rows[K][1].dtype)[0])
        return accepted

    hook = getattr(runner.session, "verify_chain", None)
    if hook is not None and res.mode == SAMPLING:
        accepted = _verify_chain(hook, rows, toks, qs, V, seed, offsets, emit)  # the session's own verification
    else:
        accepted = canonical()
    rec = StepRecord(step, tokens=list(emitted), offsets=offsets, seed=seed, drafts=list(toks),
                     accepted=accepted, rewind=req.draft_len - accepted,
                     finish_reason=reason)
    runner.finish(st, rec, emitted, reason)


def speculative_step(runner, states: list, step: int, plain: list) -> None:
    """Draft batch, target batch (``plain`` rows first), then verification (module docstring).

    Parameters
    ----------
    runner : impls.reference.scenario._Runner
    states : list of SlotState
        Running requests with ``draft_len > 0``.
    step : int
    plain : list of SlotState
        Running requests without speculation (and without beam search).

    A failure (``RowError``, or the scripted model) fails that request only.
    """
    cache = getattr(runner, "_spec_cache", None)
    if cache is None:
        cache = runner._spec_cache = _Cache(runner)
    drafts = _drafts(runner, cache, states, step) if states else {}
    runner.plain(plain, step)
    pending = []
    for st in states:
        if st.status != "running" or st.request.id not in drafts:
            continue
        toks, qs = drafts[st.request.id]
        try:
            if st.request.drafts is not None and st.mode != GREEDY:
                qs = _q_for_literal(cache, st, toks)
            row = st.request.row(torch.zeros(1), st.generated)
            runner.session.seeds.observe(st.request.slot, st.request.id, effective_seed(row, runner.profile))
            pairs = [runner.session.seeds.take(st.request.slot) for _ in range(len(toks) + 1)] \
                if st.mode == SAMPLING else []
        except (RowError, ModelError) as e:
            fail_request(st, e if isinstance(e, RowError) else RowError("bad_logits", f"draft model: {e}"), step)
            continue
        pending.append((st, toks, qs, pairs))
    # One Philox call per vocabulary size: V words of Gumbel noise plus the acceptance word V.
    by_v: dict = {}
    for k, item in enumerate(pending):
        if item[3]:
            by_v.setdefault((item[0].request.model or runner.spec.model).vocab, []).append(k)
    u_of: dict = {}
    for Vr, ks in by_v.items():
        u = _uniforms([p for k in ks for p in pending[k][3]], Vr + 1)
        at = 0
        for k in ks:
            n = len(pending[k][3])
            u_of[k], at = u[at:at + n], at + n
    for k, (st, toks, qs, pairs) in enumerate(pending):
        try:
            _verify(runner, cache, st, step, toks, qs, u_of.get(k), [p[1] for p in pairs],
                    pairs[0][0] if pairs else None)
        except (RowError, ModelError) as e:
            fail_request(st, e if isinstance(e, RowError) else RowError("bad_logits", f"scripted model: {e}"), step)


def target_distribution(spec, rid: str, profile, dtype=torch.float64, history: tuple = (),
                        base: Optional[tuple] = None) -> torch.Tensor:
    """The distribution of request ``rid``'s first emitted token without speculation.

    The target's processed distribution at generated position 0 (one-hot for
    a greedy request): what the speculative emission must follow
    (SEMANTICS §4, "the emitted distribution must equal the target's").

    Parameters
    ----------
    spec : ScenarioSpec
    rid : str
    profile : Profile
    dtype : torch.dtype
        float64 for a statistical prediction.
    history : tuple of int
        The generated tokens the target model sees (default: none, the first
        position); within a speculative step, the finalised tokens plus the
        tokens already emitted in that step.
    base : tuple of int, optional
        The finalised tokens the rewrites (penalties, bans) see (default:
        ``history``); the verification rows of one step share the counts of
        the step's start (module docstring, item 3).

    Returns
    -------
    torch.Tensor
        ``(V,)`` probabilities.

    Raises
    ------
    RowError
        When the request is rejected.
    """
    from .sampler import ReferenceSession
    req = spec.request(rid)
    session = ReferenceSession(profile, "cpu", dtype)
    model = req.model or spec.model
    row = req.row(model.logits(req.fields.get("prompt", []), list(history)),
                  list(history if base is None else base))
    res, _x0, y = session._prepare(row)
    if res.mode != SAMPLING:
        p = torch.zeros_like(y)
        p[int(torch.argmax(y))] = 1.0
        return p
    return processed_probs(y, session._kept(res, y), res.temperature)
