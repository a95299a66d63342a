"""Where the time of a compile goes, as the trainer sees it: the seconds a backend call or
one graph spends in each of Kiln's phases, so that a slow first step says whether kilnd, the
graph's capture, the runtime's loading or PyTorch's own tracing took it.

    with timings.ledger() as times:          # one backend call, or one graph
        with timings.phase("capture"):       # counted in every ledger open on this thread
            ...
    timings.say(log, "frame", name, times)   # "frame 2/0: 4.10 s: kilnd 3.40 s, ..."

Phases are counted by the thread that runs them, in each ledger that thread has open, so a
graph's phases count in its own ledger and in its frame's. A phase inside another of the
same name counts once. Needs no PyTorch.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Iterator

# The phases, in the order a message lists them (others follow in the order first seen).
ORDER = ("kilnd", "frame key", "frame lookup", "frame store", "capture", "load")


class _Thread(threading.local):
    """A thread's open ledgers, and the phases it is inside."""

    def __init__(self) -> None:
        self.ledgers: list[Ledger] = []
        self.running: set[str] = set()


_thread = _Thread()


class Ledger:
    """Seconds by phase since the ledger opened; `elapsed` is its whole time so far."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._opened = time.perf_counter()
        self._closed: float | None = None

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def close(self) -> None:
        if self._closed is None:
            self._closed = time.perf_counter()

    def elapsed(self) -> float:
        end = self._closed if self._closed is not None else time.perf_counter()
        return end - self._opened

    def ordered(self) -> list[tuple[str, float]]:
        known = [(p, self.seconds[p]) for p in ORDER if p in self.seconds]
        return known + [(p, s) for p, s in self.seconds.items() if p not in ORDER]

    def rest(self) -> float:
        """The ledger's time outside every phase (PyTorch's tracing, for a backend call)."""
        return max(0.0, self.elapsed() - sum(self.seconds.values()))

    def words(self, rest: str = "the rest") -> str:
        """"4.10 s: kilnd 3.40 s, capture 0.30 s, load 0.21 s, the rest 0.19 s"."""
        parts = [f"{phase} {seconds:.2f} s" for phase, seconds in self.ordered()]
        parts.append(f"{rest} {self.rest():.2f} s")
        return f"{self.elapsed():.2f} s: " + ", ".join(parts)

    def record(self, scope: str, name: str) -> dict:
        """The ledger as a log record's `kiln_times`: what it measured ("frame" or "graph"),
        its name, its whole time and its phases, in seconds."""
        return {"scope": scope, "name": name, "seconds": self.elapsed(),
                "phases": dict(self.ordered()), "rest": self.rest()}


@contextlib.contextmanager
def ledger() -> Iterator[Ledger]:
    """A ledger that counts this thread's phases until the block ends (then closed)."""
    times = Ledger()
    _thread.ledgers.append(times)
    try:
        yield times
    finally:
        _thread.ledgers.remove(times)
        times.close()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Counts the block's time as `name` in every ledger this thread has open."""
    running = _thread.running
    if name in running:  # the outer block counts it
        yield
        return
    running.add(name)
    counted = list(_thread.ledgers)
    start = time.perf_counter()
    try:
        yield
    finally:
        seconds = time.perf_counter() - start
        running.discard(name)
        for times in counted:
            times.add(name, seconds)


def say(log: logging.Logger, scope: str, name: str, times: Ledger, rest: str = "the rest") -> None:
    """Logs where `times` went at level INFO ("graph frame 2/0.fw: 4.10 s: kilnd 3.40 s, ..."),
    with its record as the log record's `kiln_times` for tools that read records."""
    log.info("%s %s: %s", scope, name, times.words(rest),
             extra={"kiln_times": times.record(scope, name)})
