"""kiln.backend without PyTorch: GraphCompiler's decisions, and how `import kiln` registers
the backend with Dynamo (a stand-in registry, fake_torch/, plays Dynamo)."""

from __future__ import annotations

import logging
import os
import pathlib
import subprocess
import sys
import time

import pytest
from conftest import read_capture

from kiln import timings
from kiln.backend import GraphCompiler
from kiln.client import CompileResult, RequestBuilder
from kiln.errors import (CompileRejected, RankDivergence, ServerUnreachable, SettingsError)
from kiln.fallback import FallbackPolicy
from kiln.graph_proto import capture_to_graph
from kiln.settings import Settings
from kiln.v1 import compile_pb2, errors_pb2

HERE = pathlib.Path(__file__).resolve().parent


class ScriptedClient:
    """Answers each compile with the next of `answers` (an exception is raised)."""

    def __init__(self, *answers) -> None:
        self.answers = list(answers)
        self.requests: list[compile_pb2.CompileRequest] = []

    def compile(self, request):
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


def hit() -> CompileResult:
    response = compile_pb2.CompileResponse(outcome=compile_pb2.CACHE_OUTCOME_HIT,
                                           compile_key="c" * 64)
    response.artifact_digest.hash = "d" * 64
    return CompileResult(response, "00-" + "1" * 32 + "-" + "2" * 16 + "-01")


@pytest.fixture(scope="module")
def graph():
    return capture_to_graph(read_capture("mlp_fp32.fw.json"))


def compiler(client, settings: Settings, said: list) -> GraphCompiler:
    return GraphCompiler(client, RequestBuilder(settings),
                         FallbackPolicy(settings.fallback, warn=said.append))


def test_each_graph_is_one_numbered_request(graph) -> None:
    settings = Settings.from_options({"job_id": "j", "require_cudagraph": True}, {})
    client = ScriptedClient(hit(), ServerUnreachable("UNAVAILABLE", "down"), hit())
    said: list[str] = []
    c = compiler(client, settings, said)
    runners = [c.compile(graph, f"g{i}", "cuda:sm_90", rank=3, world_size=4).runner
               for i in range(3)]
    # Compiled for a CUDA target: Kiln's runtime runs them; the unreachable one runs eagerly.
    assert runners == ["kiln", "eager", "kiln"]
    assert [r.job.sequence for r in client.requests] == [0, 1, 2]
    assert {(r.job.job_id, r.job.rank, r.job.world_size) for r in client.requests} == {
        ("j", 3, 4)}
    assert all(r.options.target == "cuda:sm_90" and r.options.require_cudagraph
               for r in client.requests)
    assert len(said) == 1  # the failure


def test_each_answer_is_logged_with_its_key_and_artifact(graph, caplog) -> None:
    # Ranks compare these lines to see they run the same bytes (tests/gpu/multi_rank.py).
    c = compiler(ScriptedClient(hit()), Settings.from_options({}, {}), [])
    with caplog.at_level(logging.INFO, logger="kiln"):
        c.compile(graph, "frame 0/0.fw", "cuda:sm_90")
    assert f"graph frame 0/0.fw: hit, key {'c' * 64}, artifact {'d' * 64}, trace {'1' * 32}" \
        in caplog.messages


def test_the_round_trip_to_kilnd_counts_as_kilnds_time(graph) -> None:
    class SlowClient(ScriptedClient):
        def compile(self, request):
            time.sleep(0.02)
            return super().compile(request)

    c = compiler(SlowClient(hit(), ServerUnreachable("UNAVAILABLE", "down")),
                 Settings.from_options({}, {}), [])
    with timings.ledger() as times:
        c.compile(graph, "frame 0/0.fw", "cuda:sm_90")
        c.compile(graph, "frame 0/0.bw", "cuda:sm_90")  # a failed call took kilnd's time too
    assert set(times.seconds) == {"kilnd"} and times.seconds["kilnd"] >= 0.04


def test_divergence_and_settings_errors_are_raised(graph) -> None:
    report = errors_pb2.DivergenceReport(job_id="j")
    report.groups.add(compile_key="a" * 64, ranks=[0])
    report.groups.add(compile_key="b" * 64, ranks=[1])
    settings = Settings.from_options({"job_id": "j"}, {})
    c = compiler(ScriptedClient(RankDivergence("diverged", report)), settings, [])
    with pytest.raises(RankDivergence):
        c.compile(graph, "g", "x86_64", rank=1, world_size=2)
    no_job = compiler(ScriptedClient(hit()), Settings.from_options({}, {}), [])
    with pytest.raises(SettingsError):
        no_job.compile(graph, "g", "x86_64", rank=1, world_size=2)


def test_fallback_error_raises_kilnds_error(graph) -> None:
    settings = Settings.from_options({"fallback": "error"}, {})
    c = compiler(ScriptedClient(CompileRejected("INTERNAL", "boom")), settings, [])
    with pytest.raises(CompileRejected):
        c.compile(graph, "g", "x86_64")


def test_a_graph_that_cannot_be_captured_falls_back() -> None:
    said: list[str] = []
    c = compiler(ScriptedClient(), Settings.from_options({"fallback": "inductor"}, {}), said)
    decision = c.capture_failed(ValueError("a slice object in the arguments"), "g")
    assert decision.runner == "inductor"
    assert len(said) == 1 and "a slice object" in said[0]


def run_python(code: str, *path: pathlib.Path) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*map(str, path), env.get("PYTHONPATH", "")])
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_import_kiln_without_torch_registers_nothing() -> None:
    out = run_python("import kiln, kiln.backend, sys; print('torch' in sys.modules)")
    assert out == "False"


def test_import_kiln_registers_the_backend_once() -> None:
    code = ("import kiln, torch._dynamo as d, kiln.backend as b\n"
            "print(d.lookup_backend('kiln') is b.kiln_backend, b.register_backend())")
    assert run_python(code, HERE / "fake_torch") == "True False"


def test_import_kiln_registers_without_the_generated_modules() -> None:
    # tests/gpu/capture_corpus.py runs with client/python alone on the path.
    env = {"PATH": os.environ.get("PATH", ""),
           "PYTHONPATH": os.pathsep.join([str(HERE.parents[2] / "client" / "python"),
                                          str(HERE / "fake_torch")])}
    run = subprocess.run([sys.executable, "-c", "import kiln.capture, torch._dynamo as d, sys; "
                          "print(sorted(d.registered), 'kiln.v1' in sys.modules)"],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "['kiln'] False"


def test_graphs_of_one_compile_id_get_names_of_their_own() -> None:
    # The DDP optimizer hands the backend one graph per bucket under one compile id.
    from kiln.backend import _Process

    process = _Process()
    names = [process.frame_name(i) for i in ("0/0", "0/0", "1/0", "0/0")]
    assert names == ["frame 0/0", "frame 0/0-1", "frame 1/0", "frame 0/0-2"]
    assert [process.frame_name(None) for _ in range(2)] == ["frame 0", "frame 1"]


def test_the_joint_graph_is_split_by_min_cut_unless_the_setting_says_default(
        monkeypatch) -> None:
    # Stand-ins for PyTorch's partitioners and decompositions (partitioning_test): which
    # partitioner and decompositions AOTAutograd is handed, for the backend's graphs and for
    # kiln.capture's.
    import types

    from partitioning_test import stand_in_torch

    from kiln import backend, capture, partitioning

    stand_in_torch(monkeypatch)
    common = types.ModuleType("torch._dynamo.backends.common")
    common.aot_autograd = lambda **kwargs: kwargs  # what kiln.capture's recorder hands over
    monkeypatch.setitem(sys.modules, "torch._dynamo.backends.common", common)
    monkeypatch.setitem(sys.modules, "functorch.compile",
                        types.SimpleNamespace(make_boxed_func=lambda f: f))
    for options, env, expected in (({}, {}, "min_cut"),
                                   ({}, {"KILN_PARTITIONER": "default"}, "default"),
                                   ({"partitioner": "min_cut"}, {"KILN_PARTITIONER": "default"},
                                    "min_cut")):
        settings = Settings.from_options(options, env)
        said: list = []
        compilers = backend._compilers(compiler(ScriptedClient(), settings, said), settings,
                                       "frame 0/0", cached=False)
        assert settings.partitioner == expected
        options_handed = ("partition_fn", "decompositions", "keep_inference_input_mutations")
        assert {k: compilers[k] for k in options_handed} == (
            partitioning.aot_autograd_options(expected, layouts=True))
        assert len(compilers["decompositions"]) == (5 if expected == "min_cut" else 0)
        handed = capture.Recorder("m", partitioner=settings.partitioner).backend()
        assert {k: handed[k] for k in options_handed} == (
            partitioning.aot_autograd_options(expected, layouts=True))
    # Without the layout choice, the partitioner is PyTorch's own.
    settings = Settings.from_options({"layout_optimization": False}, {})
    compilers = backend._compilers(compiler(ScriptedClient(), settings, []), settings,
                                   "frame 0/0", cached=False)
    assert compilers["partition_fn"] == partitioning.partition_fn("min_cut")
    assert compilers["partition_fn"] != partitioning.partition_fn("min_cut", layouts=True)


def test_a_forwards_saved_values_start_after_what_autograd_returns(monkeypatch) -> None:
    # A stand-in for torch._guards.TracingContext as AOTAutograd leaves it around the forward
    # compiler: num_forward outputs (mutated inputs, the user's outputs, intermediate bases)
    # come first, after any effect tokens.
    import types

    from kiln import backend

    context = types.SimpleNamespace(fw_metadata=types.SimpleNamespace(num_forward=3,
                                                                      tokens=[]))
    guards = types.SimpleNamespace(TracingContext=types.SimpleNamespace(
        try_get=lambda: context))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(_guards=guards))
    assert backend._saved_from("fw") == 3
    assert backend._saved_from("bw") == 0 and backend._saved_from("infer") is None
    context.fw_metadata.tokens = ["token"]
    assert backend._saved_from("fw") == 4
    context.fw_metadata = None  # compiled outside AOTAutograd: every small output is copied
    assert backend._saved_from("fw") is None


def test_a_forwards_parameters_and_buffers_are_named_as_aot_autograd_knows_them(
        monkeypatch) -> None:
    # static_input_indices: Dynamo's parameters and buffers among the forward's inputs;
    # input_info says which require grad. The roles reach kilnd in the graph, whose CUDA-graph
    # analysis lets a plan that writes back a buffer be captured.
    import types

    from kiln import capture

    info = [types.SimpleNamespace(requires_grad=g) for g in (True, False, False, False)]
    context = types.SimpleNamespace(fw_metadata=types.SimpleNamespace(
        static_input_indices=[0, 2, 9], input_info=info))
    guards = types.SimpleNamespace(TracingContext=types.SimpleNamespace(
        try_get=lambda: context))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(_guards=guards))
    assert capture.static_roles("fw", 4) == {0: "parameter", 2: "buffer"}  # 9: no such input
    assert capture.static_roles("infer", 4) == {0: "parameter", 2: "buffer"}
    assert capture.static_roles("bw", 4) == {}
    context.fw_metadata = None
    assert capture.static_roles("fw", 4) == {}
