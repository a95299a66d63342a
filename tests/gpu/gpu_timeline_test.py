"""gpu_timeline.py's idle accounting over hand-made spans, without PyTorch or a GPU."""

from __future__ import annotations

import types

import pytest

import gpu_timeline as tl
from gpu_timeline import Span


def test_overlapping_streams_are_busy_once() -> None:
    merged = tl.busy([Span("b", 5, 12), Span("a", 0, 10), Span("c", 20, 25)])
    assert merged == [Span("a", 0, 12), Span("c", 20, 25)]


def test_a_steps_idle_time_is_split_into_lead_inside_and_tail() -> None:
    steps = [Span("## step 1", 0, 100), Span("## step 2", 100, 200)]
    device = [Span("k0", 10, 20), Span("k1", 22, 40), Span("k2", 60, 91),  # step 1
              Span("k0", 130, 140), Span("k2", 150, 195)]  # step 2
    host = [Span("zero_grad", 1, 5), Span("CompiledFunction", 4, 30),  # 4 + 6 in step 1's lead
            Span("aten::addmm", 35, 58),  # 18 inside step 1's wait for k2 (40 to 60)
            Span("zero_grad", 100, 104), Span("CompiledFunction", 104, 150)]  # 4 + 26
    table = tl.idle_table(tl.Timeline(device, steps, host))
    # busy (10+18+31 + 10+45)/2, lead (10+30)/2, inside (2+20 + 10)/2, tail (9+5)/2
    assert "wall 0.100, busy 0.057, lead 0.020, inside 0.016, tail 0.007" in table
    summary, waited = table.split("Host ops while the GPU waited for k2")
    rows = [line.split() for line in summary.splitlines() if line.startswith("  ")]
    # What the host did while the GPU waited for each step's first kernel.
    assert rows[:2] == [["0.016", "ms", "1.0x", "CompiledFunction"],
                        ["0.004", "ms", "1.0x", "zero_grad"]]
    # The 2 us gap before k1 is the device moving on, not a wait.
    assert len(rows) == 3
    assert rows[2][:5] == ["0.015", "ms", "1.0x", "20.0", "us"]
    assert rows[2][5:] == ["k2", "<-", "k1"]
    # What the host did while the GPU waited for k2: step 2's wait (140 to 150) is the end of
    # CompiledFunction's range.
    assert [line.split() for line in waited.splitlines()[1:]] == [
        ["0.009", "ms", "0.5x", "aten::addmm"], ["0.005", "ms", "0.5x", "CompiledFunction"]]


def test_no_step_ranges_is_said() -> None:
    assert "no step ranges" in tl.idle_table(tl.Timeline([Span("k", 0, 1)]))


def test_profiler_events_are_sorted_into_device_work_steps_and_host_ops() -> None:
    def event(name: str, start: float, end: float, device: str) -> types.SimpleNamespace:
        kind = types.SimpleNamespace(name=device)
        return types.SimpleNamespace(name=name, time_range=types.SimpleNamespace(
            start=start, end=end), device_type=kind)

    annotation = event("user range", 3, 9, "CUDA")
    annotation.is_user_annotation = True
    timeline = tl.spans_of([event("## step 3", 0, 9, "CPU"), event("aten::mm", 1, 2, "CPU"),
                                 event("kiln_k0_add", 3, 4, "CUDA"),
                                 event("## step 3", 3, 8, "CUDA"), annotation])
    assert timeline.device == [Span("kiln_k0_add", 3, 4)]
    assert timeline.steps == [Span("## step 3", 0, 9)]
    assert timeline.host == [Span("aten::mm", 1, 2)]
    assert tl.WAIT_US == pytest.approx(4.0)
