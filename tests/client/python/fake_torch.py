"""A stand-in for the few parts of PyTorch that kiln.gpu_runtime uses, so that its plan
bookkeeping (symbols, buffers, pointers, launch geometry, input checks, the ATen ops extern
steps call) runs in CI, where there is no PyTorch: tensors are views (storage, offset, sizes,
strides) of storages that are plain address ranges; nothing holds data. ATen ops record their
calls in `calls`, and copy_ records its copies in `copies`. install() puts it in sys.modules
as `torch`.
"""

from __future__ import annotations

import itertools
import sys
import types
import weakref
from typing import Any, Optional, Sequence


class dtype:  # noqa: N801 (PyTorch's name)
    def __init__(self, name: str, itemsize: int) -> None:
        self.name = name
        self.itemsize = itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"


class device:  # noqa: N801
    def __init__(self, kind: Any, index: Optional[int] = None) -> None:
        if isinstance(kind, device):
            kind, index = kind.type, kind.index
        if isinstance(kind, str) and ":" in kind:
            kind, index = kind.split(":")[0], int(kind.split(":")[1])
        self.type = kind
        self.index = index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, device) and (self.type, self.index) == (other.type, other.index)

    def __repr__(self) -> str:
        return f"{self.type}:{self.index}" if self.index is not None else self.type


_addresses = itertools.count(0x7F0000000000, 1 << 32)
# Every storage alive, by its _cdata (torch._C._storage_Use_Count's argument).
_storages: "weakref.WeakValueDictionary[int, UntypedStorage]" = weakref.WeakValueDictionary()


class UntypedStorage:
    def __init__(self, nbytes: int, where: device, base: Optional[int] = None) -> None:
        self.base = next(_addresses) if base is None else base
        self._nbytes = nbytes
        self.device = where
        # The tensors over it, which with this object make its use count.
        self._users: "weakref.WeakSet[Tensor]" = weakref.WeakSet()
        self._cdata = id(self)
        _storages[self._cdata] = self

    def data_ptr(self) -> int:
        return self.base

    def nbytes(self) -> int:
        return self._nbytes


class Tensor:
    def __init__(self, storage: UntypedStorage, kind: dtype, offset: int,
                 sizes: Sequence[int], strides: Sequence[int]) -> None:
        self._storage, self.dtype, self._offset = storage, kind, offset
        self.shape, self._strides = list(sizes), list(strides)
        self.device = storage.device
        storage._users.add(self)

    def set_(self, storage: UntypedStorage, offset: int, sizes: Sequence[int],
             strides: Sequence[int]) -> "Tensor":
        self._storage._users.discard(self)
        storage._users.add(self)
        self._storage, self._offset = storage, offset
        self.shape, self._strides = list(sizes), list(strides)
        self.device = storage.device
        return self

    def untyped_storage(self) -> UntypedStorage:
        return self._storage

    def storage_offset(self) -> int:
        return self._offset

    def element_size(self) -> int:
        return self.dtype.itemsize

    def size(self, d: Optional[int] = None) -> Any:
        return tuple(self.shape) if d is None else self.shape[d]

    def stride(self, d: Optional[int] = None) -> Any:
        return list(self._strides) if d is None else self._strides[d]

    def data_ptr(self) -> int:
        return self._storage.data_ptr() + self._offset * self.dtype.itemsize

    def copy_(self, src: "Tensor") -> "Tensor":
        copies.append((self, src))
        return self

    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def as_strided(self, sizes: Sequence[int], strides: Sequence[int],
                   offset: int = 0) -> "Tensor":
        return Tensor(self._storage, self.dtype, offset, sizes, strides)

    def view(self, kind: dtype) -> "Tensor":
        """A flat byte tensor read as `kind` (the only view(dtype) the runtime makes)."""
        assert self.dtype.itemsize == 1 and self._offset == 0
        return Tensor(self._storage, kind, 0, [self.numel() // kind.itemsize], [1])

    def clone(self) -> "Tensor":
        out = empty(self.shape, dtype=self.dtype, device=self.device)
        copies.append((out, self))
        return out


class Parameter(Tensor):
    """torch.nn.Parameter: a tensor that a module holds (here over `data`'s memory)."""

    def __init__(self, data: Tensor) -> None:
        super().__init__(data._storage, data.dtype, data._offset, data.shape, data._strides)


nn = types.SimpleNamespace(Parameter=Parameter)


# (destination, source) of every Tensor.copy_, in order.
copies: list[tuple[Tensor, Tensor]] = []
# (target, args, kwargs) of every call of an op under torch.ops, in order.
calls: list[tuple[str, tuple, dict]] = []
# The number of tensors of every torch._foreach_copy_ call, in order (its copies are in
# `copies`).
foreach_copies: list[int] = []


def _foreach_copy_(destinations: list, sources: list) -> None:
    assert isinstance(destinations, list) and isinstance(sources, list)
    assert len(destinations) == len(sources)
    foreach_copies.append(len(destinations))
    for d, s in zip(destinations, sources):
        assert d.dtype is s.dtype and tuple(d.shape) == tuple(s.shape), (d, s)
        copies.append((d, s))


class _OpOverload:
    """torch.ops.<namespace>.<op>.<overload>: records each call and returns what `result`
    makes of the arguments."""

    def __init__(self, target: str, result: Any) -> None:
        self.target = target
        self._result = result
        # The dispatch keys it has a kernel of its own for.
        self.kernels = {"CUDA"}

    def has_kernel_for_dispatch_key(self, key: str) -> bool:
        return key in self.kernels

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        calls.append((self.target, args, kwargs))
        return self._result(*args, **kwargs)


def _embedding_dense_backward(grad: Tensor, indices: Tensor, num_weights: int,
                              padding_idx: int, scale_grad_by_freq: bool) -> Tensor:
    return empty([num_weights, grad.shape[-1]], dtype=grad.dtype, device=grad.device)


# Every result of aten.mm.default, in order; while mm_column_major holds a value, mm returns
# its product column-major.
mm_results: list[Tensor] = []
mm_column_major: list[bool] = []


def _mm(a: Tensor, b: Tensor) -> Tensor:
    rows, cols = a.shape[0], b.shape[1]
    out = (empty_strided([rows, cols], [1, rows], a.dtype, a.device) if mm_column_major else
           empty([rows, cols], dtype=a.dtype, device=a.device))
    mm_results.append(out)
    return out


def _mm_out(a: Tensor, b: Tensor, *, out: Tensor) -> Tensor:
    return out


_Argument = types.SimpleNamespace
_mm_out_op = _OpOverload("aten.mm.out", _mm_out)
_mm_out_op._schema = types.SimpleNamespace(arguments=[
    _Argument(name="self", is_out=False), _Argument(name="mat2", is_out=False),
    _Argument(name="out", is_out=True)])

def _addmm(bias: Tensor, a: Tensor, b: Tensor, **scales: Any) -> Tensor:
    return empty([a.shape[0], b.shape[1]], dtype=a.dtype, device=a.device)


def _packet(**overloads: Any) -> types.SimpleNamespace:
    """torch.ops.aten.<op>: its overloads by name, and overloads() listing them."""
    return types.SimpleNamespace(**overloads, overloads=lambda: list(overloads))


ops = types.SimpleNamespace(aten=types.SimpleNamespace(
    embedding_dense_backward=_packet(default=_OpOverload(
        "aten.embedding_dense_backward.default", _embedding_dense_backward)),
    mm=_packet(default=_OpOverload("aten.mm.default", _mm), out=_mm_out_op),
    # addmm's real packet has a dtype overload too: it has no binding the runtime calls.
    addmm=_packet(default=_OpOverload("aten.addmm.default", _addmm),
                  dtype=_OpOverload("aten.addmm.dtype", _addmm))))


def _bound_embedding_dense_backward(*args: Any, **kwargs: Any) -> Tensor:
    """torch.embedding_dense_backward, PyTorch's own binding: recorded as a call."""
    calls.append(("torch.embedding_dense_backward", args, kwargs))
    return _embedding_dense_backward(*args, **kwargs)


def empty(*sizes: Any, dtype: dtype = None, device: Any = "cpu") -> Tensor:  # noqa: A002
    shape = list(sizes[0]) if sizes and isinstance(sizes[0], (list, tuple)) else list(sizes)
    kind = dtype or float32
    n = 1
    for s in shape:
        n *= s
    strides, acc = [], 1
    for s in reversed(shape):
        strides.insert(0, acc)
        acc *= max(s, 1)
    where = device if isinstance(device, globals()["device"]) else globals()["device"](device)
    return Tensor(UntypedStorage(n * kind.itemsize, where), kind, 0, shape, strides)


def empty_strided(sizes: Sequence[int], strides: Sequence[int], dtype: dtype,
                  device: Any, storage_offset: int = 0) -> Tensor:  # noqa: A002
    span = storage_offset + 1 + sum((s - 1) * st for s, st in zip(sizes, strides))
    where = device if isinstance(device, globals()["device"]) else globals()["device"](device)
    return Tensor(UntypedStorage(span * dtype.itemsize, where), dtype, storage_offset, sizes,
                  strides)


float32, float16, bfloat16 = dtype("float32", 4), dtype("float16", 2), dtype("bfloat16", 2)
float64, int64, int32 = dtype("float64", 8), dtype("int64", 8), dtype("int32", 4)
uint8, bool_ = dtype("uint8", 1), dtype("bool", 1)


class _Stream:
    cuda_stream = 0x5EED


class CUDAGraph:
    """A graph's stand-in: what ran while it was being captured ran once, for real (the
    stand-in driver recorded it); a replay only counts."""

    def __init__(self) -> None:
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1


class _Capturing:
    def __init__(self, graph: CUDAGraph, pool: Any = None) -> None:
        self.graph = graph

    def __enter__(self) -> CUDAGraph:
        return self.graph

    def __exit__(self, *exc: Any) -> None:
        pass


cuda = types.SimpleNamespace(current_device=lambda: 0, current_stream=lambda where=None: _Stream(),
                             CUDAGraph=CUDAGraph, graph=_Capturing,
                             graph_pool_handle=lambda: (0, 1), synchronize=lambda where=None: None)


# torch.backends.cuda.matmul's settings of matrix products, PyTorch's defaults.
backends = types.SimpleNamespace(cuda=types.SimpleNamespace(matmul=types.SimpleNamespace(
    allow_tf32=False, allow_bf16_reduced_precision_reduction=True,
    allow_fp16_reduced_precision_reduction=True)))


class StorageWeakRef:
    """torch.multiprocessing.reductions.StorageWeakRef over the stand-in's storages."""

    def __init__(self, storage: UntypedStorage) -> None:
        import weakref

        self.ref = weakref.ref(storage)

    def expired(self) -> bool:
        return self.ref() is None


def _construct_cuda_tensor(meta: dict, storage: UntypedStorage) -> Tensor:
    return Tensor(storage, meta["dtype"], meta["storage_offset"], meta["size"], meta["stride"])


def _storage_use_count(cdata: int) -> int:
    """References to a storage: its Python object's and its tensors' (PyTorch counts them
    the same way: each holds the StorageImpl once)."""
    storage = _storages[cdata]
    return 1 + len(storage._users)


def _tensors_data_ptrs_at_indices_equal(tensors: list, pointers: list, indices: list) -> bool:
    assert isinstance(tensors, list)  # PyTorch's takes a list, nothing else
    for i in indices:
        if not isinstance(tensors[i], Tensor):
            raise RuntimeError("Unable to cast Python instance to C++ type")  # as pybind11's
        if tensors[i].data_ptr() != pointers[i]:
            return False
    return True


# Calls of the constructors Inductor's generated code uses (torch._C._dynamo.guards), by name.
fast_calls: list[str] = []
# The tensors of each TensorGuards.check call, in order.
guard_checks: list[tuple] = []


class TensorGuards:
    """Dynamo's tensor guards (torch._C._dynamo.guards.TensorGuards): made from tensors,
    check() says whether others have their type, dtype, device, sizes and strides."""

    def __init__(self, *tensors: Tensor, dynamic_dims_sizes: Any,
                 dynamic_dims_strides: Any) -> None:
        assert dynamic_dims_sizes is None and dynamic_dims_strides is None
        self._seen = [self._key(t) for t in tensors]

    @staticmethod
    def _key(t: Any) -> tuple:
        return (type(t), t.dtype, repr(t.device), tuple(t.shape), tuple(t.stride()))

    def check(self, *tensors: Any) -> bool:
        guard_checks.append(tensors)
        return [self._key(t) for t in tensors] == self._seen


def _empty_strided_cuda(sizes: tuple, strides: tuple, kind: dtype) -> Tensor:
    # PyTorch's parses exact tuples and allocates on the current device.
    assert type(sizes) is tuple and type(strides) is tuple, (sizes, strides)
    fast_calls.append("_empty_strided_cuda")
    return empty_strided(sizes, strides, kind, device("cuda", cuda.current_device()))


def _reinterpret_tensor(base: Tensor, sizes: Sequence[int], strides: Sequence[int],
                        offset_increment: int = 0) -> Tensor:
    fast_calls.append("_reinterpret_tensor")
    return Tensor(base._storage, base.dtype, base._offset + offset_increment, sizes, strides)


_C = types.SimpleNamespace(DispatchKey=types.SimpleNamespace(CUDA="CUDA"),
                           _construct_storage_from_data_pointer=lambda address, where, nbytes:
                           UntypedStorage(nbytes, where, base=address),
                           _construct_CUDA_Tensor_From_Storage_And_Metadata=_construct_cuda_tensor,
                           _tensors_data_ptrs_at_indices_equal=_tensors_data_ptrs_at_indices_equal,
                           _storage_Use_Count=_storage_use_count,
                           # torch.mm and the like: writes to out= are recorded as calls.
                           _VariableFunctions=types.SimpleNamespace(
                               mm=lambda a, b, *, out: calls.append(
                                   ("torch.mm", (a, b), {"out": out})) or out,
                               embedding_dense_backward=_bound_embedding_dense_backward),
                           _dynamo=types.SimpleNamespace(guards=types.SimpleNamespace(
                               _empty_strided_cuda=_empty_strided_cuda,
                               _reinterpret_tensor=_reinterpret_tensor,
                               TensorGuards=TensorGuards)))


def initial_seed() -> int:
    return 1234


def install() -> types.ModuleType:
    """The stand-in as `torch`; the one installed already when a test module before did."""
    existing = sys.modules.get("torch")
    if getattr(existing, "_stand_in", False):
        return existing
    module = types.ModuleType("torch")
    module._stand_in = True
    for name, value in list(globals().items()):
        if not name.startswith("__"):
            setattr(module, name, value)
    module.bool = bool_
    module.__path__ = []  # a package, for `import torch._dynamo`
    # `import kiln` registers the backend with Dynamo where PyTorch is installed; the
    # stand-in says it is registered already.
    dynamo = types.ModuleType("torch._dynamo")
    dynamo.list_backends = lambda exclude_tags=(): ["kiln"]
    module._dynamo = dynamo
    sys.modules["torch"] = module
    sys.modules["torch._dynamo"] = dynamo
    reductions = types.ModuleType("torch.multiprocessing.reductions")
    reductions.StorageWeakRef = StorageWeakRef
    sys.modules["torch.multiprocessing"] = types.ModuleType("torch.multiprocessing")
    sys.modules["torch.multiprocessing.reductions"] = reductions
    return module
