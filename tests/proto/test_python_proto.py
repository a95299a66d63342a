"""The generated Python modules load and read graphs the C++ converter writes."""
import os
import pathlib
import subprocess
import tempfile

from kiln.v1 import admin_pb2, artifact_pb2, cache_pb2, cache_pb2_grpc, compile_pb2
from kiln.v1 import compile_pb2_grpc, errors_pb2, graph_pb2

BIN = pathlib.Path(os.environ["KILN_BINARY_DIR"])
GRAPHS = pathlib.Path(os.environ["KILN_GRAPHS_DIR"])


def test_services_are_generated():
    assert hasattr(compile_pb2_grpc, "CompilerStub")
    assert hasattr(cache_pb2_grpc, "CacheStub")
    assert compile_pb2.CacheOutcome.Name(compile_pb2.CACHE_OUTCOME_GUARD_MISS) == "CACHE_OUTCOME_GUARD_MISS"
    assert artifact_pb2.BINARY_KIND_CUBIN != artifact_pb2.BINARY_KIND_SHARED_OBJECT
    assert errors_pb2.ErrorDetail().divergence.job_id == ""
    assert admin_pb2.ExplainResponse().equal is False
    assert cache_pb2.CacheStats().blobs == 0
    cache = cache_pb2.DESCRIPTOR.services_by_name["Cache"].methods_by_name
    assert cache["Get"].server_streaming and not cache["Get"].client_streaming
    assert not cache["GetWhole"].server_streaming and not cache["GetWhole"].client_streaming
    assert cache["Put"].client_streaming and not cache["Put"].server_streaming
    assert not cache["PutWhole"].server_streaming and not cache["PutWhole"].client_streaming


def test_cli_output_parses_in_python():
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / "g.pb"
        src = GRAPHS / "nanogpt_fp32.bw.json"
        subprocess.run([str(BIN / "client" / "kiln"), "graph", "import-fx", str(src), "-o", str(out)],
                       check=True, capture_output=True)
        g = graph_pb2.Graph()
        g.ParseFromString(out.read_bytes())
        assert g.info.kind == "bw"
        targets = {n.target for n in g.nodes}
        assert "aten.native_layer_norm_backward.default" in targets
        assert "operator.getitem" in targets
        assert all(i.meta.WhichOneof("kind") in ("tensor", "symbolic") for i in g.inputs)


def test_cli_reports_bad_input():
    with tempfile.TemporaryDirectory() as tmp:
        bad = pathlib.Path(tmp) / "bad.json"
        bad.write_text('{"nodes": [{"name": "a", "op": "call_function", "target": "aten.relu.default",'
                       ' "args": [{"node": "ghost"}], "kwargs": {}, "meta": null}]}')
        r = subprocess.run([str(BIN / "client" / "kiln"), "graph", "import-fx", str(bad), "-o",
                            str(pathlib.Path(tmp) / "o.pb")], capture_output=True, text=True)
        assert r.returncode == 1
        assert 'node "a" args[0]: refers to unknown node "ghost"' in r.stderr
