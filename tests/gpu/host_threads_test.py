"""host_threads.py on this machine's /proc, without PyTorch or a GPU."""

from __future__ import annotations

import os
import threading
import time

import pytest

import host_threads as ht


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_busy_thread_shows_its_cpu_time_beside_a_sleeping_one() -> None:
    stop = threading.Event()

    def busy() -> None:
        while not stop.is_set():
            sum(range(1000))

    thread = threading.Thread(target=busy)
    before = ht.thread_cpu()
    thread.start()
    time.sleep(0.5)  # this thread sleeps: the CPU time is the busy one's
    after = ht.thread_cpu()
    stop.set()
    thread.join()
    mine, its = f"/{threading.get_native_id()}", f"/{thread.native_id}"
    spent = {key: cpu - before.get(key, 0.0) for key, cpu in after.items()}
    busy_cpu = next(cpu for key, cpu in spent.items() if key.endswith(its))
    idle_cpu = next(cpu for key, cpu in spent.items() if key.endswith(mine))
    assert busy_cpu >= 0.1 > idle_cpu


def test_threads_are_ranked_by_cpu_per_step_and_summed_by_name() -> None:
    before = {"python3/10": 1.0, "pt_autograd_0/11": 0.5, "grpc_timer/12": 0.2}
    after = {"python3/10": 4.0, "pt_autograd_0/11": 1.5, "pt_autograd_1/13": 0.5,
             "grpc_timer/12": 0.2, "pt_autograd_0/14": 0.5}
    ranked = ht.busiest(before, after, per=10)
    assert [name for name, _ in ranked] == ["python3", "pt_autograd_0 x2", "pt_autograd_1"]
    assert [cpu for _, cpu in ranked] == pytest.approx([0.3, 0.15, 0.05])


def test_this_threads_cpu_time_grows_while_it_works() -> None:
    me = f"/{threading.get_native_id()}"
    before = next(cpu for key, cpu in ht.thread_cpu().items() if key.endswith(me))
    _spin(0.15)
    after = next(cpu for key, cpu in ht.thread_cpu().items() if key.endswith(me))
    assert after - before >= 0.1
    total = ht.process_cpu(os.getpid())
    assert total is not None and total >= after - before


def test_a_process_that_is_gone_has_no_cpu_time() -> None:
    assert ht.process_cpu(2 ** 22 + 12345) is None


def test_the_probe_keeps_the_fastest_run() -> None:
    delays = iter([0.03, 0.01, 0.02])
    assert 0.01 <= ht.probe(lambda: time.sleep(next(delays)), repeats=3) < 0.02


def test_each_cpu_is_timed_pinned_and_the_process_keeps_its_cpus() -> None:
    allowed = os.sched_getaffinity(0)
    seen: list[set[int]] = []
    speeds = ht.core_speeds(lambda: seen.append(os.sched_getaffinity(0)), rounds=2)
    assert sorted(speeds) == sorted(allowed)
    assert all(len(times) == 2 for times in speeds.values())
    assert {cpu for pinned in seen for cpu in pinned} == allowed
    assert all(len(pinned) == 1 for pinned in seen)
    assert os.sched_getaffinity(0) == allowed
    assert ht.siblings(min(allowed)) != ""


def _engine_like_spinner(stop: threading.Event, started: threading.Event) -> None:
    """A thread that threading did not start, named as autograd's engine names its own, that
    runs Python until told to stop."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(15, b"pt_autograd_9", 0, 0, 0)  # PR_SET_NAME
    started.set()
    while not stop.is_set():
        sum(range(1000))


def test_thread_states_show_an_engine_thread_running_python_while_main_sleeps() -> None:
    import _thread
    import sys

    stop, started = threading.Event(), threading.Event()
    _thread.start_new_thread(_engine_like_spinner, (stop, started))
    started.wait(5)
    states = ht.ThreadStates(period_s=0.001)
    saved = sys.getswitchinterval()
    sys.setswitchinterval(0.0002)
    try:
        states.start()
        time.sleep(0.4)
        table = states.table()
    finally:
        sys.setswitchinterval(saved)
        stop.set()
    engine = next(counts for (_, name), counts in states.samples.items()
                  if name == "pt_autograd_9")
    main = next(counts for (tid, _), counts in states.samples.items()
                if tid == threading.get_native_id())
    total = sum(engine.values())
    running_python = sum(n for (state, python), n in engine.items()
                         if state == "R" and "_engine_like_spinner" in python)
    assert total >= 50 and running_python >= total // 2, table
    assert sum(n for (state, _), n in main.items() if state == "S") >= sum(main.values()) // 2
    assert "pt_autograd_9/" in table and "against the main thread" in table
    assert "involuntary context switches" in table and "CPUs of its running samples" in table
    spinner = next(key for key in states.counters if key[1] == "pt_autograd_9")
    first, last = states.counters[spinner]
    assert last[0] + last[1] > first[0] + first[1]  # it used CPU while sampled


def test_gc_time_counts_collections_by_generation_while_on() -> None:
    import gc

    with ht.GcTime() as collected:
        gc.collect(0)
        gc.collect(2)
    gc.collect(1)  # after: not counted
    assert collected.counts == [1, 0, 1]
    assert all(t >= 0 for t in collected.seconds)
    per_step = collected.per_step(2)
    assert per_step[0][0] == 0.5 and per_step[2][0] == 0.5


def test_a_gc_time_never_started_stops_without_error_and_counts_nothing() -> None:
    import gc

    # A run of fewer steps than its steady ones starts none and still stops it at its end.
    never = ht.GcTime()
    callbacks = list(gc.callbacks)
    never.__exit__()
    gc.collect(0)
    assert never.counts == [0, 0, 0] and gc.callbacks == callbacks


def test_the_main_threads_last_cpu_is_one_it_may_use_and_can_be_timed_alone() -> None:
    placed = ht.last_cpus()
    mine = f"/{threading.get_native_id()}"
    cpu = next(c for key, c in placed.items() if key.endswith(mine))
    assert cpu in os.sched_getaffinity(0)
    allowed = os.sched_getaffinity(0)
    speeds = ht.core_speeds(lambda: None, rounds=1, cpus={cpu})
    assert list(speeds) == [cpu] and len(speeds[cpu]) == 1
    assert os.sched_getaffinity(0) == allowed
