"""llama.cpp's mirostat samplers (v1 and v2), float32 step for step (SEMANTICS §1.5a).

Source: ``src/llama-sampler.cpp`` of the llama.cpp that llama-cpp-python 0.3.36 bundles
(``llama_sampler_mirostat_apply``, ``llama_sampler_mirostat_v2_apply``, their ``init``
functions, ``llama_sampler_softmax_impl``, ``llama_sampler_top_k_impl``, ``llama_sample_dist``)
and ``common/sampling.cpp`` ``common_sampler_init`` (with mirostat 1 or 2 the chain is the logit
bias, ``llama_sampler_init_temp(temp)``, then the mirostat sampler, which draws the token itself:
no penalties, DRY, filters or ``dist``). In our words, one step with state ``mu`` (float32,
``2 * tau`` when the sampler is made):

1. the temperature stage divides every logit by ``T`` (float32); all ``V`` candidates stay in
   the array (``-inf`` ones too);
2. softmax with sort: the array sorted by logit, descending (ties: lowest id first here;
   llama.cpp's ``std::partial_sort`` leaves their order unspecified); ``p_i = expf(l_i - l_0)``
   in float32, their float32 running sum ``S``, then ``p_i /= S``;
3. the cut, a prefix of the sorted array:

   * v1 (``m = 100``, common's): over ``i < min(m - 1, V - 1)``, ``t_i = logf((i + 2) / (i + 1))``,
     ``b_i = logf(p_i / p_{i+1})``; ``s = sum(t_i b_i) / sum(t_i^2)`` (float32 sums);
     ``eps = s - 1``; ``k = powf(eps * powf(2, mu) / (1 - powf(V, -eps)), 1 / s)``; the kept
     prefix has ``min(max(int(k), 1), V)`` tokens, where ``int(k)`` truncates toward zero and a
     NaN or out-of-range ``k`` becomes ``INT_MIN`` (x86-64's ``cvttss2si``; the C++ conversion
     is undefined there), so the cut keeps one token;
   * v2: the prefix before the first token whose surprise ``-log2f(p_i)`` is ``> mu``; an empty
     prefix keeps the first token;

4. softmax again over the prefix (already sorted): the distribution drawn from;
5. the draw: ``std::discrete_distribution<int>`` over those float probabilities on the
   sampler's own ``std::mt19937`` (seeded with the request's seed). libstdc++ (GCC 12,
   ``bits/random.tcc``): fewer than two candidates give index 0 and read no random number;
   otherwise the weights become doubles, are divided by their double sum, accumulated
   (``std::partial_sum``) with the last forced to 1.0, and the index is the ``lower_bound`` of
   one ``generate_canonical<double, 53>`` value (two 32-bit outputs:
   :func:`.mt19937.uniform_double`);
6. the update: ``mu -= eta * (-log2f(p_idx) - tau)``, float32.

:func:`mirostat_step` does 1-4, :func:`pick` 5, :func:`update` 6. :class:`MuStates` keeps
``mu`` per slot, as the adapter keeps the sampler: a new request, seed or setting in a slot
starts again from ``2 * tau``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from dataclasses import dataclass
from typing import Optional

import numpy as np
import torch

__all__ = ["MIROSTAT_M", "MirostatStep", "mirostat_step", "cumulative", "pick", "update", "initial_mu", "int_of_float",
           "MuStates"]

#: common_sampler_init's ``m`` for mirostat v1 (common/sampling.cpp: ``..., 100)``).
MIROSTAT_M = 100

_F = np.float32


def _libm():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for name in ("expf", "logf", "log2f"):
            f = getattr(lib, name)
            f.restype, f.argtypes = ctypes.c_float, [ctypes.c_float]
        lib.powf.restype, lib.powf.argtypes = ctypes.c_float, [ctypes.c_float, ctypes.c_float]
        return lib
    except (OSError, AttributeError):   # no C maths library: numpy's float32 functions (may differ by an ulp)
        return None


_LIBM = _libm()


def _expf(v) -> np.float32:
    return _F(_LIBM.expf(float(v))) if _LIBM is not None else _F(np.exp(_F(v)))


def _logf(v) -> np.float32:
    return _F(_LIBM.logf(float(v))) if _LIBM is not None else _F(np.log(_F(v)))


def _log2f(v) -> np.float32:
    return _F(_LIBM.log2f(float(v))) if _LIBM is not None else _F(np.log2(_F(v)))


def _powf(a, b) -> np.float32:
    return _F(_LIBM.powf(float(a), float(b))) if _LIBM is not None else _F(np.power(_F(a), _F(b)))


def int_of_float(k) -> int:
    """``int(k)`` of a float as x86-64 computes it: truncation; NaN or outside int32 gives ``INT_MIN``."""
    k = float(k)
    if k != k or not -2147483648.0 <= k < 2147483648.0:
        return -(1 << 31)
    return int(k)


def initial_mu(tau: float) -> float:
    """``2.0f * tau`` in float32."""
    with np.errstate(all="ignore"):
        return float(_F(_F(2.0) * _F(tau)))


@dataclass
class MirostatStep:
    """One step of a mirostat sampler before its draw.

    Attributes
    ----------
    version : int
        1 or 2.
    ids : numpy.ndarray
        int64 ids of the kept prefix, in the sorted array's order.
    p : numpy.ndarray
        float32 probabilities of the prefix (the second softmax): the distribution drawn from.
    mu : float
        The state the cut used.
    tau, eta : float
    k : float or None
        v1's ``k`` (before ``int``), for the report; None for v2.
    s_hat : float or None
        v1's estimate of the Zipf exponent; None for v2.
    """

    version: int
    ids: np.ndarray
    p: np.ndarray
    mu: float
    tau: float
    eta: float
    k: Optional[float] = None
    s_hat: Optional[float] = None


def _softmax_sorted(lg: np.ndarray) -> np.ndarray:
    """``llama_sampler_softmax_impl`` on a sorted float32 array: expf(l - l_0), float32 running sum, divide."""
    top = lg[0]
    p = np.empty(len(lg), dtype=_F)
    s = _F(0.0)
    with np.errstate(all="ignore"):
        for i, v in enumerate(lg):
            e = _expf(_F(v - top))
            p[i] = e
            s = _F(s + e)
        return (p / s).astype(_F)


def mirostat_step(x: torch.Tensor, temperature: float, version: int, tau: float, eta: float,
                  mu: Optional[float] = None, m: int = MIROSTAT_M) -> MirostatStep:
    """Steps 1-4 of the module docstring for one row.

    Parameters
    ----------
    x : torch.Tensor
        ``(V,)`` logits after the logit bias (``-inf`` allowed, no NaN, no ``+inf``).
    temperature : float
        ``> 0``; 1.0 when the row sets none.
    version : int
        1 or 2.
    tau, eta : float
    mu : float, optional
        The slot's state; None: a new sampler (``2 * tau``).
    m : int
        v1's ``m``.

    Returns
    -------
    MirostatStep
    """
    V = int(x.shape[-1])
    mu = initial_mu(tau) if mu is None else float(mu)
    lg = x.detach().to(torch.float32).cpu().numpy().astype(_F)
    with np.errstate(all="ignore"):
        if temperature != 1.0:
            lg = (lg / _F(temperature)).astype(_F)
        # descending by logit, ties by lowest id (stable sort of the negated values)
        order = np.argsort(-lg.astype(np.float64), kind="stable")
        lg = lg[order]
        p = _softmax_sorted(lg)
        k = s_hat = None
        if version == 1:
            sum_tb, sum_tt = _F(0.0), _F(0.0)
            n = min((m - 1) % (1 << 64), V - 1)   # size_t(m - 1): m <= 0 wraps to every pair
            for i in range(n):
                t_i = _logf(_F(_F(i + 2) / _F(i + 1)))
                b_i = _logf(_F(p[i] / p[i + 1]))
                sum_tb = _F(sum_tb + _F(t_i * b_i))
                sum_tt = _F(sum_tt + _F(t_i * t_i))
            s = _F(sum_tb / sum_tt)
            e = _F(s - _F(1.0))
            num = _F(e * _powf(2.0, mu))
            den = _F(_F(1.0) - _powf(_F(V), _F(-e)))
            kf = _powf(_F(num / den), _F(_F(1.0) / s))
            k, s_hat = float(kf), float(s)
            size = min(max(int_of_float(kf), 1), V)
        elif version == 2:
            size = V
            for i in range(V):
                if _F(-_log2f(p[i])) > _F(mu):
                    size = i
                    break
            size = max(size, 1)
        else:
            raise ValueError(f"mirostat version {version!r}: 1 or 2")
        p2 = _softmax_sorted(lg[:size])
    return MirostatStep(version, order[:size].astype(np.int64), p2, mu, float(tau), float(eta), k, s_hat)


def cumulative(p: np.ndarray) -> np.ndarray:
    """libstdc++'s ``discrete_distribution`` table of weights ``p`` (two or more): float64 partial sums of the
    weights divided by their ``std::accumulate`` sum, the last set to 1.0."""
    w = p.astype(np.float64)
    total = 0.0
    for v in w:              # std::accumulate, in order (Python's sum() compensates: not used)
        total += float(v)
    cp = np.cumsum(w / total)   # std::partial_sum: sequential
    cp[-1] = 1.0
    return cp


def pick(p: np.ndarray, u: Optional[float]) -> int:
    """Step 5: the index ``std::discrete_distribution<int>`` returns for weights ``p`` and uniform ``u``.

    ``u`` is read only when there are two weights or more (``None`` allowed otherwise): the
    ``lower_bound`` of ``u`` in :func:`cumulative`.
    """
    if len(p) < 2:
        return 0
    return int(np.searchsorted(cumulative(p), u, side="left"))


def update(mu: float, tau: float, eta: float, p_selected: float) -> float:
    """Step 6: ``mu - eta * (-log2f(p) - tau)`` in float32."""
    with np.errstate(all="ignore"):
        e = _F(_F(-_log2f(_F(p_selected))) - _F(tau))
        return float(_F(_F(mu) - _F(_F(eta) * e)))


class MuStates:
    """Per-slot ``mu`` of the mirostat samplers (one request per slot, as :class:`.mt19937.Streams`)."""

    def __init__(self):
        self._slots: dict = {}

    def current(self, slot: int, key: tuple, tau: float) -> float:
        """The slot's ``mu`` for the request ``key`` (owner, seed, settings); a new key starts at ``2 * tau``."""
        cur = self._slots.get(slot)
        if cur is None or cur[0] != key:
            cur = (key, initial_mu(tau))
            self._slots[slot] = cur
        return cur[1]

    def set(self, slot: int, key: tuple, mu: float) -> None:
        """Store the slot's ``mu`` after a step."""
        self._slots[slot] = (key, float(mu))

