"""kiln.frame_store against a real kilnd on loopback: a frame comes back as stored, under its
target's toolchain only, in chunks when long; a kilnd that cannot be reached or refuses is a
miss said once, and nothing raises."""

from __future__ import annotations

import base64
import logging
import os
import socket

import grpc
import pytest

from kiln import timings
from kiln.frame_store import CHUNK_BYTES, FrameStore
from kiln.settings import Settings
from kiln.v1 import cache_pb2, cache_pb2_grpc


def store(address: str, target: str = "x86_64") -> FrameStore:
    return FrameStore(Settings.from_options({"server": address, "deadline": 30}, {}), target)


def test_a_frame_comes_back_as_stored_and_under_its_target_only(kilnd) -> None:
    frames = store(kilnd.address)
    with timings.ledger() as times:
        assert frames.get("a-frame") is None
        frames.put("a-frame", {"data": base64.b64encode(b"pickled frame").decode("ascii"),
                               "time_taken_ms": 1234})
    # A backend call's log says how long its frame's lookup and storing took.
    assert set(times.seconds) == {"frame lookup", "frame store"}
    assert frames.get("a-frame") == {"data": base64.b64encode(b"pickled frame").decode("ascii")}
    assert frames.get_bytes("a-frame") == b"pickled frame"
    assert frames.get_bytes("another-frame") is None
    # The same key for another target, or unscoped, is another entry.
    assert store(kilnd.address, "cuda:sm_90").get_bytes("a-frame") is None
    stub = cache_pb2_grpc.CacheStub(grpc.insecure_channel(kilnd.address))
    with pytest.raises(grpc.RpcError) as e:
        stub.GetAction(cache_pb2.GetActionRequest(compile_key="a-frame"))
    assert e.value.code() == grpc.StatusCode.NOT_FOUND
    # A frame stored again (a process that traced it anew) replaces what is read.
    frames.put_bytes("a-frame", b"newer frame")
    assert frames.get_bytes("a-frame") == b"newer frame"


def test_a_long_frame_travels_in_chunks(kilnd) -> None:
    data = os.urandom(3 * CHUNK_BYTES + 12345)
    frames = store(kilnd.address)
    frames.put_bytes("a-long-frame", data)
    assert frames.get_bytes("a-long-frame") == data


def test_an_unreachable_kilnd_is_a_miss_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once the socket is closed
    frames = store(f"127.0.0.1:{port}")
    with caplog.at_level(logging.INFO, logger="kiln"):
        assert frames.get_bytes("a-frame") is None
        frames.put_bytes("a-frame", b"lost, and nothing raised")
        assert frames.get_bytes("a-frame") is None
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in caplog.records]
    assert "cannot be reached" in warnings[0].getMessage()
    assert "traced and compiled" in warnings[0].getMessage()


def test_a_target_kilnd_has_no_backend_for_is_refused_and_said(
        kilnd, caplog: pytest.LogCaptureFixture) -> None:
    frames = store(kilnd.address, "cuda:sm_1")
    with caplog.at_level(logging.INFO, logger="kiln"):
        frames.put_bytes("a-frame", b"refused")
        assert frames.get_bytes("a-frame") is None
    messages = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(messages) == 2, messages  # the put and the get, each said once
    assert all("toolchain_target" in m and "'cuda:sm_1'" in m for m in messages), messages


def test_a_fleet_routes_a_frame_to_one_instance_and_skips_one_that_is_down(kilnd) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        down = f"127.0.0.1:{s.getsockname()[1]}"
    frames = store(f"{kilnd.address},{down}")
    frames.put_bytes("a-fleet-frame", b"routed")
    assert frames.get_bytes("a-fleet-frame") == b"routed"
    assert store(kilnd.address).get_bytes("a-fleet-frame") == b"routed"
