"""The drop-in result: a folder a user imports to replace their layer with the verified version.

    <run>/dropin/ (RunFolder.dropin)
      __init__.py  layer.py     Layer / load_layer: ModelNew behind checks (shapes, dtypes, device,
                                contiguity, forward-only), from cuda_agent/results/dropin_layer.py
      verified.json             what those checks compare against; init_inputs.pt: constructor args
      model_new.py  kernels/    the verified version's files, from its commit
      kernel_runtime.py  build/ the runtime and the prebuilt library with its launchers.json
      README.md                 usage, what was verified, the speedups

It imports torch and its own files only, so it works where cuda-agent is not installed.
"""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

from cuda_agent.eval.baselines import default_cache_dir
from cuda_agent.eval.verdict import Verdict
from cuda_agent.kernels.build import build_kernels
from cuda_agent.results.final import VerifiedTask, export_version
from cuda_agent.run_folder import RunFolder
from cuda_agent.workspace import Workspace

HERE = Path(__file__).resolve().parent
RUNTIME = HERE.parent / "kernels" / "runtime.py"
INIT = '"""The verified kernels as a drop-in layer: see README.md."""\n\nfrom .layer import Layer, load_layer\n'


def write_dropin(
    run: RunFolder,
    workspace: Workspace,
    version_sha: str,
    verified: Verdict,
    task_info: VerifiedTask,
    *,
    cache_dir: Path | None = None,
    arch: str | None = None,
) -> Path:
    """Write the run folder's dropin/ (replacing an older one only once the new one is complete) and return it."""
    if not verified.correct:
        raise ValueError(
            f"version {version_sha[:10]} did not pass re-verification ({verified.status}): "
            "only a verified version becomes a drop-in"
        )
    final = run.dropin
    tmp = final.with_name(f".{final.name}-{uuid.uuid4().hex[:8]}")
    try:
        export_version(workspace, version_sha, tmp)
        shutil.copyfile(RUNTIME, tmp / "kernel_runtime.py")
        shutil.copyfile(HERE / "dropin_layer.py", tmp / "layer.py")
        (tmp / "__init__.py").write_text(INIT)
        if any((tmp / "kernels").glob("*.cu")):
            cache = Path(cache_dir or default_cache_dir()) / "build"
            built = build_kernels(tmp / "kernels", cache, arch=arch, out_dir=tmp / "build")
            if not built.ok:
                first = built.errors.splitlines()[0] if built.errors else "no error text"
                raise RuntimeError(f"rebuilding the verified kernels for the drop-in failed: {first}")
            built.spec_path.chmod(0o644)  # written private; the drop-in is meant to be shared
        spec = _spec(version_sha, workspace, verified, task_info)
        (tmp / "verified.json").write_text(json.dumps(spec, indent=1) + "\n")
        _save_init_inputs(task_info.init_inputs, tmp / "init_inputs.pt")
        (tmp / "README.md").write_text(readme(spec, final.name))
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _spec(sha: str, ws: Workspace, v: Verdict, t: VerifiedTask) -> dict:
    info = ws.history.info(sha)
    outs = [o for s in v.sets for o in s.outputs]
    return {
        "task": {"path": t.path, "class": t.class_name, "hash": t.hash, "name": t.name},
        "version": info.version if info else None,
        "commit": sha,
        "device": t.device,
        "device_name": v.timing.device if v.timing and v.timing.device else t.device,
        "inputs": t.inputs,
        "params": t.params,
        "init_inputs": t.init_described,
        "init_seed": t.init_seed,
        "input_sets": len(v.sets),
        "max_abs_err": max((o.max_abs_err or 0.0 for o in outs), default=None),
        "norm_rel_err": max((o.norm_rel_err or 0.0 for o in outs), default=None),
        "time_ms": v.timing.median_ms if v.timing else None,
        "eager_ms": v.eager.median_ms if v.eager else None,
        "compile_ms": v.compiled.median_ms if v.compiled else None,
        "speedup_vs_eager": v.speedup_vs_eager,
        "speedup_vs_compile": v.speedup_vs_compile,
    }


def _save_init_inputs(values: list, path: Path) -> None:
    """torch.save, read back with weights_only=True; a value that cannot be (a custom object) leaves
    no file, and the layer then asks for the constructor arguments."""
    import torch

    try:
        torch.save(list(values), path)
        torch.load(path, weights_only=True)
    except Exception:
        path.unlink(missing_ok=True)


def readme(spec: dict, folder: str) -> str:
    t = spec["task"]
    x = lambda s: "n/a" if s is None else f"{s:.2f}x"  # noqa: E731
    ms = lambda s: "n/a" if s is None else f"{s:.4f} ms"  # noqa: E731
    inputs = "; ".join(f"`{i['name']}` {_arg(i)}" for i in spec["inputs"]) or "none"
    init = ", ".join(a.get("value") or _arg(a) for a in spec["init_inputs"]) or "none"
    name, kind = spec["device_name"], spec["device"]
    where = name if name == kind else f"{name} ({kind})"
    err = (
        "n/a"
        if spec["max_abs_err"] is None
        else (f"{spec['max_abs_err']:.3e} (normwise relative {spec['norm_rel_err']:.2e})")
    )
    speed = " | ".join(
        [
            *(ms(spec[k]) for k in ("time_ms", "eager_ms", "compile_ms")),
            *(x(spec[k]) for k in ("speedup_vs_eager", "speedup_vs_compile")),
        ]
    )
    return f"""# Drop-in: {t["name"]} (`{t["class"]}`), version {spec["version"]}

```python
from {folder} import load_layer               # with this folder's parent on sys.path
layer = load_layer(original=my_layer)        # your layer's weights; forward-only, inputs as below
```

Forward-only: there is no backward. Under autograd with an input or parameter that requires grad it
raises RuntimeError; call it under `torch.no_grad()` or keep the original layer for training. Every
call is checked against what was verified (shapes exactly, dtypes, device, contiguity) and raises
ValueError naming the argument otherwise: the kernels may hard-code these sizes.

## What was verified

- task: `{t["path"]}` class `{t["class"]}`, hash `{t["hash"]}`
- commit `{spec["commit"]}` re-verified on {where} with {spec["input_sets"]} fresh
  input sets, all correct; worst error against the float64 reference: {err}
- inputs: {inputs}
- constructor arguments: {init}

## Speed (median per call)

| this version | eager | torch.compile | vs eager | vs torch.compile |
|---|---|---|---|---|
| {speed} |

Files: `model_new.py` and `kernels/` are the verified version; `build/` holds its library, built where
it was verified (same GPU architecture needed), and `launchers.json`; `kernel_runtime.py` binds them with ctypes;
`verified.json` is what the checks compare against.
"""


def _arg(d: dict) -> str:
    if "dtype" not in d:
        return f"= {d['value']}"
    return f"{d['dtype']} {d['shape']}" + ("" if d.get("contiguous", True) else " (strided)")
