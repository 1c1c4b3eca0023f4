"""``sampcheck diff A B``: what changed between two run records (:mod:`harness.records.records`).

Every case id of either record gets one kind, in this order of precedence:

``removed``
    only in A.
``added``
    only in B.
``newly failing``
    A's status is ``pass`` or ``known-diff``; B's is ``fail``, ``error`` or
    ``known-bug``.
``newly passing``
    the other way round.
``status changed``
    any other change of status (e.g. ``n/a`` -> ``pass``, ``pass`` ->
    ``known-diff``), except one that follows the draw (below).
``changed output``
    same status, different outputs or provenance: an exact row's outputs differ (token,
    error kind, mode, finish reason, support, probabilities, logprobs, rank,
    top logprobs, rewritten logits; floats beyond ``1e-6 + 2e-6 |b|``, the rounding of a record; the
    free-text error message is not compared), an invariant's outcome differs,
    the profile fields named for a ``known-diff`` differ, whose code decided the verdict
    differs (``own_code``/``borrowed``, when both records are schema 2), a statistical
    row's verdict differs, or a statistical row's two samples differ by the
    two-sample test below; stochastic rows by the rule below.
``unchanged``
    none of the above.

**Stochastic rows.** A row the record marks ``stochastic`` (an exact row,
or a side of an invariant, drawn from an unseeded stream of an
implementation whose RNG is not canonical: :mod:`harness.records.records`) has a
token that differs from run to run, and so does everything that follows
from the token it drew: its **finish reason** (the end id, a stop word),
the RAW and PROCESSED **logprob** of the sampled token, its **rank**, the
sampled token's entry in the **top logprobs** (an engine may append it
there), and the ``holds`` of an invariant with a stochastic side. Such a
row (stochastic in A or in B) is compared as follows:

* When both records drew a token and the tokens differ, the token is
  compared only as membership in the support (a token outside its own
  record's support is a change), the outputs above that follow from it are
  not compared, and the top logprobs are compared with the entries of the
  two drawn tokens left out of both lists. Everything else is compared
  exactly: error kind, mode, support, probabilities, rewritten logits (they
  do not depend on the draw).
* When both drew the same token, everything is compared exactly (the
  outputs that follow from the token must then agree too).
* When only one drew a token (the other failed), the error kind and the
  token are compared exactly (that is the change) and the outputs that
  follow from the token are not.

An invariant's side marked stochastic is compared the same way (its
``a_out``/``b_out``); the invariant's ``holds`` is compared only when every
stochastic side drew the same token in A and B.

**A status that follows the draw.** The judge predicts a stochastic row's
outputs at the token it drew, so whether a case is ``pass`` (its prediction
equals the default profile's) or ``known-diff`` can depend on the draw
(e.g. an unseeded row that happens to draw the end id finishes with
``end_id``, which the default profile, decoding greedily, does not
predict). A change between ``pass`` and ``known-diff`` is therefore counted
as ``unchanged`` when all of these hold: both records name the same profile
and the same reference version; the case has no difference by the rules
above other than the profile fields of the ``known-diff`` (which exist on one
side only); and at least one stochastic row or invariant side drew another
token. The text report lists the case under "STATUS FOLLOWS THE DRAW, NOT
COUNTED" with the draws that differ (the HTML page lists it among the
unchanged cases). Any other status change, including a stochastic draw
that turns ``pass`` into ``fail`` or ``known-bug``, is counted as above: a
failure is evidence whatever drew it.

**Two-sample test.** A statistical row's draws are kept as counts per bin
of its goodness-of-fit test. The bins of A and B are merged into their
finest common groups (tokens binned together in either record form one
group; draws outside the support form a group of their own); groups with
fewer than 10 draws in A and B together are pooled; then Pearson's
chi-square test of homogeneity on the 2 x groups table
(``scipy.stats.chi2_contingency``, no continuity correction). The
**false-alarm rate** is family-wise: ``false_alarm`` (default
:data:`FALSE_ALARM` = 1e-3) split evenly over the tests of the diff
(Bonferroni), so two records of the same implementation drawing from the
same distribution are reported "changed" with probability at most 1e-3.

A drop in the number of cases (B has fewer than A, or B's
``cases_declared`` is smaller) is flagged as a **setup regression**: a
corpus that lost cases, or a run that lost an implementation's cases, is
not "no change". The exit status of ``sampcheck diff`` is 1 when any case
is not ``unchanged`` or the setup regressed, else 0.

The text and the HTML are functions of the two records only (no time
stamps, no paths beyond the names given), so re-running on committed records
reproduces a committed report byte for byte.
"""

from __future__ import annotations

from pathlib import Path

from harness.judge.compare import DRAW_KEYS

__all__ = ["FALSE_ALARM", "KINDS", "diff", "two_sample", "render_text", "render_html"]

#: Default family-wise false-alarm rate of the two-sample tests of one diff.
FALSE_ALARM = 1e-3
#: The kinds, in report order.
KINDS = ("newly failing", "newly passing", "status changed", "changed output", "added", "removed", "unchanged")
_PASSING = {"pass", "known-diff"}
_FAILING = {"fail", "error", "known-bug"}
_MIN_GROUP = 10
_ATOL, _RTOL = 1e-6, 2e-6


def _close(x, y) -> bool:
    if isinstance(x, bool) or isinstance(y, bool) or not isinstance(x, (int, float)) or not isinstance(y, (int, float)):
        if isinstance(x, list) and isinstance(y, list):
            return len(x) == len(y) and all(_close(u, v) for u, v in zip(x, y))
        if isinstance(x, dict) and isinstance(y, dict):
            return x.keys() == y.keys() and all(_close(x[k], y[k]) for k in x)
        return x == y
    return abs(x - y) <= _ATOL + _RTOL * abs(y)


def _short(v, limit: int = 80) -> str:
    s = "null" if v is None else (repr(v) if isinstance(v, str) else str(v))
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _outside_count(out) -> int:
    """Draws outside the predicted support: a count, or a record's ``{token: count}`` (``outside_support``)."""
    if isinstance(out, dict):
        return sum(int(n) for n in out.values())
    return int(out or 0)


def _groups(counts_a: list, counts_b: list, out_a, out_b) -> list:
    """Finest common groups of two binnings: ``[(label, count_a, count_b)]``, deterministic order.

    The draws outside the support (``out_a``, ``out_b``: :func:`_outside_count`) are one group.
    """
    out_a, out_b = _outside_count(out_a), _outside_count(out_b)
    parent = {}

    def find(t):
        while parent.setdefault(t, t) != t:
            parent[t] = parent[parent[t]]
            t = parent[t]
        return t

    for counts in (counts_a, counts_b):
        for tokens, _ in counts:
            for t in tokens[1:]:
                ra, rb = find(tokens[0]), find(t)
                if ra != rb:
                    parent[max(ra, rb)] = min(ra, rb)
            if tokens:
                find(tokens[0])
    members = {}
    for t in parent:
        members.setdefault(find(t), []).append(t)
    tot = {root: [0, 0] for root in members}
    for side, counts in enumerate((counts_a, counts_b)):
        for tokens, n in counts:
            if tokens:
                tot[find(tokens[0])][side] += int(n)
    rows = [(",".join(str(t) for t in sorted(m)), tot[r][0], tot[r][1]) for r, m in
            sorted(members.items(), key=lambda kv: min(kv[1]))]
    if out_a or out_b:
        rows.append(("outside support", out_a, out_b))
    return rows


def two_sample(counts_a: list, counts_b: list, outside_a=0, outside_b=0) -> dict:
    """Chi-square two-sample (homogeneity) test of two binned samples of one row.

    Parameters
    ----------
    counts_a, counts_b : list of [list of int, int]
        ``[[token ids of a bin], observed draws]`` of each record.
    outside_a, outside_b : int or dict
        Draws outside the predicted support: a count, or a record's
        ``outside_support`` (``{token: count}``); one group.

    Returns
    -------
    dict
        ``statistic`` (float), ``df`` (int), ``p_value`` (float; 1.0 when
        fewer than two groups remain), ``groups`` (int), ``n_a``, ``n_b``.

    Notes
    -----
    Groups: see the module docstring. ``scipy.stats.chi2_contingency`` with
    ``correction=False`` (Pearson's statistic, chi-square reference
    distribution on ``groups - 1`` degrees of freedom).
    """
    rows = _groups(counts_a, counts_b, outside_a, outside_b)
    n_a, n_b = sum(r[1] for r in rows), sum(r[2] for r in rows)
    big = [r for r in rows if r[1] + r[2] >= _MIN_GROUP]
    small = [r for r in rows if r[1] + r[2] < _MIN_GROUP]
    if small:
        big.append(("pooled", sum(r[1] for r in small), sum(r[2] for r in small)))
    big = [r for r in big if r[1] + r[2] > 0]
    if len(big) < 2 or n_a == 0 or n_b == 0:
        return {"statistic": 0.0, "df": 0, "p_value": 1.0, "groups": len(big), "n_a": n_a, "n_b": n_b}
    from scipy.stats import chi2_contingency
    res = chi2_contingency([[r[1] for r in big], [r[2] for r in big]], correction=False)
    return {"statistic": float(res[0]), "df": int(res[2]), "p_value": float(res[1]), "groups": len(big),
            "n_a": n_a, "n_b": n_b}


def _row_key(row: dict, i: int) -> str:
    return str(row.get("row") if row.get("row") is not None else f"#{i}")


#: outputs of an exact row that follow from the token it drew (module docstring, *Stochastic rows*)
_DRAWN = tuple(sorted(DRAW_KEYS - {"token", "top_logprobs"}))  # token and top logprobs have their own rules


def _without(top, ids: set):
    """Top logprobs ``[[id, logprob], ...]`` without the entries of ``ids`` (anything else unchanged)."""
    if not isinstance(top, list):
        return top
    return [e for e in top if not (isinstance(e, list) and e and e[0] in ids)]


def _compare_outputs(a: dict, b: dict, stochastic: bool, label: str = "") -> tuple:
    """Differences between two outputs of one row: ``(changes, draws)``, lists of one-line strings.

    ``changes`` are counted; ``draws`` (only for a stochastic row) are the
    differences that follow the draw and are not counted. ``label`` prefixes
    each key (e.g. ``"a_out "``).
    """
    out, drawn = [], []
    skip = {"message"}
    if stochastic:
        ta, tb = a.get("token"), b.get("token")
        for side, act in (("A", a), ("B", b)):
            sup = act.get("support")
            if isinstance(sup, list) and act.get("token") is not None and act["token"] not in sup:
                out.append(f"{label}token {act['token']} of {side} lies outside its support {_short(sup)}")
        if ta is not None and tb is not None and ta != tb:
            skip |= {"token", "top_logprobs", *_DRAWN}
            drawn.append(f"{label}token: {_short(ta)} -> {_short(tb)}")
            drawn.extend(f"{label}{k}: {_short(a.get(k))} -> {_short(b.get(k))}" for k in _DRAWN
                         if not _close(a.get(k), b.get(k)))
            top_a, top_b = _without(a.get("top_logprobs"), {ta, tb}), _without(b.get("top_logprobs"), {ta, tb})
            if not _close(top_a, top_b):
                out.append(f"{label}top_logprobs (without the drawn tokens {ta}, {tb}): {_short(top_a)} -> "
                           f"{_short(top_b)}")
            elif not _close(a.get("top_logprobs"), b.get("top_logprobs")):
                drawn.append(f"{label}top_logprobs: {_short(a.get('top_logprobs'))} -> "
                             f"{_short(b.get('top_logprobs'))}")
        elif (ta is None) != (tb is None):
            skip |= {"top_logprobs", *_DRAWN}  # one side errored: its error and token are compared
    for k in sorted((set(a) | set(b)) - skip):
        if not _close(a.get(k), b.get(k)):
            out.append(f"{label}{k}: {_short(a.get(k))} -> {_short(b.get(k))}")
    if a.get("error") != b.get("error") and (a.get("message") or b.get("message")):
        out.append(f"{label}message: {_short(a.get('message'), 160)} -> {_short(b.get('message'), 160)}")
    return out, drawn


def _compare_exact(ra: dict, rb: dict) -> tuple:
    """``(changes, draws)`` of two records' entries of one exact row (see :func:`_compare_outputs`)."""
    return _compare_outputs(ra.get("actual") or {}, rb.get("actual") or {},
                            bool(ra.get("stochastic") or rb.get("stochastic")))


def _stat_pairs(ea: dict, eb: dict) -> list:
    if not ea or not eb:
        return []
    rb = {_row_key(r, i): r for i, r in enumerate(eb.get("rows", []))}
    return [(k, r, rb[k]) for i, r in enumerate(ea.get("rows", []))
            for k in [_row_key(r, i)] if k in rb and "counts" in r and "counts" in rb[k]]


def _compare_invariant(i: int, ia: dict, ib: dict) -> tuple:
    """``(changes, draws)`` of two records' entries of one invariant (module docstring)."""
    out, drawn = [], []
    head = f"invariant {i} ({ia.get('kind')} {ia.get('a')} ~ {ia.get('b')}): "
    loose = set(ia.get("stochastic", [])) | set(ib.get("stochastic", []))
    same_draws, sides = True, []
    for k in ("a_out", "b_out"):
        oa, ob = ia.get(k), ib.get(k)
        if k[0] in loose and isinstance(oa, dict) and isinstance(ob, dict):
            ch, dr = _compare_outputs(oa, ob, True, f"{k} ")
            sides.append((ch, dr))
            same_draws = same_draws and oa.get("token") == ob.get("token")
        elif isinstance(oa, dict) and isinstance(ob, dict):
            # only the outputs that differ, so long values never hide where the change is
            sides.append(([f"{k}.{key}: {_short(oa.get(key))} -> {_short(ob.get(key))}"
                           for key in sorted(set(oa) | set(ob)) if not _close(oa.get(key), ob.get(key))], []))
        elif not _close(oa, ob):
            sides.append(([f"{k} {_short(oa)} -> {_short(ob)}"], []))
    if ia.get("holds") != ib.get("holds"):
        (out if same_draws else drawn).append(f"holds {_short(ia.get('holds'))} -> {_short(ib.get('holds'))}")
    for ch, dr in sides:
        out.extend(ch)
        drawn.extend(dr)
    return [head + d for d in out], [head + d for d in drawn]


def _outside(value) -> int:
    """Draws outside the support of a statistical row: records keep them by token (``{"3": 8234}``)."""
    return sum(value.values()) if isinstance(value, dict) else int(value or 0)


def _compare_case(ea: dict, eb: dict, alpha: float) -> tuple:
    """Differences between two entries of one case: ``(changes, draws)``, lists of one-line strings.

    ``draws`` are the differences of stochastic rows that follow the draw
    and are not counted (module docstring, *Stochastic rows*).
    """
    out, drawn = [], []
    rows_a = {_row_key(r, i): r for i, r in enumerate(ea.get("rows", []))}
    rows_b = {_row_key(r, i): r for i, r in enumerate(eb.get("rows", []))}
    for key in sorted(set(rows_a) | set(rows_b)):
        ra, rb = rows_a.get(key), rows_b.get(key)
        if ra is None or rb is None:
            out.append(f"row {key}: only in {'B' if ra is None else 'A'}")
            continue
        if "counts" in ra or "counts" in rb:
            if ra.get("verdict") != rb.get("verdict"):
                out.append(f"row {key}: verdict {_short(ra.get('verdict'))} -> {_short(rb.get('verdict'))}")
            t = two_sample(ra.get("counts", []), rb.get("counts", []), _outside(ra.get("outside_support")),
                           _outside(rb.get("outside_support")))
            if t["df"] and t["p_value"] < alpha:
                out.append(f"row {key}: the draws differ: two-sample chi-square X^2 = {t['statistic']:.2f} on "
                           f"{t['df']} d.o.f., p = {t['p_value']:.3g} < {alpha:.3g} "
                           f"(N = {t['n_a']} vs {t['n_b']})")
        else:
            ch, dr = _compare_exact(ra, rb)
            out.extend(f"row {key}: {d}" for d in ch)
            drawn.extend(f"row {key}: {d}" for d in dr)
    inv_a, inv_b = ea.get("invariants", []), eb.get("invariants", [])
    for i in range(max(len(inv_a), len(inv_b))):
        ia = inv_a[i] if i < len(inv_a) else None
        ib = inv_b[i] if i < len(inv_b) else None
        if ia is None or ib is None:
            out.append(f"invariant {i}: only in {'B' if ia is None else 'A'}")
        elif not _close(ia, ib):
            ch, dr = _compare_invariant(i, ia, ib)
            out.extend(ch)
            drawn.extend(dr)
    if ea.get("fields", []) != eb.get("fields", []):
        out.append(f"profile fields of the known-diff: {', '.join(ea.get('fields', [])) or '-'} -> "
                   f"{', '.join(eb.get('fields', [])) or '-'}")
    if "own_code" in ea and "own_code" in eb and (ea["own_code"], ea.get("borrowed")) != (eb["own_code"],
                                                                                         eb.get("borrowed")):
        out.append(f"decided by: {_decided(ea)} -> {_decided(eb)}")
    return out, drawn


def _decided(entry: dict) -> str:
    """``"own code"`` or ``"borrowed (penalties, logprobs)"`` for a schema-2 verdict entry."""
    return "own code" if entry.get("own_code") else f"borrowed ({', '.join(entry.get('borrowed') or []) or '-'})"


def _side(rec: dict, name: str) -> dict:
    eng = rec["engine"]
    verdicts = [e for e in rec["cases"].values() if e.get("status") in _PASSING | {"fail", "known-bug"}]
    own = (sum(1 for e in verdicts if e.get("own_code")) if rec.get("schema", 1) >= 2 else None)
    return {"name": name, "impl": eng.get("impl"), "version": eng.get("version"), "profile": eng.get("profile"),
            "schema": rec.get("schema", 1), "verdicts": len(verdicts), "own_code": own,
            "own_code_by_status": ({st: [sum(1 for e in verdicts if e["status"] == st and e.get("own_code")),
                                         sum(1 for e in verdicts if e["status"] == st)]
                                    for st in ("pass", "known-diff", "known-bug", "fail")} if own is not None else None),
            "cases": len(rec["cases"]), "cases_declared": rec["run"].get("cases_declared"),
            "packages": rec["environment"].get("packages", {}),
            "reference_version": rec["environment"].get("reference_version"),
            "sampcheck": rec["environment"].get("sampcheck")}


def diff(a: dict, b: dict, name_a: str = "A", name_b: str = "B", false_alarm: float = FALSE_ALARM) -> dict:
    """Compare two run records.

    Parameters
    ----------
    a, b : dict
        Run records (:func:`harness.records.records.load`); A is the old one.
    name_a, name_b : str
        How the report names them (e.g. the file names).
    false_alarm : float
        Family-wise false-alarm rate of the two-sample tests, in (0, 1).

    Returns
    -------
    dict
        ``a``, ``b`` (engine, version, profile, case counts, packages),
        ``false_alarm``, ``tests`` (two-sample tests run), ``alpha_per_test``,
        ``setup_regression`` (a sentence or ``None``), ``environment``
        (packages whose versions differ: ``[(name, a, b)]``), ``counts``
        (kind -> cases), ``cases`` (one entry per case id, sorted: ``case``,
        ``kind``, ``status_a``, ``status_b``, ``check``, ``details``, and
        ``follows_draw``, the draws that differ, on an ``unchanged`` case
        whose status follows the draw) and ``changed`` (bool). Deterministic.
    """
    ca, cb = a["cases"], b["cases"]
    tests = sum(len(_stat_pairs(ca[c], cb[c])) for c in sorted(set(ca) & set(cb))
                if ca[c]["status"] == cb[c]["status"])
    alpha = false_alarm / max(tests, 1)
    same_reference = (a["engine"].get("profile") == b["engine"].get("profile")
                      and a["environment"].get("reference_version") == b["environment"].get("reference_version"))
    cases = []
    for cid in sorted(set(ca) | set(cb)):
        ea, eb = ca.get(cid), cb.get(cid)
        details, follows = [], False
        if ea is None:
            kind = "added"
        elif eb is None:
            kind = "removed"
        elif ea["status"] != eb["status"]:
            sa, sb = ea["status"], eb["status"]
            kind = ("newly failing" if sa in _PASSING and sb in _FAILING
                    else "newly passing" if sa in _FAILING and sb in _PASSING else "status changed")
            details, drawn = _compare_case(ea, eb, alpha)
            fields_only = [d for d in details if not d.startswith("profile fields of the known-diff: ")] == []
            if {sa, sb} == _PASSING and same_reference and fields_only and drawn:
                kind, follows = "unchanged", True
            if ea.get("message") != eb.get("message"):
                details[:0] = [f"A says: {ea.get('message')}", f"B says: {eb.get('message')}"]
        else:
            details, drawn = _compare_case(ea, eb, alpha)
            kind = "changed output" if details else "unchanged"
        entry = {"case": cid, "kind": kind, "status_a": ea["status"] if ea else None,
                 "status_b": eb["status"] if eb else None,
                 "check": (eb or ea).get("check"), "details": details}
        if follows:
            entry["follows_draw"] = drawn
        cases.append(entry)
    counts = {k: sum(1 for c in cases if c["kind"] == k) for k in KINDS}
    setup = None
    na, nb = len(ca), len(cb)
    da, db = a["run"].get("cases_declared"), b["run"].get("cases_declared")
    if nb < na:
        setup = f"B has {nb} case(s), A has {na}: {na - nb} fewer (a corpus or a run that lost cases)"
    elif isinstance(da, int) and isinstance(db, int) and db < da:
        setup = f"B's corpus declares {db} case(s), A's {da}"
    pa, pb = a["environment"].get("packages", {}), b["environment"].get("packages", {})
    env = [(k, pa.get(k), pb.get(k)) for k in sorted(set(pa) | set(pb)) if pa.get(k) != pb.get(k)]
    changed = setup is not None or any(c["kind"] != "unchanged" for c in cases)
    return {"a": _side(a, name_a), "b": _side(b, name_b), "false_alarm": false_alarm, "tests": tests,
            "alpha_per_test": alpha, "setup_regression": setup, "environment": env, "counts": counts,
            "cases": cases, "changed": changed}


def render_text(result: dict) -> str:
    """The plain-text report of :func:`diff` (what ``sampcheck diff`` prints)."""
    a, b = result["a"], result["b"]
    lines = [f"sampcheck diff: A = {a['name']} ({a['impl']} {a['version']}, profile {a['profile']}, "
             f"{a['cases']} cases)",
             f"                B = {b['name']} ({b['impl']} {b['version']}, profile {b['profile']}, "
             f"{b['cases']} cases)"]
    for name, va, vb in result["environment"]:
        lines.append(f"  package {name}: {va or '-'} -> {vb or '-'}")
    sa, sb = a.get("sampcheck"), b.get("sampcheck")
    if sa and sb and sa != sb:
        lines.append(f"NOTE: made by different sampcheck builds ({sa} vs {sb}): a changed case may be sampcheck's "
                     "change (an adapter, the reference, the judge), not the engine's")
    lines.append(f"two-sample tests: {result['tests']}, family-wise false-alarm rate {result['false_alarm']:g} "
                 f"(each at {result['alpha_per_test']:.3g}, Bonferroni)")
    if result["setup_regression"]:
        lines.append(f"SETUP REGRESSION: {result['setup_regression']}")
    if a["impl"] != b["impl"] or a["profile"] != b["profile"]:
        lines.append(f"NOTE: two implementations ({a['impl']}, profile {a['profile']} vs {b['impl']}, profile "
                     f"{b['profile']}), not two versions of one: each is judged against its own profile, so a "
                     "changed status compares engines")
    for side in (a, b):
        if side["own_code"] is None:
            lines.append(f"{side['name']}: record schema {side['schema']}, before stage provenance: whose code "
                         "decided its verdicts is unknown (not compared)")
        else:
            split = ", ".join(f"{st} {own} of {n}" for st, (own, n) in side["own_code_by_status"].items() if n)
            lines.append(f"{side['name']}: {side['own_code']} of {side['verdicts']} verdicts decided by its own code"
                         + (f" ({split})" if split else ""))
    lines.append("summary: " + ", ".join(f"{result['counts'][k]} {k}" for k in KINDS))
    for kind in KINDS[:-1]:
        group = [c for c in result["cases"] if c["kind"] == kind]
        if not group:
            continue
        lines.append("")
        lines.append(f"{kind.upper()} ({len(group)})")
        for c in group:
            lines.append(f"  {c['case']}: {c['status_a'] or '-'} -> {c['status_b'] or '-'}")
            lines.extend(f"      {d}" for d in c["details"])
    follows = [c for c in result["cases"] if c.get("follows_draw")]
    if follows:
        lines.append("")
        lines.append(f"STATUS FOLLOWS THE DRAW, NOT COUNTED ({len(follows)}; counted as unchanged)")
        for c in follows:
            lines.append(f"  {c['case']}: {c['status_a']} -> {c['status_b']}")
            lines.extend(f"      {d}" for d in c["details"])
            lines.extend(f"      drawn: {d}" for d in c["follows_draw"])
    lines.append("")
    lines.append("result: " + ("CHANGED" if result["changed"] else "no change"))
    return "\n".join(lines) + "\n"


def render_html(result: dict) -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external links) of :func:`diff`.

    Rendered with jinja2 from ``harness/report/templates/diff.html.j2`` (autoescaped).
    """
    import jinja2
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(Path(__file__).parent / "templates")),
                             autoescape=True, keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True)
    groups = [(k, [c for c in result["cases"] if c["kind"] == k]) for k in KINDS]
    return env.get_template("diff.html.j2").render(r=result, kinds=KINDS, groups=groups,
                                                   text=render_text(result))
