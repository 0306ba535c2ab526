#!/usr/bin/env bash
# Everything the GPU machine must show, in one script (device tool: carry .whl, see README of
# the device tool; locally: run from the repo root on a machine with a GPU).
#   bash benchmarks/gpu_suite.sh tests    # GPU tests: examples correct + timed, every hack rejected
#   bash benchmarks/gpu_suite.sh bench    # build_latency, binding_overhead, timing_check, edit_to_verdict
#   bash benchmarks/gpu_suite.sh evals    # `cuda-agent eval` table of every example (with torch.compile)
# Logs go to $OUT (or ./gpu-out); the short table is printed last.
set -uo pipefail
OUT=${OUT:-gpu-out}; mkdir -p "$OUT"
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
export PYTHONUNBUFFERED=1 CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-/tmp/cuda-agent-cache}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv,noheader
python3 -c "import torch; print('torch', torch.__version__, torch.version.cuda)"
case "${1:-tests}" in
  tests)
    CUDA_AGENT_RESULTS_DIR=$OUT python3 -m pytest -q -p no:cacheprovider -m gpu tests --durations=8 -rf 2>&1 | tee "$OUT/gpu-tests.log" ;;
  bench)
    python3 benchmarks/build_latency.py --reps 5 --inline-reps 2 2>&1 | tee "$OUT/build_latency.log"
    python3 benchmarks/binding_overhead.py 2>&1 | tee "$OUT/binding_overhead.log"
    python3 benchmarks/timing_check.py 2>&1 | tee "$OUT/timing_check.log"
    python3 benchmarks/edit_to_verdict.py --reps 5 2>&1 | tee "$OUT/edit_to_verdict.log" ;;
  evals)
    for ex in examples/*/; do
      n=$(basename "$ex")
      python3 -m cuda_agent.cli eval "$ex/model.py" --candidate "$ex/candidate" 2>&1 | tee "$OUT/eval-$n.log"
      python3 -m cuda_agent.cli eval "$ex/model.py" --candidate "$ex/candidate" --json > "$OUT/eval-$n.json" 2>/dev/null
    done ;;
esac
