"""Real models trained for 50 AdamW steps with torch.compile(backend="kiln"), against eager
PyTorch, on a GPU machine.

Run from the repository root after `deploy/gpu-bundle.sh .bundle` (carried with the tree):

    python3 tests/gpu/train_models.py --bundle .bundle --out $OUT [--only NAME,...] [--steps 50]

The models are an MLP, nanoGPT, GPT-2 (transformers, SDPA attention; small, and at its
published 124M size), a Llama decoder (transformers LlamaForCausalLM: RMSNorm, RoPE,
grouped-query attention, SiLU-gated MLP), ResNet-18 (torchvision, batch norm in training) and
ViT-Tiny (timm, depth 4, 32x32 images, patch 8), from random initial weights, dropout off.
capture_corpus.py's builders make them at the corpus's sizes: where the corpus holds the same
configuration, run_corpus.py narrows a failure here down to a graph and a step. Each trains in
fp32 and under bf16 autocast: fourteen configurations named MODEL_fp32 and MODEL_bf16. `--only` takes configurations or models (`gpt2_fp32,vit`);
`--only gpt2_fp32 --steps 5` is a quick run for debugging.

Per configuration, two fresh processes train it, one eagerly and one through the kiln
backend (kilnd started from the bundle, with an empty cache), with the same seed: the same
initial weights, and the same batches, a new one each step, drawn before training in the
shape and value range of the builder's example inputs. Each process appends its events to
OUT/train_models_runs/CONFIG.MODE.jsonl as they happen (every step's loss and time, the
"kiln" logger's lines, warnings), so a run that crashes or overruns --timeout (240 s;
then its process group is killed) still says how far it got; its output's tail is kept.
Recorded per configuration: each side's losses, the largest absolute and relative loss
difference against eager, the first step's time (tracing and compiling included) and the
median step time from step 10 on, the graphs that ran on Kiln's runtime and those that fell
back with the backend's reason, Dynamo's graphs and graph breaks, the change in kilnd's
compile counters over each process, and the first step's gradients against eager's,
parameter by parameter (|g - g_eager| / |g_eager|: a wrong gradient shows there at once,
while losses only drift from the second step on). With --yardstick, Inductor trains each
configuration too, and its loss difference from eager is recorded beside Kiln's.

A configuration passes when both processes finished every step with finite losses, the kiln
loss is within the tolerance of eager's at every step, relative to eager's, and every graph
ran on Kiln's runtime (none fell back); `losses_match` alone says whether the losses did.
With --yardstick, a loss within 3x Inductor's own difference from eager passes too: some
models (ResNet-18 with batch norm over 4 images) carry a last-bit difference in the first
step's gradients to percent-level loss differences within a few AdamW steps, whichever valid
compiler made it.
Differences are relative to eager's first loss (a loss falling towards zero would make a
difference relative to each step's loss meaningless):
  fp32: 1e-4. TF32 is off in every process and cuDNN deterministic, so all compute in
    float32 and differ only in reduction order and where a fused kernel keeps a value in
    registers: in the last bits at the first step. AdamW divides each update by the root of
    the gradient's squared average, so a parameter whose gradient is near zero takes a
    full-sized update from a tiny difference, and differences grow over the steps; 1e-4 leaves room for that over 50 steps, while a
    wrong kernel moves the loss by far more.
  bf16 autocast: 1e-2. Eager rounds every intermediate to bf16 (8 bits of mantissa, about
    4e-3 relative) between its kernels, while Kiln's fused kernels compute in fp32 and round
    where a value leaves the kernel: both are valid autocast results, apart by bf16 rounding
    from the first step, and AdamW amplifies that difference as above.

Writes OUT/train_models.json (after each configuration, so an interrupted run keeps what it
finished) and OUT/train_models.txt, a table that is also printed at the end. A configuration
that fails, crashes or hangs is a row of the report, never an exception; the exit status is
0 either way.
"""

from __future__ import annotations

import json
import math
import pathlib
import re
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer, script_parser  # noqa: E402
from worker_process import logged, record_kiln_log, run_worker  # noqa: E402

# Relative loss difference against eager that passes, by precision (the module's docstring
# says why these values).
TOLERANCE = {"fp32": 1e-4, "bf16": 1e-2}
STEPS = 50
TIMEOUT_S = 240.0
# Step times from this step on (1-based) are the steady ones: compilation and warm-up are over.
STEADY_FROM = 10
OUTPUT_TAIL = 3000
MODES = ("eager", "kiln")
# With --warm, a second kiln process trains each configuration against the kilnd the first
# one filled: it must compile nothing (hits only) and lose exactly what the first one did.
WARM = "kiln_warm"
# With --yardstick, Inductor (torch.compile's default backend) trains each configuration too:
# how far a compiler PyTorch trusts lands from eager on the same model, steps and data.
YARDSTICK = "inductor"
# A kiln run within this factor of Inductor's own loss difference passes even past the
# tolerance: PyTorch's factor for judging a compiler against eager (torch._dynamo.utils.same).
YARDSTICK_FACTOR = 3.0
RUNS_DIR = "train_models_runs"


@dataclass(frozen=True)
class Model:
    """A model family: `builder` names a capture_corpus function returning (module whose
    forward returns the loss or a tensor, example inputs), called with `args` and `kwargs`."""

    name: str
    builder: str
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    lr: float = 1e-3

    def build(self, corpus: Any) -> tuple:
        return getattr(corpus, self.builder)(*self.args, **self.kwargs)


@dataclass(frozen=True)
class TrainConfig:
    """One model in one precision: "fp32", or "bf16" (bf16 autocast)."""

    name: str
    model: Model
    dtype: str


MODELS = (
    Model("mlp", "build_mlp"),
    Model("nanogpt", "build_nanogpt"),
    Model("gpt2", "build_gpt2"),
    # At 1e-3 without warm-up, 124M parameters on random tokens are unstable: the loss climbs
    # from step 10 on and any two valid compilers' runs drift apart (Inductor's by 8e-4 of the
    # first loss, from first-step gradients equal to 1.5e-6). 1e-4 trains it.
    Model("gpt2_124m", "build_gpt2_124m", lr=1e-4),
    Model("llama", "build_llama"),
    # Batch norm over 4 images at 1e-3 carries last-bit differences of the first step's
    # gradients (7e-6 relative, Inductor's alike) to percent-level loss differences within a
    # few steps, whichever valid compiler made them: 32 images at 1e-4 is a configuration
    # whose losses say something about the compiler.
    Model("resnet18", "build_resnet18", (32,), lr=1e-4),
    Model("vit", "build_timm", ("vit_tiny_patch16_224", 32),
          {"img_size": 32, "patch_size": 8, "depth": 4}),
)
CONFIGS = tuple(TrainConfig(f"{m.name}_{dtype}", m, dtype) for m in MODELS
                for dtype in ("fp32", "bf16"))


# --- the training process ------------------------------------------------------------------


def worker(name: str, mode: str, steps: int, events_path: pathlib.Path) -> int:
    """Trains configuration `name` for `steps` steps in this process, eagerly or through the
    kiln backend (`mode`), appending one JSON object a line to `events_path` as things
    happen. Returns 1 when training raised (the exception is an event too)."""
    def body(write_event: Callable[..., None]) -> None:
        config = next(c for c in CONFIGS if c.name == name)
        train(config, mode, steps, write_event, grads_path_of(events_path))

    return logged(events_path, body, OUTPUT_TAIL)


def train(config: TrainConfig, mode: str, steps: int, write_event: Callable[..., None],
          grads_path: Optional[pathlib.Path] = None) -> None:
    """The training loop every mode shares; only `run` differs between them. The first
    step's gradients go to `grads_path` when given."""
    import random
    import warnings

    import torch

    record_kiln_log(write_event)
    import capture_corpus as corpus  # imports kiln, which registers the backend

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    # Full float32 on both sides (see the module's docstring).
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    # cuDNN's fastest convolution backward kernels sum in an order that changes between
    # runs: deterministic ones let a warm run's losses equal the cold run's bit for bit.
    torch.backends.cudnn.deterministic = True
    torch.backends.cudnn.benchmark = False
    random.seed(0)
    torch.manual_seed(0)
    model, example = config.model.build(corpus)
    model = model.to(corpus.DEVICE).train()
    batches = [[fresh_like(x) for x in example] for _ in range(steps)]
    opt = torch.optim.AdamW(model.parameters(), lr=config.model.lr)
    if mode == "eager":
        run = model
    else:
        run = torch.compile(model, backend="kiln" if mode in ("kiln", WARM) else mode)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        seen: set = set()

        def report_warnings() -> None:
            for w in caught:
                message = f"{w.category.__name__}: {w.message}"[:500]
                if message not in seen:
                    seen.add(message)
                    write_event(event="warning", message=message)
            caught.clear()

        try:
            for step, batch in enumerate(batches, 1):
                torch.cuda.synchronize()
                start = time.perf_counter()
                loss = backward_step(run, batch, opt, corpus.autocast(config.dtype))
                if step == 1 and grads_path is not None:
                    # The first step's gradients, before any update: the runner compares them
                    # with eager's parameter by parameter (a wrong gradient shows here, while
                    # the losses only drift from the second step on).
                    torch.save({n: p.grad.detach().float().cpu() for n, p in
                                model.named_parameters() if p.grad is not None}, grads_path)
                opt.step()
                value = loss.item()
                torch.cuda.synchronize()
                write_event(event="step", step=step, loss=value,
                            seconds=time.perf_counter() - start)
                report_warnings()
        finally:
            report_warnings()
    from torch._dynamo.utils import counters

    write_event(event="done", device=torch.cuda.get_device_name(), torch=torch.__version__,
                dynamo_graphs=counters["stats"]["unique_graphs"],
                graph_breaks=sum(counters["graph_break"].values()))


def grads_path_of(events_path: pathlib.Path) -> pathlib.Path:
    """Where a run's first-step gradients go: beside its events."""
    return events_path.with_name(events_path.name.replace(".jsonl", ".grads.pt"))


def gradient_errors(reference: pathlib.Path, other: pathlib.Path) -> Optional[dict]:
    """The first step's gradients of `other` against `reference`, parameter by parameter:
    |g - g_ref| / |g_ref| (2-norms), the worst parameter and the median. None when either
    file is missing (the run failed before its first backward) or torch is not here."""
    try:
        import torch
    except ImportError:
        return None
    if not reference.exists() or not other.exists():
        return None
    ref, got = torch.load(reference), torch.load(other)
    errors = {}
    for name, g in ref.items():
        if name not in got or got[name].shape != g.shape:
            errors[name] = math.inf
            continue
        norm = float(g.norm())
        diff = float((got[name] - g).norm())
        errors[name] = diff / norm if norm > 0 else (0.0 if diff == 0 else math.inf)
    if not errors:
        return None
    worst = max(errors, key=errors.__getitem__)
    return {"worst_param": worst, "worst_rel": errors[worst],
            "median_rel": statistics.median(errors.values()), "params": len(errors),
            "by_param": {name: float(f"{e:.3g}") for name, e in errors.items()}}


def backward_step(run: Any, batch: list, opt: Any, autocast: Any,
                  marks: Optional[list[float]] = None) -> Any:
    """One training step up to the optimizer's: gradients zeroed, the forward under
    `autocast`, its loss and the backward. A model that returns no loss (the MLP) trains on
    its output's mean square. Returns the loss, not read back. `marks`, when given, gets the
    host's clock (time.perf_counter) as the forward and as the backward return."""
    opt.zero_grad()
    with autocast:
        out = run(*batch)
    if marks is not None:
        marks.append(time.perf_counter())
    loss = out if out.dim() == 0 else out.float().square().mean()
    loss.backward()
    if marks is not None:
        marks.append(time.perf_counter())
    return loss


def fresh_like(example: Any) -> Any:
    """A new batch input like the builder's `example`: floats from a normal distribution,
    integers (tokens, labels) uniform in the example's range, so indices stay in bounds."""
    import torch

    if example.dtype.is_floating_point:
        return torch.randn_like(example).requires_grad_(example.requires_grad)
    if example.dtype == torch.bool or example.numel() == 0:
        return example.clone()
    return torch.randint_like(example, int(example.min()), int(example.max()) + 1)


# --- reading a run and judging a configuration (no PyTorch) ---------------------------------

DECISION = re.compile(r"^graph (?P<graph>.+?) runs (?P<runner>on Kiln's runtime|eagerly|"
                      r"with inductor): (?P<reason>.*)$", re.DOTALL)
RUNNERS = {"on Kiln's runtime": "kiln", "eagerly": "eager", "with inductor": "inductor"}


def graph_runners(messages: list[str]) -> dict[str, dict]:
    """How each graph ran, from the "kiln" logger's lines: {graph: {"runner": "kiln" |
    "eager" | "inductor", "reason"}}. A graph's last line counts: one that kilnd compiled
    but Kiln's runtime could not load is logged twice, and runs per the fallback."""
    runners: dict[str, dict] = {}
    for message in messages:
        m = DECISION.match(message)
        if m:
            runners[m["graph"]] = {"runner": RUNNERS[m["runner"]], "reason": m["reason"]}
    return runners


def steady_median(seconds: list[float]) -> Optional[float]:
    """The median of the step times from step STEADY_FROM on; with fewer steps, of every
    step but the first (which compiles). None without a second step."""
    steady = seconds[STEADY_FROM - 1:] if len(seconds) >= STEADY_FROM else seconds[1:]
    return statistics.median(steady) if steady else None


def read_events(path: pathlib.Path) -> list[dict]:
    """A run's events; a line cut short by a killed process is skipped."""
    events = []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def summarize_run(events: list[dict], returncode: Optional[int], output: str,
                  timed_out_after: Optional[float], seconds: float, steps: int) -> dict:
    """One process's record: its losses, step times, where its graphs ran, its warnings,
    and, when it did not finish every step, why and the tail of its output."""
    step_events = [e for e in events if e.get("event") == "step"]
    times = [e["seconds"] for e in step_events]
    log = [e["message"] for e in events if e.get("event") == "log"]
    runners = graph_runners(log)
    done = next((e for e in events if e.get("event") == "done"), None)
    error = next((e for e in events if e.get("event") == "error"), None)
    median = steady_median(times)
    run: dict = {
        "completed": (done is not None and len(step_events) == steps and returncode == 0
                      and timed_out_after is None),
        "rc": returncode,
        "seconds": round(seconds, 2),
        "losses": [e["loss"] for e in step_events],
        "first_step_s": round(times[0], 3) if times else None,
        "median_step_ms": round(median * 1e3, 3) if median is not None else None,
        "step_ms": [round(t * 1e3, 3) for t in times],
        "graphs_on_kiln_runtime": sum(r["runner"] == "kiln" for r in runners.values()),
        "graphs_fallen_back": sum(r["runner"] != "kiln" for r in runners.values()),
        "graph_runners": runners,
        "warnings": [e["message"] for e in events if e.get("event") == "warning"],
        "kiln_log": log,
    }
    if done is not None:
        run.update({k: v for k, v in done.items() if k != "event"})
    if error is not None:
        run["error"], run["trace"] = error["error"], error["trace"]
    if not run["completed"]:
        if timed_out_after is not None:
            run["error"] = (f"timed out after {timed_out_after:g} s with {len(step_events)} "
                            f"of {steps} steps done")
        elif "error" not in run:
            run["error"] = (f"the process exited with {returncode} after {len(step_events)} "
                            f"of {steps} steps")
        run["output_tail"] = output[-OUTPUT_TAIL:]
    return run


def _worst(values: list[float]) -> tuple[float, int]:
    """The largest value (NaN counts as infinity) and its 1-based step."""
    values = [math.inf if math.isnan(v) else v for v in values]
    i = max(range(len(values)), key=values.__getitem__)
    return values[i], i + 1


def compare_losses(eager: list[float], kiln: list[float]) -> dict:
    """Kiln's losses against eager's over the steps both have: the largest absolute and
    relative (to eager's first loss) differences and their step, the last step's, and the first step
    whose loss is not finite on either side."""
    out: dict = {"steps": min(len(eager), len(kiln))}
    for side, losses in (("eager", eager), ("kiln", kiln)):
        bad = next((i + 1 for i, x in enumerate(losses) if not math.isfinite(x)), None)
        if bad is not None:
            out[f"{side}_nonfinite_step"] = bad
    if not out["steps"]:
        return out
    absolute = [abs(k - e) for e, k in zip(eager, kiln)]
    first = max(abs(eager[0]), 1e-12)
    relative = [d / first for d in absolute]
    out["max_abs"], _ = _worst(absolute)
    out["max_rel"], out["worst_step"] = _worst(relative)
    out["final_abs"], out["final_rel"] = _worst(absolute[-1:])[0], _worst(relative[-1:])[0]
    return out


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0][:300]


def judge(config: TrainConfig, eager: dict, kiln: dict, steps: int,
          yardstick: Optional[dict] = None) -> dict:
    """A configuration's row of the report: pass when both runs finished with finite losses
    within the tolerance (or, given Inductor's run as a `yardstick`, within YARDSTICK_FACTOR
    of its difference from eager) and every graph ran on Kiln's runtime; `reasons` says what
    failed."""
    tolerance = TOLERANCE[config.dtype]
    comparison = compare_losses(eager["losses"], kiln["losses"])
    allowed = tolerance
    yardstick_comparison = None
    if yardstick is not None and yardstick["completed"]:
        yardstick_comparison = compare_losses(eager["losses"], yardstick["losses"])
        if yardstick_comparison["steps"] == steps:
            allowed = max(tolerance,
                          YARDSTICK_FACTOR * yardstick_comparison.get("max_rel", 0.0))
    reasons = [f"{side}: {_first_line(run['error'])}"
               for side, run in (("eager", eager), ("kiln", kiln)) if not run["completed"]]
    for side in MODES:
        step = comparison.get(f"{side}_nonfinite_step")
        if step is not None:
            reasons.append(f"{side} loss is not finite at step {step}")
    losses_match = (eager["completed"] and kiln["completed"] and comparison["steps"] == steps
                    and comparison.get("max_rel", math.inf) <= allowed)
    if comparison.get("max_rel", 0.0) > allowed:
        reasons.append(f"loss differs from eager by {comparison['max_rel']:.2e} relative at step "
                       f"{comparison['worst_step']} (allowed {allowed:.2g})")
    if kiln["losses"]:
        runners = kiln["graph_runners"]
        fallen = [(g, r) for g, r in runners.items() if r["runner"] != "kiln"]
        if fallen:
            graph, runner = fallen[0]
            reasons.append(f"{len(fallen)} of {len(runners)} graphs fell back, e.g. {graph} ran "
                           f"{runner['runner']}: {runner['reason'][:300]}")
        elif not runners:
            reasons.append("no graph ran on Kiln's runtime (the backend logged none)")
    return {"config": config.name, "model": config.model.name, "dtype": config.dtype,
            "tolerance": tolerance, "pass": losses_match and not reasons,
            "losses_match": losses_match, "reasons": reasons, "comparison": comparison,
            "yardstick": yardstick_comparison, "eager": eager, "kiln": kiln}


def compiles_in(delta: Optional[dict]) -> Optional[float]:
    """The compiles kilnd ran (any result) in a change of its counters; None without one."""
    if delta is None:
        return None
    return sum(v for k, v in delta.items() if k.startswith("kiln_compiles_total."))


def judge_warm(row: dict, warm: dict, steps: int) -> dict:
    """Adds the warm run to a configuration's row: it passes when it finished every step,
    kilnd compiled nothing for it (every request a hit) and its losses equal the cold kiln
    run's bit for bit (the same artifacts on the same inputs); `row["pass"]` then needs it."""
    cold = row["kiln"]
    reasons = []
    if not warm["completed"]:
        reasons.append(f"warm: {_first_line(warm.get('error', 'did not finish'))}")
    delta = warm.get("server")
    compiles = compiles_in(delta)
    misses = None if delta is None else sum(
        v for k, v in delta.items()
        if k.startswith("kiln_compile_requests_total.") and not k.endswith(".hit"))
    if compiles is None:
        reasons.append("warm: kilnd's counters could not be read")
    elif compiles or misses:
        reasons.append(f"warm: kilnd compiled {compiles:g} graph(s) and answered {misses:g} "
                       "request(s) other than with a hit")
    n = min(len(cold["losses"]), len(warm["losses"]))
    differing = [i + 1 for i in range(n) if cold["losses"][i] != warm["losses"][i]]
    if warm["completed"] and (n < steps or differing):
        reasons.append(f"warm: losses differ from the cold kiln run's from step "
                       f"{differing[0] if differing else n + 1}")
    row["warm"] = {"compiles": compiles, "non_hits": misses, "differing_steps": len(differing),
                   "run": warm, "pass": not reasons}
    row["reasons"] = row["reasons"] + reasons
    row["pass"] = row["pass"] and not reasons
    return row


def select(only: str) -> list[TrainConfig]:
    """The configurations `only` names (configurations or models, comma-separated; all when
    empty). Raises ValueError naming any name that is neither."""
    names = [n.strip() for n in only.split(",") if n.strip()]
    if not names:
        return list(CONFIGS)
    known = {c.name for c in CONFIGS} | {m.name for m in MODELS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown configuration {', '.join(unknown)}; known: "
                         f"{', '.join(sorted(known))}")
    return [c for c in CONFIGS if c.name in names or c.model.name in names]


def counter_delta(before: Optional[dict], after: Optional[dict]) -> Optional[dict]:
    """kilnd's counters that changed over a run; None when either scrape failed."""
    if before is None or after is None:
        return None
    return {k: after.get(k, 0) - before.get(k, 0) for k in sorted(after)
            if after.get(k, 0) != before.get(k, 0)}


def _num(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _counters(delta: Optional[dict]) -> str:
    if delta is None:
        return "(no metrics)"
    short = {"kiln_compile_requests_total.": "requests.", "kiln_compiles_total.": "compiles."}
    parts = []
    for key, value in delta.items():
        for prefix, name in short.items():
            key = key.replace(prefix, name)
        parts.append(f"{key}={value:g}")
    return " ".join(parts) or "-"


TABLE_HEADER = (f"{'config':<15} {'result':<6} {'steps':>5} {'max|dloss|':>10} "
                f"{'max rel':>9} {'ind rel':>9} {'grad err':>9} {'tol':>6} {'kiln/fell':>9} {'1st step s e/k':>15} "
                f"{'median ms e/k':>15}  kilnd (kiln run)")


def table_row(row: dict) -> str:
    """A configuration's line of the table: the loss comparison, the graphs that ran on
    Kiln's runtime and fell back, eager's and Kiln's first and median step times, and
    kilnd's counters over the kiln run."""
    c, e, k = row["comparison"], row["eager"], row["kiln"]
    return (f"{row['config']:<15} {'pass' if row['pass'] else 'FAIL':<6} {c['steps']:>5} "
            f"{_num(c.get('max_abs'), '.2e'):>10} {_num(c.get('max_rel'), '.2e'):>9} "
            f"{_num((row.get('yardstick') or {}).get('max_rel'), '.2e'):>9} "
            f"{_num(((row.get('gradients') or {}).get('kiln') or {}).get('worst_rel'), '.2e'):>9} "
            f"{row['tolerance']:>6g} "
            f"{k['graphs_on_kiln_runtime']:>4}/{k['graphs_fallen_back']:<4} "
            f"{_num(e['first_step_s'], '.2f'):>7}/{_num(k['first_step_s'], '.2f'):<7} "
            f"{_num(e['median_step_ms'], '.2f'):>7}/{_num(k['median_step_ms'], '.2f'):<7}  "
            f"{_counters(k.get('server'))}{_warm(row.get('warm'))}")


def _warm(warm: Optional[dict]) -> str:
    """The warm run's part of a row: its first step and what kilnd did for it."""
    if warm is None:
        return ""
    first = _num(warm["run"]["first_step_s"], ".2f")
    return (f"; warm {'pass' if warm['pass'] else 'FAIL'}: 1st step {first} s, "
            f"compiles {_num(warm['compiles'], 'g')}, differing steps {warm['differing_steps']}")


def table(rows: list[dict]) -> str:
    """The report for a reader: one line per configuration, then what failed and why."""
    lines = [TABLE_HEADER, "-" * len(TABLE_HEADER)] + [table_row(row) for row in rows]
    passed = sum(row["pass"] for row in rows)
    lines.append(f"{passed} of {len(rows)} configurations pass")
    for row in rows:
        for reason in row["reasons"]:
            lines.append(f"  {row['config']}: {reason}")
        for backend, comparison in (row.get("also") or {}).items():
            grads = (row.get("gradients") or {}).get(backend) or {}
            lines.append(f"  {row['config']} with {backend}: max rel "
                         f"{_num(comparison.get('max_rel'), '.2e')}, first-step gradients "
                         f"{_num(grads.get('worst_rel'), '.2e')} worst / "
                         f"{_num(grads.get('median_rel'), '.2e')} median")
    return "\n".join(lines) + "\n"


# --- the runner ----------------------------------------------------------------------------


def scrape(server: KilnServer) -> Optional[dict]:
    """kilnd's counters, or None when kilnd does not answer (a report is still written)."""
    try:
        return server.metrics()
    except OSError:
        return None


def run_process(config: TrainConfig, mode: str, steps: int, timeout: float,
                server: KilnServer, out: pathlib.Path) -> dict:
    """Trains `config` in a fresh process (its own process group, killed whole at the
    timeout) and returns the run's record, with kilnd's counter changes over it."""
    events_path = out / RUNS_DIR / f"{config.name}.{mode}.jsonl"
    events_path.parent.mkdir(parents=True, exist_ok=True)
    events_path.write_text("")
    before = scrape(server)
    result = run_worker([str(pathlib.Path(__file__).resolve()), "--worker", config.name, mode,
                         str(steps), str(events_path)], server.env, timeout)
    run = summarize_run(read_events(events_path), result.returncode, result.output,
                        result.timed_out_after, result.seconds, steps)
    run["server"] = counter_delta(before, scrape(server))
    if server.process is not None and server.process.poll() is not None:
        run["kilnd_exited"] = server.process.returncode
    return run


def write_report(report: dict, out: pathlib.Path) -> None:
    (out / "train_models.json").write_text(json.dumps(report, indent=1))


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # the runner's own call: CONFIG MODE STEPS EVENTS_PATH
        name, mode, steps, events_path = argv[1:]
        return worker(name, mode, int(steps), pathlib.Path(events_path))
    parser = script_parser()
    parser.add_argument("--only", default="",
                        help="configurations (gpt2_fp32) or models (gpt2), comma-separated")
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--yardstick", action="store_true",
                        help="also train with Inductor: how far PyTorch's compiler lands "
                             "from eager, and YARDSTICK_FACTOR times that passes")
    parser.add_argument("--also", default="",
                        help="other torch.compile backends to train each configuration with, "
                             "comma-separated (aot_eager: AOTAutograd's graphs run eagerly), "
                             "reported beside Kiln and not judged")
    parser.add_argument("--warm", action="store_true",
                        help="also train each configuration through kiln a second time, "
                             "against the cache the first run filled: hits only, same losses")
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S,
                        help="seconds each training process may take")
    args = parser.parse_args(argv)
    try:
        configs = select(args.only)
    except ValueError as e:
        parser.error(str(e))
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict = {"steps": args.steps, "tolerance": TOLERANCE, "timeout_s": args.timeout,
                    "configs": []}
    with KilnServer(args.bundle, args.out) as server:
        report["nvjitlink"] = server.nvjitlink
        for config in configs:
            also = tuple(b for b in args.also.split(",") if b and b not in MODES)
            modes = (MODES + ((WARM,) if args.warm else ()) +
                     ((YARDSTICK,) if args.yardstick else ()) + also)
            runs = {mode: run_process(config, mode, args.steps, args.timeout, server, args.out)
                    for mode in modes}
            row = judge(config, runs["eager"], runs["kiln"], args.steps, runs.get(YARDSTICK))
            if WARM in runs:
                judge_warm(row, runs[WARM], args.steps)
            row["also"] = {b: compare_losses(runs["eager"]["losses"], runs[b]["losses"])
                           for b in also}
            runs_dir = args.out / RUNS_DIR
            row["gradients"] = {
                mode: gradient_errors(grads_path_of(runs_dir / f"{config.name}.eager.jsonl"),
                                      grads_path_of(runs_dir / f"{config.name}.{mode}.jsonl"))
                for mode in modes if mode not in ("eager", WARM)}
            if not report.get("device"):
                report["device"] = runs["eager"].get("device") or runs["kiln"].get("device")
            report["configs"].append(row)
            write_report(report, args.out)
            if len(report["configs"]) == 1:
                print(TABLE_HEADER, flush=True)
            print(table_row(row), flush=True)
    text = table(report["configs"])
    (args.out / "train_models.txt").write_text(text)
    print(text, end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
