"""Turns the graphs AOTAutograd produces into Kiln's capture format.

One graph becomes one JSON-compatible dict, as DESIGN.md's "Real graphs" describes:
``{"model", "kind", "nodes": [{"name", "op", "target", "args", "kwargs", "meta",
"stack_trace"}], "code", "guards"}``. The same conversion feeds live compile requests and
writes the test corpus, so test data and traffic have one format.

    python -m kiln.capture --help

``capture_model`` compiles a model with a backend that records every forward, backward and
inference graph AOTAutograd hands it, then runs the graphs eagerly (training is unchanged).
"""

from __future__ import annotations

import argparse
import base64
import json
import pathlib
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from kiln.partitioning import aot_autograd_options
from kiln.settings import DEFAULT_PARTITIONER, PARTITIONERS

FORMAT = "kiln capture 1"


def _torch():
    import torch  # noqa: PLC0415 (imported on use: the package imports without PyTorch)

    return torch


def _sym_text(value: Any) -> Any:
    """A plain number, or {"sym": expr} for a symbolic int/float/bool."""
    torch = _torch()
    if not isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return value
    expr = value.node.expr
    if getattr(expr, "is_number", False):
        kind = {torch.SymInt: int, torch.SymFloat: float, torch.SymBool: bool}[type(value)]
        return kind(expr)
    return {"sym": str(expr)}


def tensor_meta(t: Any) -> dict:
    """The metadata of a (fake) tensor: shape, stride, dtype, device, storage offset."""
    meta = {
        "shape": [_sym_text(s) for s in t.shape],
        "stride": [_sym_text(s) for s in t.stride()],
        "dtype": str(t.dtype),
        "device": str(t.device),
        "storage_offset": _sym_text(t.storage_offset()),
    }
    if t.requires_grad:
        meta["requires_grad"] = True
    return meta


def value_meta(value: Any) -> Any:
    """What a node's meta["val"] becomes: a tensor's metadata, {"sym": ...}, a plain int or
    float, null, or a list of those for a node that returns several values."""
    torch = _torch()
    if isinstance(value, torch.Tensor):
        return tensor_meta(value)
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _sym_text(value)
    if isinstance(value, (list, tuple)):
        return [value_meta(v) for v in value]
    if value is None or isinstance(value, (bool, int, float)):
        return value
    return None


def _target_name(target: Any) -> str:
    torch = _torch()
    if isinstance(target, (torch._ops.OpOverload, torch._ops.HigherOrderOperator)):
        return str(target)
    if isinstance(target, torch._ops.OpOverloadPacket):
        return str(target) + ".default"
    if getattr(target, "__module__", None) in ("_operator", "operator", "builtins"):
        return str(target)  # "<built-in function getitem>", as FX prints it
    module = getattr(target, "__module__", "") or ""
    name = getattr(target, "__qualname__", getattr(target, "__name__", str(target)))
    return f"{module}.{name}" if module else name


def encode_arg(value: Any) -> Any:
    """One argument in the capture format: node references, dtype/device/layout/memory
    format constants, symbolic scalars, numbers (infinities and NaN as Python's json writes
    them), strings, None, and lists of those."""
    torch = _torch()
    fx = torch.fx
    if isinstance(value, fx.Node):
        return {"node": value.name}
    if isinstance(value, (list, tuple)):
        return [encode_arg(v) for v in value]
    if isinstance(value, (torch.dtype, torch.layout, torch.memory_format)):
        return {"const": str(value)}
    if isinstance(value, torch.device):
        return {"const": str(value)}
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return _sym_text(value)
    if isinstance(value, (bool, int, float, str)) or value is None:
        return value
    if isinstance(value, torch.Tensor):
        raise ValueError(f"a tensor constant inline in the arguments ({tuple(value.shape)})")
    if isinstance(value, slice):
        raise ValueError("a slice object in the arguments")
    raise ValueError(f"an argument of type {type(value).__name__}")


def constant_value(t: Any) -> dict:
    """A real tensor's bytes: contiguous, little-endian, base64. Safe to call while a
    compiler runs under FakeTensorMode (a get_attr constant is a real tensor)."""
    _torch()
    from torch._subclasses.fake_tensor import unset_fake_temporarily  # noqa: PLC0415

    with unset_fake_temporarily():
        return _bytes_b64(t)


def _bytes_b64(t: Any) -> dict:
    torch = _torch()
    data = t.detach().contiguous().cpu()
    if data.dtype == torch.bool:
        raw = data.to(torch.uint8).numpy().tobytes()
    elif data.dtype == torch.bfloat16:
        raw = data.view(torch.int16).numpy().tobytes()
    else:
        raw = data.numpy().tobytes()
    return {"b64": base64.b64encode(raw).decode("ascii")}


def _guards(shape_env: Any, example_inputs: Sequence[Any]) -> Optional[dict]:
    if shape_env is None:
        return None
    torch = _torch()
    out: dict = {"all_guards": [], "var_to_val": {}, "var_to_range": {}, "guards_expr": None}
    out["all_guards"] = [str(g.expr) for g in getattr(shape_env, "guards", [])]
    for sym, val in getattr(shape_env, "var_to_val", {}).items():
        out["var_to_val"][str(sym)] = int(val) if getattr(val, "is_integer", False) else float(val)
    for sym, rng in getattr(shape_env, "var_to_range", {}).items():
        out["var_to_range"][str(sym)] = [str(rng.lower), str(rng.upper)]
    symints = [x for x in example_inputs if isinstance(x, torch.SymInt)]
    try:
        out["guards_expr"] = shape_env.produce_guards_expression(symints)
    except Exception as e:  # a guard PyTorch cannot print as Python is still recorded above
        out["guards_expr_error"] = f"{type(e).__name__}: {e}"
    return out


def _shape_env_of(example_inputs: Sequence[Any]) -> Any:
    torch = _torch()
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            mode = getattr(x, "fake_mode", None)
            if mode is not None and mode.shape_env is not None:
                return mode.shape_env
        if isinstance(x, torch.SymInt):
            return x.node.shape_env
    context = torch._guards.TracingContext.try_get()
    if context is not None and context.fake_mode is not None:
        return context.fake_mode.shape_env
    return None


def static_roles(kind: str, inputs: int) -> dict[int, str]:
    """For a forward or inference graph, the roles of its parameters and buffers by input
    position, as AOTAutograd knows them (fw_metadata.static_input_indices: Dynamo's parameters
    and buffers, and tensors marked static): "parameter" for those that require grad, "buffer"
    for the rest. kilnd's CUDA-graph analysis reads them in place on every replay, and lets a
    plan that mutates them be captured (a batch norm's running statistics). Empty when
    unknown."""
    if kind not in ("fw", "infer"):
        return {}
    import torch  # noqa: PLC0415

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    indices = getattr(meta, "static_input_indices", None)
    info = getattr(meta, "input_info", None) or []
    if not isinstance(indices, (list, tuple)):
        return {}
    roles = {}
    for i in indices:
        if isinstance(i, int) and 0 <= i < inputs:
            grad = i < len(info) and bool(getattr(info[i], "requires_grad", False))
            roles[i] = "parameter" if grad else "buffer"
    return roles


def choose_inference_layouts(gm: Any, kind: str, layouts: bool) -> None:
    """With `layouts`, an inference graph's activations get the layouts kiln.layouts chooses
    (a training graph's were chosen on its joint graph, before it was partitioned)."""
    if kind == "infer" and layouts:
        from kiln.layouts import choose  # noqa: PLC0415

        choose(gm.graph)


def graph_to_capture(gm: Any, example_inputs: Sequence[Any], *, model: str, kind: str,
                     constants: bool = True, roles: Optional[dict[int, str]] = None) -> dict:
    """The capture-format dict of an AOTAutograd GraphModule; `roles` gives placeholders
    (by position) their "role" (kiln.graph_proto.ROLES: "parameter", "buffer", ...)."""
    torch = _torch()
    nodes = []
    placeholders = 0
    for node in gm.graph.nodes:
        entry: dict = {"name": node.name, "op": node.op}
        if node.op == "placeholder":
            entry["target"] = node.target
            entry["args"], entry["kwargs"] = [], {}
            if roles and placeholders in roles:
                entry["role"] = roles[placeholders]
            placeholders += 1
        elif node.op == "output":
            entry["target"] = "output"
            entry["args"], entry["kwargs"] = [encode_arg(node.args[0])], {}
        elif node.op == "get_attr":
            entry["target"] = node.target
            entry["args"], entry["kwargs"] = [], {}
        else:
            entry["target"] = _target_name(node.target)
            entry["args"] = [encode_arg(a) for a in node.args]
            entry["kwargs"] = {k: encode_arg(v) for k, v in node.kwargs.items()}
        val = node.meta.get("val")
        if node.op == "get_attr":
            attr = gm
            for part in str(node.target).split("."):
                attr = getattr(attr, part)
            if isinstance(attr, torch.Tensor):
                entry["meta"] = tensor_meta(attr)
                if constants and attr.numel() > 0:
                    entry["value"] = constant_value(attr)
            else:
                entry["meta"] = None
        else:
            entry["meta"] = value_meta(val) if node.op != "output" else None
        entry["stack_trace"] = node.meta.get("stack_trace") or ""
        nodes.append(entry)
    return {
        "format": FORMAT,
        "model": model,
        "kind": kind,
        "nodes": nodes,
        "code": gm.code,
        "guards": _guards(_shape_env_of(example_inputs), example_inputs),
        "torch": torch.__version__,
    }


def dumps(capture: dict) -> str:
    """The capture as JSON text (Infinity/NaN as Python's json writes them)."""
    return json.dumps(capture, indent=None, separators=(",", ":"), allow_nan=True)


# Outputs with more elements than this are recorded as a sample plus checksums.
FULL_OUTPUT_ELEMENTS = 1 << 16
SAMPLED_ELEMENTS = 4096


def tensor_values(t: Any, *, sample: bool = False) -> dict:
    """A real tensor's logical values (row-major, whatever its strides), base64 of the
    little-endian bytes of its dtype; with `sample`, a large tensor keeps SAMPLED_ELEMENTS
    evenly spaced elements ("index": first, step) plus the float64 sum and sum of absolute
    values of all its elements."""
    torch = _torch()
    flat = t.detach().reshape(-1)
    out: dict = {"dtype": str(t.dtype), "shape": list(t.shape)}
    if sample and flat.numel() > FULL_OUTPUT_ELEMENTS:
        step = flat.numel() // SAMPLED_ELEMENTS
        wide = flat.to(torch.float64)
        out["sum"] = float(wide.sum())
        out["abs_sum"] = float(wide.abs().sum())
        out["index"] = [0, step]
        flat = flat[::step][:SAMPLED_ELEMENTS]
    out.update(constant_value(flat))
    return out


def _value_record(v: Any, *, sample: bool) -> Any:
    torch = _torch()
    if isinstance(v, torch.Tensor):
        return tensor_values(v, sample=sample)
    if isinstance(v, (bool, int, float)) or v is None:
        return v
    if isinstance(v, (list, tuple)):
        return [_value_record(x, sample=sample) for x in v]
    return None


@dataclass
class CapturedGraph:
    kind: str  # "fw", "bw" or "infer"
    capture: dict
    # Real inputs of the graph's first call and the outputs eager PyTorch computed from them
    # ({"inputs": [...], "outputs": [...]}), when the recorder was asked for them.
    reference: Optional[dict] = None


@dataclass
class Recorder:
    """A torch.compile backend that records the graphs AOTAutograd produces and runs them
    unchanged. With `reference_bytes` > 0 it also records each graph's first real inputs
    and eager outputs, for graphs whose inputs take at most that many bytes."""

    model: str
    graphs: list = field(default_factory=list)
    reference_bytes: int = 0
    partitioner: str = DEFAULT_PARTITIONER
    layouts: bool = True  # as the backend chooses them by default (kiln.layouts)

    def _compiler(self, kind: str) -> Callable:
        from functorch.compile import make_boxed_func  # noqa: PLC0415

        def compile_graph(gm: Any, example_inputs: Sequence[Any]) -> Callable:
            choose_inference_layouts(gm, kind, self.layouts)
            capture = graph_to_capture(gm, example_inputs, model=self.model, kind=kind,
                                       roles=static_roles(kind, len(example_inputs)))
            graph = CapturedGraph(kind, capture)
            self.graphs.append(graph)
            run = make_boxed_func(gm.forward)
            if self.reference_bytes <= 0:
                return run
            return make_boxed_func(self._recording(graph, gm))

        return compile_graph

    def _recording(self, graph: CapturedGraph, gm: Any) -> Callable:
        torch = _torch()
        limit = self.reference_bytes

        def forward(*args: Any) -> Any:
            if graph.reference is not None:
                return gm.forward(*args)
            size = sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))
            # Inputs are copied before the call: graphs that mutate their inputs (optimizer
            # steps, batch-norm statistics) change them.
            inputs = [_value_record(a, sample=False) for a in args] if size <= limit else None
            out = gm.forward(*args)
            if inputs is not None:
                torch.cuda.synchronize()
                graph.reference = {"inputs": inputs,
                                   "outputs": _value_record(list(out), sample=True)}
            else:
                graph.reference = {}
            return out

        return forward

    def backend(self) -> Callable:
        from torch._dynamo.backends.common import aot_autograd  # noqa: PLC0415

        return aot_autograd(fw_compiler=self._compiler("fw"), bw_compiler=self._compiler("bw"),
                            inference_compiler=self._compiler("infer"),
                            **aot_autograd_options(self.partitioner, self.layouts))


def write_graphs(graphs: Sequence[CapturedGraph], out_dir: pathlib.Path, stem: str) -> list:
    """Writes each graph as STEM[_N].KIND.json, and its reference values, where recorded, as
    ref/STEM[_N].KIND.ref.json; returns the graph paths."""
    out_dir.mkdir(parents=True, exist_ok=True)
    counts: dict = {}
    paths = []
    for g in graphs:
        n = counts.get(g.kind, 0)
        counts[g.kind] = n + 1
        name = f"{stem}.{g.kind}" if n == 0 else f"{stem}_{n}.{g.kind}"
        path = out_dir / f"{name}.json"
        path.write_text(dumps(g.capture))
        paths.append(path)
        if g.reference:
            (out_dir / "ref").mkdir(exist_ok=True)
            (out_dir / "ref" / f"{name}.ref.json").write_text(dumps(g.reference))
    return paths


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kiln.capture",
        description="Capture the AOTAutograd graphs of a model built by a Python function.")
    parser.add_argument("--model", required=True,
                        help="MODULE:FUNCTION returning (model, example_inputs)")
    parser.add_argument("--out", required=True, type=pathlib.Path, help="output folder")
    parser.add_argument("--name", help="file stem (default: the function's name)")
    parser.add_argument("--dynamic", action="store_true", help="torch.compile(dynamic=True)")
    parser.add_argument("--inference", action="store_true", help="run under torch.no_grad()")
    parser.add_argument("--partitioner", choices=PARTITIONERS, default=DEFAULT_PARTITIONER,
                        help="how AOTAutograd splits the joint graph (as the backend's setting)")
    args = parser.parse_args(argv)

    import importlib  # noqa: PLC0415

    torch = _torch()
    module_name, _, fn_name = args.model.partition(":")
    build = getattr(importlib.import_module(module_name), fn_name)
    model, inputs = build()
    recorder = Recorder(args.name or fn_name, partitioner=args.partitioner)
    compiled = torch.compile(model, backend=recorder.backend(), dynamic=args.dynamic or None)
    if args.inference:
        with torch.no_grad():
            compiled(*inputs)
    else:
        out = compiled(*inputs)
        loss = out if isinstance(out, torch.Tensor) else out[0]
        loss.float().sum().backward()
    for path in write_graphs(recorder.graphs, args.out, args.name or fn_name):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
