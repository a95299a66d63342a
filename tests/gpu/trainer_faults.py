"""The trainer's failure modes on a GPU machine: what torch.compile(backend="kiln") does when
kilnd stops, refuses a graph, answers too late or cannot promise a CUDA graph, and that
compiled autograd and a warm cache go through Kiln.

Run from the repository root after `deploy/gpu-bundle.sh .bundle` (carried with the tree):

    python3 tests/gpu/trainer_faults.py --bundle .bundle --out $OUT [--only NAME,...]

Each scenario gets a fresh kilnd from the bundle (empty cache, its log in
OUT/trainer_faults_runs/SCENARIO/kilnd.log) and one fresh training process per run
(trainer_faults_worker.py, bounded by --timeout, 180 s; then its process group is killed),
which trains capture_corpus's MLP (fp32, TF32 off, AdamW) eagerly and then through the kiln
backend, from the same weights on the same batches, and appends its events to
OUT/trainer_faults_runs/SCENARIO/ROLE.jsonl as they happen (losses, the "kiln" logger's
lines, warnings, exceptions). "Losses match": at every step, the kiln loss is within 1e-4
of the first eager loss of eager's loss at that step (float32 on both sides, so they differ
in the last bits, and a wrong kernel or a lost step moves the loss far more).

  kilnd_stopped      3 steps on Kiln's runtime; then the runner kills kilnd (SIGKILL) and a
                     new batch size makes Dynamo compile again: those graphs run eagerly with
                     exactly one warning, saying kilnd is unreachable; the first batch size
                     again runs on Kiln's runtime (already loaded). 8 steps, losses match.
  compile_error      every request names a target kilnd has no backend for (cuda:sm_80, what
                     an A100 sends): kilnd refuses it (INVALID_ARGUMENT, counted as an error
                     by kilnd), one warning naming the error, every graph runs eagerly,
                     losses match.
  too_slow           deadline=0.001 s: one warning saying kilnd did not answer within the
                     deadline (DEADLINE_EXCEEDED), eager fallback, losses match.
  require_cudagraph  require_cudagraph (fallback eager): dynamic shapes, and an op that
                     runs as a fallback step (cumsum), each raise kilnd's FAILED_PRECONDITION
                     listing the reasons (the symbols; the node and its op); the MLP with
                     static shapes is capturable: it trains on Kiln's runtime, losses match.
  compiled_autograd  torch._dynamo.config.compiled_autograd: the compiled step's backward,
                     captured by compiled autograd when backward() runs, compiles through
                     kilnd and runs on Kiln's runtime ("kiln" logger, Dynamo's compiled
                     autograd counters, kilnd's counters); nothing falls back or warns; 10
                     steps, losses match.
  warm_cache         two processes train the same model against one kilnd, doing the same
                     from the same seed: the second gets only cache hits (kilnd's counters:
                     no miss, no compile), and its kiln losses are bitwise the first's.
  complex_dtype      a complex multiply between view_as_complex and view_as_real, under
                     no_grad: the result must be eager's, whether kilnd refuses the graph or
                     runs it. Kiln neither refuses complex dtypes nor computes them: the loop
                     IR and the plan take them for float32 (the multiply becomes a float32
                     kernel, a complex buffer gets 4 bytes an element), so this scenario
                     fails until such nodes fall back or kilnd refuses the graph.

Writes OUT/trainer_faults.json (per scenario: every check with its evidence, each run's
losses, graph runners, warnings, exceptions and kilnd's counter changes) after each scenario
and OUT/trainer_faults.txt, the table also printed at the end. A scenario that fails,
crashes or hangs is a row of the report, never an exception; the exit status is 0 either
way. About 2 minutes on one H100.
"""

from __future__ import annotations

import json
import math
import os
import pathlib
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import trainer_faults_worker as worker  # noqa: E402 (no PyTorch at import)
from kilnd_process import KilnServer, script_parser  # noqa: E402
from train_models import counter_delta, graph_runners, read_events, scrape  # noqa: E402

WORKER = pathlib.Path(worker.__file__).resolve()
# A kiln loss may differ from eager's at the same step by this much of eager's first loss.
LOSS_TOLERANCE = 1e-4
TIMEOUT_S = 180.0
RUNS_DIR = "trainer_faults_runs"
OUTPUT_TAIL = 3000
EVIDENCE_CHARS = 600
REQUESTS = "kiln_compile_requests_total."
COMPILES = "kiln_compiles_total."


# --- one process's record ------------------------------------------------------------------


@dataclass
class Run:
    """One worker process: its events, how it ended, and kilnd's counter changes over it
    (None when kilnd could not be asked, as after it was stopped)."""

    role: str
    events: list[dict]
    rc: Optional[int]
    seconds: float
    timed_out_after: Optional[float] = None
    output: str = ""
    server: Optional[dict] = None
    notes: dict = field(default_factory=dict)

    @property
    def done(self) -> Optional[dict]:
        return next((e for e in self.events if e.get("event") == "done"), None)

    @property
    def completed(self) -> bool:
        return self.done is not None and self.rc == 0 and self.timed_out_after is None

    def failure(self) -> str:
        """Why the run did not complete, in a line."""
        error = next((e for e in self.events if e.get("event") == "error"), None)
        if self.timed_out_after is not None:
            return f"timed out after {self.timed_out_after:g} s"
        if error is not None:
            return error["error"].split("\n", 1)[0][:300]
        return f"the process exited with {self.rc} before it was done"

    def summary(self) -> dict:
        """The run for the report (its events stay in its .jsonl file)."""
        out: dict = {
            "role": self.role, "rc": self.rc, "completed": self.completed,
            "seconds": round(self.seconds, 2),
            "losses": {phase: losses(self.events, phase) for phase in ("eager", "kiln")},
            "graph_runners": graph_runners(log_lines(self.events)),
            "warnings": [f"{e['category']}: {e['message']}" for e in self.events
                         if e.get("event") == "warning"],
            "exceptions": [e for e in self.events if e.get("event") == "exception"],
            "server": self.server,
            **self.notes,
        }
        if self.done is not None:
            out.update({k: v for k, v in self.done.items() if k != "event"})
        if not self.completed:
            out["error"] = self.failure()
            trace = next((e["trace"] for e in self.events if e.get("event") == "error"), None)
            if trace:
                out["trace"] = trace
            out["output_tail"] = self.output[-OUTPUT_TAIL:]
        return out


# --- reading events (no PyTorch) -----------------------------------------------------------


def in_case(events: list[dict], case: Optional[str]) -> list[dict]:
    """The events of one sub-case (all events when `case` is None)."""
    return events if case is None else [e for e in events if e.get("case") == case]


def losses(events: list[dict], phase: str, case: Optional[str] = None) -> list[float]:
    """A phase's losses, step by step (a step without one counts as NaN)."""
    return [e.get("loss", math.nan) for e in in_case(events, case)
            if e.get("event") == "step" and e.get("phase") == phase]


def log_lines(events: list[dict], case: Optional[str] = None) -> list[str]:
    return [e["message"] for e in in_case(events, case) if e.get("event") == "log"]


def kiln_warnings(events: list[dict]) -> list[str]:
    """What the kiln backend warned: KilnWarnings, and the "kiln" logger's lines at WARNING
    or above."""
    return [e["message"] for e in events
            if (e.get("event") == "warning" and e.get("category") == "KilnWarning")
            or (e.get("event") == "log" and e.get("level") in ("WARNING", "ERROR", "CRITICAL"))]


def exceptions(events: list[dict], case: Optional[str] = None) -> list[dict]:
    return [e for e in in_case(events, case) if e.get("event") == "exception"]


def requests(delta: Optional[dict], outcome: str) -> float:
    """kilnd's compile requests answered with `outcome` ("hit", "miss", "guard_miss",
    "error") over a run."""
    return (delta or {}).get(REQUESTS + outcome, 0.0)


def compiles(delta: Optional[dict]) -> float:
    """kilnd's compiles, of any result, over a run."""
    return sum(v for k, v in (delta or {}).items() if k.startswith(COMPILES))


# --- checks --------------------------------------------------------------------------------


class Checks:
    """A scenario's verdict: named checks, each with its evidence; it passes when there is
    at least one and all hold."""

    def __init__(self) -> None:
        self.items: list[dict] = []

    def add(self, name: str, ok: bool, evidence: Any = None) -> bool:
        self.items.append({"check": name, "ok": bool(ok), "evidence": _short(evidence)})
        return bool(ok)

    @property
    def passed(self) -> bool:
        return bool(self.items) and all(c["ok"] for c in self.items)

    def failed(self) -> list[dict]:
        return [c for c in self.items if not c["ok"]]

    def finished(self, run: Run) -> bool:
        return self.add(f"{run.role} process finished", run.completed,
                        "ok" if run.completed else run.failure())

    def losses_match(self, run: Run, steps: int, case: Optional[str] = None) -> bool:
        """Every step's kiln loss against eager's (see LOSS_TOLERANCE)."""
        eager, kiln = losses(run.events, "eager", case), losses(run.events, "kiln", case)
        evidence: dict = {"eager_steps": len(eager), "kiln_steps": len(kiln), "steps": steps}
        ok = len(eager) == len(kiln) == steps and all(map(math.isfinite, eager + kiln))
        if eager and kiln:
            diffs = [abs(k - e) for e, k in zip(eager, kiln)]
            worst = max(range(len(diffs)), key=lambda i: _nan_high(diffs[i]))
            allowed = LOSS_TOLERANCE * abs(eager[0])
            evidence.update(max_abs_diff=diffs[worst], worst_step=worst + 1, allowed=allowed,
                            first_eager_loss=eager[0])
            ok = ok and _nan_high(diffs[worst]) <= allowed
        return self.add(f"{run.role} kiln losses match eager's" +
                        (f" ({case})" if case else ""), ok, evidence)

    def one_warning(self, run: Run, *words: str) -> bool:
        """Exactly one warning from the kiln backend over the run, saying every one of
        `words` (case-insensitive)."""
        said = kiln_warnings(run.events)
        ok = len(said) == 1 and all(w.lower() in said[0].lower() for w in words)
        return self.add(f"exactly one kiln warning, naming {' and '.join(map(repr, words))}",
                        ok, said)

    def runners(self, name: str, runners: dict[str, dict], runner: str,
                reason_words: tuple[str, ...] = ()) -> bool:
        """At least one graph, and every one of `runners` ran `runner` ("kiln", "eager"),
        each reason saying `reason_words`."""
        ok = bool(runners) and all(
            r["runner"] == runner and all(w.lower() in r["reason"].lower() for w in reason_words)
            for r in runners.values())
        return self.add(name, ok, runners or "no graph decisions in the kiln logger")

    def raised(self, events: list[dict], case: str, code: str, *patterns: str) -> bool:
        """Sub-case `case` raised a Kiln error with gRPC code `code` whose text matches
        every regular expression of `patterns`."""
        caught = exceptions(events, case)
        if not caught:
            return self.add(f"{case}: raises {code}", False, "nothing was raised")
        e = caught[0]
        kiln = e.get("kiln_error") or {}
        text = kiln.get("message") or e.get("message", "")
        missing = [p for p in patterns if not re.search(p, text)]
        return self.add(f"{case}: raises {code} listing the reasons",
                        kiln.get("code") == code and not missing,
                        {"kiln_error": kiln or None, "chain": e.get("chain"),
                         "missing": missing} if missing or kiln.get("code") != code
                        else text)


def _nan_high(x: float) -> float:
    return math.inf if math.isnan(x) else x


def _short(evidence: Any) -> Any:
    """Evidence for the report: long strings cut, structures kept."""
    if isinstance(evidence, str):
        return evidence[:EVIDENCE_CHARS]
    if isinstance(evidence, list):
        return [_short(x) for x in evidence]
    if isinstance(evidence, dict):
        return {k: _short(v) for k, v in evidence.items()}
    return evidence


# --- the verdicts --------------------------------------------------------------------------


def judge_kilnd_stopped(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    run = runs["main"]
    checks.finished(run)
    killed = run.notes.get("kilnd_killed")
    checks.add("the runner stopped kilnd mid-run", killed is not None,
               killed or "the worker never asked")
    marks = [i for i, e in enumerate(run.events) if e.get("event") == worker.STOP_KILND]
    split = marks[0] if marks else len(run.events)
    checks.runners("graphs compiled before the stop ran on Kiln's runtime",
                   graph_runners(log_lines(run.events[:split])), "kiln")
    checks.runners("graphs compiled after the stop ran eagerly: kilnd unreachable",
                   graph_runners(log_lines(run.events[split:])), "eager", ("unreachable",))
    checks.one_warning(run, "unreachable")
    checks.losses_match(run, len(worker.KILND_STOPPED_SHAPES))
    return checks


def judge_compile_error(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    run = runs["main"]
    checks.finished(run)
    checks.one_warning(run, "could not compile", "INVALID_ARGUMENT", worker.UNSUPPORTED_TARGET)
    runners = graph_runners(log_lines(run.events))
    checks.runners("every graph ran eagerly: kilnd could not compile it", runners, "eager",
                   ("could not compile",))
    checks.add("kilnd answered every request with an error",
               run.server is not None and requests(run.server, "error") >= max(1, len(runners))
               and requests(run.server, "miss") == 0, run.server)
    checks.losses_match(run, worker.FAULT_STEPS)
    return checks


def judge_too_slow(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    run = runs["main"]
    checks.finished(run)
    checks.one_warning(run, "within the deadline", "DEADLINE_EXCEEDED")
    checks.runners("every graph ran eagerly: past the deadline", graph_runners(log_lines(
        run.events)), "eager", ("deadline",))
    checks.losses_match(run, worker.FAULT_STEPS)
    return checks


def judge_require_cudagraph(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    run = runs["main"]
    checks.finished(run)
    checks.raised(run.events, "dynamic_shapes", "FAILED_PRECONDITION", "require_cudagraph",
                  "cannot be captured", r"depend on \d+ symbol")
    checks.raised(run.events, "fallback_op", "FAILED_PRECONDITION", "require_cudagraph",
                  "cannot be captured", r"%\d+: aten\.cumsum\.default runs eagerly")
    caught = exceptions(run.events, "capturable")
    checks.add("capturable: static shapes raise nothing", not caught,
               caught[0].get("message") if caught else "ok")
    checks.runners("capturable: every graph ran on Kiln's runtime",
                   graph_runners(log_lines(run.events, "capturable")), "kiln")
    checks.losses_match(run, worker.REQUIRE_CUDAGRAPH_STEPS, "capturable")
    return checks


def is_compiled_autograd_graph(name: str) -> bool:
    """A graph that compiled autograd captured: Dynamo's compile ids of those start with
    "!" ("frame !0/0/0.infer"), and, traced without grad, AOTAutograd hands them over as
    inference graphs."""
    return "!" in name or name.endswith(".infer")


def judge_compiled_autograd(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    run = runs["main"]
    checks.finished(run)
    captured = ((run.done or {}).get("dynamo") or {}).get("compiled_autograd") or {}
    checks.add("compiled autograd captured the backward", captured.get("captures", 0) >= 1,
               captured or "no compiled autograd counters")
    runners = graph_runners(log_lines(run.events))
    backward = {g: r for g, r in runners.items() if is_compiled_autograd_graph(g)}
    checks.runners("compiled autograd's graphs ran on Kiln's runtime", backward, "kiln")
    checks.runners("every graph ran on Kiln's runtime", runners, "kiln")
    answered = sum(requests(run.server, o) for o in ("hit", "miss", "guard_miss"))
    checks.add("kilnd compiled every graph that ran on Kiln's runtime",
               run.server is not None and answered >= len(runners) >= 1,
               {"graphs": len(runners), "kilnd": run.server})
    said = kiln_warnings(run.events)
    checks.add("no kiln warning", not said, said or "none")
    checks.losses_match(run, worker.COMPILED_AUTOGRAD_STEPS)
    return checks


def judge_warm_cache(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    first, second = runs["first"], runs["second"]
    for run in (first, second):
        checks.finished(run)
        checks.runners(f"{run.role} process: every graph ran on Kiln's runtime",
                       graph_runners(log_lines(run.events)), "kiln")
        checks.losses_match(run, worker.WARM_CACHE_STEPS)
    graphs = len(graph_runners(log_lines(second.events)))
    delta = second.server
    checks.add("second process: cache hits only, no compile",
               delta is not None and graphs >= 1 and requests(delta, "hit") >= graphs
               and all(requests(delta, o) == 0 for o in ("miss", "guard_miss", "error"))
               and compiles(delta) == 0, {"graphs": graphs, "kilnd": delta})
    a, b = losses(first.events, "kiln"), losses(second.events, "kiln")
    checks.add("second process's losses are bitwise the first's",
               len(a) == worker.WARM_CACHE_STEPS and a == b, {"first": a, "second": b})
    return checks


def judge_complex_dtype(runs: dict[str, Run]) -> Checks:
    checks = Checks()
    run = runs["main"]
    checks.finished(run)
    result = next((e for e in run.events if e.get("event") == "result"), None)
    runners = graph_runners(log_lines(run.events))
    checks.add("the result is eager's", result is not None and result.get("close") is True,
               {"result": result, "graph_runners": runners,
                "warnings": kiln_warnings(run.events)})
    return checks


@dataclass(frozen=True)
class Scenario:
    """A scenario: the worker runs `roles` in order (one process each, one kilnd for all),
    `judge` reads them; `stops_kilnd`: the runner kills kilnd when the worker asks."""

    name: str
    judge: Callable[[dict[str, Run]], Checks]
    roles: tuple[str, ...] = ("main",)
    stops_kilnd: bool = False


SCENARIOS = (
    Scenario("kilnd_stopped", judge_kilnd_stopped, stops_kilnd=True),
    Scenario("compile_error", judge_compile_error),
    Scenario("too_slow", judge_too_slow),
    Scenario("require_cudagraph", judge_require_cudagraph),
    Scenario("compiled_autograd", judge_compiled_autograd),
    Scenario("warm_cache", judge_warm_cache, roles=("first", "second")),
    Scenario("complex_dtype", judge_complex_dtype),
)


def select(only: str) -> list[Scenario]:
    """The scenarios `only` names (comma-separated; all when empty), in the usual order.
    Raises ValueError naming an unknown one."""
    names = [n.strip() for n in only.split(",") if n.strip()]
    known = [s.name for s in SCENARIOS]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown scenario {', '.join(unknown)}; known: {', '.join(known)}")
    return [s for s in SCENARIOS if not names or s.name in names]


def row(scenario: Scenario, runs: dict[str, Run], error: Optional[str] = None) -> dict:
    """A scenario's entry in the report. `error`: kilnd failed the runner (it did not start,
    or would not stop), after the runs in `runs`."""
    checks = Checks()
    if error is not None:
        checks.add("kilnd started and stopped", False, error)
    if set(runs) == set(scenario.roles):
        try:
            judged = scenario.judge(runs)
            checks.items += judged.items
        except Exception as e:  # a judge tripping on odd events is a failed row, not a crash
            checks.add("the verdict could be reached", False, f"{type(e).__name__}: {e}")
    elif error is None:
        checks.add("every run ran", False, f"ran {sorted(runs)} of {list(scenario.roles)}")
    return {"scenario": scenario.name, "pass": checks.passed, "checks": checks.items,
            "failed": checks.failed(),
            "seconds": round(sum(r.seconds for r in runs.values()), 2),
            "runs": {role: r.summary() for role, r in runs.items()}}


# --- the table -----------------------------------------------------------------------------

TABLE_HEADER = f"{'scenario':<18} {'result':<6} {'checks':>7} {'seconds':>8}  kilnd requests"


def _requests_text(rec: dict) -> str:
    parts = []
    for run in rec["runs"].values():
        delta = run.get("server")
        counted = {k[len(REQUESTS):]: v for k, v in (delta or {}).items()
                   if k.startswith(REQUESTS)}
        text = "(no metrics)" if delta is None else \
            " ".join(f"{k}={v:g}" for k, v in sorted(counted.items())) or "-"
        parts.append(text if len(rec["runs"]) == 1 else f"{run['role']}: {text}")
    return "; ".join(parts)


def table_row(rec: dict) -> str:
    ok = sum(c["ok"] for c in rec["checks"])
    return (f"{rec['scenario']:<18} {'pass' if rec['pass'] else 'FAIL':<6} "
            f"{ok:>3}/{len(rec['checks']):<3} {rec['seconds']:>8.1f}  {_requests_text(rec)}")


def table(rows: list[dict]) -> str:
    """One line per scenario, then every failed check with its evidence."""
    lines = [TABLE_HEADER, "-" * len(TABLE_HEADER)] + [table_row(r) for r in rows]
    lines.append(f"{sum(r['pass'] for r in rows)} of {len(rows)} scenarios pass")
    for r in rows:
        for c in r["failed"]:
            lines.append(f"  {r['scenario']}: {c['check']}: "
                         f"{json.dumps(c['evidence'], default=str)[:EVIDENCE_CHARS]}")
    return "\n".join(lines) + "\n"


# --- the runner ----------------------------------------------------------------------------


def run_worker(scenario: Scenario, role: str, server: KilnServer, run_dir: pathlib.Path,
               timeout: float) -> Run:
    """One worker process for `scenario` in its own process group (killed whole at the
    timeout); when the scenario stops kilnd, kills it when the worker asks and tells the
    worker by creating the file it waits for."""
    events_path = run_dir / f"{role}.jsonl"
    events_path.write_text("")
    ack = run_dir / f"{role}.kilnd-stopped"
    ack.unlink(missing_ok=True)
    env = dict(server.env, PYTHONUNBUFFERED="1", **{worker.ACK_ENV: str(ack)})
    notes: dict = {}
    before = scrape(server)
    start = time.perf_counter()
    log_path = run_dir / f"{role}.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(WORKER), scenario.name, str(events_path), role], env=env,
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        timed_out_after = None
        while process.poll() is None:
            if scenario.stops_kilnd and "kilnd_killed" not in notes:
                asked = next((e for e in read_events(events_path)
                              if e.get("event") == worker.STOP_KILND), None)
                if asked is not None:
                    notes["kilnd_killed"] = {
                        "before_step": asked.get("step"), "exit_status": server.kill(),
                        "seconds_into_run": round(time.perf_counter() - start, 2)}
                    ack.touch()
            if time.perf_counter() - start > timeout:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:  # it ended in the meantime
                    pass
                process.wait()
                timed_out_after = timeout
                break
            time.sleep(0.1)
    seconds = time.perf_counter() - start
    output = log_path.read_text(errors="replace")
    run = Run(role, read_events(events_path), process.returncode, seconds, timed_out_after,
              output, counter_delta(before, scrape(server)), notes)
    if server.process is not None and server.process.poll() is not None and \
            "kilnd_killed" not in notes:
        run.notes["kilnd_exited"] = server.process.returncode
    return run


def run_scenario(scenario: Scenario, bundle: pathlib.Path, out: pathlib.Path,
                 timeout: float) -> dict:
    """A scenario's row: a fresh kilnd (so a stopped one is replaced and every cache starts
    empty), its runs, the verdict."""
    run_dir = out / RUNS_DIR / scenario.name
    run_dir.mkdir(parents=True, exist_ok=True)
    runs: dict[str, Run] = {}
    error = None
    try:
        with KilnServer(bundle, run_dir) as server:
            for role in scenario.roles:
                runs[role] = run_worker(scenario, role, server, run_dir, timeout)
    except (OSError, RuntimeError, subprocess.SubprocessError) as e:
        error = f"{type(e).__name__}: {e}"
    return row(scenario, runs, error)


def main(argv: Optional[list[str]] = None) -> int:
    parser = script_parser()
    parser.add_argument("--only", default="", help="scenarios, comma-separated: " +
                        ", ".join(s.name for s in SCENARIOS))
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S,
                        help="seconds each training process may take")
    args = parser.parse_args(argv)
    try:
        scenarios = select(args.only)
    except ValueError as e:
        parser.error(str(e))
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"loss_tolerance": LOSS_TOLERANCE, "timeout_s": args.timeout,
                    "scenarios": []}
    print(TABLE_HEADER, flush=True)
    for scenario in scenarios:
        rec = run_scenario(scenario, args.bundle, args.out, args.timeout)
        for run in rec["runs"].values():
            for key in ("device", "torch"):
                if run.get(key) and not report.get(key):
                    report[key] = run[key]
        report["scenarios"].append(rec)
        (args.out / "trainer_faults.json").write_text(json.dumps(report, indent=1,
                                                                 default=str))
        print(table_row(rec), flush=True)
    text = table(report["scenarios"])
    (args.out / "trainer_faults.txt").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
