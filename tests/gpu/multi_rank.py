"""Training across ranks through one kilnd: DDP and functional collectives on two GPUs, each
graph compiled once for the job, the same bytes on every rank, a rank that traces another
graph stopped with an exception on every rank instead of a hang.

Run from the repository root after `deploy/gpu-bundle.sh .bundle` (carried with the tree), on
a machine with two GPUs:

    python3 tests/gpu/multi_rank.py --bundle .bundle --out $OUT [--only ddp_gpt2,...]
        [--steps 20] [--nproc 2] [--process-group auto|nccl|gloo]

Each scenario is one job of --nproc ranks launched by torchrun (c10d rendezvous, NCCL), every
rank a fresh process on its own GPU; torchrun's run id is the job id the kiln backend sends.
With fewer GPUs than ranks the ranks share them (rank r on GPU r mod count) and talk through
Gloo, since NCCL refuses two ranks on one GPU: `--process-group auto`, the default, picks
NCCL only when every rank has a GPU of its own. The table says which one each job used.
One kilnd, started from the bundle with an empty store, serves all of them:
  ddp_gpt2      HF GPT-2 (2 layers, SDPA attention) in DistributedDataParallel (Dynamo's DDP
                optimizer splits the graph at bucket boundaries), AdamW, each rank its own
                batches.
  functional    a model whose forward all-reduces and all-gathers through
                torch.distributed._functional_collectives: the collectives are in the graphs
                Kiln compiles and run through the trainer's process group. PyTorch's
                functional all_gather_into_tensor faults (SIGSEGV) on CUDA tensors under
                Gloo, eagerly too, so under Gloo the gather is a second all_reduce of each
                rank's rows placed by a one-hot buffer of its rank: the same graph on every
                rank, the same result.
  diverge       DDP over an MLP whose batch depends on the rank: the ranks trace different
                graphs, and every rank must raise kiln.errors.RankDivergence naming the ranks.
The training scenarios run three jobs each: eagerly (the reference), through kiln against
the empty store, and through kiln again as a new job (kiln_warm) against the store the first
job filled.

A training scenario passes when every rank of every job finished its steps; each rank's kiln
losses are within 1e-4 of eager's (relative to eager's first loss, as train_models.py); every
graph ran on Kiln's runtime; all ranks got the same artifact (SHA-256) for each graph; kilnd's
counters over the cold job show one compile per graph the ranks sent (not one per rank) and
over the warm job none; the warm job's losses equal the cold job's bit for bit. `diverge`
passes when every rank raised RankDivergence within the timeout, naming every rank.

Writes OUT/multi_rank.json after each scenario and OUT/multi_rank.txt at the end; each rank's
events go to OUT/multi_rank_runs/SCENARIO.MODE.rankR.jsonl as they happen.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import statistics
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Callable, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer, free_port, script_parser  # noqa: E402
from train_models import _num, compiles_in, counter_delta, scrape  # noqa: E402
from worker_process import event_log, record_kiln_log, run_worker  # noqa: E402

STEPS = 20
NPROC = 2
TIMEOUT_S = 420.0
TOLERANCE = 1e-4  # fp32, relative to eager's first loss (train_models.py says why)
STEADY_FROM = 5
OUTPUT_TAIL = 3000
RUNS_DIR = "multi_rank_runs"
TRAINING_MODES = ("eager", "kiln", "kiln_warm")
PROCESS_GROUPS = ("auto", "nccl", "gloo")


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    diverges: bool = False

    @property
    def modes(self) -> tuple[str, ...]:
        return ("kiln",) if self.diverges else TRAINING_MODES


SCENARIOS = (
    Scenario("ddp_gpt2", "HF GPT-2 (2 layers) under DistributedDataParallel"),
    Scenario("functional", "all_reduce and an all-gather (under Gloo an all_reduce) in the "
             "compiled forward"),
    Scenario("diverge", "DDP MLP whose batch depends on the rank", diverges=True),
)


# --- one rank -------------------------------------------------------------------------------


def rank_main(scenario_name: str, mode: str, steps: int, runs_dir: pathlib.Path,
              process_group: str) -> int:
    """One rank of a job, under torchrun: trains, appending events to its own file."""
    rank = int(os.environ["RANK"])
    path = runs_dir / f"{scenario_name}.{mode}.rank{rank}.jsonl"
    with event_log(path) as write_event:
        try:
            train(scenario_name, mode, steps, rank, process_group, write_event)
            return 0
        except Exception as e:  # the runner reads why from the events
            cause = root_cause(e)
            write_event(event="error", type=type(cause).__name__, error=str(cause)[:4000],
                        raised=type(e).__name__, trace=traceback.format_exc()[-OUTPUT_TAIL:])
            return 1


def root_cause(error: BaseException) -> BaseException:
    """The exception a backend raised, out of Dynamo's BackendCompilerFailed (which keeps it
    as inner_exception and __cause__): what a trainer catching it would look at."""
    seen = set()
    while id(error) not in seen:
        seen.add(id(error))
        inner = getattr(error, "inner_exception", None) or error.__cause__
        if inner is None:
            break
        error = inner
    return error


def build(scenario_name: str, rank: int, world_size: int,
          backend: str) -> tuple[Any, list, Callable]:
    """The scenario's module (wrapped as the scenario trains it), its example inputs and
    the loss of its output, for ranks talking through `backend`."""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    import capture_corpus as corpus

    def mean_square(out: Any) -> Any:
        return out if out.dim() == 0 else out.float().square().mean()

    device = torch.device("cuda", torch.cuda.current_device())
    if scenario_name == "ddp_gpt2":
        model, example = corpus.build_gpt2()
        ddp = nn.parallel.DistributedDataParallel(model.to(device), device_ids=[device.index])
        return ddp, example, mean_square
    if scenario_name == "functional":
        import torch.distributed as dist
        import torch.distributed._functional_collectives as fc

        class Sharded(nn.Module):
            """Each rank's partial product summed across ranks, then the ranks' rows gathered:
            the collectives sit between kernels in the forward and in the backward."""

            def __init__(self) -> None:
                super().__init__()
                self.up = nn.Linear(256, 512)
                self.down = nn.Linear(512, 256)
                self.register_buffer("place", F.one_hot(torch.tensor(rank), world_size).float())

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                h = F.gelu(self.up(x))
                partial = fc.all_reduce(self.down(h), "sum", dist.group.WORLD)
                rows = self.gather(partial)
                return F.layer_norm(rows, rows.shape[-1:]).square().mean()

            def gather(self, partial: torch.Tensor) -> torch.Tensor:
                if backend != "gloo":
                    return fc.all_gather_tensor(partial, 0, dist.group.WORLD)
                placed = self.place[:, None, None] * partial[None]  # zeros but this rank's
                return fc.all_reduce(placed.flatten(0, 1), "sum", dist.group.WORLD)

        return Sharded().to(device), [torch.randn(16, 256, device=device)], mean_square
    if scenario_name == "diverge":
        model, _ = corpus.build_mlp()
        ddp = nn.parallel.DistributedDataParallel(model.to(device), device_ids=[device.index])
        # A rank-dependent batch: the ranks' first graphs differ in a static size.
        return ddp, [torch.randn(8 + rank, 16, 64, device=device)], mean_square
    raise ValueError(f"unknown scenario {scenario_name}")


def placement(process_group: str, local_rank: int, local_world_size: int,
              gpus: int) -> tuple[int, str]:
    """This rank's GPU and process-group backend: its own GPU and NCCL when there are enough
    for every rank on the node, else GPU local_rank mod `gpus` and Gloo (`auto`); a backend
    asked for by name is taken as asked, NCCL only where it can work."""
    if gpus < 1:
        raise RuntimeError("no CUDA device is visible to this rank")
    own = gpus >= local_world_size
    backend = process_group if process_group != "auto" else ("nccl" if own else "gloo")
    if backend == "nccl" and not own:
        raise ValueError(f"NCCL needs a GPU for each of the {local_world_size} ranks on this "
                         f"node and {gpus} are visible; use --process-group gloo or auto")
    return local_rank % gpus, backend


def train(scenario_name: str, mode: str, steps: int, rank: int, process_group: str,
          write_event: Callable[..., None]) -> None:
    import time

    import torch
    import torch.distributed as dist

    record_kiln_log(write_event)
    from train_models import fresh_like  # imports capture_corpus, which imports kiln

    gpu, backend = placement(process_group, int(os.environ["LOCAL_RANK"]),
                             int(os.environ["LOCAL_WORLD_SIZE"]), torch.cuda.device_count())
    torch.cuda.set_device(gpu)
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=torch.device("cuda", gpu))
    else:
        dist.init_process_group(backend)
    try:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.manual_seed(0)  # the same initial weights on every rank
        model, example, loss_of = build(scenario_name, rank, dist.get_world_size(), backend)
        torch.manual_seed(1000 + rank)  # each rank its own batches
        batches = [[fresh_like(x) for x in example] for _ in range(steps)]
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        run = model if mode == "eager" else torch.compile(model, backend="kiln")
        write_event(event="start", rank=rank, world_size=dist.get_world_size(),
                    job_id=os.environ.get("TORCHELASTIC_RUN_ID", ""), gpu=gpu,
                    process_group=backend)
        for step, batch in enumerate(batches, 1):
            torch.cuda.synchronize()
            start = time.perf_counter()
            opt.zero_grad()
            loss = loss_of(run(*batch))
            loss.backward()
            opt.step()
            value = loss.item()
            torch.cuda.synchronize()
            write_event(event="step", step=step, loss=value,
                        seconds=time.perf_counter() - start)
        write_event(event="done", device=torch.cuda.get_device_name())
    finally:
        dist.destroy_process_group()


# --- the runner's reading of a job ----------------------------------------------------------

ANSWER = re.compile(r"graph (\S+ \S+): (\w+), key (\w+), artifact (\w*), trace \w+")
RUNNER = re.compile(r"graph (\S+ \S+) runs (on Kiln's runtime|eagerly|with \w+)")


def read_rank(path: pathlib.Path) -> dict:
    """One rank's record: its losses, its GPU and process-group backend, first and median
    step times, kilnd's answer for each graph (outcome, compile key, artifact hash), where
    each graph ran, and its error."""
    events = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:  # a line cut short by a kill
                pass
    steps = [e for e in events if e["event"] == "step"]
    seconds = [e["seconds"] for e in steps]
    answers, runners = {}, {}
    for e in events:
        if e["event"] != "log":
            continue
        if m := ANSWER.match(e["message"]):
            answers[m.group(1)] = {"outcome": m.group(2), "key": m.group(3),
                                   "artifact": m.group(4)}
        if m := RUNNER.match(e["message"]):
            runners[m.group(1)] = "kiln" if m.group(2) == "on Kiln's runtime" else m.group(2)
    error = next((e for e in events if e["event"] == "error"), None)
    start = next((e for e in events if e["event"] == "start"), {})
    return {"losses": [e["loss"] for e in steps],
            "gpu": start.get("gpu"), "process_group": start.get("process_group"),
            "first_step_s": seconds[0] if seconds else None,
            "median_step_ms": (statistics.median(seconds[STEADY_FROM - 1:]) * 1e3
                               if len(seconds) >= STEADY_FROM else None),
            "answers": answers, "runners": runners,
            "done": any(e["event"] == "done" for e in events),
            "error": None if error is None else {"type": error.get("type", ""),
                                                 "message": error.get("error", "")}}


def judge_training(ranks: dict[str, list[dict]], servers: dict[str, Optional[dict]],
                   steps: int) -> dict:
    """A training scenario's verdict from each mode's ranks (TRAINING_MODES) and kilnd's
    counter changes over each job; `reasons` says what failed."""
    reasons = []
    for mode, records in ranks.items():
        for r, record in enumerate(records):
            if not record["done"] or len(record["losses"]) != steps:
                why = record["error"]["message"].split("\n")[0][:300] if record["error"] else \
                    f"{len(record['losses'])} of {steps} steps"
                reasons.append(f"{mode} rank {r} did not finish: {why}")
    worst = 0.0
    for r, (eager, kiln) in enumerate(zip(ranks["eager"], ranks["kiln"])):
        if eager["losses"] and kiln["losses"]:
            first = max(abs(eager["losses"][0]), 1e-12)
            diff = max(abs(a - b) / first for a, b in zip(eager["losses"], kiln["losses"]))
            worst = max(worst, diff)
            if diff > TOLERANCE:
                reasons.append(f"rank {r}: kiln's loss differs from eager's by {diff:.2e} "
                               f"of the first loss (allowed {TOLERANCE:g})")
    graphs = set()
    for mode in ("kiln", "kiln_warm"):
        records = ranks[mode]
        for r, record in enumerate(records):
            fallen = {g: how for g, how in record["runners"].items() if how != "kiln"}
            if fallen:
                reasons.append(f"{mode} rank {r}: {len(fallen)} graph(s) did not run on "
                               f"Kiln's runtime, e.g. {next(iter(fallen.items()))}")
            if not record["answers"] and record["done"]:
                reasons.append(f"{mode} rank {r}: kilnd answered no graph")
        names = set().union(*(record["answers"] for record in records))
        for name in sorted(names):
            artifacts = {record["answers"].get(name, {}).get("artifact") for record in records}
            if len(artifacts) != 1 or None in artifacts:
                reasons.append(f"{mode}: graph {name} got different artifacts on the ranks: "
                               f"{sorted(map(str, artifacts))}")
        if mode == "kiln":
            graphs = {record["answers"][n]["key"] for record in records
                      for n in record["answers"]}
    cold, warm = compiles_in(servers.get("kiln")), compiles_in(servers.get("kiln_warm"))
    if cold is None or warm is None:
        reasons.append("kilnd's counters could not be read")
    else:
        if cold != len(graphs):
            reasons.append(f"kilnd compiled {cold:g} times for {len(graphs)} distinct graph(s) "
                           f"sent by {len(ranks['kiln'])} ranks (one compile each expected)")
        if warm:
            reasons.append(f"kilnd compiled {warm:g} times for the warm job (none expected)")
    for r, (kiln, again) in enumerate(zip(ranks["kiln"], ranks["kiln_warm"])):
        if kiln["losses"] and again["losses"] and kiln["losses"] != again["losses"]:
            reasons.append(f"rank {r}: the warm job's losses differ from the cold job's")
    return {"pass": not reasons, "reasons": reasons, "max_rel": worst,
            "graphs": len(graphs), "compiles": {"kiln": cold, "kiln_warm": warm}}


def judge_divergence(records: list[dict], world_size: int) -> dict:
    """`diverge`: every rank raised RankDivergence, and each message names every rank."""
    reasons = []
    for r, record in enumerate(records):
        error = record["error"]
        if error is None or error["type"] != "RankDivergence":
            got = f"{error['type']}: {error['message'][:200]}" if error else \
                f"no exception after {len(record['losses'])} steps"
            reasons.append(f"rank {r} did not raise RankDivergence ({got})")
            continue
        # Ranks are named in lists: "ranks [0,2] sent key ...".
        named = {int(k) for group in re.findall(r"\[([\d, ]+)\]", error["message"])
                 for k in group.split(",") if k.strip()}
        unnamed = [str(k) for k in range(world_size) if k not in named]
        if unnamed:
            reasons.append(f"rank {r}'s RankDivergence does not name rank(s) "
                           f"{', '.join(unnamed)}: {error['message'][:300]}")
    return {"pass": not reasons, "reasons": reasons,
            "messages": [(r["error"] or {}).get("message", "")[:1000] for r in records]}


# --- the runner -----------------------------------------------------------------------------


def run_job(scenario: Scenario, mode: str, steps: int, nproc: int, process_group: str,
            server: KilnServer, out: pathlib.Path,
            timeout: float) -> tuple[list[dict], Optional[dict], dict]:
    """One torchrun job of `nproc` ranks: each rank's record, kilnd's counter changes over
    the job, and torchrun's exit (returncode, output tail, timed out)."""
    runs_dir = out / RUNS_DIR
    runs_dir.mkdir(parents=True, exist_ok=True)
    for r in range(nproc):
        (runs_dir / f"{scenario.name}.{mode}.rank{r}.jsonl").write_text("")
    job_id = f"{scenario.name}-{mode}-{os.getpid()}"
    before = scrape(server)
    result = run_worker(
        ["-m", "torch.distributed.run", f"--nproc-per-node={nproc}", "--rdzv-backend=c10d",
         f"--rdzv-endpoint=127.0.0.1:{free_port()}", f"--rdzv-id={job_id}",
         str(pathlib.Path(__file__).resolve()), "--rank-worker", scenario.name, mode,
         str(steps), str(runs_dir), process_group], server.env, timeout)
    delta = counter_delta(before, scrape(server))
    records = [read_rank(runs_dir / f"{scenario.name}.{mode}.rank{r}.jsonl")
               for r in range(nproc)]
    return records, delta, {"returncode": result.returncode,
                            "timed_out_after": result.timed_out_after,
                            "seconds": round(result.seconds, 1),
                            "output_tail": result.output[-OUTPUT_TAIL:]}


def table(rows: list[dict]) -> str:
    lines = []
    for row in rows:
        lines.append(f"{row['scenario']}: {'pass' if row['pass'] else 'FAIL'} "
                     f"({row['description']})")
        if "max_rel" in row:
            compiles = row["compiles"]
            lines.append(f"  graphs {row['graphs']}, kilnd compiles cold "
                         f"{_num(compiles['kiln'], 'g')} / warm {_num(compiles['kiln_warm'], 'g')}"
                         f", max |dloss| vs eager {row['max_rel']:.2e} of the first loss")
        for mode, records in row["ranks"].items():
            for r, record in enumerate(records):
                lines.append(f"  {mode:<9} rank {r} (GPU {_num(record['gpu'], 'd')}, "
                             f"{record['process_group'] or '-'}): first step "
                             f"{_num(record['first_step_s'], '.2f')} s, median "
                             f"{_num(record['median_step_ms'], '.1f')} ms, "
                             f"{len(record['losses'])} steps, graphs {len(record['answers'])}")
        if "max_rel" in row and len(row["ranks"]["kiln"]) > 1:
            firsts = {mode: row["ranks"][mode][1]["first_step_s"] for mode in TRAINING_MODES}
            lines.append(f"  rank 1's first step: eager {_num(firsts['eager'], '.2f')} s, kiln "
                         f"against the empty store {_num(firsts['kiln'], '.2f')} s, against "
                         f"the store the first job filled {_num(firsts['kiln_warm'], '.2f')} s")
        for message in row.get("messages", []):
            lines.append(f"  raised: {message.splitlines()[0][:200] if message else '-'}")
        lines += [f"  - {reason}" for reason in row["reasons"]]
    passed = sum(row["pass"] for row in rows)
    lines.append(f"{passed} of {len(rows)} scenarios pass")
    return "\n".join(lines) + "\n"


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--rank-worker"]:  # under torchrun: SCENARIO MODE STEPS RUNS_DIR PG
        name, mode, steps, runs_dir, process_group = argv[1:]
        return rank_main(name, mode, int(steps), pathlib.Path(runs_dir), process_group)
    parser = script_parser()
    parser.add_argument("--only", default="", help="scenarios, comma-separated")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--nproc", type=int, default=NPROC)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S)
    parser.add_argument("--process-group", choices=PROCESS_GROUPS, default="auto",
                        help="the ranks' backend: NCCL when each has a GPU (auto), or Gloo")
    args = parser.parse_args(argv)
    names = [n for n in args.only.split(",") if n]
    unknown = set(names) - {s.name for s in SCENARIOS}
    if unknown:
        parser.error(f"unknown scenario(s) {', '.join(sorted(unknown))}")
    if args.steps < STEADY_FROM or args.nproc < 2:
        parser.error(f"--steps must be at least {STEADY_FROM} and --nproc at least 2")
    scenarios = [s for s in SCENARIOS if not names or s.name in names]
    report: dict = {"steps": args.steps, "nproc": args.nproc, "scenarios": []}
    with KilnServer(args.bundle, args.out) as server:
        for scenario in scenarios:
            ranks, servers, jobs = {}, {}, {}
            for mode in scenario.modes:
                ranks[mode], servers[mode], jobs[mode] = run_job(
                    scenario, mode, args.steps, args.nproc, args.process_group, server,
                    args.out, args.timeout)
            if scenario.diverges:
                row = judge_divergence(ranks["kiln"], args.nproc)
            else:
                row = judge_training(ranks, servers, args.steps)
            row.update(scenario=scenario.name, description=scenario.description, ranks=ranks,
                       servers=servers, jobs=jobs)
            report["scenarios"].append(row)
            (args.out / "multi_rank.json").write_text(json.dumps(report, indent=1))
            print(table([row]), end="", flush=True)
    text = table(report["scenarios"])
    (args.out / "multi_rank.txt").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
