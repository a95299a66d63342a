"""A GpuRuntime's plan with its symbols bound to values, ready to run many times.

    plan = BoundPlan(runtime, symbol_values)     # once per distinct set of symbol values
    plan.check_inputs(inputs)
    outputs = plan.run(inputs, seed, offset)

Binding evaluates every expression of the plan once: input sizes and strides to check, buffer
sizes and arena offsets, tensor views, launch grids and blocks, the constant arguments of
extern and fallback ops. Kernel launches that follow one another in the plan become one
kiln.cuda.LaunchSequence, whose parameters are slots of a table each run fills (buffer
addresses, the RNG seed and offset) beside the constants binding fixed (symbol values,
scalars): a run's host work is allocating, one library call per run of kernels, and the ATen
calls of the other steps. The plan's matrix products (kiln.products) and its write-backs of
mutated inputs (a batch norm's running statistics: a device copy each, where the new value
and the input are dense and of one dtype) run inside those sequences too.

An extern or fallback op with one tensor result writes it where the plan keeps it: through
the op's `out=` overload, once the first run has shown its result has the view's dtype and
shape, and when the view does not overlap the op's tensor arguments (the plan may give an
output the memory of an input that dies at that step, which an op reading while it writes
must not see). Not through an out= overload that PyTorch generates for an op without one
(convolution.out), which runs the op and copies its result into out: such a result, as one
of an op without out=, is kept as its buffer's memory where it fits (BoundPlan._learn_adoption)
and copied into the view otherwise, as are results on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from kiln import aten_calls, cuda, products
from kiln.aten import constant, resolve_op
from kiln.input_guard import InputGuard
from kiln.products import GEMM_WORKSPACE_BYTES

BUFFER_INPUT, BUFFER_OUTPUT, BUFFER_INTERMEDIATE, BUFFER_WORKSPACE = 1, 2, 3, 4
PARAM_BUFFER, PARAM_SYMBOL, PARAM_SCALAR, PARAM_RNG_SEED, PARAM_RNG_OFFSET = 1, 2, 3, 4, 5
_U64 = (1 << 64) - 1

# Ops whose argument at this position is a storage offset into their first argument's
# storage.
STORAGE_OFFSET_ARG = {"aten.as_strided.default": 3, "aten.as_strided_copy.default": 3,
                      "aten.as_strided_scatter.default": 4}


class InputMismatch(ValueError):
    """Inputs that do not fit the plan; the message names the input."""


class StepFailed(RuntimeError):
    """A plan step that failed; the message names the step, the cause is chained."""


@dataclass
class BoundView:
    """A tensor view of a buffer, every extent an int. `offset` counts elements."""

    buffer: int
    dtype: Any
    itemsize: int
    offset: int
    sizes: list[int]
    strides: list[int]

    def byte_range(self, base: int) -> tuple[int, int]:
        """The bytes [start, end) the view can touch, `base` being its buffer's start."""
        if any(s == 0 for s in self.sizes):
            return base, base
        low = high = self.offset
        for size, stride in zip(self.sizes, self.strides):
            if stride >= 0:
                high += (size - 1) * stride
            else:
                low += (size - 1) * stride
        return base + low * self.itemsize, base + (high + 1) * self.itemsize


@dataclass
class _InputCheck:
    index: int
    name: str
    dtype: Any
    sizes: tuple[int, ...]
    strides: tuple[int, ...]
    # The dimensions whose stride matters (size above 1), or None when all do.
    stride_dims: Optional[list[int]]
    on_kernel: bool


@dataclass
class Call:
    """An extern or fallback step: the op and its arguments, as loaded (views of
    gpu_runtime's with expressions) or bound (BoundViews)."""

    op: Callable[..., Any]
    target: str
    args: list[Any]
    kwargs: list[tuple[str, Any]]
    outputs: list[Any]
    collective: bool
    # The op's out= overload while it may be used; None when it may not (or is not known to
    # fit yet, with `out_checked` False).
    out_op: Optional[Callable[..., Any]] = None
    # torch's own binding of the op, called instead of `op` until it refuses the arguments
    # (aten_calls.binding); None where there is none.
    fast: Optional[Callable[..., Any]] = None
    out_checked: bool = False
    # Bound calls without list arguments: the arguments with every view None, and where each
    # view goes (a position, or a keyword), so a run fills in tensors without walking them.
    flat_args: Optional[list[Any]] = None
    flat_kwargs: Optional[dict[str, Any]] = None
    view_args: list[tuple[Any, BoundView]] = field(default_factory=list)
    # Results a run may keep as their buffers (see BoundPlan._mark_adoptable): by output position,
    # the strides the first run's result had, once it fitted.
    may_adopt: set[int] = field(default_factory=set)
    adopt: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def tensor_args(self) -> list[BoundView]:
        """Every view among the call's arguments, in lists too."""
        return _tensor_views(self.args + [a for _, a in self.kwargs])

    def flatten(self) -> None:
        if any(kind == "list" for kind, _ in self.args + [a for _, a in self.kwargs]):
            return
        self.flat_args = [None if kind == "view" else payload for kind, payload in self.args]
        self.flat_kwargs = {name: None if kind == "view" else payload
                            for name, (kind, payload) in self.kwargs}
        self.view_args = [(i, payload) for i, (kind, payload) in enumerate(self.args)
                          if kind == "view" and payload is not None]
        self.view_args += [(name, payload) for name, (kind, payload) in self.kwargs
                           if kind == "view" and payload is not None]


@dataclass
class _Segment:
    kind: str  # "launches", "call", "copy", "write_back"
    steps: list[int]
    launches: Optional[cuda.LaunchSequence] = None
    call: Optional[Call] = None
    src: Optional[BoundView] = None
    dst: Optional[BoundView] = None
    input_index: int = -1
    # What a run does just before this segment for the buffers no earlier one touches, so
    # that the GPU starts on the first kernels while the host works through the rest: the
    # output buffers it allocates, the inputs it checks and the input buffers whose
    # addresses it puts in the slot table (buffer, input index).
    allocates: list[int] = field(default_factory=list)
    checks: list[_InputCheck] = field(default_factory=list)
    input_slots: list[tuple[int, int]] = field(default_factory=list)
    prepares: bool = False  # any of the three


class BoundPlan:
    """The runtime's plan at one set of symbol values `s` (see the module's docstring).
    `group_launches=False` makes each launch its own segment, for after_step callbacks."""

    def __init__(self, runtime: Any, s: list[int], group_launches: bool = True,
                 matmul_settings: Optional[tuple[Optional[bool], ...]] = None) -> None:
        self.runtime = runtime
        self.s = s
        self.symbol_values = dict(zip(runtime.symbols, s))
        self.arena_bytes = -(-max(0, runtime.workspace(s)) // 16) * 16
        self.buffer_kinds = [b.kind for b in runtime.buffers]
        self.input_of_buffer = [b.input_index for b in runtime.buffers]
        # Whole multiples of 16 bytes, so any dtype can view the allocation.
        self.output_bytes = [-(-max(0, b.size(s)) // max(16, b.alignment)) * max(16, b.alignment)
                             if b.kind == BUFFER_OUTPUT else 0 for b in runtime.buffers]
        self.arena_offsets = [b.offset(s) if b.kind in (BUFFER_INTERMEDIATE, BUFFER_WORKSPACE)
                              else 0 for b in runtime.buffers]
        self.checks = self._input_checks()
        self.input_guard = InputGuard([c.index for c in self.checks])
        # Slots: buffer addresses, the RNG seed and offset, the products' workspace, then
        # constants.
        self._constants: dict[int, int] = {}
        self._seed_slot = len(runtime.buffers)
        self._offset_slot = self._seed_slot + 1
        self._workspace_slot = self._offset_slot + 1
        # Matrix products run by cuBLASLt inside launch sequences (see _product), write-backs
        # run there as device copies (_write_back_copy), and the buffers each such step
        # touches.
        self.matmul_settings = matmul_settings or products.matmul_settings()
        self.products = 0
        self._products_wanted = products.wanted()
        self._record_buffers: dict[int, set[int]] = {}
        # Why each product that stays an ATen call does, in step order.
        self.product_refusals: list[str] = []
        self.segments = self._segments(group_launches)
        if self.product_refusals and runtime.log is not None:
            runtime.log(f"{len(self.product_refusals)} of "
                        f"{len(self.product_refusals) + self.products} matrix products run as "
                        f"ATen calls, not through cuBLASLt; the first because "
                        f"{self.product_refusals[0]}")
        # The products share one workspace at the arena's end; they run one after another.
        self._workspace_offset = -(-self.arena_bytes // 256) * 256
        if self.products:
            self.arena_bytes = self._workspace_offset + GEMM_WORKSPACE_BYTES
        self.buffer_bytes = [b.size(s) for b in runtime.buffers]
        self._mark_adoptable()
        # Output buffers a result is kept as: a run allocates them only when it is not.
        self.adopted_outputs: set[int] = set()
        self.constant_slots = [v & _U64 for v in self._constants]
        # A run's slot table starts as a copy of this one (constants in place) and fills in
        # the addresses: arena buffers at the arena's start plus their offset, inputs,
        # outputs, then the RNG seed and offset.
        self._slot_template = cuda.SlotTable([0] * (self._workspace_slot + 1) +
                                             self.constant_slots)
        self._arena_slots = [(b, self.arena_offsets[b]) for b, kind in
                             enumerate(self.buffer_kinds)
                             if kind in (BUFFER_INTERMEDIATE, BUFFER_WORKSPACE)]
        if self.products:
            self._arena_slots.append((self._workspace_slot, self._workspace_offset))
        self._input_slots = [(b, self.input_of_buffer[b]) for b, kind in
                             enumerate(self.buffer_kinds) if kind == BUFFER_INPUT]
        self.output_buffers = [b for b, kind in enumerate(self.buffer_kinds)
                               if kind == BUFFER_OUTPUT]
        self._untouched_outputs, self._late_checks = self._place_first_uses()
        self.outputs = [self._output(o) for o in runtime.outputs]
        self.typed_outputs = self._typed_outputs()
        self.returned_inputs = self._returned_inputs()
        self.graphed: Any = None  # its kiln.cuda_graphs.GraphedPlan, when runs are captured
        self._empty_cuda, self._reinterpret = aten_calls.fast_constructors()

    # Binding.

    def _view(self, v: Any) -> Optional[BoundView]:
        if v is None:
            return None
        s = self.s
        return BoundView(v.buffer, v.dtype, v.itemsize, v.offset(s), [e(s) for e in v.sizes],
                         [e(s) for e in v.strides])

    def _typed_outputs(self) -> dict[int, BoundView]:
        """Output buffers that hold exactly one output view, by buffer: a run allocates such a
        buffer as that tensor (torch.empty_strided) and returns it as it is, instead of a
        flat allocation and a tensor set over it (two calls fewer per output: a forward
        returns hundreds)."""
        found: dict[int, BoundView] = {}
        for kind, v in self.outputs:
            if kind != "view" or v is None or v.buffer in found:
                continue
            b = v.buffer
            if self.buffer_kinds[b] != BUFFER_OUTPUT or any(st < 0 for st in v.strides):
                continue
            size = self.runtime.buffers[b].size(self.s)
            if size > 0 and v.offset == 0 and v.byte_range(0) == (0, size):
                found[b] = v
        return found

    def _input_checks(self) -> list[_InputCheck]:
        checks = []
        for index, spec in enumerate(self.runtime.inputs):
            if spec.dtype is None:
                continue
            sizes = tuple(e(self.s) for e in spec.sizes)
            strides = tuple(e(self.s) for e in spec.strides)
            dims = [d for d, size in enumerate(sizes) if size > 1]
            checks.append(_InputCheck(index, spec.name, spec.dtype, sizes, strides,
                                      None if len(dims) == len(sizes) else dims,
                                      index in self.runtime.kernel_inputs))
        return checks

    def _slot(self, value: int) -> int:
        if value not in self._constants:
            self._constants[value] = len(self._constants)
        return self._workspace_slot + 1 + self._constants[value]

    def _launch(self, kernel: Any) -> Optional[tuple]:
        """The kernel's launch with slots for parameters; None when its grid is empty."""
        s = self.s
        grid = [e(s) for e in kernel.grid]
        if min(grid) <= 0:
            return None  # nothing to compute: a dimension of size 0
        slots = []
        for kind, payload in kernel.params:
            if kind == PARAM_BUFFER:
                slots.append(payload)
            elif kind == PARAM_SYMBOL:
                slots.append(self._slot(s[payload]))
            elif kind == PARAM_SCALAR:
                slots.append(self._slot(payload))
            elif kind == PARAM_RNG_SEED:
                slots.append(self._seed_slot)
            else:
                slots.append(self._offset_slot)
        return (kernel.function, grid, [e(s) for e in kernel.block], kernel.shared_bytes, slots)

    def _argument(self, a: tuple[str, Any]) -> tuple[str, Any]:
        kind, payload = a
        if kind == "view":
            return ("view", self._view(payload))
        if kind == "list":
            return ("list", [self._argument(x) for x in payload])
        return ("value", constant(payload, lambda r: None, self.symbol_values,
                                  self.runtime.device))

    def _call(self, c: Any) -> Call:
        call = Call(c.op, c.target, [self._argument(a) for a in c.args],
                    [(k, self._argument(a)) for k, a in c.kwargs],
                    [self._view(o) for o in c.outputs], c.collective)
        call.flatten()
        if not c.collective:
            call.fast = aten_calls.binding(c.target)
        return call

    def _product(self, index: int, c: Any) -> Optional[tuple]:
        """Step `index`, call `c`, as a matrix product of a launch sequence (kiln.products), or
        None when it stays an ATen call. The product writes its view in place, so the view
        must be neither an input's memory nor over an operand's."""
        if c.collective or c.target not in products.TARGETS or len(c.outputs) != 1:
            return None
        if not self._products_wanted:
            return self._refuse("KILN_PRODUCTS=aten")
        out = self._view(c.outputs[0])
        p = products.describe(c.target, [self._argument(a) for a in c.args],
                              {k: self._argument(a) for k, a in c.kwargs}, out,
                              self.matmul_settings)
        if p is None:
            return self._refuse(f"{c.target} has a scale, a bias that is not one row, or an "
                                "element type or PyTorch setting the products do not take")
        if self.buffer_kinds[out.buffer] == BUFFER_INPUT:
            return self._refuse(f"{c.target} writes an input")
        start, end = out.byte_range(self.arena_offsets[out.buffer])
        for v in p.operands[:2] + p.operands[3:]:
            if self._shares_storage(v.buffer, out.buffer):
                lo, hi = v.byte_range(self.arena_offsets[v.buffer])
                if lo < end and start < hi:
                    return self._refuse(f"{c.target} writes over an operand")
        # An operand's address is its buffer's plus its offset; arena buffers sit at their
        # offsets in an arena aligned to 256 bytes, like every allocation.
        offsets = [v.offset * v.itemsize for v in p.operands]
        alignments = [_alignment(self.arena_offsets[v.buffer] + offset)
                      for v, offset in zip(p.operands, offsets)]
        try:
            gemm = cuda.Gemm(self.runtime.device.index or 0, p.dtype, p.flags, p.batch, p.m,
                             p.n, p.k, p.strides, offsets, alignments, GEMM_WORKSPACE_BYTES)
        except cuda.CudaError as e:  # no cuBLASLt, or none of its algorithms
            return self._refuse(str(e))
        # The product reads its inputs where they are: they must be on the plan's device.
        read = {self.input_of_buffer[v.buffer] for v in p.operands
                if self.buffer_kinds[v.buffer] == BUFFER_INPUT}
        for check in self.checks:
            check.on_kernel = check.on_kernel or check.index in read
        self.products += 1
        self._record_buffers[index] = {v.buffer for v in p.operands}
        buffers = [v.buffer for v in p.operands]
        return (gemm, buffers[:3] + [self._workspace_slot] + buffers[3:])

    def _write_back_copy(self, index: int, step: Any) -> Optional[tuple]:
        """Write-back step `index` as a device copy of a launch sequence, or None when it stays
        a copy_ call: the new value and the input must have one dtype and sizes, both laid out
        densely in row-major order (the input as the plan expects it, which its check holds
        every run to), and the value must not be the input's own memory. The input's address
        is its slot's, the tensor's first element, as for kernels."""
        src = self._view(step.src)
        check = next((c for c in self.checks if c.index == step.input_index), None)
        buffer = next((b for b, kind in enumerate(self.buffer_kinds) if kind == BUFFER_INPUT
                       and self.input_of_buffer[b] == step.input_index), None)
        if src is None or check is None or buffer is None or src.buffer == buffer or \
                src.dtype != check.dtype or tuple(src.sizes) != check.sizes or \
                not _dense(src.sizes, src.strides) or not _dense(check.sizes, check.strides):
            return None
        count = 1
        for size in src.sizes:
            count *= size
        if count == 0:
            return None
        check.on_kernel = True  # the copy reads and writes it where it is
        self._record_buffers[index] = {src.buffer, buffer}
        return (cuda.Copy(count * src.itemsize, 0, src.offset * src.itemsize),
                [buffer, src.buffer])

    def _input_writing_steps(self) -> set[int]:
        """The steps that write inputs: write-backs, and for a run of write-backs whose values
        are their inputs' own memory, the last step before the run but frees (the kernel that
        stored them, as the plan's format says)."""
        steps = self.runtime.steps
        found: set[int] = set()
        for i, step in enumerate(steps):
            if step.kind != "write_back":
                continue
            found.add(i)
            if self._written_in_place(step):
                j = i
                while j > 0 and steps[j].kind in ("write_back", "free"):
                    j -= 1
                found.add(j)
        return found

    def _written_in_place(self, step: Any) -> bool:
        """Whether write-back `step`'s new value is its input's own memory (the compiler's
        batched copy, or a kernel, stored it there)."""
        src = step.src
        return src is not None and self.buffer_kinds[src.buffer] == BUFFER_INPUT and \
            self.input_of_buffer[src.buffer] == step.input_index

    def _refuse(self, why: str) -> None:
        self.product_refusals.append(why)
        return None

    def _segments(self, group_launches: bool) -> list[_Segment]:
        segments: list[_Segment] = []
        pending: list[tuple] = []
        pending_steps: list[int] = []

        def flush() -> None:
            if pending_steps:
                segments.append(_Segment("launches", list(pending_steps),
                                         launches=cuda.LaunchSequence(list(pending))))
                pending.clear()
                pending_steps.clear()

        for index, step in enumerate(self.runtime.steps):
            if step.kind == "write_back" and self._written_in_place(step):
                continue  # an earlier kernel stored the new value into the input
            launch = None
            if step.kind == "launch":
                launch = self._launch(self.runtime.kernels[step.kernel])
            elif step.kind == "call":
                launch = self._product(index, step.call)
            elif step.kind == "write_back":
                launch = self._write_back_copy(index, step)
            if step.kind == "launch" or launch is not None:
                if launch is not None:
                    pending.append(launch)
                    pending_steps.append(index)
                if not group_launches:
                    flush()
                continue
            flush()
            if step.kind == "call":
                segments.append(_Segment("call", [index], call=self._call(step.call)))
            elif step.kind == "copy":
                segments.append(_Segment("copy", [index], src=self._view(step.src),
                                         dst=self._view(step.dst)))
            elif step.kind == "write_back":
                segments.append(_Segment("write_back", [index], src=self._view(step.src),
                                         input_index=step.input_index))
        flush()
        return segments

    def _mark_adoptable(self) -> None:
        """Marks the extern results a run may keep as their buffer's memory instead of
        copying them into it: a result whose buffer no earlier step touches (so it holds
        nothing yet), viewed from its start. Whether the result's layout fits is up to the
        first run (Call.adopt)."""
        touched: set[int] = set()
        for segment in self.segments:
            if segment.kind == "call" and segment.call is not None:
                c = segment.call
                if not c.collective:
                    read = {v.buffer for v in c.tensor_args()}
                    mine = [o.buffer for o in c.outputs if o is not None]
                    for i, out in enumerate(c.outputs):
                        if out is not None and out.buffer not in touched and \
                                out.buffer not in read and mine.count(out.buffer) == 1 and \
                                self.buffer_kinds[out.buffer] != BUFFER_INPUT and \
                                out.offset == 0 and all(st >= 0 for st in out.strides):
                            c.may_adopt.add(i)
            touched |= self._buffers_of(segment)

    def _place_first_uses(self) -> tuple[list[int], list[_InputCheck]]:
        """Gives each segment the buffers it is the first to touch (_Segment.allocates,
        checks, input_slots). Returns the output buffers no segment touches, which a run
        allocates before the first segment, and the checks of inputs no segment reads, which
        it makes after the last (an output may view such an input). Every input is checked
        before the first write-back (a segment of its own, or a copy in a launch sequence), so
        that a run refused for its inputs wrote none."""
        checks = {c.index: c for c in self.checks}
        unchecked = set(checks)
        outputs_left = set(self.output_buffers)
        slots_left = dict(self._input_slots)
        for segment in self.segments:
            touched = self._buffers_of(segment)
            first = outputs_left & touched
            segment.allocates = sorted(first)
            outputs_left -= first
            segment.input_slots = [(b, slots_left.pop(b))
                                   for b in sorted(touched & slots_left.keys())]
            indices = {index for _, index in segment.input_slots}
            if segment.kind == "write_back":
                indices.add(segment.input_index)
            segment.checks = [checks[i] for i in sorted(indices & unchecked)]
            unchecked -= indices
        late = [checks[i] for i in sorted(unchecked)]
        # The first segment that writes an input (a write-back, or the kernel that stores a
        # write-back's value into the input itself) makes every check not made yet.
        writes = self._input_writing_steps()
        first = next((n for n, s in enumerate(self.segments) if writes.intersection(s.steps)),
                     None)
        if first is not None:
            for segment in self.segments[first + 1:]:
                late += segment.checks
                segment.checks = []
            self.segments[first].checks = sorted(self.segments[first].checks + late,
                                                 key=lambda c: c.index)
            late = []
        for segment in self.segments:
            segment.prepares = bool(segment.allocates or segment.checks or segment.input_slots)
        return sorted(outputs_left), late

    def _buffers_of(self, segment: _Segment) -> set[int]:
        if segment.kind == "launches":
            found: set[int] = set()
            for index in segment.steps:
                if index in self._record_buffers:
                    found |= self._record_buffers[index]
                    continue
                kernel = self.runtime.kernels[self.runtime.steps[index].kernel]
                found |= {payload for kind, payload in kernel.params if kind == PARAM_BUFFER}
            return found
        if segment.kind == "call" and segment.call is not None:
            c = segment.call
            return {v.buffer for v in c.tensor_args()} | \
                {o.buffer for o in c.outputs if o is not None}
        return {v.buffer for v in (segment.src, segment.dst) if v is not None}

    def _output(self, o: Any) -> tuple[str, Any]:
        if o.kind == "none":
            return ("none", None)
        if o.kind == "symbol":
            return ("symbol", o.symbol(self.s))
        return ("view", self._view(o.view))

    def _returned_inputs(self) -> dict[int, int]:
        """Outputs that are an input as it is, by output index: the input's index. A forward
        returns the parameters it saves for its backward so; a run returns the input itself,
        as PyTorch's generated code does, not a new tensor over its memory (a call fewer for
        each). As it is: the input's dtype, sizes and every stride, which its check fixes, from
        its first element."""
        checks = {c.index: c for c in self.checks}
        found: dict[int, int] = {}
        for n, (kind, v) in enumerate(self.outputs):
            if kind != "view" or v is None or self.buffer_kinds[v.buffer] != BUFFER_INPUT:
                continue
            c = checks.get(self.input_of_buffer[v.buffer])
            if c is not None and c.stride_dims is None and v.offset == 0 and \
                    v.dtype == c.dtype and tuple(v.sizes) == c.sizes and \
                    tuple(v.strides) == c.strides:
                found[n] = c.index
        return found

    # Running.

    def check_inputs(self, inputs: Sequence[Any], checks: Optional[list] = None) -> None:
        """Raises InputMismatch naming the first input that does not fit the plan; only those
        of `checks` (a part of self.checks) when given."""
        import torch  # noqa: PLC0415

        runtime = self.runtime
        if runtime.inputs and len(inputs) != len(runtime.inputs):
            raise InputMismatch(f"the plan takes {len(runtime.inputs)} inputs, {len(inputs)} "
                                "given")
        _check(inputs, self.checks if checks is None else checks, runtime.device, torch.Tensor)

    def run(self, inputs: Sequence[Any], seed: int, offset: int,
            after_step: Optional[Callable[[int, Callable[..., Any]], None]] = None,
            checked: bool = False) -> list:
        """Runs the plan on `inputs`; each input is checked (check_inputs) before the first
        step that reads it, unless the caller has `checked` them all or they are as an
        earlier run's were (one call, kiln.input_guard). A mismatch raises
        InputMismatch before any step reads that input and before any write-back: what
        steps ran wrote only the run's own memory."""
        import torch  # noqa: PLC0415

        device = self.runtime.device
        # PyTorch's allocation without its argument parsing, on the current device: a run
        # allocates each output (a forward's saved values are hundreds).
        empty = self._empty_cuda if self._empty_cuda is not None and \
            torch.cuda.current_device() == device.index else None
        arena = empty((self.arena_bytes,), (1,), torch.uint8) if empty is not None else \
            torch.empty(self.arena_bytes, dtype=torch.uint8, device=device)
        # The slot table: constants as binding left them, then this run's addresses. An input
        # buffer starts at the tensor's first element (data_ptr: its storage offset applied).
        table = cuda.SlotTable.copy_of(self._slot_template)
        values = table.array
        start = arena.data_ptr()
        for slot, arena_offset in self._arena_slots:
            values[slot] = start + arena_offset
        learn = False
        if not checked:
            self.check_inputs(inputs, [])  # the count of inputs
            # Inputs as the first run's: checked in one call (kiln.input_guard).
            checked = self.input_guard.fits(inputs)
            learn = not checked
        tensor = torch.Tensor
        # The allocation of each output buffer, made before the first segment that touches it
        # (a forward's saved values are hundreds; allocating them all first would keep the
        # GPU waiting). A result kept as its buffer's memory (adopted) needs none.
        owned: dict[int, Any] = {}
        adopted = self.adopted_outputs
        for b in self._untouched_outputs:
            if b not in adopted:
                t = owned[b] = self._allocate_output(b, empty)
                values[b] = t.data_ptr()
        values[self._seed_slot] = seed & _U64
        values[self._offset_slot] = offset & _U64
        stream = torch.cuda.current_stream(device).cuda_stream
        views = _Views(self, inputs, arena, owned, table)

        for segment in self.segments:
            if segment.prepares:
                if not checked and segment.checks:
                    _check(inputs, segment.checks, device, tensor)
                for b, index in segment.input_slots:
                    values[b] = inputs[index].data_ptr()
                for b in segment.allocates:
                    if b not in adopted and b not in owned:
                        t = owned[b] = self._allocate_output(b, empty)
                        values[b] = t.data_ptr()
            try:
                if segment.kind == "launches":
                    assert segment.launches is not None
                    segment.launches.run(table, stream)
                elif segment.kind == "call":
                    assert segment.call is not None
                    self._run_call(segment.call, views)
                elif segment.kind == "copy":
                    assert segment.src is not None and segment.dst is not None
                    views.view(segment.dst).copy_(views.view(segment.src))
                elif segment.kind == "write_back":
                    assert segment.src is not None
                    inputs[segment.input_index].copy_(views.view(segment.src))
            except cuda.SequenceFailed as e:
                label = self.runtime.steps[segment.steps[e.index]].label
                raise cuda.CudaError(e.code, f"{label}: {e}") from e
            except cuda.CudaError as e:
                label = self.runtime.steps[segment.steps[0]].label
                raise cuda.CudaError(e.code, f"{label}: {e}") from e
            except (RuntimeError, ValueError, TypeError) as e:
                label = self.runtime.steps[segment.steps[0]].label
                raise StepFailed(f"{label}: {type(e).__name__}: {e}") from e
            if after_step is not None:
                for index in segment.steps:
                    after_step(index, views.buffer_view)
        if not checked and self._late_checks:
            _check(inputs, self._late_checks, device, tensor)
        if learn:
            self.input_guard.learn(inputs)  # every input passed the plan's checks
        out: list[Any] = []
        returned: set[int] = set()
        returned_inputs = self.returned_inputs
        for n, (kind, payload) in enumerate(self.outputs):
            if kind == "none":
                out.append(None)
            elif kind == "symbol":
                out.append(payload)
            elif self.typed_outputs.get(payload.buffer) is payload and \
                    payload.buffer not in returned:
                returned.add(payload.buffer)  # the allocation itself; an alias gets a tensor
                out.append(owned[payload.buffer])
            elif n in returned_inputs and payload.buffer not in views.host_values:
                out.append(inputs[returned_inputs[n]])
            else:
                out.append(views.view(payload, escapes=True))
        return out

    def _allocate_output(self, b: int, empty: Optional[Callable[..., Any]] = None) -> Any:
        """Output buffer b's memory: its one output when typed_outputs has it, else bytes;
        through `empty` (_empty_strided_cuda) when given."""
        import torch  # noqa: PLC0415

        typed = self.typed_outputs.get(b)
        if empty is not None:
            if typed is None:
                return empty((self.output_bytes[b],), (1,), torch.uint8)
            return empty(tuple(typed.sizes), tuple(typed.strides), typed.dtype)
        device = self.runtime.device
        if typed is None:
            return torch.empty(self.output_bytes[b], dtype=torch.uint8, device=device)
        return torch.empty_strided(typed.sizes, typed.strides, dtype=typed.dtype, device=device)

    def _value(self, a: tuple[str, Any], views: "_Views") -> Any:
        kind, payload = a
        if kind == "view":
            return views.view(payload) if payload is not None else None
        if kind == "list":
            return [self._value(x, views) for x in payload]
        return payload

    def _run_call(self, c: Call, views: "_Views") -> None:
        if c.flat_args is not None and c.flat_kwargs is not None:
            args = c.flat_args.copy()
            kwargs = c.flat_kwargs.copy() if c.flat_kwargs else c.flat_kwargs
            view = views.view
            for where, v in c.view_args:
                if where.__class__ is int:
                    args[where] = view(v)
                else:
                    kwargs[where] = view(v)
            if c.out_op is not None and c.target not in STORAGE_OFFSET_ARG:
                c.out_op(*args, **kwargs, out=view(c.outputs[0]))
                return
        else:
            args = [self._value(a, views) for a in c.args]
            kwargs = {name: self._value(a, views) for name, a in c.kwargs}
        if c.target in STORAGE_OFFSET_ARG and len(args) > STORAGE_OFFSET_ARG[c.target]:
            # The graph's storage_offset counts from the start of self's storage; here self
            # lives at an offset inside the arena (or an output allocation).
            kind, self_view = c.args[0]
            if kind == "view" and self_view is not None and \
                    self.buffer_kinds[self_view.buffer] != BUFFER_INPUT:
                i = STORAGE_OFFSET_ARG[c.target]
                args[i] = (args[i] or 0) + views.base(self_view.buffer) // self_view.itemsize
        if c.collective:
            args, kwargs = self.runtime.bind_groups(c.target, args, kwargs)
        if c.out_op is not None:
            target = views.view(c.outputs[0])
            c.out_op(*args, **kwargs, out=target)
            return
        if c.fast is not None:
            try:
                result = c.fast(*args, **kwargs)
            except TypeError:  # its Python signature reads these arguments otherwise
                c.fast = None
                result = c.op(*args, **kwargs)
        else:
            result = c.op(*args, **kwargs)
        if c.collective and c.target.startswith("_c10d_functional.") and \
                "wait_tensor" not in c.target:
            import torch  # noqa: PLC0415

            result = torch.ops._c10d_functional.wait_tensor.default(result)
        results = list(result) if isinstance(result, (list, tuple)) else [result]
        if len(c.outputs) == 1 and len(results) != 1:
            results = [result]
        for i, (out, r) in enumerate(zip(c.outputs, results)):
            if out is None:
                continue
            strides = c.adopt.get(i)
            if strides is not None and r.stride() == strides and r.dtype == out.dtype and \
                    r.storage_offset() == 0 and \
                    r.untyped_storage().nbytes() >= self.buffer_bytes[out.buffer]:
                views.adopt(out.buffer, r)
                continue
            if getattr(r, "device", None) is not None and r.device.type == "cpu":
                views.host_values[out.buffer] = r.contiguous()
                continue
            views.host_values.pop(out.buffer, None)
            if isinstance(r, (list, tuple)):
                raise ValueError(f"{c.target} returned a list where one tensor was expected")
            if strides is not None:
                views.allocate(out.buffer)  # not kept this time: its buffer needs memory
            views.view(out).copy_(r)
        if not c.out_checked:
            c.out_checked = True
            c.out_op = self._out_overload(c, results, views)
            if c.out_op is None:
                self._learn_adoption(c, results, list(args) + list(kwargs.values()))

    def _learn_adoption(self, c: Call, results: list[Any], arguments: list[Any]) -> None:
        """After a call's first run: which of its results later runs keep as their buffers
        (a GPU tensor of the view's dtype, sizes and strides, from its storage's start, whose
        storage holds the whole buffer and is neither an argument's nor another result's:
        an op that returns a view of its input must not have the plan write there)."""
        device = self.runtime.device
        flat = [y for x in arguments + results
                for y in (x if isinstance(x, (list, tuple)) else [x])]
        storages = [_storage_address(x) for x in flat]
        for i in sorted(c.may_adopt):
            if i >= len(results):
                continue
            out, r = c.outputs[i], results[i]
            if storages.count(_storage_address(r)) != 1:
                continue
            if getattr(r, "device", None) != device or r.dtype != out.dtype or \
                    list(r.shape) != out.sizes or list(r.stride()) != out.strides or \
                    r.storage_offset() != 0 or \
                    r.untyped_storage().nbytes() < self.buffer_bytes[out.buffer]:
                continue
            c.adopt[i] = r.stride()
            if self.buffer_kinds[out.buffer] == BUFFER_OUTPUT:
                self.adopted_outputs.add(out.buffer)
                # A kept result is the buffer's tensor: an output that views the buffer
                # otherwise (a transpose the partitioner saved beside it) is a tensor over
                # its storage, not the result itself.
                typed = self.typed_outputs.get(out.buffer)
                if typed is not None and (typed.sizes, typed.strides, typed.dtype) != (
                        out.sizes, out.strides, out.dtype):
                    del self.typed_outputs[out.buffer]

    def _out_overload(self, c: Call, results: list[Any], views: "_Views") -> Optional[Any]:
        """The op's out= overload when later runs may write straight into the plan's view
        (see the module's docstring), else None."""
        if c.collective or len(c.outputs) != 1 or c.outputs[0] is None or len(results) != 1:
            return None
        out, r = c.outputs[0], results[0]
        if getattr(r, "dtype", None) != out.dtype or list(getattr(r, "shape", ())) != out.sizes:
            return None
        if self.buffer_kinds[out.buffer] == BUFFER_INPUT:
            return None
        start, end = out.byte_range(self._base(out.buffer, views))
        for v in c.tensor_args():
            if self._shares_storage(v.buffer, out.buffer):
                lo, hi = v.byte_range(self._base(v.buffer, views))
                if lo < end and start < hi:
                    return None
        if not c.target.endswith(".default"):
            return None
        try:
            out_op = resolve_op(c.target[:-len(".default")] + ".out")
        except ValueError:
            return None
        schema = getattr(out_op, "_schema", None)
        outs = [a for a in getattr(schema, "arguments", []) if getattr(a, "is_out", False)]
        if schema is None or len(outs) != 1 or outs[0].name != "out":
            return None
        if not aten_calls.writes_out(out_op, self.runtime.device):
            return None
        return aten_calls.unboxed(c.target, len(c.args), len(c.kwargs)) or out_op

    def _shares_storage(self, a: int, b: int) -> bool:
        if a == b:
            return True
        arena = (BUFFER_INTERMEDIATE, BUFFER_WORKSPACE)
        return self.buffer_kinds[a] in arena and self.buffer_kinds[b] in arena

    def _base(self, buffer: int, views: "_Views") -> int:
        return views.base(buffer) if self.buffer_kinds[buffer] != BUFFER_INPUT else 0


def _dense(sizes: Sequence[int], strides: Sequence[int]) -> bool:
    """Whether a view of these sizes and strides covers its elements densely in row-major
    order (strides of dimensions of size 1 do not matter)."""
    expected = 1
    for size, stride in zip(reversed(sizes), reversed(strides)):
        if size != 1 and stride != expected:
            return False
        expected *= size
    return True


def _alignment(address: int) -> int:
    """The largest power of two up to 256 dividing `address`."""
    return min(256, address & -address) if address else 256


def _check(inputs: Sequence[Any], checks: list[_InputCheck], device: Any, tensor: type) -> None:
    """Raises InputMismatch naming the first of `checks` whose input does not fit."""
    for c in checks:
        x = inputs[c.index]
        # The common case in one expression: a tensor that fits exactly.
        if isinstance(x, tensor) and x.dtype == c.dtype and x.shape == c.sizes and \
                x.stride() == c.strides and x.device == device:
            continue
        if not isinstance(x, tensor):
            raise InputMismatch(f"input {c.name}: expected a tensor, got {type(x).__name__}")
        if x.dtype != c.dtype:
            raise InputMismatch(f"input {c.name}: dtype {x.dtype}, the plan expects "
                                f"{c.dtype}")
        # CPU tensors (attention's philox seed and offset, saved by the forward) reach
        # only extern and fallback ops, which take them where they are; a kernel cannot.
        if x.device != device and (x.device.type != "cpu" or c.on_kernel):
            raise InputMismatch(f"input {c.name}: on {x.device}, the plan runs on {device}")
        if tuple(x.shape) != c.sizes:
            raise InputMismatch(f"input {c.name}: sizes {list(x.shape)}, the plan expects "
                                f"{list(c.sizes)}")
        strides = tuple(x.stride())
        if strides != c.strides and (c.stride_dims is None or any(
                strides[d] != c.strides[d] for d in c.stride_dims)):
            raise InputMismatch(f"input {c.name}: strides {list(strides)}, the plan "
                                f"expects {list(c.strides)}")


def _storage_address(x: Any) -> Optional[int]:
    """Where a tensor's storage starts (None for what is not a tensor)."""
    storage = getattr(x, "untyped_storage", None)
    return storage().data_ptr() if storage is not None else None


def _tensor_views(args: list[tuple[str, Any]]) -> list[BoundView]:
    found: list[BoundView] = []
    for kind, payload in args:
        if kind == "view" and payload is not None:
            found.append(payload)
        elif kind == "list":
            found += _tensor_views(payload)
    return found


class _Views:
    """Tensors over one run's buffers: an input's is the caller's tensor, an output's the
    run's allocation of it, every other buffer's a place in the run's arena. Results that
    ops return on the CPU (attention's philox seed and offset) are kept by buffer in
    `host_values`: the plan's buffers are all on the GPU, but the ops that read such values
    back expect them where they were made."""

    def __init__(self, plan: BoundPlan, inputs: Sequence[Any], arena: Any,
                 owned: dict[int, Any], table: cuda.SlotTable) -> None:
        import torch  # noqa: PLC0415

        self.plan = plan
        self.table = table
        self.kinds = plan.buffer_kinds
        self.input_of_buffer = plan.input_of_buffer
        self.arena_offsets = plan.arena_offsets
        self.inputs = inputs
        self.arena = arena
        self.owned = owned
        self.reinterpret = plan._reinterpret
        self.host_values: dict[int, Any] = {}
        self._typed: dict[tuple[int, Any], Any] = {}  # a root viewed as a dtype, by root
        # The dtype of flat byte roots (the arena, outputs not allocated as themselves), which
        # any dtype can view; a root allocated as its output keeps its own.
        self.flat = torch.uint8

    def root(self, buffer: int) -> Any:
        """The tensor whose storage holds the buffer."""
        if self.kinds[buffer] == BUFFER_INPUT:
            return self.inputs[self.input_of_buffer[buffer]]
        return self.owned.get(buffer, self.arena)

    def base(self, buffer: int) -> int:
        """Where the buffer starts in its root's storage, in bytes."""
        if self.kinds[buffer] == BUFFER_INPUT:
            x = self.inputs[self.input_of_buffer[buffer]]
            return x.storage_offset() * x.element_size()
        return 0 if buffer in self.owned else self.arena_offsets[buffer]

    def adopt(self, buffer: int, tensor: Any) -> None:
        """An extern's result becomes the buffer's memory: its address goes to the kernels
        that follow, and views of the buffer are views of it."""
        self.owned[buffer] = tensor
        self.table.array[buffer] = tensor.data_ptr()

    def allocate(self, buffer: int) -> None:
        """Memory for an output buffer that was to be a result kept as it is, but is not."""
        if self.kinds[buffer] == BUFFER_OUTPUT and buffer not in self.owned:
            self.adopt(buffer, self.plan._allocate_output(buffer))

    @staticmethod
    def at(storage: Any, byte_base: int, dtype: Any, offset: int, sizes: Sequence[int],
           strides: Sequence[int]) -> Any:
        import torch  # noqa: PLC0415

        t = torch.empty(0, dtype=dtype, device=storage.device)
        return t.set_(storage, byte_base // dtype.itemsize + offset, list(sizes), list(strides))

    def view(self, v: BoundView, escapes: bool = False) -> Any:
        """A tensor over the view's memory. One that `escapes` (an output) is a tensor of its
        own over the storage, as autograd and AOTAutograd expect of a graph's outputs (not a
        view of some base); so is every one where PyTorch has _reinterpret_tensor, the
        cheapest to make. Without it, one that stays inside the run (an op's argument, a
        copy's end) is an as_strided view of its buffer's root tensor."""
        b = v.buffer
        host = self.host_values.get(b) if self.host_values else None
        if host is not None:
            return self.at(host.untyped_storage(), 0, v.dtype, v.offset, v.sizes, v.strides)
        root = self.root(b)
        base = self.base(b)
        reinterpret = self.reinterpret
        if (reinterpret is not None or not escapes) and base % v.itemsize == 0:
            if root.dtype == v.dtype:
                typed = root
            else:
                key = (id(root), v.dtype)
                typed = self._typed.get(key)
                if typed is None and self.kinds[b] != BUFFER_INPUT and root.dtype == self.flat:
                    typed = self._typed[key] = root.view(v.dtype)
            if typed is not None:
                # The view's start counts from the storage's start, like its buffer's base.
                start = base // v.itemsize + v.offset
                if reinterpret is not None:
                    return reinterpret(typed, v.sizes, v.strides, start - typed.storage_offset())
                return typed.as_strided(v.sizes, v.strides, start)
        return self.at(root.untyped_storage(), base, v.dtype, v.offset, v.sizes, v.strides)

    def buffer_view(self, buffer: int, dtype: Any, sizes: Sequence[int],
                    strides: Sequence[int]) -> Any:
        self.allocate(buffer)  # an output buffer no step has touched yet: its own memory
        return self.at(self.root(buffer).untyped_storage(), self.base(buffer), dtype, 0, sizes,
                       strides)
