"""Channels-last layouts for the activations around convolutions, chosen on AOTAutograd's
joint graph before it is partitioned, as Inductor's layout optimization chooses them.

cuDNN computes convolutions in NHWC. Handed NCHW (contiguous) tensors, it converts the input
to NHWC and the result back around every convolution, and its backward does the same for
the gradients: ResNet-18's step ran about 110 such conversion kernels on the H200, launched
one by one from the host, which bounds that step. kilnd keeps every value's layout as the
graph's metadata records it, and its kernels read and write any strides, so the graph only
has to say channels last where the convolutions want it:

- a convolution's result is channels last (cuDNN writes it so when its input is);
- so is a weight that the graph computes (autocast's bf16 copy of a parameter) for the
  convolutions and their backwards that read it: cuDNN converts an NCHW weight to NHWC at
  every call otherwise, forward and backward; a parameter itself keeps its layout;
- so is every 4-D result of an op that reads a channels-last 4-D tensor (batch norm, ReLU,
  the residual add, pooling, their backwards, a convolution's input gradient), from the first
  convolution on through the graph;
- except a result that the graph returns (the user's outputs and the gradients keep the
  layout autograd expects), one that a view reads (a view's sizes and strides are recorded
  from its input's: changing the input would change what the view means), and one that is
  channels last or not contiguous already. An alias or a detach (IDENTITY_VIEWS) is its
  input whole: it takes the input's new layout, and what holds for the input holds for it.

Both graphs the partitioner makes from the joint one carry its metadata, so the forward
saves each activation in the layout its backward reads it in. The choice changes only
strides: every value is what it was. Inference graphs go through the same pass (their
outputs are all returned, so they keep their layouts).

Nodes are FX nodes (op, target, args, kwargs, users, meta["val"]); the tensors are
AOTAutograd's fake tensors, whose shapes may be symbolic. Importing this module needs no
PyTorch.
"""

from __future__ import annotations

import contextlib
import operator
from typing import Any, Callable, Iterator

# Ops whose result is a convolution's output, channels last from the first convolution on.
CONVOLUTIONS = ("aten.convolution.default", "aten.cudnn_convolution.default",
                "aten._convolution.default")
# Views that are their input whole, sizes and strides alike (autograd's detach, which the
# min-cut partitioner's decompositions make an alias, before every activation a backward
# reads): they take their input's layout with it.
IDENTITY_VIEWS = ("aten.alias.default", "aten.detach.default")
# Where each op that reads a convolution's weight takes it.
WEIGHT_ARGS = {**{name: 1 for name in CONVOLUTIONS}, "aten.convolution_backward.default": 2}


def choose(graph: Any) -> int:
    """Gives the values of `graph` that should be channels last (see the module's docstring)
    that layout, in their metadata; returns how many it changed."""
    returned = _returned(graph)
    weights = _weights(graph)
    changed = 0
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if _is_view(node.target):
            continue
        if _name(node.target) not in CONVOLUTIONS and node not in weights and not any(
                _channels_last(_val(a)) for a in _node_args(node)):
            continue
        for index, value, readers in _results(node):
            if not _wants_channels_last(value):
                continue
            aliases = _aliases(readers)
            if any(r in returned for r in readers + aliases):
                continue
            if any(_is_view(u.target) and _name(u.target) not in IDENTITY_VIEWS
                   for r in readers + aliases for u in r.users if u.op == "call_function"):
                continue
            new_value = _as_channels_last(value)
            _set(node, index, new_value)
            for a in aliases:
                a.meta["val"] = new_value
            changed += 1
    return changed


def _weights(graph: Any) -> set:
    """The nodes that convolutions and their backwards read as their weight (WEIGHT_ARGS)."""
    found: set = set()
    for node in graph.nodes:
        index = WEIGHT_ARGS.get(_name(node.target)) if node.op == "call_function" else None
        if index is not None and index < len(node.args) and hasattr(node.args[index], "users"):
            found.add(node.args[index])
    return found


def _aliases(readers: list) -> list:
    """The identity views (IDENTITY_VIEWS) of `readers`, and theirs, in the order found."""
    found: list = []
    todo = list(readers)
    while todo:
        for u in todo.pop(0).users:
            if u.op == "call_function" and _name(u.target) in IDENTITY_VIEWS and u not in found:
                found.append(u)
                todo.append(u)
    return found


_WRAPPED: dict[Any, Callable] = {}


def wrap_partition(partition: Callable) -> Callable:
    """`partition` (an AOTAutograd partitioner) choosing layouts on the joint graph first; one
    function per partitioner, so that options built twice compare equal."""
    if partition not in _WRAPPED:
        def partition_with_layouts(joint_module: Any, joint_inputs: Any, **kwargs: Any) -> Any:
            choose(joint_module.graph)
            return partition(joint_module, joint_inputs, **kwargs)

        _WRAPPED[partition] = partition_with_layouts
    return _WRAPPED[partition]


def channels_last_strides(sizes: list[Any]) -> list[Any]:
    """The strides of a channels-last [N, C, H, W] tensor of `sizes` (ints or SymInts)."""
    _, c, h, w = sizes
    return [h * w * c, 1, w * c, c]


def contiguous_strides(sizes: list[Any]) -> list[Any]:
    strides, acc = [], 1
    for s in reversed(sizes):
        strides.insert(0, acc)
        acc = acc * s
    return strides


# --- FX and fake tensors -------------------------------------------------------------------


def _name(target: Any) -> str:
    """aten.NAME.OVERLOAD for an OpOverload, else its str()."""
    schema = getattr(target, "_schema", None)
    name = getattr(schema, "name", None)
    if isinstance(name, str) and name.startswith("aten::"):
        overload = getattr(schema, "overload_name", "") or "default"
        return f"aten.{name[len('aten::'):]}.{overload}"
    return str(target)


def _is_view(target: Any) -> bool:
    """Whether an op's result may alias an argument (a view, or an in-place op's self), as
    its schema says; True for a target without a schema, which nothing here knows."""
    if target is operator.getitem:
        return False
    schema = getattr(target, "_schema", None)
    if schema is None:
        return True
    return any(getattr(r, "alias_info", None) is not None for r in schema.returns)


def _val(x: Any) -> Any:
    meta = getattr(x, "meta", None)
    return meta.get("val") if isinstance(meta, dict) else None


def _node_args(node: Any) -> Iterator[Any]:
    def walk(a: Any) -> Iterator[Any]:
        if isinstance(a, (list, tuple)):
            for x in a:
                yield from walk(x)
        elif hasattr(a, "meta") and hasattr(a, "users"):
            yield a

    yield from walk(list(node.args) + list(node.kwargs.values()))


def _returned(graph: Any) -> set:
    """The nodes the graph's output returns."""
    found: set = set()
    for node in graph.nodes:
        if node.op == "output":
            found |= set(_node_args(node))
    return found


def _results(node: Any) -> Iterator[tuple[int, Any, list]]:
    """(index, value, nodes that stand for it) of each tensor result: the node itself for a
    single result, the getitem nodes that take it out of a tuple."""
    val = _val(node)
    if isinstance(val, (list, tuple)):
        for index, value in enumerate(val):
            readers = [u for u in node.users if u.op == "call_function" and
                       u.target is operator.getitem and u.args[1] == index]
            yield index, value, readers
    else:
        yield -1, val, [node]


def _set(node: Any, index: int, value: Any) -> None:
    if index < 0:
        node.meta["val"] = value
        return
    val = list(node.meta["val"])
    val[index] = value
    node.meta["val"] = type(node.meta["val"])(val)
    for u in node.users:
        if u.op == "call_function" and u.target is operator.getitem and u.args[1] == index:
            u.meta["val"] = value


def _sizes(t: Any) -> list[Any]:
    return list(t.shape)


def _layouts(t: Any) -> tuple[bool, bool]:
    """Whether `t` is a 4-D tensor laid out channels last, and whether it is one laid out
    contiguously (both, where C or H*W is 1)."""
    if not _four_d(t):
        return False, False
    sizes = _sizes(t)
    strides = list(t.stride())
    return (_same(strides, channels_last_strides(sizes), sizes),
            _same(strides, contiguous_strides(sizes), sizes))


def _channels_last(t: Any) -> bool:
    """A 4-D tensor laid out channels last, and not also contiguous."""
    last, contiguous = _layouts(t)
    return last and not contiguous


def _wants_channels_last(t: Any) -> bool:
    """A contiguous 4-D tensor whose channels-last layout differs."""
    last, contiguous = _layouts(t)
    return contiguous and not last


def _four_d(t: Any) -> bool:
    """A strided (dense) 4-D tensor."""
    return hasattr(t, "stride") and hasattr(t, "shape") and len(t.shape) == 4 and \
        str(getattr(t, "layout", "torch.strided")) == "torch.strided"


def _same(a: list[Any], b: list[Any], sizes: list[Any]) -> bool:
    """Whether two stride lists agree on every dimension of size other than 1 (which a
    stride does not move along). Symbolic values compare as PyTorch's guards would not: by
    their expressions, so a comparison never adds a guard."""
    for x, y, size in zip(a, b, sizes):
        if _known(size) == 1:
            continue
        if _known(x) != _known(y):
            return False
    return True


def _known(v: Any) -> Any:
    """An int, or the text of a symbolic value's expression."""
    if isinstance(v, int):
        return v
    node = getattr(v, "node", None)
    expr = getattr(node, "expr", None)
    if expr is not None:
        return str(expr)
    return str(v)


def _as_channels_last(t: Any) -> Any:
    """A fake tensor like `t` laid out channels last, made in `t`'s fake mode."""
    import torch  # noqa: PLC0415

    mode = getattr(t, "fake_mode", None)
    with mode if mode is not None else contextlib.nullcontext():
        return torch.empty_strided(_sizes(t), channels_last_strides(_sizes(t)), dtype=t.dtype,
                                   device=t.device)

