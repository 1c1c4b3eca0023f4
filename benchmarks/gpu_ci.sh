#!/usr/bin/env bash
# The project's GPU session on a machine without network (the H200 of GPU.md):
# carried wheels, then `tox -e gpu` itself, then the extras that produce committed files.
#   STAGES="tox"            tox -e gpu (TOX_ARGS after --, e.g. "--latency-quick")
#   STAGES="records"        fused (golden/engines/fused-<version>.json), FlashInfer, vLLM-GPU (vllm-triton, vllm-flashinfer, vllm-rejection: the source bundle
#                           .whl/vllm-src of impls/vllm_gpu) and sglang-flashinfer (the source bundle .whl/sglang-src
#                           of impls/sglang_gpu) run records for golden/engines/
#   STAGES="latency"        the full latency grid (same suite as tox -e gpu) and its report
#                           (LATENCY_ARGS: more pytest options; LATENCY_TIMEOUT: seconds before an interrupt)
#   STAGES="sweep"          the fused kernel's token-for-token sweeps, filters (SWEEP_DRAWS) and whole step (STEP_DRAWS),
#                           and compute-sanitizer
#   STAGES="host"           the fused kernel's GPU tests and the host cost of one call (benchmarks/host_cost.py)
#   STAGES="kernels"        GPU time of each fused launch at large batches (benchmarks/kernel_times.py)
#   STAGES="tune"           the fused sampler's tuning sets (TUNE_SETS) compiled in parallel, timed per launch
#                           (kernel_times), the fastest picked (benchmarks/tuning.py pick) and exported as
#                           SAMPCHECK_FUSED_TUNING for the stages after it (put "tune" first: "tune sweep latency")
#   STAGES="ab"             GPU time per launch (kernel_times; AB_ARGS: its options) of AB_BASE, a commit checked out
#                           in a worktree, then of this tree, one after the other on the same GPU: for a change the
#                           tuning options cannot switch (a decorator, a kernel body). On the device tool the copy of
#                           .git is the session's first commit with the later files over it: AB_BASE must be a commit
#                           that copy holds (its `git log`), not one made later in the session
#   STAGES="profile"        Nsight Compute on the fused p0.9 call at 1024 x 128256 (speed of light, occupancy,
#                           warp states, instruction mix, stall reasons), summarised in $OUT/ncu-fused-p09.json;
#                           PROFILE_MIX and PROFILE_POINT (batch:vocab) choose another call, PROFILE_KERNEL (a
#                           regex, e.g. _decide) profiles only the matching launch (the file names say which)
# Results go to $OUT (default ./out); several stages: STAGES="tox records".
# The source bundles are built on a machine with network and carried in .whl/ (folders, not
# installed): python -m impls.vllm_gpu.bundle --out .whl/vllm-src ..., python -m
# impls.sglang_gpu.bundle --out .whl/sglang-src --from <sglang wheel> --from <sglang-kernel wheel>
# (keep those two wheels out of .whl/: every .whl/*.whl is installed below).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT"
export FLASHINFER_CUDA_ARCH_LIST=9.0a MAX_JOBS=16 PYTHONUNBUFFERED=1
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target "$HOME/site" .whl/*.whl
  export PYTHONPATH=$HOME/site:${PYTHONPATH:-}
fi
if ls .whl/tox/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/toxsite .whl/tox/*.whl
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$OUT/device.txt"
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a "$OUT/device.txt"
status=0   # the worst exit status of the stages, returned at the end
for stage in ${STAGES:-tox}; do
  case $stage in
  tox)
    echo "== tox -e gpu"
    python3 -c "import sys; print('python3:', sys.executable, 'prefix', sys.prefix, 'base', sys.base_prefix)"
    # A python3 that is itself a virtualenv: its packages are not the "system site packages" of
    # the env tox makes, so hand them over through PYTHONPATH; and where even then pip (run by tox
    # with -I, which ignores PYTHONPATH) would not see torch, run the checkout without a build.
    VSITE=$(python3 -c "import site, sys; print(':'.join(site.getsitepackages()) if sys.prefix != sys.base_prefix else '')")
    OVERRIDE=""
    PYTHONPATH=/tmp/toxsite python3 -m virtualenv -q --system-site-packages /tmp/vprobe >/dev/null 2>&1
    if ! /tmp/vprobe/bin/python -I -c "import torch, setuptools" 2>/dev/null; then
      echo "torch or setuptools not visible to a virtualenv with system site packages: tox -e gpu runs without installing the package"
      OVERRIDE="-x testenv:gpu.skip_install=true"
    fi
    PYTHONPATH=$PYTHONPATH${VSITE:+:$VSITE}:/tmp/toxsite python3 -m tox -e gpu $OVERRIDE -- ${TOX_ARGS:-} 2>&1 | tee "$OUT/tox-gpu.log" | grep -v "^test_latency\[" | tail -60
    rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    echo "tox rc=$rc" | tee -a "$OUT/tox-gpu.log"
    cp reports/gpu/results.json "$OUT/gpu-results.json" 2>/dev/null
    cp reports/gpu/index.html "$OUT/gpu-report.html" 2>/dev/null
    cp reports/latency.json "$OUT/latency-quick.json" 2>/dev/null
    ;;
  records)
    echo "== run records (in parallel, OMP_NUM_THREADS=2 each: with torch's default thread count the seven"
    echo "   processes starve each other; on an H100 each took 40-60 s after FlashInfer's JIT build, 2026-12-05)"
    impls="fused flashinfer flashinfer-joint vllm-triton vllm-flashinfer vllm-rejection sglang-flashinfer"
    # build FlashInfer's sampling module once (JIT, about 130 s) before four processes need it
    python3 -c "import torch, flashinfer.sampling as s; p = torch.softmax(torch.randn(4, 1000, device='cuda'), -1); \
s.top_k_top_p_sampling_from_probs(p, 5, 0.9); s.min_p_sampling_from_probs(p, 0.1); s.top_k_renorm_probs(p, 5); \
s.top_p_renorm_probs(p, 0.5); torch.cuda.synchronize()" 2>&1 | tail -2
    for impl in $impls; do
      ( OMP_NUM_THREADS=2 python3 -m harness.cli record --impl $impl --device cuda --out "$OUT/$impl-record.json" \
          > "$OUT/$impl-record.log" 2>&1; echo $? > "$OUT/$impl-record.rc" ) &
    done
    wait
    for impl in $impls; do
      tail -2 "$OUT/$impl-record.log"
      rc=$(cat "$OUT/$impl-record.rc"); status=$(( status > rc ? status : rc ))
      rm -f "$OUT/$impl-record.rc"
    done
    ;;
  latency)
    echo "== full latency grid"
    # LATENCY_TIMEOUT (s): interrupt the grid then (SIGINT: pytest still writes the points it has)
    timeout -s INT "${LATENCY_TIMEOUT:-0}" python3 -m pytest -q -p no:cacheprovider benchmarks/test_latency.py \
      --benchmark-json "$OUT/benchmark.json" --latency-out "$OUT/latency.json" ${LATENCY_ARGS:-} 2>&1 \
      | grep -v "^test_latency\[" | tail -15
    rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    python3 -m harness.cli report --bench "$OUT/latency.json" --out "$OUT"
    rc=$?; status=$(( status > rc ? status : rc ))
    ;;
  host)
    echo "== fused kernel: GPU tests, host cost"
    python3 -m pytest -q -p no:cacheprovider tests/test_fused.py 2>&1 | tail -5
    rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    for shape in "1 32000" "256 128256"; do
      set -- $shape
      python3 -m benchmarks.host_cost --batch $1 --vocab $2 --out "$OUT/host-cost-b$1.json" 2>&1 | tail -30
      rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    done
    ;;
  kernels)
    echo "== fused kernel: GPU time per launch"
    python3 -m benchmarks.kernel_times --out "$OUT/kernel-times.json" 2>&1 | tail -20
    rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    ;;
  sweep)
    echo "== sweep"
    python3 -m benchmarks.gpu_sweep --draws "${SWEEP_DRAWS:-1000000}" --out "$OUT/gpu_sweep.json" 2>&1 | tail -3
    rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))   # 1 when a draw differs from the reference
    # the whole fused step (rewrites, logprobs) the same way: STEP_DRAWS, 0 to skip
    if [ "${STEP_DRAWS:-1000000}" != 0 ]; then
      python3 -m benchmarks.gpu_sweep --step --draws "${STEP_DRAWS:-1000000}" --out "$OUT/gpu_step_sweep.json" 2>&1 | tail -3
      rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    fi
    if command -v compute-sanitizer >/dev/null; then
      compute-sanitizer --tool memcheck python3 -m benchmarks.gpu_sweep --draws 2000 --per-config 500 --max-vocab 5000 \
        --out "$OUT/sanitized_sweep.json" 2>&1 | tail -4 | tee "$OUT/sanitizer.txt"
      rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    fi
    ;;
  tune)
    echo "== fused tuning sets"
    SETS=${TUNE_SETS:-"default stages=1,block=2048 stages=2 block=2048,stages=4 unit_t=False kmax=4096"}
    for c in $SETS; do python3 -m benchmarks.tuning warm "$c" > "$OUT/warm-$c.txt" 2>&1 & done
    wait
    python3 -m benchmarks.kernel_times --out "$OUT/kernel-times-tuning-sets.json" --points 256:128256 1024:128256 \
      --mixes greedy k50_p09 p09 minp005 --configs $SETS 2>&1 | tail -3
    rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    if best=$(python3 -m benchmarks.tuning pick "$OUT/kernel-times-tuning-sets.json"); then
      [ "$best" = default ] && best=""
      export SAMPCHECK_FUSED_TUNING="$best"
      echo "picked: '${best:-default}' (SAMPCHECK_FUSED_TUNING for the later stages)" | tee "$OUT/tuning-picked.txt"
    else
      status=$(( status > 2 ? status : 2 ))
      echo "no set picked (no timings): the later stages run the defaults" | tee "$OUT/tuning-picked.txt"
    fi
    ;;
  ab)
    echo "== A/B: GPU time per launch of ${AB_BASE:-?} (worktree) and of this tree"
    if [ -z "${AB_BASE:-}" ] || ! git worktree add -q --detach /tmp/ab-base "$AB_BASE"; then
      echo "ab: AB_BASE must name a commit this checkout's .git holds (got '${AB_BASE:-}')"
      status=$(( status > 2 ? status : 2 )); continue
    fi
    for side in base new; do
      d=$PWD; [ $side = base ] && d=/tmp/ab-base
      ( cd "$d" && PYTHONPATH=$d:${PYTHONPATH:-} python3 -m benchmarks.kernel_times --out "$OUT/kernel-times-ab-$side.json" \
          ${AB_ARGS:-} ) 2>&1 | grep -v -i warn | tail -20
      rc=${PIPESTATUS[0]}; status=$(( status > rc ? status : rc ))
    done
    git worktree remove --force /tmp/ab-base
    if [ ! -f "$OUT/kernel-times-ab-base.json" ] || [ ! -f "$OUT/kernel-times-ab-new.json" ]; then
      echo "ab: no comparison (a side wrote no timings; its output is above)"; continue
    fi
    python3 -m benchmarks.tuning compare "$OUT/kernel-times-ab-base.json" "$OUT/kernel-times-ab-new.json" \
      | tee "$OUT/ab.txt"
    ;;
  profile)
    # `benchmarks.tuning call` makes two calls: the second one's launches are profiled
    pmix=${PROFILE_MIX:-p09}; ppoint=${PROFILE_POINT:-1024:128256}
    tag=ncu-fused-$pmix; [ "$ppoint" != 1024:128256 ] && tag=$tag-${ppoint/:/x}
    sel="-s 5 -c 5"
    if [ -n "${PROFILE_KERNEL:-}" ]; then sel="-k regex:$PROFILE_KERNEL -s 1 -c 1"; tag=$tag-$PROFILE_KERNEL; fi
    echo "== Nsight Compute, fused $pmix at $ppoint${PROFILE_KERNEL:+, launches matching $PROFILE_KERNEL}"
    ncu --clock-control none --section SpeedOfLight --section Occupancy --section LaunchStats \
      --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section WarpStateStats \
      --section InstructionStats --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
      --csv --page details $sel python3 -m benchmarks.tuning call "$pmix" default --point "$ppoint" \
      > "$OUT/$tag.csv" 2> "$OUT/$tag.err"
    rc=$?; status=$(( status > rc ? status : rc ))
    python3 -m benchmarks.ncu_summary "$OUT/$tag.json" "${SAMPCHECK_FUSED_TUNING:-default}=$OUT/$tag.csv"
    rc=$?; status=$(( status > rc ? status : rc ))
    ;;
  *) echo "unknown stage $stage"; exit 2 ;;
  esac
done
exit $status
