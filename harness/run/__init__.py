"""Running: the main job (:mod:`.runner`), process isolation (:mod:`.isolation`), the journal and durable
writes (:mod:`.journal`), the output folder's lock (:mod:`.outlock`), shards (:mod:`.shard`) and their
merge (:mod:`.merge`), one lane of workers per GPU (:mod:`.lanes`).

May import: :mod:`harness.report`, :mod:`harness.judge`,
:mod:`harness.corpus` and :mod:`impls`.
"""
