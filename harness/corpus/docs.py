"""Files generated from the registries (:mod:`impls.params`, the implementations, the profiles) and the corpus:
``sampcheck docs`` writes them, a test checks them.

* ``cases/features.txt`` — the feature list, one name a line;
* in ``cases/README.md``, the blocks between ``<!-- sampcheck docs: NAME -->`` and
  ``<!-- /sampcheck docs -->``: ``row-fields`` (the fields of a single-step row),
  ``request-fields`` (the fields of a scenario request), ``error-kinds`` and
  ``processor-kinds`` (the custom logits processor kinds of :mod:`impls.processors`);
* where the corpus has the project's ``docs/`` beside it (:func:`docs_dir`: a checkout, not an
  installed wheel), ``docs/features.md`` and ``docs/coverage.md`` (:mod:`.tables`; the latter
  reads the mutation cache ``docs/coverage.json``, which ``sampcheck docs --refresh`` writes).

Nothing else in those files is touched. :func:`stale` lists the files whose text differs
from what the registries give (``sampcheck docs --check`` exits 1 on any).
"""

from __future__ import annotations

import re
from pathlib import Path

from typing import Optional

from impls import params, processors

from . import tables
from .paths import CASES_DIR

__all__ = ["generated", "stale", "write", "docs_dir", "BLOCKS"]

_BEGIN = "<!-- sampcheck docs: {name} -->"
_END = "<!-- /sampcheck docs -->"


def _errors() -> str:
    lines = ["| error kind | when | raised for |", "| --- | --- | --- |"]
    for kind, when in params.ERRORS.items():
        by = [f"`{p.name}`" for p in params.PARAMS if kind in p.errors]
        lines.append(f"| `{kind}` | {when} | {', '.join(by) or '– (the outcome of the rewrites)'} |")
    return "\n".join(lines) + "\n"


#: Block name -> a function giving its text.
BLOCKS = {
    "row-fields": lambda: params.markdown_table("step"),
    "request-fields": lambda: params.markdown_table("request"),
    "error-kinds": _errors,
    "processor-kinds": processors.kind_table,
}


def _features() -> str:
    return "# The fixed feature list (cases/README.md), generated from impls/params.py by 'sampcheck docs'.\n" + \
        "".join(f"{f}\n" for f in params.FEATURES)


def _fill(text: str, path: Path) -> str:
    for name, make in BLOCKS.items():
        begin = _BEGIN.format(name=name)
        pat = re.compile(re.escape(begin) + r"\n.*?" + re.escape(_END), re.S)
        if begin in text:
            text = pat.sub(lambda _: f"{begin}\n{make()}{_END}", text)
    return text


def docs_dir(root: Path = CASES_DIR) -> Optional[Path]:
    """The project's ``docs/`` beside the corpus ``root`` (it holds ``SEMANTICS.md``), or None (a wheel's copy
    of the corpus, a corpus elsewhere)."""
    d = Path(root).resolve().parent / "docs"
    return d if (d / "SEMANTICS.md").is_file() else None


def generated(root: Path = CASES_DIR) -> dict:
    """``{path: text}`` of every generated file as the registries and the corpus give it now.

    The tables of ``docs/`` (:mod:`.tables`) only where :func:`docs_dir` finds that folder.

    Raises
    ------
    ValueError
        When ``cases/README.md`` lacks a block of :data:`BLOCKS` (it was edited by hand).
    """
    root = Path(root)
    readme = root / "README.md"
    text = readme.read_text(encoding="utf-8")
    missing = [n for n in BLOCKS if _BEGIN.format(name=n) not in text]
    if missing:
        raise ValueError(f"{readme}: no generated block {', '.join(missing)} (restore its markers: "
                         f"{_BEGIN.format(name=missing[0])} ... {_END})")
    out = {root / "features.txt": _features(), readme: _fill(text, readme)}
    d = docs_dir(root)
    if d is not None:
        cases = tables.scan_cases(root)
        out[d / "features.md"] = tables.features_md(root, cases)
        out[d / "coverage.md"] = tables.coverage_md(root, d / "SEMANTICS.md", tables.read_cache(d / tables.CACHE_NAME),
                                                    cases)
    return out


def stale(root: Path = CASES_DIR) -> list:
    """The generated files whose text is not what the registries give (empty when current)."""
    return [p for p, text in generated(root).items() if not p.is_file() or p.read_text(encoding="utf-8") != text]


def write(root: Path = CASES_DIR) -> list:
    """Write every stale generated file; return their paths."""
    out = []
    for p, text in generated(root).items():
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
            out.append(p)
    return out
