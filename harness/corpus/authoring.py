"""Case authoring: ``sampcheck case new CATEGORY NAME`` writes a commented template.

The template is a valid TOML file with every required field, a worked
single-row example and comments that say what to replace. Until its
``source`` is filled in it fails validation on purpose (the placeholder URL
is not a GitHub issue or pull request), so an unfinished case never runs
silently; once the ``TODO`` places are filled in it loads
(``sampcheck list cases``). Format: ``cases/README.md``.
"""

from __future__ import annotations

import re
from pathlib import Path

from impls import params

from .load import CASES_DIR, CATEGORIES

__all__ = ["CATEGORIES", "template", "new_case"]

_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")

_EXACT = '''\
# {case_id}: a case of the sampcheck corpus (format: cases/README.md).
# Fill in every place marked TODO, then:
#   sampcheck list cases                       # validates it (an error names the field)
#   sampcheck run --cases {case_id}            # runs it (add --impl transformers, ...)
#   sampcheck golden add {case_id} --accept    # its golden files (else 'golden check' says missing)
schema = 1
id = "{case_id}"          # must equal the path under cases/ without .toml
category = "{category}"   # must equal the first path component
# TODO one line: the rule checked, e.g. "logit_bias applies to token id 0".
description = "TODO: the rule this case checks"
# Every feature the rows use (cases/features.txt); the loader names any that is missing.
features = ["top_k", "logit_bias", "processed_logits"]
# TODO where the rule comes from: the bug report, or the engine source at a version:
#   {{ url = "https://github.com/<owner>/<repo>/issues/<N>" }}   (or /pull/<N>)
#   {{ repo = "owner/name", path = "src/file.py", version = "v1.2.3" }}
# The placeholder below is rejected by validation until you replace it.
source = [{{ url = "https://github.com/OWNER/REPO/issues/NUMBER" }}]
check = "{check}"
notes = """
TODO: the derivation by hand of every expected value below (the reader checks
it against this text, not against any implementation's output).
"""

# One [[rows]] table per row of the batch. Unset fields mean "not given by
# the user", which is not the same as a neutral value.
[[rows]]
logits = [1.0, 2.0, 3.0]    # TODO the logits of the report (a generator table works too)
logit_bias = [[0, 5.0]]     # TODO the parameters of the report
top_k = 1                   # greedy under the default profile; vllm, hf and flashinfer sample the one kept token;
                            # set temperature/top_p/min_p/seed for a sampling row
[rows.expect]
# Expected values for the default profile (trtllm), written by hand. Only
# what you list is checked; e.g. token, support, error, finish_reason, logprob.
token = 0                   # TODO: 1 + 5 = 6 > 3, so greedy picks token 0
rewritten_logits = [6.0, 2.0, 3.0]
'''

_STATISTICAL = '''\
# {case_id}: a statistical case of the sampcheck corpus (format: cases/README.md,
# method: docs/statistics.md). Fill in every place marked TODO, then:
#   sampcheck list cases                       # validates it
#   sampcheck run --cases {case_id}            # runs it
#   sampcheck golden add {case_id} --accept    # its golden files
schema = 1
id = "{case_id}"
category = "{category}"
description = "TODO: the distribution this case checks"
features = ["temperature", "top_k", "seed"]
# TODO: {{ url = "https://github.com/<owner>/<repo>/issues/<N>" }} or {{ repo, path, version }}
source = [{{ url = "https://github.com/OWNER/REPO/issues/NUMBER" }}]
check = "{check}"
draws = 100000              # the most draws per row (at least 1000)
notes = """
TODO: the predicted distribution, derived by hand.
"""

[[rows]]
logits = [0.0, 0.6931471805599453, 1.0986122886681098]   # TODO: ln([1, 2, 3]) -> p = [1, 2, 3] / 6
temperature = 1.0
top_k = 2                   # TODO: keeps {{1, 2}} -> p = [0, 0.4, 0.6]
seed = 0
[rows.expect]
support = [1, 2]
probs = [0.0, 0.4, 0.6]
'''


def template(category: str, name: str, check: str = "exact") -> str:
    """The text of a new case file.

    Parameters
    ----------
    category : str
        One of :data:`CATEGORIES`.
    name : str
        File name without ``.toml``: lowercase letters, digits and ``-``.
    check : {"exact", "statistical"}

    Returns
    -------
    str
        TOML with comments; fails validation only on its placeholder ``source``.

    Raises
    ------
    ValueError
        An unknown category or check, or a name that is not lowercase words
        joined by ``-``.
    """
    if category not in CATEGORIES:
        raise ValueError(f"unknown category {category!r}; one of: {', '.join(CATEGORIES)}")
    if not _NAME.match(name or ""):
        raise ValueError(f"name {name!r}: use lowercase letters, digits and '-' (e.g. 'logit-bias-token-zero')")
    if check not in ("exact", "statistical"):
        raise ValueError(f"check {check!r}: 'exact' or 'statistical' (see cases/README.md for the others)")
    body = (_EXACT if check == "exact" else _STATISTICAL).format(case_id=f"{category}/{name}", category=category,
                                                                check=check)
    # every field a row takes, from the parameter registry (impls/params.py), before the example row
    head, sep, rows = body.partition("\n[[rows]]\n")
    return head + "\n" + params.template_comment() + sep.lstrip("\n") + rows


def new_case(category: str, name: str, check: str = "exact", root: Path = None, force: bool = False) -> Path:
    """Write :func:`template` to ``<root>/<category>/<name>.toml``.

    Parameters
    ----------
    category, name, check : str
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
    text = template(category, name, check)
    path = Path(root or CASES_DIR) / category / f"{name}.toml"
    if path.exists() and not force:
        raise FileExistsError(f"{path} exists (pass --force to overwrite)")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path
