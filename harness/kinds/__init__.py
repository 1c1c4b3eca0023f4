"""The project's own check kinds, registered with :mod:`harness.corpus.kinds` when this package imports.

=================  ============================================  =================================
``check``          what is compared                              module
=================  ============================================  =================================
``exact``          each row's outputs with its profile's          :mod:`.exact`
                   prediction
``statistical``    each row's draws with its profile's           :mod:`.statistical`
                   distribution, at a stated false-alarm rate
``invariant``      relations between rows of different batches   :mod:`.invariant`
``scenario``       a whole multi-step decode, request by request  :mod:`.scenario`
=================  ============================================  =================================

The single-step kinds share :mod:`.rows`. Each kind ends in the one verdict ladder,
:func:`harness.judge.verdict.verdict`. A third-party kind subclasses
:class:`harness.corpus.kinds.CheckKind` and registers through the entry-point group
``sampcheck.check_kinds`` (``docs/adapters.md``).

May import: :mod:`harness.judge`, :mod:`harness.corpus` and :mod:`impls`.
"""

from harness.corpus.kinds import builtin

from .exact import ExactKind
from .invariant import InvariantKind
from .scenario import ScenarioKind
from .statistical import StatisticalKind

__all__ = ["EXACT", "STATISTICAL", "INVARIANT", "SCENARIO"]

EXACT = builtin(ExactKind())
STATISTICAL = builtin(StatisticalKind())
INVARIANT = builtin(InvariantKind())
SCENARIO = builtin(ScenarioKind())
