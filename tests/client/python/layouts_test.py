"""kiln.layouts chooses channels-last layouts around convolutions on a joint graph: a
convolution's result and what reads it are channels last, except values the graph returns,
values a view reads, and 4-D values whose layout would not change. Graphs are stand-ins for
FX's (nodes with op, target, args, users and meta["val"]); tensors are fake_torch's."""

from __future__ import annotations

import operator
import sys
import types
from typing import Any

import pytest

sys.path.insert(0, __import__("os").path.dirname(__file__))

import fake_torch  # noqa: E402

torch = fake_torch.install()

from kiln import layouts  # noqa: E402


def op(name: str, view: bool = False) -> Any:
    """An OpOverload stand-in: its schema's name, overload and whether its result aliases."""
    packet, _, overload = name.partition(".")
    ret = types.SimpleNamespace(alias_info=object() if view else None)
    return types.SimpleNamespace(_schema=types.SimpleNamespace(
        name=f"aten::{packet}", overload_name="" if overload == "default" else overload,
        returns=[ret]))


CONV, RELU, ADD = op("convolution.default"), op("relu.default"), op("add.Tensor")
MEAN, VIEW = op("mean.dim"), op("view.default", view=True)
ALIAS = op("alias.default", view=True)
TO_COPY, CONV_BACKWARD = op("_to_copy.default"), op("convolution_backward.default")
BATCH_NORM = op("_native_batch_norm_legit_functional.default")


class Node:
    def __init__(self, graph: "Graph", name: str, kind: str, target: Any, args: tuple,
                 val: Any) -> None:
        self.name, self.op, self.target, self.args, self.kwargs = name, kind, target, args, {}
        self.meta = {"val": val}
        self.users: dict = {}
        for a in args:
            for x in (a if isinstance(a, (list, tuple)) else [a]):
                if isinstance(x, Node):
                    x.users[self] = None
        graph.nodes.append(self)

    def __repr__(self) -> str:
        return self.name


class Graph:
    def __init__(self) -> None:
        self.nodes: list[Node] = []

    def add(self, name: str, target: Any, *args: Any, val: Any = None) -> Node:
        """A call, or (target None) a placeholder, or the output when `name` is "output"."""
        kind = "output" if name == "output" else "placeholder" if target is None else (
            "call_function")
        return Node(self, name, kind, target, args, val)


def t(n: int, c: int, h: int, w: int) -> Any:
    return torch.empty([n, c, h, w], dtype=torch.bfloat16, device="cuda:0")


def strides(node: Node) -> list:
    return node.meta["val"].stride()


CL = [6 * 4 * 4, 1, 4 * 6, 6]  # [2, 6, 4, 4] channels last
NCHW = [6 * 4 * 4, 16, 4, 1]


def resnet_block() -> tuple[Graph, dict]:
    """x -> conv -> relu -> conv2 -> add(relu, conv2) -> relu2 -> view; mean(add) kept.
    The graph returns conv2, the view and the mean."""
    g = Graph()
    x = g.add("x", None, val=t(2, 3, 4, 4))
    w = g.add("w", None, val=t(6, 3, 3, 3))
    conv = g.add("conv", CONV, x, w, val=t(2, 6, 4, 4))
    relu = g.add("relu", RELU, conv, val=t(2, 6, 4, 4))
    conv2 = g.add("conv2", CONV, relu, w, val=t(2, 6, 4, 4))
    add = g.add("add", ADD, relu, conv2, val=t(2, 6, 4, 4))
    relu2 = g.add("relu2", RELU, add, val=t(2, 6, 4, 4))
    flat = g.add("flat", VIEW, relu2, [2, 96], val=torch.empty([2, 96]))
    mean = g.add("mean", MEAN, add, [2, 3], True, val=t(2, 6, 1, 1))
    g.add("output", None, [conv2, flat, mean])
    return g, {n.name: n for n in g.nodes}


def test_a_convolutions_result_and_what_reads_it_are_channels_last() -> None:
    g, n = resnet_block()
    assert layouts.choose(g) == 3
    assert strides(n["conv"]) == CL and strides(n["relu"]) == CL and strides(n["add"]) == CL
    assert strides(n["x"]) == [48, 16, 4, 1]  # inputs keep theirs
    assert strides(n["conv2"]) == NCHW, "the graph returns it"
    assert strides(n["relu2"]) == NCHW, "a view reads it"
    assert strides(n["mean"]) == [6, 1, 1, 1], "channels last is the same layout at 1x1"
    assert layouts.choose(g) == 0  # chosen once, nothing changes again


def test_a_tuple_results_element_and_its_getitem_change_together() -> None:
    g = Graph()
    x = g.add("x", None, val=t(2, 3, 4, 4))
    conv = g.add("conv", CONV, x, x, val=t(2, 6, 4, 4))
    mean, rstd = torch.empty([6]), torch.empty([6])
    bn = g.add("bn", BATCH_NORM, conv, val=(t(2, 6, 4, 4), mean, rstd))
    out = g.add("out", operator.getitem, bn, 0, val=bn.meta["val"][0])
    g.add("stat", operator.getitem, bn, 1, val=mean)
    relu = g.add("relu", RELU, out, val=t(2, 6, 4, 4))
    g.add("output", None, [relu])
    assert layouts.choose(g) == 2  # conv and the norm's result; the graph returns relu
    assert isinstance(bn.meta["val"], tuple) and bn.meta["val"][0].stride() == CL
    assert strides(out) == CL and bn.meta["val"][1] is mean


def test_an_alias_takes_its_inputs_layout_and_a_view_of_it_keeps_both() -> None:
    # The backward reads activations through alias (min-cut's form of detach).
    g = Graph()
    x = g.add("x", None, val=t(2, 3, 4, 4))
    conv = g.add("conv", CONV, x, x, val=t(2, 6, 4, 4))
    relu = g.add("relu", RELU, conv, val=t(2, 6, 4, 4))
    alias = g.add("alias", ALIAS, relu, val=t(2, 6, 4, 4))
    alias2 = g.add("alias2", ALIAS, alias, val=t(2, 6, 4, 4))
    back = g.add("back", RELU, alias2, val=t(2, 6, 4, 4))
    relu2 = g.add("relu2", RELU, relu, val=t(2, 6, 4, 4))
    viewed = g.add("viewed", ALIAS, relu2, val=t(2, 6, 4, 4))
    flat = g.add("flat", VIEW, viewed, [2, 96], val=torch.empty([2, 96]))
    g.add("output", None, [back, flat])
    layouts.choose(g)
    assert strides(relu) == CL and strides(alias) == CL and strides(alias2) == CL
    assert strides(relu2) == NCHW and strides(viewed) == NCHW, "a view reads its alias"


def test_a_computed_weight_is_channels_last_for_its_convolutions() -> None:
    # Autocast's bf16 copy of a parameter; cuDNN would convert it at every call.
    g = Graph()
    x = g.add("x", None, val=t(2, 3, 4, 4))
    w = g.add("w", None, val=t(6, 3, 3, 3))
    w16 = g.add("w16", TO_COPY, w, val=t(6, 3, 3, 3))
    conv = g.add("conv", CONV, x, w16, val=t(2, 6, 4, 4))
    relu = g.add("relu", RELU, conv, val=t(2, 6, 4, 4))
    grads = g.add("grads", CONV_BACKWARD, relu, x, w16, val=(t(2, 3, 4, 4), t(6, 3, 3, 3)))
    dx = g.add("dx", operator.getitem, grads, 0, val=grads.meta["val"][0])
    dw = g.add("dw", operator.getitem, grads, 1, val=grads.meta["val"][1])
    dw32 = g.add("dw32", TO_COPY, dw, val=t(6, 3, 3, 3))
    v = g.add("v", None, val=t(6, 3, 3, 3))
    v16 = g.add("v16", TO_COPY, v, val=t(6, 3, 3, 3))
    flat = g.add("flat", VIEW, v16, [6, 27], val=torch.empty([6, 27]))
    conv2 = g.add("conv2", CONV, relu, v16, val=t(2, 6, 4, 4))
    g.add("output", None, [dx, dw32, flat, conv2])
    layouts.choose(g)
    assert strides(w16) == [27, 1, 9, 3] and strides(w) == [27, 9, 3, 1]
    assert strides(dw) == [27, 1, 9, 3], "the weight's gradient reads channels-last values"
    assert strides(dw32) == [27, 9, 3, 1] and strides(dx) == [48, 16, 4, 1], "returned"
    assert strides(v16) == [27, 9, 3, 1], "a view reads it"


def test_a_graph_without_convolutions_is_left() -> None:
    g = Graph()
    x = g.add("x", None, val=t(2, 6, 4, 4))
    relu = g.add("relu", RELU, x, val=t(2, 6, 4, 4))
    relu2 = g.add("relu2", RELU, relu, val=t(2, 6, 4, 4))
    g.add("output", None, [relu2])
    assert layouts.choose(g) == 0 and strides(relu) == NCHW


def test_the_partitioner_sees_the_chosen_layouts() -> None:
    seen: list = []

    def partition(joint: Any, inputs: Any, **kwargs: Any) -> str:
        seen.append((strides(next(n for n in joint.graph.nodes if n.name == "conv")), kwargs))
        return "partitioned"

    g, _ = resnet_block()
    wrapped = layouts.wrap_partition(partition)
    assert wrapped is layouts.wrap_partition(partition)
    assert wrapped(types.SimpleNamespace(graph=g), [], num_fwd_outputs=1) == "partitioned"
    assert seen == [(CL, {"num_fwd_outputs": 1})]


@pytest.mark.parametrize("sizes, expected", [
    ([2, 6, 4, 4], [96, 1, 24, 6]), ([1, 3, 1, 1], [3, 1, 3, 3])])
def test_channels_last_strides(sizes: list, expected: list) -> None:
    assert layouts.channels_last_strides(sizes) == expected
