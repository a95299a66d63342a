"""The include graph follows DESIGN.md's arrows: server may use cache and compiler; client
never uses the compiler or the cache; cache and compiler know neither each other nor gRPC."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
GRPC = re.compile(r"^(grpc/|grpcpp/|grpc\+\+/)|\.grpc\.pb\.h$|^proto/rpc/")

# folder -> what its sources must not include
FORBIDDEN = {
    "proto": [re.compile(r"^(cache|compiler|server|client)/")],
    "cache": [re.compile(r"^(compiler|server|client)/"), GRPC],
    "compiler": [re.compile(r"^(cache|server|client)/"), GRPC],
    "client": [re.compile(r"^(cache|compiler|server)/")],
    "server": [re.compile(r"^client/")],
}
# proto/rpc is the one place in proto that speaks gRPC.
ALLOWED = {("proto", "rpc"): [GRPC]}


def sources(folder: str) -> list[pathlib.Path]:
    return sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".h", ".cc", ".c"))


def violations(folder: str) -> list[str]:
    found = []
    for path in sources(folder):
        rel = path.relative_to(ROOT)
        allowed = ALLOWED.get(tuple(rel.parts[:2]), [])
        for header in INCLUDE.findall(path.read_text(errors="replace")):
            for rule in FORBIDDEN[folder]:
                if rule.search(header) and not any(a.search(header) for a in allowed):
                    found.append(f"{rel} includes {header}")
    return found


@pytest.mark.parametrize("folder", sorted(FORBIDDEN))
def test_includes_follow_the_arrows(folder: str) -> None:
    assert violations(folder) == []


def test_the_rules_catch_a_violation() -> None:
    assert GRPC.search("grpcpp/grpcpp.h")
    assert GRPC.search("kiln/v1/compile.grpc.pb.h")
    assert GRPC.search("proto/rpc/grpc_status.h")
    assert not GRPC.search("kiln/v1/compile.pb.h")
    assert FORBIDDEN["client"][0].search("compiler/compile.h")
