"""The corpus: case files, their loader and validator, findings, and case authoring.

Owns: where ``cases/`` and ``golden/`` are (:mod:`.paths`), the limits a
case file must keep (:mod:`.limits`) and reading one within them
(:mod:`.tomlfile`), case ids (:mod:`.ids`), loading and validating a case
file (:mod:`.load`; its one error, :mod:`.errors`), the statistical budget of
the declared corpus (:mod:`.budget`), registered findings (:mod:`.findings`)
and ``sampcheck case new`` (:mod:`.authoring`).

May import: :mod:`impls` (the protocol and the reference's scripted models)
and nothing else of :mod:`harness` (the lowest layer: corpus <- judge <-
report <- run <- records <- cli).
"""
