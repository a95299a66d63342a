"""Time to first step and step time of torch.compile(backend="kiln") against eager, Dynamo,
AOTAutograd and Inductor, cold and warm, on a GPU machine.

Run from the repository root after `deploy/gpu-bundle.sh .bundle` (carried with the tree):

    python3 tests/gpu/step_time.py --bundle .bundle --out $OUT [--only gpt2_124m_fp32,...]
        [--steps 30] [--cudagraphs] [--repeat 3] [--rounds 3]

Per configuration (a model in fp32 or under bf16 autocast), each mode trains it for --steps
AdamW steps in a fresh process, from the same seed:
  eager       no compile
  dynamo      torch.compile(backend="eager"): Dynamo's tracing alone
  aot_eager   torch.compile(backend="aot_eager"): Dynamo and AOTAutograd's tracing
  inductor    Inductor with empty caches (a fresh TORCHINDUCTOR_CACHE_DIR)
  inductor_warm  Inductor again, a new process, its caches as the last run left them
  kiln        backend="kiln" against a kilnd with an empty store (started per configuration)
  kiln_warm   backend="kiln" again, a new process: kilnd holds every graph
and with --cudagraphs also inductor_cudagraphs (mode="reduce-overhead", warm caches) and
kiln_cudagraphs (options={"cudagraphs": True}, warm kilnd).

Each process records its first step's time (tracing, compiling and loading included; the
step runs the forward, the backward and the optimizer's step) and every later step's, and
how long the host took to issue each step's work (the forward, backward and optimizer calls
returning, before the loss is read back): a steady step whose host time is near its step time
is bound by the host, not the GPU. The steady step is the median from step STEADY_FROM on.
Its host time is given by phase too (the compiled forward's call, the backward, the
optimizer), and per compiled call: the forward's and backward's host time over the calls of the
graphs Dynamo made, each called forward and backward once a step.

The report, one table per configuration, puts each figure beside its anchor from the same
run, as the targets read: Kiln's cold first step against aot_eager's (the compile's cost over
tracing), Kiln's warm first step against Dynamo's and against Inductor's warm one, and every
steady step against Inductor's. Host speed differs between processes even on one machine
(a fifth, seen on H200 machines), so --repeat N runs the steady-state modes (eager, the warm
ones and the CUDA-graph ones) N times each, alternating between them, and reports the median
of their steady steps with the spread. The first steps move with the host's speed as much:
--rounds N runs every mode N times, each round from empty caches (a fresh kilnd and Inductor
cache folder), and reports the median first step with the spread, and each ratio's value in
every round beside the ratio of the medians. kilnd's compile counters over each Kiln process
show what a warm process compiled (nothing, when the cache serves it), and the backend's own
account of its calls (kiln.timings) where a Kiln run's first step went: kilnd, the frame's key,
lookup and storing, capture, loading, and AOTAutograd's tracing; beside it, every run's longest
phases by PyTorch's own compile timers (Dynamo's frame compile, the backend call). Writes
OUT/step_time.json after each configuration and OUT/step_time.txt at the end; a run that fails
is a row that says so.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import statistics
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from gpu_timeline import STEP_PREFIX, idle_table, spans_of  # noqa: E402
from host_threads import (GcTime, ThreadStates, busiest, core_speeds,  # noqa: E402
                          last_cpus, probe, process_cpu, python_loop, thread_cpu)
from kilnd_process import KilnServer, script_parser  # noqa: E402
from worker_process import logged, record_kiln_log, run_worker  # noqa: E402

STEPS = 30
STEADY_FROM = 6
TIMEOUT_S = 400.0
OUTPUT_TAIL = 3000
MODES = ("eager", "dynamo", "aot_eager", "inductor", "inductor_warm", "kiln", "kiln_warm")
CUDAGRAPH_MODES = ("inductor_cudagraphs", "kiln_cudagraphs")
# A step's host phases (host_phases), in order.
HOST_PHASES = ("forward", "backward", "optimizer")
# What --repeat runs again: the modes whose steady step the ratios read. A cold mode's first
# step needs empty caches, which its own first run has filled.
STEADY_MODES = ("eager", "inductor_warm", "kiln_warm") + CUDAGRAPH_MODES
RUNS_DIR = "step_time_runs"
# PyTorch's caching-allocator counters each run records at its end: device allocations and
# frees (a cudaFree synchronizes the device) and retries after freeing cached blocks, which
# would make a steady step wait on the GPU where no sync was asked for.
ALLOCATOR_COUNTERS = ("num_device_alloc", "num_device_free", "num_alloc_retries",
                      "num_sync_all_streams")
# With --profile, the last PROFILE_STEPS steps of each run run under a profiler (their
# step times are then not steady ones: keep --steps well above STEADY_FROM + PROFILE_STEPS).
PROFILE_STEPS = 3
PROFILE_ROWS = 40
# The stack sampler over steady steps ("steady") needs more of them to gather samples.
SAMPLED_STEPS = 12


@dataclass(frozen=True)
class Bench:
    """A model at a benchmark's size: capture_corpus's `builder` called with `kwargs`."""

    name: str
    builder: str
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    lr: float = 1e-4


BENCHES = (
    # The reference: GPT-2 124M on 4 sequences of 512 tokens.
    Bench("gpt2_124m", "build_gpt2_124m", {"batch": 4, "seq": 512}),
    Bench("nanogpt", "build_nanogpt"),
    Bench("llama", "build_llama"),
    Bench("resnet18", "build_resnet18", {"batch": 32}),
)
CONFIGS = {f"{b.name}_{dtype}": (b, dtype) for b in BENCHES for dtype in ("fp32", "bf16")}


# --- the training process ------------------------------------------------------------------


def compiled(model: Any, mode: str) -> Any:
    """The module a mode trains."""
    import torch

    if mode == "eager":
        return model
    if mode == "dynamo":
        return torch.compile(model, backend="eager")
    if mode == "aot_eager":
        return torch.compile(model, backend="aot_eager")
    if mode in ("inductor", "inductor_warm"):
        return torch.compile(model)
    if mode == "inductor_cudagraphs":
        return torch.compile(model, mode="reduce-overhead")
    if mode in ("kiln", "kiln_warm"):
        return torch.compile(model, backend="kiln")
    if mode == "kiln_cudagraphs":
        return torch.compile(model, backend="kiln", options={"cudagraphs": True})
    raise ValueError(f"unknown mode {mode!r}")


class Profiler:
    """PyTorch's profiler ("torch": the GPU's work by kernel or op, most time first, summed
    over the profiled steps, and the host's time in each op), Python's ("python": the
    host's time by Python function, most time spent in the function itself first, then most
    cumulative time first) or a sampler of the Python stack ("first": the first step's
    seconds in each function and what it called, most first; stack_sampler.py says why not
    cProfile; "steady": the same over the last SAMPLED_STEPS steps, sampled every 0.5 ms,
    then the seconds in each function itself; "threads": over as many steps, what the main
    thread and autograd's engine threads do, host_threads.ThreadStates)."""

    def __init__(self, kind: str) -> None:
        import torch

        self.kind = kind
        if kind == "torch":
            self.prof = torch.profiler.profile(activities=[
                torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA])
        elif kind == "first":
            from stack_sampler import StackSampler

            self.prof = StackSampler()
        elif kind == "steady":
            from stack_sampler import StackSampler

            # A backward's Python runs in autograd's engine threads while the step waits.
            self.prof = StackSampler(period_s=0.0005, switch_interval_s=0.0001,
                                     waits_in={"torch/autograd/graph.py:_engine_run_backward"})
        elif kind == "threads":
            self.prof = ThreadStates()
        else:
            import cProfile

            self.prof = cProfile.Profile()

    def start(self) -> None:
        if self.kind == "torch":
            self.prof.__enter__()
        elif self.kind == "threads":
            # The main thread would hold the interpreter for 5 ms at a time.
            self.saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(0.0002)
            self.prof.start()
        elif self.kind in ("first", "steady"):
            self.prof.start()
        else:
            self.prof.enable()

    def table(self) -> str:
        if self.kind == "torch":
            self.prof.__exit__(None, None, None)
            averages = self.prof.key_averages()
            # The GPU's time by kernel, then the host's by op (what each op's call costs).
            return averages.table(sort_by="self_device_time_total", row_limit=PROFILE_ROWS,
                                  max_name_column_width=70) + kernels_by_author(averages) + \
                idle_table(spans_of(self.prof.events())) + \
                averages.table(sort_by="self_cpu_time_total", row_limit=PROFILE_ROWS,
                               max_name_column_width=70)
        if self.kind == "first":
            return self.prof.table(2 * PROFILE_ROWS)
        if self.kind == "threads":
            table = self.prof.table()
            sys.setswitchinterval(self.saved_interval)
            return table
        if self.kind == "steady":
            return self.prof.table(2 * PROFILE_ROWS, own=True)
        import io
        import pstats

        self.prof.disable()
        text = io.StringIO()
        # By time in the function itself (where the host's time goes), then by cumulative
        # time (which of the step's calls it goes in).
        stats = pstats.Stats(self.prof, stream=text)
        stats.sort_stats("tottime").print_stats(PROFILE_ROWS)
        stats.sort_stats("cumulative").print_stats(PROFILE_ROWS)
        return text.getvalue()


def kernels_by_author(averages: Any, top: int = 40) -> str:
    """The GPU time of the profiled steps by who wrote the kernels: generated (Kiln's kiln_k*,
    Inductor's triton_*), copies and fills, and libraries (cuBLAS, attention, PyTorch's own),
    then the slowest generated kernels by name."""
    totals = {"generated": 0.0, "copies": 0.0, "libraries": 0.0}
    generated = []
    for e in averages:
        us = getattr(e, "self_device_time_total", 0.0)
        # Host-side rows count their kernels' time again: ops, optimizer steps, a compiled
        # graph's call (Kiln's CompiledFunction, Inductor's "## Call CompiledFxGraph ..."),
        # and Inductor's range around each launch, which bears its kernel's name.
        device_type = getattr(e, "device_type", None)
        if (us <= 0 or getattr(device_type, "name", device_type) == "CPU" or
                e.key.startswith(("aten::", "Optimizer.", "Compiled", "kiln.", "## "))):
            continue
        if e.key.startswith(("kiln_k", "triton_")):
            totals["generated"] += us
            generated.append((us, e.count, e.key))
        elif e.key.startswith(("Memcpy", "Memset")):
            totals["copies"] += us
        else:
            totals["libraries"] += us
    lines = ["", "GPU time by author (ms, all profiled steps): " +
             ", ".join(f"{k} {v / 1000:.3f}" for k, v in totals.items())]
    for us, count, key in sorted(generated, reverse=True)[:top]:
        lines.append(f"  {us / 1000:8.3f} ms {count:5d}x {key[:90]}")
    return "\n".join(lines) + "\n"


def prepared(name: str, steps: int) -> tuple[Bench, Any, Any, list]:
    """Configuration `name`'s bench and autocast dtype, its model on the GPU in training
    mode and `steps` fresh batches, from seed 0 with TF32 off: every process that trains it
    starts from the same weights and sees the same batches."""
    import random

    import torch

    import capture_corpus as corpus  # imports kiln, which registers the backend
    from train_models import fresh_like

    bench, dtype = CONFIGS[name]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    random.seed(0)
    torch.manual_seed(0)
    model, example = getattr(corpus, bench.builder)(**bench.kwargs)
    model = model.to(corpus.DEVICE).train()
    return bench, dtype, model, [[fresh_like(x) for x in example] for _ in range(steps)]


def train(name: str, mode: str, steps: int, write_event: Callable[..., None],
          profile: str = "", hide_start_ms: float = 0.0) -> None:
    import torch

    import capture_corpus as corpus
    from train_models import backward_step

    record_kiln_log(write_event)
    bench, dtype, model, batches = prepared(name, steps)
    opt = torch.optim.AdamW(model.parameters(), lr=bench.lr)
    run = compiled(model, mode)
    profiled = profiled_steps(profile, steps)
    prof, table = None, None
    spin = GpuSpin(hide_start_ms) if hide_start_ms > 0 else None
    # Each thread's CPU time over the steady steps that are not profiled.
    measured = range(STEADY_FROM, profiled.start if profiled.start > STEADY_FROM else steps + 1)
    threads: dict[str, dict[str, float]] = {}
    gc_time = GcTime()
    for step, batch in enumerate(batches, 1):
        if step in (measured.start, measured.stop):
            threads["before" if step == measured.start else "after"] = thread_cpu()
            if step == measured.start:
                gc_time.__enter__()
            else:
                gc_time.__exit__()
        if step == profiled.start:
            prof = Profiler(profile)
            prof.start()
        torch.cuda.synchronize()
        start = time.perf_counter()
        if spin is not None:
            spin.queue()
        # A torch profile's step ranges, from which gpu_timeline reads the GPU's idle time.
        marked = torch.profiler.record_function(f"{STEP_PREFIX}{step}") \
            if prof is not None and profile == "torch" else contextlib.nullcontext()
        marks: list[float] = []
        with marked:
            loss = backward_step(run, batch, opt, corpus.autocast(dtype), marks)
            opt.step()
            issued = time.perf_counter()
            value = loss.item()
            torch.cuda.synchronize()
        hidden = spin.seconds() if spin is not None else 0.0
        write_event(event="step", step=step, loss=value,
                    seconds=time.perf_counter() - start - hidden, host_seconds=issued - start,
                    **host_phases(start, marks, issued))
        if prof is not None and step == profiled[-1]:
            table = prof.table()  # stops profiling: "first" covers the first step alone
    if "after" not in threads:
        threads["after"] = thread_cpu()
        gc_time.__exit__()
    if table is not None:
        write_event(event="profile", steps=len(profiled), from_step=profiled.start, table=table)
    stats = torch.cuda.memory_stats()
    from torch._dynamo.utils import counters

    write_event(event="done", device=torch.cuda.get_device_name(), torch=torch.__version__,
                graphs=counters["stats"]["unique_graphs"],
                allocator={key: stats.get(key, 0) for key in ALLOCATOR_COUNTERS},
                aot_cache={key.removeprefix("autograd_cache_"): n
                           for key, n in counters["aot_autograd"].items()
                           if key.startswith("autograd_cache_")},
                threads=busiest(threads.get("before", {}), threads["after"], len(measured)),
                placement=placement_speeds(), compile_times=dynamo_times(),
                gc=gc_time.per_step(len(measured)), heap=heap_size(),
                growth=heap_growth(lambda: backward_step(run, batches[-1], opt,
                                                         corpus.autocast(dtype)).item()),
                probe=host_probe(torch, corpus.DEVICE))


def placement_speeds() -> list[list[Any]]:
    """[thread, CPU, python_100k_us] for the main thread and autograd's, each CPU's speed
    timed pinned to it: whether a process's steps ran on slow CPUs (host_threads.main times
    them all)."""
    placed = last_cpus()
    speeds = core_speeds(python_loop, rounds=1, cpus=set(placed.values()))
    return [[key.rsplit("/", 1)[0], cpu, speeds[cpu][0] * 1e6]
            for key, cpu in sorted(placed.items()) if speeds.get(cpu)]


def heap_size() -> dict[str, float]:
    """The objects Python's collector tracks and how long a full collection of them takes,
    in ms: what a collection of the oldest generation costs this process when one comes."""
    import gc

    start = time.perf_counter()
    gc.collect()
    return {"objects": len(gc.get_objects()), "full_ms": (time.perf_counter() - start) * 1e3}


def heap_growth(step: Callable[[], Any], steps: int = 5,
                top: int = 6) -> dict[str, dict[str, float]]:
    """What `step` leaves on Python's heap, by type, a step, most first: "kept", objects that
    are still alive after it (a step that keeps some grows the process without bound), and
    "cyclic", garbage in reference cycles that only a collection frees. Either makes the
    collector run during steady steps; a step that leaves neither never triggers it."""
    import gc

    def census() -> Counter:
        return Counter(type(o).__qualname__ for o in gc.get_objects())

    census()  # what a census makes once (its type names' caches) is then in both
    gc.collect()
    before = census()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(steps):
            step()
        gc.collect()
        cyclic = Counter(type(o).__qualname__ for o in gc.garbage)
    finally:
        gc.garbage.clear()
        gc.set_debug(0)
        gc.enable()
    gc.collect()
    kept = census() - before
    return {name: {kind: n / steps for kind, n in counts.most_common(top)}
            for name, counts in (("kept", kept), ("cyclic", cyclic))}


def dynamo_times() -> dict[str, float]:
    """Seconds by what PyTorch's compile stack timed (torch._dynamo.utils'
    compilation_time_metrics: Dynamo's whole compile of a frame, the backend call inside it,
    AOTAutograd's and Inductor's phases), summed over the process; empty when this PyTorch
    keeps none."""
    try:
        from torch._dynamo.utils import compilation_time_metrics
    except ImportError:
        return {}
    return {name: float(sum(times)) for name, times in compilation_time_metrics.items()
            if times}


def host_probe(torch: Any, device: Any) -> dict[str, float]:
    """This process's host speed at fixed work, microseconds: PyTorch's allocation through
    the dispatcher (an op's host path), and plain Python."""
    empty = probe(lambda: [torch.empty((256,), device=device) for _ in range(1000)]) / 1000
    python = probe(python_loop)
    return {"torch_empty_us": empty * 1e6, "python_100k_us": python * 1e6}


class GpuSpin:
    """A GPU wait of about `ms` queued at a step's start: the host's work before the step's
    first kernel overlaps it instead of leaving the GPU idle, and the step's time less the
    wait (timed on the GPU) is the GPU's work and the host's gaps inside the step."""

    def __init__(self, ms: float) -> None:
        import torch

        self.torch = torch
        self.begin, self.end = torch.cuda.Event(enable_timing=True), \
            torch.cuda.Event(enable_timing=True)
        probe = 10_000_000
        self.begin.record()
        torch.cuda._sleep(probe)
        self.end.record()
        self.end.synchronize()
        self.cycles = max(1, int(probe * ms / self.begin.elapsed_time(self.end)))

    def queue(self) -> None:
        self.begin.record()
        self.torch.cuda._sleep(self.cycles)
        self.end.record()

    def seconds(self) -> float:
        return self.begin.elapsed_time(self.end) / 1000


def profiled_steps(profile: str, steps: int) -> range:
    """The steps (from 1) that `profile` covers."""
    if profile == "first":
        return range(1, 2)
    count = SAMPLED_STEPS if profile in ("steady", "threads") else PROFILE_STEPS if profile else 0
    return range(max(2, steps - count + 1), steps + 1) if count else range(0)


def worker(name: str, mode: str, steps: int, events_path: pathlib.Path,
           profile: str, hide_start_ms: float = 0.0) -> int:
    return logged(events_path, lambda write_event: train(name, mode, steps, write_event, profile,
                                                         hide_start_ms), OUTPUT_TAIL)


def host_phases(start: float, marks: list[float], issued: float) -> dict:
    """A step's host seconds by phase, as a step event gives them: the compiled forward's call
    (Dynamo's guards, the graphs' calls and the Python between them), the backward (autograd
    and the backward graphs) and the optimizer, from backward_step's `marks`."""
    forward, backward = marks
    return {"forward_host_seconds": forward - start, "backward_host_seconds": backward - forward,
            "optimizer_host_seconds": issued - backward}


# --- reading runs (no PyTorch) --------------------------------------------------------------


def step_figures(steps: list[dict], steady: list[dict]) -> dict:
    """The step count, the losses, the first step's time and the median steady step and its
    host time (seconds) of `steps` ("step" events), `steady` the ones counted as steady."""
    figures: dict = {"steps": len(steps), "losses": [e["loss"] for e in steps]}
    if steps:
        figures["first_s"] = steps[0]["seconds"]
    if steady:
        figures["steady_s"] = statistics.median(e["seconds"] for e in steady)
        figures["host_s"] = statistics.median(e["host_seconds"] for e in steady)
        if all("forward_host_seconds" in e for e in steady):
            figures["host_phases_s"] = {
                phase: statistics.median(e[f"{phase}_host_seconds"] for e in steady)
                for phase in HOST_PHASES}
    return figures


def summarize(events: list[dict], returncode: Optional[int], output: str,
              timed_out_after: Optional[float]) -> dict:
    """One process's figures: first step, steady step and its host time (seconds), losses;
    or why it did not finish."""
    steps = [e for e in events if e.get("event") == "step"]
    profile = next((e for e in events if e.get("event") == "profile"), None)
    steady = steps[STEADY_FROM - 1:] if len(steps) >= STEADY_FROM else steps[1:]
    # Profiled steps are not steady ones (a profile of the first step leaves them all be).
    first_profiled = profile.get("from_step", len(steps) - PROFILE_STEPS + 1) if profile else 1
    if first_profiled > 1:
        steady = [e for e in steady if e["step"] < first_profiled] or steady
    run = step_figures(steps, steady)
    backend = backend_time(events)
    if backend:
        run["backend"] = backend
    done = next((e for e in events if e.get("event") == "done"), None)
    error = next((e for e in events if e.get("event") == "error"), None)
    if done:
        run["device"] = done["device"]
        run["allocator"] = done.get("allocator", {})
        if done.get("aot_cache"):
            run["aot_cache"] = done["aot_cache"]  # AOTAutogradCache's hits, misses, bypasses
        for key in ("threads", "probe", "placement", "gc", "heap", "growth", "compile_times",
                    "graphs"):
            if done.get(key):
                run[key] = done[key]
    else:
        run["failed"] = (error["error"] if error else
                         f"timed out after {timed_out_after:.0f} s" if timed_out_after else
                         f"exited with {returncode}")
        run["output_tail"] = output[-OUTPUT_TAIL:]
    return run


def backend_time(events: list[dict]) -> Optional[dict]:
    """The Kiln backend's calls of a run, added up (kiln.timings' frame records): their
    seconds, each phase's and the rest (AOTAutograd's tracing); None for a run without."""
    frames = [e["times"] for e in events
              if e.get("event") == "log" and (e.get("times") or {}).get("scope") == "frame"]
    if not frames:
        return None
    phases: dict[str, float] = {}
    for frame in frames:
        for name, seconds in frame["phases"].items():
            phases[name] = phases.get(name, 0.0) + seconds
    return {"calls": len(frames), "seconds": sum(f["seconds"] for f in frames),
            "phases": phases, "rest": sum(f["rest"] for f in frames)}


def backend_lines(runs: dict) -> list[str]:
    """Where each Kiln run's first step went: its backend calls, phase by phase, and the
    rest of the step (Dynamo's tracing, the step's own work)."""
    lines = []
    for mode, run in runs.items():
        backend, first = run.get("backend"), run.get("first_s")
        if not backend or first is None:
            continue
        phases = ", ".join(f"{name} {seconds:.2f} s"
                           for name, seconds in backend["phases"].items())
        lines.append(f"- first step of {mode}: {first:.2f} s, of it {backend['calls']} backend "
                     f"calls {backend['seconds']:.2f} s ({phases + ', ' if phases else ''}"
                     f"AOTAutograd and the rest {backend['rest']:.2f} s); Dynamo and the step "
                     f"{max(0.0, first - backend['seconds']):.2f} s")
    return lines


def host_phase_text(figures: dict, graphs: Optional[int] = None) -> str:
    """A steady step's host time by phase ("forward 3.1 ms, backward 2.0 ms, optimizer 1.2
    ms"), and with the count of graphs Dynamo made, the forward's and backward's host time a
    compiled call (each graph called once forward and once backward a step); empty when the
    figures have no phases."""
    phases = figures.get("host_phases_s")
    if not phases:
        return ""
    text = ", ".join(f"{phase} {phases[phase] * 1e3:.1f} ms" for phase in HOST_PHASES)
    if graphs:
        per_call = (phases["forward"] + phases["backward"]) / (2 * graphs)
        text += (f"; {per_call * 1e3:.2f} ms a compiled call ({graphs} graphs, each called "
                 "forward and backward, the Python between them included)")
    return text


def host_phase_lines(runs: dict) -> list[str]:
    """Each mode's steady step's host time by phase (host_phase_text)."""
    lines = []
    for mode, run in runs.items():
        text = host_phase_text(run, run.get("graphs"))
        if text:
            lines.append(f"- host a steady step of {mode}: {text}")
    return lines


def compile_time_lines(runs: dict, top: int = 4) -> list[str]:
    """Each run's longest phases as PyTorch's compile stack timed them (Dynamo's frame
    compile, the backend call, ...): beside Kiln's account, what Dynamo itself took."""
    lines = []
    for mode, run in runs.items():
        times = run.get("compile_times")
        if not times:
            continue
        longest = sorted(times.items(), key=lambda item: -item[1])[:top]
        lines.append(f"- compile of {mode} as PyTorch timed it: " +
                     ", ".join(f"{name} {seconds:.2f} s" for name, seconds in longest))
    return lines


def merge_repeats(runs: list[dict]) -> dict:
    """One mode's runs as one: the first run's figures, with the steady and host times the
    medians over the runs that finished, and the steady times' spread, each beside its
    process's host speed (probe). The first step is the median over the runs that each began
    a round (`round_first`: the caches as the mode's name says), when there are several."""
    run = dict(runs[0])
    finished = [r for r in runs if not r.get("failed") and r.get("steady_s") is not None]
    firsts = [r["first_s"] for r in finished if r.get("round_first")]
    if len(firsts) > 1:
        run["first_s"] = statistics.median(firsts)
        run["first_runs_s"] = firsts
    if len(runs) > 1 and finished:
        steady = [r["steady_s"] for r in finished]
        run["steady_s"] = statistics.median(steady)
        run["host_s"] = statistics.median(r["host_s"] for r in finished)
        run["steady_runs_s"] = steady
        run["probe_runs"] = [r.get("probe") for r in finished]
    return run


def ratio(a: Optional[dict], b: Optional[dict], key: str) -> Optional[float]:
    """a[key] / b[key], when both runs have the figure."""
    if not a or not b or a.get(key) is None or not b.get(key):
        return None
    return a[key] / b[key]


# Each ratio the targets name: (label, numerator mode, denominator mode, figure).
RATIOS = (
    ("kiln cold first / aot_eager first", "kiln", "aot_eager", "first_s"),
    ("inductor cold first / aot_eager first", "inductor", "aot_eager", "first_s"),
    ("kiln warm first / dynamo first", "kiln_warm", "dynamo", "first_s"),
    ("kiln warm first / inductor warm first", "kiln_warm", "inductor_warm", "first_s"),
    ("kiln steady / inductor steady", "kiln_warm", "inductor_warm", "steady_s"),
    ("kiln steady / eager steady", "kiln_warm", "eager", "steady_s"),
    ("kiln cudagraphs steady / inductor reduce-overhead steady", "kiln_cudagraphs",
     "inductor_cudagraphs", "steady_s"),
)


def ratios(runs: dict) -> dict:
    return {label: ratio(runs.get(a), runs.get(b), key) for label, a, b, key in RATIOS
            if a in runs and b in runs}


def ratio_lines(ratio_values: dict, by_round: Sequence[dict] = ()) -> list[str]:
    """A line a ratio; with several rounds, its value in each round beside it."""
    lines = []
    for label, value in ratio_values.items():
        each = [r.get(label) for r in by_round]
        rounds = (" (rounds: " + ", ".join(_num(v, ".2f") for v in each) + ")"
                  if len(each) > 1 else "")
        lines.append(f"- {label}: {_num(value, '.2f')}{rounds}")
    return lines


def _num(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def loss_difference(run: dict, eager: Optional[dict]) -> Optional[float]:
    """The largest difference of a run's losses from eager's, relative to eager's first (as
    train_models.py judges them): a fast run that trains differently is not a result."""
    if not eager or not eager.get("losses") or not run.get("losses"):
        return None
    reference = eager["losses"]
    return max(abs(a - b) for a, b in zip(run["losses"], reference)) / abs(reference[0])


def table(config: str, runs: dict, ratio_values: dict, by_round: Sequence[dict] = ()) -> str:
    lines = [f"## {config}",
             "| mode | first step s | steady ms | host ms | compiles | hits | loss vs eager |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for mode, run in runs.items():
        if run.get("failed"):
            lines.append(f"| {mode} | failed: {run['failed'][:120]} | | | | | |")
            continue
        server = run.get("server") or {}
        steady, host = run.get("steady_s"), run.get("host_s")
        spread = run.get("steady_runs_s") or []
        within = f" ({min(spread) * 1e3:.1f}-{max(spread) * 1e3:.1f})" if spread else ""
        firsts = run.get("first_runs_s") or []
        first_within = f" ({min(firsts):.2f}-{max(firsts):.2f})" if firsts else ""
        lines.append(f"| {mode} | {_num(run.get('first_s'), '.2f')}{first_within} | "
                     f"{_num(steady and steady * 1e3, '.1f')}{within} | "
                     f"{_num(host and host * 1e3, '.1f')} | "
                     f"{_num(server.get('compiles'), '.0f') if server else ''} | "
                     f"{_num(server.get('hits'), '.0f') if server else ''} | "
                     f"{_num(loss_difference(run, runs.get('eager')), '.1e')} |")
    lines.append("")
    lines += ratio_lines(ratio_values, by_round)
    lines += backend_lines(runs)
    lines += compile_time_lines(runs)
    lines += host_phase_lines(runs)
    lines += host_lines(runs)
    return "\n".join(lines) + "\n"


def host_lines(runs: dict) -> list[str]:
    """Each process's host speed at fixed work and its busiest threads over the steady steps
    (CPU ms a step), with kilnd's CPU time over the process: a process whose host is slower
    at everything shows it here."""
    lines = []
    for mode, run in runs.items():
        speed = run.get("probe")
        if not speed:
            continue
        threads = ", ".join(f"{name} {cpu * 1e3:.1f}" for name, cpu in run.get("threads", []))
        kilnd = run.get("kilnd_cpu_s")
        collected = run.get("gc")
        gc_text = "; gc a step: " + ", ".join(
            f"gen{g} {n:.2f}x {ms:.2f} ms" for g, (n, ms) in enumerate(collected)) \
            if collected else ""
        heap = run.get("heap")
        if heap:
            gc_text += (f"; {heap['objects'] / 1e6:.2f}M objects, a full collection "
                        f"{heap['full_ms']:.0f} ms")
        for name, counts in run.get("growth", {}).items():
            gc_text += f"; {name} a step: " + (", ".join(
                f"{kind} {n:g}" for kind, n in counts.items()) or "none")
        placed = ", ".join(f"{name} on {cpu} ({us / 1e3:.2f} ms)"
                           for name, cpu, us in run.get("placement", []))
        lines.append(f"- host of {mode}: torch.empty {speed['torch_empty_us']:.2f} us, python "
                     f"{speed['python_100k_us'] / 1e3:.2f} ms; threads (CPU ms a step): "
                     f"{threads}" + (f"; their CPUs' python: {placed}" if placed else "")
                     + (f"; kilnd CPU {kilnd:.2f} s" if kilnd is not None else "") + gc_text)
        pairs = [f"{steady * 1e3:.1f} ms at python {probe['python_100k_us'] / 1e3:.2f} ms"
                 for steady, probe in zip(run.get("steady_runs_s", []),
                                          run.get("probe_runs", [])) if probe]
        if pairs:
            lines.append(f"  - each run's steady step at its host's speed: {', '.join(pairs)}")
    return lines


def compile_counts(before: Optional[dict], after: Optional[dict]) -> Optional[dict]:
    """Compiles kilnd ran and requests it answered from its cache over one process."""
    if before is None or after is None:
        return None

    def delta(prefix: str, match: Callable[[str], bool]) -> float:
        return sum(v - before.get(k, 0.0) for k, v in after.items()
                   if k.startswith(prefix) and match(k))

    return {"compiles": delta("kiln_compiles_total.", lambda k: True),
            "hits": delta("kiln_compile_requests_total.", lambda k: k.endswith(".hit"))}


# --- the runner ----------------------------------------------------------------------------


def run_mode(name: str, mode: str, steps: int, timeout: float, env: dict,
             server: Optional[KilnServer], out: pathlib.Path, profile: str = "",
             repeat: int = 0, hide_start_ms: float = 0.0) -> dict:
    events_path = out / RUNS_DIR / (f"{name}.{mode}.jsonl" if repeat == 0 else
                                    f"{name}.{mode}.{repeat}.jsonl")
    events_path.parent.mkdir(parents=True, exist_ok=True)
    events_path.write_text("")
    before = server.metrics() if server else None
    kilnd_pid = server.process.pid if server and server.process else None
    kilnd_before = process_cpu(kilnd_pid) if kilnd_pid else None
    result = run_worker([str(pathlib.Path(__file__).resolve()), "--worker", name, mode,
                         str(steps), str(events_path), profile or "-", str(hide_start_ms)],
                        env, timeout)
    from train_models import read_events

    events = read_events(events_path)
    run = summarize(events, result.returncode, result.output, result.timed_out_after)
    profiles = [e["table"] for e in events if e.get("event") == "profile"]
    if profiles:
        (out / f"profile.{name}.{mode}.{profile}.txt").write_text(profiles[0])
    if server:
        run["server"] = compile_counts(before, server.metrics())
    kilnd_after = process_cpu(kilnd_pid) if kilnd_pid else None
    if kilnd_before is not None and kilnd_after is not None:
        run["kilnd_cpu_s"] = kilnd_after - kilnd_before
    return run


def run_round(name: str, modes: Sequence[str], args: Any,
              repeated: dict[str, list[dict]]) -> dict:
    """Every mode of `modes` once from empty caches (a fresh kilnd and Inductor cache folder),
    then the steady-state modes args.repeat - 1 times more; each run is appended to
    `repeated[mode]`. Returns this round's first run of each mode."""
    this_round = {}
    with KilnServer(args.bundle, args.out) as server:
        env = dict(server.env, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
        order = [(mode, 0) for mode in modes] + [
            (mode, r) for r in range(1, args.repeat) for mode in modes if mode in STEADY_MODES]
        for mode, r in order:
            uses_kiln = mode.startswith("kiln")
            run = run_mode(name, mode, args.steps, args.timeout, env,
                           server if uses_kiln else None, args.out,
                           args.profile if r == 0 and not repeated.get(mode) else "",
                           repeat=len(repeated.get(mode, [])),
                           hide_start_ms=args.hide_start_ms)
            run["round_first"] = r == 0
            repeated.setdefault(mode, []).append(run)
            if r == 0:
                this_round[mode] = run
            brief = {k: v for k, v in run.items() if k != "losses"}
            count = len(repeated[mode])
            print(f"{name} {mode}{f' (run {count})' if count > 1 else ''}: "
                  f"{json.dumps(brief)[:400]}", flush=True)
    return this_round


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # the runner's own call: CONFIG MODE STEPS EVENTS_PATH
        # PROFILE HIDE_START_MS
        name, mode, steps, events_path, profile, hide_start_ms = argv[1:]
        return worker(name, mode, int(steps), pathlib.Path(events_path),
                      "" if profile == "-" else profile, float(hide_start_ms))
    parser = script_parser()
    parser.add_argument("--only", default="gpt2_124m_fp32,gpt2_124m_bf16",
                        help=f"configurations, comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--modes", default="", help="modes to run (default: all)")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--cudagraphs", action="store_true")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs of each steady-state mode (median reported)")
    parser.add_argument("--rounds", type=int, default=1,
                        help="runs of every mode, each round from empty caches (median first "
                             "step reported, each ratio per round)")
    parser.add_argument("--profile", choices=("torch", "python", "first", "steady", "threads"),
                        default="",
                        help="profile each run's last steps with PyTorch's or Python's "
                             "profiler, a stack sampler (steady) or a sampler of its threads' "
                             "states (threads), or its first step with a stack sampler "
                             "(first); "
                             "OUT/profile.CONFIG.MODE.KIND.txt")
    parser.add_argument("--hide-start-ms", type=float, default=0.0,
                        help="queue a GPU wait this long at each step's start, so the host's "
                             "work before the first kernel overlaps it; steps are timed "
                             "without the wait (the GPU's work and the host's gaps inside a "
                             "step)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    modes = MODES + (CUDAGRAPH_MODES if args.cudagraphs else ())
    if args.modes:
        modes = tuple(m for m in args.modes.split(",") if m)
    report: dict = {"steps": args.steps, "steady_from": STEADY_FROM, "configs": {}}
    texts = []
    for name in names:
        repeated: dict[str, list[dict]] = {}
        by_round = []
        for _ in range(args.rounds):
            this_round = run_round(name, modes, args, repeated)
            by_round.append(ratios(this_round))
        runs = {mode: merge_repeats(repeated[mode]) for mode in modes}
        ratio_values = ratios(runs)
        report["configs"][name] = {"runs": runs, "ratios": ratio_values,
                                   "ratios_by_round": by_round}
        (args.out / "step_time.json").write_text(json.dumps(report, indent=1))
        texts.append(table(name, runs, ratio_values, by_round))
        print(texts[-1], flush=True)
    (args.out / "step_time.txt").write_text("\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
