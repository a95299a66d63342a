"""kiln.timings: a ledger counts each phase its thread runs, once, in every open ledger."""

from __future__ import annotations

import logging
import threading
import time

import pytest

from kiln import timings


def test_a_phase_counts_in_every_ledger_open_on_its_thread() -> None:
    with timings.ledger() as frame:
        with timings.phase("capture"):
            time.sleep(0.01)
        with timings.ledger() as graph:
            with timings.phase("kilnd"):
                time.sleep(0.02)
        with timings.phase("kilnd"):
            pass
    assert set(graph.seconds) == {"kilnd"} and graph.seconds["kilnd"] >= 0.02
    assert frame.seconds["kilnd"] >= graph.seconds["kilnd"]
    assert frame.seconds["capture"] >= 0.01
    # The ledger's time is its phases and the rest, which is never negative.
    assert frame.elapsed() >= sum(frame.seconds.values())
    assert frame.rest() == pytest.approx(frame.elapsed() - sum(frame.seconds.values()))
    # Closed ledgers stop counting and keep their time.
    elapsed = frame.elapsed()
    with timings.phase("kilnd"):
        time.sleep(0.005)
    assert frame.elapsed() == elapsed and frame.seconds["kilnd"] < elapsed


def test_a_phase_inside_one_of_its_name_counts_once() -> None:
    with timings.ledger() as times:
        with timings.phase("frame lookup"):
            with timings.phase("frame lookup"):
                time.sleep(0.01)
    assert times.seconds["frame lookup"] <= times.elapsed()


def test_phases_outside_any_ledger_and_on_other_threads_count_nowhere() -> None:
    with timings.phase("load"):
        pass  # no ledger: nothing to count in, nothing raised
    with timings.ledger() as times:
        worker = threading.Thread(target=lambda: timings.phase("load").__enter__())
        worker.start()
        worker.join()
    assert times.seconds == {}


def test_a_phase_that_raises_is_counted_and_the_error_passes() -> None:
    with timings.ledger() as times:
        with pytest.raises(KeyError):
            with timings.phase("load"):
                raise KeyError("x")
    assert "load" in times.seconds


def test_words_list_the_known_phases_in_order_then_the_rest() -> None:
    times = timings.Ledger()
    times.add("load", 0.25)
    times.add("custom", 0.5)
    times.add("kilnd", 3.0)
    times.add("capture", 0.125)
    times.close()
    words = times.words("AOTAutograd and the rest")
    head, phases = words.split(": ", 1)
    assert head.endswith(" s")
    assert phases.split(", ")[:4] == ["kilnd 3.00 s", "capture 0.12 s", "load 0.25 s",
                                      "custom 0.50 s"]
    assert phases.split(", ")[4].startswith("AOTAutograd and the rest ")
    record = times.record("frame", "frame 2/0")
    assert (record["scope"], record["name"]) == ("frame", "frame 2/0")
    assert list(record["phases"]) == ["kilnd", "capture", "load", "custom"]
    assert record["seconds"] == times.elapsed() and record["rest"] == times.rest()


def test_say_logs_the_words_with_the_record_beside_them(caplog) -> None:
    times = timings.Ledger()
    times.add("kilnd", 1.5)
    times.close()
    with caplog.at_level(logging.INFO, logger="kiln"):
        timings.say(logging.getLogger("kiln"), "graph", "frame 0/0.fw", times)
    (record,) = caplog.records
    assert record.getMessage().startswith("graph frame 0/0.fw: ")
    assert "kilnd 1.50 s" in record.getMessage()
    assert record.kiln_times["phases"] == {"kilnd": 1.5}
