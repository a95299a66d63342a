"""kiln.graph_proto turns every corpus graph into exactly the kiln.v1.Graph that the C++
importer of capture files makes (`kiln graph import-fx`), so live requests and capture files
are one format with one compile key; and it names what is wrong in bad captures."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import re
import subprocess

import pytest

from kiln.graph_proto import CaptureError, capture_to_graph
from kiln.v1 import graph_pb2 as pb

ROOT = pathlib.Path(__file__).resolve().parents[3]
GRAPHS = pathlib.Path(os.environ.get("KILN_GRAPHS_DIR", ROOT / "tests/data/graphs"))
KILN = pathlib.Path(os.environ.get("KILN_BINARY_DIR", ROOT / "build/release")) / "client" / "kiln"


def corpus() -> list[str]:
    return sorted(p.name for p in GRAPHS.iterdir() if p.name.endswith((".json", ".json.gz")))


def read_text(path: pathlib.Path) -> str:
    data = path.read_bytes()
    return (gzip.decompress(data) if path.suffix == ".gz" else data).decode()


@pytest.mark.parametrize("name", corpus())
def test_same_graph_as_the_cpp_importer(name: str, tmp_path: pathlib.Path) -> None:
    text = read_text(GRAPHS / name)
    plain = tmp_path / "graph.json"
    plain.write_text(text)
    out = tmp_path / "graph.pb"
    run = subprocess.run([str(KILN), "graph", "import-fx", str(plain), "-o", str(out)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    expected = pb.Graph()
    expected.ParseFromString(out.read_bytes())
    assert capture_to_graph(json.loads(text)) == expected


def small() -> dict:
    meta = {"shape": [4], "stride": [1], "dtype": "torch.float32", "device": "cuda:0",
            "storage_offset": 0}
    return {"model": "small", "kind": "fw", "nodes": [
        {"name": "x", "op": "placeholder", "target": "x", "args": [], "kwargs": {},
         "meta": dict(meta)},
        {"name": "relu", "op": "call_function", "target": "aten.relu.default",
         "args": [{"node": "x"}], "kwargs": {}, "meta": dict(meta)},
        {"name": "output", "op": "output", "target": "output", "args": [[{"node": "relu"}]],
         "kwargs": {}, "meta": None}]}


def test_python_values_convert() -> None:
    g = small()
    g["nodes"][1]["target"] = "aten.clamp.default"
    g["nodes"][1]["args"] += [float("-inf"), float("nan")]
    g["nodes"][1]["meta"] = [g["nodes"][1]["meta"], None, 128]
    graph = capture_to_graph(g)
    node = graph.nodes[0]
    assert node.args[1].float_value == float("-inf")
    assert node.args[2].float_value != node.args[2].float_value
    assert node.multi_output and node.outputs[1].HasField("none")
    assert node.outputs[2].int_value == 128


def test_constants_become_factory_calls() -> None:
    g = small()
    g["nodes"].insert(1, {"name": "c", "op": "get_attr", "target": "c", "args": [],
                          "kwargs": {}, "meta": {"shape": [], "stride": [],
                                                 "dtype": "torch.bfloat16", "device": "cuda:0",
                                                 "storage_offset": 0},
                          "value": {"b64": "wD8="}})
    node = capture_to_graph(g).nodes[0]
    assert node.target == "aten.scalar_tensor.default"
    assert node.args[0].float_value == 1.5
    assert node.kwargs[0].value.dtype == pb.DTYPE_BFLOAT16


def test_placeholder_roles_convert() -> None:
    g = small()
    assert capture_to_graph(g).inputs[0].role == pb.INPUT_ROLE_UNSPECIFIED
    g["nodes"][0]["role"] = "parameter"
    assert capture_to_graph(g).inputs[0].role == pb.INPUT_ROLE_PARAMETER


@pytest.mark.parametrize("edit, message", [
    (lambda g: g["nodes"][0].__setitem__("role", "weights"),
     'node "x" role: unknown input role "weights" (expected parameter, buffer, user_input, '
     'tangent, saved, rng_state)'),
    (lambda g: g["nodes"][0].__setitem__("role", ["buffer"]),
     'node "x" role: unknown input role ["buffer"]'),
    (lambda g: g["nodes"][1]["args"].__setitem__(0, {"node": "nowhere"}),
     'node "relu" args[0]: refers to unknown node "nowhere"'),
    (lambda g: g["nodes"][1]["meta"].__setitem__("dtype", "torch.float33"),
     'node "relu" meta.dtype: unknown dtype "torch.float33"'),
    (lambda g: g["nodes"].pop(), "nodes: the graph has no output node"),
    (lambda g: g["nodes"][1].__setitem__("op", "call_module"),
     'node "relu" op: unsupported op "call_module"'),
])
def test_bad_captures_name_node_and_field(edit, message: str) -> None:
    g = small()
    edit(g)
    with pytest.raises(CaptureError, match=re.escape(message)):
        capture_to_graph(g)
