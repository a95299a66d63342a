"""multi_rank.py's reading of ranks' events and its verdicts, without PyTorch or GPUs."""

from __future__ import annotations

import json
import pathlib

import pytest

import multi_rank as mr

STEPS = 6
KEY_A, KEY_B = "a" * 64, "b" * 64


def write_rank(path: pathlib.Path, losses: list[float], artifacts: dict[str, str],
               runner: str = "on Kiln's runtime", error: dict | None = None,
               outcome: str = "miss") -> dict:
    lines = []
    for name, artifact in artifacts.items():
        key = KEY_A if name.endswith("fw") else KEY_B
        lines.append({"event": "log", "level": "INFO", "message":
                      f"graph {name}: {outcome}, key {key}, artifact {artifact}, trace t"})
        lines.append({"event": "log", "level": "INFO",
                      "message": f"graph {name} runs {runner}: kilnd compiled it"})
    lines += [{"event": "step", "step": i + 1, "loss": x, "seconds": 0.5 if i else 3.0}
              for i, x in enumerate(losses)]
    lines.insert(0, {"event": "start", "rank": 0, "world_size": 2, "job_id": "j", "gpu": 0,
                     "process_group": "gloo"})
    lines.append(error or {"event": "done", "device": "H200"})
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    return mr.read_rank(path)


LOSSES = [2.0 - 0.1 * i for i in range(STEPS)]
GRAPHS = {"frame 0/0.fw": "f" * 64, "frame 0/0.bw": "e" * 64}


def job(tmp_path: pathlib.Path, mode: str, losses=LOSSES, graphs=None, **kwargs) -> list:
    graphs = graphs or [GRAPHS, GRAPHS]
    return [write_rank(tmp_path / f"{mode}.{r}.jsonl", losses, g, **kwargs)
            for r, g in enumerate(graphs)]


def test_read_rank_takes_answers_runners_and_times(tmp_path) -> None:
    record = job(tmp_path, "kiln")[0]
    assert record["losses"] == LOSSES and record["done"]
    assert record["answers"]["frame 0/0.fw"] == {"outcome": "miss", "key": KEY_A,
                                                 "artifact": "f" * 64}
    assert record["runners"] == {"frame 0/0.fw": "kiln", "frame 0/0.bw": "kiln"}
    assert record["first_step_s"] == 3.0 and record["median_step_ms"] == 500.0
    assert record["gpu"] == 0 and record["process_group"] == "gloo"


def test_ranks_take_their_own_gpus_and_nccl_only_when_there_are_enough() -> None:
    assert mr.placement("auto", 1, 2, 2) == (1, "nccl")
    assert mr.placement("auto", 1, 2, 1) == (0, "gloo")
    assert mr.placement("auto", 3, 4, 2) == (1, "gloo")
    assert mr.placement("gloo", 1, 2, 2) == (1, "gloo")
    with pytest.raises(ValueError, match="NCCL needs a GPU for each of the 2 ranks on this "
                                         "node and 1 are visible"):
        mr.placement("nccl", 0, 2, 1)
    with pytest.raises(RuntimeError, match="no CUDA device"):
        mr.placement("auto", 0, 2, 0)


def training(tmp_path, kiln=None, warm=None, servers=None) -> dict:
    ranks = {"eager": job(tmp_path, "eager", graphs=[{}, {}]),
             "kiln": kiln or job(tmp_path, "kiln"),
             "kiln_warm": warm or job(tmp_path, "kiln_warm", outcome="hit")}
    servers = servers or {"kiln": {"kiln_compiles_total.ok": 2.0},
                          "kiln_warm": {"kiln_compile_requests_total.hit": 4.0}}
    return mr.judge_training(ranks, servers, STEPS)


def test_a_job_compiled_once_with_equal_artifacts_passes(tmp_path) -> None:
    row = training(tmp_path)
    assert row["pass"], row["reasons"]
    assert row["graphs"] == 2 and row["compiles"] == {"kiln": 2.0, "kiln_warm": 0}


def test_the_table_names_each_ranks_gpu_and_rank_1s_first_steps(tmp_path) -> None:
    ranks = {"eager": job(tmp_path, "eager", graphs=[{}, {}]), "kiln": job(tmp_path, "kiln"),
             "kiln_warm": job(tmp_path, "kiln_warm", outcome="hit")}
    row = mr.judge_training(ranks, {"kiln": {"kiln_compiles_total.ok": 2.0},
                                    "kiln_warm": {}}, STEPS)
    row.update(scenario="ddp_gpt2", description="GPT-2 under DDP", ranks=ranks)
    text = mr.table([row])
    assert "  kiln      rank 1 (GPU 0, gloo): first step 3.00 s, median 500.0 ms, 6 steps, " \
           "graphs 2\n" in text
    assert "  rank 1's first step: eager 3.00 s, kiln against the empty store 3.00 s, against " \
           "the store the first job filled 3.00 s\n" in text
    assert text.endswith("1 of 1 scenarios pass\n")


def test_a_compile_per_rank_or_differing_artifacts_fail(tmp_path) -> None:
    other = dict(GRAPHS, **{"frame 0/0.bw": "0" * 64})
    row = training(tmp_path, kiln=job(tmp_path, "kiln", graphs=[GRAPHS, other]),
                   servers={"kiln": {"kiln_compiles_total.ok": 4.0}, "kiln_warm": {}})
    assert not row["pass"]
    assert any("compiled 4 times for 2 distinct graph(s)" in r for r in row["reasons"])
    assert any("frame 0/0.bw got different artifacts" in r for r in row["reasons"])


def test_loss_drift_a_fallback_and_a_compiling_warm_job_fail(tmp_path) -> None:
    drifted = [x + 1e-3 for x in LOSSES]
    row = training(tmp_path, kiln=job(tmp_path, "kiln", losses=drifted, runner="eagerly"),
                   servers={"kiln": {"kiln_compiles_total.ok": 2.0},
                            "kiln_warm": {"kiln_compiles_total.ok": 1.0}})
    reasons = "\n".join(row["reasons"])
    assert "rank 0: kiln's loss differs from eager's by 5.00e-04" in reasons
    assert "did not run on Kiln's runtime" in reasons
    assert "compiled 1 times for the warm job" in reasons
    assert "the warm job's losses differ from the cold job's" in reasons


def test_an_unfinished_rank_and_missing_counters_fail(tmp_path) -> None:
    error = {"event": "error", "type": "RuntimeError", "error": "NCCL timeout\nmore"}
    kiln = job(tmp_path, "kiln", losses=LOSSES[:2], error=error)
    row = training(tmp_path, kiln=kiln, servers={"kiln": None, "kiln_warm": {}})
    assert "kiln rank 0 did not finish: NCCL timeout" in row["reasons"]
    assert "kilnd's counters could not be read" in row["reasons"]


def test_divergence_passes_only_when_every_rank_raised_naming_every_rank(tmp_path) -> None:
    def raised(message: str) -> dict:
        return {"event": "error", "type": "RankDivergence", "error": message}

    good = raised("ranks diverged at sequence 0: ranks [0] compiled key aa, ranks [1] bb")
    records = [write_rank(tmp_path / f"d{r}.jsonl", [], {}, error=good) for r in range(2)]
    assert mr.judge_divergence(records, 2)["pass"]
    hung = write_rank(tmp_path / "h.jsonl", LOSSES, {})
    vague = write_rank(tmp_path / "v.jsonl", [], {}, error=raised("ranks [0] differ"))
    row = mr.judge_divergence([hung, vague], 2)
    assert row["reasons"] == [
        "rank 0 did not raise RankDivergence (no exception after 6 steps)",
        "rank 1's RankDivergence does not name rank(s) 1: ranks [0] differ"]


def test_root_cause_unwraps_dynamos_wrapper() -> None:
    class BackendCompilerFailed(Exception):
        def __init__(self, inner: Exception) -> None:
            super().__init__(f"backend raised: {inner}")
            self.inner_exception = inner

    class RankDivergence(Exception):
        pass

    inner = RankDivergence("ranks [0] sent key a; ranks [1] sent key b")
    try:
        try:
            raise inner
        except RankDivergence as e:
            raise BackendCompilerFailed(e) from e
    except BackendCompilerFailed as outer:
        assert mr.root_cause(outer) is inner
    plain = ValueError("x")
    assert mr.root_cause(plain) is plain
