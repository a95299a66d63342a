"""The training side of trainer_faults.py: one scenario in one process, as the runner starts it:

    python3 tests/gpu/trainer_faults_worker.py SCENARIO EVENTS_PATH [ROLE]

A scenario trains a small MLP (capture_corpus.Mlp, fp32, TF32 off) eagerly and then through
the kiln backend from the same initial weights on the same batches, and appends what happens
to EVENTS_PATH, one JSON object a line, as it happens, so that a process that crashes or
hangs still says how far it got:
  step       a step's loss: {"phase": "eager" | "kiln", "step", "loss"}
  log        a line of the "kiln" logger (which graph runs where, and why): {"level", "message"}
  warning    a warning: {"category", "message"}; every KilnWarning, other warnings once each
  exception  an exception the scenario provokes, with its chain of causes (exception_record)
  result     a scenario's own measurements
  stop_kilnd kilnd_stopped asks the runner to stop kilnd, and waits for the file that
             $KILN_FAULTS_KILND_STOPPED names before it goes on
  done       the end: device, PyTorch version, Dynamo's counters
  error      the scenario raised: {"error", "trace"}
A scenario with several sub-cases sets "case" on the events of each.

What each scenario checks, and why, is trainer_faults.py's to say; this file needs PyTorch
and a GPU but imports them only when a scenario runs, so the runner's tests import it
without either.
"""

from __future__ import annotations

import json
import logging
import os
import pathlib
import sys
import time
import traceback
import warnings
from typing import Any, Callable, Optional

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

STOP_KILND = "stop_kilnd"
ACK_ENV = "KILN_FAULTS_KILND_STOPPED"
ACK_TIMEOUT_S = 60.0
# The MLP's sizes and batches: the corpus's mlp_fp32 configuration, and a second batch size
# that makes Dynamo compile the frame again (dynamic=False).
D, HIDDEN = 64, 256
BATCH = (8, 16, D)
OTHER_BATCH = (4, 16, D)
LR = 1e-3
# kilnd_stopped: kilnd is stopped before this step (1-based), which has OTHER_BATCH's shape.
STOP_BEFORE_STEP = 4
KILND_STOPPED_SHAPES = [BATCH] * 3 + [OTHER_BATCH] * 3 + [BATCH] * 2
# A target Kiln has no backend for: what a trainer on an A100 sends (the backend derives
# cuda:sm_XY from the device).
UNSUPPORTED_TARGET = "cuda:sm_80"
# One millisecond: far less than any compile, so every request misses its deadline.
TINY_DEADLINE_S = 0.001
REQUIRE = {"require_cudagraph": True}  # raised under the default fallback (eager) too
FAULT_STEPS = 5
COMPILED_AUTOGRAD_STEPS = 10
WARM_CACHE_STEPS = 5
REQUIRE_CUDAGRAPH_STEPS = 3
MESSAGE_CHARS = 4000


class Events:
    """Appends events to a JSON-lines file, each line written whole and flushed."""

    def __init__(self, path: pathlib.Path) -> None:
        self._file = open(path, "a", buffering=1, encoding="utf-8")
        self.case: Optional[str] = None

    def write(self, **event: Any) -> None:
        if self.case is not None:
            event.setdefault("case", self.case)
        self._file.write(json.dumps(event, default=str) + "\n")

    def close(self) -> None:
        self._file.close()


class KilnObserver:
    """Writes the "kiln" logger's lines and the warnings raised while it is entered as
    events. Every KilnWarning is written (the backend promises one per kind of failure, so
    a second one must show); other warnings once per message."""

    def __init__(self, events: Events) -> None:
        self.events = events
        self._seen: set[str] = set()
        self._caught: list = []
        self._catch = warnings.catch_warnings(record=True)
        observer = self

        class Handler(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                observer.flush()  # warnings first: they were raised before this line
                observer.events.write(event="log", level=record.levelname,
                                      message=record.getMessage()[:MESSAGE_CHARS])

        self._handler = Handler(logging.INFO)

    def __enter__(self) -> "KilnObserver":
        self._caught = self._catch.__enter__()
        warnings.simplefilter("always")
        logger = logging.getLogger("kiln")
        logger.addHandler(self._handler)
        logger.setLevel(logging.INFO)
        return self

    def flush(self) -> None:
        while self._caught:
            w = self._caught.pop(0)
            category = w.category.__name__
            message = str(w.message)[:MESSAGE_CHARS]
            if category != "KilnWarning":
                if message in self._seen:
                    continue
                self._seen.add(message)
            self.events.write(event="warning", category=category, message=message)

    def __exit__(self, *exc: Any) -> None:
        self.flush()
        logging.getLogger("kiln").removeHandler(self._handler)
        self._catch.__exit__(*exc)


def exception_record(error: BaseException) -> dict:
    """What an exception says, for the report: its type, the chain of causes (Dynamo wraps a
    backend's exception in BackendCompilerFailed, keeping it as inner_exception and as the
    context), the whole chain's text, and the first Kiln exception in it with its gRPC
    code."""
    chain: list[BaseException] = []
    current: Optional[BaseException] = error
    while current is not None and all(current is not seen for seen in chain):
        chain.append(current)
        current = (getattr(current, "inner_exception", None) or current.__cause__
                   or current.__context__)
    kiln = next((e for e in chain if type(e).__module__.split(".")[0] == "kiln"), None)
    return {
        "type": _qualified(error),
        "chain": [_qualified(e) for e in chain],
        "message": "\n".join(f"{type(e).__name__}: {e}" for e in chain)[:MESSAGE_CHARS],
        "kiln_error": None if kiln is None else {
            "type": type(kiln).__name__, "code": getattr(kiln, "code", None),
            "message": str(kiln)[:MESSAGE_CHARS]},
    }


def _qualified(e: BaseException) -> str:
    return f"{type(e).__module__}.{type(e).__name__}"


# --- training ------------------------------------------------------------------------------


def _torch() -> Any:
    """PyTorch, set up as every scenario needs it: a GPU, float32 without TF32 on both sides
    (so eager and Kiln differ only in the last bits), seed 0."""
    import torch

    if not torch.cuda.is_available():
        raise RuntimeError("no CUDA device")
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.manual_seed(0)
    return torch


def new_mlp() -> Any:
    import capture_corpus as corpus  # imports kiln, which registers the backend

    return corpus.Mlp(D, HIDDEN).to(corpus.DEVICE).train()


def new_batches(shapes: list) -> list:
    import torch

    return [torch.randn(*shape, device="cuda") for shape in shapes]


def forward_backward(model: Any) -> Callable[[Any], Any]:
    """One training step's forward and backward; returns the loss (the MLP's output's mean
    square, as train_models.py trains it)."""

    def step(x: Any) -> Any:
        loss = model(x).square().mean()
        loss.backward()
        return loss

    return step


def train(step: Callable[[Any], Any], params: Any, batches: list, phase: str,
          events: Events, observer: KilnObserver,
          before_step: Optional[Callable[[int], None]] = None) -> list[float]:
    """AdamW over `batches`, one step each; every loss is an event as it comes."""
    import torch

    opt = torch.optim.AdamW(params, lr=LR)
    losses = []
    for number, x in enumerate(batches, 1):
        if before_step is not None:
            before_step(number)
        opt.zero_grad()
        loss = step(x)
        opt.step()
        value = loss.item()
        events.write(event="step", phase=phase, step=number, loss=value)
        observer.flush()
        losses.append(value)
    return losses


def eager_then_kiln(events: Events, observer: KilnObserver, shapes: list,
                    compile_step: Callable[[Any], Callable[[Any], Any]],
                    before_kiln_step: Optional[Callable[[int], None]] = None) -> None:
    """Trains one MLP eagerly (the reference) and its twin, with the same initial weights,
    through `compile_step(model)`, which returns the compiled step; one batch of each of
    `shapes` a step. The model draws its weights before the batches are drawn, so every
    process with the same seed trains on the same weights and data."""
    import copy

    model = new_mlp()
    twin = copy.deepcopy(model)
    batches = new_batches(shapes)
    train(forward_backward(model), model.parameters(), batches, "eager", events, observer)
    train(compile_step(twin), twin.parameters(), batches, "kiln", events, observer,
          before_kiln_step)


def compiled_model(options: Optional[dict] = None,
                   **kwargs: Any) -> Callable[[Any], Callable[[Any], Any]]:
    """torch.compile(model, backend="kiln") with `options`, its step as forward_backward."""
    import torch

    def compile_step(model: Any) -> Callable[[Any], Any]:
        return forward_backward(torch.compile(model, backend="kiln", options=options, **kwargs))

    return compile_step


# --- the scenarios -------------------------------------------------------------------------


def kilnd_stopped(events: Events, observer: KilnObserver, role: str) -> None:
    """Trains on BATCH (graphs compiled by kilnd, run on Kiln's runtime), has the runner stop
    kilnd, then trains on OTHER_BATCH, which Dynamo compiles again (a new compile against a
    dead server), then on BATCH again (already compiled: no server needed)."""
    _torch()
    ack = pathlib.Path(os.environ[ACK_ENV])

    def stop_kilnd_before(step: int) -> None:
        if step != STOP_BEFORE_STEP:
            return
        events.write(event=STOP_KILND, step=step)
        deadline = time.monotonic() + ACK_TIMEOUT_S
        while not ack.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the runner did not stop kilnd within {ACK_TIMEOUT_S:g} s")
            time.sleep(0.05)

    eager_then_kiln(events, observer, KILND_STOPPED_SHAPES, compiled_model(dynamic=False),
                    stop_kilnd_before)


def compile_error(events: Events, observer: KilnObserver, role: str) -> None:
    """Every graph goes to kilnd for a target it has no backend for: kilnd refuses each
    request (INVALID_ARGUMENT)."""
    _torch()
    eager_then_kiln(events, observer, [BATCH] * FAULT_STEPS,
                    compiled_model({"target": UNSUPPORTED_TARGET}))


def too_slow(events: Events, observer: KilnObserver, role: str) -> None:
    """The deadline is a millisecond: every request (all misses, on a fresh kilnd) runs out
    of time."""
    _torch()
    eager_then_kiln(events, observer, [BATCH] * FAULT_STEPS,
                    compiled_model({"deadline": TINY_DEADLINE_S}))


def require_cudagraph(events: Events, observer: KilnObserver, role: str) -> None:
    """require_cudagraph (under the default fallback: raised all the same) on two graphs a
    CUDA graph cannot capture, each provoked in a fresh compile: dynamic shapes, and an op
    Kiln runs as a fallback step (cumsum); then the same MLP with static shapes, which is
    capturable and trains."""
    torch = _torch()
    import torch.nn as nn

    class CumsumHead(nn.Module):
        """The MLP, then a cumulative sum, which Kiln has no lowering for."""

        def __init__(self) -> None:
            super().__init__()
            self.mlp = new_mlp()

        def forward(self, x: Any) -> Any:
            return self.mlp(x).cumsum(-1)

    for case, build, dynamic in (("dynamic_shapes", new_mlp, True),
                                 ("fallback_op", CumsumHead, False)):
        events.case = case
        torch._dynamo.reset()
        model = build().cuda()
        step = compiled_model(REQUIRE, dynamic=dynamic)(model)
        try:
            step(torch.randn(*BATCH, device="cuda"))
            torch.cuda.synchronize()
            events.write(event="result", raised=False)
        except Exception as e:  # the exception is the evidence
            events.write(event="exception", **exception_record(e))
        observer.flush()
    events.case = "capturable"
    torch._dynamo.reset()
    eager_then_kiln(events, observer, [BATCH] * REQUIRE_CUDAGRAPH_STEPS,
                    compiled_model(REQUIRE, dynamic=False))
    events.case = None


def compiled_autograd(events: Events, observer: KilnObserver, role: str) -> None:
    """torch._dynamo.config.compiled_autograd: the whole step (forward, loss, backward) is
    compiled, and the backward graph that compiled autograd captures when backward() runs
    is compiled again with the same backend, through kilnd."""
    torch = _torch()

    def compile_step(model: Any) -> Callable[[Any], Any]:
        # Read when torch.compile wraps the function: compiled autograd is on while the
        # compiled function runs, and compiles its graphs with the function's backend.
        torch._dynamo.config.compiled_autograd = True
        # Where Dynamo can trace backward() into the forward's graph (trace_autograd_ops),
        # the autograd engine never runs it and compiled autograd captures nothing: the
        # backward stays a graph break, run by the engine under compiled autograd.
        if hasattr(torch._dynamo.config, "trace_autograd_ops"):
            torch._dynamo.config.trace_autograd_ops = False
        return torch.compile(forward_backward(model), backend="kiln")

    eager_then_kiln(events, observer, [BATCH] * COMPILED_AUTOGRAD_STEPS,
                    compile_step)


def warm_cache(events: Events, observer: KilnObserver, role: str) -> None:
    """The runner runs this twice against one kilnd: the first process fills its cache, the
    second finds the same graphs there. Both do the same from the same seed (the same
    weights, batches and graphs), so only the cache differs between them."""
    _torch()
    eager_then_kiln(events, observer, [BATCH] * WARM_CACHE_STEPS, compiled_model())


def complex_dtype(events: Events, observer: KilnObserver, role: str) -> None:
    """A complex multiply between two views (view_as_complex, view_as_real), under no_grad:
    the result must be eager's, whether kilnd refuses the graph or runs it."""
    torch = _torch()
    import torch.nn as nn

    class ComplexScale(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("w", torch.randn(BATCH[1], dtype=torch.complex64))

        def forward(self, x: Any) -> Any:
            return torch.view_as_real(torch.view_as_complex(x) * self.w)

    model = ComplexScale().cuda()
    x = torch.randn(BATCH[0], BATCH[1], 2, device="cuda")
    with torch.no_grad():
        expected = model(x)
        got = torch.compile(model, backend="kiln")(x)
    torch.cuda.synchronize()
    diff = (got - expected).abs()
    events.write(event="result", max_abs_diff=float(diff.max()),
                 close=bool(torch.allclose(got, expected, rtol=1e-5, atol=1e-6)),
                 finite=bool(torch.isfinite(got).all()))


SCENARIOS: dict[str, Callable[[Events, KilnObserver, str], None]] = {
    "kilnd_stopped": kilnd_stopped,
    "compile_error": compile_error,
    "too_slow": too_slow,
    "require_cudagraph": require_cudagraph,
    "compiled_autograd": compiled_autograd,
    "warm_cache": warm_cache,
    "complex_dtype": complex_dtype,
}


def dynamo_counters() -> dict:
    """Dynamo's graphs, graph breaks and compiled autograd's captures and compiles."""
    from torch._dynamo.utils import counters

    return {"unique_graphs": counters["stats"]["unique_graphs"],
            "graph_breaks": sum(counters["graph_break"].values()),
            "compiled_autograd": dict(counters["compiled_autograd"])}


def main(argv: list[str]) -> int:
    """Runs one scenario; returns 1 when it raised (the exception is an event too)."""
    scenario, events_path = argv[0], pathlib.Path(argv[1])
    role = argv[2] if len(argv) > 2 else ""
    events = Events(events_path)
    try:
        with KilnObserver(events) as observer:
            SCENARIOS[scenario](events, observer, role)
        import torch

        events.write(event="done", device=torch.cuda.get_device_name(),
                     torch=torch.__version__, dynamo=dynamo_counters())
        return 0
    except Exception as e:  # the runner reports it and goes on to the next scenario
        events.write(event="error", error=f"{type(e).__name__}: {e}"[:MESSAGE_CHARS],
                     trace=traceback.format_exc()[-MESSAGE_CHARS:])
        return 1
    finally:
        events.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
