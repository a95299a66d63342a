"""kiln.client without kilnd: requests built from a corpus graph (options, job identity,
sequence numbers, traceparent), response verification, and gRPC errors mapped to
kiln.errors, through an in-process gRPC server that misbehaves on purpose."""

from __future__ import annotations

import hashlib
import re
import threading
import time
from concurrent import futures
from typing import Iterator, Optional

import grpc
import pytest
from conftest import read_capture

from kiln.client import (STATUS_DETAILS_KEY, CompileClient, JobIdentity, RequestBuilder,
                         SequenceNumbers, build_request, error_from_rpc, new_traceparent,
                         verify_response)
from kiln.errors import (ArtifactMismatch, CompileRejected, CompileTimeout, RankDivergence,
                         ServerUnreachable, SettingsError)
from kiln.graph_proto import capture_to_graph
from kiln.settings import Settings
from kiln.v1 import compile_pb2, compile_pb2_grpc, errors_pb2

TRACEPARENT = re.compile(r"^00-[0-9a-f]{32}-[0-9a-f]{16}-01$")


@pytest.fixture(scope="module")
def mlp_graph():
    return capture_to_graph(read_capture("mlp_fp32.fw.json"))


def settings(**options) -> Settings:
    return Settings.from_options(options, {})


def test_request_from_a_corpus_graph(mlp_graph) -> None:
    s = settings(job_id="job-1", precision="allow_tf32", require_cudagraph=True,
                 backend_options={"zeta": 1, "alpha": "on"})
    request = build_request(mlp_graph, s, "cuda:sm_90", JobIdentity("job-1", 2, 4), 7)
    assert request.graph == mlp_graph
    assert request.options.target == "cuda:sm_90"
    assert request.options.precision == compile_pb2.PRECISION_POLICY_ALLOW_TF32
    assert request.options.require_cudagraph
    assert dict(request.options.backend_options) == {"alpha": "on", "zeta": "1"}
    assert (request.job.job_id, request.job.rank, request.job.world_size,
            request.job.sequence) == ("job-1", 2, 4, 7)
    assert not request.force_compile
    again = compile_pb2.CompileRequest.FromString(request.SerializeToString())
    assert again == request


def test_default_options_map_to_strict_without_cudagraph_requirement(mlp_graph) -> None:
    request = build_request(mlp_graph, settings(), "x86_64", JobIdentity(), 0)
    assert request.options.precision == compile_pb2.PRECISION_POLICY_STRICT
    assert not request.options.require_cudagraph and not request.options.backend_options
    assert (request.job.job_id, request.job.rank, request.job.world_size) == ("", 0, 1)


def test_sequence_numbers_count_per_rank(mlp_graph) -> None:
    s = settings(job_id="job-2")
    builder = RequestBuilder(s)
    seen = [(r.job.rank, r.job.sequence) for r in (
        builder.build(mlp_graph, "x86_64", rank=0, world_size=2),
        builder.build(mlp_graph, "x86_64", rank=1, world_size=2),
        builder.build(mlp_graph, "x86_64", rank=0, world_size=2),
        builder.build(mlp_graph, "x86_64", rank=0, world_size=2),
        builder.build(mlp_graph, "x86_64", rank=1, world_size=2))]
    assert seen == [(0, 0), (1, 0), (0, 1), (0, 2), (1, 1)]
    # Another job's numbers start at 0; a builder sharing the numbers goes on counting.
    other = RequestBuilder(settings(job_id="job-3"), builder.sequences)
    assert other.build(mlp_graph, "x86_64", 0, 2).job.sequence == 0
    same = RequestBuilder(s, builder.sequences)
    assert same.build(mlp_graph, "x86_64", 1, 2).job.sequence == 2


def test_sequence_numbers_are_unique_across_threads() -> None:
    numbers = SequenceNumbers()
    job = JobIdentity("j", 0, 2)
    taken: list[int] = []
    lock = threading.Lock()

    def take() -> None:
        for _ in range(200):
            n = numbers.take(job)
            with lock:
                taken.append(n)

    threads = [threading.Thread(target=take) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(taken) == list(range(800))


def test_a_job_of_several_ranks_needs_a_job_id(mlp_graph) -> None:
    builder = RequestBuilder(settings())
    with pytest.raises(SettingsError) as e:
        builder.build(mlp_graph, "x86_64", rank=1, world_size=8)
    assert e.value.option == "job_id" and "KILN_JOB_ID" in str(e.value)
    # The refused request took no sequence number.
    assert builder.sequences.take(JobIdentity("", 1, 8)) == 0
    with pytest.raises(ValueError, match="outside"):
        build_request(mlp_graph, settings(job_id="j"), "x86_64", JobIdentity("j", 8, 8), 0)


def test_traceparent_format() -> None:
    values = {new_traceparent() for _ in range(50)}
    assert len(values) == 50
    assert all(TRACEPARENT.match(v) for v in values)
    joined = new_traceparent("0af7651916cd43dd8448eb211c80319c")
    assert joined.startswith("00-0af7651916cd43dd8448eb211c80319c-") and TRACEPARENT.match(joined)
    for bad in ("0" * 32, "ABC", "0AF7651916CD43DD8448EB211C80319C"):
        with pytest.raises(ValueError):
            new_traceparent(bad)


def answer(data: bytes = b"compiled bytes") -> compile_pb2.CompileResponse:
    response = compile_pb2.CompileResponse(outcome=compile_pb2.CACHE_OUTCOME_MISS,
                                           compile_key="k" * 64, compiled_graph=data)
    response.artifact_digest.hash = hashlib.sha256(data).hexdigest()
    response.artifact_digest.size_bytes = len(data)
    return response


def test_verification_accepts_matching_bytes_and_refuses_tampered_ones() -> None:
    verify_response(answer())
    tampered = answer()
    tampered.compiled_graph = b"compiled bytez"
    with pytest.raises(ArtifactMismatch, match="hash to"):
        verify_response(tampered)
    wrong_size = answer()
    wrong_size.artifact_digest.size_bytes = 3
    with pytest.raises(ArtifactMismatch, match="digest says 3"):
        verify_response(wrong_size)
    no_digest = answer()
    no_digest.ClearField("artifact_digest")
    with pytest.raises(ArtifactMismatch, match="none"):
        verify_response(no_digest)


class RecordedError(grpc.RpcError):
    """A failed call as grpc reports one."""

    def __init__(self, code: grpc.StatusCode, details: str,
                 detail: Optional[errors_pb2.ErrorDetail] = None, raw: Optional[bytes] = None):
        self._code, self._details = code, details
        self._trailing = []
        if detail is not None or raw is not None:
            self._trailing.append((STATUS_DETAILS_KEY,
                                   raw if raw is not None else detail.SerializeToString()))

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return tuple(self._trailing)


def test_grpc_errors_map_to_kiln_errors() -> None:
    e = error_from_rpc(RecordedError(grpc.StatusCode.UNAVAILABLE, "failed to connect"), "h:1")
    assert isinstance(e, ServerUnreachable) and "kilnd at h:1" in str(e)

    missing = errors_pb2.ErrorDetail(missing_ranks=[2, 5])
    e = error_from_rpc(RecordedError(grpc.StatusCode.DEADLINE_EXCEEDED, "rendezvous", missing))
    assert isinstance(e, CompileTimeout) and e.missing_ranks == [2, 5]
    assert "ranks [2,5] did not arrive" in str(e)

    bad = errors_pb2.ErrorDetail()
    bad.violations.add(node="addmm", field="args[1]", description="unknown dtype")
    e = error_from_rpc(RecordedError(grpc.StatusCode.INVALID_ARGUMENT, "malformed", bad))
    assert isinstance(e, CompileRejected) and e.code == "INVALID_ARGUMENT"
    assert "addmm: args[1]: unknown dtype" in str(e) and e.detail == bad

    # kilnd's own message for one violation states it: the error says it once.
    target = errors_pb2.ErrorDetail()
    target.violations.add(field="options.target", description='unknown target "cuda:sm_80"')
    e = error_from_rpc(RecordedError(grpc.StatusCode.INVALID_ARGUMENT,
                                     'options.target: unknown target "cuda:sm_80"', target))
    assert str(e) == 'INVALID_ARGUMENT: options.target: unknown target "cuda:sm_80"'
    node = errors_pb2.ErrorDetail()
    node.violations.add(node="relu", field="outputs[0].sizes[1]", description="negative")
    node.violations.add(node="add", field="args[0]", description="unknown node")
    e = error_from_rpc(RecordedError(grpc.StatusCode.INVALID_ARGUMENT,
                                     'node "relu" outputs[0].sizes[1]: negative', node))
    assert str(e) == ('INVALID_ARGUMENT: node "relu" outputs[0].sizes[1]: negative'
                      "\n  add: args[0]: unknown node")

    busy = errors_pb2.ErrorDetail(retry_after_ms=250)
    e = error_from_rpc(RecordedError(grpc.StatusCode.RESOURCE_EXHAUSTED, "queue full", busy))
    assert isinstance(e, CompileRejected) and "retry after 250 ms" in str(e)

    e = error_from_rpc(RecordedError(grpc.StatusCode.FAILED_PRECONDITION, "not capturable"))
    assert isinstance(e, CompileRejected)

    diverged = errors_pb2.ErrorDetail()
    diverged.divergence.job_id = "j"
    diverged.divergence.groups.add(compile_key="a" * 64, ranks=[0])
    diverged.divergence.groups.add(compile_key="b" * 64, ranks=[1])
    diverged.divergence.differences.append("ranks [1] vs [0]: first at node 3 (aten.mul.Tensor)")
    e = error_from_rpc(RecordedError(grpc.StatusCode.FAILED_PRECONDITION, "diverged", diverged))
    assert isinstance(e, RankDivergence) and e.ranks == [[0], [1]]
    assert "node 3 (aten.mul.Tensor)" in str(e)

    # Details that are not a kiln.v1.ErrorDetail (from a proxy, say) are ignored.
    e = error_from_rpc(RecordedError(grpc.StatusCode.INTERNAL, "boom", raw=b"\xff\xff\xff"))
    assert isinstance(e, CompileRejected) and e.detail is None


class Misbehaving(compile_pb2_grpc.CompilerServicer):
    """Answers Compile as `mode` says, and keeps what each call carried."""

    def __init__(self) -> None:
        self.mode = "ok"
        self.metadata: list[dict] = []

    def Compile(self, request, context):
        self.metadata.append(dict(context.invocation_metadata()))
        if self.mode == "slow":
            time.sleep(2)
            return answer()
        if self.mode == "tampered":
            response = answer()
            response.compiled_graph = b"something else"
            return response
        if self.mode == "reject":
            detail = errors_pb2.ErrorDetail()
            detail.violations.add(node="relu", field="outputs[0].sizes[1]", description="negative")
            context.set_trailing_metadata([(STATUS_DETAILS_KEY, detail.SerializeToString())])
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "the graph is malformed")
        return answer(request.graph.SerializeToString())


@pytest.fixture(scope="module")
def fake_server() -> Iterator[tuple[str, Misbehaving]]:
    servicer = Misbehaving()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    compile_pb2_grpc.add_CompilerServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield f"127.0.0.1:{port}", servicer
    server.stop(None)


def test_client_sends_token_and_traceparent(fake_server, mlp_graph, tmp_path) -> None:
    address, servicer = fake_server
    servicer.mode = "ok"
    token = tmp_path / "token"
    token.write_text("t0ken\n")
    with CompileClient(settings(server=address, token_file=str(token))) as client:
        request = build_request(mlp_graph, client.settings, "x86_64", JobIdentity(), 0)
        result = client.compile(request)
    assert result.compiled_graph == mlp_graph.SerializeToString()
    assert result.outcome == "miss" and result.compile_key == "k" * 64
    sent = servicer.metadata[-1]
    assert sent["authorization"] == "Bearer t0ken"
    assert sent["traceparent"] == result.traceparent and TRACEPARENT.match(result.traceparent)
    assert result.trace_id == result.traceparent[3:35]


def test_client_refuses_a_tampered_artifact(fake_server, mlp_graph) -> None:
    address, servicer = fake_server
    servicer.mode = "tampered"
    with CompileClient(settings(server=address)) as client:
        with pytest.raises(ArtifactMismatch):
            client.compile(build_request(mlp_graph, client.settings, "x86_64", JobIdentity(), 0))


def test_client_deadline(fake_server, mlp_graph) -> None:
    address, servicer = fake_server
    servicer.mode = "slow"
    with CompileClient(settings(server=address, deadline=0.2)) as client:
        started = time.monotonic()
        with pytest.raises(CompileTimeout) as e:
            client.compile(build_request(mlp_graph, client.settings, "x86_64", JobIdentity(), 0))
    assert time.monotonic() - started < 1.5
    assert e.value.code == "DEADLINE_EXCEEDED"


def test_client_reads_error_details_from_the_status(fake_server, mlp_graph) -> None:
    address, servicer = fake_server
    servicer.mode = "reject"
    with CompileClient(settings(server=address)) as client:
        with pytest.raises(CompileRejected) as e:
            client.compile(build_request(mlp_graph, client.settings, "x86_64", JobIdentity(), 0))
    assert "relu: outputs[0].sizes[1]: negative" in str(e.value)
