"""sampcheck: a conformance and benchmarking harness for LLM samplers.

Subpackages, in the order data flows (each imports only those before it):

1. :mod:`.corpus` — case files: loading, validation, findings, authoring;
2. :mod:`.judge` — one case on one implementation becomes a status;
3. :mod:`.report` — the HTML conformance report, record diffs, the latency report;
4. :mod:`.run` — the main job over the corpus, process isolation, the journal;
5. :mod:`.records` — golden files and run records;
6. :mod:`.cli` — the ``sampcheck`` command on top.
"""

__version__ = "0.1.0"
