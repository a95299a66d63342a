"""kiln.fleet: the routing function against the fixed vectors that proto/base/fleet_test.cc
checks kiln::FleetOrder against (tests/data/fleet_vectors.json), so that the Python client,
the C++ client and kilnd agree on which instance owns a job."""

from __future__ import annotations

import json
import pathlib

import pytest

from kiln.fleet import (fleet_order, fleet_weight, next_after_redirect, parse_fleet,
                        route_key)

VECTORS = pathlib.Path(__file__).resolve().parents[2] / "data" / "fleet_vectors.json"


def test_matches_the_shared_vectors():
    cases = json.loads(VECTORS.read_text(encoding="utf-8"))["cases"]
    assert len(cases) >= 20
    for case in cases:
        assert fleet_order(case["key"], case["fleet"]) == case["order"], case["key"]
        for address, weight in case["weights"].items():
            assert format(fleet_weight(case["key"], address), "016x") == weight


def test_order_does_not_depend_on_the_lists_order():
    fleet = ["a:1", "b:2", "c:3", "d:4"]
    assert fleet_order("job-9", fleet) == fleet_order("job-9", list(reversed(fleet)))


def test_removing_an_instance_moves_only_its_keys():
    four, three = ["a:1", "b:2", "c:3", "d:4"], ["a:1", "b:2", "c:3"]
    for i in range(200):
        before = fleet_order(f"job-{i}", four)
        after = fleet_order(f"job-{i}", three)[0]
        assert after == (before[1] if before[0] == "d:4" else before[0])


def test_route_key_is_the_job_for_a_job_of_several_ranks_else_the_graph():
    assert route_key("train-42", 4, b"graph") == "train-42"
    graph_key = route_key("train-42", 1, b"graph")
    assert graph_key == route_key("", 1, b"graph") != route_key("", 1, b"other graph")
    assert len(graph_key) == 64


def test_parse_fleet():
    assert parse_fleet(" a:1, b:2 ,a:1") == ["a:1", "b:2"]
    with pytest.raises(ValueError, match="empty entry"):
        parse_fleet("a:1,,b:2")


def test_after_a_redirect_the_owner_then_the_redirecting_instance():
    assert next_after_redirect(["b:2", "a:1", "c:3"], "a:1", "b:2", []) == ["a:1", "b:2", "c:3"]
    # An owner already found unreachable is not tried again.
    assert next_after_redirect(["b:2"], "a:1", "b:2", ["a:1"]) == ["b:2"]
