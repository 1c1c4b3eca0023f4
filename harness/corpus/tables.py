"""The generated tables of ``docs/``: which engine expresses which feature, and what the corpus exercises.

``sampcheck docs`` writes both (:mod:`harness.corpus.docs`); a test fails when either is stale.

* ``docs/features.md`` (:func:`features_md`): one row per feature of the parameter registry
  (:data:`impls.params.FEATURES`, with the parameters that need it), one column per engine
  implementation of the implementation registry (:func:`engines`: the project's own entries
  that are not the reference's predictions and have the ``conformance`` role), each cell read
  from the adapter's declarations (``features``, ``scenario_features``), and the cases that
  declare the feature.
* ``docs/coverage.md`` (:func:`coverage_md`): every rule of ``docs/SEMANTICS.md`` (a numbered
  heading: :func:`rules`) and every semantic field of :class:`impls.profiles.Profile`, each with
  the cases that exercise it, and those no case exercises.

A case *exercises a field* when its prediction changes with the field (the mutation flips of
:func:`harness.judge.mutation.dependence`). Those take 22 minutes for the corpus of 284 cases
(``--jobs 2`` on 2 busy cores, 2026-12-05), too slow for the docs command, so they are cached in ``docs/coverage.json`` (:data:`CACHE_NAME`;
``sampcheck docs --refresh`` brings it up to date: only the cases whose file changed since and
the flips that are new). This module only reads it: it imports no engine and loads no case
beyond its TOML, so ``sampcheck docs`` runs in the plain CPU environment in seconds.

A case *exercises a rule* (section ``R`` of SEMANTICS) when (:func:`rule_evidence`):

* ``cited``: its file names ``§R`` (or ``SEMANTICS R``);
* ``input``: it declares a feature whose registry entry names ``§R`` (the feature's line in
  :data:`~impls.params.FEATURES`, or the ``rule`` of a parameter that needs the feature), or its
  scenario's requests set a request-only field (``draft_len``, ``drafts``, ``d2t``, ...) whose
  ``rule`` names ``§R``;
* ``profile``: its prediction depends on a profile field that names ``§R`` (:func:`field_rules`:
  the field's docstring, a profile's citation for it, or a backquoted mention of it in
  section ``R``).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import Optional

from impls import params

__all__ = ["CACHE_NAME", "CACHE_SCHEMA", "canon", "profile_fingerprint", "case_fingerprint", "read_cache", "write_cache",
           "refs", "rules", "field_docs", "field_rules", "scan_cases", "engines", "cell", "features_md",
           "rule_evidence", "coverage_md", "LONG"]

#: The mutation cache, beside the generated tables (``docs/coverage.json``).
CACHE_NAME = "coverage.json"
#: Its format version (:func:`read_cache`).
CACHE_SCHEMA = 1
#: A list of cases longer than this is a count, with the ids listed below the table.
LONG = 3

# -- fingerprints ----------------------------------------------------------------------------------------


def canon(value) -> str:
    """A profile field's value as text that does not depend on the process (sets sorted).

    ``repr`` of a frozenset of strings follows string hashing, which changes with every
    process (``PYTHONHASHSEED``); the cache's keys must not.

    Examples
    --------
    >>> canon(frozenset({"b", "a"})), canon(("x", 1)), canon(None)
    ("{'a', 'b'}", "('x', 1)", 'None')
    """
    if isinstance(value, (set, frozenset)):
        return "{" + ", ".join(sorted(canon(v) for v in value)) + "}"
    if isinstance(value, (tuple, list)):
        inner = ", ".join(canon(v) for v in value)
        return f"({inner},)" if isinstance(value, tuple) and len(value) == 1 else f"({inner})"
    return repr(value)


def profile_fingerprint(profile) -> str:
    """12 hex digits of the SHA-256 of the profile's semantic fields (:func:`canon` of each, sorted by name)."""
    text = "\n".join(f"{k}={canon(v)}" for k, v in sorted(profile.semantic_fields().items()))
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def case_fingerprint(path: Path) -> str:
    """12 hex digits of the SHA-256 of a case file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()[:12]


def read_cache(path: Path) -> dict:
    """The mutation cache at ``path`` (``{"schema", "method", "flips", "cases"}``), empty when absent.

    ``flips``: the flip keys measured (``"<profile>@<fingerprint> <field> = <value>"``);
    ``cases``: case id -> ``{"sha256", "fields": {field: the first flip key that changed its
    prediction}}``.

    Raises
    ------
    ValueError
        A file that is not a cache of :data:`CACHE_SCHEMA`.
    """
    path = Path(path)
    if not path.is_file():
        return {"schema": CACHE_SCHEMA, "flips": [], "cases": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: not JSON ({e}); 'sampcheck docs --refresh --all' rebuilds it") from None
    if not isinstance(data, dict) or data.get("schema") != CACHE_SCHEMA:
        raise ValueError(f"{path}: not a mutation cache of schema {CACHE_SCHEMA}; 'sampcheck docs --refresh --all' "
                         "rebuilds it")
    return data


def write_cache(path: Path, cache: dict) -> bool:
    """Write the mutation cache (one line per flip and per case, so that a change is a small diff); return
    whether the file changed."""
    lines = ["{", f'"schema": {CACHE_SCHEMA},', '"flips": [']
    flips = sorted(cache["flips"])
    lines += [f" {json.dumps(k, ensure_ascii=False)}{',' if i < len(flips) - 1 else ''}" for i, k in enumerate(flips)]
    lines += ["],", '"cases": {']
    ids = sorted(cache["cases"])
    for i, cid in enumerate(ids):
        e = cache["cases"][cid]
        entry = json.dumps({"sha256": e["sha256"], "fields": dict(sorted(e["fields"].items()))}, ensure_ascii=False)
        lines.append(f" {json.dumps(cid)}: {entry}{',' if i < len(ids) - 1 else ''}")
    lines += ["}", "}"]
    text = "\n".join(lines) + "\n"
    path = Path(path)
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


# -- the rules of SEMANTICS.md ---------------------------------------------------------------------------

#: ``§1.4a``, ``§ 2``, ``SEMANTICS 1.5``, ``SEMANTICS.md §5``; ``§2-§4`` is a range of sections.
_REF = re.compile(r"(?:§\s?|SEMANTICS(?:\.md)?,?\s+§?\s?)(\d+(?:\.\d+)?[a-z]?)(?:\s*[-–]\s*§?(\d+)\b(?!\.\d))?")
_HEADING = re.compile(r"^#{2,3} (\d+(?:\.\d+)?[a-z]?)\.? (.+)$")


def refs(text: str) -> list:
    """The SEMANTICS sections ``text`` names, in order of first mention, without repeats.

    Examples
    --------
    >>> refs("rule (§1.1 rule 3, §1.5; llama.cpp), SEMANTICS 1.4a, §2-§4, § 采样参数")
    ['1.1', '1.5', '1.4a', '2', '3', '4']
    """
    out = []
    for m in _REF.finditer(text):
        found = [m.group(1)]
        if m.group(2) and m.group(1).isdigit() and int(m.group(2)) > int(m.group(1)):
            found = [str(i) for i in range(int(m.group(1)), int(m.group(2)) + 1)]
        out += [r for r in found if r not in out]
    return out


def rules(semantics: Path) -> dict:
    """``{section: (title, body)}`` of every numbered heading of SEMANTICS.md, in document order.

    A section is a heading ``## N. Title`` or ``### N.M Title`` (``1.4a``, ``2a`` too); its body runs to
    the next heading. A parenthesis that dates the section (``(added ...)``) is left out of
    the title.
    """
    out, cur, body = {}, None, []
    for line in Path(semantics).read_text(encoding="utf-8").splitlines():
        m = _HEADING.match(line)
        if m or line.startswith("#"):
            if cur is not None:
                out[cur[0]] = (cur[1], "\n".join(body))
            cur, body = None, []
        if m:
            cur = (m.group(1), re.sub(r"\s*\((?:added|read|rewritten) [^)]*\)", "", m.group(2)).strip())
        elif cur is not None:
            body.append(line)
    if cur is not None:
        out[cur[0]] = (cur[1], "\n".join(body))
    return out


def field_docs() -> dict:
    """``{field: its docstring entry}`` for every semantic field of :class:`~impls.profiles.Profile`.

    An entry may document several fields (``min_p_forces_sampling, top_p_decay_forces_sampling :
    bool``): each gets the entry's text.
    """
    from impls.profiles import TRTLLM, Profile
    fields = set(TRTLLM.semantic_fields())
    out, names, body = {}, [], []
    doc = Profile.__doc__.split("Attributes\n    ----------\n", 1)[1]
    for line in doc.splitlines():
        m = re.match(r"^    (\w+(?:, \w+)*)(?: : (.*))?$", line)
        if m:
            for n in names:
                out[n] = "\n".join(body)
            names = [n for n in m.group(1).split(", ") if n in fields]
            body = [m.group(2) or ""]
        elif line.startswith("        "):
            body.append(line.strip())
    for n in names:
        out[n] = "\n".join(body)
    return out


def field_rules(sections: dict) -> dict:
    """``{field: [section, ...]}``: the SEMANTICS sections each semantic profile field implements.

    A field names section ``R`` when its docstring entry (:func:`field_docs`) or a registered
    profile's citation for it names ``§R``, or when section ``R``'s text mentions it in
    backquotes (`` `field` `` or `` `field = value` ``). Sections in document order.
    """
    from impls.profiles import PROFILES, TRTLLM
    docs = field_docs()
    out = {}
    for f in TRTLLM.semantic_fields():
        found = set(refs(docs.get(f, "")))
        for p in PROFILES.values():
            found |= set(refs(p.citations.get(f, "")))
        for sec, (_, body) in sections.items():
            if re.search(rf"`{re.escape(f)}\b", body):
                found.add(sec)
        out[f] = [s for s in sections if s in found]
    return out


# -- the corpus, read as TOML ----------------------------------------------------------------------------


def scan_cases(root: Path) -> list:
    """Every case file of the corpus at ``root``, read as TOML within the loader's limits (not validated: that
    is :func:`~harness.corpus.load.load_case`'s business, and it takes seconds more).

    Returns
    -------
    list of dict
        ``{"id", "path", "features", "requests", "text", "sha256"}`` sorted by id; ``requests``
        the scenario-request fields (:data:`impls.params.SCOPES` ``request``) its scenario sets,
        ``text`` the file's text (its comments too), ``path`` relative to ``root``, ``sha256``
        :func:`case_fingerprint`'s.

    Raises
    ------
    CaseError
        A file the loader would refuse to read (:func:`~harness.corpus.tomlfile.read_case_toml`),
        or one without a string ``id`` or with a ``features`` that is not a list.
    """
    from .errors import CaseError
    from .load import discover
    from .tomlfile import parse_case_text, read_limited
    out = []
    for path in discover(root):
        raw = read_limited(path, str(path))
        data = parse_case_text(raw, str(path))
        if not isinstance(data.get("id"), str):
            raise CaseError(str(path), "id", "missing or not a string")
        if not isinstance(data.get("features", []), list):
            raise CaseError(str(path), "features", "not a list")
        scen = data.get("scenario") if isinstance(data.get("scenario"), dict) else {}
        tables_ = [r for r in scen.get("requests", []) if isinstance(r, dict)] + [scen.get("defaults") or {}]
        only = {p.name for p in params.PARAMS if p.scope == "request"}
        out.append({"id": data["id"], "path": Path(path).resolve().relative_to(Path(root).resolve()).as_posix(),
                    "features": sorted({f for f in data.get("features", []) if isinstance(f, str)}),
                    "requests": sorted({k for t in tables_ if isinstance(t, dict) for k in t if k in only}),
                    "text": raw.decode("utf-8"), "sha256": hashlib.sha256(raw).hexdigest()[:12]})
    return sorted(out, key=lambda c: c["id"])


# -- docs/features.md ------------------------------------------------------------------------------------


def engines() -> list:
    """The engine implementations of the registry, in registry order: ``[(name, impl)]``.

    The project's own entries (:data:`impls.registry.BUILTIN_PACKAGES`; entry points of
    installed packages are left out, so the table does not depend on what is installed)
    whose object has the ``conformance`` role and is not a prediction of the reference
    (``is_prediction``). Each is built (``Entry.create``), which imports no engine.
    """
    from impls import registry
    out = []
    for e in registry.entries():
        if e.origin not in registry.BUILTIN_PACKAGES:
            continue
        impl = e.create()
        if "conformance" in registry.roles_of(impl) and not getattr(impl, "is_prediction", False):
            out.append((e.name, impl))
    return out


def _runs_scenarios(impl) -> bool:
    return callable(getattr(impl, "run_scenario", None))


def cell(impl, feature: str) -> str:
    """Whether ``impl`` expresses ``feature``: ``✓`` (in every kind of case it runs), ``step`` (single steps
    only), ``scenario`` (multi-step scenarios only) or ``–``.

    Single steps read ``features``; scenarios read ``scenario_features`` when the adapter declares
    it, else ``features`` (the judge's rule, :meth:`~harness.corpus.kinds.CheckKind.feature_set`),
    and nothing when it has no ``run_scenario``.
    """
    step = feature in impl.features
    if not _runs_scenarios(impl):
        return "✓" if step else "–"
    scen = feature in getattr(impl, "scenario_features", impl.features)
    return {(True, True): "✓", (True, False): "step", (False, True): "scenario", (False, False): "–"}[(step, scen)]


def _params_of(feature: str) -> list:
    out = [p.name for p in params.PARAMS if p.feature == feature]
    out += [f"{p.name} ({words})" for p in params.PARAMS for f, _, words in p.value_features if f == feature]
    return out


class _Links:
    """Case links written as shortcut reference links (``[id]``), their targets listed once at the end."""

    def __init__(self, cases: list, root: Path):
        self.path = {c["id"]: f"../{Path(root).name}/{c['path']}" for c in cases}
        self.used: set = set()

    def link(self, cid: str) -> str:
        self.used.add(cid)
        return f"[{cid}]"

    def many(self, ids: list) -> str:
        return ", ".join(self.link(i) for i in ids)

    def short(self, ids: list, anchor: str) -> str:
        """The ids, or past :data:`LONG` a count linking to ``#anchor``."""
        if not ids:
            return "–"
        return f"[{len(ids)} cases](#{anchor})" if len(ids) > LONG else self.many(ids)

    def long_lists(self, title: str, lists: list) -> list:
        """``## title`` and one ``### name`` per list of ``(name, anchor, ids)`` longer than :data:`LONG`."""
        long = [x for x in lists if len(x[2]) > LONG]
        if not long:
            return []
        lines = ["", f"## {title}", ""]
        for name, anchor, ids in long:
            lines += [f'<a id="{anchor}"></a>', "", f"### {name} ({len(ids)})", "", self.many(ids), ""]
        return lines

    def targets(self) -> list:
        """The link targets used, one line each, sorted (after a blank line)."""
        return [""] + [f"[{i}]: {self.path[i]}" for i in sorted(self.used)] if self.used else []


def _md(text: str) -> str:
    return text.replace("|", "\\|")


def features_md(root: Path, cases: Optional[list] = None, impls: Optional[list] = None) -> str:
    """The text of ``docs/features.md`` for the corpus at ``root`` (``cases``: :func:`scan_cases`'s list).

    Parameters
    ----------
    root : Path
        The corpus (``cases/``); links to case files are relative to ``docs/`` beside it.
    cases : list of dict, optional
        Default: :func:`scan_cases` of ``root``.
    impls : list of (str, object), optional
        Default: :func:`engines`.
    """
    cases = scan_cases(root) if cases is None else cases
    impls = engines() if impls is None else impls
    links = _Links(cases, root)
    names = [n for n, _ in impls]
    scen = [n for n, i in impls if _runs_scenarios(i)]
    own = [n for n, i in impls if _runs_scenarios(i) and hasattr(i, "scenario_features")]
    lines = [
        "# Features: which engine expresses what, and which cases check it",
        "",
        "<!-- Generated by 'sampcheck docs' (harness/corpus/tables.py) from impls/params.py, the implementation",
        "     registry and cases/: do not edit. -->",
        "",
        f"One row per feature of the parameter registry (`impls/params.py` `FEATURES`, {len(params.FEATURES)} "
        "features; *parameters*: the case fields that need it), one column per engine implementation of the "
        f"registry ({len(names)}: the project's own entries with the `conformance` role, not the reference's "
        "predictions; entry points of installed packages are not listed), read from each adapter's "
        "`features` and `scenario_features`. A case that declares a feature its implementation lacks is "
        "`n/a` there.",
        "",
        "* `✓`: expressed in every kind of case the implementation runs;",
        "* `step`: in single-step cases only (its multi-step scenarios do not);",
        "* `scenario`: in multi-step scenarios only;",
        "* `–`: not expressed (`n/a`).",
        "",
        f"Multi-step scenarios run on {', '.join(f'`{n}`' for n in scen) or 'none'} "
        f"({', '.join(f'`{n}`' for n in own) or 'none'} with a feature set of their own for scenarios, "
        f"{', '.join(f'`{n}`' for n in scen if n not in own) or 'none'} with their single-step one); the others run "
        "single steps only. *Cases*: the cases that declare the feature (`features`), "
        f"{len(cases)} cases in all. The reference (`reference`, `reference-<profile>`) expresses "
        "every feature.",
        "",
        "| feature | parameters | " + " | ".join(f"`{n}`" for n in names) + " | cases |",
        "| --- | --- | " + " | ".join("---" for _ in names) + " | --- |",
    ]
    lists = []
    for f, what in params.FEATURES.items():
        ids = [c["id"] for c in cases if f in c["features"]]
        anchor = f"cases-{f}".replace("_", "-")
        lists.append((f"`{f}`", anchor, ids))
        ps = ", ".join(f"`{p}`" for p in _params_of(f)) or "–"
        lines.append(f"| `{f}`: {_md(what)} | {_md(ps)} | " + " | ".join(cell(i, f) for _, i in impls)
                     + f" | {links.short(ids, anchor)} |")
    lines += links.long_lists("Cases per feature", lists) + links.targets()
    return "\n".join(lines).rstrip("\n") + "\n"


# -- docs/coverage.md ------------------------------------------------------------------------------------


def _feature_rules() -> dict:
    """``{feature: set of sections}``: its FEATURES line and the rules of the parameters that need it."""
    out = {f: set(refs(what)) for f, what in params.FEATURES.items()}
    for p in params.PARAMS:
        for f in [p.feature] + [f for f, _, _ in p.value_features]:
            if f is not None:
                out[f] |= set(refs(p.rule))
    return out


def rule_evidence(case: dict, depends: set, sections: dict, by_field: dict, by_feature: dict) -> dict:
    """``{section: sorted evidence}`` for one case (``cited``, ``input``, ``profile``: the module docstring).

    Parameters
    ----------
    case : dict
        An entry of :func:`scan_cases`.
    depends : set of str
        The profile fields its prediction depends on (the cache's entry).
    sections : dict
        :func:`rules`.
    by_field, by_feature : dict
        :func:`field_rules`, and feature -> sections.
    """
    out: dict = {}
    for r in refs(case["text"]):
        out.setdefault(r, set()).add("cited")
    inputs = [by_feature.get(f, ()) for f in case["features"]]
    inputs += [refs(params.param(k).rule) for k in case.get("requests", ())]
    for found in inputs:
        for r in found:
            out.setdefault(r, set()).add("input")
    for f in depends:
        for r in by_field.get(f, ()):
            out.setdefault(r, set()).add("profile")
    return {r: sorted(e) for r, e in out.items() if r in sections}


def _dangling(cases: list, sections: dict) -> list:
    """``(where, section)`` for every ``§`` reference of the cases, the registry and the profiles that names no section."""
    from impls.profiles import PROFILES
    texts = [(f"cases/{c['path']}", c["text"]) for c in cases]
    texts += [(f"FEATURES[{f!r}]", what) for f, what in params.FEATURES.items()]
    texts += [(f"param {p.name!r} rule", p.rule) for p in params.PARAMS]
    texts += [(f"Profile.{f} docstring", d) for f, d in field_docs().items()]
    texts += [(f"profile {p.name!r} citation of {f}", c) for p in PROFILES.values() for f, c in p.citations.items()]
    return sorted({(w, r) for w, t in texts for r in refs(t) if r not in sections})


def coverage_md(root: Path, semantics: Path, cache: dict, cases: Optional[list] = None) -> str:
    """The text of ``docs/coverage.md``: rules and profile fields against the cases that exercise them.

    Parameters
    ----------
    root : Path
        The corpus (``cases/``).
    semantics : Path
        ``docs/SEMANTICS.md``.
    cache : dict
        The mutation cache (:func:`read_cache`); a case whose file changed since it was
        measured (or that it lacks) is listed as not measured, and its fields are left out.
    cases : list of dict, optional
        Default: :func:`scan_cases` of ``root``.
    """
    from impls.profiles import PROFILES, TRTLLM
    cases = scan_cases(root) if cases is None else cases
    by_id = {c["id"]: c for c in cases}
    links = _Links(cases, root)
    sections = rules(semantics)
    by_field = field_rules(sections)
    by_feature = _feature_rules()
    fields = list(TRTLLM.semantic_fields())
    measured = {cid: e for cid, e in cache.get("cases", {}).items()
                if cid in by_id and e.get("sha256") == by_id[cid]["sha256"]}
    unmeasured = [c["id"] for c in cases if c["id"] not in measured]
    depends = {cid: set(e.get("fields", {})) for cid, e in measured.items()}
    flipped = {k.split(" ")[1] for k in cache.get("flips", [])}
    evidence = {c["id"]: rule_evidence(c, depends.get(c["id"], set()), sections, by_field, by_feature)
                for c in cases}
    lines = [
        "# Coverage: which cases exercise each rule and each profile field",
        "",
        "<!-- Generated by 'sampcheck docs' (harness/corpus/tables.py) from docs/SEMANTICS.md, impls/params.py,",
        "     impls/profiles.py, cases/ and docs/coverage.json: do not edit. -->",
        "",
        "**Method.** A *rule* is a numbered section of [`SEMANTICS.md`](SEMANTICS.md) (`## N.`, `### N.M`). "
        "A case exercises rule `R` when its file cites `§R` (*cited*); when it declares a feature, or its "
        "scenario sets a request-only field (`draft_len`, `drafts`, `d2t`, ...), whose registry entry cites "
        "`§R` (*input*: the feature's line in `impls/params.py` `FEATURES`, the rule of a parameter that needs "
        "the feature, the rule of that field); or when its prediction depends on a profile field that cites "
        "`§R` (*profile*: the field's docstring, a profile's citation of it, or a mention of it in "
        "backquotes in section `R`).",
        "",
        "A case's prediction *depends on* a profile field when flipping that one field changes what the judge "
        "compares of the reference's prediction (`harness/judge/mutation.py` `dependence`: the flips of "
        "`flips()` for every registered profile, plus, for a field no profile varies, a value its docstring "
        "names or, for an integer, the value + 1; a flip is tried only on the cases that read the field "
        "under that profile, which cannot change otherwise). The flips of the whole corpus take minutes to "
        "hours of CPU, so their results are cached in [`coverage.json`](coverage.json), by case file (SHA-256) "
        "and by flip (each profile's fingerprint): `sampcheck docs --refresh` measures what changed since (a "
        "new or edited case, a new flip), `--refresh --all` everything (after a change of the reference's "
        "code; `--jobs N` spreads it over N processes).",
        "",
        "The *profile* evidence is broad: a field documented in a section counts every case whose prediction "
        "depends on it, whatever else the case is about (`greedy_as_top_k_1`, documented only in §4, changes "
        "every greedy row). Read the *cited* and *input* columns for the cases written for a rule.",
        "",
        f"{len(cases)} cases; {len(measured)} measured" + (
            f", **{len(unmeasured)} not measured since their file changed** (`sampcheck docs --refresh`): "
            + links.many(unmeasured) if unmeasured else "") + ".",
        "",
        "## Rules",
        "",
        "| rule | cases | cited | input | profile |",
        "| --- | --- | --- | --- | --- |",
    ]
    lists = []
    for sec, (title, _) in sections.items():
        ids = [c["id"] for c in cases if sec in evidence[c["id"]]]
        n = {k: sum(1 for i in ids if k in evidence[i][sec]) for k in ("cited", "input", "profile")}
        anchor = "rule-" + sec.replace(".", "-")
        lists.append((f"§{sec} {title}", anchor, ids))
        lines.append(f"| §{sec} {_md(title)} | {links.short(ids, anchor)} | {n['cited']} | "
                     f"{n['input']} | {n['profile']} |")
    lines += [
        "",
        "## Profile fields",
        "",
        "Every semantic field of `impls/profiles.py` `Profile` (`Profile.semantic_fields()`), the rules it "
        "cites, its values across the registered profiles, and the cases whose prediction depends on it.",
        "",
        "| field | rules | values | cases |",
        "| --- | --- | --- | --- |",
    ]
    for f in fields:
        ids = sorted(i for i, d in depends.items() if f in d)
        anchor = "field-" + f.replace("_", "-")
        lists.append((f"`{f}`", anchor, ids))
        vals = []
        for p in PROFILES.values():
            v = canon(getattr(p, f))
            if v not in vals:
                vals.append(v)
        shown = "; ".join(f"`{v}`" if len(v) <= 40 else f"`{v[:37]}...`" for v in vals)
        r = ", ".join(f"§{s}" for s in by_field[f]) or "–"
        lines.append(f"| `{f}` | {r} | {_md(shown)} | {links.short(ids, anchor)} |")
    bare_rules = [s for s in sections if not any(s in evidence[i] for i in evidence)]
    bare_fields = [f for f in fields if not any(f in d for d in depends.values())]
    no_flip = [f for f in bare_fields if f not in flipped]
    lines += ["", "## Not exercised", "",
              "Rules no case exercises: " + (", ".join(f"§{s} {sections[s][0]}" for s in bare_rules) or "none") + ".",
              "",
              "Profile fields no case's prediction depends on: "
              + (", ".join(f"`{f}`" + (" (never flipped)" if f in no_flip else "") for f in bare_fields) or "none")
              + ".",
              "",
              "Profile fields that cite no rule (their docstring, citations and SEMANTICS.md name no section): "
              + (", ".join(f"`{f}`" for f in fields if not by_field[f]) or "none") + "."]
    dangling = _dangling(cases, sections)
    if dangling:
        lines += ["", "References to no section of SEMANTICS.md: "
                  + "; ".join(f"{w}: §{r}" for w, r in dangling) + "."]
    lines += links.long_lists("Cases per rule and field", lists) + links.targets()
    return "\n".join(lines).rstrip("\n") + "\n"
