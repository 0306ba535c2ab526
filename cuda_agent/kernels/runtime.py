"""Call the extern "C" launchers of a compiled kernel library from PyTorch.

Standalone on purpose: this file is copied into workspaces and drop-in results, so it imports
only torch and the standard library, never cuda_agent.

    import kernel_runtime
    kernels = kernel_runtime.load_kernels()          # build dir: arg, $CUDA_AGENT_KERNELS, ./build
    kernels.relu_forward(x, y, x.numel())            # tensors for pointers, numbers for scalars

Each callable checks its arguments against launchers.json (dtype, contiguity, one device, integer
ranges), passes the current CUDA stream as the last argument, and raises if the launch failed.
Without CUDA (CPU-only CI) it runs in host-only mode: CPU tensors, a NULL stream, which suits
launchers whose body is a plain host loop; a launcher that launches a kernel there raises (the
kernel ran nowhere).

The namespace holds `load_kernels` and nothing else public: ctypes, os, torch and the helpers live
in `_runtime()`'s closure, so `kernel_runtime.ctypes` or `.os` do not exist for model_new.py to
reach. `_load_spec` and `_bind_library` are the harness's entries (cuda_agent.kernels.binding);
`_DTYPES` and `_SCALARS` the C type names it binds, as frozensets of strings.
"""


def _runtime():
    import ctypes
    import json
    import os
    from pathlib import Path

    import torch

    SPEC_NAME = "launchers.json"
    SPEC_VERSION = 1

    _DTYPES = {
        "float": torch.float32, "double": torch.float64, "__half": torch.float16, "__nv_bfloat16": torch.bfloat16,
        "bool": torch.bool, "__nv_fp8_e4m3": torch.float8_e4m3fn, "__nv_fp8_e5m2": torch.float8_e5m2,
        "int8_t": torch.int8, "uint8_t": torch.uint8, "int16_t": torch.int16, "uint16_t": torch.uint16,
        "int32_t": torch.int32, "uint32_t": torch.uint32, "int64_t": torch.int64, "uint64_t": torch.uint64,
        "void": None,  # any dtype
    }  # fmt: skip
    _SCALARS = {
        name: getattr(ctypes, "c_" + name.removesuffix("_t"))
        for name in (
            "float",
            "double",
            "bool",
            "int8_t",
            "uint8_t",
            "int16_t",
            "uint16_t",
            "int32_t",
            "uint32_t",
            "int64_t",
            "uint64_t",
        )
    }  # ctypes.c_float, ctypes.c_int8...
    _INT_RANGES = {name: ((-(1 << (8 * ctypes.sizeof(c) - 1)), (1 << (8 * ctypes.sizeof(c) - 1)) - 1)
                          if name.startswith("int") else (0, (1 << (8 * ctypes.sizeof(c))) - 1))
                   for name, c in _SCALARS.items() if name.endswith("_t")}  # fmt: skip
    _ERROR_BUF = 512

    def make_kernels(library_name: str, launchers: dict):
        """The launchers of one library, as attributes (`kernels.relu_forward(...)`). The class is made per
        library, so an instance holds its launchers and nothing else (no path, spec or ctypes handle)."""
        names = list(launchers)

        class Kernels:
            def __getattr__(self, name: str):  # only reached when no launcher has that name
                if name.startswith("__"):
                    raise AttributeError(name)
                listed = ", ".join(names) or "none"
                raise AttributeError(
                    f"no launcher named {name!r} in {library_name} (launchers: {listed}); "
                    'define it as extern "C" in kernels/*.cu and compile again'
                )

            def __getitem__(self, name: str):
                return getattr(self, name)

            def __contains__(self, name: str) -> bool:
                return name in names

            def __iter__(self):
                return iter(names)

            def __len__(self) -> int:
                return len(names)

            def __dir__(self):
                return sorted(set(object.__dir__(self)) | set(names))

            def __repr__(self) -> str:
                return f"Kernels({library_name}: {', '.join(names)})"

        kernels = Kernels()
        for name, call in launchers.items():
            setattr(kernels, name, call)
        return kernels

    def load_kernels(build_dir=None):
        """Bind the library described by build_dir/launchers.json (build_dir may also be that file)."""
        if build_dir is None:
            build_dir = os.environ.get("CUDA_AGENT_KERNELS") or Path(__file__).resolve().parent / "build"
        library, spec = load_spec(build_dir)
        # CUDA_AGENT_HOST_ONLY=1 (set by the harness's CPU mode) forces host-only mode on a GPU machine too
        cuda = torch.cuda.is_available() and os.environ.get("CUDA_AGENT_HOST_ONLY") != "1"
        return make_kernels(library.name, bind_library(library, spec, cuda))

    def load_spec(build_dir) -> tuple:
        """(library path, spec) from build_dir/launchers.json (build_dir may also be that file)."""
        path = Path(build_dir)
        spec_path = path if path.is_file() else path / SPEC_NAME
        if not spec_path.is_file():
            raise FileNotFoundError(f"no {SPEC_NAME} in {path}: compile the kernels first (kernels/*.cu -> build)")
        spec = json.loads(spec_path.read_text())
        if spec.get("version") != SPEC_VERSION:
            raise RuntimeError(
                f"{spec_path} has version {spec.get('version')}, this runtime reads {SPEC_VERSION}: compile again"
            )
        library = spec_path.parent / spec["library"]
        if not library.is_file():
            raise FileNotFoundError(f"{library} is missing (named by {spec_path}): compile the kernels again")
        return library, spec

    def bind_library(library_path, spec: dict, cuda: bool) -> dict:
        """{launcher name: callable} for the library at library_path, as spec (launchers.json) describes it;
        reads no files. cuda=False binds in host-only mode (CPU tensors, NULL stream)."""
        lib = ctypes.CDLL(str(library_path), mode=os.RTLD_LOCAL)
        return {launcher["name"]: _bind(lib, launcher, bool(cuda)) for launcher in spec["launchers"]}

    def _bind(lib, launcher: dict, cuda: bool):
        """One launcher -> a Python callable; everything that does not depend on the args is done here."""
        name = launcher["name"]
        params = launcher["params"][:-1]  # the last one is the stream, passed by us
        fn = getattr(lib, name)
        fn.argtypes = [ctypes.c_void_p if p["kind"] == "pointer" else _SCALARS[p["type"]] for p in params]
        fn.argtypes += [ctypes.c_void_p]
        returns = launcher["returns"]
        fn.restype = None if returns == "void" else ctypes.c_int
        signature = f"{name}({', '.join(p['name'] for p in params)})"
        checks = [_check(name, p, cuda) for p in params]
        count = len(params)
        error_string = _error_string(lib) if returns == "cudaError_t" else str
        stream_of = _stream_getter() if cuda else None
        last_error = _launch_check(lib, name, cuda)

        def failed(rc: int) -> None:
            raise RuntimeError(f"{name} returned {rc} ({error_string(rc)})")

        def checked_call(args: tuple) -> None:
            """The slow path: validates every argument with a precise message, then calls."""
            if len(args) != count:
                raise TypeError(
                    f"{signature} takes {count} argument{'s' if count != 1 else ''} "
                    f"(the stream is passed for you), got {len(args)}"
                )
            devices: set = set()
            values = [check(arg, devices) for check, arg in zip(checks, args)]
            stream = None
            if cuda:
                if len(devices) > 1:
                    raise ValueError(f"{name}: tensors are on several GPUs {sorted(devices)}; put them on one")
                stream = stream_of(devices.pop() if devices else torch.cuda.current_device())
            rc = fn(*values, stream)
            if rc:
                failed(rc)
            if last_error is not None:
                last_error()

        call = _fast_path(name, params, fn, checked_call, failed, stream_of, last_error, cuda)
        call.__doc__ = f"{signature}: {launcher['file']}:{launcher['line']}"
        return call

    def _fast_path(name, params, fn, checked_call, failed, stream_of, last_error, cuda):
        """A function specialised to one signature: plain checks inline, a few microseconds a call. Whatever
        they do not accept (wrong dtype, numpy scalars, None pointers...) goes to checked_call."""
        env = {"T": torch.Tensor, "fn": fn, "slow": checked_call, "failed": failed, "stream_of": stream_of,
               "last_error": last_error, "current_device": torch.cuda.current_device}  # fmt: skip
        lines, values, first_tensor = [], [], None
        for i, p in enumerate(params):
            a = f"a{i}"
            if p["kind"] == "pointer":
                dtype = _DTYPES[p["type"]]
                env[f"d{i}"] = dtype
                cond = [f"not isinstance({a}, T)", f"{a}.dtype is not d{i}" if dtype is not None else None,
                        f"not {a}.is_contiguous()", f"not {a}.is_cuda" if cuda else f"not {a}.is_cpu"]  # fmt: skip
                if cuda and first_tensor is not None:
                    cond.append(f"{a}.get_device() != device")
                lines.append(f"if {' or '.join(c for c in cond if c)}: return slow(args)")
                if cuda and first_tensor is None:
                    first_tensor = a
                    lines.append(f"device = {a}.get_device()")
            elif p["type"] in ("float", "double"):
                lines.append(f"if type({a}) is not float and type({a}) is not int: return slow(args)")
            elif p["type"] == "bool":
                lines.append(f"if type({a}) is not bool: return slow(args)")
            else:
                lo, hi = _INT_RANGES[p["type"]]
                lines.append(f"if type({a}) is not int or not {lo} <= {a} <= {hi}: return slow(args)")
            values.append(f"{a}.data_ptr()" if p["kind"] == "pointer" else a)
        stream = f"stream_of({'device' if first_tensor else 'current_device()'})" if cuda else "None"
        body = [
            f"if len(args) != {len(params)}: return slow(args)",
            *([f"{', '.join(f'a{i}' for i in range(len(params)))}, = args"] if params else []),
            *lines,
            f"rc = fn({', '.join([*values, stream])})",
            "if rc: failed(rc)",
            *(["last_error()"] if last_error is not None else []),
        ]
        source = "def call(*args):\n" + "".join(f"    {line}\n" for line in body)
        exec(compile(source, f"<launcher {name}>", "exec"), env)
        call = env["call"]
        call.__name__ = call.__qualname__ = name
        return call

    def _check(launcher: str, param: dict, cuda: bool):
        """A function that validates one argument and returns what ctypes gets for it."""
        name, kind, ctype = param["name"], param["kind"], param["type"]
        c_decl = f"{'const ' if param.get('const') else ''}{ctype}{'*' if kind == 'pointer' else ''}"
        where = f"{launcher}: parameter {name!r} ({c_decl})"
        if kind == "pointer":
            dtype = _DTYPES[ctype]
            want = f"a contiguous {'CUDA' if cuda else 'CPU'} tensor" + (f" of {dtype}" if dtype is not None else "")

            def pointer(arg, devices):
                if not isinstance(arg, torch.Tensor):
                    if arg is None:
                        return None  # NULL, for optional buffers
                    raise TypeError(f"{where} expects {want}, got {type(arg).__name__}")
                if dtype is not None and arg.dtype != dtype:
                    raise TypeError(f"{where} expects {want}, got {arg.dtype}")
                if not arg.is_contiguous():
                    raise ValueError(
                        f"{where} expects {want}, got a non-contiguous tensor (make the output contiguous, or pass "
                        "its strides to your kernel and index with them)"
                    )
                if cuda:
                    if not arg.is_cuda:
                        raise ValueError(f"{where} expects {want}, got a tensor on {arg.device}")
                    devices.add(arg.get_device())
                elif not arg.is_cpu:
                    raise ValueError(f"{where} expects {want} (no CUDA here: host-only mode), got {arg.device}")
                return arg.data_ptr()

            return pointer
        if ctype in ("float", "double"):

            def real(arg, devices):
                if type(arg) is float or type(arg) is int:
                    return arg
                if isinstance(arg, (bool, str, torch.Tensor)) or not hasattr(arg, "__float__"):
                    raise TypeError(f"{where} expects a Python float, got {_describe(arg)}")
                return float(arg)  # numpy floats and the like

            return real
        if ctype == "bool":

            def boolean(arg, devices):
                if type(arg) is bool or (type(arg) is int and arg in (0, 1)):
                    return arg
                raise TypeError(f"{where} expects a bool, got {_describe(arg)}")

            return boolean
        lo, hi = _INT_RANGES[ctype]

        def integer(arg, devices):
            if type(arg) is not int:
                if isinstance(arg, (bool, float, torch.Tensor)) or not hasattr(arg, "__index__"):
                    raise TypeError(f"{where} expects a Python int, got {_describe(arg)}")
                arg = arg.__index__()  # numpy integers and the like
            if not lo <= arg <= hi:
                raise OverflowError(f"{where} expects an integer in [{lo}, {hi}], got {arg}")
            return arg

        return integer

    def _describe(arg) -> str:
        if isinstance(arg, torch.Tensor):
            return "a tensor (pass a Python number, e.g. t.item())"
        return f"{type(arg).__name__} {arg!r}"[:80]

    def _stream_getter():
        raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        return raw or (lambda device: torch.cuda.current_stream(device).cuda_stream)

    def _launch_check(lib, launcher: str, cuda: bool):
        """What runs after each call. On a GPU: raises if CUDA recorded an error (a bad launch config...).
        In host-only mode: raises if the call launched a kernel (the library counts its launches), which
        runs nowhere there; None for a library built without the counter."""
        launches = None if cuda else getattr(lib, "cuda_agent_launches", None)
        if not cuda and launches is None:
            return None
        try:
            read = lib.cuda_agent_last_error
        except AttributeError:
            message = f"{lib._name} lacks cuda_agent_last_error: build it with cuda-agent's build_kernels"
            raise RuntimeError(message) from None
        read.argtypes, read.restype = [ctypes.c_char_p, ctypes.c_int], ctypes.c_int
        buf = ctypes.create_string_buffer(_ERROR_BUF)

        def error() -> str:
            return buf.value.decode(errors="replace") if read(buf, _ERROR_BUF) else ""

        def check() -> None:
            if cuda and (text := error()):
                raise RuntimeError(f"{launcher}: CUDA error at launch: {text}")
            if not cuda and launches():
                # CUDA's error string left out: without a GPU it blames the driver ("insufficient")
                raise RuntimeError(
                    f"{launcher} launched a CUDA kernel: it needs a GPU (host-only mode, no GPU or "
                    "--device cpu, runs launchers on the host, where no kernel runs); launchers "
                    "must loop on the host here"
                )

        if launches is not None:
            launches.argtypes, launches.restype = [], ctypes.c_ulonglong
        return check

    def _error_string(lib):
        fn = getattr(lib, "cuda_agent_error_string", None)
        if fn is None:
            return lambda code: f"cudaError {code}"
        fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
        buf = ctypes.create_string_buffer(_ERROR_BUF)

        def describe(code: int) -> str:
            fn(code, buf, _ERROR_BUF)
            return buf.value.decode(errors="replace")

        return describe

    return load_kernels, load_spec, bind_library, frozenset(_DTYPES), frozenset(_SCALARS)


# The C type names the runtime binds (strings only, for the parser's tests), then nothing else.
load_kernels, _load_spec, _bind_library, _DTYPES, _SCALARS = _runtime()
del _runtime
