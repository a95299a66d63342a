"""kiln.client against a real kilnd on loopback: a corpus graph compiles into a verified
artifact whose trace kilnd joins; ranks that send different graphs get RankDivergence
naming the ranks and the node; an unreachable or too slow kilnd becomes a fallback with one
warning."""

from __future__ import annotations

import copy
import socket
import threading
import time

import pytest
from conftest import read_capture

from kiln.backend import GraphCompiler
from kiln.client import CompileClient, JobIdentity, RequestBuilder, build_request
from kiln.errors import CompileTimeout, RankDivergence, ServerUnreachable
from kiln.fallback import FallbackPolicy
from kiln.graph_proto import capture_to_graph
from kiln.settings import Settings
from kiln.v1 import artifact_pb2


def wait_for(condition, seconds: float = 10) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def test_compiles_a_corpus_graph_into_a_verified_artifact(kilnd) -> None:
    settings = Settings.from_options({"server": kilnd.address, "deadline": 120}, {})
    graph = capture_to_graph(read_capture("mlp_fp32.fw.json"))
    builder = RequestBuilder(settings)
    with CompileClient(settings) as client:
        first = client.compile(builder.build(graph, "x86_64"))
        second = client.compile(builder.build(graph, "x86_64"))
    assert first.outcome == "miss" and second.outcome == "hit"
    assert first.compile_key == second.compile_key and len(first.compile_key) == 64
    assert first.compiled_graph == second.compiled_graph
    compiled = artifact_pb2.CompiledGraph.FromString(first.compiled_graph)
    assert compiled.target == "x86_64"
    assert compiled.decision_digest == first.response.decision_digest
    # kilnd's trace of the request joined the trace our traceparent named.
    assert wait_for(lambda: any(r.get("trace_id") == first.trace_id
                                for r in kilnd.events("compile"))), kilnd.events("compile")


def test_ranks_that_diverge_get_an_error_naming_ranks_and_node(kilnd) -> None:
    capture = read_capture("mlp_fp32.fw.json")
    other = copy.deepcopy(capture)
    (gelu,) = [n for n in other["nodes"] if n["target"] == "aten.gelu.default"]
    gelu["target"] = "aten.relu.default"
    gelu["kwargs"] = {}
    graphs = [capture_to_graph(capture), capture_to_graph(other)]
    settings = Settings.from_options({"server": kilnd.address, "job_id": "diverging-job",
                                      "deadline": 60}, {})
    errors: dict[int, BaseException] = {}

    def rank(r: int) -> None:
        with CompileClient(settings) as client:
            try:
                client.compile(build_request(graphs[r], settings, "x86_64",
                                             JobIdentity("diverging-job", r, 2), 0))
            except BaseException as e:  # noqa: BLE001 (handed to the test's thread)
                errors[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(errors) == [0, 1]
    for e in errors.values():
        assert isinstance(e, RankDivergence), e
        assert e.job_id == "diverging-job" and e.sequence == 0
        assert sorted(e.ranks) == [[0], [1]]
        text = str(e)
        assert "ranks [0]" in text and "ranks [1]" in text
        # Which rank's graph the server names first depends on which arrived first.
        assert "first at node" in text, text
        assert ("aten.gelu.default vs aten.relu.default" in text
                or "aten.relu.default vs aten.gelu.default" in text), text


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fallback_run(settings: Settings, graphs: list, said: list[str]) -> list:
    policy = FallbackPolicy(settings.fallback, warn=said.append)
    with CompileClient(settings) as client:
        compiler = GraphCompiler(client, RequestBuilder(settings), policy)
        return [compiler.compile(g, f"g{i}", "x86_64") for i, g in enumerate(graphs)]


def test_an_unreachable_kilnd_falls_back_with_one_warning() -> None:
    settings = Settings.from_options({"server": f"127.0.0.1:{free_port()}", "deadline": 20}, {})
    graphs = [capture_to_graph(read_capture(n)) for n in ("mlp_fp32.fw.json", "mlp_fp32.bw.json")]
    said: list[str] = []
    decisions = fallback_run(settings, graphs, said)
    assert [d.runner for d in decisions] == ["eager", "eager"]
    assert len(said) == 1 and "kilnd is unreachable" in said[0], said
    with pytest.raises(ServerUnreachable):
        fallback_run(Settings.from_options({"server": settings.server, "fallback": "error"}, {}),
                     graphs[:1], [])


def test_a_too_slow_kilnd_falls_back_with_one_warning(kilnd) -> None:
    # Graphs no other test compiles (a hit can come back within a millisecond; compiling
    # takes far longer).
    graphs = [capture_to_graph(read_capture(n)) for n in
              ("mlp_dynamic.fw.json.gz", "mlp_dynamic.bw.json.gz")]
    settings = Settings.from_options({"server": kilnd.address, "deadline": 0.001,
                                      "fallback": "inductor"}, {})
    said: list[str] = []
    decisions = fallback_run(settings, graphs, said)
    assert [d.runner for d in decisions] == ["inductor", "inductor"]
    assert len(said) == 1 and "within the deadline" in said[0], said
    with pytest.raises(CompileTimeout):
        fallback_run(Settings.from_options({"server": kilnd.address, "deadline": 0.001,
                                            "fallback": "error"}, {}), graphs[1:], [])


def test_a_compiled_graph_runs_per_fallback_and_says_why_once(kilnd) -> None:
    settings = Settings.from_options({"server": kilnd.address, "deadline": 120}, {})
    graph = capture_to_graph(read_capture("mlp_fp32.fw.json"))
    said: list[str] = []
    decisions = fallback_run(settings, [graph, graph], said)
    assert [d.runner for d in decisions] == ["eager", "eager"]
    assert "kilnd compiled it" in decisions[0].reason
    assert len(said) == 1 and "runs Kiln's kernels on CUDA GPUs only" in said[0]
