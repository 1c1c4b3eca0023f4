"""The reference sampler (pure PyTorch, full semantics, CPU or CUDA).

See :mod:`impls.reference.sampler` for the pipeline and
:mod:`impls.reference.philox` / :mod:`impls.reference.draw` for the canonical
draw of DESIGN.md decision 1:

* key: the 64 bits of the row's seed (uint64 view), ``k0`` low, ``k1`` high;
* token ``j``, offset ``o``: Philox4x32-10 with Triton's constants on counter
  ``(j // 4, 0, o & 0xFFFFFFFF, o >> 32)``, word ``j % 4``;
* uniform as Triton's ``uint_to_uniform_float`` (int32 view, ``~x`` if
  negative, times ``4.6566127342e-10`` in float32);
* Gumbel-max over the kept tokens:
  ``argmax_j (x_j - max) / T - log(-log u_j)``, ties → lowest id; greedy
  rows draw nothing.
"""

from functools import partial

from ..profiles import PROFILES, TRTLLM
from ..registry import Entry
from .impl import Reference
from .sampler import REFERENCE_VERSION, ReferenceSession, rewrite_logits

__all__ = ["Reference", "ReferenceSession", "rewrite_logits", "REFERENCE_VERSION", "IMPLEMENTATIONS"]

#: ``reference`` (the default profile) and ``reference-<profile>`` for every other profile: the
#: prediction for that engine (:mod:`impls.registry`).
IMPLEMENTATIONS = (Entry("reference", Reference),) + tuple(
    Entry(f"reference-{name}", partial(Reference, profile, name=f"reference-{name}"))
    for name, profile in PROFILES.items() if profile is not TRTLLM)
