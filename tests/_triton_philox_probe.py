"""Run ``tl.philox`` + ``tl.uint_to_uniform_float`` under TRITON_INTERPRET=1 and print JSON.

Executed in its own process by ``test_philox_triton.py`` (``TRITON_INTERPRET``
is read when a kernel is decorated, so it must be set before triton imports).
Input (argv[1]): JSON ``{"seeds": [...], "offsets": [...], "vocab": V}``.
Output: JSON list of rows of float32 uniforms (as hex bit patterns).
"""

import json
import os
import sys

assert os.environ.get("TRITON_INTERPRET") == "1"
import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def _uniforms(seed_ptr, off_ptr, out_ptr, V, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    seed = tl.load(seed_ptr + row)
    off = tl.load(off_ptr + row)
    o_lo = (off & 0xFFFFFFFF).to(tl.uint32)
    o_hi = ((off >> 32) & 0xFFFFFFFF).to(tl.uint32)
    j = tl.arange(0, BLOCK)
    g = (j // 4).to(tl.uint32)
    z = g * 0
    w0, w1, w2, w3 = tl.philox(seed, g, z, o_lo + z, o_hi + z)
    w = tl.where(j % 4 == 0, w0, tl.where(j % 4 == 1, w1, tl.where(j % 4 == 2, w2, w3)))
    u = tl.uint_to_uniform_float(w)
    tl.store(out_ptr + row * V + j, u, mask=j < V)


def main():
    spec = json.loads(sys.argv[1])
    seeds = torch.tensor(spec["seeds"], dtype=torch.int64)
    offs = torch.tensor(spec["offsets"], dtype=torch.int64)
    V = spec["vocab"]
    out = torch.full((len(seeds), V), -1.0, dtype=torch.float32)
    _uniforms[(len(seeds),)](seeds, offs, out, V, BLOCK=triton.next_power_of_2(V))
    print(json.dumps(out.view(torch.int32).tolist()))


if __name__ == "__main__":
    main()
