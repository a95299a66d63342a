"""A script's worker run in a fresh Python process, for the scripts in tests/gpu/.

    result = run_worker([script, "--worker", ...], env, timeout=240)
    result.returncode, result.output, result.timed_out_after, result.seconds

    with event_log(path) as write_event:       # in the worker: one JSON object a line
        write_event(event="step", step=1, loss=2.3)

The process gets a session of its own, and at the timeout its whole process group is killed
(a compile server's children, a stuck NCCL), so an overrun costs the timeout and no more;
its output (stdout and stderr together) comes back either way.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
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
