"""Running: the main job (:mod:`.runner`) and process isolation with its journal (:mod:`.isolation`).

May import: :mod:`harness.report`, :mod:`harness.judge`,
:mod:`harness.corpus` and :mod:`impls`.
"""
