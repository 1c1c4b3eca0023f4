"""sampcheck: a conformance and benchmarking harness for LLM samplers.

Modules: :mod:`.cases` (case files), :mod:`.judge` (statuses),
:mod:`.compare` (row comparison), :mod:`.stats` (statistical checks),
:mod:`.golden` (golden files), :mod:`.runner` (the main job),
:mod:`.report` (HTML), :mod:`.cli` (the ``sampcheck`` command).
"""

__version__ = "0.1.0"
