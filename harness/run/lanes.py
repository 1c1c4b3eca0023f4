"""Lanes: one set of workers per visible GPU, so that a multi-GPU host judges several cases at once.

With ``--device cuda`` and isolated workers, :func:`visible_gpus` lists the GPUs this
process may use; with more than one, the runner starts one worker per implementation
**per GPU** (a *lane*), each worker started with ``CUDA_VISIBLE_DEVICES`` set to its one
GPU (so it sees it as ``cuda:0``), and the lanes take cases from one queue. Results do
not depend on the lane that judged them (a case's draws are seeded), so a run on four
GPUs equals the run on one.

``CUDA_VISIBLE_DEVICES`` chooses the GPUs, as for any CUDA program: ``CUDA_VISIBLE_DEVICES=0,1``
runs two lanes on GPUs 0 and 1, ``CUDA_VISIBLE_DEVICES=2`` one lane on GPU 2. An entry may
repeat: ``CUDA_VISIBLE_DEVICES=0,0`` runs two lanes that share GPU 0 (how the split is
tested on a one-GPU host).
"""

from __future__ import annotations

import os
from typing import Callable, Optional

__all__ = ["visible_gpus", "lane_envs"]


def visible_gpus(env: Optional[dict] = None, device_count: Optional[Callable[[], int]] = None) -> list:
    """The GPUs a run may use, as ``CUDA_VISIBLE_DEVICES`` entries (one per lane).

    Parameters
    ----------
    env : dict, optional
        The environment (default ``os.environ``).
    device_count : callable, optional
        ``() -> int``, the number of CUDA devices, asked only when ``CUDA_VISIBLE_DEVICES`` is
        not set (default ``torch.cuda.device_count``).

    Returns
    -------
    list of str
        The entries of ``CUDA_VISIBLE_DEVICES`` up to the first empty or negative one (where CUDA
        stops reading it), else ``"0"`` .. ``"n-1"``.

    Examples
    --------
    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "2,3"})
    ['2', '3']
    >>> visible_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,1"})
    ['0']
    >>> visible_gpus({}, device_count=lambda: 4)
    ['0', '1', '2', '3']
    """
    env = os.environ if env is None else env
    spec = env.get("CUDA_VISIBLE_DEVICES")
    if spec is not None:
        out = []
        for entry in spec.split(","):
            entry = entry.strip()
            if not entry or entry.startswith("-"):
                break
            out.append(entry)
        return out
    if device_count is None:
        import torch
        device_count = torch.cuda.device_count
    return [str(i) for i in range(int(device_count()))]


def lane_envs(gpus: Optional[list]) -> list:
    """The environment each lane's workers start with: ``[None]`` (one lane, the inherited
    environment) for fewer than two GPUs, else ``[{"CUDA_VISIBLE_DEVICES": g}, ...]``.

    >>> lane_envs(["0"]), lane_envs(["0", "1"])
    ([None], [{'CUDA_VISIBLE_DEVICES': '0'}, {'CUDA_VISIBLE_DEVICES': '1'}])
    """
    if not gpus or len(gpus) < 2:
        return [None]
    return [{"CUDA_VISIBLE_DEVICES": g} for g in gpus]
