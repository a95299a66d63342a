"""A script's worker run in a fresh Python process, for the scripts in tests/gpu/.

    result = run_worker([script, "--worker", ...], env, timeout=240)
    result.returncode, result.output, result.timed_out_after, result.seconds

    with event_log(path) as write_event:       # in the worker: one JSON object a line
        write_event(event="step", step=1, loss=2.3)
    record_kiln_log(write_event)                # Kiln's log lines become "log" events
    return logged(path, lambda write_event: train(..., write_event))  # errors become events

The process gets a session of its own, and at the timeout its whole process group is killed
(a compile server's children, a stuck NCCL), so an overrun costs the timeout and no more;
its output (stdout and stderr together) comes back either way.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence


@dataclass
class WorkerResult:
    returncode: Optional[int]
    output: str
    timed_out_after: Optional[float]
    seconds: float


def run_worker(argv: Sequence[str], env: dict, timeout: float) -> WorkerResult:
    """Runs `sys.executable argv...` with `env` (PYTHONUNBUFFERED set) and waits for it, at
    most `timeout` seconds."""
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, *argv], env=dict(env, PYTHONUNBUFFERED="1"), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, errors="replace", start_new_session=True)
    timed_out_after = None
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:  # it ended in the meantime
            pass
        output, _ = process.communicate()
        timed_out_after = timeout
    return WorkerResult(process.returncode, output or "", timed_out_after,
                        time.perf_counter() - start)


@contextlib.contextmanager
def event_log(path: Any) -> Iterator[Callable[..., None]]:
    """A worker's event writer: each call appends one JSON object a line to `path`, written
    through at once, so a worker that is killed leaves every event before the kill."""
    with open(path, "a", buffering=1) as events:

        def write_event(**event: Any) -> None:
            events.write(json.dumps(event) + "\n")

        yield write_event


def record_kiln_log(write_event: Callable[..., None]) -> None:
    """Writes each line the "kiln" logger gives at INFO or above as a "log" event (its level
    and message): what Kiln decided in the worker (where each graph runs, a CUDA graph
    captured, a fallback) comes back with the worker's figures. A line that says where a
    backend call's or a graph's time went (kiln.timings) carries its figures as `times`."""

    class KilnLog(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            times = getattr(record, "kiln_times", None)
            extra = {"times": times} if times is not None else {}
            write_event(event="log", level=record.levelname, message=record.getMessage(),
                        **extra)

    logger = logging.getLogger("kiln")
    logger.addHandler(KilnLog(logging.INFO))
    logger.setLevel(logging.INFO)


def logged(path: Any, body: Callable[[Callable[..., None]], None], tail: int = 3000) -> int:
    """Runs `body` with an event writer for `path` (event_log): 0 when it returns, 1 when it
    raises, the exception then written as an "error" event (its message and the last `tail`
    characters of its traceback) so that the runner reports why and goes on."""
    with event_log(path) as write_event:
        try:
            body(write_event)
            return 0
        except Exception as e:  # the report says why; the runner goes on
            write_event(event="error", error=f"{type(e).__name__}: {e}"[:2000],
                        trace=traceback.format_exc()[-tail:])
            return 1
