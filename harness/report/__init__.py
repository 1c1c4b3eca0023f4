"""Reports a person reads: the conformance page, record diffs, the latency page.

Owns: the HTML conformance report (:mod:`.html`, with :mod:`.statreport`
and :mod:`.charts` for statistical checks), ``sampcheck diff`` of two run
records (:mod:`.diff`), the latency report (:mod:`.latency`) and the
Jinja2 templates (``templates/``).

May import: :mod:`harness.judge`, :mod:`harness.corpus` and :mod:`impls`.
"""
