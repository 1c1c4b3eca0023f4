"""Case authoring: ``sampcheck case new CATEGORY NAME`` writes a commented template.

The template is a TOML file with every required field, a worked single-row
example in comments and, where the author must write something, a value that
starts with ``TODO`` (:data:`TODO`): the description, the features (unless
given), the source, the notes, the row's logits and its expectation. The
loader (:func:`harness.corpus.load.load_case`) refuses a file holding any
such value with one error that names every one left (``description,
features[0], source[0], notes, rows[0].logits, rows[0].expect`` for an
untouched template), so an unfinished case never runs silently and its
author sees the whole list at once. :func:`similar_cases` lists the existing cases
that declare the most of the new case's features, to read before writing a
duplicate. Format: ``cases/README.md``.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path
from typing import Optional

from impls import params

from .errors import CaseError
from .load import CASES_DIR, CATEGORIES, discover
from .tomlfile import read_case_toml

__all__ = ["CATEGORIES", "TODO", "template", "new_case", "similar_cases"]

#: The prefix that marks a value of the template the author has not written yet (the loader,
#: :func:`harness.corpus.load.load_case`, refuses any string value that starts with it).
TODO = "TODO"

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")

_EXACT = '''\
# {case_id}: a case of the sampcheck corpus (format: cases/README.md).
# Replace every value that starts with "TODO": until none is left the loader
# refuses the file and names each one still there. Then:
#   sampcheck list cases                       # validates it (an error names the field)
#   sampcheck run --cases {case_id}            # runs it (add --impl transformers, ...)
#   sampcheck golden add {case_id} --accept    # its golden files (else 'golden check' says missing)
schema = 1
id = "{case_id}"          # must equal the path under cases/ without .toml
category = "{category}"   # must equal the first path component
description = "TODO: one line: the rule checked, e.g. logit_bias applies to token id 0"
# Every feature the rows use (cases/features.txt); the loader names any that is missing,
# and an implementation that cannot express a declared one reports the whole case n/a.
features = {features}
# Where the rule comes from: the bug report, or the engine source at a version:
#   {{ url = "https://github.com/<owner>/<repo>/issues/<N>" }}   (or /pull/<N>)
#   {{ repo = "owner/name", path = "src/file.py", version = "v1.2.3" }}
source = ["TODO: the bug report or the engine source, in one of the two forms above"]
check = "{check}"
notes = """
TODO: the derivation by hand of every expected value below (the reader checks
it against this text, not against any implementation's output).
"""

# One [[rows]] table per row of the batch. Unset fields mean "not given by
# the user", which is not the same as a neutral value.
[[rows]]
# A worked example to adapt (logit_bias on token 0: 1 + 5 = 6 > 3, so greedy picks token 0;
# features top_k, logit_bias, processed_logits):
#   logits = [1.0, 2.0, 3.0]
#   logit_bias = [[0, 5.0]]
#   top_k = 1      # greedy under the default profile; vllm, hf and flashinfer sample the one kept
#                  # token; set temperature/top_p/min_p/seed for a sampling row
#   expect = {{ token = 0, rewritten_logits = [6.0, 2.0, 3.0] }}
# The expectation is the default profile's (trtllm), written by hand; only the keys
# it lists are checked (token, support, error, finish_reason, logprob, ...).
logits = "TODO: the logits of the report: an array, or a generator table"
expect = "TODO: the expected outputs, derived by hand, e.g. {{ token = 0 }}"
'''

_STATISTICAL = '''\
# {case_id}: a statistical case of the sampcheck corpus (format: cases/README.md,
# method: docs/statistics.md). Replace every value that starts with "TODO": until
# none is left the loader refuses the file and names each one still there. Then:
#   sampcheck list cases                       # validates it
#   sampcheck run --cases {case_id}            # runs it
#   sampcheck golden add {case_id} --accept    # its golden files
schema = 1
id = "{case_id}"
category = "{category}"
description = "TODO: one line: the distribution this case checks"
features = {features}
# {{ url = "https://github.com/<owner>/<repo>/issues/<N>" }} or {{ repo = "owner/name", path = "...", version = "..." }}
source = ["TODO: the bug report or the engine source, in one of the two forms above"]
check = "{check}"
draws = 100000              # the most draws per row (at least 1000)
notes = """
TODO: the predicted distribution, derived by hand.
"""

[[rows]]
# A worked example to adapt (ln([1, 2, 3]) gives p = [1, 2, 3] / 6; top_k = 2 keeps {{1, 2}},
# so p = [0, 0.4, 0.6]; features temperature, top_k, seed):
#   logits = [0.0, 0.6931471805599453, 1.0986122886681098]
#   temperature = 1.0
#   top_k = 2
#   seed = 0
#   expect = {{ support = [1, 2], probs = [0.0, 0.4, 0.6] }}
logits = "TODO: the logits of the report: an array, or a generator table"
expect = "TODO: the predicted support and probabilities, derived by hand"
'''

_FEATURES_TODO = {"exact": "TODO: every feature the rows use, e.g. top_k, logit_bias, processed_logits",
                  "statistical": "TODO: every feature the rows use, e.g. temperature, top_k, seed"}


def _check_features(features) -> list:
    """``features`` without repeats, in the given order.

    Raises
    ------
    ValueError
        A name that is not in the fixed feature list (:data:`impls.params.FEATURES`,
        ``cases/features.txt``); the message suggests the closest names.
    """
    out = []
    for f in features:
        if f not in params.FEATURES:
            near = difflib.get_close_matches(f, list(params.FEATURES), n=3)
            hint = f" (did you mean {', '.join(repr(n) for n in near)}?)" if near else ""
            raise ValueError(f"unknown feature {f!r}{hint}; the features are listed in cases/features.txt")
        if f not in out:
            out.append(f)
    return out


def template(category: str, name: str, check: str = "exact", features: Optional[list] = None) -> str:
    """The text of a new case file.

    Parameters
    ----------
    category : str
        One of :data:`CATEGORIES`.
    name : str
        File name without ``.toml``: lowercase letters, digits and ``-``.
    check : {"exact", "statistical"}
    features : list of str, optional
        The case's features (:data:`impls.params.FEATURES`), written into its ``features``;
        when not given, ``features`` is a ``TODO`` placeholder.

    Returns
    -------
    str
        TOML with comments, in which every value the author must write starts with
        :data:`TODO` (the loader refuses it until none is left).

    Raises
    ------
    ValueError
        An unknown category, check or feature, or a name that is not lowercase words
        joined by ``-``.
    """
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; one of: {', '.join(CATEGORIES)}")
    if not _NAME.match(name or ""):
        raise ValueError(f"name {name!r}: use lowercase letters, digits and '-' (e.g. 'logit-bias-token-zero')")
    if check not in ("exact", "statistical"):
        raise ValueError(f"check {check!r}: 'exact' or 'statistical' (see cases/README.md for the others)")
    feats = _check_features(features or [])
    shown = "[" + ", ".join(f'"{f}"' for f in (feats or [_FEATURES_TODO[check]])) + "]"
    body = (_EXACT if check == "exact" else _STATISTICAL).format(case_id=f"{category}/{name}", category=category,
                                                                check=check, features=shown)
    # every field a row takes, from the parameter registry (impls/params.py), before the example row
    head, sep, rows = body.partition("\n[[rows]]\n")
    return head + "\n" + params.template_comment() + sep.lstrip("\n") + rows


def new_case(category: str, name: str, check: str = "exact", root: Path = None, force: bool = False,
             features: Optional[list] = None) -> Path:
    """Write :func:`template` to ``<root>/<category>/<name>.toml``.

    Parameters
    ----------
    category, name, check, features
        As for :func:`template`.
    root : Path, optional
        The corpus folder (default :data:`harness.corpus.load.CASES_DIR`).
    force : bool
        Overwrite an existing file.

    Returns
    -------
    Path
        The file written.

    Raises
    ------
    ValueError
        As for :func:`template`.
    FileExistsError
        The file exists and ``force`` is false.
    """
    text = template(category, name, check, features)
    path = Path(root or CASES_DIR) / category / f"{name}.toml"
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists (pass --force to overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def similar_cases(features, root: Path = None, limit: int = 5, exclude=()) -> list:
    """The existing cases whose declared ``features`` overlap most with ``features``.

    Parameters
    ----------
    features : iterable of str
        The new case's features.
    root : Path, optional
        The corpus folder (default :data:`harness.corpus.load.CASES_DIR`); every case file
        under it (:func:`harness.corpus.load.discover`) is read as TOML only, so a file that
        does not validate still counts; one that does not parse, or whose ``features`` is not
        a list, is left out.
    limit : int
        The most cases returned.
    exclude : iterable of str
        Ids to leave out (the new case itself), also from the counts below.

    Returns
    -------
    list of dict
        ``{"id", "description", "shared", "features"}`` per case sharing at least one
        feature: ``id`` the path under ``root`` without ``.toml``, ``shared`` the common
        features in the order of ``features``, ``features`` the case's own. Ordered by

        1. the number of shared features, most first;
        2. their rarity, ``sum(1 / n(f))`` over the shared features ``f``, where ``n(f)`` is
           the number of cases declaring ``f``, highest first (sharing ``logit_bias`` says
           more than sharing ``top_k``, which most cases declare);
        3. the Jaccard index ``shared / union``, highest first (fewer other features);
        4. the id.
    """
    want = list(dict.fromkeys(features))
    root = Path(root or CASES_DIR)
    skip = set(exclude)
    corpus = []
    for path in discover(root):
        cid = path.relative_to(root).with_suffix("").as_posix()
        if cid in skip:
            continue
        try:
            data = read_case_toml(path)  # within the limits of cases/README.md: a hostile file is skipped
        except CaseError:
            continue
        theirs = data.get("features")
        if isinstance(theirs, list):
            desc = data.get("description")
            corpus.append((cid, [f for f in dict.fromkeys(theirs) if isinstance(f, str)],
                           desc if isinstance(desc, str) else ""))
    count = {}
    for _, theirs, _ in corpus:
        for f in theirs:
            count[f] = count.get(f, 0) + 1
    found = []
    for cid, theirs, desc in corpus:
        shared = [f for f in want if f in theirs]
        if shared:
            rarity = sum(1 / count[f] for f in shared)
            jaccard = len(shared) / len(set(want) | set(theirs))
            found.append(((-len(shared), -rarity, -jaccard, cid),
                          {"id": cid, "description": desc, "shared": shared, "features": theirs}))
    found.sort(key=lambda t: t[0])
    return [entry for _, entry in found[:limit]]
