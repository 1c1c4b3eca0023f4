"""llama.cpp's mirostat samplers (v1, v2) on the device, and their per-slot state ``mu``.

With mirostat 1 or 2, common's chain is the logit bias, the temperature and mirostat alone (SEMANTICS
§1.5a): the penalties, DRY, every other filter and the dynamic temperature are not applied (the step
leaves them out for such a row). One step, in float32 as llama.cpp computes it:

1. ``l = x / T`` (IEEE division; skipped at ``T == 1``), sorted descending (ties: lowest id first);
   ``p = expf(l - l_0) / S``;
2. the cut, a prefix of that order: v1 (``m = 100``) estimates the Zipf exponent ``s`` from the first
   ``min(m - 1, V - 1)`` pairs (``t_i = ln((i + 2) / (i + 1))``, ``b_i = ln(p_i / p_{i+1})``,
   ``s = sum t_i b_i / sum t_i^2``), ``eps = s - 1``, ``k = (eps 2^mu / (1 - V^-eps))^(1 / s)`` and keeps
   ``min(max(int(k), 1), V)`` tokens, ``int`` truncating and a NaN or out-of-int32 ``k`` giving
   ``INT_MIN`` (x86-64), so one token; v2 keeps the tokens before the first whose surprise ``-log2 p``
   is ``> mu``, at least one;
3. the canonical draw over the prefix at ``T`` (the kernel, its filters off: the prefix's logits,
   ``-inf`` elsewhere), under the profile's canonical RNG (§1.6);
4. ``mu <- mu - eta (-log2 p_token - tau)``, ``p_token`` the drawn token's probability over the prefix
   (the kernel's probabilities), in float32.

Where llama.cpp sums in float32 one term after another (``S``, v1's two sums), these sums are float64
rounded to float32: a cut can differ from llama.cpp's only when ``k`` or a surprise lies within a few
float32 ulps of its boundary. Sources: abetlen/llama-cpp-python ``vendor/llama.cpp/src/llama-sampler.cpp``
@v0.3.36 ``llama_sampler_mirostat_apply``, ``llama_sampler_mirostat_v2_apply``, their ``init``
(``mu = 2 * tau``), ``llama_sampler_softmax_impl``; ``vendor/llama.cpp/common/sampling.cpp`` @v0.3.36
``common_sampler_init`` (the chain; ``m = 100``).
"""

from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["MIROSTAT_M", "mirostat_keep", "MuSlots"]

#: common_sampler_init's ``m`` for mirostat v1.
MIROSTAT_M = 100
_INT32 = 2147483648.0


def _softmax_sorted(l32: torch.Tensor) -> torch.Tensor:
    # expf(l - l_0) over sorted float32 rows, divided by their sum (float64, rounded)
    e = torch.exp(l32 - l32[:, :1])
    return e / e.to(torch.float64).sum(-1, keepdim=True).to(torch.float32)


def mirostat_keep(y: torch.Tensor, temperature: torch.Tensor, version: torch.Tensor, mu: torch.Tensor,
                  m: int = MIROSTAT_M) -> torch.Tensor:
    """Steps 1-2 of the module docstring: each row's kept prefix.

    Parameters
    ----------
    y : torch.Tensor
        ``(R, V)`` float32 logits after the logit bias and bans (``-inf`` allowed; no NaN or ``+inf``,
        at least one finite per row).
    temperature : torch.Tensor
        ``(R,)`` float32, ``> 0``.
    version : torch.Tensor
        ``(R,)`` int64, 1 or 2.
    mu : torch.Tensor
        ``(R,)`` float32, each row's state.
    m : int
        v1's ``m``.

    Returns
    -------
    torch.Tensor
        ``(R, V)`` bool, the kept tokens by id.
    """
    R, V = y.shape
    T = temperature.to(torch.float32)[:, None]
    l32 = torch.where(T == 1.0, y, y / T)
    l32, order = torch.sort(l32, dim=-1, descending=True, stable=True)
    p = _softmax_sorted(l32)
    pos = torch.arange(V, device=y.device)
    # v1: the Zipf estimate over the first n pairs
    n = min(m - 1 if m >= 1 else V - 1, V - 1)
    i = torch.arange(n, device=y.device, dtype=torch.float32)
    t = torch.log((i + 2) / (i + 1))
    b = torch.log(p[:, :n] / p[:, 1:n + 1])
    s = ((t * b).to(torch.float64).sum(-1) / (t * t).to(torch.float64).sum()).to(torch.float32)
    eps = s - 1
    k = torch.pow(eps * torch.pow(torch.full_like(mu, 2.0), mu) / (1 - torch.pow(torch.full_like(s, float(V)), -eps)),
                  1 / s)
    ok = torch.isfinite(k) & (k >= -_INT32) & (k < _INT32)
    size1 = torch.where(ok, torch.trunc(torch.where(ok, k, 0.0)).to(torch.int64), -(1 << 31)).clamp(1, V)
    # v2: the prefix before the first surprise > mu
    over = -torch.log2(p) > mu[:, None]
    first = torch.where(over, pos, V).amin(-1)
    size2 = first.clamp_min(1)
    size = torch.where(version == 1, size1, size2)
    return torch.zeros_like(y, dtype=torch.bool).scatter_(1, order, pos < size[:, None])


class MuSlots:
    """Per-slot ``mu`` of the mirostat samplers, as device scalars (no host synchronisation).

    A slot's sampler belongs to its request: a new request id, seed, version, ``tau`` or ``eta`` starts
    again from ``2 * tau`` (float32), as a new ``llama_sampler`` would.
    """

    def __init__(self, device):
        self.device = torch.device(device)
        self._slots: dict = {}

    def current(self, slots: Sequence[int], keys: Sequence[tuple], taus: Sequence[float]) -> torch.Tensor:
        """``(R,)`` float32 ``mu`` of each row's slot for its request ``key`` (a new key: ``2 * tau``, ``taus`` floats)."""
        out = []
        for slot, key, tau in zip(slots, keys, taus):
            cur = self._slots.get(slot)
            if cur is None or cur[0] != key:
                cur = (key, (torch.tensor(tau, dtype=torch.float32, device=self.device) * 2))
                self._slots[slot] = cur
            out.append(cur[1])
        return torch.stack(out) if out else torch.zeros(0, dtype=torch.float32, device=self.device)

    def update(self, slots: Sequence[int], keys: Sequence[tuple], mu: torch.Tensor, tau: torch.Tensor,
               eta: torch.Tensor, p_token: torch.Tensor, drawn: torch.Tensor) -> None:
        """Step 4 for the rows that drew (``drawn``, ``(R,)`` bool: the kernel accepted the row).

        ``mu``, ``tau``, ``eta``, ``p_token``: ``(R,)`` float32 on the device.
        """
        new = mu - eta * (-torch.log2(p_token) - tau)
        new = torch.where(drawn, new, mu)
        for j, (slot, key) in enumerate(zip(slots, keys)):
            self._slots[slot] = (key, new[j])
