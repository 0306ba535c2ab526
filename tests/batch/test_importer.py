"""`cuda-agent tasks import` on a small parquet built here with CUDA-Agent-Ops-6K's columns (the
real data set could not be downloaded in this environment)."""

import json

import pytest
from batch_helpers import NO_MODEL, TASK_SRC
from typer.testing import CliRunner

from cuda_agent.batch.importer import import_parquet
from cuda_agent.batch.tasks import discover
from cuda_agent.cli import app

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


@pytest.fixture
def parquet(tmp_path):
    ops = [["torch.mul", "torch.add"], ["torch.relu"], ["nn.Conv2d"], ["torch.sum"], ["torch.tanh"]]
    code = [TASK_SRC, "def broken(:\n", NO_MODEL, "", TASK_SRC.replace("def get_inputs", "def _inputs")]
    table = pa.table({"ops": ops, "data_source": ["synth"] * 5, "code": code})
    path = tmp_path / "ops6k.parquet"
    pq.write_table(table, path)
    return path


def test_import_writes_one_task_per_row_and_lists_the_rejected_with_reasons(parquet, tmp_path):
    out = tmp_path / "tasks"
    report = import_parquet(parquet, out)
    assert [t.file for t in report.imported] == ["0_torch_mul_torch_add.py"]
    assert (out / "0_torch_mul_torch_add.py").read_text() == TASK_SRC
    why = {r.row: r.error for r in report.rejected}
    assert "SyntaxError" in why[1] and "no class Model" in why[2] and why[3] == "empty `code`"
    assert "get_inputs" in why[4]
    assert all((out / r.file).is_file() for r in report.rejected if r.row != 3)
    listed = json.loads((out / "import.json").read_text())
    assert listed["imported"][0]["ops"] == "torch.mul,torch.add" and listed["imported"][0]["data_source"] == "synth"
    assert len(listed["rejected"]) == 4
    # the folder is a batch task folder: only the good task, the rejected ones are skipped
    assert [e.id for e in discover(out)] == ["0_torch_mul_torch_add"]


def test_cli_import_exit_codes_and_bad_input(parquet, tmp_path):
    r = CliRunner().invoke(app, ["tasks", "import", str(parquet), "--out", str(tmp_path / "t")])
    assert r.exit_code == 1 and "rejected row 2" in r.output and "1 tasks written" in r.output
    r = CliRunner().invoke(app, ["tasks", "import", str(tmp_path / "nope.parquet"), "--out", str(tmp_path / "t")])
    assert r.exit_code == 2 and "parquet file not found" in r.output
    other = tmp_path / "other.parquet"
    pq.write_table(pa.table({"ops": ["x"]}), other)
    r = CliRunner().invoke(app, ["tasks", "import", str(other), "--out", str(tmp_path / "t2")])
    assert r.exit_code == 2 and "no column code" in r.output
