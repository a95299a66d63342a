"""worker_process.py's event log and its record of Kiln's log lines, without PyTorch."""

from __future__ import annotations

import json
import logging
import pathlib

import worker_process as wp


def test_kilns_log_lines_become_events_with_their_level_and_times(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "events.jsonl"
    logger = logging.getLogger("kiln")
    handlers, level = list(logger.handlers), logger.level
    try:
        with wp.event_log(path) as write_event:
            wp.record_kiln_log(write_event)
            logger.info("graph %s: %s", "frame 0/1.fw", "captured in a CUDA graph at call 4")
            logger.warning("frame 0/1 runs per fallback")
            logger.debug("not recorded: below INFO")
            logger.info("frame 0/1: 1.2 s", extra={"kiln_times": {"scope": "frame"}})
    finally:
        logger.handlers[:], logger.level = handlers, level
    events = [json.loads(line) for line in path.read_text().splitlines()]
    assert events == [
        {"event": "log", "level": "INFO",
         "message": "graph frame 0/1.fw: captured in a CUDA graph at call 4"},
        {"event": "log", "level": "WARNING", "message": "frame 0/1 runs per fallback"},
        {"event": "log", "level": "INFO", "message": "frame 0/1: 1.2 s",
         "times": {"scope": "frame"}},
    ]


def test_a_body_that_raises_leaves_an_error_event_and_returns_1(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "events.jsonl"

    def body(write_event) -> None:  # type: ignore[no-untyped-def]
        write_event(event="step", step=1)
        raise ValueError("no CUDA device")

    assert wp.logged(path, body) == 1
    step, error = [json.loads(line) for line in path.read_text().splitlines()]
    assert step == {"event": "step", "step": 1}
    assert error["event"] == "error" and error["error"] == "ValueError: no CUDA device"
    assert "raise ValueError" in error["trace"]
