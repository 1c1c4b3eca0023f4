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
   draft model, except under the greedy convention below). A ``-1`` in a
   literal list is padding (:func:`examined_drafts`, "Padded drafts"
   below);
2. the plain rows of the target batch (:meth:`.scenario._Runner.plain`);
3. **verification**, rows ``i = 0..K`` with the target model's logits on
   ``prompt + finalised + d_<=i``; the rewrites (penalties, bans) read the
   **finalised** history only, as TensorRT-LLM's per-slot counts serve every
   verification row of a request (penalties.py@0a0ceb0c ``apply``: request
   ``r`` owns ``num_steps`` rows, one counts row per slot). One exception:
   ``min_length`` judges row ``i`` with the ``i`` drafts ahead of it
   (``Row.draft_position = i``: the end id is banned iff ``finalised + i <
   min_length``), as vLLM (``MinTokensLogitsProcessor.apply_with_spec_decode``,
   v1/sample/logits_processor/builtin.py@v0.32.0) and TensorRT-LLM
   (``TokenBanHandler._add_min_length_bans``, token_ban.py@0a1f13c0) both
   do. (vLLM's penalties read finalised + the preceding drafts instead,
   ``RejectionSampler._combine_outputs_with_spec_tokens``,
   rejection_sampler.py@v0.32.0; the reference keeps TensorRT-LLM's rule.)
   A greedy row's token and errors (``nan_logits``, ``no_valid_token``, or
   ``torch.argmax`` under ``greedy_degenerate = "argmax"``) come from the
   single-step path's own rule,
   :meth:`.sampler.ReferenceSession._prepare` and ``_choose_deterministic``.

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
   too, seed 000 § 验收: ``py_rewind_len`` keeps the padded length). Only
   emitted tokens are finalised, so rejected drafts never reach the penalty
   counts.

**Padded drafts.** In a literal list, the first ``-1``
(:data:`.scenario_types.DRAFT_PAD`) at position ``j`` ends the examined
drafts: positions ``< j`` are verified as above, position ``j`` emits the
target's own token for it exactly as when every draft up to ``j`` was
accepted (row ``j``'s draw by the bonus-token rule; greedy: its argmax),
and the entries after it are never read (any value). The step still takes
the ``len(list) + 1`` offsets of a sampling request and reports ``rewind =
draft_len - accepted``; its ``drafts`` record is the examined prefix. A
``-1`` is never an index (``row[-1]`` would read token ``V - 1``); any
other id outside ``[0, V)`` before the first pad is ``invalid_draft``.
FlashInfer's convention (flashinfer-ai/flashinfer#879, PR #3551: a
negative id is an immediate rejection; with a zero ``q`` row the residual
``max(0, p_j - q_j)`` is ``p_j``) and vLLM's (rejection_sampler.py@v0.32.0
``rejection_random_sample_kernel``: ``draft_token_id < 0`` is padding,
rejected; the recovered token is drawn from ``p_j``).

**Greedy convention.** Under ``profile.greedy_as_top_k_1`` a greedy request
samples with ``temperature = 1, top_k = 1`` (:func:`greedy_by_convention`).
Its literal drafts are verified with ``q_i = one-hot(d_i)`` (a deterministic
proposal, as vLLM's rejection sampler treats drafts that come without
probabilities, ``NO_DRAFT_PROBS``), draft model or not: such a request
needs no draft model, so the profile's greedy convention never decides
whether a verification request is valid. Where the target row is a point
mass (no tie at the maximum) the test and the residual do not depend on
``q`` at all: ``d = argmax`` is accepted (``min(1, p/q) = 1``), any other
``d`` has ``p(d) = 0`` and is rejected, and ``max(0, p - q) = p`` is the
argmax. Under a tie the one-hot ``q`` keeps the emitted distribution equal
to the target's (a tied draft is accepted with probability ``p(d)``). The
request keeps the profile's accounting: ``K + 1`` Philox offsets a step.

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
``chain_speculative_sampling``. GREEDY requests keep the canonical path; a
request under the greedy convention goes to the hook with the one-hot ``q``
of its literal drafts. For a padded list the hook gets only the examined
drafts (``K = j``, ``p`` rows ``0..j``), never a ``-1``: FlashInfer 0.7.2's
kernel reads a negative id as an index (#879).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch

from ..base import Row, RowError
from .draw import gumbel_scores
from .finish import finish_reason
from .modes import GREEDY, SAMPLING, effective_seed, resolve
from .philox import uniforms
from .scenario_types import DRAFT_PAD, StepRecord, fail_request
from .scripted import ModelError

__all__ = ["speculative_step", "target_distribution", "examined_drafts", "greedy_by_convention", "DRAFT_FIELDS"]

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
        what the rewrites see (finalised only), except that ``min_length``
        also counts the ``len(history) - len(base)`` drafts ahead of a target
        row (``Row.draft_position``, module docstring item 3).

        Every rule comes from the single-step path's own methods of
        :class:`.sampler.ReferenceSession`, so one row gets the same token
        and errors on both paths: ``_prepare`` (input checks, mode, rewrites);
        for a GREEDY row ``_choose_deterministic`` (``probs``: the one-hot of
        its token); for a SAMPLING row ``_kept``, ``_sampled_probs`` (the
        distribution drawn from) and ``_draw_logits`` (``x``: the logits the
        canonical draw reads).
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
            row = req.row(x, list(base), draft_position=len(history) - len(base))
        res, _x0, y = session._prepare(row)
        if res.mode == SAMPLING:
            keep = session._kept(res, y)
            probs = session._sampled_probs(res, y, keep)
            y = session._draw_logits(y)
        else:
            # the one rule for a greedy row (token and errors), shared with the single-step path
            tok = session._choose_deterministic(res, y)
            keep = None
            probs = torch.zeros_like(y)
            probs[tok] = 1.0
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
                toks.append(int(torch.argmax(q)))  # the one-hot of _choose_deterministic's token
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


def examined_drafts(toks: list) -> list:
    """The drafts of a literal list that verification examines: those before the first pad.

    Parameters
    ----------
    toks : list of int
        One step's literal drafts, as the case gives them (``DRAFT_PAD =
        -1`` pads the list).

    Returns
    -------
    list of int
        ``toks[:j]`` for the first ``j`` with ``toks[j] == -1``, else
        ``toks``. The entries from ``j`` on are never read (any value);
        another negative id before ``j`` stays in the prefix, where the
        vocabulary check makes it ``invalid_draft``.

    Source: FlashInfer's ``chain_speculative_sampling`` pads with ``-1``
    (flashinfer-ai/flashinfer#879; PR #3551 makes a negative id an
    immediate rejection); vLLM 0.32.0 ``rejection_random_sample_kernel`` and
    ``rejection_greedy_sample_kernel`` reject a ``-1`` padding id
    (v1/sample/rejection_sampler.py). SEMANTICS §4.
    """
    toks = [int(t) for t in toks]
    return toks[:toks.index(DRAFT_PAD)] if DRAFT_PAD in toks else toks


def greedy_by_convention(runner, req) -> bool:
    """Whether ``req`` samples only because of the profile's greedy convention.

    True when ``profile.greedy_as_top_k_1`` turned a request that resolves
    to GREEDY under the profile's other rules into ``temperature = 1, top_k
    = 1`` sampling. Its literal drafts are verified with ``q = one-hot(d)``
    (module docstring, "Greedy convention"), so that convention never
    decides whether a verification request is valid.

    Parameters
    ----------
    runner : impls.reference.scenario._Runner
    req : RequestSpec

    Returns
    -------
    bool
    """
    profile = runner.profile
    if not profile.greedy_as_top_k_1:
        return False
    vocab = (req.model or runner.spec.model).vocab
    try:
        res = resolve(req.row(torch.zeros(vocab), []), dataclasses.replace(profile, greedy_as_top_k_1=False))
    except RowError:
        return False
    return res.mode == GREEDY


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
    draft distributions ``(K, V)`` (the one-hot of each literal draft under
    the greedy convention), the draft ids ``(K,)`` int64 (the examined
    drafts: for a padded list the prefix before its first ``-1``, so never a
    pad), the target distributions ``(K + 1, V)`` (the same processed rows
    the canonical path reads), the request's Philox seed and the first of
    the offsets its declared list took;
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


def _verify(runner, cache: _Cache, st, step: int, toks: list, qs: Optional[list], u_rows: Optional[torch.Tensor],
            offsets: list, seed) -> None:
    # toks: the examined drafts (a padded literal list's prefix, examined_drafts); qs None: q = one-hot(d)
    # (greedy_by_convention). The K + 1 offsets and rewind follow the declared lengths.
    req, profile = st.request, runner.profile
    K = len(toks)
    base = tuple(st.generated)
    rows = [cache.filtered("target", req, base + tuple(toks[:i]), base) for i in range(K + 1)]
    res = rows[0][0]
    V = rows[0][1].shape[-1]
    for t in toks:
        if not 0 <= t < V:
            raise RowError("invalid_draft", f"draft token {t} outside the target vocabulary [0, {V})")
    if qs is None:
        qs = []
        for t in toks:
            q = torch.zeros_like(rows[0][3])
            q[t] = 1.0
            qs.append(q)
    emitted, reason = [], "none"

    def emit(t: int) -> bool:
        nonlocal reason
        r = finish_reason(req.row(rows[0][1], list(base) + emitted), t, profile)
        emitted.append(int(t))
        reason = r
        return r != "none"

    def canonical() -> int:
        # The canonical verification (module docstring, item 3): the accepted prefix, then the
        # correction or bonus token unless an accepted draft finished the request. The bonus rule
        # at i == K also draws the token of a pad's position (K = the examined drafts).
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
        literal = st.request.drafts is not None
        examined = examined_drafts(toks) if literal else toks
        try:
            if literal and st.mode != GREEDY:
                # q of literal drafts: one-hot under the greedy convention, else the draft model's
                qs = None if greedy_by_convention(runner, st.request) else _q_for_literal(cache, st, examined)
            row = st.request.row(torch.zeros(1), st.generated)
            runner.session.seeds.observe(st.request.slot, st.request.id, effective_seed(row, runner.profile),
                                        stream=row.child_stream)
            # K + 1 rows of the declared list (pads included: they occupy rows, as they occupy KV cache)
            pairs = [runner.session.seeds.take(st.request.slot) for _ in range(len(toks) + 1)] \
                if st.mode == SAMPLING else []
        except (RowError, ModelError) as e:
            fail_request(st, e if isinstance(e, RowError) else RowError("bad_logits", f"draft model: {e}"), step)
            continue
        pending.append((st, examined, qs, pairs))
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
        the step's start, ``min_length`` adding the ``len(history) -
        len(base)`` drafts ahead (module docstring, item 3).

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
    base = tuple(history if base is None else base)
    row = req.row(model.logits(req.fields.get("prompt", []), list(history)), list(base),
                  draft_position=len(history) - len(base))
    res, _x0, y = session._prepare(row)
    if res.mode != SAMPLING:
        p = torch.zeros_like(y)
        p[session._choose_deterministic(res, y)] = 1.0
        return p
    return session._sampled_probs(res, y, session._kept(res, y))
