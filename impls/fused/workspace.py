"""The outputs and per-row workspaces of one fused call, and how a row is split into parts."""

from __future__ import annotations

import torch

from .kernel import LAYOUT, SLOTS

__all__ = ["splits", "allocate", "workspace_bytes", "layout_key", "call_tensors"]


def splits(B: int, V: int, cfg: dict):
    """``(S, CH)``: programs per row and logits per program (a multiple of the block)."""
    nblk = max(1, -(-V // cfg["block"]))
    S = max(1, min(nblk, cfg["max_splits"], -(-cfg["programs"] // max(B, 1))))
    ch_blocks = -(-nblk // S)
    CH = ch_blocks * cfg["block"]
    S = max(1, -(-V // CH))
    return S, CH


def workspace_bytes(B: int, V: int, cfg: dict) -> int:
    """Bytes of the one workspace allocation of a call (:func:`allocate`; outputs and probabilities not counted).

    Per row: the records (``LAYOUT``), per part the partials and the two histograms (``nb`` and ``nbs``
    int32), the window, above-window and bracket lists (``kmax + kbig + kbr`` int64, 278,528 bytes at
    the GPU defaults: most of it): 279,616 bytes a row in all at ``B >= 512``. A batch of ``B >= 512`` rows has
    one part per row; smaller batches split rows into more parts (:func:`splits`), each adding its partials and
    histograms.
    """
    q_64, q_i, q_f, _ = _sizes(B, V, cfg)
    return 8 * (q_64 + q_i + q_f)


def layout_key(B: int, V: int, device, cfg: dict, want_probs: bool) -> tuple:
    """What the buffers of :func:`allocate` fit: ``(B, V, device, want_probs, S, CH, n_i, n_f, n_64)``.

    Arithmetic only (no tensor), so a call handed kept buffers checks them in a tuple comparison;
    ``device`` must carry its index (``cuda:0``), as a tensor's ``.device`` does.
    """
    _q64, _qi, _qf, (S, CH, n_i, n_f, n_64) = _sizes(B, V, cfg)
    return (B, V, torch.device(device), bool(want_probs), S, CH, n_i, n_f, n_64)


def _sizes(B: int, V: int, cfg: dict) -> tuple:
    S, CH = splits(B, V, cfg)
    L = LAYOUT
    n_i = B * (S * (L["PI"] + cfg["nb"] + cfg["nbs"]) + L["RI"] + L["CNT"])
    n_f = B * (S * L["PF"] + L["RF"])
    # the bracket lists (kbr each) follow every row's regions (kernel._brk)
    n_64 = B * (S * L["P64"] + L["R64"] + cfg["kmax"] + cfg["kbig"] + cfg.get("kbr", 0))
    # in int64 units, each region rounded up to 16 bytes
    q_64, q_i, q_f = -(-n_64 // 2) * 2, -(-n_i // 4) * 2, -(-n_f // 4) * 2
    return q_64, q_i, q_f, (S, CH, n_i, n_f, n_64)


def allocate(B: int, V: int, device, cfg: dict, want_probs: bool = False, empty=torch.empty) -> dict:
    """Outputs and per-row workspaces of one call (what :func:`fused_sample` hands the launches).

    The three workspaces are views of one int64 allocation, each starting at a 16-byte multiple
    (one allocation instead of three: each costs several µs of host time on a GPU,
    ``benchmarks/README.md``); the kernels only take their addresses.

    Parameters
    ----------
    B, V : int
        Batch and vocabulary (``B >= 1``).
    device : torch.device
    cfg : dict
        Tuning constants (:data:`impls.fused.ops.DEFAULTS` or :data:`~impls.fused.ops.INTERPRETER`, possibly changed).
    want_probs : bool
        Allocate the ``(B, V)`` float32 distribution; else ``probs`` is the float32 workspace,
        a placeholder the kernels never write through.
    empty : callable
        ``torch.empty`` (``torch.zeros`` where the content must be defined).

    Returns
    -------
    dict
        ``tokens`` ``(B,)`` int64, ``status`` and ``path`` ``(B,)`` int32,
        ``probs``, the workspaces ``wsi`` int32, ``wsf`` float32 and ``ws64``
        int64 (flat, ``B * n`` entries each, with ``n`` independent of ``V`` but for
        the number of parts ``S``), ``S``, ``CH`` (:func:`splits`), and ``key``: the
        :func:`layout_key` these buffers fit.
    """
    q_64, q_i, q_f, (S, CH, n_i, n_f, n_64) = _sizes(B, V, cfg)
    ws = empty((q_64 + q_i + q_f,), dtype=torch.int64, device=device)
    wsf = ws[q_64 + q_i:].view(torch.float32)[:n_f]
    return {
        "tokens": empty((B,), dtype=torch.int64, device=device),
        "status": empty((B,), dtype=torch.int32, device=device),
        "path": empty((B,), dtype=torch.int32, device=device),
        "probs": empty((B, V), dtype=torch.float32, device=device) if want_probs else wsf,
        "wsi": ws[q_64:q_64 + q_i].view(torch.int32)[:n_i],
        "wsf": wsf,
        "ws64": ws[:n_64],
        "S": S, "CH": CH, "key": layout_key(B, V, ws.device, cfg, want_probs),
    }


def call_tensors(logits, params: tuple, a: dict) -> tuple:
    """The tensors of one call in :data:`impls.fused.kernel.SLOTS` order, as the launches take them.

    Parameters
    ----------
    logits : torch.Tensor
        ``(B, V)`` logits.
    params : tuple of torch.Tensor
        The six ``(B,)`` parameters: temperature, top_k, top_p, min_p, seed, offset.
    a : dict
        :func:`allocate` of the call's shape: its outputs and workspaces follow.
    """
    return (logits,) + tuple(params) + tuple(a[s] for s in SLOTS[7:])
