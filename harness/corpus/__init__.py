"""The corpus: case files, their loader and validator, findings, and case authoring.

Owns: where ``cases/`` and ``golden/`` are (:mod:`.paths`), loading and
validating a case file (:mod:`.load`), registered findings
(:mod:`.findings`) and ``sampcheck case new`` (:mod:`.authoring`).

May import: :mod:`impls` (the protocol and the reference's scripted models)
and nothing else of :mod:`harness` (the lowest layer: corpus <- judge <-
report <- run <- records <- cli).
"""
