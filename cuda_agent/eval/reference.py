"""The reference side, computed in the parent where no candidate code ever runs.

The task is copied out of the workspace once (an untouched snapshot, verified by hash) and the
reference module is built from that copy: an fp32 model as the task defines it and a float64
copy of it for the truth gate. Inputs are a pure function of a seed, so the parent can draw the
same set again to hand to the candidate and once more to check it was not mutated.
"""

from __future__ import annotations

import copy
import os
import stat
from pathlib import Path
from typing import Any

from cuda_agent.eval.scratch import private_dir
from cuda_agent.eval.task_code import TaskCodeError, task_code
from cuda_agent.task import Task, TaskError, describe_value, load_task, source_digest


def write_private(path: Path, data: bytes) -> None:
    """A fresh read-only (0400) file: whatever was at `path` (a file, a link) is replaced, never
    followed."""
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o400)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def snapshot_task(task: Task, dest: Path | None = None) -> Task:
    """Copy the task's files to a private folder (mkdtemp, 0700, read-only files) and load the
    reference from there. The bytes are checked against task.source_hash before anything runs."""
    sources = task.sources()  # read once: these bytes are checked, written and loaded
    sidecar = sources.get(task.inputs_path.name) if task.inputs_path is not None else None
    if source_digest(task.class_name, sources[task.path.name], sidecar) != task.source_hash:
        raise TaskError("the task changed after it was loaded; run again")
    if dest is None:
        dest = private_dir("task")
    else:
        dest = Path(dest)
        dest.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(dest, 0o700)
    for name, data in sources.items():
        write_private(dest / name, data)
    inputs = dest / task.inputs_path.name if task.inputs_path else None
    return load_task(
        f"{dest / task.path.name}::{task.class_name}",
        inputs=inputs,
        module_name="cuda_agent_task_ref",
        expected_hash=task.source_hash,
    )


def _files(task: Task) -> list[Path]:
    return [task.path] + ([task.inputs_path] if task.inputs_path is not None else [])


def verify_snapshot(task: Task) -> None:
    """Before anything re-reads the judge's copy of the task from disk (a judge or baseline
    process loads it by path): its files must still hash to task.source_hash and be plain files
    in a folder of ours that no one else can write. Raises TaskError with a one-line message
    otherwise. (The process that loads the copy should also pass expected_hash to load_task: that
    check covers the bytes it runs, this one only the moment it is made.)"""
    folder = task.path.parent
    blobs: list[bytes] = []
    try:
        st = os.lstat(folder)
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o022:
            raise TaskError(
                f"the judge's copy of the task ({folder}) is no longer a private folder; "
                "nothing timed from it is trusted"
            )
        for f in _files(task):
            fd = os.open(f, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, "rb") as fh:
                if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                    raise TaskError(f"the judge's copy of the task: {f.name} is not a plain file any more")
                blobs.append(fh.read())
    except OSError as e:
        raise TaskError(f"the judge's copy of the task cannot be read ({e.filename}: {e.strerror})") from None
    got = source_digest(task.class_name, blobs[0], blobs[1] if len(blobs) > 1 else None)
    if got != task.source_hash:
        raise TaskError(
            f"the judge's copy of the task was changed (hash {got}, expected {task.source_hash}); "
            "nothing timed from it is trusted"
        )


def tensors_bytes(xs: list) -> int:
    import torch

    return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))


def _to_doubles(inputs: list) -> list:
    """float64 copies of an input set, emptying `inputs` as it goes: one fp32 input at a time beside them."""
    doubles = []
    while inputs:
        doubles.append(_to_double(inputs.pop(0)))
    return doubles


def _to_double(x: Any) -> Any:
    import torch

    if isinstance(x, torch.Tensor) and x.is_floating_point():
        return x.double()
    return x


def flatten(out: Any) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def pin_full_fp32() -> None:
    """fp32 means fp32: TF32 off for matmul and cuDNN (cuDNN's default is on), highest precision."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")


class Reference:
    def __init__(self, task: Task, device: str, init_seed: int = 0, timeout_s: float | None = None):
        import torch

        pin_full_fp32()  # the judge computes in full fp32 too
        self.task = task
        self.device = device
        self.init_seed = init_seed
        self.timeout_s = timeout_s
        with self._code("get_init_inputs()"):
            self.init_inputs = task.init_inputs(init_seed)
        with self._code(f"{task.class_name}(...) (its __init__)"):
            self.model = task.build_model(self.init_inputs, device, init_seed)
        self.state_dict = {k: v.detach().clone() for k, v in self.model.state_dict().items()}
        # buffers the task's own forward writes (BatchNorm's running statistics in training mode):
        # their values after the last reference forward, which started from state_dict as a
        # candidate's call does; a candidate's call must leave them the same
        self.state_after: dict = {}
        self.updated_buffers: set[str] = set()
        # the tensors registered at build, which each forward starts from again (a forward may assign new ones)
        self.own_buffers = self._own(self.model)
        # every buffer of the task's Model (not parameters): a timed call gets its own copy of each,
        # since which of them a forward updates can depend on its inputs (timing_phase.candidate_batches)
        self.buffer_names = frozenset(self.own_buffers)
        self.notes: list[str] = []
        self.own_buffers64: dict = {}
        try:
            self.model64 = copy.deepcopy(self.model).double()
            self.own_buffers64 = self._own(self.model64)
        except Exception as e:  # e.g. a module that cannot be deep-copied, or no memory for it
            self.model64 = None
            self.notes.append(f"no float64 reference ({type(e).__name__}: {str(e)[:200]}); judged against fp32")
        floats = [v.dtype for v in self.state_dict.values() if v.is_floating_point()]
        sample = self.inputs(0)
        floats += [x.dtype for x in sample if isinstance(x, torch.Tensor) and x.is_floating_point()]
        self.fp32 = bool(floats) and all(d == torch.float32 for d in floats)
        self.dtypes = sorted({str(d).removeprefix("torch.") for d in floats})
        self.input_bytes = tensors_bytes(sample)
        self.eager_bytes = 0  # parameters + one input set + one forward, measured on a GPU (determinism_problem)
        self.inputs_desc = [describe_value(x) for x in sample]
        self.probe_rounds = True  # False once the TF32 probe found no matmul/conv to round

    def _own(self, model: Any) -> dict:
        """The buffer tensors `model` holds now, by state_dict name (a non-persistent buffer is not the
        candidate's to match)."""
        return {name: buf for name, buf in model.named_buffers() if name in self.state_dict}

    def _restart(self, model: Any, own: dict) -> None:
        """Each buffer back to the tensor registered at build, holding the task's starting values: a
        forward that assigns one (`self.avg = 0.9 * self.avg + ...`) leaves a new tensor under its name."""
        for name, buf in own.items():
            owner, _, leaf = name.rpartition(".")
            module = model.get_submodule(owner)
            if getattr(module, leaf, None) is not buf:
                setattr(module, leaf, buf)
            buf.copy_(self.state_dict[name])

    def _changed_buffers(self) -> dict:
        """Copies of the buffers the forward just run left other than they began, read from the module
        now: the tensors taken before it are not the ones a forward that assigns a buffer leaves."""
        changed = {}
        for name, buf in self.model.named_buffers():
            start = self.state_dict.get(name)
            if start is None:
                continue
            if (buf.shape, buf.dtype, buf.device) != (start.shape, start.dtype, start.device):
                raise TaskCodeError(
                    f"the task's forward replaces buffer {name} ({describe_value(start)}) with "
                    f"{describe_value(buf)}; keep its shape, dtype and device (a candidate updates it in place)"
                )
            if not _unchanged(buf, start):
                changed[name] = buf.detach().clone()
        return changed

    def parameter_problem(self) -> str | None:
        """A task whose forward changes a parameter (one with requires_grad=False, updated in place or
        assigned anew) cannot be judged: a candidate's call must leave the parameters as they were."""
        changed = [
            name
            for name, p in self.model.named_parameters()
            if name not in self.state_dict or not _unchanged(p, self.state_dict[name])
        ]
        if not changed:
            return None
        return (
            f"the task's forward changes its parameter {', '.join(changed)}, and parameters must stay as they "
            "are; register state that forward updates as a buffer (self.register_buffer) instead"
        )

    def _code(self, call: str):
        files = tuple(f for f in (self.task.path, self.task.inputs_path) if f is not None)
        return task_code(call, files, self.timeout_s)

    def describe(self) -> dict:
        """What the task is, for records: its hash, dtypes, input shapes and init arguments."""
        return {
            "path": str(self.task.path),
            "class": self.task.class_name,
            "hash": self.task.source_hash,
            "dtypes": self.dtypes,
            "inputs": self.inputs_desc,
            "init_inputs": [describe_value(x) for x in self.init_inputs],
        }

    def inputs(self, seed: int) -> list:
        """One input set of the task's get_inputs(), on the device."""
        with self._code("get_inputs()"):
            return self.task.draw_inputs(seed, self.device)

    def outputs(self, inputs: list) -> tuple[list, list | None]:
        """fp32 (the task's own dtype) and float64 reference outputs for one input set. Empties
        `inputs`: each fp32 input is freed as its float64 copy is made, so one input set is on the
        device at a time. (Parking large float64 outputs in host memory halved this process's
        peak on KernelBench's 6 GB tasks but doubled their evaluation time: they stay here.)"""
        import torch

        with torch.no_grad():
            self._restart(self.model, self.own_buffers)  # every call starts from the state a candidate is given
            with self._code("forward"):
                ref = [o.detach() for o in flatten(self.model(*inputs))]
            problem = self.parameter_problem()
            if problem:
                raise TaskCodeError(problem)
            self.state_after = self._changed_buffers()
            self.updated_buffers |= set(self.state_after)
            ref64 = None
            if self.model64 is not None:
                self._restart(self.model64, self.own_buffers64)  # the truth from the same start
                doubles = _to_doubles(inputs)
                self.release_cached()  # the fp32 inputs' blocks: the float64 outputs cannot reuse them
                try:
                    with self._code("forward in float64"):
                        ref64 = [o.detach() for o in flatten(self.model64(*doubles))]
                except TaskCodeError as e:
                    self.model64 = None
                    self.notes.append(f"no float64 reference ({e}); judged against fp32")
                del doubles
        inputs.clear()
        self.release_cached()  # what the float64 forward left cached
        return ref, ref64

    def downgrade_probe(self, seed: int, ref64: list) -> list | None:
        """Per output of input set `seed`, what rounding every matmul/conv operand to TF32's mantissa
        does to the float64 truth `ref64` (downgrade_probe.py; precision.py reads it); None for a task
        that is not fp32, has no float64 model, or rounds nothing."""
        from cuda_agent.eval.downgrade_probe import perturbation, rounded_forward

        if not (self.fp32 and self.probe_rounds and self.model64 is not None):
            return None
        doubles = _to_doubles(self.inputs(seed))
        # A second forward must not move buffers the task's forward updates (running statistics).
        buffers = {k: v.clone() for k, v in self.model64.named_buffers()}
        try:
            with self._code("forward in float64 with TF32-rounded operands"):
                low, rounded = rounded_forward(lambda d=doubles: flatten(self.model64(*d)))
        except TaskCodeError as e:
            self.probe_rounds = False
            self.notes.append(f"no TF32 probe ({e}); precision judged normwise only")
            return None
        finally:
            for k, v in self.model64.named_buffers():
                v.copy_(buffers[k])
        del doubles, buffers
        self.probe_rounds = rounded > 0
        probes = [perturbation(a, b) for a, b in zip(low, ref64)] if rounded else None
        del low
        self.release_cached()
        return probes

    def release_cached(self) -> None:
        """Give the blocks torch's allocator caches back to the GPU. The parent's large tensors come
        and go by phase while the judge's processes allocate beside it; a freed block kept cached
        here is memory they cannot have (on KernelBench's 6 GB tasks the determinism check's 26 GB
        stayed held through the first set, and a set's fp32 inputs through its float64 forward)."""
        if self.device.startswith("cuda"):
            from cuda_agent.eval.channel import release_cached

            release_cached()

    def determinism_problem(self, seed: int) -> str | None:
        """Run the reference twice on one input set with different RNG states: a task whose
        output depends on the RNG (dropout, sampling) cannot be scored. Compared in chunks: a
        float64 copy of a large output would need twice its size again."""
        import torch

        from cuda_agent.task import seed_everything

        cuda = self.device.startswith("cuda")
        if cuda:  # what one eager forward takes beyond what this process already holds
            torch.cuda.synchronize(self.device)
            held = torch.cuda.memory_allocated(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        inputs = self.inputs(seed)
        outs = []
        for s in (seed + 1, seed + 2):
            seed_everything(s)
            with torch.no_grad(), self._code("forward"):
                self._restart(self.model, self.own_buffers)  # a buffer the first forward updated is not noise
                out = [o.detach() for o in flatten(self.model(*inputs))]
            if cuda and not outs:  # before the clone below, which is this check's, not the forward's
                params = sum(v.untyped_storage().nbytes() for v in self.state_dict.values())
                self.eager_bytes = params + torch.cuda.max_memory_allocated(self.device) - held
            outs.append([o.clone() for o in out])  # a forward that returns its own buffer twice is caught
            del out
        del inputs
        differs = next(
            (i for i, (a, b) in enumerate(zip(*outs)) if isinstance(a, torch.Tensor) and not _same(a, b)), None
        )
        del outs  # no name left holding an output (a generator's own scope): all of it goes back now
        self.release_cached()
        if differs is None:
            return None
        return (
            f"output {differs} changes between two runs on the same inputs: the reference is not "
            "deterministic (dropout in training mode, sampling, or non-deterministic atomics?)"
        )


def _unchanged(now: Any, start: Any) -> bool:
    """The same shape, dtype and values, NaN where it was NaN (torch.equal calls NaN a change)."""
    import torch

    if (now.shape, now.dtype, now.device) != (start.shape, start.dtype, start.device):
        return False
    if torch.equal(now, start):
        return True
    return (now.is_floating_point() or now.is_complex()) and bool(
        torch.isclose(now, start, rtol=0, atol=0, equal_nan=True).all()
    )


def _same(a: Any, b: Any) -> bool:
    """Equal within 1e-5 relative / 1e-6 absolute, NaNs equal, walked in float64 chunks."""
    import torch

    from cuda_agent.eval.tensor_walk import chunks, real_view, walk_order

    if not isinstance(b, torch.Tensor) or a.shape != b.shape or a.is_complex() != b.is_complex():
        return False
    a, b = real_view(a), real_view(b)
    for x, y in chunks([a, b], walk_order(a), 1 << 22):
        if not torch.allclose(x.double(), y.double(), rtol=1e-5, atol=1e-6, equal_nan=True):
            return False
    return True
