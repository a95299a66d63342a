"""trainer_faults.py's verdicts, its runner's handshake with a worker that asks for kilnd to be
stopped, and the worker's reporting, without PyTorch or a GPU: what decides pass or fail must
be right before the script runs on a GPU machine."""

from __future__ import annotations

import json
import logging
import math
import pathlib
import warnings

import pytest

import trainer_faults as tf
import trainer_faults_worker as tw

UNREACHABLE = ("kilnd is unreachable (UNAVAILABLE: kilnd at 127.0.0.1:1: failed to connect "
               "to all addresses)")
EAGER = [1.0 - 0.05 * i for i in range(10)]


def decision(graph: str, runner: str, reason: str = "because", **extra) -> dict:
    words = {"kiln": "on Kiln's runtime", "eager": "eagerly"}[runner]
    return {"event": "log", "level": "INFO", "message": f"graph {graph} runs {words}: {reason}",
            **extra}


def steps(phase: str, values: list[float], first: int = 1, **extra) -> list[dict]:
    return [{"event": "step", "phase": phase, "step": first + i, "loss": v, **extra}
            for i, v in enumerate(values)]


def kiln_warning(message: str) -> dict:
    return {"event": "warning", "category": "KilnWarning", "message": f"kiln: {message}"}


DONE = {"event": "done", "device": "H100", "torch": "2.11",
        "dynamo": {"unique_graphs": 1, "graph_breaks": 0, "compiled_autograd": {}}}


def run(events: list[dict], role: str = "main", server: dict | None = None, **notes) -> tf.Run:
    return tf.Run(role, events, 0, 3.0, server=server, notes=notes)


def near(values: list[float], by: float = 1e-7) -> list[float]:
    return [v + by for v in values]


# --- kilnd_stopped -------------------------------------------------------------------------


def kilnd_stopped_events(second_warning: bool = False, after_runner: str = "eager") -> list:
    n = len(tw.KILND_STOPPED_SHAPES)
    out = steps("eager", EAGER[:n])
    out += [decision("frame 0/0.fw", "kiln"), decision("frame 0/0.bw", "kiln")]
    out += steps("kiln", near(EAGER[:3]))
    out.append({"event": tw.STOP_KILND, "step": 4})
    out.append(kiln_warning(f"{UNREACHABLE}; graph frame 0/1.fw and any other graph ..."))
    out.append(decision("frame 0/1.fw", after_runner, UNREACHABLE))
    if second_warning:
        out.append(kiln_warning(f"{UNREACHABLE}; again"))
    out.append(decision("frame 0/1.bw", after_runner, UNREACHABLE))
    return out + steps("kiln", near(EAGER[3:n]), first=4) + [DONE]


KILLED = {"before_step": 4, "exit_status": -9, "seconds_into_run": 9.0}


def test_kilnd_stopped_passes() -> None:
    checks = tf.judge_kilnd_stopped({"main": run(kilnd_stopped_events(), kilnd_killed=KILLED)})
    assert checks.passed, checks.failed()
    assert len(checks.items) == 6


def test_kilnd_stopped_fails_on_a_second_warning_or_a_graph_left_on_kiln() -> None:
    checks = tf.judge_kilnd_stopped({"main": run(kilnd_stopped_events(second_warning=True),
                                                 kilnd_killed=KILLED)})
    assert [c["check"] for c in checks.failed()] == [
        "exactly one kiln warning, naming 'unreachable'"]
    assert len(checks.failed()[0]["evidence"]) == 2
    checks = tf.judge_kilnd_stopped({"main": run(kilnd_stopped_events(after_runner="kiln"),
                                                 kilnd_killed=KILLED)})
    assert [c["check"] for c in checks.failed()] == [
        "graphs compiled after the stop ran eagerly: kilnd unreachable"]


def test_kilnd_stopped_fails_when_the_runner_never_stopped_kilnd() -> None:
    checks = tf.judge_kilnd_stopped({"main": run(kilnd_stopped_events())})
    assert [c["check"] for c in checks.failed()] == ["the runner stopped kilnd mid-run"]


# --- losses --------------------------------------------------------------------------------


def test_losses_match_within_a_ten_thousandth_of_the_first_loss() -> None:
    events = steps("eager", EAGER[:5]) + steps("kiln", near(EAGER[:5], 0.9e-4))
    checks = tf.Checks()
    assert checks.losses_match(run(events), 5)
    events = steps("eager", EAGER[:5]) + steps("kiln", EAGER[:4] + [EAGER[4] + 2e-4])
    checks = tf.Checks()
    assert not checks.losses_match(run(events), 5)
    evidence = checks.items[0]["evidence"]
    assert evidence["worst_step"] == 5 and evidence["allowed"] == pytest.approx(1e-4)


def test_losses_must_cover_every_step_and_be_finite() -> None:
    checks = tf.Checks()
    assert not checks.losses_match(run(steps("eager", EAGER[:5]) + steps("kiln", EAGER[:4])), 5)
    nan = steps("eager", EAGER[:3]) + steps("kiln", [EAGER[0], float("nan"), EAGER[2]])
    assert not checks.losses_match(run(nan), 3)
    assert checks.items[1]["evidence"]["worst_step"] == 2


# --- compile_error, too_slow ---------------------------------------------------------------

REFUSED = ('kilnd could not compile the graph (INVALID_ARGUMENT: kilnd at 127.0.0.1:5: '
           'options.target: unknown target "cuda:sm_80" (expected x86_64 or cuda:sm_90))')


def fallback_events(reason: str, warnings_said: int = 1) -> list[dict]:
    out = steps("eager", EAGER[:tw.FAULT_STEPS])
    out += [kiln_warning(f"{reason}; graph frame 0/0.fw ...")] * warnings_said
    out += [decision("frame 0/0.fw", "eager", reason), decision("frame 0/0.bw", "eager", reason)]
    return out + steps("kiln", EAGER[:tw.FAULT_STEPS]) + [DONE]


def test_compile_error_passes_and_needs_kilnds_errors() -> None:
    errors = {"kiln_compile_requests_total.error": 2.0}
    checks = tf.judge_compile_error({"main": run(fallback_events(REFUSED), server=errors)})
    assert checks.passed, checks.failed()
    checks = tf.judge_compile_error({"main": run(fallback_events(REFUSED), server={})})
    assert [c["check"] for c in checks.failed()] == [
        "kilnd answered every request with an error"]


def test_too_slow_passes_with_one_deadline_warning_only() -> None:
    slow = "kilnd did not answer within the deadline (DEADLINE_EXCEEDED: Deadline Exceeded)"
    assert tf.judge_too_slow({"main": run(fallback_events(slow))}).passed
    checks = tf.judge_too_slow({"main": run(fallback_events(slow, warnings_said=0))})
    assert [c["check"] for c in checks.failed()] == [
        "exactly one kiln warning, naming 'within the deadline' and 'DEADLINE_EXCEEDED'"]
    checks = tf.judge_too_slow({"main": run(fallback_events(REFUSED))})
    assert len(checks.failed()) == 2


def test_a_warning_on_the_kiln_logger_counts() -> None:
    events = [{"event": "log", "level": "WARNING", "message": "inductor could not compile bw"},
              {"event": "log", "level": "INFO", "message": "graph g runs eagerly: x"},
              kiln_warning("x"), {"event": "warning", "category": "UserWarning",
                                  "message": "something from torch"}]
    assert tf.kiln_warnings(events) == ["inductor could not compile bw", "kiln: x"]


# --- require_cudagraph ---------------------------------------------------------------------


def raised(case: str, text: str, code: str = "FAILED_PRECONDITION") -> dict:
    return {"event": "exception", "case": case,
            "type": "torch._dynamo.exc.BackendCompilerFailed",
            "chain": ["torch._dynamo.exc.BackendCompilerFailed", "kiln.errors.CompileRejected"],
            "message": f"BackendCompilerFailed: backend='kiln' raised: ...\n{text}",
            "kiln_error": {"type": "CompileRejected", "code": code, "message": f"{code}: {text}"}}


NOT_CAPTURABLE = "kilnd at 127.0.0.1:5: require_cudagraph: the plan cannot be captured: "


def require_events(fallback_op_text: str = "%7: aten.cumsum.default runs eagerly: no lowering "
                                            "for aten.cumsum.default") -> list[dict]:
    out = [raised("dynamic_shapes", NOT_CAPTURABLE + "sizes depend on 2 symbol(s); capture "
                                                     "per size"),
           raised("fallback_op", NOT_CAPTURABLE + fallback_op_text)]
    out += steps("eager", EAGER[:3], case="capturable")
    out += [decision("frame 0/0.fw", "kiln", case="capturable"),
            decision("frame 0/0.bw", "kiln", case="capturable")]
    return out + steps("kiln", EAGER[:3], case="capturable") + [DONE]


def test_require_cudagraph_passes() -> None:
    checks = tf.judge_require_cudagraph({"main": run(require_events())})
    assert checks.passed, checks.failed()
    assert checks.items[1]["evidence"].endswith("capture per size")


def test_require_cudagraph_fails_when_the_reasons_do_not_name_the_node() -> None:
    checks = tf.judge_require_cudagraph({"main": run(require_events("a fallback op"))})
    (failed,) = checks.failed()
    assert failed["check"] == "fallback_op: raises FAILED_PRECONDITION listing the reasons"
    assert failed["evidence"]["missing"] == [r"%\d+: aten\.cumsum\.default runs eagerly"]


def test_require_cudagraph_fails_when_nothing_is_raised_or_the_code_differs() -> None:
    events = [e for e in require_events() if e.get("case") != "dynamic_shapes"]
    events.append(raised("fallback_op", "x", code="INTERNAL"))
    checks = tf.judge_require_cudagraph({"main": run(events)})
    assert [c["check"] for c in checks.failed()] == ["dynamic_shapes: raises FAILED_PRECONDITION"]
    events = [e for e in require_events() if e.get("case") != "fallback_op"]
    events.append(raised("fallback_op", NOT_CAPTURABLE + "%7: aten.cumsum.default runs "
                                                         "eagerly", code="INTERNAL"))
    checks = tf.judge_require_cudagraph({"main": run(events)})
    assert [c["check"] for c in checks.failed()] == [
        "fallback_op: raises FAILED_PRECONDITION listing the reasons"]


# --- compiled_autograd ---------------------------------------------------------------------


def compiled_autograd_events(ca_runner: str = "kiln", captures: int = 1) -> list[dict]:
    done = json.loads(json.dumps(DONE))
    done["dynamo"]["compiled_autograd"] = {"captures": captures, "compiles": captures}
    n = tw.COMPILED_AUTOGRAD_STEPS
    return (steps("eager", EAGER[:n]) + [decision("frame 0/0.fw", "kiln"),
                                         decision("frame !0/1/0.infer", ca_runner)]
            + steps("kiln", near(EAGER[:n])) + [done])


MISSES = {"kiln_compile_requests_total.miss": 2.0, "kiln_compiles_total.ok": 2.0}


def test_compiled_autograd_passes() -> None:
    checks = tf.judge_compiled_autograd({"main": run(compiled_autograd_events(), server=MISSES)})
    assert checks.passed, checks.failed()


def test_compiled_autograd_fails_without_a_capture_or_when_its_graph_falls_back() -> None:
    checks = tf.judge_compiled_autograd({"main": run(compiled_autograd_events(captures=0),
                                                     server=MISSES)})
    assert [c["check"] for c in checks.failed()] == ["compiled autograd captured the backward"]
    checks = tf.judge_compiled_autograd({"main": run(compiled_autograd_events("eager"),
                                                     server=MISSES)})
    assert [c["check"] for c in checks.failed()] == [
        "compiled autograd's graphs ran on Kiln's runtime", "every graph ran on Kiln's runtime"]


def test_compiled_autograd_graphs_are_told_apart() -> None:
    assert tf.is_compiled_autograd_graph("frame !0/1/0.infer")
    assert tf.is_compiled_autograd_graph("frame !3.fw")
    assert tf.is_compiled_autograd_graph("frame 1/0.infer")
    assert not tf.is_compiled_autograd_graph("frame 0/0.bw")


# --- warm_cache ----------------------------------------------------------------------------


def warm_runs(second_losses: list[float], second_server: dict) -> dict[str, tf.Run]:
    n = tw.WARM_CACHE_STEPS
    kiln = near(EAGER[:n])
    graphs = [decision("frame 0/0.fw", "kiln"), decision("frame 0/0.bw", "kiln")]
    first = run(steps("eager", EAGER[:n]) + graphs + steps("kiln", kiln) + [DONE], "first",
                MISSES)
    second = run(steps("eager", EAGER[:n]) + graphs + steps("kiln", second_losses) + [DONE],
                 "second", second_server)
    return {"first": first, "second": second}


HITS = {"kiln_compile_requests_total.hit": 2.0}


def test_warm_cache_passes_with_hits_only_and_the_same_losses() -> None:
    same = near(EAGER[:tw.WARM_CACHE_STEPS])
    checks = tf.judge_warm_cache(warm_runs(same, HITS))
    assert checks.passed, checks.failed()


def test_warm_cache_fails_on_a_miss_or_a_last_bit() -> None:
    same = near(EAGER[:tw.WARM_CACHE_STEPS])
    checks = tf.judge_warm_cache(warm_runs(same, {**HITS, "kiln_compiles_total.ok": 1.0}))
    assert [c["check"] for c in checks.failed()] == ["second process: cache hits only, no compile"]
    checks = tf.judge_warm_cache(warm_runs(same, {**HITS,
                                                  "kiln_compile_requests_total.miss": 1.0}))
    assert [c["check"] for c in checks.failed()] == ["second process: cache hits only, no compile"]
    off = same[:-1] + [same[-1] + 1e-15]
    assert off != same
    checks = tf.judge_warm_cache(warm_runs(off, HITS))
    assert [c["check"] for c in checks.failed()] == [
        "second process's losses are bitwise the first's"]


# --- complex_dtype, rows, the table --------------------------------------------------------


def test_complex_dtype() -> None:
    result = {"event": "result", "max_abs_diff": 0.0, "close": True, "finite": True}
    assert tf.judge_complex_dtype({"main": run([result, DONE])}).passed
    wrong = dict(result, close=False, max_abs_diff=3.5)
    checks = tf.judge_complex_dtype({"main": run([decision("frame 0/0.infer", "kiln"), wrong,
                                                  DONE])})
    (failed,) = checks.failed()
    assert failed["evidence"]["graph_runners"]["frame 0/0.infer"]["runner"] == "kiln"


def test_an_unfinished_run_fails_its_scenario_with_the_reason() -> None:
    events = steps("eager", EAGER[:2]) + [{"event": "error", "error": "RuntimeError: boom\nmore",
                                           "trace": "Traceback ..."}]
    r = tf.Run("main", events, 1, 2.0, output="last words")
    assert not r.completed and r.failure() == "RuntimeError: boom"
    rec = tf.row(tf.select("too_slow")[0], {"main": r})
    assert not rec["pass"]
    assert rec["failed"][0] == {"check": "main process finished", "ok": False,
                                "evidence": "RuntimeError: boom"}
    summary = rec["runs"]["main"]
    assert summary["trace"] == "Traceback ..." and summary["output_tail"] == "last words"
    timed_out = tf.Run("main", [], -9, 180.0, timed_out_after=180.0)
    assert timed_out.failure() == "timed out after 180 s"


def test_a_judge_that_trips_is_a_failed_row() -> None:
    def trips(runs: dict) -> tf.Checks:
        raise KeyError("loss")

    rec = tf.row(tf.Scenario("odd", trips), {"main": run([DONE])})
    assert not rec["pass"]
    assert rec["failed"] == [{"check": "the verdict could be reached", "ok": False,
                              "evidence": "KeyError: 'loss'"}]
    no_loss = run([{"event": "step", "phase": "kiln", "step": 1}, DONE])
    (missing,) = tf.losses(no_loss.events, "kiln")
    assert math.isnan(missing)


def test_kilnd_failing_the_runner_is_a_failed_row_that_keeps_the_runs() -> None:
    rec = tf.row(tf.select("warm_cache")[0], {}, "RuntimeError: kilnd exited with 1")
    assert rec["failed"] == [{"check": "kilnd started and stopped", "ok": False,
                              "evidence": "RuntimeError: kilnd exited with 1"}]
    first = run([DONE], "first")
    rec = tf.row(tf.select("warm_cache")[0], {"first": first}, "TimeoutExpired: kilnd")
    assert [c["check"] for c in rec["failed"]] == ["kilnd started and stopped"]
    assert list(rec["runs"]) == ["first"]
    rec = tf.row(tf.select("warm_cache")[0], {"first": first})
    assert rec["failed"] == [{"check": "every run ran", "ok": False,
                              "evidence": "ran ['first'] of ['first', 'second']"}]
    ok = tf.row(tf.select("too_slow")[0], {"main": run(fallback_events(
        "kilnd did not answer within the deadline (DEADLINE_EXCEEDED: x)"))},
        "TimeoutExpired: kilnd did not stop")
    assert not ok["pass"] and len(ok["checks"]) == 5


def test_select() -> None:
    assert [s.name for s in tf.select("")] == [s.name for s in tf.SCENARIOS]
    assert [s.name for s in tf.select("warm_cache, kilnd_stopped")] == ["kilnd_stopped",
                                                                       "warm_cache"]
    with pytest.raises(ValueError, match="unknown scenario nope"):
        tf.select("too_slow,nope")
    assert set(tw.SCENARIOS) == {s.name for s in tf.SCENARIOS}


def test_table() -> None:
    ok = tf.row(tf.select("compiled_autograd")[0],
                {"main": run(compiled_autograd_events(), server=MISSES)})
    bad = tf.row(tf.select("warm_cache")[0], warm_runs(near(EAGER[:5], 1.0), HITS))
    lines = tf.table([ok, bad]).splitlines()
    assert lines[2].startswith("compiled_autograd  pass     7/7 ")
    assert lines[2].endswith("miss=2")
    assert lines[3].startswith("warm_cache         FAIL") and "first: miss=2; second: hit=2" in \
        lines[3]
    assert lines[4] == "1 of 2 scenarios pass"
    assert lines[5].startswith("  warm_cache: second kiln losses match eager's: ")
    assert lines[6].startswith("  warm_cache: second process's losses are bitwise the first's")


# --- the runner's handshake with a worker --------------------------------------------------

STAND_IN = r'''
import json, os, pathlib, sys, time
scenario, events_path, role = sys.argv[1:4]
ack = pathlib.Path(os.environ["KILN_FAULTS_KILND_STOPPED"])
with open(events_path, "a") as f:
    f.write(json.dumps({"event": "stop_kilnd", "step": 4}) + "\n")
    f.flush()
    deadline = time.monotonic() + 20
    while not ack.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    f.write(json.dumps({"event": "done", "acked": ack.exists()}) + "\n")
    if role == "hang":
        time.sleep(60)
'''


class StandInServer:
    """What run_worker uses of KilnServer: no metrics, a kill that is counted."""

    def __init__(self) -> None:
        self.env = {"PATH": "/usr/bin:/bin"}
        self.process = None
        self.kills = 0

    def metrics(self) -> dict:
        raise OSError("no kilnd here")

    def kill(self) -> int:
        self.kills += 1
        return -9


def test_the_runner_stops_kilnd_when_the_worker_asks(tmp_path: pathlib.Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr(tf, "WORKER", script)
    server = StandInServer()
    r = tf.run_worker(tf.select("kilnd_stopped")[0], "main", server, tmp_path, 30.0)
    assert server.kills == 1 and r.rc == 0 and r.completed
    assert r.notes["kilnd_killed"]["before_step"] == 4
    assert r.notes["kilnd_killed"]["exit_status"] == -9
    assert r.done == {"event": "done", "acked": True}
    assert r.server is None  # kilnd cannot be asked for its counters


def test_a_worker_past_the_timeout_is_killed(tmp_path: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "stand_in.py"
    script.write_text(STAND_IN)
    monkeypatch.setattr(tf, "WORKER", script)
    r = tf.run_worker(tf.select("kilnd_stopped")[0], "hang", StandInServer(), tmp_path, 2.0)
    assert r.timed_out_after == 2.0 and not r.completed and r.seconds < 20
    assert r.failure() == "timed out after 2 s"


# --- the worker's reporting ----------------------------------------------------------------


def test_the_worker_reports_a_scenario_that_raised(tmp_path: pathlib.Path) -> None:
    events_path = tmp_path / "w.jsonl"
    assert tw.main(["no_such_scenario", str(events_path)]) == 1
    (error,) = tf.read_events(events_path)
    assert error["event"] == "error" and error["error"] == "KeyError: 'no_such_scenario'"
    assert "Traceback" in error["trace"]


def test_the_observer_writes_every_kiln_warning_and_other_warnings_once(
        tmp_path: pathlib.Path) -> None:
    events_path = tmp_path / "w.jsonl"
    events = tw.Events(events_path)
    events.case = "a"

    class KilnWarning(UserWarning):
        pass

    with tw.KilnObserver(events):
        warnings.warn("kiln: unreachable", KilnWarning)
        warnings.warn("kiln: unreachable", KilnWarning)
        warnings.warn("from torch")
        warnings.warn("from torch")
        logging.getLogger("kiln").info("graph g runs eagerly: %s", "x")
    events.close()
    assert tf.read_events(events_path) == [
        {"event": "warning", "category": "KilnWarning", "message": "kiln: unreachable",
         "case": "a"},
        {"event": "warning", "category": "KilnWarning", "message": "kiln: unreachable",
         "case": "a"},
        {"event": "warning", "category": "UserWarning", "message": "from torch", "case": "a"},
        {"event": "log", "level": "INFO", "message": "graph g runs eagerly: x", "case": "a"},
    ]
    assert not logging.getLogger("kiln").handlers


class CompileRejected(Exception):
    code = "FAILED_PRECONDITION"


CompileRejected.__module__ = "kiln.errors"


class BackendCompilerFailed(Exception):
    def __init__(self, inner: BaseException) -> None:
        super().__init__(f"backend='kiln' raised:\n{type(inner).__name__}: {inner}")
        self.inner_exception = inner


def test_an_exception_record_finds_the_kiln_error_dynamo_wrapped() -> None:
    inner = CompileRejected("FAILED_PRECONDITION: require_cudagraph: %3: x runs eagerly")
    try:
        try:
            raise inner
        except CompileRejected as e:
            raise BackendCompilerFailed(e) from None
    except BackendCompilerFailed as outer:
        record = tw.exception_record(outer)
    assert record["chain"] == [f"{__name__}.BackendCompilerFailed", "kiln.errors.CompileRejected"]
    assert record["kiln_error"] == {
        "type": "CompileRejected", "code": "FAILED_PRECONDITION",
        "message": "FAILED_PRECONDITION: require_cudagraph: %3: x runs eagerly"}
    assert record["message"].startswith("BackendCompilerFailed: backend='kiln' raised:")
    assert tw.exception_record(ValueError("plain"))["kiln_error"] is None


def test_an_exception_cycle_ends() -> None:
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert len(tw.exception_record(a)["chain"]) == 2
