"""The hostile case set of issue #19: files that must each be an ``error`` for that file, located.

:data:`HOSTILE` lists them: each writes its file(s) into a corpus folder and says the field
and a part of the reason its error must carry (hand-checked against cases/README.md,
"Limits", and the schema). :func:`write_corpus` writes them all beside :data:`GOOD` cases.
``tests/test_hostile.py`` loads each one and runs the set end to end; run this file to do the
end-to-end run by hand and print the counts::

    python tests/_hostile.py            # exit 0 when every hostile file is a located error
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

ROOT = Path(__file__).resolve().parent.parent

HEADER = """schema = 1
id = "{id}"
description = "d"
category = "{cat}"
features = {features}
source = {{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }}
check = "{check}"
"""
#: A greedy row the reference decodes to token 1 (logits [1, 3, 2]).
ROW = '[[rows]]\nlogits = [1.0, 3.0, 2.0]\ntemperature = 0.0\n[rows.expect]\ntoken = 1\n'
#: A scenario whose one request decodes greedily over a table model.
SCEN = ('[scenario]\nmodel = {{ kind = "table", steps = [[0.0, 1.0]] }}\n{extra}'
        '[[scenario.requests]]\nid = "a"\nslot = 0\ntemperature = 0.0\nmax_new_tokens = 1\n')


def text(cid: str, body: str = ROW, features: str = '["temperature"]', check: str = "exact", **swap) -> str:
    """A case file: :data:`HEADER` for ``cid`` (any header line replaced by ``swap``: ``key=None`` drops it), then ``body``."""
    head = HEADER.format(id=cid, cat=cid.split("/")[0], features=features, check=check)
    lines = []
    for line in head.splitlines():
        key = line.split(" = ", 1)[0]
        if key in swap:
            if swap[key] is not None:
                lines.append(f"{key} = {swap[key]}")
            continue
        lines.append(line)
    return "\n".join(lines) + "\n" + body


@dataclass
class Hostile:
    """One hostile file: ``cid`` (its place in the corpus), how to write it, and the error it must give."""

    cid: str
    write: Callable[[Path, Path], None]  # (path, corpus root) -> None
    field: str
    reason: str  # a part of the reason, hand-checked
    file: Optional[str] = None  # the file's path in the corpus, when it is not "<cid>.toml"

    def path(self, root: Path) -> Path:
        return root / (self.file or f"{self.cid}.toml")

    def make(self, root: Path) -> Path:
        p = self.path(root)
        p.parent.mkdir(parents=True, exist_ok=True)
        self.write(p, root)
        return p


def _t(content: str) -> Callable:
    return lambda p, root: p.write_text(content, encoding="utf-8")


def _b(content: bytes) -> Callable:
    return lambda p, root: p.write_bytes(content)


def H(cid: str, body: Optional[str] = None, field: str = "", reason: str = "", raw: Optional[str] = None,
      **kw) -> Hostile:
    """A hostile case file written as text: ``raw`` as is, else :func:`text` of ``cid``, ``body`` and ``kw``."""
    content = raw if raw is not None else text(cid, body if body is not None else ROW, **kw)
    return Hostile(cid, _t(content), field, reason)


def _symlink(target: str) -> Callable:
    return lambda p, root: os.symlink(target, p)


def _loop(p: Path, root: Path) -> None:
    os.symlink(p.name, p)  # a link to itself


def _fifo(p: Path, root: Path) -> None:
    os.mkfifo(p)


def _huge(p: Path, root: Path) -> None:
    pad = "# " + "x" * 1000 + "\n"
    body = text("filters/huge-file") + pad * 1100  # > 1 MiB
    p.write_text(body, encoding="utf-8")


DEEP = "[" * 5000 + "]" * 5000
NAN_SET = 'logits = {{ dist = "normal", vocab = 4, set = [[{0}, 1.0]] }}'

#: Every hostile file. The first ones are the reports of issue #19, verbatim.
HOSTILE = [
    # -- issue #19, item 1: one file aborted every run
    H("filters/deep-5000", ROW + f"[rows.expect_by_profile]\nvllm = {{ support = {DEEP} }}\n",
      "<toml>", "line 14: brackets nested deeper than 32 levels"),
    H("filters/generator-nan-set-id", "[[rows]]\n" + NAN_SET.format("nan") + "\n", "rows[0].logits.set[0][0]",
      "must be integer", features="[]"),
    H("filters/generator-inf-set-id", "[[rows]]\n" + NAN_SET.format("inf") + "\n", "rows[0].logits.set[0][0]",
      "must be integer", features="[]"),
    # -- issue #19, item 4: silent misreads
    H("penalties/logit-bias-id-0-7", "[[rows]]\nlogits = [1.0, 2.0, 3.0]\nlogit_bias = [[0.7, 5.0]]\ntop_k = 1\n"
      "[rows.expect]\ntoken = 0\n", "rows[0].logit_bias[0][0]", "must be integer", features='["logit_bias", "top_k"]'),
    H("filters/generator-seed-minus-1", '[[rows]]\nlogits = { dist = "normal", vocab = 4, seed = -1 }\n',
      "rows[0].logits.seed", "must be bigger than or equal to 0", features="[]"),
    H("filters/generator-low-above-high", '[[rows]]\nlogits = { dist = "uniform", vocab = 4, low = 2.0, high = 1.0 }\n',
      "rows[0].logits.high", "1.0 is below low = 2.0", features="[]"),
    H("penalties/logit-bias-nan-id", "[[rows]]\nlogits = [1.0, 2.0, 3.0]\nlogit_bias = [[nan, 5.0]]\n",
      "rows[0].logit_bias[0][0]", "must be integer", features='["logit_bias"]'),
    H("filters/draw-seed-2-64", "draws = 1000\ndraw_seed = 18446744073709551615\n[[rows]]\nlogits = [1.0, 2.0]\n"
      "temperature = 1.0\n", "draw_seed", "integer 18446744073709551615 outside the 64-bit range TOML allows",
      check="statistical"),
    # -- nesting
    H("filters/arrays-33-deep", ROW + "[rows.expect_by_profile]\nvllm = { support = " + "[" * 33 + "]" * 33 + " }\n",
      "<toml>", "line 14: brackets nested deeper than 32 levels"),
    H("filters/inline-tables-40-deep", "notes = " + "{ a = " * 40 + "1" + " }" * 40 + "\n" + ROW,
      "<toml>", "line 8: brackets nested deeper than 32 levels"),
    H("filters/dotted-key-40-parts", "a" + ".b" * 40 + " = 1\n" + ROW, "<toml>",
      "line 8: a dotted key of more than 32 parts"),
    H("filters/header-40-parts", ROW + "[" + ".".join(["t"] * 40) + "]\nx = 1\n", "<toml>",
      "line 13: a dotted key of more than 32 parts"),
    H("filters/header-and-brackets-add-up", ROW + "[" + ".".join(["t"] * 20) + "]\nx = " + "[" * 20 + "]" * 20
      + "\n", "t.t.t.t.t.t.t.t.t.t.t.t.t.t.t.t.t.t.t.t.x[0][0][0][0][0][0][0][0][0][0][0][0]",
      "nested deeper than 32 levels"),
    # -- huge
    Hostile("filters/huge-file", _huge, "<file>", "larger than 1048576 bytes, the limit of a case file"),
    H("filters/generator-vocab-2-20-plus-1", '[[rows]]\nlogits = { dist = "normal", vocab = 1048577 }\n',
      "rows[0].logits.vocab", "must be smaller than or equal to 1048576", features="[]"),
    H("filters/five-rows-of-2-20-logits", "[defaults]\nlogits = { dist = \"constant\", vocab = 1048576 }\n"
      + "[[rows]]\n" * 5, "rows[4].logits", "the rows up to this one hold 5242880 logits; a case holds at most 4194304",
      features="[]"),
    H("beam/scenario-toy-model-too-big", '[scenario]\nmodel = { kind = "toy", vocab = 1048576, seed = 0 }\n'
      'max_steps = 1000\n[[scenario.requests]]\nid = "a"\nslot = 0\n', "scenario",
      "may ask its models for 1048576000 logits", check="scenario", features="[]"),
    H("speculative/statistical-scenario-too-many-draws", '[scenario]\nmodel = { kind = "table", steps = [[' +
      ", ".join(["0.0"] * 100) + ']] }\nstatistical = { request = "a", draws = 1000000 }\n[[scenario.requests]]\n'
      'id = "a"\nslot = 0\n', "scenario.statistical.draws", "1000000 draws of a request over vocab 100 ask for "
      "100000000 logits in one step", check="scenario", features="[]"),
    H("filters/integer-2-70", "[[rows]]\nlogits = [1.0, 2.0]\ntop_k = 1180591620717411303424\n", "rows[0].top_k",
      "integer 1180591620717411303424 outside the 64-bit range TOML allows", features='["top_k"]'),
    H("seeds/seed-string-5000-digits", '[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 1.0\nseed = "' + "9" * 5000
      + '"\n', "rows[0].seed", "a string of at most 64 characters", features='["temperature", "seed"]'),
    # -- wrong types, field by field family
    H("filters/top-k-float", "[[rows]]\nlogits = [1.0, 2.0]\ntop_k = 1.5\n", "rows[0].top_k", "must be integer",
      features='["top_k"]'),
    H("filters/top-k-integral-float", "[[rows]]\nlogits = [1.0, 2.0]\ntop_k = 2.0\n", "rows[0].top_k",
      "must be integer", features='["top_k"]'),
    H("filters/top-k-nan", "[[rows]]\nlogits = [1.0, 2.0]\ntop_k = nan\n", "rows[0].top_k", "must be integer",
      features='["top_k"]'),
    H("filters/temperature-string", "[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 'hot'\n", "rows[0].temperature",
      "must be number"),
    H("seeds/seed-float", "[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 1.0\nseed = 1.5\n", "rows[0].seed",
      "must be an integer, or a string", features='["temperature", "seed"]'),
    H("seeds/seed-inf", "[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 1.0\nseed = inf\n", "rows[0].seed",
      "must be an integer, or a string", features='["temperature", "seed"]'),
    H("finish/end-id-float", "[[rows]]\nlogits = [1.0, 2.0]\nend_id = 0.5\n", "rows[0].end_id",
      "must be an integer, or a non-empty array of integers", features='["end_id"]'),
    H("finish/min-length-inf", "[[rows]]\nlogits = [1.0, 2.0]\nmin_length = inf\n", "rows[0].min_length",
      "must be integer", features='["min_length"]'),
    H("finish/max-new-tokens-minus-inf", "[[rows]]\nlogits = [1.0, 2.0]\nmax_new_tokens = -inf\n",
      "rows[0].max_new_tokens", "must be integer", features='["max_new_tokens"]'),
    H("bans/bad-word-float-id", "[[rows]]\nlogits = [1.0, 2.0]\nbad_words = [[1.0]]\n", "rows[0].bad_words[0][0]",
      "must be integer", features='["bad_words"]'),
    H("penalties/prompt-nan", "[[rows]]\nlogits = [1.0, 2.0]\nprompt = [nan]\n", "rows[0].prompt[0]",
      "must be integer", features="[]"),
    H("filters/slot-negative", "[[rows]]\nlogits = [1.0, 2.0]\nslot = -1\n", "rows[0].slot",
      "must be bigger than or equal to 0", features="[]"),
    H("logprobs/logprobs-inf", "[[rows]]\nlogits = [1.0, 2.0]\nlogprobs = inf\n", "rows[0].logprobs",
      "must be integer", features='["logprobs"]'),
    H("finish/ignore-eos-int", "[[rows]]\nlogits = [1.0, 2.0]\nignore_eos = 1\n", "rows[0].ignore_eos",
      "must be boolean", features='["ignore_eos"]'),
    H("filters/expect-token-float", "[[rows]]\nlogits = [1.0, 3.0, 2.0]\ntemperature = 0.0\n[rows.expect]\n"
      "token = 1.0\n", "rows[0].expect.token", "must be integer"),
    H("logprobs/top-logprobs-float-id", "[[rows]]\nlogits = [1.0, 2.0]\nlogprobs = 1\n[rows.expect]\n"
      "top_logprobs = [[0.5, -1.0]]\n", "rows[0].expect.top_logprobs[0][0]", "must be integer",
      features='["logprobs"]'),
    H("filters/expect-by-profile-garbage", ROW + "[rows.expect_by_profile]\nvllm = 3\n",
      "rows[0].expect_by_profile.vllm", "must be a table of the keys 'expect' takes"),
    H("filters/logits-string", "[[rows]]\nlogits = 'many'\n", "rows[0].logits",
      "must be a non-empty array of numbers, or a generator table", features="[]"),
    H("filters/features-not-array", features='"temperature"', field="features", reason="must be array"),
    H("filters/description-number", field="description", reason="must be string", description="3"),
    H("filters/atol-negative", "atol = -1.0\n" + ROW, "atol", "must be bigger than or equal to 0"),
    H("filters/draws-too-few", "draws = 999\n[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 1.0\n", "draws",
      "must be bigger than or equal to 1000", check="statistical"),
    H("filters/epsilon-one", "draws = 1000\nepsilon = 1.0\n[[rows]]\nlogits = [1.0, 2.0]\ntemperature = 1.0\n",
      "epsilon", "must be smaller than 1", check="statistical"),
    H("filters/draw-seed-nan", "draw_seed = nan\n" + ROW, "draw_seed", "must be integer"),
    H("filters/mirostat-2-40", "[[rows]]\nlogits = [1.0, 2.0]\nmirostat = 1099511627776\n", "rows[0].mirostat",
      "must be smaller than or equal to 2147483647", features='["mirostat"]'),
    H("invariants/row-index-5000-digits", '[[batches]]\nname = "a"\nrows = [{ logits = [1.0, 2.0] }]\n'
      '[[invariants]]\nkind = "same_token"\na = "a:' + "9" * 5000 + '"\nb = "a:0"\n', "invariants[0].a",
      "must match pattern", check="invariant", features="[]"),
    H("invariants/prob-tokens-outside-vocab", '[[batches]]\nname = "a"\nrows = [{ logits = [1.0, 2.0] }]\n'
      '[[invariants]]\nkind = "prob_not_greater"\na = "a:0"\nb = "a:0"\ntokens = [7]\n', "invariants[0].tokens",
      "ids [7] outside [0, 2), the vocabulary of row 'a:0'", check="invariant", features="[]"),
    H("invariants/prob-tokens-nan", '[[batches]]\nname = "a"\nrows = [{ logits = [1.0, 2.0] }]\n'
      '[[invariants]]\nkind = "prob_not_greater"\na = "a:0"\nb = "a:0"\ntokens = [nan]\n',
      "invariants[0].tokens[0]", "must be integer", check="invariant", features="[]"),
    # -- the top level
    H("filters/schema-2", field="schema", reason="must be 1", schema="2"),
    H("filters/schema-1-0", field="schema", reason="must be integer", schema="1.0"),
    H("filters/check-unknown", field="check", reason="must be one of", check="fuzzy"),
    H("filters/unknown-top-field", "colour = 'red'\n" + ROW, "<top>", "unknown field(s) {'colour'}"),
    H("filters/missing-source", field="<top>", reason="missing required field(s): source", source=None),
    H("filters/todo-left", field="<unfinished>", reason="1 value(s) still start with 'TODO'", description='"TODO"'),
    H("filters/duplicate-key", "notes = 'a'\nnotes = 'b'\n" + ROW, "<toml>", "syntax error: Cannot overwrite a value"),
    # -- ids: unicode, NUL, duplicates
    H("filters/unicode-id", field="id", reason="must match pattern", id='"filters/ünïcode"'),
    H("filters/nul-in-id", field="id", reason="must match pattern", id='"filters/nul\\u0000"'),
    H("filters/newline-in-id", field="id", reason="must match pattern", id='"filters/newline-in-id\\n"'),
    H("filters/ünïcode-name", field="id", reason="but the file's path says 'filters/ünïcode-name'",
      id='"filters/unicode-name"'),
    Hostile("filters/good.TOML", _t(text("filters/good")), "id", "the extension must be '.toml', in lower case",
            file="filters/good.TOML"),
    H("filters/id-of-another-case", field="id", reason="is 'filters/good' but the file's path says "
      "'filters/id-of-another-case'", id='"filters/good"'),
    H("filters/category-mismatch", field="category", reason="is 'greedy' but the id starts with 'filters'",
      category='"greedy"'),
    H("filters/duplicate-batch-names", '[[batches]]\nname = "a"\nrows = [{ logits = [1.0] }]\n'
      '[[batches]]\nname = "a"\nrows = [{ logits = [1.0] }]\n', "batches", "duplicate batch names ['a', 'a']",
      features="[]"),
    H("beam/duplicate-request-ids", SCEN.format(extra="") + '[[scenario.requests]]\nid = "a"\nslot = 1\n',
      "scenario.requests[1].id", "'a' is also the id of scenario.requests[0]", check="scenario",
      features='["temperature", "max_new_tokens"]'),
    # -- files that are not what they seem
    Hostile("filters/link-to-good", _symlink("good.toml"), "id", "is 'filters/good' but the file's path says "
            "'filters/link-to-good'"),
    Hostile("filters/dangling-link", _symlink("nowhere.toml"), "<file>",
            "a symbolic link to 'nowhere.toml', which does not exist"),
    Hostile("filters/link-loop", _loop, "<file>", "cannot read: Too many levels of symbolic links"),
    Hostile("filters/fifo", _fifo, "<file>", "not a regular file (a FIFO)"),
    Hostile("filters/empty", _t(""), "<file>", "the file is empty"),
    Hostile("filters/blank", _t(" \n\t\n"), "<file>", "the file is empty"),
    Hostile("filters/binary", _b(bytes(range(255, -1, -1)) * 4), "<file>", "not UTF-8 text (byte 0: b'\\xff')"),
    Hostile("filters/nul-byte", _b(b"schema = 1\x00\n"), "<toml>", "syntax error"),
    Hostile("filters/bom", _b(b"\xef\xbb\xbf" + text("filters/bom").encode()), "<file>",
            "starts with a UTF-8 byte-order mark"),
    # -- scenarios
    H("beam/model-kind-unknown", '[scenario]\nmodel = { kind = "oracle" }\n[[scenario.requests]]\nid = "a"\n'
      'slot = 0\n', "scenario.model.kind", "must be one of ['table', 'context', 'toy']", check="scenario",
      features="[]"),
    H("beam/toy-vocab-float", '[scenario]\nmodel = { kind = "toy", vocab = 16.0, seed = 0 }\n[[scenario.requests]]\n'
      'id = "a"\nslot = 0\n', "scenario.model.vocab", "must be integer", check="scenario", features="[]"),
    H("beam/toy-seed-inf", '[scenario]\nmodel = { kind = "toy", vocab = 16, seed = inf }\n[[scenario.requests]]\n'
      'id = "a"\nslot = 0\n', "scenario.model.seed", "must be integer", check="scenario", features="[]"),
    H("beam/context-after-float", '[scenario]\nmodel = { kind = "context", default = [0.0, 1.0], rules = '
      '[{ after = [0.5], logits = [1.0, 0.0] }] }\n[[scenario.requests]]\nid = "a"\nslot = 0\n',
      "scenario.model.rules[0].after[0]", "must be integer", check="scenario", features="[]"),
    H("beam/table-ragged", '[scenario]\nmodel = { kind = "table", steps = [[0.0, 1.0], [1.0]] }\n'
      '[[scenario.requests]]\nid = "a"\nslot = 0\n', "scenario.model.steps[1]", "has 1 values, steps[0] has 2",
      check="scenario", features="[]"),
    H("beam/model-unknown-field", '[scenario]\nmodel = { kind = "table", steps = [[0.0]], colour = "red" }\n'
      '[[scenario.requests]]\nid = "a"\nslot = 0\n', "scenario.model", "unknown field(s) {'colour'}",
      check="scenario", features="[]"),
    H("beam/schedule-unknown-request", SCEN.format(extra='schedule = [["a"], ["b"]]\n'), "scenario.schedule[1]",
      "names unknown request 'b'", check="scenario", features='["temperature", "max_new_tokens"]'),
    H("beam/relation-unknown-request", SCEN.format(extra="") + '[[scenario.relations]]\nkind = "same_tokens"\n'
      'a = "a"\nb = "zz"\n', "scenario.relations[0].b", "names unknown request 'zz'", check="scenario",
      features='["temperature", "max_new_tokens"]'),
    H("beam/request-without-slot", '[scenario]\nmodel = { kind = "table", steps = [[0.0]] }\n'
      '[[scenario.requests]]\nid = "a"\n', "scenario.requests[0]", "must contain ['slot'] properties",
      check="scenario", features="[]"),
    H("beam/max-steps-float", SCEN.format(extra="max_steps = 10.0\n"), "scenario.max_steps", "must be integer",
      check="scenario", features='["temperature", "max_new_tokens"]'),
    H("beam/slot-nan", '[scenario]\nmodel = { kind = "table", steps = [[0.0]] }\n[[scenario.requests]]\n'
      'id = "a"\nslot = nan\n', "scenario.requests[0].slot", "must be integer", check="scenario", features="[]"),
    H("speculative/d2t-nan", '[scenario]\nmodel = { kind = "table", steps = [[0.0, 1.0]] }\n'
      '[[scenario.requests]]\nid = "a"\nslot = 0\nd2t = [nan]\n', "scenario.requests[0].d2t[0]", "must be integer",
      check="scenario", features="[]"),
    H("beam/scenario-with-rows", SCEN.format(extra="") + ROW, "rows",
      "not allowed when check = 'scenario'", check="scenario", features='["temperature", "max_new_tokens"]'),
]

#: Good cases written beside the hostile ones: each must still ``pass`` on the reference.
GOOD = {
    "filters/good": text("filters/good"),
    "greedy/also-good": text("greedy/also-good", "[[rows]]\nlogits = [3.0, 1.0, 2.0]\ntemperature = 0.0\n"
                                                 "[rows.expect]\ntoken = 0\n"),
}


def write_corpus(root: Path) -> list:
    """Write :data:`GOOD` and every :data:`HOSTILE` file under ``root``; return the hostile entries written
    (the FIFO is left out where ``os.mkfifo`` does not exist)."""
    for cid, body in GOOD.items():
        p = root / f"{cid}.toml"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body, encoding="utf-8")
    made = []
    for h in HOSTILE:
        if h.write is _fifo and not hasattr(os, "mkfifo"):
            continue
        h.make(root)
        made.append(h)
    return made


def run_end_to_end(root: Path, out: Path) -> dict:
    """``python -m harness run --impl reference --cases <root> --out <out>`` on a corpus written by
    :func:`write_corpus` (``SAMPCHECK_CASES=<root>``), in a fresh process.

    Returns
    -------
    dict
        ``rc``, ``stderr``, ``doc`` (results.json, or None), ``located`` (hostile files whose result is a
        load ``error`` with file, field and reason, the field and reason those of :data:`HOSTILE`),
        ``hostile`` (how many were written), ``unlocated`` (their case ids), ``good_pass``.
    """
    made = write_corpus(root)
    env = {**os.environ, "SAMPCHECK_CASES": str(root)}
    proc = subprocess.run([sys.executable, "-m", "harness", "run", "--impl", "reference", "--cases", str(root),
                           "--out", str(out), "--no-progress"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    results = out / "results.json"
    doc = json.loads(results.read_text()) if results.exists() else None
    by_case = {r["case"]: r for r in (doc or {}).get("results", [])}
    located, unlocated = 0, []
    for h in made:
        r = by_case.get(h.cid)
        d = (r or {}).get("details") or {}
        if (r and r["status"] == "error" and r["check"] == "load" and d.get("file") == str(h.path(root))
                and d.get("field") == h.field and h.reason in d.get("reason", "")):
            located += 1
        else:
            unlocated.append(h.cid)
    good = sum(1 for cid in GOOD if by_case.get(cid, {}).get("status") == "pass")
    return {"rc": proc.returncode, "stderr": proc.stderr, "doc": doc, "located": located, "hostile": len(made),
            "unlocated": unlocated, "good_pass": good}


if __name__ == "__main__":
    with tempfile.TemporaryDirectory(prefix="sampcheck-hostile-") as tmp:
        res = run_end_to_end(Path(tmp) / "cases", Path(tmp) / "out")
    print(f"hostile files: {res['hostile']}, located errors: {res['located']} "
          f"({100 * res['located'] / max(res['hostile'], 1):.0f}%), good cases passing: {res['good_pass']} of "
          f"{len(GOOD)}, exit status {res['rc']} (1: errors reported), aborted: {res['doc'] is None}")
    for cid in res["unlocated"]:
        print(f"  not located: {cid}")
    sys.exit(0 if res["located"] == res["hostile"] and res["doc"] is not None and res["good_pass"] == len(GOOD)
             and res["rc"] == 1 else 1)
