"""Kiln's steady step against Inductor's in one process, on a GPU machine.

Run from the repository root after `deploy/gpu-bundle.sh .bundle` (carried with the tree):

    python3 tests/gpu/paired_steps.py --bundle .bundle --out $OUT [--only gpt2_124m_bf16,...]
        [--steps 40] [--cudagraphs]

step_time.py runs each mode in a process of its own, and the GPU machine runs one process's
host up to twice as fast as another's (host_threads.py): a host-bound steady step moves with
it, and a ratio of two processes' steps carries both processes' luck. Here one process trains
two copies of a configuration's model from one seed, one compiled by Inductor (default mode)
and one by Kiln, on the same batches, step by step in turns: Inductor's step first on odd
steps, Kiln's on even ones, each timed alone (the GPU drained before and after). Both run on
the same CPUs at the same moments, so the host's speed divides out of each step's ratio. The
report gives each backend's median steady step (from step STEADY_FROM on), the median of the
steps' ratios with its quartiles, and each backend's loss against the other's; kilnd's
compile counters show that Kiln's copy compiled, and the table says so when it did not (were
Dynamo to reuse the first copy's code for the second, the ratio would not be Kiln's). With
--cudagraphs the pair is step_time.py's CUDA-graph modes: Inductor's mode="reduce-overhead"
against Kiln's options={"cudagraphs": True}. Writes OUT/paired_steps.json and
OUT/paired_steps.txt; a configuration that fails is a line that says so.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys
import tempfile
import time
from typing import Callable, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer, script_parser  # noqa: E402
from step_time import (CONFIGS, OUTPUT_TAIL, STEADY_FROM, compile_counts,  # noqa: E402
                       compiled, host_phase_text, host_phases, prepared, step_figures)
from worker_process import logged, record_kiln_log, run_worker  # noqa: E402

STEPS = 40
TIMEOUT_S = 500.0
# Kiln's log lines about its CUDA graphs the table lists, at most.
GRAPH_LINES = 24
BACKENDS = ("inductor", "kiln")
# step_time.py's mode for each backend, without CUDA graphs and with them.
MODES = {False: {"inductor": "inductor", "kiln": "kiln"},
         True: {"inductor": "inductor_cudagraphs", "kiln": "kiln_cudagraphs"}}


# --- the training process ------------------------------------------------------------------


def train(name: str, steps: int, cudagraphs: bool, write_event: Callable[..., None]) -> None:
    import copy

    import torch

    import capture_corpus as corpus
    from train_models import backward_step

    record_kiln_log(write_event)
    bench, dtype, model, batches = prepared(name, steps)
    models = {"inductor": model, "kiln": copy.deepcopy(model)}
    runs = {b: compiled(m, MODES[cudagraphs][b]) for b, m in models.items()}
    opts = {b: torch.optim.AdamW(m.parameters(), lr=bench.lr) for b, m in models.items()}
    for step, batch in enumerate(batches, 1):
        for backend in turn(step):
            torch.cuda.synchronize()
            start = time.perf_counter()
            marks: list[float] = []
            loss = backward_step(runs[backend], batch, opts[backend], corpus.autocast(dtype),
                                 marks)
            opts[backend].step()
            issued = time.perf_counter()
            value = loss.item()
            torch.cuda.synchronize()
            write_event(event="step", step=step, backend=backend, loss=value,
                        seconds=time.perf_counter() - start, host_seconds=issued - start,
                        **host_phases(start, marks, issued))
    write_event(event="done", device=torch.cuda.get_device_name(), torch=torch.__version__)


def turn(step: int) -> tuple[str, ...]:
    """The order the backends take their steps in at `step` (from 1): Inductor first on odd
    steps, Kiln first on even ones, so neither always follows the other's work."""
    return BACKENDS if step % 2 else BACKENDS[::-1]


def worker(name: str, steps: int, cudagraphs: bool, events_path: pathlib.Path) -> int:
    return logged(events_path, lambda write_event: train(name, steps, cudagraphs, write_event),
                  OUTPUT_TAIL)


# --- reading a run (no PyTorch) ------------------------------------------------------------


def summarize(events: list[dict], returncode: Optional[int], output: str,
              timed_out_after: Optional[float]) -> dict:
    """One process's figures: per backend its first step, median steady step and host time
    (seconds) and losses; the steady steps' ratios (Kiln's over Inductor's, step by step) as
    their median and quartiles; or why the process did not finish."""
    steps = [e for e in events if e.get("event") == "step"]
    result: dict = {"backends": {}}
    by_step: dict[int, dict[str, float]] = {}
    for backend in BACKENDS:
        mine = [e for e in steps if e["backend"] == backend]
        steady = [e for e in mine if e["step"] >= STEADY_FROM]
        result["backends"][backend] = step_figures(mine, steady)
        for e in steady:
            by_step.setdefault(e["step"], {})[backend] = e["seconds"]
    ratios = sorted(pair["kiln"] / pair["inductor"] for pair in by_step.values()
                    if len(pair) == 2 and pair["inductor"] > 0)
    graph_lines = [e["message"] for e in events if e.get("event") == "log"
                   and ("CUDA graph" in e["message"] or "captured" in e["message"])]
    if graph_lines:
        result["cuda_graph_log"] = graph_lines
    if ratios:
        result["ratios"] = ratios
        result["ratio"] = statistics.median(ratios)
        quartiles = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
        result["quartiles"] = [quartiles[0], quartiles[2]]
    if not any(e.get("event") == "done" for e in events):
        error = next((e for e in events if e.get("event") == "error"), None)
        result["failed"] = (error["error"] if error else
                            f"timed out after {timed_out_after:.0f} s" if timed_out_after else
                            f"exited with {returncode}")
        result["output_tail"] = output[-OUTPUT_TAIL:]
    return result


def loss_difference(result: dict) -> Optional[float]:
    """The largest difference between the backends' losses, step by step, relative to
    Inductor's first loss; None when either has none."""
    a = result["backends"].get("inductor", {}).get("losses") or []
    b = result["backends"].get("kiln", {}).get("losses") or []
    if not a or not b or a[0] == 0:
        return None
    return max(abs(x - y) for x, y in zip(a, b)) / abs(a[0])


def table(name: str, result: dict, cudagraphs: bool = False) -> str:
    """One configuration's lines: each backend's steps, the paired ratio, the losses."""
    modes = MODES[cudagraphs]
    lines = [f"## {name}, both backends in one process"
             + (f" ({modes['inductor']} and {modes['kiln']})" if cudagraphs else "")]
    if result.get("failed"):
        lines.append(f"- failed: {result['failed']}")
    for backend, figures in result["backends"].items():
        steady, host = figures.get("steady_s"), figures.get("host_s")
        if steady is None:
            continue
        phases = host_phase_text(figures)
        lines.append(f"- {backend}: first step {figures['first_s']:.2f} s, steady "
                     f"{steady * 1e3:.1f} ms (host {host * 1e3:.1f} ms"
                     + (f": {phases})" if phases else ")"))
    if "ratio" in result:
        low, high = result["quartiles"]
        lines.append(f"- kiln steady / inductor steady, step by step: {result['ratio']:.2f} "
                     f"(quartiles {low:.2f}-{high:.2f}, {len(result['ratios'])} steps)")
    difference = loss_difference(result)
    if difference is not None:
        lines.append(f"- losses: kiln's differ from inductor's by at most {difference:.1e} of "
                     "the first")
    server = result.get("server")
    if server is not None:
        lines.append(f"- kilnd: {server['compiles']:.0f} compiles, {server['hits']:.0f} hits"
                     + ("" if server["compiles"] or server["hits"] else
                        " (Kiln's copy never reached kilnd: its ratio is not Kiln's)"))
    graph_lines = result.get("cuda_graph_log", [])
    if graph_lines:
        lines.append(f"- kiln's CUDA graphs ({len(graph_lines)} log lines"
                     + (f", the first {GRAPH_LINES}):" if len(graph_lines) > GRAPH_LINES
                        else "):"))
        lines.extend(f"  - {line}" for line in graph_lines[:GRAPH_LINES])
    return "\n".join(lines) + "\n"


# --- the runner ----------------------------------------------------------------------------


def run_config(name: str, steps: int, cudagraphs: bool, timeout: float, server: KilnServer,
               out: pathlib.Path) -> dict:
    from train_models import read_events

    events_path = out / "paired_steps_runs" / f"{name}.jsonl"
    events_path.parent.mkdir(parents=True, exist_ok=True)
    events_path.write_text("")
    env = dict(server.env, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="inductor-"))
    before = server.metrics()
    run = run_worker([str(pathlib.Path(__file__).resolve()), "--worker", name, str(steps),
                      str(int(cudagraphs)), str(events_path)], env, timeout)
    result = summarize(read_events(events_path), run.returncode, run.output,
                       run.timed_out_after)
    result["server"] = compile_counts(before, server.metrics())
    return result


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # the runner's own call: CONFIG STEPS CUDAGRAPHS EVENTS_PATH
        name, steps, cudagraphs, events_path = argv[1:]
        return worker(name, int(steps), cudagraphs == "1", pathlib.Path(events_path))
    parser = script_parser()
    parser.add_argument("--only", default="gpt2_124m_fp32,gpt2_124m_bf16",
                        help=f"configurations, comma-separated, of {', '.join(CONFIGS)}")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--cudagraphs", action="store_true",
                        help="pair the CUDA-graph modes (reduce-overhead against Kiln's)")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = [n for n in names if n not in CONFIGS]
    if unknown:
        parser.error(f"unknown configurations {unknown}; known: {', '.join(CONFIGS)}")
    if args.steps <= STEADY_FROM:
        parser.error(f"--steps must be above {STEADY_FROM}: steady steps start there")
    report: dict = {"steps": args.steps, "steady_from": STEADY_FROM,
                    "modes": MODES[args.cudagraphs], "configs": {}}
    texts = []
    for name in names:
        with KilnServer(args.bundle, args.out) as server:
            result = run_config(name, args.steps, args.cudagraphs, args.timeout, server,
                                args.out)
        report["configs"][name] = result
        (args.out / "paired_steps.json").write_text(json.dumps(report, indent=1))
        texts.append(table(name, result, args.cudagraphs))
        print(texts[-1], flush=True)
    (args.out / "paired_steps.txt").write_text("\n".join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())
