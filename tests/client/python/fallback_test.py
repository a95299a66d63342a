"""kiln.fallback: which runner a graph gets after each kind of failure, one warning per
kind, and the errors that are never swallowed."""

from __future__ import annotations

import warnings

import pytest

from kiln.errors import (ArtifactMismatch, CaptureFailed, CompileFailed, CompileRejected,
                         CompileTimeout, RankDivergence, ServerUnreachable, SettingsError)
from kiln.fallback import KILN, Decision, FallbackPolicy, KilnWarning
from kiln.v1 import errors_pb2


def divergence() -> RankDivergence:
    report = errors_pb2.DivergenceReport(job_id="job", sequence=3)
    report.groups.add(compile_key="a" * 64, ranks=[0, 1, 2])
    report.groups.add(compile_key="b" * 64, ranks=[3])
    report.differences.append("ranks [3] vs [0,1,2]: differs in component graph, first at "
                              "node 5 (aten.gelu.default)")
    return RankDivergence("ranks of job job sent different graphs", report)


@pytest.mark.parametrize("runner", ["eager", "inductor"])
def test_failures_fall_back_with_one_warning_per_kind(runner: str) -> None:
    said: list[str] = []
    policy = FallbackPolicy(runner, warn=said.append)
    for i in range(3):
        d = policy.after_failure(ServerUnreachable("UNAVAILABLE", "connection refused"), f"g{i}")
        assert d.runner == runner and "kilnd is unreachable" in d.reason
    assert len(said) == 1
    assert "kilnd is unreachable" in said[0] and "graph g0" in said[0]
    assert f"fallback={runner}" in said[0] and "training goes on" in said[0]

    policy.after_failure(CompileTimeout("DEADLINE_EXCEEDED", "deadline"), "g3")
    policy.after_failure(CompileTimeout("DEADLINE_EXCEEDED", "deadline"), "g4")
    assert len(said) == 2 and "within the deadline" in said[1]
    policy.after_failure(CompileRejected("INTERNAL", "lower: boom"), "g5")
    policy.after_failure(CompileRejected("INVALID_ARGUMENT", "bad node"), "g6")
    policy.after_failure(CompileRejected("INVALID_ARGUMENT", "bad node"), "g7")
    policy.after_failure(ArtifactMismatch("DATA_LOSS", "hash"), "g8")
    policy.after_failure(CaptureFailed("CAPTURE", "slice"), "g9")
    assert len(said) == 6
    assert "could not compile" in said[2] and "INTERNAL" in said[2]
    assert "INVALID_ARGUMENT" in said[3]
    assert "do not match their digest" in said[4]
    assert "cannot be sent to kilnd" in said[5]


def test_warnings_are_kiln_warnings() -> None:
    policy = FallbackPolicy("eager")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        policy.after_failure(ServerUnreachable("UNAVAILABLE", "down"), "g0")
        policy.after_failure(ServerUnreachable("UNAVAILABLE", "down"), "g1")
    assert [w.category for w in caught] == [KilnWarning]


def test_error_policy_raises_the_failure() -> None:
    said: list[str] = []
    policy = FallbackPolicy("error", warn=said.append)
    failure = CompileTimeout("DEADLINE_EXCEEDED", "too slow")
    with pytest.raises(CompileTimeout) as e:
        policy.after_failure(failure, "g")
    assert e.value is failure and not said


@pytest.mark.parametrize("runner", ["eager", "inductor", "error"])
def test_an_uncapturable_plan_under_require_cudagraph_is_raised(runner: str) -> None:
    said: list[str] = []
    policy = FallbackPolicy(runner, warn=said.append, require_cudagraph=True)
    failure = CompileFailed("FAILED_PRECONDITION",
                            "the plan cannot be captured: %3: aten.nonzero.default ...")
    with pytest.raises(CompileFailed) as e:
        policy.after_failure(failure, "g")
    assert e.value is failure and not said
    # Without require_cudagraph the same code is one more failure to fall back from.
    if runner != "error":
        lenient = FallbackPolicy(runner, warn=said.append)
        assert lenient.after_failure(failure, "g").runner == runner and len(said) == 1


@pytest.mark.parametrize("runner", ["eager", "inductor", "error"])
def test_divergence_is_always_raised(runner: str) -> None:
    policy = FallbackPolicy(runner, warn=lambda m: None)
    with pytest.raises(RankDivergence) as e:
        policy.after_failure(divergence(), "g")
    text = str(e.value)
    assert "ranks [0,1,2]" in text and "ranks [3]" in text and "job 'job'" in text
    assert "node 5 (aten.gelu.default)" in text and "sequence 3" in text
    assert e.value.ranks == [[0, 1, 2], [3]]


def test_errors_that_are_not_compile_failures_are_raised() -> None:
    policy = FallbackPolicy("eager", warn=lambda m: None)
    with pytest.raises(SettingsError):
        policy.after_failure(SettingsError("job_id", "KILN_JOB_ID", "missing"), "g")


def test_success_on_a_cuda_target_runs_kilns_runtime_and_says_nothing() -> None:
    for runner in ("eager", "inductor", "error"):
        said: list[str] = []
        policy = FallbackPolicy(runner, warn=said.append)
        decision = policy.after_success("ab" * 32, "miss", "frame 0.fw", loadable=True,
                                        artifact=b"bytes")
        assert decision == Decision(KILN, "kilnd compiled it (key abababababab, miss)",
                                    compile_key="ab" * 32)
        assert decision.artifact == b"bytes"
        assert said == []


def test_success_without_a_runtime_for_the_target_runs_per_fallback_and_says_so_once() -> None:
    for runner, expected in (("eager", "eager"), ("inductor", "inductor"), ("error", "eager")):
        said: list[str] = []
        policy = FallbackPolicy(runner, warn=said.append)
        first = policy.after_success("ab" * 32, "miss", "frame 0.fw", loadable=False)
        again = policy.after_success("cd" * 32, "hit", "frame 0.bw", loadable=False)
        assert first == Decision(expected, "kilnd compiled it (key abababababab, miss)")
        assert again.runner == expected
        assert len(said) == 1 and "runs Kiln's kernels on CUDA GPUs only" in said[0]


def test_an_artifact_the_runtime_cannot_load_runs_per_fallback_or_raises() -> None:
    said: list[str] = []
    policy = FallbackPolicy("inductor", warn=said.append)
    error = OSError("cannot load Kiln's runtime library libkiln_runtime.so")
    first = policy.after_load_failure(error, "frame 0.fw")
    again = policy.after_load_failure(error, "frame 0.bw")
    assert first.runner == again.runner == "inductor"
    assert "cannot load the compiled graph (OSError: cannot load Kiln's runtime" in first.reason
    assert len(said) == 1 and "frame 0.fw" in said[0]
    with pytest.raises(OSError):
        FallbackPolicy("error", warn=said.append).after_load_failure(error, "frame 1.fw")


def test_unknown_policy() -> None:
    with pytest.raises(ValueError):
        FallbackPolicy("sometimes")
