"""kiln.v1 arguments as the values PyTorch ops take, and ops found by their target names.

Shared by the GPU runtime (extern and fallback steps call ATen through PyTorch) and by
run_graph, which runs a kiln.v1.Graph eagerly node by node: the reference the GPU tests
compare Kiln's kernels against. PyTorch is imported on first use.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Mapping, Optional, Sequence

from kiln.symexpr import Evaluator, compile_expr

_DTYPE_NAMES = {
    1: "float32", 2: "float64", 3: "float16", 4: "bfloat16", 5: "int64", 6: "int32",
    7: "int16", 8: "int8", 9: "uint8", 10: "bool", 11: "complex64", 12: "complex128",
    13: "float8_e4m3fn", 14: "float8_e5m2", 15: "uint16", 16: "uint32", 17: "uint64",
}
_LAYOUTS = {1: "strided", 2: "sparse_coo", 3: "sparse_csr", 4: "jagged"}
_MEMORY_FORMATS = {1: "contiguous_format", 2: "channels_last", 3: "channels_last_3d",
                   4: "preserve_format"}


def torch_dtype(dtype: int) -> Any:
    """The torch.dtype of a kiln.v1.DType value; ValueError for DTYPE_UNSPECIFIED."""
    import torch  # noqa: PLC0415

    if dtype not in _DTYPE_NAMES:
        raise ValueError(f"dtype {dtype} has no torch.dtype")
    return getattr(torch, _DTYPE_NAMES[dtype])


def resolve_op(target: str) -> Callable[..., Any]:
    """The callable a node target names: "aten.add.Tensor" is torch.ops.aten.add.Tensor,
    "operator.getitem" is operator.getitem. ValueError when PyTorch has no such op."""
    import torch  # noqa: PLC0415

    parts = target.split(".")
    if parts[0] == "operator" and len(parts) == 2 and hasattr(operator, parts[1]):
        return getattr(operator, parts[1])
    if len(parts) == 3:
        try:
            return getattr(getattr(getattr(torch.ops, parts[0]), parts[1]), parts[2])
        except (AttributeError, RuntimeError) as e:
            raise ValueError(f"PyTorch has no op {target}: {e}") from e
    raise ValueError(f"cannot resolve op target {target!r}")


def sym_value(expr: str, symbols: Mapping[str, Any]) -> Any:
    """The value of a SymScalar expression at the given symbol values."""
    names = sorted(symbols)
    evaluator: Evaluator = compile_expr(expr, names)
    return evaluator([symbols[n] for n in names])


def constant(arg: Any, ref: Callable[[Any], Any], symbols: Mapping[str, Any],
             device: Any = None) -> Any:
    """The Python value of a kiln.v1.Argument. `ref` turns a ValueRef into its value;
    devices in the graph become `device` when one is given (a graph captured on cuda:3 runs
    on this process's device)."""
    import torch  # noqa: PLC0415

    kind = arg.WhichOneof("kind")
    if kind == "ref":
        return ref(arg.ref)
    if kind == "int_value":
        return int(arg.int_value)
    if kind == "float_value":
        return float(arg.float_value)
    if kind == "bool_value":
        return bool(arg.bool_value)
    if kind == "string_value":
        return arg.string_value
    if kind == "none" or kind is None:
        return None
    if kind == "dtype":
        return torch_dtype(arg.dtype)
    if kind == "device":
        if device is not None and arg.device.type == "cuda":
            return torch.device(device)
        d = arg.device
        return torch.device(d.type, d.index) if d.HasField("index") else torch.device(d.type)
    if kind == "layout":
        return getattr(torch, _LAYOUTS[arg.layout])
    if kind == "memory_format":
        return getattr(torch, _MEMORY_FORMATS[arg.memory_format])
    if kind == "list":
        return [constant(a, ref, symbols, device) for a in arg.list.items]
    if kind == "symbolic":
        value = sym_value(arg.symbolic.expr, symbols)
        return float(value) if arg.symbolic.kind == 2 else value  # SYM_KIND_FLOAT
    raise ValueError(f"argument kind {kind} is not supported")


def _symbols_of(graph: Any, inputs: Sequence[Any]) -> dict[str, Any]:
    """Symbol values: bound from the inputs where an input's metadata is a bare symbol,
    the graph's hints otherwise."""
    import torch  # noqa: PLC0415

    values: dict[str, Any] = {}
    for s in graph.symbols:
        hint = s.WhichOneof("hint")
        if hint is not None:
            values[s.name] = getattr(s, hint)
    for gi, x in zip(graph.inputs, inputs):
        meta = gi.meta
        if meta.HasField("symbolic") and meta.symbolic.expr.isidentifier():
            values[meta.symbolic.expr] = x
        elif meta.HasField("tensor") and isinstance(x, torch.Tensor):
            for dim, size in enumerate(meta.tensor.sizes):
                if size.WhichOneof("kind") == "expr" and size.expr.isidentifier():
                    values[size.expr] = x.shape[dim]
    return values


def run_graph(graph: Any, inputs: Sequence[Any], device: Any = None,
              values: Optional[dict[str, Any]] = None) -> list[Any]:
    """Runs a kiln.v1.Graph eagerly with PyTorch's ops and returns its outputs in order;
    `values`, when given, receives every input's and node's value by name."""
    symbols = _symbols_of(graph, inputs)
    if values is None:
        values = {}
    values.update({gi.name: x for gi, x in zip(graph.inputs, inputs)})

    def ref(r: Any) -> Any:
        v = values[r.node]
        return v[r.output] if r.HasField("output") else v

    for node in graph.nodes:
        fn = resolve_op(node.target)
        args = [constant(a, ref, symbols, device) for a in node.args]
        kwargs = {k.name: constant(k.value, ref, symbols, device) for k in node.kwargs}
        values[node.name] = fn(*args, **kwargs)
    out = constant(graph.output, ref, symbols, device)
    return list(out) if isinstance(out, (list, tuple)) else [out]




def to_graph_module(graph: Any, device: Any = None) -> Any:
    """The kiln.v1.Graph as a torch.fx.GraphModule calling the same ops, so that other
    compilers (Inductor) can compile exactly the graph Kiln compiles. Symbolic arguments
    take the graph's hints."""
    import torch  # noqa: PLC0415
    import torch.fx as fx  # noqa: PLC0415

    fx_graph = fx.Graph()
    values: dict[str, Any] = {}
    symbols = {s.name: getattr(s, s.WhichOneof("hint")) for s in graph.symbols
               if s.WhichOneof("hint")}
    for gi in graph.inputs:
        values[gi.name] = fx_graph.placeholder(gi.name)

    def ref(r: Any) -> Any:
        v = values[r.node]
        if r.HasField("output"):
            return fx_graph.call_function(operator.getitem, (v, r.output))
        return v

    for node in graph.nodes:
        args = tuple(constant(a, ref, symbols, device) for a in node.args)
        kwargs = {k.name: constant(k.value, ref, symbols, device) for k in node.kwargs}
        values[node.name] = fx_graph.call_function(resolve_op(node.target), args, kwargs)
    out = constant(graph.output, ref, symbols, device)
    fx_graph.output(tuple(out) if isinstance(out, list) else out)
    return fx.GraphModule(torch.nn.Module(), fx_graph)
