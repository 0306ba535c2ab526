#!/usr/bin/env bash
# On a GPU machine, from the repository root of a checkout of this branch (the device's working copy):
#   TESTS=tests/gpu/test_gpu_parent_clock.py bash benchmarks/run_branch_on_gpu.sh
# runs benchmarks/parent_clock_check.py over $CONFIGS (calibration:batch_ms:block GiB) and, with TESTS,
# those GPU tests; PROBE=1 first runs gpu_clock_probe.py with and without --same-region; EVALS=1 last
# compares `cuda-agent eval` of every example on main (where it was started) and here. BENCH_S=0 skips
# the bench. BRANCH_DIR: the checkout (default: here). Wheels come from $WHL_DIR (default .whl
# of where it was started: wheels of what that machine lacks, plus pyelftools), bubblewrap's .deb from
# $DEB_DIR (default .deb) where the machine has no bwrap. Logs go to $OUT (default /tmp/parent-clock-out).
set -uo pipefail
ROOT=$PWD
WHL_DIR=${WHL_DIR:-$ROOT/.whl}
DEB_DIR=${DEB_DIR:-$ROOT/.deb}
OUT=${OUT:-/tmp/parent-clock-out}
mkdir -p "$OUT"
cd "${BRANCH_DIR:-.}" || exit 1
if compgen -G "$WHL_DIR/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site "$WHL_DIR"/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 CUDA_AGENT_CACHE=/tmp/cuda-agent-cache CUDA_AGENT_EVAL__SERVER_IDLE_S=0
python3 -m compileall -q cuda_agent >/dev/null
command -v bwrap >/dev/null || { dpkg -x "$DEB_DIR"/bubblewrap_*.deb /tmp/bw && export CUDA_AGENT_BWRAP=/tmp/bw/usr/bin/bwrap; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
# on a GPU the batches are timed on the GPU's own timeline (clocked.Timeline): the calibration variants no longer
# apply, only the batch length and block size do. REFERENCE: eval-<example>.json of main's events-timed figures
# on the same kind of GPU (2026-12-06-h100-s15 holds an H100's)
if [ -n "${PROBE:-}" ]; then  # is the per-rep remainder each rep's fresh memory? (one region for every rep vs one each)
  for same in "" --same-region; do
    timeout 90 python3 benchmarks/gpu_clock_probe.py --batches 8 --cases ew1:67108864:4,ew1:16777216:16 $same \
      > "$OUT/probe$same.log" 2>&1
    echo "probe $same rc $?"
    grep -v "^\[" "$OUT/probe$same.log" | grep -v "^  File\|^    " | tail -6
  done
fi
CONFIGS=${CONFIGS:-noop:5:2,noop:20:8}
REFERENCE=${REFERENCE:-benchmarks/results/2026-12-06-h100-s15}
[ "${BENCH_S:-330}" = 0 ] || timeout "${BENCH_S:-330}" python3 benchmarks/parent_clock_check.py --repeat 2 --configs "$CONFIGS" --reference-dir "$REFERENCE" > "$OUT/pcc.log" 2>&1
echo "bench rc $?"
if [ -n "${TESTS:-}" ]; then
  # shellcheck disable=SC2086  # TESTS: one or more test paths
  timeout "${TESTS_S:-200}" python3 -m pytest -q -p no:cacheprovider -m gpu $TESTS -rf -x > "$OUT/tests.log" 2>&1
  echo "tests rc $?"
  tail -8 "$OUT/tests.log"
fi
grep -v "^ *$" "$OUT/pcc.log" | tail -32
if [ -n "${EVALS:-}" ]; then  # `cuda-agent eval` of every example, main (the starting folder) and this branch, own caches
  (cd "$ROOT" && CUDA_AGENT_CACHE=/tmp/cache-main OUT=$OUT/evals-main timeout 280 bash benchmarks/gpu_suite.sh evals \
    > "$OUT/evals-main.log" 2>&1)
  echo "main evals rc $?"
  CUDA_AGENT_CACHE=/tmp/cache-branch OUT=$OUT/evals-branch timeout 280 bash benchmarks/gpu_suite.sh evals \
    > "$OUT/evals-branch.log" 2>&1
  echo "branch evals rc $?"
  python3 benchmarks/compare_evals.py "$OUT/evals-main" "$OUT/evals-branch"
  tar -C "$OUT" -czf "$OUT/evals.tgz" evals-main evals-branch && rm -rf "$OUT/evals-main" "$OUT/evals-branch"  # one file comes back
fi
