"""Compiled frames in kilnd's cache, where a fresh process finds them.

A compiled frame is what AOTAutograd made of one Dynamo graph: the forward and backward
(or inference) graphs kilnd compiled, with the metadata AOTAutograd's runtime wrappers need
(kiln.frame_cache builds and loads it). A process that finds its frame here pays Dynamo's
tracing and a round trip, not AOTAutograd's tracing and a compile request per graph.

A frame is stored as kilnd stores everything: its bytes as a blob, named by their SHA-256,
and an action entry under the frame's key that names the blob. The action key is scoped to
kilnd's toolchain for the frame's target (GetActionRequest.toolchain_target): a kilnd
whose compiler changed misses, and the frame is traced and compiled again, rather than
answering with code that kilnd no longer makes.

FrameStore answers as PyTorch's remote caches do for AOTAutogradCache (get and put of a
JSON dict whose "data" is the entry's bytes in base64), so AOTAutogradCache reads and
writes through it; the bytes travel and rest raw. It never raises: a kilnd that cannot be
reached, or refuses, is a miss (said once per process, then logged), and a put that fails
loses nothing but the next process's hit. Needs no PyTorch.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import threading
import time
from typing import Any, Iterator, Optional

import grpc

from kiln import timings
from kiln.client import error_from_rpc, open_channel
from kiln.fleet import fleet_order
from kiln.settings import Settings
from kiln.v1 import artifact_pb2, cache_pb2, cache_pb2_grpc

log = logging.getLogger("kiln")

# The blob is sent in chunks of this length (kilnd takes up to 4 MiB in one message).
CHUNK_BYTES = 1 << 20


class FrameStore:
    """Frames for `target` ("cuda:sm_90") in the kilnd (or fleet) that `settings` names.
    Routed by the frame's key, as kiln.fleet routes a single graph: the same frame from
    anywhere reaches the same instance; one that cannot be reached is skipped."""

    def __init__(self, settings: Settings, target: str) -> None:
        self.settings = settings
        self.target = target
        self.servers = settings.servers
        self._lock = threading.Lock()
        self._stubs: dict[str, cache_pb2_grpc.CacheStub] = {}
        self._said: set[str] = set()

    def get(self, key: str) -> Optional[dict[str, Any]]:
        """The frame stored under `key` as {"data": base64 of its bytes}, or None."""
        with timings.phase("frame lookup"):
            data = self.get_bytes(key)
            return None if data is None else {"data": base64.b64encode(data).decode("ascii")}

    def put(self, key: str, value: dict[str, Any]) -> None:
        """Stores the frame whose bytes `value["data"]` holds in base64 under `key`."""
        with timings.phase("frame store"):
            self.put_bytes(key, base64.b64decode(value["data"]))

    def get_bytes(self, key: str) -> Optional[bytes]:
        """The bytes of the frame under `key`, verified against their digest; None when no
        instance holds it or none can say."""
        for address, stub in self._order(key):
            try:
                entry = stub.GetAction(
                    cache_pb2.GetActionRequest(compile_key=key, toolchain_target=self.target),
                    timeout=self.settings.deadline, metadata=self._metadata())
                digest = _newest_artifact(entry)
                if digest is None:
                    return None
                data = b"".join(r.data for r in stub.Get(
                    cache_pb2.GetRequest(digest=digest), timeout=self.settings.deadline,
                    metadata=self._metadata()))
            except grpc.RpcError as e:
                if _code(e) == grpc.StatusCode.UNAVAILABLE:
                    self._say("unreachable", e, address)
                    continue
                if _code(e) != grpc.StatusCode.NOT_FOUND:
                    self._say("get", e, address)
                return None
            except Exception as e:  # a frame not found is never a reason to stop training
                self._say("get", e, address)
                return None
            if hashlib.sha256(data).hexdigest() != digest.hash:
                log.warning("kiln: the frame under key %s from %s does not match its digest; "
                            "it is traced and compiled again", key, address)
                return None
            return data
        return None

    def put_bytes(self, key: str, data: bytes) -> None:
        """Stores `data` as the frame under `key` on the first instance that can be reached."""
        digest = artifact_pb2.Digest(hash=hashlib.sha256(data).hexdigest(), size_bytes=len(data))
        variant = cache_pb2.ActionVariant(created_unix_ms=int(time.time() * 1000))
        variant.artifacts.append(digest)
        for address, stub in self._order(key):
            try:
                stub.Put(_chunks(digest, data), timeout=self.settings.deadline,
                         metadata=self._metadata())
                stub.PutAction(cache_pb2.PutActionRequest(compile_key=key, variant=variant,
                                                          toolchain_target=self.target),
                               timeout=self.settings.deadline, metadata=self._metadata())
            except grpc.RpcError as e:
                if _code(e) == grpc.StatusCode.UNAVAILABLE:
                    self._say("unreachable", e, address)
                    continue
                self._say("put", e, address)
            except Exception as e:  # nor is a frame not stored
                self._say("put", e, address)
            return

    def _order(self, key: str) -> Iterator[tuple[str, cache_pb2_grpc.CacheStub]]:
        for address in fleet_order(key, self.servers):
            with self._lock:
                if address not in self._stubs:
                    self._stubs[address] = cache_pb2_grpc.CacheStub(
                        open_channel(self.settings, address))
                stub = self._stubs[address]
            yield address, stub

    def _metadata(self) -> list[tuple[str, str]]:
        return [("authorization", f"Bearer {self.settings.token}")] if self.settings.token else []

    def _say(self, kind: str, error: Exception, address: str) -> None:
        what = {"unreachable": "cannot be reached", "get": "could not look up a compiled frame",
                "put": "could not store a compiled frame"}[kind]
        why = error_from_rpc(error) if isinstance(error, grpc.RpcError) else (
            f"{type(error).__name__}: {error}")
        message = f"kiln: kilnd at {address} {what} ({why})"
        with self._lock:
            first = kind not in self._said
            self._said.add(kind)
        if first:
            log.warning("%s; frames are traced and compiled where they would have been loaded. "
                        "Later such failures are logged at level INFO.", message)
        else:
            log.info("%s", message)


def _newest_artifact(entry: cache_pb2.ActionEntry) -> Optional[artifact_pb2.Digest]:
    """The blob of the newest variant that names exactly one (a frame is one blob)."""
    variants = [v for v in entry.variants if len(v.artifacts) == 1]
    if not variants:
        return None
    return max(variants, key=lambda v: v.created_unix_ms).artifacts[0]


def _chunks(digest: artifact_pb2.Digest, data: bytes) -> Iterator[cache_pb2.PutRequest]:
    yield cache_pb2.PutRequest(digest=digest, data=data[:CHUNK_BYTES])
    for start in range(CHUNK_BYTES, len(data), CHUNK_BYTES):
        yield cache_pb2.PutRequest(data=data[start:start + CHUNK_BYTES])


def _code(error: grpc.RpcError) -> Any:
    return error.code() if hasattr(error, "code") else grpc.StatusCode.UNKNOWN
