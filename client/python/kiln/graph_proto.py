"""The capture format (kiln.capture) as a kiln.v1.Graph, the message compile requests carry.

The same mapping as the C++ importer of capture files (proto/fx/capture_import.cc), so a graph
sent by a live trainer and the same graph read from a capture file are one graph with one
compile key; tests/client/python/graph_proto_test.py checks that over the whole corpus.
Needs only protobuf and the generated kiln.v1 modules: no PyTorch.
"""

from __future__ import annotations

import base64
import json
import math
import re
import struct
from typing import Any, Optional

from kiln.v1 import graph_pb2 as pb

DTYPES = {
    "torch.float32": pb.DTYPE_FLOAT32, "torch.float64": pb.DTYPE_FLOAT64,
    "torch.float16": pb.DTYPE_FLOAT16, "torch.bfloat16": pb.DTYPE_BFLOAT16,
    "torch.int64": pb.DTYPE_INT64, "torch.int32": pb.DTYPE_INT32,
    "torch.int16": pb.DTYPE_INT16, "torch.int8": pb.DTYPE_INT8, "torch.uint8": pb.DTYPE_UINT8,
    "torch.bool": pb.DTYPE_BOOL, "torch.complex64": pb.DTYPE_COMPLEX64,
    "torch.complex128": pb.DTYPE_COMPLEX128, "torch.float8_e4m3fn": pb.DTYPE_FLOAT8_E4M3FN,
    "torch.float8_e5m2": pb.DTYPE_FLOAT8_E5M2, "torch.uint16": pb.DTYPE_UINT16,
    "torch.uint32": pb.DTYPE_UINT32, "torch.uint64": pb.DTYPE_UINT64,
}
LAYOUTS = {"torch.strided": pb.LAYOUT_STRIDED, "torch.sparse_coo": pb.LAYOUT_SPARSE_COO,
           "torch.sparse_csr": pb.LAYOUT_SPARSE_CSR, "torch.jagged": pb.LAYOUT_JAGGED}
MEMORY_FORMATS = {
    "torch.contiguous_format": pb.MEMORY_FORMAT_CONTIGUOUS,
    "torch.channels_last": pb.MEMORY_FORMAT_CHANNELS_LAST,
    "torch.channels_last_3d": pb.MEMORY_FORMAT_CHANNELS_LAST_3D,
    "torch.preserve_format": pb.MEMORY_FORMAT_PRESERVE,
}
DEVICE_TYPES = ("cpu", "cuda", "meta", "mps", "xpu", "hip")
# A placeholder's "role" in the capture format (what the input stands for: parameters and
# buffers keep their addresses across CUDA-graph replays).
ROLES = {"parameter": pb.INPUT_ROLE_PARAMETER, "buffer": pb.INPUT_ROLE_BUFFER,
         "user_input": pb.INPUT_ROLE_USER_INPUT, "tangent": pb.INPUT_ROLE_TANGENT,
         "saved": pb.INPUT_ROLE_SAVED, "rng_state": pb.INPUT_ROLE_RNG_STATE}
SYMBOL = re.compile(r"^[a-z]+[0-9]+$")
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
INT64 = (-(1 << 63), (1 << 63) - 1)
DTYPE_NAMES = {v: k.removeprefix("torch.") for k, v in DTYPES.items()}
# Element formats of the dtypes a 0-d constant may have (little-endian).
SCALAR_FORMATS = {pb.DTYPE_FLOAT32: "<f", pb.DTYPE_FLOAT64: "<d", pb.DTYPE_FLOAT16: "<e",
                  pb.DTYPE_INT64: "<q", pb.DTYPE_INT32: "<i", pb.DTYPE_INT16: "<h",
                  pb.DTYPE_INT8: "<b", pb.DTYPE_UINT8: "<B", pb.DTYPE_BOOL: "<B"}


class CaptureError(ValueError):
    """A capture that is not a valid graph; the message names the node and field."""

    def __init__(self, node: str, field: str, what: str) -> None:
        where = f'node "{node}"' if node else ""
        if field:
            where = f"{where} {field}" if where else field
        super().__init__(f"{where}: {what}" if where else what)


def symbol_kind(name: str) -> int:
    return pb.SYM_KIND_FLOAT if name.startswith("zf") else pb.SYM_KIND_INT


def canonical_target(target: str) -> str:
    """FX prints Python builtins as "<built-in function getitem>": "operator.getitem"."""
    m = re.fullmatch(r"<built-in function (.+)>", target)
    return f"operator.{m.group(1)}" if m else target


def parse_device(text: str, out: pb.Device) -> bool:
    kind, colon, index = text.partition(":")
    if kind not in DEVICE_TYPES:
        return False
    out.type = kind
    if colon:
        if not index.isdigit():
            return False
        out.index = int(index)
    return True


class _Converter:
    def __init__(self) -> None:
        self.graph = pb.Graph()
        self.names: set = set()
        self.mentioned: list = []

    def note_symbols(self, expr: str) -> None:
        for token in TOKEN.findall(expr):
            if SYMBOL.match(token) and token not in self.mentioned:
                self.mentioned.append(token)

    def symbol(self, name: str) -> pb.Symbol:
        for s in self.graph.symbols:
            if s.name == name:
                return s
        s = self.graph.symbols.add(name=name, kind=symbol_kind(name))
        return s

    def sym_int(self, node: str, field: str, v: Any, out: pb.SymInt) -> None:
        if isinstance(v, int) and not isinstance(v, bool):
            out.value = v
        elif isinstance(v, dict) and len(v) == 1 and isinstance(v.get("sym"), str) and v["sym"]:
            out.expr = v["sym"]
            self.note_symbols(out.expr)
        else:
            raise CaptureError(node, field, f'expected an integer or {{"sym": EXPR}}, got {v!r}'[:120])

    def sym_scalar(self, node: str, field: str, v: Any, out: pb.SymScalar) -> None:
        if not isinstance(v, str) or not v:
            raise CaptureError(node, field, "a symbolic value must be a non-empty expression string")
        out.expr = v
        out.kind = symbol_kind(v) if SYMBOL.match(v) else pb.SYM_KIND_INT
        self.note_symbols(v)

    def value_meta(self, node: str, field: str, m: Any, out: pb.ValueMeta) -> None:
        if m is None:
            out.none.SetInParent()
            return
        if isinstance(m, int) and not isinstance(m, bool):
            out.int_value = m
            return
        if not isinstance(m, dict):
            raise CaptureError(node, field, "must be an object, a list, an int or null")
        if "sym" in m:
            self.sym_scalar(node, field + ".sym", m["sym"], out.symbolic)
            return
        t = out.tensor
        shape, stride = m.get("shape"), m.get("stride")
        if not isinstance(shape, list):
            raise CaptureError(node, field + ".shape", "missing or not a list")
        if not isinstance(stride, list):
            raise CaptureError(node, field + ".stride", "missing or not a list")
        if len(stride) != len(shape):
            raise CaptureError(node, field + ".stride",
                               f"has {len(stride)} entries but shape has {len(shape)}")
        for i, s in enumerate(shape):
            self.sym_int(node, f"{field}.shape[{i}]", s, t.sizes.add())
        for i, s in enumerate(stride):
            self.sym_int(node, f"{field}.stride[{i}]", s, t.strides.add())
        if "storage_offset" in m:
            self.sym_int(node, field + ".storage_offset", m["storage_offset"], t.storage_offset)
        else:
            t.storage_offset.value = 0
        dtype = m.get("dtype")
        if not isinstance(dtype, str):
            raise CaptureError(node, field + ".dtype", "missing or not a string")
        if dtype not in DTYPES:
            raise CaptureError(node, field + ".dtype", f'unknown dtype "{dtype}"')
        t.dtype = DTYPES[dtype]
        device = m.get("device")
        if not isinstance(device, str) or not parse_device(device, t.device):
            raise CaptureError(node, field + ".device",
                               'missing or not a device string such as "cuda:0" or "cpu"')
        if "requires_grad" in m:
            if not isinstance(m["requires_grad"], bool):
                raise CaptureError(node, field + ".requires_grad", "must be a bool")
            t.requires_grad = m["requires_grad"]

    def argument(self, node: str, field: str, v: Any, out: pb.Argument) -> None:
        if v is None:
            out.none.SetInParent()
        elif isinstance(v, bool):
            out.bool_value = v
        elif isinstance(v, int):
            if not INT64[0] <= v <= INT64[1]:
                raise CaptureError(node, field, "integer out of the int64 range")
            out.int_value = v
        elif isinstance(v, float):
            out.float_value = v
        elif isinstance(v, str):
            out.string_value = v
        elif isinstance(v, list):
            out.list.SetInParent()
            for i, item in enumerate(v):
                self.argument(node, f"{field}[{i}]", item, out.list.items.add())
        elif isinstance(v, dict) and len(v) == 1:
            self.tagged(node, field, v, out)
        else:
            raise CaptureError(node, field, f'expected {{"node"|"const"|"sym": ...}}, got {v!r}'[:120])

    def tagged(self, node: str, field: str, v: dict, out: pb.Argument) -> None:
        (tag, value), = v.items()
        if tag == "node":
            if not isinstance(value, str):
                raise CaptureError(node, field, "a node reference must be a string")
            if value not in self.names:
                raise CaptureError(node, field, f'refers to unknown node "{value}"')
            out.ref.node = value
        elif tag == "sym":
            self.sym_scalar(node, field, value, out.symbolic)
        elif tag == "const":
            if not isinstance(value, str):
                raise CaptureError(node, field, "a constant must be a string")
            if value in DTYPES:
                out.dtype = DTYPES[value]
            elif value in LAYOUTS:
                out.layout = LAYOUTS[value]
            elif value in MEMORY_FORMATS:
                out.memory_format = MEMORY_FORMATS[value]
            elif not parse_device(value, out.device):
                raise CaptureError(node, field, f'unknown constant "{value}" (expected a dtype, '
                                   "device, layout or memory format)")
        else:
            raise CaptureError(node, field, f'unknown tagged value "{tag}"')

    def debug(self, name: str, n: dict, out: pb.DebugInfo) -> None:
        out.original_name = name
        trace = n.get("stack_trace")
        if trace is not None:
            if not isinstance(trace, str):
                raise CaptureError(name, "stack_trace", "must be a string")
            out.stack_trace = trace

    def meta(self, name: str, n: dict, out: pb.ValueMeta) -> None:
        if "meta" not in n:
            out.none.SetInParent()
        else:
            self.value_meta(name, "meta", n["meta"], out)

    def constant(self, name: str, n: dict) -> None:
        node = self.graph.nodes.add(name=name)
        self.meta(name, n, node.outputs.add())
        if not node.outputs[0].HasField("tensor"):
            raise CaptureError(name, "meta", "a get_attr constant must have tensor metadata")
        t = node.outputs[0].tensor
        raw: Optional[bytes] = None
        if n.get("value") is not None:
            value = n["value"]
            if not isinstance(value, dict) or not isinstance(value.get("b64"), str):
                raise CaptureError(name, "value", 'must be {"b64": base64 of the tensor\'s bytes}')
            try:
                raw = base64.b64decode(value["b64"], validate=True)
            except ValueError:
                raise CaptureError(name, "value.b64", "not valid base64") from None
        sizes = []
        for s in t.sizes:
            if s.WhichOneof("kind") != "value":
                raise CaptureError(name, "value", "a constant must have concrete sizes")
            sizes.append(s.value)
        if math.prod(sizes) == 0:
            node.target = "aten.empty.memory_format"
            node.args.add().list.items.extend(pb.Argument(int_value=s) for s in sizes)
        elif not sizes:
            scalar_constant(name, t.dtype, raw, node.args.add())
            node.target = "aten.scalar_tensor.default"
        else:
            raise CaptureError(name, "value", f"a constant tensor of {math.prod(sizes)} elements "
                               "(only empty and 0-d constants become calls)")
        node.kwargs.add(name="dtype").value.dtype = t.dtype
        node.kwargs.add(name="device").value.device.CopyFrom(t.device)
        self.debug(name, n, node.debug)
        self.names.add(name)

    def node(self, n: Any, index: int) -> bool:
        label = n.get("name") if isinstance(n, dict) and isinstance(n.get("name"), str) else f"#{index}"
        if not isinstance(n, dict):
            raise CaptureError(label, "", "a node must be a JSON object")
        name = n.get("name")
        if not isinstance(name, str) or not name:
            raise CaptureError(label, "name", "missing or not a non-empty string")
        op = n.get("op")
        if not isinstance(op, str):
            raise CaptureError(name, "op", "missing or not a string")
        if op != "output" and name in self.names:
            raise CaptureError(name, "name", "defined twice")
        if op == "placeholder":
            inp = self.graph.inputs.add(name=name)
            self.meta(name, n, inp.meta)
            self.debug(name, n, inp.debug)
            role = n.get("role")
            if role is not None:
                if not isinstance(role, str) or role not in ROLES:
                    raise CaptureError(name, "role", f"unknown input role {json.dumps(role)} "
                                       f"(expected {', '.join(ROLES)})")
                inp.role = ROLES[role]
            self.names.add(name)
            return False
        if op == "output":
            args = n.get("args")
            if not isinstance(args, list) or len(args) != 1:
                raise CaptureError(name, "args", "the output node must have exactly one argument")
            self.argument(name, "args[0]", args[0], self.graph.output)
            return True
        if op == "get_attr":
            self.constant(name, n)
            return False
        if op != "call_function":
            raise CaptureError(name, "op", f'unsupported op "{op}" (expected placeholder, '
                               "call_function, get_attr or output)")
        node = self.graph.nodes.add(name=name)
        target = n.get("target")
        if not isinstance(target, str) or not target:
            raise CaptureError(name, "target", "missing or not a non-empty string")
        node.target = canonical_target(target)
        args = n.get("args", [])
        if not isinstance(args, list):
            raise CaptureError(name, "args", "must be a list")
        for i, a in enumerate(args):
            self.argument(name, f"args[{i}]", a, node.args.add())
        kwargs = n.get("kwargs", {})
        if not isinstance(kwargs, dict):
            raise CaptureError(name, "kwargs", "must be an object")
        for key, value in kwargs.items():
            self.argument(name, f"kwargs.{key}", value, node.kwargs.add(name=key).value)
        meta = n.get("meta")
        if isinstance(meta, list):
            node.multi_output = True
            for i, m in enumerate(meta):
                self.value_meta(name, f"meta[{i}]", m, node.outputs.add())
        else:
            self.meta(name, n, node.outputs.add())
        self.debug(name, n, node.debug)
        self.names.add(name)
        return False

    def guards(self, g: Any) -> None:
        if not isinstance(g, dict):
            raise CaptureError("", "guards", "must be an object")
        for i, guard in enumerate(g.get("all_guards") or []):
            if not isinstance(guard, str):
                raise CaptureError("", f"guards.all_guards[{i}]", "must be a string")
            self.graph.guards.shape_env.append(guard)
            self.note_symbols(guard)
        expr = g.get("guards_expr")
        if expr is not None:
            if not isinstance(expr, str):
                raise CaptureError("", "guards.guards_expr", "must be a string or null")
            self.graph.guards.python_expr = expr
        for sym, val in (g.get("var_to_val") or {}).items():
            s = self.symbol(sym)
            if isinstance(val, bool):
                s.int_hint = int(val)
            elif isinstance(val, int):
                s.int_hint = val
            elif isinstance(val, float):
                s.float_hint = val
            else:
                raise CaptureError("", f"guards.var_to_val.{sym}", "a hint must be a number")
        for sym, rng in (g.get("var_to_range") or {}).items():
            field = f"guards.var_to_range.{sym}"
            if not isinstance(rng, list) or len(rng) != 2:
                raise CaptureError("", field, "must be a [lower, upper] pair")
            s = self.symbol(sym)
            bound(field + "[0]", rng[0], s.lower)
            bound(field + "[1]", rng[1], s.upper)

    def run(self, capture: Any) -> pb.Graph:
        if not isinstance(capture, dict):
            raise CaptureError("", "", "the top level must be a JSON object")
        info = self.graph.info
        for key, attr in (("model", "model"), ("kind", "kind"), ("code", "source")):
            v = capture.get(key)
            if v is None:
                continue
            if not isinstance(v, str):
                raise CaptureError("", key, "must be a string")
            setattr(info, attr, v)
        nodes = capture.get("nodes")
        if not isinstance(nodes, list):
            raise CaptureError("", "nodes", "missing or not a list")
        saw_output = False
        for i, n in enumerate(nodes):
            if saw_output:
                label = n.get("name") if isinstance(n, dict) else f"#{i}"
                raise CaptureError(str(label), "op", "a node follows the output node")
            saw_output = self.node(n, i)
        if not saw_output:
            raise CaptureError("", "nodes", "the graph has no output node")
        if capture.get("guards") is not None:
            self.guards(capture["guards"])
        for name in self.mentioned:
            self.symbol(name)
        return self.graph


def bound(field: str, v: Any, out: pb.Bound) -> None:
    """Bounds print as sympy values: "2", "-int_oo", "oo", "1.5"."""
    if isinstance(v, bool) or not isinstance(v, (int, float, str)):
        raise CaptureError("", field, "a bound must be a number or a string")
    if isinstance(v, int):
        out.int_value = v
        return
    if isinstance(v, float):
        out.float_value = v
        return
    if v.lstrip("-") in ("int_oo", "oo"):
        out.infinite = True
        return
    try:
        out.int_value = int(v)
        return
    except ValueError:
        pass
    try:
        d = float(v)
    except ValueError:
        d = math.nan
    if not math.isfinite(d):
        raise CaptureError("", field, f'cannot read bound "{v}"')
    out.float_value = d


def scalar_constant(name: str, dtype: int, raw: Optional[bytes], out: pb.Argument) -> None:
    if raw is None:
        raise CaptureError(name, "value", "a 0-d constant needs its value")
    if dtype == pb.DTYPE_BFLOAT16:
        if len(raw) != 2:
            raise CaptureError(name, "value", f"holds {len(raw)} bytes, a bfloat16 holds 2")
        out.float_value = struct.unpack("<f", b"\0\0" + raw)[0]
        return
    fmt = SCALAR_FORMATS.get(dtype)
    if fmt is None:
        raise CaptureError(name, "value", f"a {DTYPE_NAMES.get(dtype)} constant is not supported")
    if len(raw) != struct.calcsize(fmt):
        raise CaptureError(name, "value", f"holds {len(raw)} bytes, a {DTYPE_NAMES[dtype]} "
                           f"holds {struct.calcsize(fmt)}")
    (value,) = struct.unpack(fmt, raw)
    if dtype == pb.DTYPE_BOOL:
        out.bool_value = value != 0
    elif isinstance(value, float):
        out.float_value = value
    else:
        out.int_value = value


def capture_to_graph(capture: dict) -> pb.Graph:
    """The kiln.v1.Graph of a capture (a dict as kiln.capture makes it, or as json.load reads
    a capture file). Raises CaptureError naming the node and field at fault."""
    return _Converter().run(capture)
