"""Memory the parent owns and lends a jailed judge for one call: a block that holds one batch's
inputs, the parameters and every allocation of the plan, made by the parent after the candidate
is loaded and handed over (a file descriptor on a Unix socket) only when the call is due.

The judge maps the block, replays the plan on it and unmaps it; its outputs are already in the
parent's memory when it answers, so nothing it reports about them is needed. On the host the
block is a memfd; on a GPU it is a CUDA VMM allocation exported as a POSIX file descriptor
(cuMemExportToShareableHandle), which works across the jail's namespaces, unlike cudaIpc handles.
"""

from __future__ import annotations

import ctypes
import fcntl
import mmap
import os
import socket
from typing import Any

ALIGN = 256  # every region starts here: any dtype view of it is aligned, as cudaMalloc's are


def pack(sizes: list[int]) -> tuple[list[int], int]:
    """Offsets for regions of `sizes` bytes laid one after the other, each aligned; and the total."""
    offsets, end = [], 0
    for n in sizes:
        offsets.append(end)
        end += -(-max(n, 1) // ALIGN) * ALIGN
    return offsets, max(end, ALIGN)


def typed(region, dtype: str):
    """A uint8 region viewed as `dtype` (a plan's dtype name), its tail short of one element left out."""
    import torch

    from cuda_agent.eval.plan import ELEMENT_SIZE

    size = ELEMENT_SIZE[dtype]
    return region[: (region.numel() // size) * size].view(getattr(torch, dtype))


def strided(typed, shape: list[int], stride: list[int], offset: int):
    """A view of `typed` (a typed view of one region) at `offset` elements from the region's start:
    as_strided's own offset counts from the start of the whole block."""
    return typed.as_strided(shape, stride, typed.storage_offset() + offset)


# -- sending and receiving ------------------------------------------------------------------
def send_fd(sock: socket.socket, fd: int) -> None:
    socket.send_fds(sock, [b"b"], [fd])


def receive_fd(sock: socket.socket, timeout: float = 30.0) -> int:
    sock.settimeout(timeout)
    _, fds, _, _ = socket.recv_fds(sock, 1, 4)
    if len(fds) != 1:
        for fd in fds:
            os.close(fd)
        raise RuntimeError(f"expected one block, received {len(fds)} file descriptors")
    return fds[0]


# -- host blocks ---------------------------------------------------------------------------
class _HostMemory:
    def __init__(self, nbytes: int, fd: int | None = None):
        self.nbytes = nbytes
        if fd is None:
            fd = os.memfd_create("cuda-agent-block", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            os.ftruncate(fd, nbytes)
            # its size is fixed before the judge has it: a judge that shrank it would leave the parent's
            # mapping a SIGBUS where it reads back; and no seal it adds itself (writes) can hold the parent
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL)
        elif os.fstat(fd).st_size < nbytes:
            os.close(fd)
            raise RuntimeError("the block is smaller than its layout says")
        self.fd = fd
        self.map = mmap.mmap(fd, nbytes)

    def tensor(self):
        import torch

        return torch.frombuffer(self.map, dtype=torch.uint8, count=self.nbytes)

    def close(self) -> None:
        try:
            self.map.close()
        except BufferError:  # a tensor still views it: the mapping goes with the last reference
            pass
        os.close(self.fd)


# -- GPU blocks (the driver's virtual memory management API, through ctypes) ---------------
class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocFlags(ctypes.Structure):
    _fields_ = [
        ("compressionType", ctypes.c_ubyte),
        ("gpuDirectRDMACapable", ctypes.c_ubyte),
        ("usage", ctypes.c_ushort),
        ("reserved", ctypes.c_ubyte * 4),
    ]


class _AllocProp(ctypes.Structure):
    _fields_ = [
        ("type", ctypes.c_int),
        ("requestedHandleTypes", ctypes.c_int),
        ("location", _Location),
        ("win32HandleMetaData", ctypes.c_void_p),
        ("allocFlags", _AllocFlags),
    ]


class _AccessDesc(ctypes.Structure):
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_PINNED, _POSIX_FD, _ON_DEVICE, _READ_WRITE = 1, 1, 1, 3
_driver: Any = None


def _cu(name: str, *args) -> None:
    global _driver
    if _driver is None:
        _driver = ctypes.CDLL("libcuda.so.1")
    rc = getattr(_driver, name)(*args)
    if rc != 0:
        raise RuntimeError(f"{name} failed (CUresult {rc})")


# the flag block's 32-bit words (byte offsets), the same in the parent and the judge: the parent writes
# `go = k` when batch k's inputs are in, the judge writes `done = k` behind its reps
GO_OFFSET = 0
DONE_OFFSET = 4
_WAIT_GEQ = 0  # CU_STREAM_WAIT_VALUE_GEQ
_WRITE_DEFAULT = 0  # CU_STREAM_WRITE_VALUE_DEFAULT


def wait_value(stream: int, addr: int, value: int) -> None:
    """Queue on `stream` a wait until the 32-bit word at device address `addr` is >= `value`
    (cuStreamWaitValue32): work queued after it starts only then, whichever process writes it."""
    _cu(
        "cuStreamWaitValue32_v2",
        ctypes.c_void_p(stream),
        ctypes.c_ulonglong(addr),
        ctypes.c_uint32(value),
        ctypes.c_uint(_WAIT_GEQ),
    )


def write_value(stream: int, addr: int, value: int) -> None:
    """Queue on `stream` a write of `value` to the 32-bit word at `addr`, once the work before it is done."""
    _cu(
        "cuStreamWriteValue32_v2",
        ctypes.c_void_p(stream),
        ctypes.c_ulonglong(addr),
        ctypes.c_uint32(value),
        ctypes.c_uint(_WRITE_DEFAULT),
    )


def _ordinal(device: str) -> int:
    import torch

    return torch.device(device).index if torch.device(device).index is not None else torch.cuda.current_device()


class _DeviceMemory:
    """A VMM allocation mapped into this process: created and exported (the parent), or imported
    from a descriptor (the judge)."""

    def __init__(self, nbytes: int, device: str, fd: int | None = None):
        import torch

        torch.cuda.init()
        self.device = device
        prop = _AllocProp()
        prop.type, prop.requestedHandleTypes = _PINNED, _POSIX_FD
        prop.location.type, prop.location.id = _ON_DEVICE, _ordinal(device)
        gran = ctypes.c_size_t()
        _cu("cuMemGetAllocationGranularity", ctypes.byref(gran), ctypes.byref(prop), 0)
        self.size = -(-nbytes // gran.value) * gran.value
        self.nbytes = nbytes
        self.handle = ctypes.c_ulonglong()
        if fd is None:
            _cu(
                "cuMemCreate",
                ctypes.byref(self.handle),
                ctypes.c_size_t(self.size),
                ctypes.byref(prop),
                ctypes.c_ulonglong(0),
            )
            out = ctypes.c_int()
            _cu("cuMemExportToShareableHandle", ctypes.byref(out), self.handle, _POSIX_FD, ctypes.c_ulonglong(0))
            fd = out.value
        else:
            _cu("cuMemImportFromShareableHandle", ctypes.byref(self.handle), ctypes.c_void_p(fd), _POSIX_FD)
        self.fd = fd
        self.ptr = ctypes.c_ulonglong()
        _cu(
            "cuMemAddressReserve",
            ctypes.byref(self.ptr),
            ctypes.c_size_t(self.size),
            ctypes.c_size_t(0),
            ctypes.c_ulonglong(0),
            ctypes.c_ulonglong(0),
        )
        _cu("cuMemMap", self.ptr, ctypes.c_size_t(self.size), ctypes.c_size_t(0), self.handle, ctypes.c_ulonglong(0))
        access = _AccessDesc()
        access.location.type, access.location.id, access.flags = _ON_DEVICE, prop.location.id, _READ_WRITE
        _cu("cuMemSetAccess", self.ptr, ctypes.c_size_t(self.size), ctypes.byref(access), ctypes.c_size_t(1))

    def tensor(self):
        import torch

        holder = _Interface(self.ptr.value, self.nbytes)
        return torch.as_tensor(holder, device=self.device)

    def close(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)  # nothing queued may still touch the range
        _cu("cuMemUnmap", self.ptr, ctypes.c_size_t(self.size))
        _cu("cuMemAddressFree", self.ptr, ctypes.c_size_t(self.size))
        _cu("cuMemRelease", self.handle)
        os.close(self.fd)


class _Interface:
    """A device range torch can view without copying (`__cuda_array_interface__`, no stream)."""

    def __init__(self, ptr: int, nbytes: int):
        self.__cuda_array_interface__ = {"shape": (nbytes,), "typestr": "|u1", "data": (ptr, False), "version": 2}


class _Held:
    """The bytes of blocks this process made (not those lent to it): torch's allocator does not
    count them, so the verdict's memory figures read this."""

    live = 0
    peak = 0

    @classmethod
    def add(cls, n: int) -> None:
        cls.live += n
        cls.peak = max(cls.peak, cls.live)

    @classmethod
    def reset_peak(cls) -> None:
        cls.peak = cls.live


held = _Held


class Block:
    """One lent block: `tensor` is a uint8 view of all of it; `region(offset, n)` a part."""

    def __init__(self, nbytes: int, device: str, fd: int | None = None):
        self.device = device
        self.memory = _DeviceMemory(nbytes, device, fd) if device.startswith("cuda") else _HostMemory(nbytes, fd)
        self.tensor = self.memory.tensor()
        self.nbytes = nbytes
        self.owned = fd is None
        if self.owned:
            held.add(nbytes)

    @property
    def fd(self) -> int:
        return self.memory.fd

    @property
    def base(self) -> int:
        return self.tensor.data_ptr()

    def region(self, offset: int, nbytes: int):
        return self.tensor[offset : offset + nbytes]

    def close(self) -> None:
        if self.tensor is None:
            return
        self.tensor = None
        self.memory.close()
        if self.owned:
            held.add(-self.nbytes)

    def __enter__(self) -> Block:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
