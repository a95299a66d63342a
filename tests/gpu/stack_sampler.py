"""A sampling profiler of one thread's Python stack, for where a first step's seconds go.

    sampler = StackSampler(period_s=0.002)
    sampler.start()
    ...                       # the work, in the thread that made the sampler
    print(sampler.table())    # stops sampling

A thread wakes every `period_s` and records the sampled thread's stack. A function's time is
the share of samples whose stack holds it (time in it and in what it called), times the
sampled wall time. Unlike cProfile, which adds a fixed cost to every call, it does not inflate
code of many small calls: cProfile put 4.6 s of a warm start in torch.library's operator
registration, which took 0.4 s. What runs in C++ counts to the Python function that called it.
"""

from __future__ import annotations

import collections
import sys
import threading
import time
from typing import Any, Iterable, Optional


class StackSampler:
    def __init__(self, period_s: float = 0.002, thread_id: Optional[int] = None,
                 switch_interval_s: Optional[float] = None,
                 waits_in: Iterable[str] = ()) -> None:
        self.period_s = period_s
        # A thread running Python gives up the interpreter only every sys.getswitchinterval()
        # (5 ms) unless it calls C code that releases it, so samples would fall on such calls
        # more than their share; a short interval while sampling evens that out.
        self.switch_interval_s = switch_interval_s
        self._saved_interval: Optional[float] = None
        # Functions in which the sampled thread waits for other threads' Python: a sample
        # that ends in one also takes those threads' stacks.
        self.waits_in = set(waits_in)
        self.thread_id = thread_id if thread_id is not None else threading.get_ident()
        self.samples: list[tuple[str, ...]] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._started = 0.0
        self.seconds = 0.0

    def start(self) -> None:
        if self.switch_interval_s is not None:
            self._saved_interval = sys.getswitchinterval()
            sys.setswitchinterval(self.switch_interval_s)
        self._started = time.perf_counter()
        self._thread = threading.Thread(target=self._run, name="stack-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None
        self.seconds = time.perf_counter() - self._started
        if self._saved_interval is not None:
            sys.setswitchinterval(self._saved_interval)
            self._saved_interval = None

    def _run(self) -> None:
        me = threading.get_ident()
        while not self._stop.wait(self.period_s):
            frames = sys._current_frames()
            stack = _names(frames.get(self.thread_id))
            if stack and stack[-1] in self.waits_in:
                # The sampled thread waits for others (autograd's engine runs a backward's
                # Python in its own threads): their stacks go on top of its wait. Threads
                # that Python's threading started (monitors, readers of pipes) are not those.
                for ident, frame in frames.items():
                    if ident not in (me, self.thread_id):
                        other = _names(frame)
                        if other and not other[0].endswith("threading.py:_bootstrap"):
                            stack += other
            self.samples.append(tuple(stack))

    def inclusive(self) -> list[tuple[float, str]]:
        """(seconds, function) for every sampled function, most seconds first: the seconds
        of the samples whose stack holds it."""
        counts: collections.Counter = collections.Counter()
        for stack in self.samples:
            counts.update(set(stack))
        return self._seconds(counts)

    def exclusive(self) -> list[tuple[float, str]]:
        """(seconds, function) for every sampled function, most seconds first: the seconds
        of the samples it was running in (C code it called included)."""
        return self._seconds(collections.Counter(stack[-1] for stack in self.samples if stack))

    def _seconds(self, counts: collections.Counter) -> list[tuple[float, str]]:
        per_sample = self.seconds / len(self.samples) if self.samples else 0.0
        return sorted(((n * per_sample, name) for name, n in counts.items()),
                      key=lambda row: (-row[0], row[1]))

    def table(self, rows: int = 80, own: bool = False) -> str:
        """The inclusive table; with `own`, then the exclusive one (rows // 2 lines)."""
        self.stop()
        lines = [f"{len(self.samples)} samples over {self.seconds:.2f} s "
                 f"(every {self.period_s * 1e3:g} ms); seconds in each function and what "
                 "it called:"]
        lines += [f"{seconds:8.3f}  {name}" for seconds, name in self.inclusive()[:rows]]
        if own:
            lines += ["", "seconds in each function itself (C code it called included):"]
            lines += [f"{seconds:8.3f}  {name}" for seconds, name in
                      self.exclusive()[:rows // 2]]
        return "\n".join(lines) + "\n"


def _names(frame: Any) -> list[str]:
    """A frame's stack, outermost first."""
    stack = []
    while frame is not None:
        stack.append(function_name(frame.f_code.co_filename, frame.f_code.co_name))
        frame = frame.f_back
    stack.reverse()
    return stack


def function_name(filename: str, function: str) -> str:
    """file:function, the file from its package on (site-packages/ and the like dropped)."""
    for marker in ("site-packages/", "dist-packages/"):
        if marker in filename:
            filename = filename.split(marker, 1)[1]
            break
    return f"{filename}:{function}"
