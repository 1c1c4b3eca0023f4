#!/usr/bin/env bash
# The fused sampler's whole step (impls/fused/step.py) on one CUDA GPU, in one call of under 9 minutes,
# self-checking: every stage prints PASS or FAIL into $OUT/summary.txt and the exit status is the worst.
# Each stage has a time limit (timeout), so the whole call ends within about 530 s (typically much less).
#   1. FlashInfer's JIT build of its sampling module, in the background from the start (about 130 s; MAX_JOBS=12
#      leaves CPUs to the checks)
#   2. the fused GPU tests: tests/test_fused.py and tests/test_fused_step.py (CUDA-graph replay included)
#   3. the token-for-token sweeps against the reference (benchmarks/gpu_sweep.py): the filters and draw
#      (fused_sample, SWEEP_DRAWS draws, default 10^6) and the whole step (--step: rewrites, draw, logprobs,
#      STEP_DRAWS draws, default 10^6)
#   4. compute-sanitizer memcheck on a small sweep of each kind (when compute-sanitizer is installed)
#   5. latency: the suite's quick grid for fused and flashinfer (benchmarks/test_latency.py), then the step's
#      own costs (benchmarks/fused_step_latency.py: fused_sample vs fused_step with rewrites, with logprobs)
# Run from the repository root:  OUT=/some/dir bash benchmarks/fused_gpu_check.sh
# Carried wheels (.whl/*.whl: FlashInfer, apache-tvm-ffi, ...) are installed as in benchmarks/run_gpu.sh.
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
T0=$(date +%s)
export FLASHINFER_CUDA_ARCH_LIST=${FLASHINFER_CUDA_ARCH_LIST:-9.0a} MAX_JOBS=${MAX_JOBS:-12} PYTHONUNBUFFERED=1
unset TRITON_INTERPRET
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/site" .whl/*.whl
  export PYTHONPATH=$HOME/site:${PYTHONPATH:-}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/device.txt"
: > "$OUT/summary.txt"
status=0
record() {  # record NAME RC [NOTE]: one summary line, and the worst exit status
  local name=$1 rc=$2 note=${3:-}
  local verdict=PASS; [ "$rc" -ne 0 ] && verdict="FAIL (rc=$rc)"
  printf '%-34s %-12s %5ss  %s\n' "$name" "$verdict" "$(( $(date +%s) - T0 ))" "$note" | tee -a "$OUT/summary.txt"
  status=$(( status > rc ? status : rc ))
}

# 1. FlashInfer's sampling module builds while the GPU checks run (it needs CPUs, they need the GPU)
timeout 240 python3 -c "import torch, flashinfer.sampling as s; p = torch.softmax(torch.randn(4, 1000, device='cuda'), -1); \
l = torch.randn(4, 1000, device='cuda'); k = torch.full((4,), 5, dtype=torch.int32, device='cuda'); \
q = torch.full((4,), 0.9, device='cuda'); s.top_k_top_p_sampling_from_logits(l, k, q); \
s.min_p_sampling_from_probs(p, q * 0.1); torch.cuda.synchronize(); print('flashinfer ready')" \
  > "$OUT/flashinfer-build.log" 2>&1 &
FI_PID=$!

# 2. GPU tests of the fused kernel and of its whole step
timeout 140 python3 -m pytest -q -p no:cacheprovider tests/test_fused.py tests/test_fused_step.py \
  > "$OUT/pytest.txt" 2>&1
rc=$?; record "gpu tests (fused, fused_step)" $rc "$(tail -1 "$OUT/pytest.txt")"

# 3. token-for-token sweeps against the reference
timeout 70 python3 -m benchmarks.gpu_sweep --draws "${SWEEP_DRAWS:-1000000}" --out "$OUT/gpu_sweep.json" \
  > "$OUT/gpu_sweep.log" 2>&1
rc=$?; record "sweep: filters + draw" $rc "$(tail -1 "$OUT/gpu_sweep.log")"
timeout 100 python3 -m benchmarks.gpu_sweep --step --draws "${STEP_DRAWS:-1000000}" --max-vocab 131072 \
  --out "$OUT/gpu_sweep_step.json" > "$OUT/gpu_sweep_step.log" 2>&1
rc=$?; record "sweep: whole step (--step)" $rc "$(tail -1 "$OUT/gpu_sweep_step.log")"

# 4. compute-sanitizer (memcheck) on small sweeps
if command -v compute-sanitizer >/dev/null; then
  timeout 50 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m benchmarks.gpu_sweep --step --draws 2000 \
    --per-config 250 --max-vocab 5000 --out "$OUT/sanitized_step_sweep.json" > "$OUT/sanitizer.txt" 2>&1
  rc=$?; record "compute-sanitizer: step sweep" $rc "$(grep -m1 'ERROR SUMMARY' "$OUT/sanitizer.txt")"
  timeout 30 compute-sanitizer --tool memcheck --error-exitcode 3 python3 -m benchmarks.gpu_sweep --draws 2000 \
    --per-config 500 --max-vocab 5000 --out "$OUT/sanitized_sweep.json" > "$OUT/sanitizer-filters.txt" 2>&1
  rc=$?; record "compute-sanitizer: filters sweep" $rc "$(grep -m1 'ERROR SUMMARY' "$OUT/sanitizer-filters.txt")"
else
  echo "compute-sanitizer not found" | tee "$OUT/sanitizer.txt"
  record "compute-sanitizer" 0 "not installed: skipped"
fi

# 5. latency: the step's own costs, then fused vs FlashInfer (after FlashInfer's build)
timeout 55 python3 -m benchmarks.fused_step_latency --out "$OUT/step-latency.json" > "$OUT/step-latency.txt" 2>&1
rc=$?; record "latency: fused_step vs fused_sample" $rc
wait $FI_PID
rc=$?; record "flashinfer build" $rc "$(tail -1 "$OUT/flashinfer-build.log")"
timeout 60 python3 -m pytest -q -p no:cacheprovider benchmarks/test_latency.py --latency-quick --latency-reps 20 \
  --latency-impls fused,flashinfer --benchmark-json "$OUT/benchmark.json" --latency-out "$OUT/latency.json" \
  > "$OUT/latency.txt" 2>&1
rc=$?; record "latency suite: fused vs flashinfer" $rc "$(tail -1 "$OUT/latency.txt")"

echo "== step latency (µs, median; CUDA-graph replay in parentheses)"
tail -6 "$OUT/step-latency.txt"
echo "== latency suite (quick grid)"
python3 - "$OUT/latency.json" <<'EOF' || true
import json, sys
rows = json.load(open(sys.argv[1])).get("rows", [])
pts = {}
for r in rows:
    pts.setdefault((r["batch"], r["vocab"], r["mix"]), {})[r["impl"]] = r["median_us"]
print(f"{'batch':>6} {'vocab':>7} {'mix':>8} {'fused':>10} {'flashinfer':>11} {'ratio':>6}")
for (b, v, m), d in sorted(pts.items()):
    f, fi = d.get("fused"), d.get("flashinfer")
    ratio = f"{f / fi:6.2f}" if f and fi else "     -"
    print(f"{b:>6} {v:>7} {m:>8} {f if f is not None else '-':>10} {fi if fi is not None else '-':>11} {ratio}")
EOF
echo "== summary ($(( $(date +%s) - T0 )) s)"
cat "$OUT/summary.txt"
exit $status
