"""Where a process's host time goes by thread, and how fast its host runs a fixed piece of
work: two processes that run the same code at different speeds (a busy thread beside the
main one, another process on its cores) show it here, not in a profile of either. Reads
/proc, so it needs no PyTorch."""

from __future__ import annotations

import os
import pathlib
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


def core_speeds(work: Callable[[], None], rounds: int = 2) -> dict[int, list[float]]:
    """`work`'s fastest time (probe) on each CPU this process may use, pinned to it in turn,
    `rounds` times round all of them (a slow core stays slow; a slow moment passes): which
    cores run the host slower, and whether they stay so. The process's CPUs are restored."""
    allowed = sorted(os.sched_getaffinity(0))
    speeds: dict[int, list[float]] = {cpu: [] for cpu in allowed}
    try:
        for _ in range(rounds):
            for cpu in speeds:
                os.sched_setaffinity(0, {cpu})
                speeds[cpu].append(probe(work))
    finally:
        os.sched_setaffinity(0, allowed)
    return speeds


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


def _stat_cpu(path: pathlib.Path) -> Optional[float]:
    try:
        text = path.read_text()
    except OSError:
        return None
    # The name, in parentheses, may hold spaces; utime and stime are the 14th and 15th
    # fields, the 12th and 13th after it.
    fields = text[text.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) * _TICK_S


if __name__ == "__main__":
    raise SystemExit(main())
