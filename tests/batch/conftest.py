"""The batch fixture shared by the tests that read one finished batch."""

from __future__ import annotations

import pytest
from batch_helpers import NO_MODEL, SEGFAULT, TASK_SRC, batch_args, cache_dir, cli, make_tasks


@pytest.fixture(scope="module")
def level_batch(tmp_path_factory):
    """The four-task batch, run once through the CLI: (root, tasks, scripts, out, process)."""
    root = tmp_path_factory.mktemp("batch")
    tasks, scripts = make_tasks(
        root,
        {
            "level1/scale_add": TASK_SRC,
            "level1/scale_add_2": TASK_SRC,
            "level2/segfault": SEGFAULT,
            "level2/no_model": NO_MODEL,
        },
    )
    out = root / "run"
    proc = cli(*batch_args(tasks, scripts, out, "--concurrency", "2"), cache=cache_dir(tmp_path_factory))
    return root, tasks, scripts, out, proc
