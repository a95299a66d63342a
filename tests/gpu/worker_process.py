"""A script's worker run in a fresh Python process, for the scripts in tests/gpu/.

    result = run_worker([script, "--worker", ...], env, timeout=240)
    result.returncode, result.output, result.timed_out_after, result.seconds

The process gets a session of its own, and at the timeout its whole process group is killed
(a compile server's children, a stuck NCCL), so an overrun costs the timeout and no more;
its output (stdout and stderr together) comes back either way.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Optional, Sequence


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
