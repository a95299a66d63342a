"""Compile requests to kilnd: building them, sending them, and checking what comes back.

A request carries the graph, the compile options that change code (target, precision,
require_cudagraph, backend options), and who is asking: job id, rank, world size and the
rank's compile sequence number, from which kilnd gathers the n-th compile of every rank
into one decision. Every call carries a fresh W3C `traceparent`, so kilnd's spans for it
join a trace whose id the trainer knows, and the bearer token when one is configured.

CompileClient.compile hands out a response only after the compiled graph's bytes hashed to
the digest kilnd sent; errors arrive as the exceptions of kiln.errors, with kilnd's
kiln.v1.ErrorDetail attached. With several servers (KILN_SERVER=a:1,b:2,c:3) each request
goes to the instance kiln.fleet picks, skipping unreachable ones and following a kilnd's
redirect to a job's owner. Needs grpcio and protobuf, no PyTorch. Thread-safe.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from dataclasses import dataclass
from typing import Optional

import grpc

from kiln.errors import (ArtifactMismatch, CompileFailed, CompileRejected, CompileTimeout,
                         KilnError, RankDivergence, ServerUnreachable, SettingsError)
from kiln.fleet import OWNER_KEY, UNREACHABLE_KEY, fleet_order, next_after_redirect, route_key
from kiln.settings import Settings
from kiln.v1 import compile_pb2, compile_pb2_grpc, errors_pb2, graph_pb2

# Where a C++ server's grpc::Status error details travel (trailing metadata).
STATUS_DETAILS_KEY = "grpc-status-details-bin"
PRECISIONS = {
    "strict": compile_pb2.PRECISION_POLICY_STRICT,
    "allow_tf32": compile_pb2.PRECISION_POLICY_ALLOW_TF32,
    "fast_math": compile_pb2.PRECISION_POLICY_FAST_MATH,
}
OUTCOMES = {
    compile_pb2.CACHE_OUTCOME_HIT: "hit",
    compile_pb2.CACHE_OUTCOME_GUARD_MISS: "guard miss",
    compile_pb2.CACHE_OUTCOME_MISS: "miss",
}


@dataclass(frozen=True)
class JobIdentity:
    """Who sends a compile: a job's id and this process's rank among `world_size` ranks.
    world_size 1 (or 0) means no rendezvous: the request stands alone."""

    job_id: str = ""
    rank: int = 0
    world_size: int = 1


class SequenceNumbers:
    """Each rank's compile sequence numbers: 0, 1, 2, ... per (job, rank, world size), in the
    order the rank's graphs are compiled. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._next: dict[JobIdentity, int] = {}

    def take(self, job: JobIdentity) -> int:
        with self._lock:
            n = self._next.get(job, 0)
            self._next[job] = n + 1
            return n


def compile_options(settings: Settings, target: str) -> compile_pb2.CompileOptions:
    """The options that change the generated code, all of them part of the compile key."""
    options = compile_pb2.CompileOptions(
        target=target, require_cudagraph=settings.require_cudagraph,
        precision=PRECISIONS[settings.precision])
    for name in sorted(settings.backend_options):
        options.backend_options[name] = settings.backend_options[name]
    return options


def check_job(settings: Settings, job: JobIdentity) -> None:
    """A job of several ranks needs a job id: without one, the ranks of different jobs would
    meet in one rendezvous."""
    if job.world_size > 1 and not settings.job_id:
        raise SettingsError("job_id", "KILN_JOB_ID",
                            f"rank {job.rank} of {job.world_size} needs a job id shared by "
                            "its ranks: set KILN_JOB_ID or options['job_id'], or launch with "
                            "torchrun --rdzv-id")
    if job.world_size > 1 and not 0 <= job.rank < job.world_size:
        raise ValueError(f"rank {job.rank} is outside [0, {job.world_size})")


def build_request(graph: graph_pb2.Graph, settings: Settings, target: str, job: JobIdentity,
                  sequence: int) -> compile_pb2.CompileRequest:
    """One compile request (see check_job for what a job must have)."""
    check_job(settings, job)
    request = compile_pb2.CompileRequest()
    request.graph.CopyFrom(graph)
    request.options.CopyFrom(compile_options(settings, target))
    request.job.job_id = settings.job_id
    request.job.rank = job.rank
    request.job.world_size = job.world_size
    request.job.sequence = sequence
    return request


class RequestBuilder:
    """Builds a process's compile requests, numbering each rank's in order."""

    def __init__(self, settings: Settings, sequences: Optional[SequenceNumbers] = None) -> None:
        self.settings = settings
        self.sequences = sequences or SequenceNumbers()

    def build(self, graph: graph_pb2.Graph, target: str, rank: int = 0,
              world_size: int = 1) -> compile_pb2.CompileRequest:
        job = JobIdentity(self.settings.job_id, rank, world_size)
        # A number is taken only for a request that can be built, so a bad one leaves no gap
        # in the sequence that the other ranks would wait on.
        check_job(self.settings, job)
        return build_request(graph, self.settings, target, job, self.sequences.take(job))


def new_traceparent(trace_id: Optional[str] = None) -> str:
    """A W3C traceparent (version 00, sampled) for one call: a new span id, in `trace_id`'s
    trace when given, else in a new trace."""
    if trace_id is None:
        trace_id = _nonzero_hex(16)
    elif len(trace_id) != 32 or trace_id.strip("0123456789abcdef") or not int(trace_id, 16):
        raise ValueError(f"'{trace_id}' is not a trace id (32 lowercase hex digits, not all 0)")
    return f"00-{trace_id}-{_nonzero_hex(8)}-01"


def _nonzero_hex(nbytes: int) -> str:
    while True:
        value = secrets.token_hex(nbytes)
        if int(value, 16):
            return value


@dataclass(frozen=True)
class CompileResult:
    """A verified answer: `response.compiled_graph` hashes to `response.artifact_digest`."""

    response: compile_pb2.CompileResponse
    traceparent: str

    @property
    def outcome(self) -> str:
        return OUTCOMES.get(self.response.outcome, "unknown")

    @property
    def compile_key(self) -> str:
        return self.response.compile_key

    @property
    def compiled_graph(self) -> bytes:
        return self.response.compiled_graph

    @property
    def artifact_hash(self) -> str:
        """The compiled graph's SHA-256 (verified): equal on every rank given the same graph."""
        return self.response.artifact_digest.hash

    @property
    def trace_id(self) -> str:
        return self.traceparent.split("-")[1]


def verify_response(response: compile_pb2.CompileResponse) -> None:
    """Raises ArtifactMismatch unless the compiled graph's bytes are the ones kilnd named."""
    digest = response.artifact_digest
    actual = hashlib.sha256(response.compiled_graph).hexdigest()
    if actual != digest.hash:
        raise ArtifactMismatch(
            "DATA_LOSS", f"the compiled graph's bytes hash to {actual}, not to the digest the "
            f"server sent ({digest.hash or 'none'})")
    if digest.size_bytes and digest.size_bytes != len(response.compiled_graph):
        raise ArtifactMismatch(
            "DATA_LOSS", f"the compiled graph has {len(response.compiled_graph)} bytes, the "
            f"digest says {digest.size_bytes}")


def error_from_rpc(error: grpc.RpcError, server: str = "") -> KilnError:
    """The kiln.errors exception for a failed call, with kilnd's ErrorDetail when it sent
    one."""
    code = error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
    message = (error.details() if hasattr(error, "details") else "") or str(error)
    detail = _error_detail(error)
    where = f"kilnd at {server}: " if server else ""
    name = code.name if isinstance(code, grpc.StatusCode) else str(code)
    if code == grpc.StatusCode.FAILED_PRECONDITION and detail and detail.HasField("divergence"):
        return RankDivergence(message, detail.divergence)
    if code == grpc.StatusCode.UNAVAILABLE:
        return ServerUnreachable(name, where + message, detail)
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        if detail and detail.missing_ranks:
            missing = ",".join(str(r) for r in detail.missing_ranks)
            message = f"{message} (ranks [{missing}] did not arrive)"
        return CompileTimeout(name, where + message, detail)
    if detail and detail.violations:
        # kilnd's message for a single violation already states it (InvalidField): said once.
        stated = message
        message += "".join(
            f"\n  {v.node + ': ' if v.node else ''}{v.field}: {v.description}"
            for v in detail.violations if f"{v.field}: {v.description}" not in stated)
    if detail and detail.retry_after_ms:
        message += f" (retry after {detail.retry_after_ms} ms)"
    return CompileRejected(name, where + message, detail)


def _error_detail(error: grpc.RpcError) -> Optional[errors_pb2.ErrorDetail]:
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == STATUS_DETAILS_KEY and isinstance(value, bytes):
            detail = errors_pb2.ErrorDetail()
            try:
                detail.ParseFromString(value)
            except Exception:  # details from something other than kilnd (a proxy): ignored
                return None
            return detail
    return None


def open_channel(settings: Settings, address: Optional[str] = None) -> grpc.Channel:
    """A channel to `address` (settings.server's first when not given): TLS when ca_cert is
    set (mutual with client_cert and client_key), plaintext otherwise. Responses as large as
    kilnd sends are accepted."""
    address = address or settings.servers[0]
    options = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]
    if settings.ca_cert is None:
        return grpc.insecure_channel(address, options=options)
    with open(settings.ca_cert, "rb") as f:
        roots = f.read()
    key = chain = None
    if settings.client_cert is not None and settings.client_key is not None:
        with open(settings.client_key, "rb") as f:
            key = f.read()
        with open(settings.client_cert, "rb") as f:
            chain = f.read()
    credentials = grpc.ssl_channel_credentials(root_certificates=roots, private_key=key,
                                               certificate_chain=chain)
    return grpc.secure_channel(address, credentials, options=options)


def _owner(error: grpc.RpcError) -> Optional[str]:
    """The job's owner a kilnd of a fleet named instead of answering, if it did."""
    if not hasattr(error, "code") or error.code() != grpc.StatusCode.FAILED_PRECONDITION:
        return None
    trailing = error.trailing_metadata() if hasattr(error, "trailing_metadata") else None
    for key, value in trailing or ():
        if key == OWNER_KEY:
            return value.decode() if isinstance(value, bytes) else value
    return None


class CompileClient:
    """Sends compile requests to the kilnd that `settings` names, over one channel per
    instance; with several (a fleet), routed as kiln.fleet describes. `channel`, when given,
    serves every request (one server)."""

    def __init__(self, settings: Settings, channel: Optional[grpc.Channel] = None) -> None:
        self.settings = settings
        self.servers = [settings.server] if channel is not None else settings.servers
        self._lock = threading.Lock()
        self._channels: dict[str, grpc.Channel] = {}
        self._stubs: dict[str, compile_pb2_grpc.CompilerStub] = {}
        if channel is not None:
            self._channels[settings.server] = channel
            self._stubs[settings.server] = compile_pb2_grpc.CompilerStub(channel)

    def _stub(self, address: str) -> compile_pb2_grpc.CompilerStub:
        with self._lock:
            if address not in self._stubs:
                self._channels[address] = open_channel(self.settings, address)
                self._stubs[address] = compile_pb2_grpc.CompilerStub(self._channels[address])
            return self._stubs[address]

    def order(self, request: compile_pb2.CompileRequest) -> list[str]:
        """The instances tried for `request`, in order (before any redirect)."""
        if len(self.servers) == 1:
            return list(self.servers)
        key = route_key(request.job.job_id, request.job.world_size,
                        request.graph.SerializeToString(deterministic=True))
        return fleet_order(key, self.servers)

    def compile(self, request: compile_pb2.CompileRequest, traceparent: Optional[str] = None,
                timeout: Optional[float] = None) -> CompileResult:
        """Compiles (or looks up) `request` within `timeout` seconds (settings.deadline when
        not given; all attempts together). Raises CompileFailed's subclasses, or
        RankDivergence."""
        traceparent = traceparent or new_traceparent()
        budget = timeout if timeout is not None else self.settings.deadline
        deadline = time.monotonic() + budget
        queue = self.order(request)
        unreachable: list[str] = []
        followed: list[str] = []
        last: Optional[KilnError] = None
        while queue:
            address = queue.pop(0)
            metadata = [("traceparent", traceparent)]
            if self.settings.token:
                metadata.append(("authorization", f"Bearer {self.settings.token}"))
            if unreachable:
                metadata.append((UNREACHABLE_KEY, ",".join(unreachable)))
            try:
                response = self._stub(address).Compile(
                    request, timeout=max(deadline - time.monotonic(), 0.001), metadata=metadata)
            except grpc.RpcError as e:
                if hasattr(e, "code") and e.code() == grpc.StatusCode.UNAVAILABLE:
                    unreachable.append(address)
                    last = error_from_rpc(e, address)
                    continue
                owner = _owner(e)
                if owner is None:
                    raise error_from_rpc(e, address) from None
                if address in followed or owner in followed:
                    raise CompileRejected(
                        "FAILED_PRECONDITION",
                        f"kilnd instances disagree about who owns job {request.job.job_id}: "
                        f"{address} names {owner} after a redirect to {followed[-1]} (do their "
                        "--fleet lists match?)") from None
                followed.append(owner)
                queue = next_after_redirect(queue, owner, address, unreachable)
                continue
            verify_response(response)
            return CompileResult(response, traceparent)
        if len(unreachable) > 1:
            raise ServerUnreachable("UNAVAILABLE", f"no kilnd could be reached "
                                    f"({', '.join(unreachable)}); last: {last}")
        assert last is not None
        raise last

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()

    def __enter__(self) -> "CompileClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["CompileClient", "CompileFailed", "CompileResult", "JobIdentity", "RequestBuilder",
           "SequenceNumbers", "build_request", "check_job", "compile_options", "error_from_rpc",
           "new_traceparent", "open_channel", "verify_response"]
