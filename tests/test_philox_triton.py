"""Pin the canonical RNG (DESIGN.md decision 1) to Triton's own ``tl.philox``.

The reference's uniforms must equal, bit for bit, what a Triton kernel gets
from ``tl.philox(seed, j // 4, 0, o_lo, o_hi)`` and ``uint_to_uniform_float``.
Triton runs under ``TRITON_INTERPRET=1`` in a child process.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from impls.reference.philox import philox4x32, seed_bits, uniforms

SEEDS = [0, 1, 7, 42, -1, -(1 << 63), (1 << 63) - 1, 0x0123456789ABCDEF, -0x5555555555555555]
OFFSETS = [0, 1, 3, (1 << 32) - 1, 1 << 32, (1 << 62), (1 << 62) + 5, (1 << 63) - 1, 123456789012]


def test_uniforms_equal_triton_philox_bit_for_bit():
    pytest.importorskip("triton", reason="triton is not installed (the tox env installs it)")
    n = len(SEEDS)
    seeds = SEEDS
    offsets = OFFSETS[:n]
    V = 37  # not a multiple of 4: exercises the last partial group
    env = dict(os.environ, TRITON_INTERPRET="1")
    probe = Path(__file__).with_name("_triton_philox_probe.py")
    proc = subprocess.run([sys.executable, str(probe), json.dumps({"seeds": seeds, "offsets": offsets, "vocab": V})],
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    theirs = torch.tensor(json.loads(proc.stdout), dtype=torch.int32)
    ours = uniforms(torch.tensor(seeds, dtype=torch.int64), torch.tensor(offsets, dtype=torch.int64), V)
    assert theirs.shape == ours.shape == (n, V)
    mismatch = (theirs != ours.view(torch.int32)).nonzero().tolist()
    assert mismatch == [], f"first mismatches (row, token): {mismatch[:5]}"
    assert float(ours.min()) >= 0.0 and float(ours.max()) < 1.0


@pytest.mark.parametrize("ctr,key,expected", [
    # Known-answer vectors of Random123 (kat_vectors, philox4x32 10 rounds),
    # which uses the same multipliers and Weyl constants as Triton.
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(ctr, key, expected):
    t = lambda v: torch.tensor([v], dtype=torch.int64)
    out = philox4x32(*(t(c) for c in ctr), t(key[0]), t(key[1]))
    assert tuple(int(w) for w in out) == expected


def test_uniform_conversion_rule():
    # Word 0 of seed 0 / offset 0 / group 0 is the KAT's 0x6627E8D5 (positive as int32):
    # u = float32(0x6627E8D5) * 4.6566127342e-10 in float32.
    u = uniforms(torch.tensor([0]), torch.tensor([0]), 1)
    x = torch.tensor(0x6627E8D5, dtype=torch.float32)
    assert u.view(torch.int32).item() == (x * torch.tensor(4.6566127342e-10, dtype=torch.float32)).view(torch.int32).item()
    # 0xE169C58D is negative as int32: ~x = 0x1E963A72.
    u2 = uniforms(torch.tensor([0]), torch.tensor([0]), 2)[0, 1]
    y = torch.tensor(0x1E963A72, dtype=torch.float32) * torch.tensor(4.6566127342e-10, dtype=torch.float32)
    assert u2.item() == y.item()


def test_seed_reinterpretation():
    assert seed_bits(-1) == (1 << 64) - 1
    assert seed_bits((1 << 64) - 1) == (1 << 64) - 1
    with pytest.raises(ValueError):
        seed_bits(1 << 64)
    with pytest.raises(ValueError):
        seed_bits(-(1 << 63) - 1)
    a = uniforms(torch.tensor([-1]), torch.tensor([5]), 8)
    b = uniforms(torch.tensor([(1 << 64) - 1 - (1 << 64)]), torch.tensor([5]), 8)
    assert torch.equal(a, b)

