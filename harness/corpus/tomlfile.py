"""Reading one case file within the limits (:mod:`.limits`): bytes, text, nesting, integers.

:func:`read_case_toml` is the only way the harness reads a case file (the loader, the
statistical budget, ``--cases tag:NAME``, ``case new``'s list of similar cases), so a
hostile file costs the same bounded work wherever it is read, and every problem is a
:class:`~.errors.CaseError` naming the file, the field (or ``<file>``/``<toml>``) and the
reason. In order:

1. the path must name a regular file (``os.stat``, following links: a dangling link, a
   link loop, a FIFO or a device is refused without being opened) of at most
   :data:`~.limits.MAX_FILE_BYTES` bytes, and at most that many are read;
2. the bytes must be UTF-8 without a byte-order mark, and not only white space;
3. a scan of the text (outside strings and comments) refuses more than
   :data:`~.limits.MAX_NESTING` open brackets, or dotted keys of more parts, before
   :mod:`tomllib` sees the text (its parser recurses per bracket and takes time quadratic
   in the parts of a dotted key);
4. :mod:`tomllib` parses it, with every TOML float that has an integral value (``1.0``,
   ``2e3``) read as a :class:`decimal.Decimal`: JSON Schema (draft 7) counts ``1.0`` as
   an integer, fastjsonschema counts a ``Decimal`` as a number but never as an integer, so
   a TOML float where the schema wants an integer is refused (:func:`plain` turns them back
   into floats once the schema has been checked);
5. the parsed document is walked (without recursion): nesting at most
   :data:`~.limits.MAX_NESTING` levels, every integer 64-bit (TOML 1.0).
"""

from __future__ import annotations

import math
import os
import re
import stat
import tomllib
from decimal import Decimal
from pathlib import Path

from .errors import CaseError
from .limits import INT_MAX, INT_MIN, MAX_FILE_BYTES, MAX_NESTING

__all__ = ["read_case_toml", "parse_case_text", "plain", "read_limited"]

_BOM = b"\xef\xbb\xbf"
#: Tokens of the nesting scan: strings and comments (skipped whole), brackets, dots and the
#: characters that end a dotted key.
_TOKEN = re.compile(r'''
    "{3}(?:[^"\\]|\\.|"(?!""))*"{3,5}      # multi-line basic string
  | '{3}(?:[^']|'(?!''))*'{3,5}            # multi-line literal string
  | "(?:[^"\\\n]|\\.)*"?                   # basic string (unterminated: to the end of the line)
  | '[^'\n]*'?                             # literal string
  | \#[^\n]*                               # comment
  | [\[\]{}.=,\n]
''', re.VERBOSE | re.DOTALL)


def read_limited(path: Path, shown: str) -> bytes:
    """The bytes of a case file, refused unless it is a regular file of at most ``MAX_FILE_BYTES``.

    Raises
    ------
    CaseError
        Field ``<file>``: no such file, a dangling link or a link loop, not a regular file
        (a FIFO is never opened), unreadable, or larger than the limit.
    """
    path = Path(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise CaseError(shown, "<file>", f"a symbolic link to {os.readlink(path)!r}, which does not exist") from None
        raise CaseError(shown, "<file>", "no such file") from None
    except OSError as e:
        raise CaseError(shown, "<file>", f"cannot read: {e.strerror or e}") from None
    if not stat.S_ISREG(st.st_mode):
        what = "a directory" if stat.S_ISDIR(st.st_mode) else "a FIFO" if stat.S_ISFIFO(st.st_mode) else \
            "a device" if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode) else "a socket or other special file"
        raise CaseError(shown, "<file>", f"not a regular file ({what})")
    too_big = f"larger than {MAX_FILE_BYTES} bytes, the limit of a case file (cases/README.md, 'Limits')"
    if st.st_size > MAX_FILE_BYTES:
        raise CaseError(shown, "<file>", f"{st.st_size} bytes: {too_big}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise CaseError(shown, "<file>", f"cannot read: {e.strerror or e}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise CaseError(shown, "<file>", too_big)
    return raw


def _scan_nesting(text: str, shown: str) -> None:
    """Refuse more than ``MAX_NESTING`` open brackets, or a dotted key of more parts, outside strings."""
    depth, dots, line = 0, 0, 1
    for m in _TOKEN.finditer(text):
        tok = m.group()
        c = tok[0]
        if c in "\"'":  # a string: a value, or one quoted part of a dotted key
            line += tok.count("\n")
            continue
        if c == "#":
            continue
        if c in "[{":
            depth += 1
            dots = 0
            if depth > MAX_NESTING:
                raise CaseError(shown, "<toml>", f"line {line}: brackets nested deeper than {MAX_NESTING} levels "
                                                 "(cases/README.md, 'Limits')")
        elif c in "]}":
            depth = max(depth - 1, 0)
            dots = 0
        elif c == ".":
            dots += 1
            if dots >= MAX_NESTING:
                raise CaseError(shown, "<toml>", f"line {line}: a dotted key of more than {MAX_NESTING} parts "
                                                 "(cases/README.md, 'Limits')")
        else:  # '=', ',' or a new line ends a key
            dots = 0
            if c == "\n":
                line += 1


def _parse_float(text: str):
    x = float(text)
    return Decimal(x) if math.isfinite(x) and x.is_integer() else x


def _at(where: str, key) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else str(key)


def _walk_limits(data: dict, shown: str) -> None:
    """Nesting and 64-bit integers of the parsed document, without recursion.

    The document itself is level 0; each array or table inside adds one, so that a value
    the text's scan admits (at most ``MAX_NESTING`` brackets) is admitted here too.
    """
    stack = [(data, "", 0)]
    while stack:
        value, where, depth = stack.pop()
        if isinstance(value, dict):
            items = value.items()
        elif isinstance(value, list):
            items = enumerate(value)
        else:
            if isinstance(value, int) and not isinstance(value, bool) and not INT_MIN <= value <= INT_MAX:
                hint = "; write a seed at or above 2**63 as a string ('0x...')" if where.endswith(".seed") else ""
                raise CaseError(shown, where or "<top>", f"integer {value} outside the 64-bit range TOML allows "
                                                        f"[-2**63, 2**63){hint}")
            continue
        if depth > MAX_NESTING:
            raise CaseError(shown, where or "<top>", f"nested deeper than {MAX_NESTING} levels "
                                                    "(cases/README.md, 'Limits')")
        stack.extend((v, _at(where, k), depth + 1) for k, v in items)


def parse_case_text(raw: bytes, shown: str) -> dict:
    """Steps 2 to 5 of the module docstring on the bytes of a case file.

    Returns
    -------
    dict
        The document; integral TOML floats are :class:`decimal.Decimal` (:func:`plain`).

    Raises
    ------
    CaseError
        ``<file>`` (byte-order mark, not UTF-8, empty), ``<toml>`` (nesting, syntax), or
        the dotted path of a value nested too deeply or an integer outside 64 bits.
    """
    if raw.startswith(_BOM):
        raise CaseError(shown, "<file>", "starts with a UTF-8 byte-order mark (EF BB BF); save it as UTF-8 "
                                         "without one")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CaseError(shown, "<file>", f"not UTF-8 text (byte {e.start}: {raw[e.start:e.start + 1]!r})") from None
    if not text.strip():
        raise CaseError(shown, "<file>", "the file is empty")
    _scan_nesting(text, shown)
    try:
        data = tomllib.loads(text, parse_float=_parse_float)
    except tomllib.TOMLDecodeError as e:
        raise CaseError(shown, "<toml>", f"syntax error: {e}") from None
    except RecursionError:  # not reached within the scan's limit; kept so that no file can abort a run
        raise CaseError(shown, "<toml>", f"nested deeper than {MAX_NESTING} levels") from None
    _walk_limits(data, shown)
    return data


def read_case_toml(path: Path, shown: str = None) -> dict:
    """Read and parse one case file within the limits (the module docstring's steps).

    Parameters
    ----------
    path : Path
    shown : str, optional
        The name messages give the file (default ``str(path)``).

    Returns
    -------
    dict
        The parsed document; integral TOML floats are :class:`decimal.Decimal` until
        :func:`plain` converts them.

    Raises
    ------
    CaseError
        Naming the file, the field (``<file>``, ``<toml>`` or a dotted path) and the reason.
    """
    shown = str(path) if shown is None else shown
    return parse_case_text(read_limited(path, shown), shown)


def plain(data):
    """``data`` with every :class:`decimal.Decimal` (an integral TOML float) turned back into a float, in place.

    Returns
    -------
    object
        ``data`` itself (or the float, when ``data`` is a Decimal).
    """
    if isinstance(data, Decimal):
        return float(data)
    stack = [data]
    while stack:
        value = stack.pop()
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        for k, v in items:
            if isinstance(v, Decimal):
                value[k] = float(v)
            elif isinstance(v, (dict, list)):
                stack.append(v)
    return data
