"""The include graph follows DESIGN.md's arrows: server may use cache and compiler; client
never uses the compiler or the cache; cache and compiler know neither each other nor gRPC.
compiler/tools/ (kilnc and kiln_check, which run artifacts on the client's CPU runtime) is the
one part of the compiler that may use client/; nothing else in the compiler, and nothing in
the server, may use compiler/tools/, so kiln_compiler and kilnd never link the runtime."""

import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
GRPC = re.compile(r"^(grpc/|grpcpp/|grpc\+\+/)|\.grpc\.pb\.h$|^proto/rpc/")
COMPILER_TOOLS = re.compile(r"^compiler/tools/")

# folder -> what its sources must not include
FORBIDDEN = {
    "proto": [re.compile(r"^(cache|compiler|server|client)/")],
    "cache": [re.compile(r"^(compiler|server|client)/"), GRPC],
    "compiler": [re.compile(r"^(cache|server|client)/"), COMPILER_TOOLS, GRPC],
    "client": [re.compile(r"^(cache|compiler|server)/")],
    "server": [re.compile(r"^client/"), COMPILER_TOOLS],
}
# (folder, subfolder) -> what it may include despite its folder's rules. proto/rpc is the one
# place in proto that speaks gRPC.
ALLOWED = {
    ("proto", "rpc"): [GRPC],
    ("compiler", "tools"): [re.compile(r"^client/"), COMPILER_TOOLS],
}


def sources(folder: str) -> list[pathlib.Path]:
    return sorted(p for p in (ROOT / folder).rglob("*") if p.suffix in (".h", ".cc", ".c"))


def forbidden(rel: pathlib.PurePath, header: str) -> bool:
    """Whether the source at `rel` (relative to the root) may not include `header`."""
    allowed = ALLOWED.get(tuple(rel.parts[:2]), [])
    return any(rule.search(header) for rule in FORBIDDEN[rel.parts[0]]) and not any(
        a.search(header) for a in allowed)


def violations(folder: str) -> list[str]:
    found = []
    for path in sources(folder):
        rel = path.relative_to(ROOT)
        for header in INCLUDE.findall(path.read_text(errors="replace")):
            if forbidden(rel, header):
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
    assert forbidden(pathlib.PurePath("client/cli/main.cc"), "compiler/compile.h")
    assert forbidden(pathlib.PurePath("cache/store.cc"), "grpcpp/grpcpp.h")


def test_only_compiler_tools_may_use_the_client() -> None:
    runtime = "client/runtime/cpu_runtime.h"
    assert forbidden(pathlib.PurePath("compiler/compile.cc"), runtime)
    assert forbidden(pathlib.PurePath("compiler/interp/interpreter.cc"), runtime)
    assert not forbidden(pathlib.PurePath("compiler/tools/check/runtime_check.cc"), runtime)
    assert not forbidden(pathlib.PurePath("compiler/tools/kilnc/main.cc"),
                         "compiler/tools/check/runtime_check.h")
    # The tools are still compiler code: no cache, server or gRPC.
    assert forbidden(pathlib.PurePath("compiler/tools/kilnc/main.cc"), "cache/store.h")
    assert forbidden(pathlib.PurePath("compiler/tools/kilnc/main.cc"), "grpcpp/grpcpp.h")
    # Neither the rest of the compiler nor the server may reach the client through them.
    assert forbidden(pathlib.PurePath("compiler/compile.cc"), "compiler/tools/check/runtime_check.h")
    assert forbidden(pathlib.PurePath("server/main.cc"), "compiler/tools/check/runtime_check.h")
