"""step_time.py's reading of runs and its ratios, without PyTorch or a GPU."""

from __future__ import annotations

import types

import pytest

import step_time as st


def events(first: float, steady: float, host: float, steps: int = 10) -> list[dict]:
    out = [{"event": "step", "step": 1, "loss": 3.0, "seconds": first, "host_seconds": first}]
    out += [{"event": "step", "step": i, "loss": 2.0, "seconds": steady, "host_seconds": host}
            for i in range(2, steps + 1)]
    return out + [{"event": "done", "device": "H100", "torch": "2.11",
                   "allocator": {"num_device_alloc": 12, "num_alloc_retries": 0}}]


def test_a_finished_run_has_its_first_steady_and_host_times() -> None:
    evs = events(7.5, 0.05, 0.01)
    evs[st.STEADY_FROM - 1]["seconds"] = 9.0  # one slow steady step moves no median
    run = st.summarize(evs, 0, "", None)
    assert run["first_s"] == 7.5
    assert run["steady_s"] == pytest.approx(0.05)
    assert run["host_s"] == pytest.approx(0.01)
    assert run["allocator"] == {"num_device_alloc": 12, "num_alloc_retries": 0}
    assert "failed" not in run


def test_steps_before_steady_from_are_left_out_of_the_median() -> None:
    evs = events(7.5, 0.05, 0.01)
    for e in evs[1:st.STEADY_FROM - 1]:
        e["seconds"] = 1.0
    assert st.summarize(evs, 0, "", None)["steady_s"] == pytest.approx(0.05)


def test_profiled_steps_are_left_out_of_the_median_but_a_first_step_profile_is_not() -> None:
    assert st.profiled_steps("steady", 30) == range(30 - st.SAMPLED_STEPS + 1, 31)
    assert st.profiled_steps("torch", 30) == range(30 - st.PROFILE_STEPS + 1, 31)
    assert st.profiled_steps("first", 30) == range(1, 2)
    assert st.profiled_steps("", 30) == range(0)
    evs = events(7.5, 0.05, 0.01, steps=30)
    for e in evs[30 - st.SAMPLED_STEPS:30]:
        e["seconds"] = 1.0  # slowed by the sampler
    evs.append({"event": "profile", "steps": st.SAMPLED_STEPS,
                "from_step": 30 - st.SAMPLED_STEPS + 1, "table": ""})
    assert st.summarize(evs, 0, "", None)["steady_s"] == pytest.approx(0.05)
    evs = events(7.5, 0.05, 0.01, steps=12)
    for e in evs[8:12]:
        e["seconds"] = 0.04  # steps 9 to 12; without step 12 the median would be 0.045
    evs.append({"event": "profile", "steps": 1, "from_step": 1, "table": ""})
    assert st.summarize(evs, 0, "", None)["steady_s"] == pytest.approx(0.04)


def test_a_run_that_did_not_finish_says_why() -> None:
    evs = events(7.5, 0.05, 0.01, steps=3)[:-1]
    assert st.summarize(evs, None, "tail", 400.0)["failed"] == "timed out after 400 s"
    evs.append({"event": "error", "error": "RuntimeError: boom"})
    run = st.summarize(evs, 1, "tail", None)
    assert run["failed"] == "RuntimeError: boom"
    assert run["output_tail"] == "tail"


def test_ratios_put_each_figure_beside_its_anchor() -> None:
    runs = {"aot_eager": {"first_s": 8.0, "steady_s": 0.06},
            "kiln": {"first_s": 10.0, "steady_s": 0.05},
            "kiln_warm": {"first_s": 3.0, "steady_s": 0.05},
            "dynamo": {"first_s": 2.5, "steady_s": 0.055},
            "inductor_warm": {"first_s": 4.0, "steady_s": 0.04}}
    r = st.ratios(runs)
    assert r["kiln cold first / aot_eager first"] == pytest.approx(1.25)
    assert r["kiln warm first / dynamo first"] == pytest.approx(1.2)
    assert r["kiln steady / inductor steady"] == pytest.approx(1.25)
    # A ratio whose runs are missing, or whose figure one run lacks, is absent or None.
    assert "kiln cudagraphs steady / inductor reduce-overhead steady" not in r
    runs["inductor_warm"] = {"failed": "boom"}
    assert st.ratios(runs)["kiln steady / inductor steady"] is None


def test_compile_counts_are_changes_over_one_process() -> None:
    before = {"kiln_compiles_total.ok": 4.0, "kiln_compile_requests_total.hit": 1.0}
    after = {"kiln_compiles_total.ok": 6.0, "kiln_compile_requests_total.hit": 3.0,
             "kiln_compile_requests_total.miss": 2.0}
    assert st.compile_counts(before, after) == {"compiles": 2.0, "hits": 2.0}
    assert st.compile_counts(None, after) is None


def test_the_table_has_a_row_per_mode_and_the_ratios() -> None:
    runs = {"eager": st.summarize(events(0.5, 0.05, 0.01), 0, "", None),
            "kiln": dict(st.summarize(events(9.0, 0.06, 0.02), 0, "", None),
                         server={"compiles": 2.0, "hits": 0.0}),
            "inductor": {"failed": "RuntimeError: boom"}}
    text = st.table("gpt2_124m_fp32", runs, {"kiln steady / eager steady": 1.2})
    assert "| eager | 0.50 | 50.0 | 10.0 |  |  | 0.0e+00 |" in text
    assert "| kiln | 9.00 | 60.0 | 20.0 | 2 | 0 | 0.0e+00 |" in text
    assert "| inductor | failed: RuntimeError: boom |" in text
    assert "- kiln steady / eager steady: 1.20" in text


def test_each_process_reports_its_host_speed_and_busiest_threads() -> None:
    evs = events(9.0, 0.06, 0.02)
    evs[-1].update(threads=[["python3", 0.0412], ["pt_autograd_0", 0.0051]],
                   probe={"torch_empty_us": 5.25, "python_100k_us": 4100.0},
                   placement=[["pt_autograd_0", 6, 8120.0], ["python3", 2, 4700.0]],
                   gc=[[2.0, 0.1], [0.25, 0.05], [0.0, 0.0]],
                   heap={"objects": 1_250_000, "full_ms": 310.4},
                   growth={"kept": {"dict": 4.0, "Frame": 0.2}, "cyclic": {}})
    kiln = dict(st.summarize(evs, 0, "", None), kilnd_cpu_s=0.5)
    text = st.table("gpt2_124m_fp32", {"kiln": kiln,
                                       "eager": st.summarize(events(0.5, 0.05, 0.01), 0, "",
                                                             None)}, {})
    assert ("- host of kiln: torch.empty 5.25 us, python 4.10 ms; threads (CPU ms a step): "
            "python3 41.2, pt_autograd_0 5.1; their CPUs' python: pt_autograd_0 on 6 (8.12 ms), "
            "python3 on 2 (4.70 ms); kilnd CPU 0.50 s; gc a step: gen0 2.00x 0.10 ms, "
            "gen1 0.25x 0.05 ms, gen2 0.00x 0.00 ms; 1.25M objects, a full collection "
            "310 ms; kept a step: dict 4, Frame 0.2; cyclic a step: none") in text
    assert "host of eager" not in text  # it reported no probe


def test_the_loss_difference_is_relative_to_eagers_first_loss() -> None:
    eager = {"losses": [4.0, 3.0, 2.0]}
    assert st.loss_difference({"losses": [4.0, 3.2, 2.0]}, eager) == pytest.approx(0.05)
    assert st.loss_difference({"losses": []}, eager) is None
    assert st.loss_difference({"losses": [1.0]}, None) is None


class Averaged:
    """One row of the profiler's key averages: a name, its GPU time (us) and its calls."""

    def __init__(self, key: str, us: float, count: int = 1, device_type: str = "CUDA") -> None:
        self.key, self.self_device_time_total, self.count = key, us, count
        self.device_type = types.SimpleNamespace(name=device_type)  # torch's DeviceType


def test_gpu_time_is_split_by_who_wrote_the_kernels() -> None:
    text = st.kernels_by_author([
        Averaged("kiln_k3", 2000.0, 6), Averaged("triton_poi_fused_add_0", 500.0, 3),
        Averaged("triton_poi_fused_add_0", 500.0, 3, "CPU"),  # the range around its launch
        Averaged("Memcpy DtoD (Device -> Device)", 250.0, 60),
        Averaged("sm80_xmma_gemm_f32f32", 9000.0, 36),
        Averaged("aten::mm", 9000.0, 36), Averaged("CompiledFunction", 2000.0, 3),
        Averaged("## Call CompiledFxGraph fj3xfvysrc ##", 500.0, 3),
        Averaged("cpu_only_op", 0.0)])
    lines = text.strip().splitlines()
    assert lines[0] == ("GPU time by author (ms, all profiled steps): generated 2.500, "
                        "copies 0.250, libraries 9.000")
    assert lines[1].split() == ["2.000", "ms", "6x", "kiln_k3"]
    assert lines[2].split() == ["0.500", "ms", "3x", "triton_poi_fused_add_0"]
    assert len(lines) == 3


def test_repeated_runs_report_the_median_steady_step_and_its_spread() -> None:
    def probe(python_ms: float) -> dict:
        return {"torch_empty_us": 3.0, "python_100k_us": python_ms * 1e3}

    runs = [{"first_s": 9.0, "steady_s": 0.030, "host_s": 0.020, "probe": probe(8.0)},
            {"first_s": 8.0, "steady_s": 0.020, "host_s": 0.010, "probe": probe(4.0)},
            {"failed": "timed out after 400 s"},
            {"first_s": 8.5, "steady_s": 0.025, "host_s": 0.015, "probe": probe(5.0)}]
    run = st.merge_repeats(runs)
    assert run["first_s"] == 9.0  # the first run's: later ones start from warm caches
    assert run["steady_s"] == 0.025 and run["host_s"] == 0.015
    assert run["steady_runs_s"] == [0.030, 0.020, 0.025]
    assert st.merge_repeats(runs[:1]) == runs[0]
    text = st.table("gpt2_124m_bf16", {"kiln_warm": run}, {})
    assert "| kiln_warm | 9.00 | 25.0 (20.0-30.0) | 15.0 |" in text
    # A slow host's process is seen beside its step.
    assert ("each run's steady step at its host's speed: 30.0 ms at python 8.00 ms, 20.0 ms "
            "at python 4.00 ms, 25.0 ms at python 5.00 ms") in text



class _Cycle:
    def __init__(self) -> None:
        self.me = self


class _Kept:
    pass


def test_heap_growth_names_what_a_step_keeps_and_the_cycles_it_leaves() -> None:
    kept: list = []

    def step() -> None:
        kept.append(_Kept())
        _Cycle()

    growth = st.heap_growth(step, steps=4)
    assert growth["kept"]["_Kept"] == 1.0 and "_Cycle" not in growth["kept"]
    assert growth["cyclic"] == {"_Cycle": 1.0}
    assert st.heap_growth(lambda: None)["cyclic"] == {}


def test_rounds_report_the_median_first_step_and_each_rounds_ratio() -> None:
    rounds = [({"first_s": 10.0, "steady_s": 0.03, "host_s": 0.02, "round_first": True},
               {"first_s": 12.0, "steady_s": 0.03, "host_s": 0.02, "round_first": True}),
              ({"first_s": 14.0, "steady_s": 0.03, "host_s": 0.02, "round_first": True},
               {"first_s": 16.0, "steady_s": 0.03, "host_s": 0.02, "round_first": True}),
              ({"first_s": 11.0, "steady_s": 0.03, "host_s": 0.02, "round_first": True},
               {"first_s": 15.0, "steady_s": 0.03, "host_s": 0.02, "round_first": True})]
    # A steady-state repeat inside a round does not count toward the first step.
    later = {"first_s": 1.0, "steady_s": 0.03, "host_s": 0.02, "round_first": False}
    aot = st.merge_repeats([r[0] for r in rounds])
    kiln = st.merge_repeats([r[1] for r in rounds] + [later])
    assert aot["first_s"] == 11.0 and aot["first_runs_s"] == [10.0, 14.0, 11.0]
    assert kiln["first_s"] == 15.0
    by_round = [st.ratios({"aot_eager": a, "kiln": k}) for a, k in rounds]
    label = "kiln cold first / aot_eager first"
    assert [r[label] for r in by_round] == [1.2, 16.0 / 14.0, 15.0 / 11.0]
    runs = {"aot_eager": aot, "kiln": kiln}
    text = st.table("gpt2_124m_bf16", runs, st.ratios(runs), by_round)
    assert "| kiln | 15.00 (12.00-16.00) |" in text
    assert f"- {label}: 1.36 (rounds: 1.20, 1.14, 1.36)" in text


def test_a_kiln_runs_backend_calls_are_added_up_and_beside_its_first_step() -> None:
    def frame(name: str, seconds: float, phases: dict, rest: float) -> dict:
        return {"event": "log", "message": f"frame {name}: ...",
                "times": {"scope": "frame", "name": name, "seconds": seconds,
                          "phases": phases, "rest": rest}}

    events = [frame("2/0", 6.0, {"kilnd": 4.0, "capture": 0.5}, 1.5),
              {"event": "log", "message": "graph frame 2/0.fw: ...",
               "times": {"scope": "graph", "name": "frame 2/0.fw", "seconds": 4.5,
                         "phases": {"kilnd": 4.0}, "rest": 0.5}},
              frame("4/0", 2.0, {"kilnd": 1.0, "load": 0.25}, 0.75),
              {"event": "log", "message": "graph frame 4/0.fw runs on Kiln's runtime"},
              {"event": "step", "step": 1, "loss": 1.0, "seconds": 10.0, "host_seconds": 10.0}]
    run = st.summarize(events, 0, "", None)
    assert run["backend"] == {"calls": 2, "seconds": 8.0, "rest": 2.25,
                              "phases": {"kilnd": 5.0, "capture": 0.5, "load": 0.25}}
    assert st.summarize(events[-2:], 0, "", None).get("backend") is None
    text = st.table("gpt2_124m_bf16", {"kiln": run}, {})
    assert ("- first step of kiln: 10.00 s, of it 2 backend calls 8.00 s (kilnd 5.00 s, "
            "capture 0.50 s, load 0.25 s, AOTAutograd and the rest 2.25 s); Dynamo and the "
            "step 2.00 s") in text


def test_each_runs_longest_compile_phases_as_pytorch_timed_them_are_listed() -> None:
    done = {"event": "done", "device": "H200",
            "compile_times": {"_compile.compile_inner": 9.5, "OutputGraph.call_user_compiler":
                              6.25, "create_aot_dispatcher_function": 5.0, "a": 0.5, "b": 0.1}}
    run = st.summarize([{"event": "step", "step": 1, "loss": 1.0, "seconds": 12.0,
                         "host_seconds": 12.0}, done], 0, "", None)
    text = st.table("gpt2_124m_bf16", {"dynamo": run, "eager": {"first_s": 1.0}}, {})
    assert ("- compile of dynamo as PyTorch timed it: _compile.compile_inner 9.50 s, "
            "OutputGraph.call_user_compiler 6.25 s, create_aot_dispatcher_function 5.00 s, "
            "a 0.50 s") in text
    assert "compile of eager" not in text


def test_a_steady_steps_host_time_is_given_by_phase_and_a_compiled_call() -> None:
    evs = events(7.5, 0.05, 0.010)
    for e in evs[:-1]:
        e.update(st.host_phases(100.0, [100.004, 100.007], 100.010))
    evs[-1]["graphs"] = 2
    run = st.summarize(evs, 0, "", None)
    assert run["host_phases_s"] == {"forward": pytest.approx(0.004),
                                    "backward": pytest.approx(0.003),
                                    "optimizer": pytest.approx(0.003)}
    assert st.host_phase_lines({"kiln_warm": run}) == [
        "- host a steady step of kiln_warm: forward 4.0 ms, backward 3.0 ms, optimizer 3.0 ms; "
        "1.75 ms a compiled call (2 graphs, each called forward and backward, the Python "
        "between them included)"]
    # Steps without the phases (an older run's) give none.
    assert "host_phases_s" not in st.summarize(events(7.5, 0.05, 0.01), 0, "", None)
    assert st.host_phase_lines({"eager": st.summarize(events(7.5, 0.05, 0.01), 0, "", None)}) \
        == []
