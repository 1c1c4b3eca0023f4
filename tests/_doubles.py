"""Test doubles and case-file writers shared by the harness, scenario and report tests."""

from __future__ import annotations

import textwrap
from pathlib import Path

import torch

from impls.profiles import TRTLLM
from impls.reference import Reference


#: The top of a single-step case file: ``id`` and ``cat`` come from the id, the rest from the writer.
CASE_HEADER = """schema = 1
id = "{id}"
description = "d"
category = "{cat}"
features = {features}
source = {source}
check = "{check}"
"""
#: A source every test case may cite (a public bug report address).
ONE_SOURCE = '{ url = "https://github.com/NVIDIA/TensorRT-LLM/issues/1" }'
#: A greedy row whose expectation holds on the reference: logits [1, 3, 2] -> token 1.
GREEDY_CASE = """
[[rows]]
logits = [1.0, 3.0, 2.0]
temperature = 0.0
[rows.expect]
token = 1
mode = "greedy"
"""


def write_case(root: Path, cid: str, header: str, body: str, **fields) -> Path:
    """Write ``root/<cid>.toml``: ``header`` formatted with ``id``, ``cat`` and ``fields``, then ``body`` dedented."""
    path = root / f"{cid}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(header.format(id=cid, cat=cid.split("/")[0], **fields) + textwrap.dedent(body))
    return path


class WrongArgmax(Reference):
    """The reference with one deliberate defect: greedy returns the lowest-scoring token."""

    def __init__(self, name="wrong"):
        super().__init__(TRTLLM, name=name)

    def version(self):
        return "1.2.0"

    def open_session(self, device="cpu"):
        inner = super().open_session(device)

        class S:
            def step(self, rows):
                out = inner.step(rows)
                for r, o in zip(rows, out):
                    if o.mode == "greedy":
                        o.token = int(torch.argmin(r.logits))
                return out
        return S()


class Crashes(Reference):
    """An implementation whose session cannot even open."""

    def __init__(self):
        super().__init__(TRTLLM, name="crashes")

    def open_session(self, device="cpu"):
        raise RuntimeError("engine exploded")


class KillsItsWorker(Reference):
    """The reference, except that on a case whose first logit is 7.5 its process kills itself
    (SIGKILL, as the kernel's out-of-memory killer would) the first ``times`` times, counted in
    the file ``flag`` (so the count survives the worker)."""

    MARK = 7.5

    def __init__(self, flag, times: int = 1):
        super().__init__(TRTLLM, name=f"dies-{times}x")
        self.flag, self.times = str(flag), times

    def open_session(self, device="cpu"):
        import os
        import signal
        inner = super().open_session(device)
        flag, times, mark = Path(self.flag), self.times, self.MARK

        class S:
            def step(self, rows):
                if any(float(r.logits[0]) == mark for r in rows):
                    died = len(flag.read_text().splitlines()) if flag.exists() else 0
                    if died < times:
                        with open(flag, "a") as fh:
                            fh.write("died\n")
                        os.kill(os.getpid(), signal.SIGKILL)
                return inner.step(rows)
        return S()
