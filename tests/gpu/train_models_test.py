"""train_models.py's reading of runs and its verdicts, without PyTorch or a GPU: the parts
that decide pass or fail must be right before the script runs on a GPU machine."""

from __future__ import annotations

import json
import math
import pathlib

import pytest

import train_models as tm

STEPS = 12


def events(losses: list[float], runners: dict[str, str] | None = None, done: bool = True,
           seconds: float = 0.01) -> list[dict]:
    """A run's events as the worker writes them; `runners` maps graphs to "kiln", "eager"."""
    out: list[dict] = []
    for graph, runner in (runners or {}).items():
        words = {"kiln": "on Kiln's runtime", "eager": "eagerly"}[runner]
        out.append({"event": "log", "level": "INFO",
                    "message": f"graph {graph} runs {words}: because"})
    first = [{"event": "step", "step": 1, "loss": losses[0], "seconds": 2.5}] if losses else []
    out += first + [{"event": "step", "step": i + 1, "loss": x, "seconds": seconds}
                    for i, x in enumerate(losses) if i > 0]
    if done:
        out.append({"event": "done", "device": "H100", "torch": "2.11", "dynamo_graphs": 1,
                    "graph_breaks": 0})
    return out


def run(losses: list[float], runners: dict[str, str] | None = None, **kwargs) -> dict:
    return tm.summarize_run(events(losses, runners, **kwargs), 0, "", None, 3.0, STEPS)


EAGER = [2.0 - 0.1 * i for i in range(STEPS)]
ON_KILN = {"frame 0/0.fw": "kiln", "frame 0/0.bw": "kiln"}
FP32 = next(c for c in tm.CONFIGS if c.name == "gpt2_fp32")
BF16 = next(c for c in tm.CONFIGS if c.name == "gpt2_bf16")


def test_fourteen_configurations_of_seven_models() -> None:
    assert len(tm.CONFIGS) == 14
    assert {c.dtype for c in tm.CONFIGS} == set(tm.TOLERANCE)
    assert [c.name for c in tm.CONFIGS[:2]] == ["mlp_fp32", "mlp_bf16"]


def test_graph_runners_keep_each_graphs_last_line() -> None:
    runners = tm.graph_runners([
        "graph frame 0/0.fw: miss, key abc, trace t",
        "graph frame 0/0.fw runs on Kiln's runtime: kilnd compiled it (key abc, miss)",
        "graph frame 0/0.bw runs on Kiln's runtime: kilnd compiled it (key def, miss)",
        "graph frame 0/0.bw runs eagerly: Kiln's runtime cannot load the compiled graph (E: x)",
        "graph frame 1/0.fw runs with inductor: kilnd could not compile the graph (INTERNAL)",
    ])
    assert runners == {
        "frame 0/0.fw": {"runner": "kiln", "reason": "kilnd compiled it (key abc, miss)"},
        "frame 0/0.bw": {"runner": "eager",
                         "reason": "Kiln's runtime cannot load the compiled graph (E: x)"},
        "frame 1/0.fw": {"runner": "inductor",
                         "reason": "kilnd could not compile the graph (INTERNAL)"},
    }


def test_steady_median_skips_compilation_and_warm_up() -> None:
    assert tm.steady_median([9.0] * 9 + [1.0, 2.0, 3.0]) == 2.0
    assert tm.steady_median([9.0, 1.0, 3.0]) == 2.0  # a short debugging run
    assert tm.steady_median([9.0]) is None


def test_a_finished_run() -> None:
    r = run(EAGER, ON_KILN)
    assert r["completed"] and r["losses"] == EAGER
    assert r["first_step_s"] == 2.5 and r["median_step_ms"] == 10.0
    assert (r["graphs_on_kiln_runtime"], r["graphs_fallen_back"]) == (2, 0)
    assert r["device"] == "H100" and "output_tail" not in r and "error" not in r


def test_a_timed_out_run_says_where_it_stopped_and_keeps_the_output() -> None:
    r = tm.summarize_run(events(EAGER[:3], done=False), -9, "x" * 5000 + "the end", 240.0,
                         240.5, STEPS)
    assert not r["completed"]
    assert r["error"] == f"timed out after 240 s with 3 of {STEPS} steps done"
    assert r["output_tail"].endswith("the end") and len(r["output_tail"]) == tm.OUTPUT_TAIL


def test_a_run_that_raised_or_died() -> None:
    raised = events(EAGER[:2], done=False) + [{"event": "error", "error": "RuntimeError: boom",
                                                "trace": "Traceback"}]
    r = tm.summarize_run(raised, 1, "", None, 1.0, STEPS)
    assert (r["completed"], r["error"], r["trace"]) == (False, "RuntimeError: boom", "Traceback")
    r = tm.summarize_run(events(EAGER[:2], done=False), -11, "Segmentation fault", None, 1.0,
                         STEPS)
    assert r["error"] == f"the process exited with -11 after 2 of {STEPS} steps"


def test_read_events_skips_a_line_cut_short(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "run.jsonl"
    path.write_text(json.dumps({"event": "step", "loss": 1.0}) + '\n{"event": "st')
    assert tm.read_events(path) == [{"event": "step", "loss": 1.0}]
    assert tm.read_events(tmp_path / "missing.jsonl") == []


def test_compare_losses() -> None:
    c = tm.compare_losses([2.0, 4.0, 1.0], [2.0, 4.001, 1.0005])
    assert c["steps"] == 3 and c["worst_step"] == 2
    assert c["max_abs"] == pytest.approx(0.001) and c["max_rel"] == pytest.approx(5e-4)
    assert c["final_rel"] == pytest.approx(2.5e-4), "relative to the first loss"
    c = tm.compare_losses([2.0, 4.0], [2.0, math.nan])
    assert c["kiln_nonfinite_step"] == 2 and c["max_rel"] == math.inf and c["worst_step"] == 2
    assert tm.compare_losses([1.0], []) == {"steps": 0}


def test_within_tolerance_on_kiln_passes() -> None:
    kiln = [x * (1 + 5e-5) for x in EAGER]
    row = tm.judge(FP32, run(EAGER), run(kiln, ON_KILN), STEPS)
    assert row["pass"] and row["losses_match"] and row["reasons"] == []


def test_beyond_fp32_tolerance_fails_but_bf16_allows_it() -> None:
    kiln = [x * (1 + 5e-3) for x in EAGER]
    row = tm.judge(FP32, run(EAGER), run(kiln, ON_KILN), STEPS)
    assert not row["pass"] and not row["losses_match"]
    assert row["reasons"][0].startswith("loss differs from eager by 5.00e-03 relative")
    assert tm.judge(BF16, run(EAGER), run(kiln, ON_KILN), STEPS)["pass"]


def test_within_three_times_inductors_difference_passes() -> None:
    kiln = [x * (1 + 1e-2) for x in EAGER]
    inductor = [x * (1 - 4e-3) for x in EAGER]
    row = tm.judge(FP32, run(EAGER), run(kiln, ON_KILN), STEPS, run(inductor))
    assert row["pass"] and row["yardstick"]["max_rel"] == pytest.approx(4e-3)
    closer = [x * (1 - 2e-3) for x in EAGER]
    row = tm.judge(FP32, run(EAGER), run(kiln, ON_KILN), STEPS, run(closer))
    assert not row["pass"]
    assert "(allowed 0.006)" in row["reasons"][0]
    unfinished = tm.summarize_run([], 1, "", None, 1.0, STEPS)
    assert not tm.judge(FP32, run(EAGER), run(kiln, ON_KILN), STEPS, unfinished)["pass"]


def test_first_step_gradients_parameter_by_parameter(tmp_path: pathlib.Path) -> None:
    torch = pytest.importorskip("torch")
    eager, kiln = tmp_path / "a.grads.pt", tmp_path / "b.grads.pt"
    torch.save({"w": torch.tensor([3.0, 4.0]), "b": torch.tensor([1.0])}, eager)
    torch.save({"w": torch.tensor([3.0, 4.5]), "b": torch.tensor([1.0])}, kiln)
    e = tm.gradient_errors(eager, kiln)
    assert e["worst_param"] == "w" and e["worst_rel"] == pytest.approx(0.1)
    assert tm.gradient_errors(eager, tmp_path / "missing.grads.pt") is None


def test_graphs_that_fell_back_fail_even_when_losses_match() -> None:
    row = tm.judge(FP32, run(EAGER), run(EAGER, {"frame 0/0.fw": "kiln",
                                                 "frame 0/0.bw": "eager"}), STEPS)
    assert row["losses_match"] and not row["pass"]
    assert row["reasons"] == ["1 of 2 graphs fell back, e.g. frame 0/0.bw ran eager: because"]
    row = tm.judge(FP32, run(EAGER), run(EAGER), STEPS)
    assert row["reasons"] == ["no graph ran on Kiln's runtime (the backend logged none)"]


def test_an_unfinished_run_fails_with_its_error() -> None:
    kiln = tm.summarize_run(events(EAGER[:3], ON_KILN, done=False), -9, "", 240.0, 240.0, STEPS)
    row = tm.judge(FP32, run(EAGER), kiln, STEPS)
    assert not row["pass"] and not row["losses_match"]
    assert row["reasons"] == [f"kiln: timed out after 240 s with 3 of {STEPS} steps done"]


def test_select() -> None:
    assert len(tm.select("")) == 14
    assert [c.name for c in tm.select("gpt2_fp32")] == ["gpt2_fp32"]
    assert [c.name for c in tm.select("vit, mlp_bf16")] == ["mlp_bf16", "vit_fp32", "vit_bf16"]
    with pytest.raises(ValueError, match="unknown configuration gpt3"):
        tm.select("gpt2,gpt3")


def test_table() -> None:
    ok = tm.judge(FP32, run(EAGER), run(EAGER, ON_KILN), STEPS)
    ok["kiln"]["server"] = {"kiln_compile_requests_total.miss": 2.0,
                            "kiln_compiles_total.ok": 2.0}
    bad = tm.judge(BF16, run(EAGER), tm.summarize_run([], 1, "", None, 1.0, STEPS), STEPS)
    bad["kiln"]["server"] = None
    lines = tm.table([ok, bad]).splitlines()
    assert lines[2].startswith("gpt2_fp32       pass")
    assert lines[2].endswith("requests.miss=2 compiles.ok=2")
    assert lines[3].startswith("gpt2_bf16       FAIL") and "(no metrics)" in lines[3]
    assert lines[4] == "1 of 2 configurations pass"
    assert lines[5] == f"  gpt2_bf16: kiln: the process exited with 1 after 0 of {STEPS} steps"


def warm_row(cold_losses: list[float]) -> dict:
    row = tm.judge(FP32, run(EAGER, ON_KILN), run(cold_losses, ON_KILN), STEPS)
    assert row["pass"]
    return row


def test_a_warm_run_of_hits_with_the_same_losses_passes() -> None:
    warm = run(EAGER, ON_KILN)
    warm["server"] = {"kiln_compile_requests_total.hit": 2.0}
    row = tm.judge_warm(warm_row(EAGER), warm, STEPS)
    assert row["pass"] and row["warm"]["pass"] and row["warm"]["compiles"] == 0
    assert "warm pass" in tm.table_row(row)


def test_a_warm_run_that_compiles_or_differs_fails() -> None:
    warm = run(EAGER, ON_KILN)
    warm["server"] = {"kiln_compiles_total.ok": 1.0, "kiln_compile_requests_total.miss": 1.0,
                      "kiln_compile_requests_total.hit": 1.0}
    row = tm.judge_warm(warm_row(EAGER), warm, STEPS)
    assert not row["pass"]
    assert any("compiled 1 graph(s) and answered 1 request(s)" in r for r in row["reasons"])
    # The same counters, but one step's loss differs by one ulp from the cold run's.
    shifted = list(EAGER)
    shifted[5] = math.nextafter(shifted[5], 0.0)
    warm = run(shifted, ON_KILN)
    warm["server"] = {"kiln_compile_requests_total.hit": 2.0}
    row = tm.judge_warm(warm_row(EAGER), warm, STEPS)
    assert not row["pass"]
    assert row["reasons"] == ["warm: losses differ from the cold kiln run's from step 6"]


def test_a_warm_run_without_counters_fails() -> None:
    warm = run(EAGER, ON_KILN)
    warm["server"] = None
    row = tm.judge_warm(warm_row(EAGER), warm, STEPS)
    assert row["reasons"] == ["warm: kilnd's counters could not be read"]
