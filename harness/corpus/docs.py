"""Files generated from the parameter registry (:mod:`impls.params`): ``sampcheck docs`` writes them, a test checks them.

* ``cases/features.txt`` — the feature list, one name a line;
* in ``cases/README.md``, the blocks between ``<!-- sampcheck docs: NAME -->`` and
  ``<!-- /sampcheck docs -->``: ``row-fields`` (the fields of a single-step row),
  ``request-fields`` (the fields of a scenario request), ``error-kinds`` and
  ``processor-kinds`` (the custom logits processor kinds of :mod:`impls.processors`).

Nothing else in those files is touched. :func:`stale` lists the files whose text differs
from what the registry gives (``sampcheck docs --check`` exits 1 on any).
"""

from __future__ import annotations

import re
from pathlib import Path

from impls import params, processors

from .paths import CASES_DIR

__all__ = ["generated", "stale", "write", "BLOCKS"]

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


def generated(root: Path = CASES_DIR) -> dict:
    """``{path: text}`` of every generated file as the registry gives it now.

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
    return {root / "features.txt": _features(), readme: _fill(text, readme)}


def stale(root: Path = CASES_DIR) -> list:
    """The generated files whose text is not what the registry gives (empty when current)."""
    return [p for p, text in generated(root).items() if not p.is_file() or p.read_text(encoding="utf-8") != text]


def write(root: Path = CASES_DIR) -> list:
    """Write every stale generated file; return their paths."""
    out = []
    for p, text in generated(root).items():
        if not p.is_file() or p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
            out.append(p)
    return out
