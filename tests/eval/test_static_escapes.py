"""Static guards, first layer of the trust boundary: model_new.py reaching modules through
attributes (torch.os, kernel_runtime.ctypes), interpreter internals (dunders, frames, computed
getattr) and tensor crossings (numpy, DLPack, storages, pointers, tensors from Python data).

The live checks import torch and list every module its loaded public modules (and math, typing,
kernel_runtime) expose as attributes: each must be caught, and no guarded name may be an honest
attribute of a tensor, an nn.Module or a builtin container."""

import importlib.util
import sys
import types
import warnings
from pathlib import Path

import pytest

from cuda_agent.eval.guards import check_candidate_static
from cuda_agent.eval.guards.static_py import check_model_new
from cuda_agent.eval.guards.static_py_rules import (
    CROSSING_ATTRS,
    FRAME_ATTRS,
    MODULE_NAMES,
    SOFT_MODULE_NAMES,
    SOFT_MODULE_OK,
)

ROOT = Path(__file__).resolve().parents[2]
RUNTIME = ROOT / "cuda_agent" / "kernels" / "runtime.py"
HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\nimport kernel_runtime\n"


def fails(src: str) -> set[str]:
    return {f.guard for f in check_model_new(src, task_fp32=True) if f.severity == "fail"}


def findings(src: str):
    return [f.model_dump() for f in check_model_new(src, task_fp32=True)]


def forward(body: str, extra: str = "") -> str:
    """A ModelNew whose forward runs `body` (indented lines), with `extra` at module level."""
    lines = "".join(f"        {line}\n" for line in body.splitlines())
    return (
        f"{HEAD}kernels = kernel_runtime.load_kernels()\n{extra}\n"
        "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
        f"    def forward(self, x):\n{lines}        return x\n"
    )


# -- modules reached through attributes ----------------------------------------------------

MODULE_ESCAPES = [
    "torch.os.kill(torch.os.getppid(), 9)",  # the review's attack: no import at all
    "torch.sys.modules['cuda_agent']",
    "torch.ctypes.pythonapi",
    "torch.inspect.currentframe()",
    "torch.importlib.import_module('socket')",
    "torch.builtins.open('/etc/passwd')",
    "torch.cuda.traceback.walk_stack(None)",
    "torch.functional.operator.attrgetter('os')(torch)",
    "F.np.frombuffer(b'x', dtype='u1')",
    "torch.nn.functional.torch.sys",  # a chain back through torch
    "nn.functional.torch.os.system('id')",
    "F.torch.os",
    "torch.nn.modules.module.copy.deepcopy",  # a soft name, on a resolved path
    "kernel_runtime.ctypes.pythonapi",
    "kernel_runtime.os.sys",
    "kernel_runtime._bind_library('/tmp/x.so', {}, True)",
    "kernel_runtime.torch",
    "import math\nmath.sys",
    "import typing\ntyping.sys.modules",
    "import typing\ntyping.types.FunctionType",
    "[torch][0].os.system('id')",  # no resolvable path: the name alone
    "{'t': torch}['t'].subprocess.run(['id'])",
    "(lambda: torch)().sys",
    "mods = [torch]\nmods[0].gc.get_objects()",
    "class Holder:\n    m = torch\nHolder.m.signal.alarm(1)",
    "import torch as t\nt.os",
    "import torch.cuda as tc\ntc.os.environ",
    "tc = torch.cuda\ntc.threading.Thread",
    "getattr(torch, 'os')",
    "getattr(torch, 'sys').modules",
    "hasattr(torch, 'subprocess')",
    "from kernel_runtime import ctypes",
    "def f(sys):\n    return sys.modules",
    "sys.modules['torch']",  # a bare name nothing here binds: only an injected builtin could give it
    "gc.get_referrers(x)",
    "inspect.stack()",
    "torch.\uff4f\uff53",  # fullwidth `os`: Python normalises identifiers (NFKC), so does the guard
]


@pytest.mark.parametrize("src", MODULE_ESCAPES)
def test_module_reached_through_an_attribute_is_caught(src):
    assert fails(HEAD + src) & {"module_escape", "forbidden_call"}, findings(HEAD + src)


def test_the_review_attack_is_caught_at_import_and_in_forward():
    at_import = HEAD + "torch.os.kill(torch.os.getppid(), 9)\n"
    assert "module_escape" in fails(at_import)
    assert "module_escape" in fails(forward("torch.os.kill(torch.os.getppid(), 9)"))
    (f,) = [f for f in check_model_new(at_import, task_fp32=True) if f.guard == "module_escape"]
    assert f.where == "model_new.py:5" and "torch.os" in f.message and "\n" not in f.message


# -- interpreter internals -------------------------------------------------------------------

INTERNALS = [
    "f = (lambda: 0).__globals__['__builtins__']",
    "g = forward.__globals__",
    "kernels.saxpy.__globals__['fn']",  # the launcher's ctypes function
    "kernels.saxpy.__closure__[0].cell_contents",
    "print.__self__",  # the builtins module
    "x.__class__.__mro__[-1].__subclasses__()",
    "object.__subclasses__()",
    "type(x).__dict__",
    "nn.Module.__dict__['__call__']",
    "F.relu.__code__.co_consts",
    "F.relu.__wrapped__",
    "F.relu.__func__",
    "super().__getattribute__('training')",
    "x.__reduce_ex__(2)",
    "x.__init_subclass__()",
    "torch.nn.Module.__init__.__builtins__",
    "b = __builtins__",
    "l = __loader__",
    "s = __spec__.loader",
    "def gen():\n    yield 1\ng = gen()\nf = g.gi_frame.f_back.f_globals",
    "async def co():\n    pass\nc = co()\nf = c.cr_frame.f_locals",
    "class C:\n    def __enter__(self):\n        return self\n"
    "    def __exit__(self, t, e, tb):\n        self.g = tb.tb_frame.f_globals",
    "def f(e):\n    return e.__traceback__.tb_frame.f_back",
    "def f(e):\n    return e.__traceback__.tb_next",
    "f = x.f_builtins",
    "c = F.relu.co_code",
    "name = 'o' + 's'\ngetattr(torch, name)",
    "getattr(torch, 'o' + 's')",
    "getattr(torch, *['os'])",
    "getattr(*[torch, 'os'])",
    "g = getattr\ng(torch, 'os')",
    "from functools import reduce\nreduce(getattr, ['os'], torch)",
    "m = list(map(getattr, [torch], ['os']))",
    "getattr(x, '__globals__')",
    "hasattr(x, '__code__')",
    "getattr(x, 'gi_frame')",
    "setattr(x, name, 1)",
    "delattr(x, name)",
    "class M(nn.Module):\n    def __getattribute__(self, name):\n        return 1",
    "class M(nn.Module):\n    def __init_subclass__(cls):\n        pass",
    "class M:\n    def __del__(self):\n        pass",
    "class M:\n    def __reduce__(self):\n        return (print, ('x',))",
    "class Meta(type):\n    pass",
    "class M(nn.Module, metaclass=Meta):\n    pass",
]


@pytest.mark.parametrize("src", INTERNALS)
def test_interpreter_internals_are_caught(src):
    assert "interpreter_internals" in fails(HEAD + src), findings(HEAD + src)


# -- tensor crossings (numpy, DLPack, storages, pointers, host data) ----------------------------

CROSSINGS = [
    "a = x.numpy()\na = a * 2.0 + 1.0\nx = torch.from_numpy(a)",  # the review's numpy forward
    "x = torch.from_numpy(x.cpu().numpy() * 2)",
    "v = x.tolist()",
    "a = x.__array__()",
    "i = x.__cuda_array_interface__",
    "i = x.__array_interface__",
    "c = x.__dlpack__()",
    "y = torch.from_dlpack(x)",
    "y = torch.utils.dlpack.from_dlpack(x)",
    "y = torch.frombuffer(bytearray(16), dtype=torch.float32)",
    "y = torch.asarray(x)",
    "y = torch.as_tensor([1.0, 2.0])",
    "y = torch.tensor([v * 2 for v in range(4)])",
    "y = torch.scalar_tensor(1.0)",
    "y = torch.FloatTensor([1.0])",
    "y = torch.Tensor([1.0])",
    "y = x.new_tensor([1.0])",
    "p = x.data_ptr()",
    "s = x.untyped_storage()",
    "s = x.storage()",
    "s = torch.UntypedStorage(16)",
    "x.share_memory_()",
    "f = getattr(x, 'numpy')",
]


@pytest.mark.parametrize("body", CROSSINGS)
def test_tensor_crossings_in_forward_are_caught(body):
    src = forward(body)
    assert "tensor_crossing" in fails(src), findings(src)


def test_tensors_from_python_data_are_caught_in_helpers_forward_calls():
    helper = "def host(v):\n    return torch.tensor(v)\n"
    assert "tensor_crossing" in fails(forward("y = host([1.0])", extra=helper))
    method = forward("y = self.host(x)").replace(
        "    def forward", "    def host(self, v):\n        return torch.as_tensor(v)\n\n    def forward"
    )
    assert "tensor_crossing" in fails(method), findings(method)
    lam = "host = lambda v: torch.tensor(v)\n"
    assert "tensor_crossing" in fails(forward("y = host([1.0])", extra=lam))


def test_an_object_posing_as_an_array_is_caught():
    src = HEAD + "class A:\n    def __cuda_array_interface__(self):\n        return {}\n"
    assert "tensor_crossing" in fails(src)


# -- honest code stays clean ----------------------------------------------------------------------

HONEST = [
    forward("y = torch.empty_like(x)\nkernels.saxpy(x, y, 2.0, x.numel())\nx = y"),
    forward("y = x.t()\nz = torch.t(x)\nw = x.select(0, 0)\nv = x.view(-1).contiguous()"),
    forward("n, c = x.shape[0], x.size(1)\no = x.storage_offset()\ns = x.stride()\nd = x.dtype\nx = x.new_empty(4)"),
    forward("shape = list(x.shape)\ncopy = dict(a=1).copy()\nk = sorted(copy)"),
    forward("s = x.item()\nkernels.scale(x, s)"),
    HEAD + "class ModelNew(nn.Module):\n    def __init__(self, signal=None, types=2):\n        super().__init__()\n"
    "        self.signal = signal\n        self.types = types\n        self.io = 3\n"
    "        self.register_buffer('table', torch.tensor([1.0, 2.0, 3.0]))\n"
    "        self.scale = torch.as_tensor(2.0)\n"
    "    def forward(self, signal):\n        return self.signal if hasattr(self, 'signal') else signal\n",
    HEAD + "LUT = torch.tensor([0.5, 0.25])\nW = getattr(torch, 'float32')\n",
    HEAD + "class ModelNew(nn.Module):\n    def __init__(self):\n        super(ModelNew, self).__init__()\n"
    "        self.linear = nn.Linear(4, 4)\n        w = getattr(self.linear, 'weight')\n"
    "    def forward(self, x):\n        return F.relu(x) if self.training else x\n",
    HEAD + "import math\nfrom typing import Optional\nEPS = math.sqrt(2.0)\n"
    "if __name__ == '__main__':\n    print(__doc__, __file__)\n",
    HEAD
    + "class ModelNew(nn.Module):\n    __slots__ = ()\n    def __repr__(self):\n        return type(self).__name__\n",
    HEAD + "from kernel_runtime import load_kernels\nkernels = load_kernels()\n",
    HEAD + "# torch.os.kill(0, 9); x.numpy(); g.gi_frame.f_back; kernel_runtime.ctypes\n"
    "msg = 'torch.sys.modules __globals__ numpy() tb_frame getattr(torch, name)'\n",
    HEAD + "rng = torch.random.manual_seed\nloss = nn.MSELoss()\nr = loss.reduction\n",
]


@pytest.mark.parametrize("src", HONEST)
def test_honest_look_alikes_do_not_fire(src):
    assert fails(src) == set(), findings(src)


def test_honest_candidates_and_templates_pass():
    dirs = [
        *sorted((ROOT / "examples").glob("*/candidate")),
        *sorted((ROOT / "tests/adversarial/honest").iterdir()),
        ROOT / "tests/harness/cpu_task/honest",
    ]
    for d in dirs:
        assert not [f for f in check_candidate_static(d, task_fp32=True) if f.severity == "fail"], d
    template = (ROOT / "cuda_agent" / "workspace_template" / "model_new.py").read_text()
    assert fails(template) == set()


# -- live: every module torch exposes as an attribute is caught ------------------------------------


def _module_attributes():
    """(path, attr) for every non-torch module an attribute of a loaded public torch module (or math,
    typing) holds: what `import torch` hands model_new.py without any import of its own."""
    import torch  # noqa: F401  (loads the modules listed)
    import torch.nn.functional  # noqa: F401

    out = []
    for name, module in sorted(sys.modules.items()):
        if module is None or not (name in ("torch", "math", "typing") or name.startswith("torch.")):
            continue
        if any(p.startswith("_") for p in name.split(".")):
            continue  # private modules: the path itself fires
        for attr, value in sorted(vars(module).items()):
            if (
                isinstance(value, types.ModuleType)
                and value.__name__.split(".")[0] != "torch"
                and not attr.startswith("__")
            ):
                out.append((name, attr))
    return out


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_every_module_torch_exposes_as_an_attribute_is_caught():
    pairs = _module_attributes()
    assert len(pairs) > 100 and ("torch", "os") in pairs and ("torch", "sys") in pairs
    missed = []
    for path, attr in pairs:
        root = path.split(".")[0]
        src = f"import {root}\nm = {path}.{attr}\n"
        if not fails(src) & {"module_escape", "forbidden_call", "side_stream"}:
            missed.append(f"{path}.{attr}")
    assert missed == []


def test_guarded_names_are_never_honest_attributes():
    """A name that fires on any chain must not be an attribute of what honest code touches."""
    import torch
    import torch.nn as nn

    objects = [
        torch.zeros(2, 2),
        torch.Tensor,
        nn.Module(),
        nn.Linear(2, 2),
        nn.Conv2d(1, 1, 1),
        nn.LayerNorm(2),
        nn.Embedding(2, 2),
        nn.BatchNorm2d(2),
        nn.MSELoss(),
        nn.Parameter(torch.zeros(1)),
        torch.Size([1]),
        torch.float32,
        torch.device("cpu"),
        [],
        {},
        (),
        set(),
        "",
        1,
        1.0,
        b"",
        range(1),
        torch.nn.functional,
        torch,
        nn,
        torch.cuda,
    ]
    honest = set()
    for obj in objects:
        for attr in dir(obj):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    value = getattr(obj, attr)
            except Exception:  # properties that need a 2-D tensor, deprecated names...
                value = None
            if isinstance(value, types.ModuleType) and not value.__name__.startswith("torch"):
                continue  # a real module: guarded on purpose
            honest.add(attr)
    overlap = ((MODULE_NAMES | FRAME_ATTRS) - CROSSING_ATTRS) & honest  # x.numpy() is tensor API: a crossing
    # torch's own submodules that share a stdlib name (torch.types, torch.signal, torch.multiprocessing)
    # are no honest need either; only functions, classes and values count
    assert {a for a in overlap if not isinstance(getattr(torch, a, None), types.ModuleType)} == set()
    for path in SOFT_MODULE_OK:
        obj = torch
        for part in path.split(".")[1:]:
            obj = getattr(obj, part)
        assert not isinstance(obj, types.ModuleType) or obj.__name__.startswith("torch"), path
    assert not SOFT_MODULE_NAMES & MODULE_NAMES


# -- the runtime module's surface -------------------------------------------------------------------


@pytest.fixture
def runtime_module():
    spec = importlib.util.spec_from_file_location("kernel_runtime_surface", RUNTIME)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_runtime_attribute_but_load_kernels_is_guarded(runtime_module):
    """tests/kernels/test_binding.py checks the namespace itself; here, that the guard covers it."""
    for attr in vars(runtime_module):
        src = f"import kernel_runtime\nv = kernel_runtime.{attr}\n"
        assert bool(fails(src)) == (attr != "load_kernels"), (attr, findings(src))
