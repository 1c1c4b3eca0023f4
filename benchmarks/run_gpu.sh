#!/usr/bin/env bash
# One GPU call: install the carried wheels, check, sweep, time. Results under $OUT (or ./out).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/site" .whl/*.whl && export PYTHONPATH=$HOME/site:${PYTHONPATH:-}
fi
export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
if [ "${SKIP_TESTS:-0}" != 1 ]; then
echo "== GPU tests of the fused kernel"
python3 -m pytest -q -x tests/test_fused.py -p no:cacheprovider 2>&1 | tail -5 | tee "$OUT/pytest.txt"
echo "== compute-sanitizer on a small batch"
if command -v compute-sanitizer >/dev/null; then
  compute-sanitizer --tool memcheck python3 -m benchmarks.gpu_sweep --draws 2000 --per-config 500 --max-vocab 5000 --out "$OUT/sanitized_sweep.json" 2>&1 | tail -4 | tee "$OUT/sanitizer.txt"
else
  echo "compute-sanitizer not found" | tee "$OUT/sanitizer.txt"
fi
fi
if [ "${SKIP_SWEEP:-0}" != 1 ]; then
echo "== sweep"
python3 -m benchmarks.gpu_sweep --draws "${SWEEP_DRAWS:-1000000}" --out "$OUT/gpu_sweep.json" 2>&1 | tail -3
fi
if [ "${SKIP_BENCH:-0}" != 1 ]; then
echo "== latency"
python3 -m benchmarks.sampling ${BENCH_ARGS:-} --out "$OUT/latency.json" 2>&1 | tee "$OUT/latency.txt" | tail -40
fi
