"""What is kept: golden files of the reference's predictions (:mod:`.golden`) and run records (:mod:`.records`).

May import: :mod:`harness.run`, :mod:`harness.report`, :mod:`harness.judge`,
:mod:`harness.corpus` and :mod:`impls`.
"""
