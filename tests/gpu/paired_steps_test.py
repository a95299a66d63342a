"""paired_steps.py's reading of a process that trains both backends, without PyTorch or a
GPU."""

from __future__ import annotations

import pytest

import paired_steps as ps


def events(inductor: list[float], kiln: list[float], done: bool = True) -> list[dict]:
    """Steps from 1, each backend's seconds by step, in the order the process takes them."""
    out = []
    for step, (a, b) in enumerate(zip(inductor, kiln), 1):
        seconds = {"inductor": a, "kiln": b}
        for backend in ps.turn(step):
            out.append({"event": "step", "step": step, "backend": backend,
                        "loss": 3.0 - 0.1 * step + (1e-3 if backend == "kiln" else 0.0),
                        "seconds": seconds[backend], "host_seconds": seconds[backend] / 2})
    return out + ([{"event": "done", "device": "H100", "torch": "2.11"}] if done else [])


def test_backends_take_turns_going_first() -> None:
    assert ps.turn(1) == ("inductor", "kiln")
    assert ps.turn(2) == ("kiln", "inductor")
    assert ps.turn(3) == ("inductor", "kiln")


def test_each_steps_ratio_divides_out_a_slow_moment_that_both_backends_share() -> None:
    n = 12
    inductor = [9.0] + [0.020] * (n - 1)
    kiln = [5.0] + [0.022] * (n - 1)
    # A slow stretch of the host slows both backends' steps alike.
    for step in range(ps.STEADY_FROM, ps.STEADY_FROM + 3):
        inductor[step - 1] *= 2
        kiln[step - 1] *= 2
    result = ps.summarize(events(inductor, kiln), 0, "", None)
    assert result["ratio"] == pytest.approx(1.1)
    assert result["quartiles"] == [pytest.approx(1.1), pytest.approx(1.1)]
    assert len(result["ratios"]) == n - ps.STEADY_FROM + 1
    assert result["backends"]["inductor"]["first_s"] == 9.0
    assert result["backends"]["kiln"]["steady_s"] == pytest.approx(0.022)
    assert result["backends"]["kiln"]["host_s"] == pytest.approx(0.011)
    assert "failed" not in result


def test_the_table_gives_steps_ratio_losses_and_kilnds_counters() -> None:
    result = ps.summarize(events([9.0] + [0.02] * 9, [5.0] + [0.03] * 9), 0, "", None)
    result["server"] = {"compiles": 4.0, "hits": 0.0}
    text = ps.table("gpt2_124m_bf16", result)
    assert "- inductor: first step 9.00 s, steady 20.0 ms (host 10.0 ms)" in text
    assert "- kiln: first step 5.00 s, steady 30.0 ms (host 15.0 ms)" in text
    assert "- kiln steady / inductor steady, step by step: 1.50 (quartiles 1.50-1.50, 5 " \
           "steps)" in text
    assert "- losses: kiln's differ from inductor's by at most 3.4e-04 of the first" in text
    assert "- kilnd: 4 compiles, 0 hits\n" in text


def test_the_table_gives_each_backends_host_time_by_phase() -> None:
    evs = events([9.0] + [0.02] * 9, [5.0] + [0.03] * 9)
    for e in evs:
        if e.get("event") == "step":
            e.update(ps.host_phases(0.0, [0.0075, 0.012], 0.015))
    text = ps.table("gpt2_124m_bf16", ps.summarize(evs, 0, "", None))
    assert "- kiln: first step 5.00 s, steady 30.0 ms (host 15.0 ms: forward 7.5 ms, backward " \
           "4.5 ms, optimizer 3.0 ms)" in text


def test_the_cuda_graph_pair_is_step_times_cuda_graph_modes_and_says_so() -> None:
    import step_time

    assert ps.MODES[True] == {"inductor": "inductor_cudagraphs", "kiln": "kiln_cudagraphs"}
    assert set(ps.MODES[True].values()) == set(step_time.CUDAGRAPH_MODES)
    assert set(ps.MODES[False].values()) <= set(step_time.MODES)
    result = ps.summarize(events([1.0] * 8, [1.0] * 8), 0, "", None)
    assert ps.table("gpt2_124m_bf16", result, cudagraphs=True).startswith(
        "## gpt2_124m_bf16, both backends in one process (inductor_cudagraphs and "
        "kiln_cudagraphs)\n")
    assert ps.table("gpt2_124m_bf16", result).startswith(
        "## gpt2_124m_bf16, both backends in one process\n")


def test_a_kiln_copy_that_never_reached_kilnd_is_called_out() -> None:
    result = ps.summarize(events([1.0] * 8, [1.0] * 8), 0, "", None)
    result["server"] = {"compiles": 0.0, "hits": 0.0}
    assert "never reached kilnd" in ps.table("mlp_fp32", result)


def test_a_process_that_failed_says_why_and_keeps_what_it_measured() -> None:
    evs = events([1.0] * 7, [1.0] * 7, done=False)
    evs.append({"event": "error", "error": "RuntimeError: boom"})
    result = ps.summarize(evs, 1, "output", None)
    assert result["failed"] == "RuntimeError: boom"
    assert result["backends"]["kiln"]["steps"] == 7
    assert "- failed: RuntimeError: boom" in ps.table("mlp_fp32", result)
    timed_out = ps.summarize([], None, "", 500.0)
    assert timed_out["failed"] == "timed out after 500 s" and "ratio" not in timed_out


def test_too_few_steps_for_a_steady_one_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(SystemExit):
        ps.main(["--bundle", str(tmp_path), "--out", str(tmp_path / "out"), "--steps",
                 str(ps.STEADY_FROM)])


def test_the_table_lists_kilns_cuda_graph_log_lines_and_no_others() -> None:
    evs = events([1.0] * 8, [1.0] * 8)
    evs[3:3] = [{"event": "log", "level": "INFO", "message": "frame 0/0 compiled"}] + [
        {"event": "log", "level": "INFO",
         "message": f"graph fw{i}: captured in a CUDA graph at call 4: 3 of 3 inputs read in "
                    "place, 0 copied"} for i in range(ps.GRAPH_LINES + 1)]
    evs.insert(5, {"event": "log", "level": "INFO",
                   "message": "graph bw: captured 8 times; runs eagerly from now on"})
    result = ps.summarize(evs, 0, "", None)
    assert len(result["cuda_graph_log"]) == ps.GRAPH_LINES + 2
    assert "graph bw: captured 8 times; runs eagerly from now on" in result["cuda_graph_log"]
    text = ps.table("gpt2_124m_bf16", result, cudagraphs=True)
    assert f"- kiln's CUDA graphs ({ps.GRAPH_LINES + 2} log lines, the first " \
           f"{ps.GRAPH_LINES}):\n  - graph fw0: captured in a CUDA graph at call 4" in text
    assert "frame 0/0 compiled" not in text
    assert text.count("\n  - ") == ps.GRAPH_LINES
