"""Dynamic temperature on the device: a row's temperature from the entropy of its rewritten logits.

llama.cpp's ``temp_ext`` sampler (``dynatemp_range > 0``) sets
``T' = lo + (hi - lo) * (H / log n) ** exponent``, ``lo = max(0, T - range)``, ``hi = T + range``,
``H`` the entropy of ``softmax(x)`` over the ``n`` tokens alive at the temperature stage (SEMANTICS
§1.5a). Under profile ``trtllm`` (``temperature_first``) that stage precedes the filters: ``n`` is
every finite rewritten logit, and the filters and the draw then use ``T'``. The fused step computes
``T'`` here, after its rewrite launch and before its filter launches, as one more per-row parameter
of the same launches: no launch of its own, no host synchronisation.
"""

from __future__ import annotations

import torch

__all__ = ["dynamic_temperature"]


def dynamic_temperature(y: torch.Tensor, temperature: torch.Tensor, dyn_range: torch.Tensor,
                        exponent: torch.Tensor) -> torch.Tensor:
    """Each row's temperature for the filters and the draw: ``T'`` where dynamic, else ``temperature``.

    Parameters
    ----------
    y : torch.Tensor
        ``(B, V)`` float32 rewritten logits (the rewrite launch's output).
    temperature : torch.Tensor
        ``(B,)`` admitted temperatures, float64 (the rows' own values) or float32 (0: a greedy or beam
        row, left as it is).
    dyn_range, exponent : torch.Tensor
        ``(B,)`` float64 ``dynatemp_range`` (0 where unset: off) and ``dynatemp_exponent`` (1 where unset).

    Returns
    -------
    torch.Tensor
        ``(B,)`` float64: ``T'`` on the rows with ``range > 0``,
        ``temperature > 0`` and at least two finite logits; ``temperature`` elsewhere (a NaN range is
        rejected at admission). ``T' <= 0`` (``H = 0`` with ``T <= range``) makes the row greedy, as the
        reference's argmax outcome. The kernel draws at its float32 rounding; :mod:`impls.fused.chain`
        decides its filters at the float64 value.

    Source: ggml-org/llama.cpp ``llama_sampler_temp_ext_apply`` (llama-cpp-python 0.3.36's bundle); the rule
    as SEMANTICS §1.5a states it. The entropy is summed over the whole row with ``-inf`` where a logit is
    not finite (``p log p`` counted 0 there, as for an underflowed ``p``).
    """
    y64 = y.to(torch.float64)
    finite = torch.isfinite(y64)
    n = finite.sum(-1)
    top = torch.where(finite, y64, float("-inf")).amax(-1, keepdim=True)
    z = torch.where(finite, y64 - torch.where(torch.isfinite(top), top, 0.0), float("-inf"))
    p = torch.softmax(z, dim=-1)
    H = -torch.where(p > 0, p * torch.log(p), torch.zeros_like(p)).sum(-1)
    T = temperature.to(torch.float64)
    r = dyn_range.to(device=y.device, dtype=torch.float64)
    e = exponent.to(device=y.device, dtype=torch.float64)
    lo = torch.clamp(T - r, min=0.0)
    t_dyn = lo + (T + r - lo) * (H / torch.log(n.to(torch.float64).clamp(min=2.0))) ** e
    on = (r > 0) & (T > 0) & (n > 1)
    return torch.where(on, torch.clamp(t_dyn, min=0.0), T)
