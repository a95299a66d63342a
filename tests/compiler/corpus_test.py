"""Every graph of the real-graph corpus (tests/data/graphs and its min_cut/) compiles for x86_64 and its
artifact matches the reference interpreter, at the symbols' hints and at other values the
guards allow (`kilnc --check`).

Graphs that do not yet are listed in tests/data/corpus_status.json with the reason they fail
(a piece of the error they give). A listed graph must still fail for that reason, and one
that starts to pass must leave the list: the list only shrinks, and each entry says what is
missing."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import subprocess

import pytest

DATA = pathlib.Path(__file__).resolve().parent.parent / "data"
GRAPHS = pathlib.Path(os.environ.get("KILN_GRAPHS_DIR", DATA / "graphs"))
BINARY_DIR = pathlib.Path(os.environ.get("KILN_BINARY_DIR", "build/release"))
KNOWN_FAILURES: dict[str, str] = json.loads((DATA / "corpus_status.json").read_text())["fails"]


def corpus() -> list[str]:
    """Graph files by their path under GRAPHS: those split by AOTAutograd's default partitioner,
    and those split by min-cut (min_cut/, what the backend sends by default)."""
    return sorted(str(p.relative_to(GRAPHS)) for d in (GRAPHS, GRAPHS / "min_cut")
                  for p in d.iterdir()
                  if p.name.endswith(".json") or p.name.endswith(".json.gz"))


def check(path: pathlib.Path, tmp_path: pathlib.Path) -> subprocess.CompletedProcess:
    if path.suffix == ".gz":
        plain = tmp_path / path.stem
        plain.write_bytes(gzip.decompress(path.read_bytes()))
        path = plain
    return subprocess.run([str(BINARY_DIR / "compiler" / "kilnc"), "--check", str(path)],
                          capture_output=True, text=True, timeout=600)


def test_the_corpus_is_all_here() -> None:
    manifest = json.loads((DATA / "manifest.json").read_text())
    assert sorted(g["file"] for g in manifest["graphs"]) == corpus()
    assert set(KNOWN_FAILURES) <= set(corpus())
    for g in manifest["graphs"]:
        if g.get("reference"):
            file = pathlib.PurePosixPath(g["file"])
            ref = GRAPHS / file.parent / "ref" / file.name.replace(".json", ".ref.json")
            assert ref.exists(), ref


def test_dynamic_graphs_are_checked_off_their_hints(tmp_path: pathlib.Path) -> None:
    # Float symbols keep their hints and a symbol pinned by its range stays put, so the
    # other symbols still move: mlp_dynamic has both.
    result = check(GRAPHS / "mlp_dynamic.fw.json.gz", tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    checks = [line for line in result.stdout.splitlines() if line.startswith("check ")]
    assert len(checks) == 4, result.stdout
    assert all(" ok " in line for line in checks), result.stdout
    assert any("s53=64" in line for line in checks), result.stdout


@pytest.mark.parametrize("name", corpus())
def test_graph_compiles_and_matches_the_interpreter(name: str, tmp_path: pathlib.Path) -> None:
    result = check(GRAPHS / name, tmp_path)
    output = result.stdout + result.stderr
    reason = KNOWN_FAILURES.get(name)
    if reason is None:
        assert result.returncode == 0, output[-4000:]
    else:
        assert result.returncode != 0, f"{name} passes now: remove it from corpus_status.json"
        assert reason in output, f"{name} fails differently than listed ({reason!r}):\n" \
            + output[-4000:]
