"""`--ray` without Ray installed is one clear error, before anything is written (ray is optional:
the `distributed` extra). Ray is hidden by a `ray` package that fails to import."""

import os
import subprocess

from batch_helpers import TASK_SRC, batch_args, command, make_tasks

from cuda_agent import install_hint


def test_ray_not_installed_says_how_to_install_it(tmp_path):
    tasks, scripts = make_tasks(tmp_path, {"scale_add": TASK_SRC})
    fake = tmp_path / "no_ray" / "ray"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('No module named ray')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(fake.parent), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        command(*batch_args(tasks, scripts, tmp_path / "run", "--ray", "auto")),
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert proc.returncode == 2
    assert f"--ray needs ray, which is not installed: {install_hint('distributed')}" in proc.stderr
    assert "pip install -e '" in proc.stderr  # cuda-agent is installed from this checkout
    assert not (tmp_path / "run").exists()
