#!/usr/bin/env bash
# Everything the GPU machine must show, in one script (device tool: carry .whl, see README of
# the device tool; the wheels must include pyelftools, which the native audit imports and that
# machine lacks: `gpu-wheels pyelftools`; locally: run from the repo root on a machine with a GPU).
#   bash benchmarks/gpu_suite.sh tests [PATHS]  # GPU tests: examples correct + timed, every hack
#                                         # rejected, the tools end to end (default: all of tests/);
#                                         # then each kept verdict's call alone against in a batch
#   bash benchmarks/gpu_suite.sh bench    # build_latency, binding_overhead, timing_check, edit_to_verdict
#   bash benchmarks/gpu_suite.sh timing   # edit_to_verdict (--profile 25), timing_check (R nearest, pow2)
#   bash benchmarks/gpu_suite.sh evals    # `cuda-agent eval` table of every example (with torch.compile)
#   bash benchmarks/gpu_suite.sh batch [FLAGS]  # eval-only and scripted batches over the examples,
#                                         # tasks/hour (FLAGS go to batch_scaling.py: --copies, --only)
#   bash benchmarks/gpu_suite.sh cold [FLAGS]  # `cuda-agent eval` in a new process after an edit, baselines
#                                         # cached, and a statically rejected candidate
#   bash benchmarks/gpu_suite.sh memory KB [FLAGS]  # peak GPU memory of one eval, all processes, for
#                                         # KernelBench's four largest level-1 tasks (KB: its checkout;
#                                         # $MEMORY_TASKS picks others) and the examples; FLAGS go to
#                                         # cuda-agent eval
#   bash benchmarks/gpu_suite.sh mcp [FLAGS]  # one whole `cuda-agent mcp` session through the SDK's stdio
#                                         # client on examples/layernorm (FLAGS go to mcp_session.py)
#   bash benchmarks/gpu_suite.sh beside [FLAGS]  # baselines timed beside the candidate (the final
#                                         # re-verification) and profile of a cuBLAS candidate
#   bash benchmarks/gpu_suite.sh capture [ncu|sanitizer]  # real ncu CSV and compute-sanitizer
#                                         # reports, as test fixtures (default: both)
# Logs go to $OUT (or ./gpu-out); the short table is printed last.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  # byte-compiled here: the jailed judge and recorder cannot write __pycache__ and would compile on every start
  export PYTHONPATH=/tmp/site:$PWD
fi
python3 -m compileall -q cuda_agent >/dev/null  # likewise the project's modules only they import
# the jail's bubblewrap, carried as a .deb where the machine has none (apt-get download bubblewrap)
if ! command -v bwrap >/dev/null && ls .deb/bubblewrap_*.deb >/dev/null 2>&1; then
  dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export CUDA_AGENT_BWRAP=/tmp/bw/usr/bin/bwrap
fi
export PYTHONUNBUFFERED=1 CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-/tmp/cuda-agent-cache}
# no warm eval server left holding GPU memory into the next phase (cold_eval.py turns it on for itself)
export CUDA_AGENT_EVAL__SERVER_IDLE_S=${CUDA_AGENT_EVAL__SERVER_IDLE_S:-0}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
phase=${1:-tests}; shift || true
case "$phase" in
  tests)
    CUDA_AGENT_RESULTS_DIR=$OUT python3 -m pytest -q -p no:cacheprovider -m gpu "${@:-tests}" --durations=12 -rf \
        2>&1 | tee -a "$OUT/gpu-tests.log"
    # a call alone against a call in a batch, per verdict the tests kept (docs/harness.md, "A call alone")
    python3 benchmarks/single_calls.py "$OUT" 2>&1 | tee "$OUT/single_calls.log" ;;
  bench)
    python3 benchmarks/build_latency.py --reps 5 --inline-reps 2 2>&1 | tee "$OUT/build_latency.log"
    python3 benchmarks/binding_overhead.py 2>&1 | tee "$OUT/binding_overhead.log"
    python3 benchmarks/timing_check.py 2>&1 | tee "$OUT/timing_check.log"
    python3 benchmarks/edit_to_verdict.py --reps 5 2>&1 | tee "$OUT/edit_to_verdict.log" ;;
  timing)  # edit -> verdict first (with where the parent's host time goes), then repeatability
    python3 benchmarks/edit_to_verdict.py --reps 5 --profile 25 2>&1 | tee "$OUT/edit_to_verdict.log"
    python3 benchmarks/timing_check.py 2>&1 | tee "$OUT/timing_check.log"
    # both again with R a power of two (eval.timing.reps_rounding): does one R per task repeat closer?
    python3 benchmarks/timing_check.py --timing reps_rounding=pow2 2>&1 | tee "$OUT/timing_check_pow2.log"
    python3 benchmarks/edit_to_verdict.py --reps 5 --timing reps_rounding=pow2 2>&1 | tee "$OUT/edit_to_verdict_pow2.log" ;;
  batch)
    python3 benchmarks/batch_scaling.py --out "$OUT/batch-scaling" "$@" 2>&1 | tee "$OUT/batch_scaling.log" ;;
  cold)
    python3 benchmarks/cold_eval.py --json-out "$OUT/cold_eval.json" "$@" 2>&1 | tee "$OUT/cold_eval.log" ;;
  memory)
    kb=${1:?usage: gpu_suite.sh memory KERNELBENCH_CHECKOUT [EVAL FLAGS]}; shift || true
    # MEMORY_TASKS=36_RMSNorm_,40_LayerNorm: those level-1 tasks only (default: the four largest)
    python3 benchmarks/memory_peak.py --kernelbench "$kb" ${MEMORY_TASKS:+--tasks "$MEMORY_TASKS"} --examples \
        --extra "$*" --json-out "$OUT/memory.json" 2>&1 | tee "$OUT/memory.log" ;;
  mcp)
    python3 benchmarks/mcp_session.py --json-out "$OUT/mcp_session.json" "$@" 2>&1 | tee "$OUT/mcp_session.log" ;;
  beside)
    python3 benchmarks/baselines_beside.py --json-out "$OUT/baselines_beside.json" "$@" 2>&1 \
        | tee "$OUT/baselines_beside.log" ;;
  evals)
    for ex in examples/*/; do
      n=$(basename "$ex")
      python3 -m cuda_agent.cli eval "$ex/model.py" --candidate "$ex/candidate" 2>&1 | tee "$OUT/eval-$n.log"
      python3 -m cuda_agent.cli eval "$ex/model.py" --candidate "$ex/candidate" --json > "$OUT/eval-$n.json" 2>/dev/null
    done ;;
  capture)
    what=${1:-all}
    # build first, so neither tool wraps nvcc
    for c in examples/layernorm/candidate examples/gemm_bias_relu/candidate tests/gpu_faults/*/; do
      python3 -m cuda_agent.eval.single_run tests/adversarial/task.py "$c" --build-only || echo "build failed: $c"
    done
    # ncu on one forward of two examples (only the NVTX range the candidate's forward runs in)
    [ "$what" = sanitizer ] || for ex in layernorm gemm_bias_relu; do
      ncu --clock-control none --nvtx --nvtx-include "candidate_forward/" --csv --page details \
          --section SpeedOfLight --section Occupancy --section LaunchStats --section MemoryWorkloadAnalysis \
          --section WarpStateStats --section ComputeWorkloadAnalysis --section SpeedOfLight_RooflineChart \
          --print-details all --print-rule-details \
          python3 -m cuda_agent.eval.single_run examples/$ex/model.py examples/$ex/candidate > "$OUT/ncu-$ex.csv" 2> "$OUT/ncu-$ex.err"
      echo "ncu $ex: rc=$? $(wc -l < "$OUT/ncu-$ex.csv") lines"
    done
    # compute-sanitizer on the fault candidates (caching off so out-of-bounds writes are seen)
    [ "$what" = ncu ] || for t in memcheck:oob_write racecheck:shared_race initcheck:uninit_global memcheck:illegal_address; do
      tool=${t%%:*}; cand=${t##*:}
      PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 120 compute-sanitizer --tool "$tool" --print-limit 20 \
          python3 -m cuda_agent.eval.single_run tests/adversarial/task.py "tests/gpu_faults/$cand" --warmup 0 \
          > "$OUT/sanitizer-$tool-$cand.txt" 2>&1
      echo "sanitizer $tool $cand: rc=$? $(grep -c "=========" "$OUT/sanitizer-$tool-$cand.txt") report lines"
    done ;;
esac
