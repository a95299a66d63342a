"""kiln.client against a fleet of three real kilnd on loopback sharing one --fleet: the ranks
of a job sent by clients that name different instances (or the whole fleet, in another
order) meet on the instance that owns the job and get one artifact; a client that names one
instance is redirected; an unreachable instance is skipped."""

from __future__ import annotations

import socket
import threading
import urllib.request

import pytest
from conftest import Kilnd, read_capture

from kiln.client import CompileClient, JobIdentity, build_request
from kiln.fleet import fleet_order
from kiln.graph_proto import capture_to_graph
from kiln.settings import Settings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def metric(kilnd: Kilnd, series: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{kilnd.http_port}/metrics", timeout=10) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(series + " "):
                return float(line.split()[-1])
    return 0.0


@pytest.fixture()
def fleet(tmp_path):
    addresses = [f"127.0.0.1:{free_port()}" for _ in range(3)]
    joined = ",".join(addresses)
    kilnds = []
    try:
        for i, address in enumerate(addresses):
            kilnds.append(Kilnd(tmp_path / str(i), "--fleet", joined, "--advertise", address,
                                "--compile-workers", "1", "--rendezvous-timeout", "30",
                                listen=address, metrics_listen="127.0.0.1:0"))
        yield addresses, kilnds
    finally:
        for k in kilnds:
            k.stop()


def run_job(servers: list[str], job: str, graph) -> list:
    results: list = [None] * len(servers)

    def rank(r: int) -> None:
        settings = Settings.from_options({"server": servers[r], "job_id": job, "deadline": 120},
                                         {})
        with CompileClient(settings) as client:
            try:
                results[r] = client.compile(build_request(
                    graph, settings, "x86_64", JobIdentity(job, r, len(servers)), 0))
            except Exception as e:  # noqa: BLE001 (handed to the test's thread)
                results[r] = e

    threads = [threading.Thread(target=rank, args=(r,)) for r in range(len(servers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def test_ranks_named_at_different_instances_meet_on_the_owner(fleet) -> None:
    addresses, kilnds = fleet
    job = "py-train-1"
    owner = addresses.index(fleet_order(job, addresses)[0])
    graph = capture_to_graph(read_capture("mlp_fp32.fw.json"))
    # Ranks 0-2 each name one instance (two are redirected); rank 3 names the whole fleet in
    # another order.
    servers = [*addresses, ",".join(reversed(addresses))]
    results = run_job(servers, job, graph)
    for r, result in enumerate(results):
        assert not isinstance(result, Exception), f"rank {r}: {result}"
    assert len({result.artifact_hash for result in results}) == 1
    assert len({result.compiled_graph for result in results}) == 1
    assert metric(kilnds[owner], "kiln_rendezvous_waits_total") == 4
    assert metric(kilnds[owner], 'kiln_compiles_total{result="ok"}') == 1
    for i in range(3):
        expected = 0 if i == owner else 1
        assert metric(kilnds[i], "kiln_fleet_redirects_total") == expected, i


def test_unreachable_instances_are_skipped(fleet) -> None:
    addresses, kilnds = fleet
    dead = f"127.0.0.1:{free_port()}"
    graph = capture_to_graph(read_capture("mlp_fp32.fw.json"))
    settings = Settings.from_options({"server": f"{dead},{addresses[1]}", "deadline": 120}, {})
    with CompileClient(settings) as client:
        result = client.compile(build_request(graph, settings, "x86_64", JobIdentity(), 0))
    assert result.outcome == "miss"
    assert metric(kilnds[1], 'kiln_compiles_total{result="ok"}') == 1
