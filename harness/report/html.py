"""The HTML conformance report: one self-contained page rendered with Jinja2.

Sections, in order: the run (when, where, implementations and versions); the
summary (per implementation the cases of each status, how many verdicts its own
code decided, and by category the cases of the engines apart from those of the
reference under each profile; every count is of cases, and a verdict count says
how many of those verdicts the implementation's own code decided); *Needs
attention* (one entry per case and problem, with its reason and its
implementations on one line); the statistical checks; the case × implementation
matrix (each cell links to that implementation's result in the case; a verdict
resting on borrowed stages carries a ``borrowed`` badge); one section per case
with its description, sources, inputs, and per implementation the status, the
message, whose code decided it, and the expected / predicted / actual values row
by row; the profile table (every semantic field of each profile in the run,
differences from the default highlighted, with citations).

Each result that is not a plain pass (``fail``, ``error``, ``known-bug``,
``known-diff``) is shown open: the inputs, expected vs predicted vs actual row
by row (every mismatch named and marked red, a broken case's or broken
profile's mismatches against the case file included), the rule's source and a
one-line command that reproduces it (:func:`repro_command`, with the command
prefix of :func:`command_prefix`). Every case and every result has a permalink
(``#case-<category>--<name>`` and ``#case-<category>--<name>.<impl>``).

The page needs no network: styles and one small script are inline. The script
only adds the filters (status, category, implementation); without it every
case is shown.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Optional

import jinja2

from impls.profiles import TRTLLM

from harness.corpus.ids import is_external
from harness.corpus.truths import default_profile_name
from harness.judge.blame import show_value
from harness.judge.provenance import VERDICTS
from harness.judge.result import STATUSES
from .statreport import template_globals

__all__ = ["write_html", "render_html", "chart_jobs", "repro_command", "command_prefix", "provenance_text", "OPEN_STATUSES"]

#: Statuses whose result is shown open with inputs, expected vs actual, the
#: rule's source and the command that reproduces it.
OPEN_STATUSES = ("fail", "error", "known-bug", "known-diff")

_ENV = jinja2.Environment(
    loader=jinja2.FileSystemLoader(str(Path(__file__).with_name("templates"))),
    autoescape=jinja2.select_autoescape(["html", "j2"]),
    trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined,
)
def _words(text) -> str:
    """Python spellings in a message or a profile value, as the page writes them: ``None`` ``(none)``, ``True`` /
    ``False`` ``true`` / ``false``; an error line's missing error ``no error``.

    >>> _words("error: got None (), want 'nan_logits'")
    "error: got no error, want 'nan_logits'"
    >>> _words("error: got 'invalid_top_p' (top_p=2), want None")
    "error: got 'invalid_top_p' (top_p=2), want no error"
    >>> _words("(None, True, False)")
    '((none), true, false)'
    """
    text = str(text)
    text = re.sub(r"\berror: got None \(\)", "error: got no error", text)
    text = re.sub(r"(\berror: got [^;|]*?), want None\b", r"\1, want no error", text)
    text = re.sub(r"\bNone\b", "(none)", text)
    return re.sub(r"\b(True|False)\b", lambda m: m.group(1).lower(), text)


def _vs_default(line) -> str:
    """A ``profile_differences`` line (the profile's prediction vs the default's) in words.

    >>> _vs_default("mode: got 'sampling', want 'greedy'")
    "mode: 'sampling' under this profile, 'greedy' under the default"
    >>> _vs_default("error: got 'invalid_temperature' (temperature=100.0: must be in [0, 2]), want None")
    "error: 'invalid_temperature' (temperature=100.0: must be in [0, 2]) under this profile, no error under the default"
    >>> _vs_default("support: extra [0, 2], missing []")
    'support: [0, 2] kept only under this profile'
    >>> _vs_default("rewritten_logits: 2 of 4 differ; first at token 0: got 2, want 1.5")
    'rewritten_logits: 2 of 4 differ; first at token 0: 2 under this profile, 1.5 under the default'
    """
    line = str(line)
    m = re.fullmatch(r"(\w+): got (.*), want (.*)", line)
    if m:
        key, mine, default = m.groups()
        if key == "error":
            mine = "no error" if mine.startswith("None") else mine
            default = "no error" if default.startswith("None") else default
        return f"{key}: {_words(mine)} under this profile, {_words(default)} under the default"
    m = re.fullmatch(r"support: extra (\[.*?\]), missing (\[.*?\])", line)
    if m:
        extra, missing = m.groups()
        parts = ([f"{extra} kept only under this profile"] if extra != "[]" else []) + (
            [f"{missing} kept only under the default"] if missing != "[]" else [])
        return "support: " + ", ".join(parts or ["the same"])
    m = re.fullmatch(r"(.*): got (.*), want (.*)", line)
    if m:
        return f"{m.group(1)}: {_words(m.group(2))} under this profile, {_words(m.group(3))} under the default"
    return "vs the default: " + _words(line)


_ENV.globals.update(template_globals())  # statistical charts and budget (harness.report.statreport)
_ENV.filters["words"] = _words
_ENV.filters["vs_default"] = _vs_default


def _anchor(case_id: str) -> str:
    return "case-" + case_id.replace("/", "--")


def _result_anchor(case_id: str, impl: str) -> str:
    return f"{_anchor(case_id)}.{impl}"


def command_prefix(argv0: Optional[str] = None, executable: Optional[str] = None, cwd: Optional[Path] = None,
                   env: Optional[dict] = None, which=shutil.which) -> str:
    """How to call sampcheck again, as the user can type it: the start of every reproducing command.

    The rule, for the process that ran (``sys.argv[0]``, ``sys.executable``, the working
    folder and the environment by default):

    * started through the ``sampcheck`` entry point: ``sampcheck`` when that name finds the
      same script on ``PATH``, else the script's path (relative to ``cwd`` when inside it,
      e.g. ``.tox/report/bin/sampcheck`` after ``tox -e report``);
    * started as ``python -m harness`` (or ``-m harness.cli``): ``python -m harness`` when
      ``python`` on ``PATH`` is the interpreter that ran, else that interpreter's path;
    * anything else (a test, an embedding program): ``sampcheck``.

    Under tox (``TOX_ENV_DIR`` set) ``PATH`` holds the tox environment, which the user's
    shell does not: the path is always printed. ``SAMPCHECK_CASES`` is carried in front
    (``SAMPCHECK_CASES=/abs/cases sampcheck``) when it was set for the run.

    Parameters
    ----------
    argv0, executable : str, optional
        The program as started and the interpreter (default ``sys.argv[0]``, ``sys.executable``).
    cwd : Path, optional
        The folder the run was started from (default the current one).
    env : dict, optional
        The environment (default ``os.environ``).
    which : callable
        ``which(name) -> str or None`` (default :func:`shutil.which`).

    Returns
    -------
    str
        Shell words, quoted where needed.

    Examples
    --------
    >>> command_prefix("/src/.tox/report/bin/sampcheck", "/src/.tox/report/bin/python", Path("/src"),
    ...                {"TOX_ENV_DIR": "/src/.tox/report"}, lambda name: "/src/.tox/report/bin/" + name)
    '.tox/report/bin/sampcheck'
    >>> command_prefix("/v/bin/sampcheck", "/v/bin/python", Path("/src"), {"SAMPCHECK_CASES": "/c"},
    ...                lambda name: "/v/bin/" + name)
    'SAMPCHECK_CASES=/c sampcheck'
    >>> command_prefix("/src/harness/__main__.py", "/opt/py/bin/python3", Path("/src"), {}, lambda name: None)
    '/opt/py/bin/python3 -m harness'
    """
    argv0 = sys.argv[0] if argv0 is None else argv0
    executable = sys.executable if executable is None else executable
    cwd = Path.cwd() if cwd is None else Path(cwd)
    env = os.environ if env is None else env
    trust_path = not env.get("TOX_ENV_DIR")

    def on_path(name: str, path: str) -> bool:
        found = which(name) if trust_path else None
        return bool(found) and os.path.abspath(found) == os.path.abspath(path)

    def shown(path: str) -> str:
        full = Path(os.path.abspath(path))
        try:
            return full.relative_to(Path(os.path.abspath(cwd))).as_posix()
        except ValueError:
            return str(full)

    a = Path(argv0 or "")
    if a.name == "sampcheck":
        cmd = "sampcheck" if on_path("sampcheck", str(a)) else shlex.quote(shown(str(a)))
    elif a.parent.name == "harness" and a.name in ("__main__.py", "cli.py") and executable:
        py = next((n for n in ("python", "python3") if on_path(n, executable)), None)
        cmd = f"{py or shlex.quote(shown(executable))} -m harness"
    else:
        cmd = "sampcheck"
    if env.get("SAMPCHECK_CASES"):
        cmd = f"SAMPCHECK_CASES={shlex.quote(str(Path(env['SAMPCHECK_CASES']).resolve()))} {cmd}"
    return cmd


def repro_command(case_id: str, impl: str, device: str = "cpu", prefix: str = "sampcheck",
                  load_error: bool = False, env: Optional[dict] = None) -> str:
    """The one-line command that reruns one case on one implementation.

    It writes to ``reports/repro`` so that it never overwrites the report the
    user is reading (``reports/latest`` by default).

    Parameters
    ----------
    case_id, impl : str
    device : str
        ``"cuda"`` adds ``--device cuda``.
    prefix : str
        How to call sampcheck (:func:`command_prefix`).
    load_error : bool
        The case file does not load: the command runs it on the default implementation only
        (the load error is the same for every one) and prints the error.
    env : dict, optional
        Environment variables the implementation needs (its ``CliOption`` ones, e.g.
        ``SAMPCHECK_TRTLLM_SRC``), written in front.

    >>> repro_command("filters/top-k-two", "transformers")
    'sampcheck run --cases filters/top-k-two --impl transformers --out reports/repro'
    >>> repro_command("filters/top-k-two", "fused", "cuda")
    'sampcheck run --cases filters/top-k-two --impl fused --device cuda --out reports/repro'
    >>> repro_command("bans/broken", "transformers", load_error=True)
    'sampcheck run --cases bans/broken --out reports/repro'
    """
    lead = "".join(f"{k}={shlex.quote(str(v))} " for k, v in (env or {}).items())
    if load_error:
        return f"{lead}{prefix} run --cases {shlex.quote(case_id)} --out reports/repro"
    cmd = f"{lead}{prefix} run --cases {shlex.quote(case_id)} --impl {shlex.quote(impl)}"
    return cmd + (" --device cuda" if device == "cuda" else "") + " --out reports/repro"


def _impl_env(impl: str, env: Optional[dict] = None) -> dict:
    """The environment variables of ``impl``'s command-line options that are set (``SAMPCHECK_TRTLLM_SRC``, ...)."""
    env = os.environ if env is None else env
    try:
        from impls import registry
        entry = next((e for e in registry.entries() if e.name == impl), None)
    except Exception:  # a broken plug-in must not stop the report
        return {}
    opts = getattr(entry.factory, "cli_options", ()) if entry is not None and entry.factory is not None else ()
    return {o.env: env[o.env] for o in opts if env.get(o.env)}


def _run_folder(cwd: Optional[Path] = None) -> str:
    """Where the reproducing commands run: ``"the project root"`` when the run started there, else the folder."""
    from harness.corpus.paths import CASES_DIR
    cwd = Path.cwd() if cwd is None else Path(cwd)
    return "the project root" if cwd.resolve() == CASES_DIR.parent.resolve() else str(cwd.resolve())


def _float(v: float) -> str:
    """A float as the page shows it: its shortest form, at most 8 significant digits (a float32 value
    such as 1.7999999523162842 reads 1.8); ``inf``, ``-inf``, ``nan`` as TOML writes them.

    >>> _float(1.0), _float(1.7999999523162842), _float(-0.40760596444), _float(float("-inf")), _float(1e-20)
    ('1.0', '1.8', '-0.40760596', '-inf', '1e-20')
    """
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    text = repr(v)
    if len(text) > 10:
        text = f"{v:.8g}"
        if not any(c in text for c in ".en"):
            text += ".0"
    return text


def _short(v, limit: int = 12, nested: bool = False) -> str:
    """A value as the page shows it, in the case files' (TOML) spelling, long lists cut.

    ``None`` is ``(none)``, booleans ``true``/``false``, a vector summarised in results.json
    (``{"length", "head"}``) its head and length, a table ``{k = v, ...}``; strings are bare
    at the top and quoted inside a list or table.

    >>> _short([1, None, True, 0.5, "x"])
    '[1, (none), true, 0.5, "x"]'
    >>> _short(list(range(14)))
    '[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, … (14 values)]'
    >>> _short({"length": 100, "head": [0.5, 0.25]})
    '[0.5, 0.25, … (100 values)]'
    >>> _short({"a": 1, "b": [2]})
    '{a = 1, b = [2]}'
    """
    if v is None:
        return "(none)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return json.dumps(v) if nested else v
    if isinstance(v, float):
        return _float(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, dict) and set(v) == {"length", "head"} and isinstance(v["head"], list):
        return "[" + ", ".join(_short(x, limit, True) for x in v["head"][:limit]) + f", … ({v['length']} values)]"
    if isinstance(v, dict) and "dist" in v:
        return ", ".join(f"{k}={v[k]}" for k in v)
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {_short(x, limit, True)}" for k, x in v.items()) + "}"
    if isinstance(v, (list, tuple)):
        more = f", … ({len(v)} values)" if len(v) > limit else ""
        return "[" + ", ".join(_short(x, limit, True) for x in v[:limit]) + more + "]"
    return str(v)


#: The project's two seed documents (cases/README.md, field ``source``): what each one is.
SEED_DOCS = {"000_fabad194daba9a8c.txt": "TensorRT-LLM sampler walk-through (Chinese)",
             "004_6514eaee5e7b4fde.txt": "vLLM sampler walk-through (French, vLLM v0.25.1)"}


def _source_link(src: dict) -> tuple:
    if "url" in src:
        return src["url"], src.get("title", src["url"])
    if "repo" in src:
        href = f"https://github.com/{src['repo']}/blob/{src['version']}/{src['path']}"
        return href, f"{src['repo']}: {src['path']} @ {src['version']}" + (f" ({src['symbol']})" if src.get("symbol") else "")
    what = SEED_DOCS.get(src["seed"], "seed document")
    return None, (f"{what} {src['seed']} § {src['section']} (a seed document of the project, kept outside this "
                  f"repository: cases/README.md, field source)")


def _inputs(case) -> list:
    """One entry per row or request, as the case's check kind lists them (values shortened for the page)."""
    return [{"where": e["where"], "fields": {k: _short(v) for k, v in e["fields"].items()},
             "expect": {k: _short(v) for k, v in e["expect"].items()},
             "expect_by_profile": {p: {k: _short(v) for k, v in t.items()}
                                   for p, t in (e.get("expect_by_profile") or {}).items()}}
            for e in case.kind.report_inputs(case)]


def _setup(case) -> dict:
    """What a case's inputs share (a scenario's model, defaults, ...), as its check kind says."""
    return {k: _short(v) for k, v in case.kind.report_setup(case).items()}


def _draws_view(check: str) -> bool:
    """Whether results of the check kind ``check`` show as draws (``"load"`` and unknown kinds: no)."""
    from harness.corpus import kinds
    try:
        return kinds.get(check).draws_view
    except KeyError:
        return False


def chart_jobs(result: dict) -> list:
    """The charts the page will draw for one result, as calls that draw each ahead of it.

    Parameters
    ----------
    result : dict
        One entry of results.json's ``results``.

    Returns
    -------
    list of callable
        One per statistical row with chart data of a result shown as draws: each call draws
        that chart and keeps it for the page (:func:`harness.report.statreport.draw_ahead`);
        a chart that fails to draw is left for the page, which then fails as it would have.
    """
    rows = (result.get("details") or {}).get("rows") or []
    if not rows or not _draws_view(result.get("check")):
        return []
    from .statreport import draw_ahead

    def job(row):
        def draw() -> None:
            try:
                draw_ahead(row, result["case"], result["impl"])
            except Exception:  # noqa: BLE001 - drawn (and raised) again by the page
                pass
        return draw

    return [job(row) for row in rows if isinstance(row, dict)]


def _bad_keys(lines) -> set:
    """Output keys named by mismatch lines.

    ``"token: got 3, want 1"`` -> ``token``; ``"finite_logprobs: logprob is -inf"`` ->
    ``logprob``; ``"any_of: none matches: [token: got 2, want 1] [error: ...]"`` -> ``token``,
    ``error``; a scenario's ``"r0: tokens: got [1], want [2]"`` (a row named first) -> ``tokens``.

    >>> sorted(_bad_keys(["token: got 3, want 1", "finite_logprobs: top_logprobs of token 2 is nan",
    ...                   "any_of: none matches: [token: got 2, want 1] [error: got (none), want 'x']"]))
    ['error', 'token', 'top_logprobs']
    """
    out = set()
    for m in lines or []:
        m = str(m)
        key, _, rest = m.partition(":")
        key = key.strip()
        if key == "any_of":
            out |= {part.split(":", 1)[0].strip() for part in re.findall(r"\[([^\[\]]+)\]", rest)}
        elif key == "finite_logprobs":
            out.add(rest.split()[0] if rest.split() else key)
        else:
            out.add(key)
    return out


def _order(*dicts) -> list:
    """One key order for the expected, predicted and actual cells of a row: each key where it first appears.

    >>> _order({"token": 1, "mode": "greedy"}, {"mode": "greedy", "token": 1, "logprob": -0.4})
    ['token', 'mode', 'logprob']
    """
    keys: list = []
    for d in dicts:
        keys += [k for k in (d or {}) if k not in keys]
    return keys


def _in_order(d: Optional[dict], keys: list) -> dict:
    d = d or {}
    return {k: d[k] for k in keys if k in d}


def _hand_by_row(lines, rows: list) -> tuple:
    """``details.hand_mismatches`` (or ``profile_truth_mismatches``) per row: ``({row: [line, ...]}, [other lines])``.

    Entries are ``{"row", "mismatches"}`` (row-wise kinds) or lines ``"<row>: <mismatch>; ..."``
    (scenarios); an entry naming none of ``rows`` (a broken relation) goes to the others.

    >>> _hand_by_row([{"row": "main:0", "mismatches": ["token: got 1, want 2"]}, "r1: tokens: got [1], want [2]",
    ...               "same_token(a, b): token: got 1, want 2"], [{"row": "main:0"}, {"row": "r1"}])
    ({'main:0': ['token: got 1, want 2'], 'r1': ['tokens: got [1], want [2]']}, ['same_token(a, b): token: got 1, want 2'])
    """
    names = [r.get("row") for r in rows]
    by_row: dict = defaultdict(list)
    other = []
    for h in lines or []:
        if isinstance(h, dict):
            if h.get("row") in names:
                by_row[h.get("row")] += list(h.get("mismatches") or [])
            else:
                other.append(f"{h.get('row')}: {'; '.join(h.get('mismatches') or [])}")
            continue
        head, sep, rest = str(h).partition(": ")
        if sep and head in names:
            by_row[head] += [x.strip() for x in rest.split("; ") if x.strip()]
        else:
            other.append(str(h))
    return dict(by_row), other


def _broken_lines(message: str) -> list:
    """A broken case's mismatches from its message, for a check kind that does not list them in ``hand_mismatches``.

    >>> _broken_lines("case disagrees with the reference: main:0: token: got 1, want 2; main:1: mode: got "
    ...               "'sampling', want 'greedy' (got: the reference under the default profile; want: the case)")
    ['main:0: token: got 1, want 2', "main:1: mode: got 'sampling', want 'greedy'"]
    """
    from harness.judge.verdict import BROKEN_PREFIX
    body = message[len(BROKEN_PREFIX):] if message.startswith(BROKEN_PREFIX) else message
    body = re.sub(r" \(got: the reference under the default profile; want: the case\)$", "", body)
    return [x for x in body.split("; ") if x]


#: How the report says whose code performed a stage that was not the implementation's own.
_WHOSE = {"reference": "from the reference", "adapter": "by this project's adapter",
          "none": "not declared by the implementation"}


def provenance_text(prov: Optional[dict]) -> str:
    """Whose code decided a verdict, in words: ``"decided by: own code"`` or ``"borrowed: ..."`` ('' without provenance).

    >>> provenance_text({"stages": {"filters": "own", "penalties": "reference", "logprobs": "reference",
    ...                  "logit_bias": "adapter"}, "own_code": False,
    ...                  "borrowed": ["logit_bias", "penalties", "logprobs"]})
    "borrowed: penalties, logprobs from the reference; logit_bias by this project's adapter"
    >>> provenance_text({"stages": {"draw": "own"}, "own_code": True, "borrowed": []})
    'decided by: own code'
    """
    if not prov:
        return ""
    if prov.get("own_code"):
        return "decided by: own code"
    groups: dict = {}
    for stage in prov.get("borrowed") or []:
        groups.setdefault(prov.get("stages", {}).get(stage, "none"), []).append(stage)
    return "borrowed: " + "; ".join(f"{', '.join(st)} {_WHOSE.get(p, 'by ' + p)}"
                                    for p, st in sorted(groups.items(), key=lambda kv: list(_WHOSE).index(kv[0])
                                                        if kv[0] in _WHOSE else 9))


def _case_arg(case_id: str, case, r: dict) -> Optional[str]:
    """What ``--cases`` takes to select ``case_id`` again: an external case (``ext/...``, a file named by its
    path) by that path, since its id selects nothing (:mod:`harness.corpus.ids`); None for a corpus case."""
    if not is_external(case_id):
        return None
    path = getattr(case, "path", None) or ((r or {}).get("details") or {}).get("file")
    return str(path) if path else None


def _result_view(case_id: str, r: dict, inputs: dict, device: str, prefix: str = "sampcheck",
                 env: Optional[dict] = None, spec: Optional[str] = None, case_arg: Optional[str] = None) -> dict:
    """What the template shows of one result: anchors, the command, whose code decided it, rows with their inputs.

    A row gets ``bad`` (keys of ``actual`` that differ from the prediction), ``kd`` (keys of
    the prediction that differ from the default's), ``hand`` / ``hand_bad`` (a broken case:
    where the reference under the default profile contradicts the case file, and those keys
    of ``expected``), ``truth`` / ``truth_bad`` (a broken profile: where the profile's
    prediction contradicts the case's truth for it), and ``order`` (one key order for its
    three value cells).
    """
    details = r.get("details") or {}
    rows = []
    draws = _draws_view(r.get("check"))
    raw_rows = [row for row in details.get("rows") or [] if isinstance(row, dict)]
    hand_lines = details.get("hand_mismatches")
    if hand_lines is None and details.get("broken_case"):
        hand_lines = _broken_lines(str(details.get("message", "")))
    # draws are shown as charts, not as rows with a mismatch cell: every line then goes under the result
    hand, hand_other = _hand_by_row(hand_lines, [] if draws else raw_rows)
    truth, truth_other = _hand_by_row(details.get("profile_truth_mismatches"), [] if draws else raw_rows)
    if not draws:
        for row in raw_rows:
            if "actual" not in row:
                continue
            keys = _order(row.get("expected"), row.get("predicted"), row.get("actual"))  # the case file's order first
            h, t = hand.get(row.get("row"), []), truth.get(row.get("row"), [])
            rows.append({**row, "inputs": inputs.get(row.get("row"), {}),
                         "expected": _in_order(row.get("expected"), keys),
                         "predicted": _in_order(row.get("predicted"), keys),
                         "actual": _in_order(row.get("actual"), keys),
                         "bad": _bad_keys(row.get("mismatches")),
                         "kd": _bad_keys(row.get("profile_differences")),
                         # red in the expected cell: the keys of the truth it shows that the reference contradicts
                         "hand": h, "truth": t,
                         "hand_bad": _bad_keys(h) if row.get("expected_for", TRTLLM.name) == TRTLLM.name
                         else _bad_keys(t)})
    named = []
    for inv in details.get("invariants") or []:
        named += [w for w in (inv.get("a"), inv.get("b")) if w in inputs and w not in named]
    if draws:
        named += [row.get("row") for row in raw_rows if row.get("row") in inputs and row.get("row") not in named]
    prov = r.get("provenance")
    load_error = r.get("check") == "load"
    return {"r": r, "anchor": _result_anchor(case_id, r["impl"]), "problem": r["status"] in OPEN_STATUSES,
            "repro": repro_command(case_arg or case_id, spec or r["impl"], device, prefix, load_error=load_error,
                                   env=None if load_error else _impl_env(r["impl"], env)),
            "rows": rows, "draws": draws, "named_inputs": [(w, inputs[w]) for w in named],
            "decided": provenance_text(prov), "borrowed": "" if not prov or prov.get("own_code") else provenance_text(prov),
            "hand_other": hand_other + truth_other,
            "broken_case": bool(details.get("broken_case")), "broken_profile": bool(details.get("broken_profile"))}


#: How a result that cannot be judged starts its message when the profile's prediction is wrong (harness.judge.verdict).
_CANNOT_JUDGE = "cannot be judged: "


def _attention(case_list: list) -> list:
    """*Needs attention*: one entry per case and problem, its implementations on one line, with the reason.

    Entries: ``{"case", "kind", "status", "impls", "anchor", "reasons"}``, ``kind`` one of

    * ``"broken case"`` (``details.broken_case``: the reference under the default profile
      contradicts the case file): one entry for all its implementations, which are not judged;
    * ``"broken profile"`` (``details.broken_profile``): one entry per profile whose prediction
      contradicts the case's truth for it — the reference under that profile (``fail``) and the
      engines with it (``error``: not judged) together;
    * the status (``fail``, ``error``, ``known-bug``): one entry per case and status.

    ``impls`` is a list of ``(name, status)``; ``reasons`` a list of ``(names, message)``: one
    message when every implementation gives the same, else one per distinct message, naming
    who gave it. Broken cases come first, then broken profiles, ``fail``, ``error``, ``known-bug``;
    within each, case order.
    """
    order = {"broken case": 0, "broken profile": 1, "fail": 2, "error": 3, "known-bug": 4}
    out = []
    for c in case_list:
        groups: dict = {}
        for v in c["views"]:
            if not v or v["r"]["status"] not in ("fail", "error", "known-bug"):
                continue
            r = v["r"]
            det = r.get("details") or {}
            msg = str(det.get("message", ""))
            if det.get("broken_case"):
                key, kind = ("broken case",), "broken case"
            elif det.get("broken_profile"):
                key, kind = ("broken profile", det.get("profile")), "broken profile"
                msg = msg[len(_CANNOT_JUDGE):] if msg.startswith(_CANNOT_JUDGE) else msg
            else:
                key, kind = (r["status"],), r["status"]
            g = groups.setdefault(key, {"case": c["id"], "kind": kind, "status": r["status"], "impls": [],
                                        "anchor": v["anchor"], "messages": {}})
            g["impls"].append((r["impl"], r["status"]))
            g["messages"].setdefault(msg, []).append(r["impl"])
        for g in groups.values():
            msgs = g.pop("messages")
            g["reasons"] = [([], m) for m in msgs] if len(msgs) == 1 else [(names, m) for m, names in msgs.items()]
            out.append(g)
    return sorted(out, key=lambda e: order[e["kind"]])


def _counts(case_list: list, names: list) -> dict:
    """Per status, the cases with that status on one of ``names``, and how many of them their own code decided.

    Parameters
    ----------
    case_list : list of dict
        The cases as :func:`render_html` builds them (``results`` in the order of ``impl_index``).
    names : list of str
        The implementations counted.

    Returns
    -------
    dict
        ``{status: {"n": cases, "own": cases where one such verdict is ``own_code`` (None
        when no such result carries a provenance: not a verdict, or an older results.json)}}``.
    """
    out: dict = {}
    for c in case_list:
        idx = c["impl_index"]
        seen: dict = {}
        for name in names:
            r = c["results"][idx[name]] if name in idx else None
            if not r:
                continue
            st = seen.setdefault(r["status"], {"own": False, "prov": False})
            prov = r.get("provenance")
            if prov is not None:
                st["prov"] = True
                st["own"] = st["own"] or bool(prov.get("own_code"))
        for status, st in seen.items():
            e = out.setdefault(status, {"n": 0, "own": None})
            e["n"] += 1
            if st["prov"]:
                e["own"] = (e["own"] or 0) + int(st["own"])
    return out


def _decided(case_list: list, name: str, idx: dict) -> Optional[tuple]:
    """``(own, verdicts)``: of ``name``'s verdicts with a provenance, how many its own code decided (None: no provenance)."""
    provs = [c["results"][idx[name]].get("provenance") for c in case_list
             if c["results"][idx[name]] and c["results"][idx[name]].get("provenance") is not None]
    return (sum(1 for p in provs if p.get("own_code")), len(provs)) if provs else None


def show_version(version: str) -> str:
    """An implementation's version as the report writes it: the reference's ``"2 (reference rules; torch 2.13.0)"``
    reads ``reference rules v2 (torch 2.13.0)``; others unchanged.

    >>> show_version("2 (reference rules; torch 2.13.0+cpu)")
    'reference rules v2 (torch 2.13.0+cpu)'
    >>> show_version("5.24.0")
    '5.24.0'
    """
    m = re.fullmatch(r"(\d+) \(reference rules; (.+)\)", str(version or ""))
    return f"reference rules v{m.group(1)} ({m.group(2)})" if m else str(version)


def _plural(n: int, one: str, many: Optional[str] = None) -> str:
    """``"1 row"``, ``"3 rows"``.

    >>> _plural(1, "row"), _plural(3, "row"), _plural(2, "query", "queries")
    ('1 row', '3 rows', '2 queries')
    """
    return f"{n} {one if n == 1 else (many or one + 's')}"


def render_html(doc: dict, cases: dict, profiles: list, command: Optional[str] = None,
                run_folder: Optional[str] = None) -> str:
    """Render the report page.

    Parameters
    ----------
    doc : dict
        The results.json document (schema 1).
    cases : dict
        Case id → :class:`harness.corpus.load.Case` (or ``{"error": ...}`` for a
        malformed file).
    profiles : list of Profile
        The profiles of the implementations in the run.
    command : str, optional
        How the reproducing commands call sampcheck (default ``"sampcheck"``;
        :func:`write_html` passes :func:`command_prefix` of the running process).
    run_folder : str, optional
        Where to run them from (default ``"the project root"``).

    Returns
    -------
    str
        The HTML page.
    """
    prefix = command or "sampcheck"
    impls = list(doc["run"]["impls"])
    idx = {name: i for i, name in enumerate(impls)}
    by_case = defaultdict(dict)
    for r in doc["results"]:
        by_case[r["case"]][r["impl"]] = r
    devices = {i: (doc["run"]["impls"].get(i) or {}).get("device", "cpu") for i in impls}
    case_list = []
    for cid in sorted(by_case):
        c = cases.get(cid)
        broken = c is None or isinstance(c, dict)
        inputs = [] if broken else _inputs(c)
        by_where = {row["where"]: row["fields"] for row in inputs}
        results = [by_case[cid].get(i) for i in impls]
        case_list.append({
            "id": cid, "anchor": _anchor(cid), "category": cid.split("/")[0],
            "broken": broken,
            "description": (c.get("error", "") if isinstance(c, dict) else "") if broken else c.description,
            "check": "load" if broken else c.check,
            # a statistical case, or a scenario with a [scenario.statistical] check (both count in the budget)
            "statistical": (not broken) and c.kind.is_statistical(c),
            "sources": [] if broken else [_source_link(s) for s in c.sources],
            "notes": "" if broken else c.notes,
            "inputs": inputs,
            "setup": {} if broken else _setup(c),
            "invariants": [] if broken else c.kind.relations(c),
            "results": results, "impl_index": idx,
            "views": [_result_view(cid, r, by_where, devices[i], prefix,
                                   spec=(doc["run"]["impls"].get(i) or {}).get("spec"),
                                   case_arg=_case_arg(cid, c, r)) if r else None
                      for i, r in zip(impls, results)],
            "problem": any(r and r["status"] in OPEN_STATUSES for r in results),
        })
    n_cases_per_cat = Counter(c["category"] for c in case_list)
    # every count of the page is of cases: a case counts under a status when that status is the result of one of the
    # implementations counted (the status chips and the "all" row: any implementation, as the filter shows them)
    per_impl = {name: _counts(case_list, [name]) for name in impls}
    decided = {name: _decided(case_list, name, idx) for name in impls}
    all_counts = _counts(case_list, impls)
    # the engines apart from the reference under each profile (run.impls.<name>.is_prediction; a results.json
    # written before that flag: one group)
    metas = {i: doc["run"]["impls"].get(i) or {} for i in impls}
    if all("is_prediction" in m for m in metas.values()):
        groups = [g for g in (("engines", [i for i in impls if not metas[i]["is_prediction"]]),
                              ("the reference under each profile", [i for i in impls if metas[i]["is_prediction"]]))
                  if g[1]]
    else:
        groups = [("all implementations", impls)]
    cats = sorted(n_cases_per_cat)
    per_cat = {cat: [_counts([c for c in case_list if c["category"] == cat], names) for _, names in groups]
               for cat in cats}
    attention = _attention(case_list)
    seen, plist = set(), []
    for p in [TRTLLM] + list(profiles):
        if p.name not in seen:
            seen.add(p.name)
            plist.append(p)
    fields = list(TRTLLM.semantic_fields())
    prof_rows = [{"field": f, "values": [show_value(getattr(p, f)) for p in plist],
                  "differs": [getattr(p, f) != getattr(TRTLLM, f) for p in plist],
                  "citations": [p.citations.get(f, "") for p in plist]} for f in fields]
    for row in prof_rows:
        row["any_differs"] = any(row["differs"])
    return _ENV.get_template("report.html.j2").render(
        run=doc["run"], impls=impls, statuses=STATUSES, per_impl=per_impl, decided=decided, all_counts=all_counts,
        groups=groups, per_cat=per_cat, verdicts=VERDICTS, default_profile=default_profile_name(),
        cases=case_list, profiles=plist, prof_rows=prof_rows, n_results=len(doc["results"]),
        n_external=len({r["case"] for r in doc["results"] if is_external(r["case"])}),
        fmt=_short, n_cases_per_cat=n_cases_per_cat, attention=attention, open_statuses=OPEN_STATUSES,
        show_version=show_version, plural=_plural, run_folder=run_folder or "the project root",
        n_borrowed=sum(1 for r in doc["results"] if (r.get("provenance") or {}).get("own_code") is False),
    )


def write_html(doc: dict, cases: dict, profiles: list, path: Path, command: Optional[str] = None) -> Path:
    """Render the report and write it to ``path``; returns ``path``.

    ``command``: how the reproducing commands call sampcheck (default :func:`command_prefix` of
    this process, run from :func:`_run_folder`).
    """
    path = Path(path)
    path.write_text(render_html(doc, cases, profiles, command or command_prefix(), _run_folder()), encoding="utf-8")
    return path
