"""stack_sampler: a sampled thread's time by function, each counting what it called, and the
table of it; runs without PyTorch."""

from __future__ import annotations

import _thread
import pathlib
import sys
import threading
import time
from typing import Callable

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from stack_sampler import StackSampler, function_name  # noqa: E402


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def outer() -> None:
    busy(0.25)  # outer's own share is its call of busy
    inner()


def inner() -> None:
    busy(0.25)


def test_a_function_counts_the_time_of_what_it_called() -> None:
    sampler = StackSampler(period_s=0.001)
    sampler.start()
    outer()
    text = sampler.table()
    seconds = {name.rsplit(":", 1)[1]: s for s, name in sampler.inclusive()
               if name.startswith(__file__)}
    # A thread running Python gives up the interpreter every 5 ms (sys.getswitchinterval), so
    # that is how often the sampler gets to look.
    assert len(sampler.samples) > 40
    assert 0.45 < sampler.seconds < 2.0
    # outer holds every sample of the work, inner about half of them, busy all.
    assert seconds["outer"] >= 0.9 * seconds["busy"]
    assert 0.2 * seconds["outer"] < seconds["inner"] < 0.8 * seconds["outer"]
    lines = text.splitlines()
    assert lines[0].startswith(f"{len(sampler.samples)} samples over")
    assert any(line.endswith(f"{__file__}:inner") for line in lines[1:])
    # Stopped: no more samples after the table.
    count = len(sampler.samples)
    busy(0.02)
    assert len(sampler.samples) == count


def test_a_short_switch_interval_samples_more_and_the_own_table_names_the_leaf() -> None:
    before = sys.getswitchinterval()
    sampler = StackSampler(period_s=0.0005, switch_interval_s=0.0001)
    sampler.start()
    assert sys.getswitchinterval() == pytest.approx(0.0001)
    outer()
    text = sampler.table(own=True)
    assert sys.getswitchinterval() == before  # restored when sampling stops
    assert len(sampler.samples) > 200
    own = {name.rsplit(":", 1)[1]: s for s, name in sampler.exclusive()
           if name.startswith(__file__)}
    # busy runs in nearly every sample; outer and inner only call it.
    assert own["busy"] > 0.8 * sampler.seconds
    assert own.get("outer", 0.0) < 0.1 * sampler.seconds
    assert "seconds in each function itself" in text


def wait_for(work: Callable[[], None]) -> None:
    done = threading.Lock()
    done.acquire()

    def run() -> None:
        work()
        done.release()

    # A bare thread, as autograd's engine threads are to Python: no threading frames.
    _thread.start_new_thread(run, ())
    done.acquire()  # C code: the waiting stack ends here, as at autograd's engine


def in_worker() -> None:
    busy(0.2)


def in_monitor(stop: threading.Event) -> None:
    while not stop.is_set():
        busy(0.001)


def test_a_thread_that_waits_for_another_takes_its_stack() -> None:
    stop = threading.Event()
    monitor = threading.Thread(target=in_monitor, args=(stop,))  # like tqdm's monitor
    monitor.start()
    sampler = StackSampler(period_s=0.0005, switch_interval_s=0.0001,
                           waits_in={f"{__file__}:wait_for"})
    sampler.start()
    wait_for(in_worker)
    sampler.stop()
    stop.set()
    monitor.join()
    seconds = {name.rsplit(":", 1)[1]: s for s, name in sampler.inclusive()
               if name.startswith(__file__)}
    # The worker's functions count inside the wait, as if the waiting thread ran them; a
    # thread that Python's threading started does not.
    assert seconds["in_worker"] > 0.7 * seconds["wait_for"]
    assert "in_monitor" not in seconds
    assert any(stack[-2:] == (f"{__file__}:in_worker", f"{__file__}:busy")
               for stack in sampler.samples)


def test_another_thread_is_not_sampled_and_names_drop_the_package_root() -> None:
    sampler = StackSampler(period_s=0.001, thread_id=-1)  # no such thread
    sampler.start()
    busy(0.02)
    sampler.stop()
    assert sampler.samples == [()] * len(sampler.samples)
    assert function_name("/usr/lib/python3/dist-packages/torch/library.py", "define") == (
        "torch/library.py:define")
    assert function_name("/opt/venv/lib/python3.12/site-packages/torch/_ops.py", "f") == (
        "torch/_ops.py:f")
    assert function_name("/work/x.py", "g") == "/work/x.py:g"
