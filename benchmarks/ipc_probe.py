"""Can a jailed process (bubblewrap: its own PID, IPC and user namespaces) use GPU memory the
parent allocated, handed over only when a timed call is due? Two routes are tried, the legacy
cuIpc*MemHandle and the VMM API's POSIX file descriptors (inherited by the child), and the cost
of opening and closing one hand-over is timed. Prints one line per route.

    python3 benchmarks/ipc_probe.py            # parent (needs a GPU and bubblewrap)
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

N = 1 << 20  # floats per buffer


def _cu():
    lib = ctypes.CDLL("libcuda.so.1")

    def call(name, *args):
        rc = getattr(lib, name)(*args)
        if rc != 0:
            raise RuntimeError(f"{name} failed: CUresult {rc}")

    return lib, call


class _Loc(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _Flags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _Prop(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Loc),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _Flags),
    ]


class _Access(ctypes.Structure):
    _fields_ = [("location", _Loc), ("flags", ctypes.c_int)]


POSIX_FD, PINNED, DEVICE, RW = 1, 1, 1, 3


def _prop() -> _Prop:
    p = _Prop()
    p.type, p.requestedHandleTypes, p.location.type, p.location.id = PINNED, POSIX_FD, DEVICE, 0
    return p


def _granularity(lib, call, prop) -> int:
    g = ctypes.c_size_t()
    call("cuMemGetAllocationGranularity", ctypes.byref(g), ctypes.byref(prop), 0)
    return g.value


def _map_fd(lib, call, fd: int, size: int) -> tuple[int, int]:
    """Import a parent's allocation from its fd and map it: (pointer, generic handle)."""
    h = ctypes.c_ulonglong()
    call("cuMemImportFromShareableHandle", ctypes.byref(h), ctypes.c_void_p(fd), POSIX_FD)
    return _map(call, h, size), h.value


def _map(call, h, size: int) -> int:
    """Map an allocation's handle into a range of its own, readable and writable here."""
    ptr = ctypes.c_ulonglong()
    call(
        "cuMemAddressReserve",
        ctypes.byref(ptr),
        ctypes.c_size_t(size),
        ctypes.c_size_t(0),
        ctypes.c_ulonglong(0),
        ctypes.c_ulonglong(0),
    )
    call("cuMemMap", ptr, ctypes.c_size_t(size), ctypes.c_size_t(0), h, ctypes.c_ulonglong(0))
    acc = _Access()
    acc.location.type, acc.location.id, acc.flags = DEVICE, 0, RW
    call("cuMemSetAccess", ptr, ctypes.c_size_t(size), ctypes.byref(acc), ctypes.c_size_t(1))
    return ptr.value


def _unmap(lib, call, ptr: int, h: int, size: int) -> None:
    call("cuMemUnmap", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
    call("cuMemAddressFree", ctypes.c_ulonglong(ptr), ctypes.c_size_t(size))
    call("cuMemRelease", ctypes.c_ulonglong(h))


class _Ptr:
    """A device pointer torch can wrap (no copy) through __cuda_array_interface__."""

    def __init__(self, ptr: int, n: int):
        self.__cuda_array_interface__ = {"shape": (n,), "typestr": "<f4", "data": (ptr, False), "version": 3}


def child() -> None:
    import torch

    torch.zeros(1, device="cuda")
    lib, call = _cu()
    req = json.loads(sys.stdin.readline())
    out = {}
    if req.get("fd_in") is not None:
        size = req["size"]
        times = []
        for _ in range(20):
            t = time.perf_counter()
            pin, hin = _map_fd(lib, call, req["fd_in"], size)
            pout, hout = _map_fd(lib, call, req["fd_out"], size)
            x = torch.as_tensor(_Ptr(pin, N), device="cuda")
            y = torch.as_tensor(_Ptr(pout, N), device="cuda")
            torch.mul(x, 2.0, out=y)
            torch.cuda.synchronize()
            _unmap(lib, call, pin, hin, size)
            _unmap(lib, call, pout, hout, size)
            times.append(time.perf_counter() - t)
        out["fd_ms"] = sorted(times)[len(times) // 2] * 1e3
    if req.get("ipc_in") is not None:
        try:
            ptrs = []
            for key in ("ipc_in", "ipc_out"):
                handle = (ctypes.c_byte * 64).from_buffer_copy(bytes.fromhex(req[key]))
                p = ctypes.c_ulonglong()
                call("cuIpcOpenMemHandle_v2", ctypes.byref(p), handle, ctypes.c_uint(1))
                ptrs.append(p.value)
            x = torch.as_tensor(_Ptr(ptrs[0], N), device="cuda")
            y = torch.as_tensor(_Ptr(ptrs[1], N), device="cuda")
            torch.mul(x, 3.0, out=y)
            torch.cuda.synchronize()
            out["ipc"] = "ok"
        except Exception as e:  # noqa: BLE001 - the probe reports what failed
            out["ipc"] = str(e)
    print(json.dumps(out), flush=True)


def parent() -> None:
    import subprocess

    import torch

    from cuda_agent.jail import Jail

    torch.zeros(1, device="cuda")
    lib, call = _cu()
    prop = _prop()
    g = _granularity(lib, call, prop)
    size = ((N * 4 + g - 1) // g) * g
    fds, ptrs = [], []
    for fill in (1.0, 0.0):
        h = ctypes.c_ulonglong()
        call("cuMemCreate", ctypes.byref(h), ctypes.c_size_t(size), ctypes.byref(prop), ctypes.c_ulonglong(0))
        fd = ctypes.c_int()
        call("cuMemExportToShareableHandle", ctypes.byref(fd), h, POSIX_FD, ctypes.c_ulonglong(0))
        p = _map(call, h, size)
        torch.as_tensor(_Ptr(p, N), device="cuda").fill_(fill)
        fds.append(fd.value)
        ptrs.append(p)
    torch.cuda.synchronize()
    # legacy IPC on torch's own allocations
    a = torch.full((N,), 5.0, device="cuda")
    b = torch.zeros(N, device="cuda")
    handles = []
    for t in (a, b):
        hd = (ctypes.c_byte * 64)()
        call("cuIpcGetMemHandle", ctypes.byref(hd), ctypes.c_ulonglong(t.data_ptr()))
        handles.append(bytes(hd).hex())
    for jailed in (True, False):
        jail = Jail(
            gpu=True,
            enabled=jailed,
            readable=[__import__("pathlib").Path.cwd()],
            env={"PYTHONPATH": os.environ.get("PYTHONPATH", os.getcwd())},
        )
        proc = jail.popen(
            [sys.executable, os.path.abspath(__file__), "child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            pass_fds=fds,
            text=True,
        )
        req = {"fd_in": fds[0], "fd_out": fds[1], "size": size, "ipc_in": handles[0], "ipc_out": handles[1]}
        out, _ = proc.communicate(json.dumps(req) + "\n", timeout=120)
        y = torch.as_tensor(_Ptr(ptrs[1], N), device="cuda")
        print(
            f"jailed={jailed} child={out.strip()} fd_out_ok={bool((y == 2.0).all())} "
            f"ipc_out_ok={bool((b == 15.0).all())}",
            flush=True,
        )
        y.zero_()
        b.zero_()
        torch.cuda.synchronize()


if __name__ == "__main__":
    child() if sys.argv[1:] == ["child"] else parent()
