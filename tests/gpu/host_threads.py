"""Where a process's host time goes by thread, and how fast its host runs a fixed piece of
work: two processes that run the same code at different speeds (a busy thread beside the
main one, another process on its cores) show it here, not in a profile of either. Reads
/proc, so it needs no PyTorch."""

from __future__ import annotations

import collections
import gc
import os
import pathlib
import sys
import threading
import time
from typing import Callable, Optional

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")


def process_cpu(pid: int) -> Optional[float]:
    """Process `pid`'s CPU seconds (user and system, all its threads), or None when it is
    gone."""
    return _stat_cpu(pathlib.Path(f"/proc/{pid}/stat"))


def thread_cpu(pid: str = "self") -> dict[str, float]:
    """Each thread's CPU seconds (user and system) so far, by "name/tid"."""
    times: dict[str, float] = {}
    for task in pathlib.Path(f"/proc/{pid}/task").iterdir():
        cpu = _stat_cpu(task / "stat")
        if cpu is None:
            continue  # the thread ended
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue
        times[f"{name}/{task.name}"] = cpu
    return times


def busiest(before: dict[str, float], after: dict[str, float], per: int,
            top: int = 6) -> list[tuple[str, float]]:
    """The threads that used the most CPU between the two readings, in seconds per `per`
    (a number of steps), most first; a thread started in between counts from zero. Threads
    of one name are summed, named "name xN" when N of them used CPU: a thread takes its
    maker's name unless it names itself, so a name may hide helpers beside the thread."""
    by_name: dict[str, list[float]] = {}
    for key, cpu in after.items():
        used = cpu - before.get(key, 0.0)
        if used > 0:
            by_name.setdefault(key.rsplit("/", 1)[0], []).append(used / max(1, per))
    ranked = [(name if len(used) == 1 else f"{name} x{len(used)}", sum(used))
              for name, used in by_name.items()]
    return sorted(ranked, key=lambda kv: (-kv[1], kv[0]))[:top]


def probe(work: Callable[[], None], repeats: int = 5) -> float:
    """The fastest of `repeats` runs of `work`, in seconds: the host's speed at a fixed piece
    of work, which a slower process (a busy neighbour, a far core) takes longer at."""
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        work()
        best = min(best, time.perf_counter() - start)
    return best


def python_loop() -> None:
    """The plain-Python work a host's speed is timed at: a loop of 100,000 steps."""
    sum(i * i for i in range(100_000))


def core_speeds(work: Callable[[], None], rounds: int = 2,
                cpus: Optional[set[int]] = None) -> dict[int, list[float]]:
    """`work`'s fastest time (probe) on each CPU this process may use (those of `cpus` among
    them, when given), pinned to it in turn, `rounds` times round all of them (a slow core
    stays slow; a slow moment passes): which cores run the host slower, and whether they
    stay so. The process's CPUs are restored."""
    allowed = sorted(os.sched_getaffinity(0))
    speeds: dict[int, list[float]] = {cpu: [] for cpu in allowed
                                      if cpus is None or cpu in cpus}
    try:
        for _ in range(rounds):
            for cpu in speeds:
                os.sched_setaffinity(0, {cpu})
                speeds[cpu].append(probe(work))
    finally:
        os.sched_setaffinity(0, allowed)
    return speeds


def last_cpus(prefixes: tuple[str, ...] = ("pt_autograd",)) -> dict[str, int]:
    """The CPU that this process's main thread and its threads named with one of `prefixes`
    last ran on, by "name/tid": the scheduler keeps a busy thread on one CPU for long
    stretches, so right after the work it is where the work ran."""
    placed = {}
    for tid, name in named_threads(prefixes).items():
        fields = _stat_fields(tid)
        if fields:
            placed[f"{name}/{tid}"] = int(fields[36])
    return placed


def named_threads(prefixes: tuple[str, ...]) -> dict[int, str]:
    """This process's main thread and its threads whose names start with one of
    `prefixes`: their names by thread id."""
    main = threading.main_thread().native_id
    found = {}
    for task in pathlib.Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended
        if int(task.name) == main or name.startswith(prefixes):
            found[int(task.name)] = name
    return found


def siblings(cpu: int) -> str:
    """The CPUs that share `cpu`'s core (hyperthreads), as the kernel lists them."""
    path = pathlib.Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
    try:
        return path.read_text().strip()
    except OSError:
        return "?"


def main() -> int:
    """Prints each CPU's speed at a Python loop, pinned to it, with its core's siblings."""
    speeds = core_speeds(python_loop, rounds=3)
    for cpu, times in speeds.items():
        print(f"cpu {cpu:3d} (siblings {siblings(cpu)}): " +
              " ".join(f"{t * 1e3:6.2f}" for t in times) + " ms")
    return 0


class GcTime:
    """Python's garbage collections while it is on, by generation: how many and the seconds
    they took. A run that makes many short-lived objects collects more often, and a full
    collection walks every object of a process that holds a model and its traced graphs."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0]
        self.seconds = [0.0, 0.0, 0.0]
        self._started: Optional[float] = None

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        elif self._started is not None:
            generation = info.get("generation", 0)
            self.counts[generation] += 1
            self.seconds[generation] += time.perf_counter() - self._started
            self._started = None

    def __enter__(self) -> "GcTime":
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        """Stops counting; a GcTime never started (a run shorter than its steady steps) has
        counted nothing and stays so."""
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def per_step(self, steps: int) -> list[list[float]]:
        """[collections, ms] a step for each generation."""
        steps = max(1, steps)
        return [[n / steps, t * 1e3 / steps] for n, t in zip(self.counts, self.seconds)]


class ThreadStates:
    """What a process's threads do over a stretch of work, sampled every `period_s`: the
    main thread and the threads whose names start with one of `prefixes` (autograd's engine
    threads are pt_autograd_N), each sample their scheduler state (R running or runnable, S
    asleep, ...) and the innermost Python function of the thread's stack, "-" when it runs
    none (C++ alone: an op, a wait that spins). Busy threads beside the main one show here as
    R samples while the main thread runs too; a thread that spins on the CPU shows as R
    samples with no Python and no op to account for them. Over the whole stretch, each
    tracked thread's user and system CPU time, minor page faults, context switches it made
    (voluntary: it waited) and suffered (involuntary: another thread took its CPU), and the
    CPUs its running samples were on: a thread that shares its CPU, or moves between slow
    and fast ones, shows it there. Needs Python's threads to give way to the sampler: lower
    sys.setswitchinterval while sampling."""

    def __init__(self, period_s: float = 0.001,
                 prefixes: tuple[str, ...] = ("pt_autograd",)) -> None:
        self.period_s = period_s
        self.prefixes = prefixes
        self.main_tid = threading.main_thread().native_id
        self.main_ident = threading.main_thread().ident
        # (tid, name) -> Counter of (state, python); and the main thread's state beside each.
        self.samples: dict[tuple[int, str], collections.Counter] = {}
        self.beside: dict[tuple[int, str], collections.Counter] = {}
        self.cpus: dict[tuple[int, str], collections.Counter] = {}
        # (tid, name) -> counters at the start and at the end (_counters).
        self.counters: dict[tuple[int, str], tuple[list[int], list[int]]] = {}
        self.seconds = 0.0  # the sampled stretch's wall time
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="thread-states", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None

    def _run(self) -> None:
        me = threading.get_ident()
        tracked = named_threads(self.prefixes)
        started = {tid: _counters(tid) for tid in tracked}
        begin = time.perf_counter()
        while not self._stop.wait(self.period_s):
            frames = sys._current_frames()
            # Python threads that threading did not start (a _DummyThread, or none): the
            # engine threads, which run a backward's Python. One device has one of them.
            others = [f for ident, f in frames.items()
                      if ident not in (me, self.main_ident) and _not_started(ident)]
            stats = {tid: _stat_fields(tid) for tid in tracked}
            states = {tid: fields[0] if fields else "?" for tid, fields in stats.items()}
            main_state = states.get(self.main_tid, "?")
            for tid, name in tracked.items():
                if tid == self.main_tid:
                    frame = frames.get(self.main_ident)
                else:
                    frame = others[0] if others else None
                key = (tid, name)
                self.samples.setdefault(key, collections.Counter())[
                    (states[tid], _innermost(frame))] += 1
                if tid != self.main_tid:
                    self.beside.setdefault(key, collections.Counter())[
                        (states[tid], main_state)] += 1
                fields = stats[tid]
                if fields and fields[0] == "R":
                    self.cpus.setdefault(key, collections.Counter())[int(fields[36])] += 1
        self.seconds = time.perf_counter() - begin
        for tid, name in tracked.items():
            self.counters[(tid, name)] = (started[tid], _counters(tid))

    def table(self, rows: int = 12) -> str:
        """Per tracked thread: its share of samples in each state, the Python it ran in its
        running samples (most first), and its state against the main thread's."""
        self.stop()
        taken = max((sum(c.values()) for c in self.samples.values()), default=0)
        lines = [f"thread states over {self.seconds:.3f} s, {taken} samples (every "
                 f"{self.period_s * 1e3:g} ms asked, "
                 f"{self.seconds * 1e3 / max(1, taken):.2f} ms taken; R running or runnable, "
                 "S asleep; '-' no Python on the stack):"]
        for (tid, name), counts in sorted(self.samples.items(), key=lambda kv: kv[0][1]):
            total = sum(counts.values())
            by_state = collections.Counter()
            for (state, _), n in counts.items():
                by_state[state] += n
            lines.append(f"{name}/{tid}: {total} samples, " + ", ".join(
                f"{state} {100 * n / total:.0f}%" for state, n in by_state.most_common()))
            running = [(n, python) for (state, python), n in counts.items() if state == "R"]
            for n, python in sorted(running, reverse=True)[:rows]:
                lines.append(f"    R {100 * n / total:5.1f}%  {python}")
            pairs = self.beside.get((tid, name))
            if pairs:
                lines.append("    against the main thread (this/main): " + ", ".join(
                    f"{a}/{b} {100 * n / total:.0f}%" for (a, b), n in pairs.most_common()))
            first, last = self.counters.get((tid, name), ([], []))
            if first and last:
                d = [b - a for a, b in zip(first, last)]
                lines.append(f"    user {d[0] * _TICK_S * 1e3:.0f} ms, system "
                             f"{d[1] * _TICK_S * 1e3:.0f} ms, {d[2]} minor faults, {d[3]} "
                             f"voluntary and {d[4]} involuntary context switches")
            cpus = self.cpus.get((tid, name))
            if cpus:
                lines.append("    CPUs of its running samples: " + ", ".join(
                    f"{cpu} {n}" for cpu, n in cpus.most_common(8)))
        return "\n".join(lines) + "\n"


def _not_started(ident: int) -> bool:
    """Whether Python's threading did not start thread `ident` (it has no Thread, or a dummy
    one made when code in it asked for its current thread)."""
    thread = threading._active.get(ident)  # type: ignore[attr-defined]
    return thread is None or isinstance(thread, threading._DummyThread)  # type: ignore


def _stat_fields(tid: int) -> list[str]:
    """A thread of this process's stat fields (_fields), [] when it is gone."""
    return _fields(pathlib.Path(f"/proc/self/task/{tid}/stat"))


def _fields(path: pathlib.Path) -> list[str]:
    """A /proc stat file's fields from the state on (the 3rd field): utime and stime at 11
    and 12, minor faults at 7, the CPU it last ran on at 36; [] when the task is gone. The
    name before them, in parentheses, may hold spaces."""
    try:
        text = path.read_text()
    except OSError:
        return []
    return text[text.rindex(")") + 2:].split()


def _counters(tid: int) -> list[int]:
    """A thread's user and system ticks, minor faults, voluntary and involuntary context
    switches so far; [] when it is gone."""
    fields = _stat_fields(tid)
    try:
        status = pathlib.Path(f"/proc/self/task/{tid}/status").read_text()
    except OSError:
        return []
    if not fields:
        return []
    switches = {line.split(":")[0]: int(line.split(":")[1]) for line in status.splitlines()
                if "ctxt_switches" in line}
    return [int(fields[11]), int(fields[12]), int(fields[7]),
            switches.get("voluntary_ctxt_switches", 0),
            switches.get("nonvoluntary_ctxt_switches", 0)]


def _innermost(frame: object, depth: int = 2) -> str:
    """The innermost `depth` Python functions of a stack, innermost first; "-" for none."""
    names = []
    while frame is not None and len(names) < depth:
        code = frame.f_code  # type: ignore[attr-defined]
        names.append(f"{pathlib.Path(code.co_filename).name}:{code.co_name}")
        frame = frame.f_back  # type: ignore[attr-defined]
    return " < ".join(names) or "-"


def _stat_cpu(path: pathlib.Path) -> Optional[float]:
    fields = _fields(path)
    return (int(fields[11]) + int(fields[12])) * _TICK_S if fields else None


if __name__ == "__main__":
    raise SystemExit(main())
