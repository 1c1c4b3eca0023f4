"""The conformance report's page without a browser: permalinks, what a failure shows, the
command that reproduces it, internal links, and that nothing is fetched.

The page in a real browser (console, filters, charts) is tests/test_browser.py.
"""

import doctest
import re
import shlex
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
    assert "bogus" in broken and "Malformed case file" in html and "<code>sampcheck run --cases bans/broken --impl reference --out reports/repro</code>" in broken

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
    run(["reference", "reference-hf"], ["filters/top-k-two-statistical", "invariants/greedy-spellings-agree",
                                        "greedy/top-k-one-forces-greedy"], tmp_path / "r", progress=False,
        root=CASES_DIR, isolate=False)
    p = _Balance()
    p.feed((tmp_path / "r" / "index.html").read_text())
    assert p.stray == [] and p.stack == []
