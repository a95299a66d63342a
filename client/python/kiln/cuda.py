"""Kiln's CUDA runtime library (client/runtime/cuda/kiln_cuda.h) through ctypes.

The library loads cubins into a device's primary context (PyTorch's) and launches their
kernels on a given stream; it opens the CUDA driver itself, so this module imports on any
machine and only a call that needs the driver fails there, with the driver's reason.

Where the library comes from, in order: $KILN_RUNTIME_LIBRARY, the copy inside the package
(kiln/lib/libkiln_runtime.so, see kiln.native), libkiln_runtime.so on the loader's path.
"""

from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Optional, Sequence

from kiln.native import RUNTIME_LIBRARY, runtime_library

MAX_PARAMS = 256
_ERROR_BYTES = 1024


# Codes of the library's own failures (kiln_cuda.h).
ERROR_NO_BLAS = 100003

# Element types and flags of a matrix product (kiln_cuda_gemm_desc).
GEMM_F32, GEMM_F16, GEMM_BF16 = 0, 1, 2
GEMM_TF32, GEMM_REDUCED_REDUCTION, GEMM_BIAS = 1, 2, 4


class _GemmDesc(ctypes.Structure):
    """kiln_cuda_gemm_desc."""

    _fields_ = [("dtype", ctypes.c_int32), ("flags", ctypes.c_int32),
                ("batch", ctypes.c_uint64), ("m", ctypes.c_uint64), ("n", ctypes.c_uint64),
                ("k", ctypes.c_uint64), ("a_strides", ctypes.c_int64 * 3),
                ("b_strides", ctypes.c_int64 * 3), ("d_strides", ctypes.c_int64 * 3),
                ("offsets", ctypes.c_uint64 * 4), ("alignments", ctypes.c_uint32 * 4),
                ("workspace_bytes", ctypes.c_uint64)]


class CudaError(RuntimeError):
    """A failed runtime call: `code` is the driver's CUresult (or one of the library's own
    codes above 100000) and the message names the call."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


class _Library:
    def __init__(self, path: str) -> None:
        lib = ctypes.CDLL(path, mode=ctypes.RTLD_LOCAL)
        err = [ctypes.c_char_p, ctypes.c_size_t]
        vp = ctypes.c_void_p
        lib.kiln_cuda_open.argtypes = [ctypes.POINTER(ctypes.c_int)] + err
        lib.kiln_cuda_module_load.argtypes = [ctypes.c_int, vp, ctypes.c_size_t,
                                              ctypes.POINTER(vp)] + err
        lib.kiln_cuda_module_unload.argtypes = [vp]
        lib.kiln_cuda_module_unload.restype = None
        lib.kiln_cuda_module_function.argtypes = [vp, ctypes.c_char_p, ctypes.POINTER(vp)] + err
        lib.kiln_cuda_function_attributes.argtypes = [vp] + [ctypes.POINTER(ctypes.c_int)] * 3 + err
        lib.kiln_cuda_launch.argtypes = [vp, ctypes.POINTER(ctypes.c_uint32),
                                         ctypes.POINTER(ctypes.c_uint32), ctypes.c_uint32, vp,
                                         ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t] + err
        # Every argument an address or a size: a run passes ints it worked out once
        # (LaunchSequence.run), which ctypes converts fastest.
        lib.kiln_cuda_launch_sequence.argtypes = [vp, ctypes.c_size_t, vp, ctypes.c_size_t, vp,
                                                  vp, vp, ctypes.c_size_t]
        lib.kiln_cuda_blas_open.argtypes = [ctypes.POINTER(ctypes.c_size_t)] + err
        lib.kiln_cuda_gemm_create.argtypes = [ctypes.c_int, ctypes.POINTER(_GemmDesc),
                                              ctypes.POINTER(vp)] + err
        lib.kiln_cuda_gemm_destroy.argtypes = [vp]
        lib.kiln_cuda_gemm_destroy.restype = None
        for fn in (lib.kiln_cuda_open, lib.kiln_cuda_module_load, lib.kiln_cuda_module_function,
                   lib.kiln_cuda_function_attributes, lib.kiln_cuda_launch,
                   lib.kiln_cuda_launch_sequence, lib.kiln_cuda_blas_open,
                   lib.kiln_cuda_gemm_create):
            fn.restype = ctypes.c_int
        self.lib = lib
        self.path = path


_lock = threading.Lock()
_library: Optional[_Library] = None


def library_path() -> str:
    """The library this process loads (see the module's docstring)."""
    explicit = os.environ.get("KILN_RUNTIME_LIBRARY")
    if explicit:
        return explicit
    bundled = runtime_library()
    return str(bundled) if bundled is not None else RUNTIME_LIBRARY


def _lib() -> ctypes.CDLL:
    global _library
    with _lock:
        if _library is None:
            path = library_path()
            try:
                _library = _Library(path)
            except OSError as e:
                raise CudaError(-1, f"cannot load Kiln's runtime library {path}: {e}") from e
        return _library.lib


def _call(fn: ctypes._CFuncPtr, *args: object) -> None:  # type: ignore[name-defined]
    buf = ctypes.create_string_buffer(_ERROR_BYTES)
    code = fn(*args, buf, _ERROR_BYTES)
    if code != 0:
        raise CudaError(code, buf.value.decode("utf-8", "replace"))


def driver_version() -> int:
    """The CUDA driver's version (13000 for CUDA 13.0); opens the driver."""
    version = ctypes.c_int(0)
    _call(_lib().kiln_cuda_open, ctypes.byref(version))
    return version.value


class Function:
    """A kernel entry of a loaded Module; valid while the module is."""

    def __init__(self, module: "Module", handle: int, name: str) -> None:
        self.module = module
        self.handle = handle
        self.name = name

    def attributes(self) -> dict[str, int]:
        """registers, static_shared_bytes and max_threads_per_block, as the driver says."""
        values = [ctypes.c_int(0) for _ in range(3)]
        _call(_lib().kiln_cuda_function_attributes, self.handle, *map(ctypes.byref, values))
        return {"registers": values[0].value, "static_shared_bytes": values[1].value,
                "max_threads_per_block": values[2].value}


class _Owned:
    """An object of the library's, freed (`_free`) by close() or when collected."""

    handle: Optional[int] = None

    def _free(self, handle: int) -> None:
        raise NotImplementedError

    def close(self) -> None:
        if self.handle is not None:
            self._free(self.handle)
            self.handle = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: the library may be gone already
            pass


class Module(_Owned):
    """One cubin (or PTX) loaded on a device; unloaded by close() or when collected."""

    def __init__(self, image: bytes, device: int = 0) -> None:
        self._lib = _lib()
        handle = ctypes.c_void_p()
        self._image = image  # the driver copies it; kept only to pin the buffer during the call
        _call(self._lib.kiln_cuda_module_load, device, image, len(image), ctypes.byref(handle))
        self.handle: Optional[int] = handle.value
        self.device = device

    def function(self, name: str) -> Function:
        if self.handle is None:
            raise CudaError(-1, f"module is closed; cannot look up {name}")
        handle = ctypes.c_void_p()
        _call(self._lib.kiln_cuda_module_function, self.handle, name.encode(), ctypes.byref(handle))
        return Function(self, handle.value or 0, name)

    def _free(self, handle: int) -> None:
        self._lib.kiln_cuda_module_unload(handle)


def launch(function: Function, grid: Sequence[int], block: Sequence[int], shared_bytes: int,
           stream: int, params: Sequence[int]) -> None:
    """Launches `function` on `stream` (a cudaStream_t as an int; 0 is the legacy default
    stream). `params` are the kernel's 8-byte parameters in order: device pointers and int64
    values (negative ones are passed as their two's complement)."""
    if len(params) > MAX_PARAMS:
        raise CudaError(-1, f"{function.name}: {len(params)} parameters, more than {MAX_PARAMS}")
    g = (ctypes.c_uint32 * 3)(*grid)
    b = (ctypes.c_uint32 * 3)(*block)
    p = (ctypes.c_uint64 * max(1, len(params)))(*(v & 0xFFFFFFFFFFFFFFFF for v in params))
    _call(_lib().kiln_cuda_launch, function.handle, g, b, shared_bytes, stream, p, len(params))


def blas_version() -> int:
    """cuBLASLt's version (130100 for 13.1), opening it as the library's products do; raises
    CudaError (code ERROR_NO_BLAS) where the process has none."""
    version = ctypes.c_size_t(0)
    _call(_lib().kiln_cuda_blas_open, ctypes.byref(version))
    return version.value


class Gemm(_Owned):
    """A matrix product prepared with cuBLASLt once and run by LaunchSequences (kiln_cuda_gemm
    of kiln_cuda.h): D[i] = A[i] B[i] (+ a bias of n elements added to every row), A[i] m x k,
    B[i] k x n, for i < batch, each operand described by its strides in elements over (batch,
    row, column), its offset in bytes from its slot's address and the alignment its address
    is expected to have. Raises CudaError naming what cuBLASLt cannot do; freed by close() or
    when collected."""

    def __init__(self, device: int, dtype: int, flags: int, batch: int, m: int, n: int, k: int,
                 strides: Sequence[Sequence[int]], offsets: Sequence[int],
                 alignments: Sequence[int], workspace_bytes: int) -> None:
        self._lib = _lib()
        desc = _GemmDesc(dtype=dtype, flags=flags, batch=batch, m=m, n=n, k=k,
                         workspace_bytes=workspace_bytes)
        desc.a_strides[:], desc.b_strides[:], desc.d_strides[:] = (list(x) for x in strides)
        desc.offsets[:] = list(offsets) + [0] * (4 - len(offsets))
        desc.alignments[:] = list(alignments) + [0] * (4 - len(alignments))
        handle = ctypes.c_void_p()
        _call(self._lib.kiln_cuda_gemm_create, device, ctypes.byref(desc), ctypes.byref(handle))
        self.handle: Optional[int] = handle.value
        self.params = 5 if flags & GEMM_BIAS else 4
        self.name = f"matrix product {batch}x{m}x{n}x{k}"

    def _free(self, handle: int) -> None:
        self._lib.kiln_cuda_gemm_destroy(handle)


@dataclass(frozen=True)
class Copy:
    """A copy on the device in a LaunchSequence: `bytes` from its source slot's address plus
    `src_offset` to its destination slot's plus `dst_offset` (a write-back of a mutated
    input)."""

    bytes: int
    dst_offset: int = 0
    src_offset: int = 0
    params = 2  # the destination's slot, then the source's

    @property
    def name(self) -> str:
        return f"copy of {self.bytes} bytes"


class _LaunchRecord(ctypes.Structure):
    """kiln_cuda_launch_record."""

    _fields_ = [("function", ctypes.c_void_p), ("grid", ctypes.c_uint32 * 3),
                ("block", ctypes.c_uint32 * 3), ("shared_bytes", ctypes.c_uint32),
                ("param_count", ctypes.c_uint32), ("param_slots", ctypes.POINTER(ctypes.c_uint32)),
                ("gemm", ctypes.c_void_p), ("copy_bytes", ctypes.c_uint64),
                ("copy_offsets", ctypes.c_uint64 * 2)]


class SequenceFailed(CudaError):
    """A launch of a LaunchSequence failed; `index` is the launch's place in the sequence."""

    def __init__(self, code: int, message: str, index: int) -> None:
        super().__init__(code, message)
        self.index = index


class SlotTable:
    """The values of a run's parameter slots (8-byte values: pointers, int64s as two's
    complement) as the library reads them, made once per run and read by every
    LaunchSequence of it: converting a plan's thousand slots costs tens of microseconds,
    too much to pay per sequence."""

    def __init__(self, values: Sequence[int]) -> None:
        self.count = len(values)
        self.array = (ctypes.c_uint64 * max(1, self.count))(
            *(v & 0xFFFFFFFFFFFFFFFF for v in values))
        self.address = ctypes.addressof(self.array)

    @classmethod
    def copy_of(cls, other: "SlotTable") -> "SlotTable":
        """A table of `other`'s values, to change without changing `other` (one copy of its
        memory, not a conversion per value)."""
        table = cls.__new__(cls)
        table.count = other.count
        table.array = type(other.array).from_buffer_copy(other.array)
        table.address = ctypes.addressof(table.array)
        return table


_thread_status = threading.local()


class _Status:
    """A thread's place for a failed sequence's index and message, with their addresses."""

    def __init__(self) -> None:
        self.failed = ctypes.c_size_t(0)
        self.message = ctypes.create_string_buffer(_ERROR_BYTES)
        self.failed_address = ctypes.addressof(self.failed)
        self.message_address = ctypes.addressof(self.message)


def _sequence_status() -> _Status:
    """This thread's _Status, made once: a run launches its sequences one after another,
    and each reads it only when it failed."""
    status = getattr(_thread_status, "value", None)
    if status is None:
        status = _thread_status.value = _Status()
    return status


class LaunchSequence:
    """Kernel launches, matrix products and device copies made once and run many times with
    one call into the library: each parameter names a slot of a table that every run fills
    (buffer addresses, the RNG seed and offset, symbol values), so a run's host work is one
    call, not one per kernel.

        seq = LaunchSequence([(function, grid, block, shared_bytes, [slot, ...]),
                              (gemm, [a, b, d, workspace]), (Copy(n), [dst, src]), ...])
        seq.run(SlotTable(slot_values), stream)
    """

    def __init__(self, launches: Sequence[tuple]) -> None:
        self._launch_sequence = _lib().kiln_cuda_launch_sequence
        self.functions = [launch[0] for launch in launches]  # kept alive with their modules
        self.count = len(launches)
        self._records = (_LaunchRecord * max(1, self.count))()
        self._records_address = ctypes.addressof(self._records)
        self._slots = []
        for record, launch in zip(self._records, launches):
            slots = launch[-1]
            what = launch[0]
            if isinstance(what, (Gemm, Copy)) and len(slots) != what.params:
                raise CudaError(-1, f"{what.name}: {len(slots)} parameters, not {what.params}")
            if len(slots) > MAX_PARAMS:
                raise CudaError(-1, f"{what.name}: {len(slots)} parameters, more than "
                                    f"{MAX_PARAMS}")
            table = (ctypes.c_uint32 * max(1, len(slots)))(*slots)
            self._slots.append(table)
            record.param_count = len(slots)
            record.param_slots = table
            if isinstance(what, Gemm):
                record.gemm = what.handle
                continue
            if isinstance(what, Copy):
                if what.bytes <= 0:
                    raise CudaError(-1, f"{what.name}: nothing to copy")
                record.copy_bytes = what.bytes
                record.copy_offsets[:] = [what.dst_offset, what.src_offset]
                continue
            _, grid, block, shared_bytes, _ = launch
            record.function = what.handle
            record.grid[:] = list(grid)
            record.block[:] = list(block)
            record.shared_bytes = shared_bytes

    def run(self, slots: "SlotTable | Sequence[int]", stream: int) -> None:
        """Launches every kernel in order on `stream`, parameters from `slots` (a SlotTable,
        or the values to make one of). Raises SequenceFailed naming the launch that failed;
        the ones before it were launched."""
        if self.count == 0:
            return
        table = slots if isinstance(slots, SlotTable) else SlotTable(slots)
        status = _sequence_status()
        code = self._launch_sequence(self._records_address, self.count, table.address,
                                     table.count, stream, status.failed_address,
                                     status.message_address, _ERROR_BYTES)
        if code != 0:
            raise SequenceFailed(code, status.message.value.decode("utf-8", "replace"),
                                 status.failed.value)
