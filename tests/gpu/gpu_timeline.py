"""Where a profiled run's GPU sits idle: the gaps between the device's kernels and copies,
within each step and by the kernel each gap waited for. Reads plain spans, so it needs no
PyTorch; `spans_of` turns PyTorch profiler events into them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

# A gap shorter than this is the device moving from one queued kernel to the next, not the
# device waiting for the host.
WAIT_US = 4.0
STEP_PREFIX = "## step "


@dataclass(frozen=True)
class Span:
    """One kernel, copy or host range, in microseconds on the profiler's clock."""

    name: str
    start: float
    end: float


@dataclass
class Timeline:
    """A profile's spans: the device's work, the steps' host ranges and the host's ops."""

    device: list[Span] = field(default_factory=list)
    steps: list[Span] = field(default_factory=list)
    host: list[Span] = field(default_factory=list)


def spans_of(events: Iterable[Any]) -> Timeline:
    """A PyTorch profiler's events as a Timeline; the steps are its record_function("## step
    N") ranges. A step's range is also on the device, as an annotation from its first kernel
    to its last: that one is no work."""
    timeline = Timeline()
    for e in events:
        span = Span(e.name, e.time_range.start, e.time_range.end)
        device_type = getattr(e.device_type, "name", e.device_type)
        if device_type == "CUDA":
            if not e.name.startswith(STEP_PREFIX) and not getattr(e, "is_user_annotation",
                                                                   False):
                timeline.device.append(span)
        elif e.name.startswith(STEP_PREFIX):
            timeline.steps.append(span)
        else:
            timeline.host.append(span)
    return timeline


def busy(spans: Iterable[Span]) -> list[Span]:
    """The device's work as disjoint intervals in time order, each named after the first span
    in it (streams overlap, so spans are merged first)."""
    merged: list[Span] = []
    for s in sorted(spans, key=lambda s: (s.start, s.end)):
        if merged and s.start <= merged[-1].end:
            last = merged[-1]
            merged[-1] = Span(last.name, last.start, max(last.end, s.end))
        else:
            merged.append(s)
    return merged


@dataclass
class StepIdle:
    wall_us: float = 0.0
    busy_us: float = 0.0
    lead_us: float = 0.0  # from the step's start to its first kernel
    inside_us: float = 0.0  # between its first kernel and its last
    tail_us: float = 0.0  # from its last kernel to the step's end


def _host_during(host: list[Span], start: float, end: float,
                 into: dict[str, list[float]]) -> None:
    """Adds each host op's time inside [start, end) to `into` under its name (nested ops
    counted in each)."""
    for op in host:
        overlap = min(op.end, end) - max(op.start, start)
        if overlap > 0:
            into.setdefault(op.name, []).append(overlap)


def _host_lines(ops: dict[str, list[float]], n: int, top: int, indent: str) -> list[str]:
    return [f"{indent}{sum(times) / n / 1000:8.3f} ms {len(times) / n:6.1f}x  {name[:70]}"
            for name, times in sorted(ops.items(), key=lambda kv: (-sum(kv[1]), kv[0]))[:top]]


def idle_table(timeline: Timeline, top: int = 25, lead_ops: int = 15, waited: int = 3,
               wait_ops: int = 8) -> str:
    """Per step: wall, busy, and idle time before the first kernel, between kernels and after
    the last; the host's ops while the device waits for the first kernel (time inside the
    wait, nested ops counted in each); then the gaps of WAIT_US or more between kernels,
    summed over the steps by the kernel that ended them, most first; then, for the `waited`
    kernels waited for longest, the host's ops during those gaps."""
    if not timeline.steps:
        return "\nGPU idle: no step ranges were recorded.\n"
    per_step: list[StepIdle] = []
    waits: dict[str, list[float]] = {}
    before: dict[str, str] = {}
    in_lead: dict[str, list[float]] = {}
    in_wait: dict[str, dict[str, list[float]]] = {}
    for step in sorted(timeline.steps, key=lambda s: s.start):
        inside = [s for s in timeline.device if step.start <= s.start < step.end]
        host = [op for op in timeline.host if op.start < step.end and op.end > step.start]
        row = StepIdle(wall_us=step.end - step.start)
        intervals = busy(inside)
        if intervals:
            row.busy_us = sum(i.end - i.start for i in intervals)
            row.lead_us = intervals[0].start - step.start
            row.tail_us = max(0.0, step.end - intervals[-1].end)
            for prev, nxt in zip(intervals, intervals[1:]):
                gap = nxt.start - prev.end
                row.inside_us += gap
                if gap >= WAIT_US:
                    waits.setdefault(nxt.name, []).append(gap)
                    before.setdefault(nxt.name, prev.name)
                    _host_during(host, prev.end, nxt.start, in_wait.setdefault(nxt.name, {}))
            _host_during(host, step.start, intervals[0].start, in_lead)
        per_step.append(row)
    n = len(per_step)
    lines = ["", f"GPU idle per step (ms, mean of {n} steps): " + ", ".join(
        f"{name} {sum(getattr(r, name + '_us') for r in per_step) / n / 1000:.3f}"
        for name in ("wall", "busy", "lead", "inside", "tail"))]
    lines.append("Host ops before a step's first kernel (ms per step, calls per step):")
    lines += _host_lines(in_lead, n, lead_ops, "  ")
    lines.append(f"Gaps of {WAIT_US:g} us or more between kernels, by the kernel after the gap "
                 "(ms per step, count per step, longest us; the kernel before the first such "
                 "gap):")
    ranked = sorted(waits.items(), key=lambda kv: (-sum(kv[1]), kv[0]))
    for name, gaps in ranked[:top]:
        lines.append(f"  {sum(gaps) / n / 1000:8.3f} ms {len(gaps) / n:6.1f}x "
                     f"{max(gaps):8.1f} us  {name[:60]}  <- {before[name][:40]}")
    for name, _ in ranked[:waited]:
        lines.append(f"Host ops while the GPU waited for {name[:60]} (ms per step, calls per "
                     "step):")
        lines += _host_lines(in_wait[name], n, wait_ops, "    ")
    return "\n".join(lines) + "\n"
