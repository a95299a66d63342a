"""Which kilnd of a fleet a request goes to.

KILN_SERVER (or options["server"]) may list several instances: "a:50051,b:50051,c:50051".
The ranks of a job must meet on one of them, so clients and kilnd (its --fleet) agree on
who owns a key through one deterministic function, fleet_order, the same as C++'s
kiln::FleetOrder (proto/base/fleet.h; both are tested against the same vectors):
rendezvous (highest random weight) hashing. Each address weighs the first 8 bytes,
big-endian, of SHA-256(key || 0x00 || address); the heaviest owns the key, ties (a 64-bit
SHA-256 collision) go to the smaller address. The order does not depend on the list's
order, and adding or removing an address moves only the keys it owns.

What a request is routed by (route_key):
- a request of a job of several ranks (world_size > 1): its job id, so every rank of the job
  asks the same instance, the one kilnd also computes as the owner;
- any other request: the SHA-256 of its graph, so the same graph from anywhere reaches the
  same instance (its local tier holds it, and concurrent misses meet in one compile).

An instance that cannot be reached (UNAVAILABLE) is skipped for the next one in the order;
the instances skipped travel with the request (metadata kiln-unreachable), so kilnd, which
skips them too when it decides who owns a job, agrees. A kilnd that does not own a job
answers FAILED_PRECONDITION with trailing metadata kiln-owner: HOST:PORT; the client follows
that once (so a client whose list is stale, or holds one address, still reaches the owner).
"""

from __future__ import annotations

import hashlib
from typing import Iterable, Sequence

# Trailing metadata naming the instance that owns a job; metadata listing instances the
# client could not reach.
OWNER_KEY = "kiln-owner"
UNREACHABLE_KEY = "kiln-unreachable"


def parse_fleet(servers: str) -> list[str]:
    """The addresses of a comma-separated list, blanks trimmed, duplicates dropped (the
    first kept). ValueError for an empty entry."""
    out: list[str] = []
    for entry in servers.split(","):
        entry = entry.strip()
        if not entry:
            raise ValueError(f"'{servers}' has an empty entry; expected HOST:PORT,HOST:PORT,...")
        if entry not in out:
            out.append(entry)
    return out


def fleet_weight(key: str | bytes, address: str) -> int:
    """The weight of `address` for `key`: the first 8 bytes of SHA-256(key, 0, address)."""
    if isinstance(key, str):
        key = key.encode()
    digest = hashlib.sha256(key + b"\0" + address.encode()).digest()
    return int.from_bytes(digest[:8], "big")


def fleet_order(key: str | bytes, fleet: Iterable[str]) -> list[str]:
    """`fleet` ordered for `key`, the owner first."""
    return sorted(fleet, key=lambda a: (-fleet_weight(key, a), a))


def route_key(job_id: str, world_size: int, graph_bytes: bytes) -> str:
    """What a request is routed by (see the module's docstring)."""
    if world_size > 1 and job_id:
        return job_id
    return hashlib.sha256(graph_bytes).hexdigest()


def next_after_redirect(order: Sequence[str], owner: str, redirected_by: str,
                        unreachable: Iterable[str]) -> list[str]:
    """Where to go after `redirected_by` named `owner`: the owner, then `redirected_by`
    again (which, told the owner is unreachable, serves or names the next), then the rest."""
    skip = set(unreachable)
    out = [] if owner in skip else [owner]
    for a in [redirected_by, *order]:
        if a not in out and a not in skip:
            out.append(a)
    return out


__all__ = ["OWNER_KEY", "UNREACHABLE_KEY", "fleet_order", "fleet_weight", "next_after_redirect",
           "parse_fleet", "route_key"]
