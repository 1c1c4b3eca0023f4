"""impls/fused/offline.py's loop finder and the benchmarks.sass_loops command (no GPU)."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# a cuobjdump-style listing: a loop 0x0010-0x0040 (4 instructions), a branch forward, a loop 0x0060-0x0060
LISTING = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;                /* 0x00000a0000017a02 */
        /*0010*/                   LDG.E.128 R4, desc[UR4][R2.64] ;     /* 0x000fe20000000000 */
        /*0020*/                   FSETP.NE.AND P0, PT, R4, -INF , PT ; /* 0x000fe20000000000 */
        /*0030*/              @!P0 FMNMX R8, R4, R8, !PT ;             /* 0x000fe20000000000 */
        /*0040*/              @P1 BRA 0x10 ;                            /* 0x000fe20000000000 */
        /*0050*/                   BRA 0x70 ;                           /* 0x000fe20000000000 */
        /*0060*/                   BRA 0x60 ;                           /* 0x000fe20000000000 */
        /*0070*/                   EXIT ;                               /* 0x000fe20000000000 */
"""


def test_loops_are_backward_branches_with_their_opcodes():
    off = pytest.importorskip("impls.fused.offline")
    found = off.loops(LISTING)
    assert [(lo, hi, dict(c)) for lo, hi, c in found] == [
        (0x10, 0x40, {"LDG": 1, "FSETP": 1, "FMNMX": 1, "BRA": 1}), (0x60, 0x60, {"BRA": 1})]


def test_an_unknown_kernel_is_refused_by_name():
    off = pytest.importorskip("impls.fused.offline")
    with pytest.raises(ValueError, match="unknown kernel '_nope'; known: _stats_kernel, _hist_kernel"):
        off.compile_kernel("_nope")


def test_sass_loops_refuses_bad_options_with_the_option_named():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    r = subprocess.run([sys.executable, "-m", "benchmarks.sass_loops", "--options", "nb=3"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "fused_sample option nb=3: must be a power of two >= 16" in r.stderr
    r = subprocess.run([sys.executable, "-m", "benchmarks.sass_loops", "--set", "EARLY"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "tuning entry 'EARLY': expected name=value" in r.stderr



def test_resources_show_a_register_cap_and_its_spills():
    """``benchmarks.sass_loops`` prints each kernel's registers and spills (``offline.resources``; Triton's offline
    sm_90 compile in a process without the interpreter, no GPU): the gather launch capped at 32 registers a thread
    (``gather_regs=32``) uses at most 32 and spills; with ptxas's choice (``gather_regs=0``) it uses more and spills
    nothing (56-74 with Triton 3.6 and 3.9). The tenth session found the decide launch's 226 this way."""
    pytest.importorskip("triton")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    got = {}
    for cap in (32, 0):
        r = subprocess.run([sys.executable, "-m", "benchmarks.sass_loops", "_gather_kernel", "--options",
                            f"gather_regs={cap}"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        m = re.search(r"_gather_kernel: \d+ loop\(s\); (\d+) registers a thread, (\d+) bytes of stack, (\d+) spill "
                      r"stores, (\d+) spill loads", r.stdout)
        assert r.returncode == 0 and m, (r.stdout, r.stderr)
        got[cap] = [int(g) for g in m.groups()]
    assert got[32][0] <= 32 and got[32][2] > 0 and got[32][3] > 0, got
    assert got[0][0] > 32 and got[0][2:] == [0, 0], got
