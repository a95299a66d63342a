"""partition_debug.py's listing of a forward's saved values, without PyTorch."""

from __future__ import annotations

import partition_debug as pd


def node(name: str, target: str, dtype: str, shape: list[int]) -> dict:
    return {"name": name, "op": "call_function", "target": target, "args": [],
            "meta": {"dtype": dtype, "shape": shape}}


def test_saved_values_are_the_forwards_outputs_with_op_dtype_and_shape() -> None:
    graph = {"nodes": [
        {"name": "primals_1", "op": "placeholder", "target": "primals_1", "args": [],
         "meta": {"dtype": "torch.bfloat16", "shape": [4, 512, 50257]}},
        node("amax", "aten.amax.default", "torch.float32", [2048, 1]),
        node("nll", "aten.nll_loss_forward.default", "", []),  # a tuple: its meta a list
        {"name": "output", "op": "output", "target": "output", "meta": None,
         "args": [[{"node": "amax"}, {"node": "primals_1"}, None]]},
    ]}
    graph["nodes"][2]["meta"] = [{"dtype": "torch.float32", "shape": []}]
    graph["nodes"][3]["args"][0].insert(0, {"node": "nll"})
    assert pd.saved(graph) == [
        "nll aten.nll_loss_forward.default  ",
        "amax aten.amax.default torch.float32 [2048, 1]",
        "primals_1 primals_1 torch.bfloat16 [4, 512, 50257]",
        "None",
    ]
