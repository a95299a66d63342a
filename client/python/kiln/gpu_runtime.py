"""Runs a CompiledGraph for a CUDA target on PyTorch tensors.

    runtime = GpuRuntime(artifact)          # a kiln.v1.CompiledGraph for cuda:sm_90
    outputs = runtime.run([x, w, 16])       # tensors on the GPU, symbolic ints as ints

Loading checks every module against its digest, loads the cubins (kiln.cuda) into the
device's primary context, resolves every kernel and parses every expression once. A run
binds the symbols from the inputs (the plan at those values is evaluated once and kept:
kiln.bound_plan), checks the inputs against the plan, takes one arena for
intermediates and workspaces and one allocation per output from PyTorch's caching
allocator, and runs the steps in order on PyTorch's current stream: kernels through the
driver, extern and fallback steps as ATen ops through PyTorch, copies and write-backs with
copy_. Outputs are views with the sizes, strides and aliasing the plan gives; an output
that aliases an input is a view of the caller's tensor.

Kernels that draw random numbers (dropout) get the run's Philox seed and offset; the offset
advances by the plan's increment every run, so runs draw fresh numbers. Extern and fallback
ops draw from PyTorch's own generator.

Errors: RuntimeLoadError for an artifact this runtime cannot run (wrong target, a module
whose bytes do not match its digest, a kernel the cubin lacks, an expression that does not
parse), InputMismatch for inputs that do not fit the plan (naming the input), and
kiln.cuda.CudaError from the driver. A step that fails raises StepFailed naming the step
(a driver error stays a CudaError, its message prefixed with the step).
"""

from __future__ import annotations

import hashlib
import itertools
import struct
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from kiln import cuda
from kiln.aten import resolve_op, torch_dtype
from kiln.bound_plan import (BUFFER_INPUT, PARAM_BUFFER, PARAM_RNG_OFFSET, PARAM_RNG_SEED,
                             PARAM_SCALAR, PARAM_SYMBOL, BoundPlan, Call, InputMismatch,
                             StepFailed)
from kiln.cuda_graphs import GraphedPlan
from kiln.products import matmul_settings
from kiln.symexpr import Evaluator, ExprError, compile_expr, compile_symint

# InputMismatch and StepFailed are what run() raises.
__all__ = ["GpuRuntime", "InputMismatch", "RuntimeLoadError", "StepFailed"]

_BINARY_CUBIN, _BINARY_PTX = 1, 2
# Bound plans kept per runtime, by symbol values: a dynamic dimension that takes many values
# (a last partial batch, varying sequence lengths) binds again past this many.
_BOUND_PLANS = 16


class RuntimeLoadError(ValueError):
    """An artifact this runtime cannot run; the message says what and where."""


@dataclass
class _View:
    buffer: int
    dtype: Any
    itemsize: int
    sizes: list[Evaluator]
    strides: list[Evaluator]
    offset: Evaluator


@dataclass
class _Kernel:
    name: str
    function: cuda.Function
    params: list[tuple[int, Any]]
    grid: list[Evaluator]
    block: list[Evaluator]
    shared_bytes: int


@dataclass
class _Buffer:
    kind: int
    size: Evaluator
    offset: Evaluator
    alignment: int
    input_index: int
    name: str


@dataclass
class _Step:
    kind: str
    label: str
    kernel: int = -1
    call: Optional[Call] = None
    src: Optional[_View] = None
    dst: Optional[_View] = None
    input_index: int = -1


@dataclass
class _Output:
    kind: str  # "none", "symbol" or "view"
    view: Optional[_View] = None
    symbol: Optional[Evaluator] = None


@dataclass
class _InputSpec:
    name: str
    symbolic: bool
    dtype: Any = None
    sizes: list[Evaluator] = field(default_factory=list)
    strides: list[Evaluator] = field(default_factory=list)


class GpuRuntime:
    """A loaded CUDA CompiledGraph; run() may be called any number of times. `saved_from`
    is the index of its first output that only autograd reads (a forward's saved values, from
    AOTAutograd's count; a backward's gradients, from 0), which CUDA-graph replays hand out in
    place however small (kiln.cuda_graphs)."""

    def __init__(self, artifact: Any, device: Any = None,
                 process_groups: Sequence[str] = (), cudagraphs: bool = False,
                 log: Optional[Callable[[str], None]] = None,
                 saved_from: Optional[int] = None) -> None:
        import torch  # noqa: PLC0415

        if not artifact.target.startswith("cuda:"):
            raise RuntimeLoadError(f"artifact is for {artifact.target!r}, not a CUDA target")
        self.device = torch.device(device if device is not None else "cuda")
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        self.compile_key = artifact.compile_key
        self.process_groups = list(process_groups)
        self.symbols = list(artifact.symbols)
        self._expr_cache: dict[str, Evaluator] = {}
        self._modules = self._load_modules(artifact)
        self.kernels = [self._kernel(artifact, i) for i in range(len(artifact.kernels))]
        self.buffers = [self._buffer(b) for b in artifact.buffers]
        self.steps = [self._step(artifact, i) for i in range(len(artifact.steps))]
        self.outputs = [self._output(o) for o in artifact.outputs]
        self.inputs = [self._input_spec(s) for s in artifact.inputs]
        self.sources = [(s.input_index, s.dim, s.from_stride) for s in artifact.symbol_sources]
        self.workspace = self._symint(artifact.cudagraph.workspace_bytes, "workspace bytes")
        # Inputs some kernel reads or writes: those must be on the plan's device.
        self.kernel_inputs = {self.buffers[b].input_index for k in self.kernels
                               for kind, b in k.params
                               if kind == PARAM_BUFFER and self.buffers[b].kind == BUFFER_INPUT}
        self.rng_increment = int(artifact.cudagraph.rng_offset_increment)
        self._rng_offset = itertools.count(0, max(1, self.rng_increment))
        self._bound: OrderedDict[tuple, BoundPlan] = OrderedDict()
        self.static_inputs = set(artifact.cudagraph.static_inputs)
        self.saved_from = saved_from
        self.log = log
        self.graph_refusal = self._graph_refusal(artifact) if cudagraphs else "not asked for"

    # Loading.

    def _graph_refusal(self, artifact: Any) -> Optional[str]:
        """Why runs of this plan are not captured in CUDA graphs (None when they are)."""
        import torch  # noqa: PLC0415

        from kiln.v1 import artifact_pb2  # noqa: PLC0415

        if getattr(torch._C, "_storage_Use_Count", None) is None:
            # A replay's outputs are views of the graph's pool; without it, whether the caller
            # still holds one is unknown.
            return f"PyTorch {torch.__version__} lacks torch._C._storage_Use_Count"
        info = artifact.cudagraph
        blockers = [r for r in info.reasons
                    if r.blocker != artifact_pb2.CAPTURE_BLOCKER_DYNAMIC_SHAPE]
        if blockers:  # dynamic shapes alone are captured per set of sizes
            return "; ".join(f"{r.node or 'plan'}: {r.detail}" for r in blockers)
        if any(kind in (PARAM_RNG_SEED, PARAM_RNG_OFFSET) for k in self.kernels
               for kind, _ in k.params):
            # Extern and fallback ops draw from PyTorch's generator, which graphs handle.
            return "its kernels draw random numbers (the seed and offset are launch parameters)"
        return None

    def _expr(self, text: str, where: str) -> Evaluator:
        try:
            if text not in self._expr_cache:
                self._expr_cache[text] = compile_expr(text, self.symbols)
            return self._expr_cache[text]
        except ExprError as e:
            raise RuntimeLoadError(f"{where}: {e}") from e

    def _symint(self, s: Any, where: str) -> Evaluator:
        if s.WhichOneof("kind") == "expr":
            return self._expr(s.expr, where)
        return compile_symint(s, self.symbols)

    def _load_modules(self, artifact: Any) -> dict[int, cuda.Module]:
        used = {k.module for k in artifact.kernels}
        modules: dict[int, cuda.Module] = {}
        for i, m in enumerate(artifact.modules):
            digest = hashlib.sha256(m.binary).hexdigest()
            if digest != m.digest.hash or len(m.binary) != m.digest.size_bytes:
                raise RuntimeLoadError(f"module {i}: its bytes do not match its digest "
                                       f"({digest[:16]}... against {m.digest.hash[:16]}...)")
            if i not in used:
                continue
            if m.kind not in (_BINARY_CUBIN, _BINARY_PTX):
                raise RuntimeLoadError(f"module {i}: kind {m.kind} is neither cubin nor PTX")
            modules[i] = cuda.Module(bytes(m.binary), self.device.index)
        return modules

    def _view(self, v: Any, where: str) -> Optional[_View]:
        if v.buffer < 0:
            return None
        dtype = torch_dtype(v.dtype)
        return _View(v.buffer, dtype, dtype.itemsize,
                     [self._symint(x, where) for x in v.sizes],
                     [self._symint(x, where) for x in v.strides], self._symint(v.offset, where))

    def _kernel(self, artifact: Any, i: int) -> _Kernel:
        k = artifact.kernels[i]
        where = f"kernel {i} ({k.name})"
        if k.module not in self._modules:
            raise RuntimeLoadError(f"{where}: module {k.module} does not exist")
        try:
            function = self._modules[k.module].function(k.name)
        except cuda.CudaError as e:
            raise RuntimeLoadError(f"{where}: {e}") from e
        params: list[tuple[int, Any]] = []
        for p in k.params:
            if p.kind == PARAM_BUFFER:
                params.append((p.kind, p.buffer))
            elif p.kind == PARAM_SYMBOL:
                if p.symbol not in self.symbols:
                    raise RuntimeLoadError(f"{where}: unknown symbol {p.symbol!r}")
                params.append((p.kind, self.symbols.index(p.symbol)))
            elif p.kind == PARAM_SCALAR:
                value = p.scalar
                if value.WhichOneof("kind") == "float_value":
                    params.append((p.kind, struct.unpack("<q", struct.pack("<d",
                                                                           value.float_value))[0]))
                else:
                    params.append((p.kind, int(getattr(value, value.WhichOneof("kind") or
                                                       "int_value"))))
            elif p.kind in (PARAM_RNG_SEED, PARAM_RNG_OFFSET):
                params.append((p.kind, None))
            else:
                raise RuntimeLoadError(f"{where}: parameter kind {p.kind} is not supported")
        grid = [self._symint(g, where) for g in k.launch.grid]
        block = [self._symint(b, where) for b in k.launch.block]
        if len(grid) != 3 or len(block) != 3:
            raise RuntimeLoadError(f"{where}: grid and block need three extents each")
        return _Kernel(k.name, function, params, grid, block, int(k.launch.shared_memory_bytes))

    def _buffer(self, b: Any) -> _Buffer:
        where = f"buffer {b.name}"
        return _Buffer(b.kind, self._symint(b.size_bytes, where),
                       self._symint(b.arena_offset, where), max(1, b.alignment), b.input_index,
                       b.name)

    def _argument(self, a: Any, where: str) -> Any:
        kind = a.WhichOneof("kind")
        if kind == "tensor":
            return ("view", self._view(a.tensor, where))
        if kind == "list":
            return ("list", [self._argument(x, where) for x in a.list.items])
        return ("value", a.value)

    def _call(self, c: Any, where: str, collective: bool) -> Call:
        try:
            op = resolve_op(c.op)
        except ValueError as e:
            raise RuntimeLoadError(f"{where}: {e}") from e
        return Call(op, c.op, [self._argument(a, where) for a in c.args],
                     [(k.name, self._argument(k.value, where)) for k in c.kwargs],
                     [self._view(o, where) for o in c.outputs], collective)

    def _step(self, artifact: Any, i: int) -> _Step:
        s = artifact.steps[i]
        kind = s.WhichOneof("kind")
        if kind == "launch":
            if not 0 <= s.launch.kernel < len(self.kernels):
                raise RuntimeLoadError(f"step {i}: kernel {s.launch.kernel} does not exist")
            return _Step("launch", f"step {i} (kernel {self.kernels[s.launch.kernel].name})",
                         kernel=s.launch.kernel)
        if kind in ("extern_call", "fallback"):
            c = getattr(s, kind)
            label = f"step {i} ({'extern' if kind == 'extern_call' else 'fallback'} {c.op}, " \
                    f"node {c.node})"
            return _Step("call", label, call=self._call(c, label, kind == "extern_call" and
                                                         c.collective))
        if kind == "copy":
            return _Step("copy", f"step {i} (copy)", src=self._view(s.copy.src, f"step {i}"),
                         dst=self._view(s.copy.dst, f"step {i}"))
        if kind == "write_back":
            return _Step("write_back", f"step {i} (write-back of input {s.write_back.input_index})",
                         src=self._view(s.write_back.src, f"step {i}"),
                         input_index=s.write_back.input_index)
        if kind == "free":
            return _Step("free", f"step {i} (free)")
        raise RuntimeLoadError(f"step {i}: kind {kind} is not supported")

    def _output(self, o: Any) -> _Output:
        if o.none:
            return _Output("none")
        if o.symbol:
            return _Output("symbol", symbol=self._expr(o.symbol, "output"))
        return _Output("view", view=self._view(o.view, "output"))

    def _input_spec(self, s: Any) -> _InputSpec:
        if s.symbolic:
            return _InputSpec(s.name, True)
        if s.dtype == 0:
            return _InputSpec(s.name, False)
        return _InputSpec(s.name, False, torch_dtype(s.dtype),
                          [self._symint(x, f"input {s.name}") for x in s.sizes],
                          [self._symint(x, f"input {s.name}") for x in s.strides])

    # Running.

    def bind_symbols(self, inputs: Sequence[Any]) -> list[int]:
        """The symbols' values, read from the inputs as the plan's symbol sources say."""
        values = [0] * len(self.symbols)
        for sym, (index, dim, from_stride) in enumerate(self.sources):
            if index >= len(inputs):
                raise InputMismatch(f"{len(inputs)} inputs given; symbol {self.symbols[sym]} "
                                    f"is read from input {index}")
            x = inputs[index]
            if dim < 0:
                values[sym] = int(x)
            else:
                values[sym] = int(x.stride(dim) if from_stride else x.size(dim))
        return values

    def bound(self, s: list[int], group_launches: bool = True) -> BoundPlan:
        """The plan bound to symbol values `s`, made on first use and kept (see
        _BOUND_PLANS)."""
        # PyTorch's settings of matrix products, which the plan's cuBLASLt products bind.
        settings = matmul_settings()
        key = (tuple(s), group_launches, settings)
        plan = self._bound.get(key)
        if plan is None:
            plan = self._bound[key] = BoundPlan(self, s, group_launches, settings)
            if len(self._bound) > _BOUND_PLANS:
                self._bound.popitem(last=False)
        else:
            self._bound.move_to_end(key)
        return plan

    def run(self, inputs: Sequence[Any], rng_seed: Optional[int] = None,
            rng_offset: Optional[int] = None,
            after_step: Optional[Callable[[int, Callable[..., Any]], None]] = None) -> list[Any]:
        """Runs the plan on `inputs` (one per graph input, in order) and returns the outputs.
        `after_step(i, buffer_view)`, for debugging, is called after step i with a function
        buffer_view(buffer, dtype, sizes, strides) viewing a buffer's memory as a tensor."""
        import torch  # noqa: PLC0415

        plan = self.bound(self.bind_symbols(inputs), group_launches=after_step is None)
        if rng_seed is None:
            rng_seed = torch.initial_seed()
        if rng_offset is None:
            rng_offset = next(self._rng_offset)
        if self.graph_refusal is None and after_step is None:
            if plan.graphed is None:
                plan.graphed = GraphedPlan(plan, self.static_inputs, self.log,
                                           self.saved_from)
            return plan.graphed.run(inputs, rng_seed, rng_offset)  # checks the inputs
        return plan.run(inputs, rng_seed, rng_offset, after_step)  # checks the inputs

    def bind_groups(self, target: str, args: list[Any],
                     kwargs: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
        """Canonical group names pgN become this process's N-th group."""

        def real(v: Any) -> Any:
            if isinstance(v, str) and v.startswith("pg") and v[2:].isdigit():
                n = int(v[2:])
                if n >= len(self.process_groups):
                    raise ValueError(f"{target} uses process group {v}, but the runtime was "
                                     f"given {len(self.process_groups)} group(s)")
                return self.process_groups[n]
            return v

        return [real(a) for a in args], {k: real(v) for k, v in kwargs.items()}
