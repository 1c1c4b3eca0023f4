"""JUnit XML of a run (``sampcheck run --junit-xml FILE``), for CI dashboards.

One ``<testsuite>`` per implementation (``sampcheck.<impl>``), one ``<testcase>`` per case
on it (``classname`` the implementation, ``name`` the case id, ``time`` its seconds).
The status maps to what a dashboard shows:

============================  ==========================================================
sampcheck status              JUnit
============================  ==========================================================
``pass``                      passed
``known-diff``, ``known-bug`` passed, with ``<system-out>`` saying which and why
                              (``sampcheck run`` exits 0 on them too)
``fail``                      ``<failure type="fail">``
``error``                     ``<error type="error">``
``n/a``, ``skip``             ``<skipped>``, with the reason
============================  ==========================================================

A failure or an error carries the result's message and the command that reproduces it.
Written with the standard library's :mod:`xml.etree.ElementTree`; characters XML 1.0
cannot hold (control characters in an engine's message) are replaced by ``?``.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from .html import repro_command

__all__ = ["junit_xml", "JUNIT_STATUS"]

#: sampcheck status -> JUnit outcome (``None``: passed).
JUNIT_STATUS = {"pass": None, "known-diff": None, "known-bug": None, "fail": "failure", "error": "error",
                "n/a": "skipped", "skip": "skipped"}

_BAD_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _clean(text) -> str:
    return _BAD_XML.sub("?", str(text))


def junit_xml(doc: dict, command: str = "sampcheck") -> str:
    """The JUnit XML text of a results.json document.

    Parameters
    ----------
    doc : dict
        A results.json document (schema 1, docs/results.md).
    command : str
        How the reproducing commands call sampcheck.

    Returns
    -------
    str
        The XML document (UTF-8 declaration, indented).

    Examples
    --------
    >>> doc = {"run": {"started": "2026-12-03T10:00:00+00:00", "host": "h", "impls": {"x": {"device": "cpu"}}},
    ...        "results": [{"case": "a/b", "impl": "x", "status": "n/a", "check": "exact", "seconds": 0.5,
    ...                     "details": {"message": "no beam search"}}]}
    >>> print(junit_xml(doc), end="")
    <?xml version='1.0' encoding='utf-8'?>
    <testsuites name="sampcheck" tests="1" failures="0" errors="0" skipped="1" time="0.500">
      <testsuite name="sampcheck.x" tests="1" failures="0" errors="0" skipped="1" time="0.500" timestamp="2026-12-03T10:00:00+00:00" hostname="h">
        <testcase classname="x" name="a/b" time="0.500">
          <skipped message="n/a: no beam search" />
        </testcase>
      </testsuite>
    </testsuites>
    """
    run = doc.get("run") or {}
    impls = list(run.get("impls") or {})
    for r in doc["results"]:
        if r["impl"] not in impls:
            impls.append(r["impl"])
    top = ET.Element("testsuites", name="sampcheck")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0, "time": 0.0}
    for impl in impls:
        mine = [r for r in doc["results"] if r["impl"] == impl]
        suite = ET.SubElement(top, "testsuite", name=f"sampcheck.{impl}")
        counts = {"tests": len(mine), "failures": 0, "errors": 0, "skipped": 0,
                  "time": sum(float(r.get("seconds") or 0.0) for r in mine)}
        meta = (run.get("impls") or {}).get(impl) or {}
        for r in mine:
            tc = ET.SubElement(suite, "testcase", classname=impl, name=r["case"],
                               time=f"{float(r.get('seconds') or 0.0):.3f}")
            outcome = JUNIT_STATUS.get(r["status"], "error")
            message = _clean((r.get("details") or {}).get("message", ""))
            if outcome is None:
                if r["status"] != "pass":
                    ET.SubElement(tc, "system-out").text = f"{r['status']}: {message}"
                continue
            counts[{"failure": "failures", "error": "errors", "skipped": "skipped"}[outcome]] += 1
            if outcome == "skipped":
                ET.SubElement(tc, "skipped", message=f"{r['status']}: {message}")
                continue
            el = ET.SubElement(tc, outcome, message=message, type=r["status"])
            repro = repro_command(r["case"], meta.get("spec") or impl, meta.get("device", "cpu"), command,
                                  load_error=r.get("check") == "load")
            el.text = f"{message}\nreproduce: {repro}"
        for key in ("tests", "failures", "errors", "skipped"):
            suite.set(key, str(counts[key]))
            totals[key] += counts[key]
        suite.set("time", f"{counts['time']:.3f}")
        totals["time"] += counts["time"]
        if run.get("started"):
            suite.set("timestamp", str(run["started"]))
        if run.get("host"):
            suite.set("hostname", str(run["host"]))
    for key in ("tests", "failures", "errors", "skipped"):
        top.set(key, str(totals[key]))
    top.set("time", f"{totals['time']:.3f}")
    ET.indent(top)
    return ET.tostring(top, encoding="utf-8", xml_declaration=True).decode("utf-8") + "\n"
