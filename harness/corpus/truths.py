"""Per-profile truths: a case's hand-written expectations for profiles other than the default.

A row (or a scenario request) gives ``expect``, the truth under the default profile
(``trtllm``), and may give ``expect_by_profile``: a table from a profile name
(:data:`impls.profiles.PROFILES`) to that profile's whole truth, which **replaces**
``expect`` for it (no key is inherited: a token-dependent logprob would otherwise be
carried over to another token). The value ``"expect"`` says the default's truth holds
for that profile as well. A profile without an entry has no hand-written truth for the
row; its implementations are judged against its prediction alone.

The judge compares the prediction of the reference under each profile with that
profile's truth, as it compares the default profile's with ``expect``
(:mod:`harness.judge.verdict`, step 2): a contradiction makes ``reference-<profile>``
``fail`` and every engine with that profile ``error`` (its prediction cannot be trusted
on the case).
"""

from __future__ import annotations

from typing import Optional

__all__ = ["ASSERTION_KEYS", "LOGPROB_KEYS", "output_keys", "SAME", "TruthError", "by_profile_schema", "resolve", "truth_of", "default_profile_name", "profile_names"]

#: Keys of a hand-written expectation that assert rather than name an output (cases/README.md,
#: "Expectations"): ``any_of``, a list of alternative expectation tables of which one must
#: match (merged over the row's other keys: "token 1, or the error ``posinf_logits``");
#: ``finite_logprobs = true``, the row's returned ``logprob`` and ``processed_logprob`` are
#: finite and no top-logprob value is NaN or +inf (-inf is a masked token's). The second
#: holds under every profile, so it is checked on every implementation's outputs.
ASSERTION_KEYS = ("any_of", "finite_logprobs")
LOGPROB_KEYS = ("logprob", "processed_logprob", "top_logprobs")
#: The value of an ``expect_by_profile`` entry meaning "the default's ``expect`` holds here too".
SAME = "expect"


def output_keys(expect: dict) -> set:
    """The output keys a hand-written expectation reads: its own, those of its ``any_of``
    alternatives, and the logprob keys under ``finite_logprobs``."""
    keys = {k for k in expect if k not in ASSERTION_KEYS}
    for alt in expect.get("any_of") or []:
        keys |= set(alt)
    if expect.get("finite_logprobs"):
        keys |= set(LOGPROB_KEYS)
    return keys


def default_profile_name() -> str:
    """The default profile's name (``trtllm``), whose truth is ``expect``."""
    from impls.profiles import TRTLLM
    return TRTLLM.name


def profile_names() -> list:
    """The profiles an ``expect_by_profile`` table may name: every registered one but the default."""
    from impls.profiles import PROFILES
    return [n for n in PROFILES if n != default_profile_name()]


def by_profile_schema(expect_schema: dict) -> dict:
    """The JSON schema of an ``expect_by_profile`` table whose entries are ``expect_schema`` or ``"expect"``."""
    return {"type": "object", "additionalProperties": {"anyOf": [expect_schema, {"const": SAME}]}}


class TruthError(ValueError):
    """A bad ``expect_by_profile`` entry: ``field`` (dotted, from the row's location) and ``reason``.

    The loaders turn it into a :class:`harness.corpus.load.CaseError` of the case file.
    """

    def __init__(self, field_: str, reason: str):
        super().__init__(f"{field_}: {reason}")
        self.field = field_
        self.reason = reason


def resolve(by_profile: dict, expect: dict, where: str) -> dict:
    """Profile name -> truth (a dict), with ``"expect"`` entries replaced by ``expect``.

    Parameters
    ----------
    by_profile : dict
        The raw ``expect_by_profile`` table (already schema-checked).
    expect : dict
        The row's default truth.
    where : str
        The row's location (``rows[2]``, ``scenario.requests[0]``), for errors.

    Raises
    ------
    TruthError
        A name that is no registered profile (the message lists them), the default
        profile's name (its truth is ``expect``), or ``"expect"`` on a row without one.
    """
    out = {}
    for name, truth in by_profile.items():
        at = f"{where}.expect_by_profile.{name}"
        if name == default_profile_name():
            raise TruthError(at, f"{name!r} is the default profile: its truth is {where}.expect")
        if name not in profile_names():
            raise TruthError(at, f"unknown profile {name!r}; known: {', '.join(profile_names())}")
        if truth == SAME and not expect:
            raise TruthError(at, "is 'expect' but the row has no expect")
        out[name] = dict(expect) if truth == SAME else dict(truth)
    return out


def truth_of(expect: dict, by_profile: dict, profile_name: str) -> Optional[dict]:
    """The hand-written truth for ``profile_name``: ``expect`` for the default, else its entry or None."""
    if profile_name == default_profile_name():
        return expect
    return by_profile.get(profile_name)
