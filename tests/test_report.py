"""The conformance report's page without a browser: permalinks, what a failure shows, the
command that reproduces it, internal links, and that nothing is fetched.

The page in a real browser (console, filters, charts) is tests/test_browser.py.
"""

import doctest
import re
import shlex
from html import unescape
from html.parser import HTMLParser
from pathlib import Path


from harness.report import html as report
from harness.corpus.load import discover, select
from harness.cli import build_parser
from harness.run.runner import run

import _doubles
from _doubles import Crashes, WrongArgmax

GREEDY = _doubles.GREEDY_CASE
#: Two sources, so the report's source list shows a link of each kind.
SOURCES = ('[{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" },\n'
           '          { repo = "vllm-project/vllm", path = "vllm/sampling_params.py", version = "v0.32.0", '
           'symbol = "SamplingParams" }]')


class _Ids(HTMLParser):
    """Every id, every href="#..." and every src/external stylesheet of a page."""

    def __init__(self):
        super().__init__()
        self.ids, self.links, self.fetches = [], [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.append(a["id"])
        for k in ("href", "xlink:href"):
            if (a.get(k) or "").startswith("#"):
                self.links.append(a[k])
        if a.get("src") or (tag == "link" and a.get("href")):
            self.fetches.append((tag, a.get("src") or a.get("href")))


def _write(root: Path, cid: str, body: str) -> None:
    _doubles.write_case(root, cid, _doubles.CASE_HEADER, body, features='["temperature"]', check="exact",
                        source=SOURCES)


def _block(html: str, anchor: str) -> str:
    """The HTML of one result block (from its id to the end of its div)."""
    start = html.index(f'id="{anchor}"')
    return html[start:html.index("\n</div>\n", start)]


def test_failure_shows_inputs_expected_actual_source_and_command(tmp_path):
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    _write(root, "bans/broken", "[[rows]]\nlogits = [1.0]\nbogus = 1\n")  # malformed: an error per implementation
    out = run(["reference", WrongArgmax(), Crashes()], None, tmp_path / "r", progress=False, root=root,
              isolate=False)
    st = {(r["case"], r["impl"]): r["status"] for r in out.doc["results"]}
    assert st[("greedy/ok", "reference")] == "pass" and st[("greedy/ok", "wrong")] == "fail"
    assert st[("greedy/ok", "crashes")] == "error" and st[("bans/broken", "reference")] == "error"
    html = (tmp_path / "r" / "index.html").read_text()

    # permalinks: one per case and one per result, each with a visible link; the matrix links to results
    assert 'id="case-greedy--ok"' in html and '<a class="permalink" href="#case-greedy--ok"' in html
    assert 'id="case-greedy--ok.wrong"' in html and 'href="#case-greedy--ok.wrong"' in html

    fail = _block(html, "case-greedy--ok.wrong")
    assert '<span class="st st-fail">fail</span>' in fail
    assert "<code>sampcheck run --cases greedy/ok --impl wrong --out reports/repro</code>" in fail
    assert "<details open>" in fail  # inputs, expected and actual are shown open
    assert "logits = [1.0, 3.0, 2.0]" in fail and "temperature = 0.0" in fail  # inputs
    assert "token = 1" in fail  # expected / predicted
    assert '<span class="mismatch">token = 0</span>' in fail  # actual, marked
    assert "token: got 0, want 1" in fail
    assert "Rule&#39;s source" in fail or "Rule's source" in fail
    assert 'href="https://github.com/NVIDIA/TensorRT-LLM/issues/1"' in fail
    assert 'href="https://github.com/vllm-project/vllm/blob/v0.32.0/vllm/sampling_params.py"' in fail

    crash = _block(html, "case-greedy--ok.crashes")
    assert "engine exploded" in crash and "<code>sampcheck run --cases greedy/ok --impl crashes --out reports/repro</code>" in crash
    broken = _block(html, "case-bans--broken.reference")
    # a file that does not load: one command for it (the error is the same on every implementation), which prints it
    assert "bogus" in broken and "Malformed case file" in html
    assert "<code>sampcheck run --cases bans/broken --out reports/repro</code>" in broken

    passing = _block(html, "case-greedy--ok.reference")
    assert "sampcheck run" not in passing and "<details open>" not in passing  # a pass stays compact

    # the summary lists what needs attention, linked to the results
    assert 'id="attention"' in html and 'href="#case-greedy--ok.wrong"' in html

    # every internal link resolves, ids are unique, nothing is fetched
    p = _Ids()
    p.feed(html)
    assert len(p.ids) == len(set(p.ids)), [i for i in p.ids if p.ids.count(i) > 1][:5]
    missing = sorted({h for h in p.links if h[1:] not in set(p.ids)})
    assert not missing and len(p.links) > 10, missing
    assert p.fetches == []
    assert "http://" not in html and not re.search(r"<script[^>]*\bsrc=", html)


def test_reproducing_command_selects_that_case_on_that_implementation(tmp_path):
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    _write(root, "greedy/ok-too", GREEDY)
    cmd = report.repro_command("greedy/ok", "transformers")
    argv = shlex.split(cmd)
    assert argv[0] == "sampcheck"
    args = build_parser().parse_args(argv[1:])
    assert args.command == "run" and args.impl == ["transformers"] and args.cases == ["greedy/ok"]
    chosen = select(discover(root), args.cases, root)
    assert [p.stem for p in chosen] == ["ok"]  # the id, not a prefix of other ids
    assert build_parser().parse_args(shlex.split(report.repro_command("greedy/ok", "fused", "cuda"))[1:]).device == "cuda"


def test_filters_are_inline_and_off_without_script(tmp_path):
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    run(["reference", "reference-hf"], None, tmp_path / "r", progress=False, root=root, isolate=False)
    html = (tmp_path / "r" / "index.html").read_text()
    # the bar is hidden until the inline script shows it: without script every case is listed
    assert '<div id="filters" class="filters" hidden>' in html
    for name in ("status", "impl", "category"):
        assert f'name="{name}"' in html
    assert 'data-category="greedy"' in html and 'data-impl="reference-hf"' in html
    assert html.count("<script>") == 1 and "bar.hidden = false" in html


def test_docstring_examples():
    res = doctest.testmod(report)
    assert res.failed == 0 and res.attempted >= 2


class _Balance(HTMLParser):
    """Open and close counts of the container elements of a page (void elements aside)."""

    TAGS = ("div", "table", "details", "section", "tr", "td", "ul", "li", "nav", "p")

    def __init__(self):
        super().__init__()
        self.stack, self.stray = [], []

    def handle_starttag(self, tag, attrs):
        if tag in ("div", "table", "details", "section", "nav"):
            self.stack.append((tag, self.getpos()))

    def handle_endtag(self, tag):
        if tag in ("div", "table", "details", "section", "nav"):
            if self.stack and self.stack[-1][0] == tag:
                self.stack.pop()
            else:
                self.stray.append((tag, self.getpos()))


def test_every_container_closes_where_it_opens(tmp_path):
    """A result's box holds all of it: statistical and invariant results (charts, relation tables) of
    non-pass statuses, and the profile tables, nest properly (a stray </div> once let results escape
    their box and the implementation filter)."""
    from harness.corpus.load import CASES_DIR
    run(["reference", "reference-hf"], ["filters/top-k-two-statistical", "invariants/greedy-tie-lowest-id-generated",
                                        "greedy/top-k-one-forces-greedy"], tmp_path / "r", progress=False,
        root=CASES_DIR, isolate=False)
    p = _Balance()
    p.feed((tmp_path / "r" / "index.html").read_text())
    assert p.stray == [] and p.stack == []


# ---------------------------------------------------------------- issue 14: provenance, broken cases, counts, commands

from impls.base import STAGES  # noqa: E402
from impls.profiles import HF  # noqa: E402
from impls.reference import Reference  # noqa: E402

#: Two greedy rows: the first with only its token checked (stages filters, draw), the second also its mode
#: (validation too: harness/judge/provenance.py OUTPUT_STAGES).
TOKEN_ONLY = "[[rows]]\nlogits = [1.0, 3.0, 2.0]\ntemperature = 0.0\n[rows.expect]\ntoken = 1\n"
WITH_MODE = GREEDY


class Borrowing(Reference):
    """An engine (not a prediction) whose validation is the reference's code: its verdicts on cases that check
    ``mode`` are borrowed."""

    is_prediction = False
    stages = {**{s: "own" for s in STAGES}, "validation": "reference", "logprobs": "adapter"}

    def __init__(self):
        super().__init__(name="borrow")


class WrongEngine(WrongArgmax):
    """:class:`WrongArgmax` as an engine (not the prediction of a profile)."""

    is_prediction = False


class HfEngine(Reference):
    """An engine with the ``hf`` profile (its prediction is ``reference-hf``'s)."""

    is_prediction = False

    def __init__(self):
        super().__init__(HF, name="hfengine")


def _li(html: str) -> list:
    """The entries of *Needs attention*, tags stripped, spaces collapsed."""
    section = html.split('id="attention"')[1].split("</ul>")[0]
    return [unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", "", li)).strip()) for li in section.split("<li>")[1:]]


def test_provenance_in_summary_matrix_result_and_console(tmp_path, capsys):
    from harness.cli import run_summary
    root = tmp_path / "cases"
    _write(root, "greedy/token-only", TOKEN_ONLY)
    _write(root, "greedy/with-mode", WITH_MODE)
    out = run(["reference", Borrowing()], None, tmp_path / "r", progress=False, root=root, isolate=False)
    prov = {r["case"]: r["provenance"] for r in out.doc["results"] if r["impl"] == "borrow"}
    assert prov["greedy/token-only"] == {"stages": {"filters": "own", "draw": "own"}, "own_code": True, "borrowed": []}
    assert prov["greedy/with-mode"] == {"stages": {"validation": "reference", "filters": "own", "draw": "own"},
                                        "own_code": False, "borrowed": ["validation"]}
    html = out.html_path.read_text()

    # summary: the borrowed engine's pass count says how many its own code decided, and the verdicts column
    summary = html.split('<table class="summary">')[1].split("</table>")[0]
    row = summary.split('<tr><td><code>borrow</code></td>')[1].split("</tr>")[0]
    assert re.sub(r"<[^>]+>", " ", row).split() == ["2", "own", "code", "1", "1", "of", "2", "verdicts"]
    ref_row = summary.split('<tr><td><code>reference</code></td>')[1].split("</tr>")[0]
    assert re.sub(r"<[^>]+>", " ", ref_row).split() == ["2", "2", "of", "2", "verdicts"]  # all its own: no split

    # matrix: a badge naming the borrowed stage on the borrowed verdict only
    badge = '<span class="bw" title="borrowed: validation from the reference">borrowed</span>'
    matrix = html.split('<table class="matrix">')[1].split("</table>")[0]
    assert matrix.count(badge) == 1
    assert badge in matrix.split('data-case="case-greedy--with-mode"')[1].split("</tr>")[0]

    # each result says who decided it
    assert '<span class="decided borrowed">borrowed: validation from the reference</span>' in \
        _block(html, "case-greedy--with-mode.borrow")
    assert '<span class="decided">decided by: own code</span>' in _block(html, "case-greedy--token-only.borrow")
    assert '<span class="decided">decided by: own code</span>' in _block(html, "case-greedy--with-mode.reference")

    # the console's summary carries the same qualifier
    assert run_summary(out.doc) == [
        "       reference: 2 pass; decided by own code: 2 of 2 verdicts",
        "          borrow: 2 pass (own code 1); decided by own code: 1 of 2 verdicts"]
    assert report.provenance_text({"stages": {"logit_bias": "adapter", "penalties": "reference", "draw": "none"},
                                   "own_code": False, "borrowed": ["logit_bias", "penalties", "draw"]}) == (
        "borrowed: penalties from the reference; logit_bias by this project's adapter; draw not declared by the "
        "implementation")


def test_broken_case_shows_the_case_files_mismatch_in_red(tmp_path):
    """The case's truth is wrong (token 2; the reference gives 1): the mismatch cell names it, the expected value is red,
    and *Needs attention* has one entry for every implementation."""
    root = tmp_path / "cases"
    _write(root, "greedy/wrong-truth", GREEDY.replace("token = 1", "token = 2"))
    out = run(["reference", WrongArgmax()], None, tmp_path / "r", progress=False, root=root, isolate=False)
    assert {r["status"] for r in out.doc["results"]} == {"error"}
    html = out.html_path.read_text()
    block = _block(html, "case-greedy--wrong-truth.wrong")
    assert '<span class="mismatch">token = 2</span>' in block  # the expected value, marked
    assert ("<span title=\"got: the reference under the default profile; want: the case file's expect\">case file "
            "(expect) vs the reference: token: got 1, want 2</span>") in block
    assert '<tr class="bad">' in block
    assert _li(html) == ["broken case greedy/wrong-truth on reference, wrong: case disagrees with the reference: "
                         "main:0: token: got 1, want 2 (got: the reference under the default profile; want: the case)"]
    # under a profile with its own truth for the row, that truth is shown, not marked (it is not the wrong one)
    _doubles.write_case(root, "filters/wrong-default-truth", _doubles.CASE_HEADER,
                        "[[rows]]\nlogits = [1.0, 3.0, 2.0]\ntemperature = 1.0\ntop_k = 1\n[rows.expect]\ntoken = 2\n"
                        "[rows.expect_by_profile]\nhf = { token = 1 }\n",
                        features='["temperature", "top_k"]', check="exact", source=SOURCES)
    out = run(["reference-hf"], ["filters"], tmp_path / "r2", progress=False, root=root, isolate=False)
    block = _block(out.html_path.read_text(), "case-filters--wrong-default-truth.reference-hf")
    assert '<span class="muted ebp">expect_by_profile.hf:</span><br>token = 1<br>' in block
    assert "case file (expect) vs the reference: token: got 1, want 2</span>" in block
    # a check kind without hand_mismatches (an invariant's rows): the lines come from the message
    assert report._broken_lines("case disagrees with the reference: a:0: token: got 1, want 2 (got: the reference "
                                "under the default profile; want: the case)") == ["a:0: token: got 1, want 2"]


def test_broken_profile_is_one_entry_with_its_implementations(tmp_path):
    """A wrong truth for hf: reference-hf fails, the hf engine cannot be judged; one entry names both."""
    root = tmp_path / "cases"
    # top_k = 1 at temperature 1: greedy by the default's rule, one kept token under hf's: token 1 either way
    _doubles.write_case(root, "filters/wrong-hf-truth", _doubles.CASE_HEADER,
                        "[[rows]]\nlogits = [1.0, 3.0, 2.0]\ntemperature = 1.0\ntop_k = 1\n[rows.expect]\ntoken = 1\n"
                        "[rows.expect_by_profile]\nhf = { token = 0 }\n",
                        features='["temperature", "top_k"]', check="exact", source=SOURCES)
    out = run(["reference", "reference-hf", HfEngine()], None, tmp_path / "r", progress=False, root=root,
              isolate=False)
    st = {r["impl"]: r["status"] for r in out.doc["results"]}
    assert st == {"reference": "pass", "reference-hf": "fail", "hfengine": "error"}
    html = out.html_path.read_text()
    msg = ("the 'hf' profile's prediction contradicts the case's truth for 'hf': main:0: token: got 1, want 0 (got: "
           "the reference under 'hf'; want: the case's expect_by_profile.hf); no single profile field change makes "
           "it agree")
    assert out.doc["results"][1]["details"]["message"] == msg
    assert _li(html) == [f"broken profile filters/wrong-hf-truth on reference-hf (fail), hfengine (error): {msg}"]
    block = _block(html, "case-filters--wrong-hf-truth.hfengine")
    assert '<span class="muted ebp">expect_by_profile.hf:</span><br><span class="mismatch">token = 0</span>' in block
    assert "case file (expect_by_profile.hf) vs the hf prediction: token: got 1, want 0</span>" in block


def test_attention_groups_implementations_and_gives_each_reason(tmp_path):
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    out = run(["reference", WrongArgmax(), WrongArgmax("wrong2"), Crashes()], None, tmp_path / "r", progress=False,
              root=root, isolate=False)
    entries = _li(out.html_path.read_text())
    assert entries == ["fail greedy/ok on wrong, wrong2: 1 row(s) differ from the trtllm prediction: main:0",
                       "error greedy/ok on crashes: RuntimeError: engine exploded"]


def test_counts_are_cases_and_engines_are_apart_from_the_reference(tmp_path):
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    _write(root, "greedy/ok-too", TOKEN_ONLY)
    _write(root, "bans/ok", GREEDY)
    out = run(["reference", "reference-flashinfer", WrongEngine(), Borrowing()], None, tmp_path / "r", progress=False,
              root=root, isolate=False)
    assert {m["is_prediction"] for m in out.doc["run"]["impls"].values()} == {True, False}
    assert [n for n, m in out.doc["run"]["impls"].items() if m["is_prediction"]] == ["reference", "reference-flashinfer"]
    html = out.html_path.read_text()
    # 12 results on 3 cases: each case passes on reference and borrow and fails on wrong; the two that check
    # the mode are a known-diff on reference-flashinfer (greedy as top_k = 1 samples), the token-only one passes; the status chips count cases (3 each), not results (6 pass)
    chip = lambda s: re.search(rf'value="{s}" checked>.*?<span class="n">(\d+)</span>', html).group(1)  # noqa: E731
    assert (chip("pass"), chip("known-diff"), chip("fail"), chip("error")) == ("3", "2", "3", "0")
    # the "all" row counts cases too, with the same numbers
    all_row = html.split("<tr><th>all")[1].split("</tr>")[0]
    assert re.findall(r'data-show-status="(\w[\w/-]*)"[^>]*>(\d+)</a>', all_row) == [
        ("pass", "3"), ("known-diff", "2"), ("fail", "3")]
    # by category: the engines' group and the reference's, each a case count
    bycat = html.split('<table class="bycat">')[1].split("</table>")[0]
    assert 'title="wrong, borrow">engines <span class="muted">(2 implementations)</span>' in bycat
    assert 'the reference under each profile <span class="muted">(2 implementations)</span>' in bycat
    # the implementations' table says which profile is the default (the reference's, trtllm), and only there
    table = html.split('<h2 id="implementations">')[1].split("</table>")[0]
    profile_cells = re.findall(r'<td><a href="#profiles">([\w-]+)</a>( <span class="muted"[^>]*>\(default\)</span>)?</td>',
                               table)
    assert [(p, bool(d)) for p, d in profile_cells] == [("trtllm", True), ("flashinfer", False), ("trtllm", True),
                                                         ("trtllm", True)], profile_cells
    greedy = bycat.split("<tr><td>greedy</td>")[1].split("</tr>")[0]
    assert re.findall(r'data-show-status="(\S+)" data-show-category="greedy" data-show-impl="([^"]+)"[^>]*>(\d+)</a>',
                      greedy) == [("pass", "wrong,borrow", "2"), ("fail", "wrong,borrow", "2"),
                                  ("pass", "reference,reference-flashinfer", "2"),
                                  ("known-diff", "reference,reference-flashinfer", "1")]
    # engines' pass on greedy: both cases pass on borrow, one of them (token only) by its own code
    assert ("<span class=\"own\" title=\"1 of these 2 cases: a pass verdict decided by the implementation's own "
            "code; the others borrowed\">own code 1</span>") in greedy


def test_text_has_no_python_or_json_spellings_and_one_key_order(tmp_path):
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    out = run(["reference", WrongArgmax()], None, tmp_path / "r", progress=False, root=root, isolate=False)
    html = out.html_path.read_text()
    # the page's text (the profile tables' citations aside: they quote the engines' code)
    text = re.sub(r"<script>.*?</script>|<style>.*?</style>", "", html, flags=re.S)
    text = text.split('<h2 id="profiles">')[0] + " ".join(
        re.findall(r"<td class=\"(?:differs)?\"><code>([^<]*)</code>", text))
    text = re.sub(r"<[^>]+>", " ", text)
    for word in ("None", "null", "True", "False", "(1 rows)"):
        assert not re.search(rf"\b{re.escape(word)}", text), (word, text[text.find(word) - 80:text.find(word) + 40])
    assert "<code>false</code>" in html  # a profile's boolean field
    assert "Inputs and hand-written expectations (1 row)" in html
    # the reference's version in words
    ver = out.doc["run"]["impls"]["reference"]["version"]
    assert re.fullmatch(r"\d+ \(reference rules; torch .+\)", ver)
    assert f"<td>{report.show_version(ver)}</td>" in html and report.show_version(ver).startswith("reference rules v")
    # expected, predicted and actual list their keys in one order
    block = _block(html, "case-greedy--ok.wrong")
    cells = re.findall(r'<td class="mono">((?:(?!</td>).)*)</td>', block.split("<th>mismatches</th></tr>")[1], re.S)
    keys = [re.findall(r"(\w+) = ", c) for c in cells[1:4]]  # expected, predicted, actual (the inputs first)
    assert keys == [["token", "mode"], ["token", "mode"], ["token", "mode"]]
    assert report._short([1, None, True, "x"]) == '[1, (none), true, "x"]'
    assert report._short({"length": 70, "head": [0.5, 1.0]}) == "[0.5, 1.0, … (70 values)]"


def test_command_prefix_is_what_the_user_can_type():
    tox = {"TOX_ENV_DIR": "/src/.tox/report"}
    on_tox_path = lambda name: f"/src/.tox/report/bin/{name}"  # noqa: E731  tox puts its env first on PATH
    # after `tox -e report`: sampcheck lives in .tox/report/bin, not on the user's PATH
    assert report.command_prefix("/src/.tox/report/bin/sampcheck", "/src/.tox/report/bin/python", Path("/src"), tox,
                                 on_tox_path) == ".tox/report/bin/sampcheck"
    # an activated virtualenv: the name finds the same script
    venv = lambda name: f"/v/bin/{name}"  # noqa: E731
    assert report.command_prefix("/v/bin/sampcheck", "/v/bin/python", Path("/src"), {}, venv) == "sampcheck"
    # a script that PATH does not find, outside the working folder: its absolute path
    assert report.command_prefix("/opt/x/bin/sampcheck", "/opt/x/bin/python", Path("/src"), {}, venv) == \
        "/opt/x/bin/sampcheck"
    # python -m harness / python -m harness.cli
    assert report.command_prefix("/src/harness/cli.py", "/v/bin/python", Path("/src"), {}, venv) == \
        "python -m harness"
    assert report.command_prefix("/src/harness/__main__.py", "/src/.tox/py/bin/python", Path("/src"),
                                 {"TOX_ENV_DIR": "/src/.tox/py"}, lambda n: f"/src/.tox/py/bin/{n}") == \
        ".tox/py/bin/python -m harness"
    # SAMPCHECK_CASES carried, absolute
    assert report.command_prefix("/v/bin/sampcheck", "/v/bin/python", Path("/src"),
                                 {"SAMPCHECK_CASES": "/data/my cases"}, venv) == \
        "SAMPCHECK_CASES='/data/my cases' sampcheck"
    # anything else (pytest, an embedding program)
    assert report.command_prefix("/v/bin/pytest", "/v/bin/python", Path("/src"), {}, venv) == "sampcheck"
    assert report.repro_command("greedy/ok", "trtllm", env={"SAMPCHECK_TRTLLM_SRC": "/t"}) == \
        "SAMPCHECK_TRTLLM_SRC=/t sampcheck run --cases greedy/ok --impl trtllm --out reports/repro"


def test_reproducing_command_runs_as_printed_after_a_tox_style_install(tmp_path):
    """A fresh project folder whose sampcheck lives in .tox/report/bin (not on PATH afterwards): the printed command,
    run from that folder in a shell without tox, reruns the case and shows its problem."""
    import os
    import subprocess
    import sys
    proj = tmp_path / "proj"
    _write(proj / "cases", "greedy/wrong-truth", GREEDY.replace("token = 1", "token = 2"))
    bindir = proj / ".tox" / "report" / "bin"
    bindir.mkdir(parents=True)
    script = bindir / "sampcheck"
    repo = Path(__file__).resolve().parent.parent
    script.write_text(f"#!{sys.executable}\nimport sys\nfrom harness.cli import main\n"  # as pip writes an entry point
                      "if __name__ == '__main__':\n    sys.exit(main())\n")
    script.chmod(0o755)
    # the project importable from every process (worker processes included), as an installed package is
    env = {**{k: v for k, v in os.environ.items() if k not in ("SAMPCHECK_CASES", "SAMPCHECK_GOLDEN")},
           "PYTHONPATH": str(repo)}
    tox_env = {**env, "TOX_ENV_DIR": str(proj / ".tox" / "report"), "PATH": f"{bindir}:{env.get('PATH', '')}"}
    proc = subprocess.run(["sampcheck", "run", "--no-isolation"], cwd=proj, env=tox_env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1, proc.stderr
    html = (proj / "reports" / "latest" / "index.html").read_text()
    cmd = (".tox/report/bin/sampcheck run --cases greedy/wrong-truth --impl reference --out reports/repro")
    assert f"Reproduce (from the project root): <code>{cmd}</code>" in html
    plain = {k: v for k, v in env.items() if k not in ("TOX_ENV_DIR",)}
    again = subprocess.run(cmd, shell=True, cwd=proj, env=plain, capture_output=True, text=True, timeout=300)
    assert again.returncode == 1, again.stderr
    assert "ERROR greedy/wrong-truth on reference: case disagrees with the reference: main:0: token: got 1, want 2" \
        in again.stdout
    assert (proj / "reports" / "repro" / "index.html").is_file()


def test_a_subset_does_not_replace_the_full_report(tmp_path, monkeypatch, capsys):
    from harness.cli import main
    monkeypatch.chdir(tmp_path)
    (tmp_path / "reports" / "latest").mkdir(parents=True)
    (tmp_path / "reports" / "latest" / "index.html").write_text("the full run")
    assert main(["run", "--cases", "greedy/top-k-one-forces-greedy", "--no-progress", "--no-isolation"]) == 0
    printed = capsys.readouterr().out
    assert printed.splitlines()[-1] == (
        "wrote reports/latest-subset/results.json and reports/latest-subset/index.html (a subset, --cases: "
        "reports/latest, the report of the last full run, is left as it was; --out reports/latest replaces it)")
    assert (tmp_path / "reports" / "latest" / "index.html").read_text() == "the full run"
    assert (tmp_path / "reports" / "latest-subset" / "results.json").is_file()


def test_load_error_command_prints_the_error(tmp_path, capsys):
    from harness.cli import run_summary
    root = tmp_path / "cases"
    _write(root, "bans/broken", "[[rows]]\nlogits = [1.0]\nbogus = 1\n")
    out = run(["reference", "reference-hf"], None, tmp_path / "r", progress=False, root=root, isolate=False)
    msg = out.doc["results"][0]["details"]["message"]
    assert "bogus" in msg
    assert run_summary(out.doc)[2:] == [f"  ERROR bans/broken: the case file does not load (on every implementation): "
                                        f"{msg}"]


def test_progress_in_a_log_is_a_line_every_few_seconds(tmp_path):
    """stderr redirected to a file: plain lines, no carriage returns; a fake clock gives the exact lines."""
    import io
    import subprocess
    import sys
    from harness.run.runner import Progress
    ticks = iter([100.0, 101.0, 104.9, 105.0, 106.0, 111.2])  # the start, then one reading per case
    out = io.StringIO()
    p = Progress(5, stream=out, clock=lambda: next(ticks), tty=False)
    for c in "abcde":
        p.update(c)
    p.close()  # the last line already says 5/5: nothing more (and no clock reading left)
    assert out.getvalue() == "sampcheck: 3/5 cases, 5 s\nsampcheck: 5/5 cases, 11 s\n"
    ticks = iter([0.0, 1.0, 2.0, 3.5, 4.0])
    out = io.StringIO()
    p = Progress(3, stream=out, clock=lambda: next(ticks), tty=False)
    for c in "abc":
        p.update(c)
    p.close()  # a run shorter than the interval: one line, at the end
    assert out.getvalue() == "sampcheck: 3/3 cases, 4 s\n"
    repo = Path(__file__).resolve().parent.parent
    log = tmp_path / "stderr.log"
    with log.open("w") as err:
        proc = subprocess.run([sys.executable, "-m", "harness", "run", "--cases", "greedy/top-k-one-forces-greedy",
                               "--cases", "greedy/nothing-set-is-greedy", "--out", str(tmp_path / "r"),
                               "--no-isolation"], cwd=repo, stdout=subprocess.PIPE, stderr=err, text=True, timeout=300)
    assert proc.returncode == 0
    text = log.read_text()
    assert "\r" not in text
    assert re.fullmatch(r"(sampcheck: [12]/2 cases, \d+ s\n)*sampcheck: 2/2 cases, \d+ s\n", text), text


def test_scenario_truth_written_as_expect_renders(tmp_path):
    """A scenario request's ``expect_by_profile`` entry may be ``"expect"`` (the same truth as the
    default's, harness/corpus/truths.py); the page lists it as that truth (it once crashed the page)."""
    from harness.corpus.load import CASES_DIR
    root = tmp_path / "cases"
    (root / "bans").mkdir(parents=True)
    name = "bans/min-length-ban-survives-logit-bias.toml"
    text = (CASES_DIR / name).read_text()
    assert text.endswith('finish_step = 2\n')
    (root / name).write_text(text + '\n[scenario.requests.expect_by_profile]\nvllm = "expect"\n')
    out = run(["reference-vllm"], None, tmp_path / "r", progress=False, root=root, isolate=False)
    assert [r["status"] for r in out.doc["results"]] == ["pass"]
    html = out.html_path.read_text()
    assert ('<span class="muted">expect_by_profile.vllm:</span><br>&nbsp;&nbsp;tokens = [1, 1, 3]<br>'
            '&nbsp;&nbsp;finish_reason = end_id<br>&nbsp;&nbsp;finish_step = 2<br>') in html


def test_an_external_case_is_reproduced_by_its_path(tmp_path):
    # a case given by its path has an ext/<hash>/<name> id, which --cases does not select: the command names the file
    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    bad = tmp_path / "elsewhere" / "broken.toml"
    bad.parent.mkdir()
    bad.write_text("schema = 1\nid = [\n")
    run(["reference"], [str(bad)], tmp_path / "r", progress=False, root=root, isolate=False)
    html = (tmp_path / "r" / "index.html").read_text()
    assert f"<code>sampcheck run --cases {bad} --out reports/repro</code>" in html
    assert select(discover(root), [str(bad)], root) == [bad.resolve()]
    # the header counts it apart from the corpus's one declared case (it said "1 of 1 declared cases run")
    assert "0 of 1 declared cases run, and 1 case(s) given by path from outside the corpus; 1 results." in html


def test_what_ran_counts_one_fact_in_the_singular(tmp_path):
    # a fresh user's read of the report (2026-12-07): "what ran (1 facts)"
    class OneFact(WrongArgmax):
        def describe(self, device="cpu"):
            return {"tuning": "block=16"}

    class TwoFacts(WrongArgmax):
        def describe(self, device="cpu"):
            return {"tuning": "block=16", "device": "cpu"}

    root = tmp_path / "cases"
    _write(root, "greedy/ok", GREEDY)
    run([OneFact("one"), TwoFacts("two")], None, tmp_path / "r", progress=False, root=root, isolate=False)
    html = (tmp_path / "r" / "index.html").read_text()
    assert "what ran (1 fact)" in html and "what ran (2 facts)" in html and "(1 facts)" not in html


def test_the_all_rows_own_code_says_it_counts_across_implementations(tmp_path):
    # a fresh user's read (2026-12-07): "own code N" under the all row's count had the per-implementation tooltip
    root = tmp_path / "cases"
    _write(root, "greedy/token-only", TOKEN_ONLY)
    _write(root, "greedy/with-mode", WITH_MODE)
    out = run([Borrowing()], None, tmp_path / "r", progress=False, root=root, isolate=False)
    summary = out.html_path.read_text().split('<table class="summary">')[1].split("</table>")[0]
    all_row = summary.split("<tr><th>all")[1].split("</tr>")[0]
    assert "own code 1" in all_row and "on at least one implementation" in all_row
    row = summary.split('<tr><td><code>borrow</code></td>')[1].split("</tr>")[0]
    assert "own code 1" in row and "decided by the implementation&#39;s own code" in row.replace("'", "&#39;")
