"""The `kiln` backend of torch.compile.

    torch.compile(model, backend="kiln")
    torch.compile(model, backend="kiln", options={"server": "kiln:50051", "fallback": "error"})

The backend is found through the `torch_dynamo_backends` entry point of the installed
package, or registered by `import kiln` (register_backend). Settings come from `options`
and the environment (kiln.settings).

What it does today: AOTAutograd hands it each forward, backward and inference graph; each
becomes a kiln.v1.Graph (kiln.capture, then kiln.graph_proto) and goes to kilnd in a
compile request carrying the job id, this process's rank and world size (from
torch.distributed when it is initialized) and the rank's compile sequence number. A rank
divergence that kilnd reports is raised as kiln.errors.RankDivergence before the graph
ever runs. Any other failure warns once and the graph runs per `fallback`.

The joint graph is split as Inductor splits it, by AOTAutograd's min-cut rematerialization
partitioner (setting `partitioner`): the forward saves the fewest bytes for the backward, which
recomputes cheap pointwise chains from them. GPT-2's tanh GELU shows why: split by the default
partitioner, the forward saves four tensors of the MLP's width (x, x/2, the tanh and one plus
it) that the backward reads back; split by min-cut, it saves x and the tanh, and the
backward's kernel recomputes the rest (0.56 ms of GPU time less a step for GPT-2 124M in bf16).
`partitioner="default"` keeps everything the backward reads from the forward, as eager does.
For min-cut, AOTAutograd decomposes a cross-entropy loss while it traces, so that the backward
recomputes the log-probabilities instead of the forward saving them (kiln.partitioning).

A single-rank process keeps each compiled frame in kilnd as well (kiln.frame_cache): a fresh
process whose Dynamo graph kilnd already holds loads the frame, AOTAutograd's metadata and
kilnd's compiled graphs in one entry, and neither traces it with AOTAutograd nor sends its
graphs again.

A graph kilnd compiled for a CUDA target runs on Kiln's runtime (kiln.gpu_runtime: the
cubins through the bundled native library, extern and fallback steps through ATen); a
graph compiled for x86_64 (CPU tensors) runs per `fallback`, since the package has no CPU
runtime binding, and so does one whose artifact the runtime cannot load (said once).

Importing this module needs no PyTorch, and GraphCompiler, which holds the decisions,
needs none either; PyTorch is imported when the backend is called or registered.
"""

from __future__ import annotations

import itertools
import logging
import threading
from typing import Any, Callable, Optional, Sequence

from kiln import timings
from kiln.errors import CaptureFailed, KilnError
from kiln.fallback import EAGER, INDUCTOR, KILN, Decision, FallbackPolicy
from kiln.settings import Settings

NAME = "kiln"

log = logging.getLogger("kiln")


class GraphCompiler:
    """Sends graphs to kilnd and decides how each runs. `client` is a kiln.client
    CompileClient (or anything with its compile method), `builder` a RequestBuilder; the
    process's one builder keeps each rank's sequence numbers across compiled models."""

    def __init__(self, client: Any, builder: Any, policy: FallbackPolicy) -> None:
        self.client = client
        self.builder = builder
        self.policy = policy

    def compile(self, graph: Any, name: str, target: str, rank: int = 0,
                world_size: int = 1) -> Decision:
        """How the kiln.v1.Graph `graph` runs. Raises RankDivergence, a SettingsError for a
        job that cannot be named, and kilnd's error under fallback=error."""
        request = self.builder.build(graph, target, rank, world_size)
        try:
            with timings.phase("kilnd"):
                result = self.client.compile(request)
        except KilnError as e:
            return self.policy.after_failure(e, name)
        log.info("graph %s: %s, key %s, artifact %s, trace %s", name, result.outcome,
                 result.compile_key, result.artifact_hash, result.trace_id)
        return self.policy.after_success(result.compile_key, result.outcome, name,
                                         loadable=target.startswith("cuda:"),
                                         artifact=result.compiled_graph)

    def capture_failed(self, error: Exception, name: str) -> Decision:
        """How a graph that could not be made into a request runs."""
        return self.policy.after_failure(CaptureFailed("CAPTURE", str(error)), name)


class _Process:
    """What one process shares across compiled models: a channel per server, one sequence
    of compile numbers per rank, one warn-once policy per fallback setting."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple, Any] = {}
        self._policies: dict[tuple[str, bool], FallbackPolicy] = {}
        self._sequences: Any = None
        self._frames = itertools.count()
        self._names: dict[str, int] = {}
        self._stores: dict[tuple, Any] = {}

    def graph_compiler(self, settings: Settings) -> GraphCompiler:
        from kiln.client import CompileClient, RequestBuilder, SequenceNumbers  # noqa: PLC0415

        with self._lock:
            if self._sequences is None:
                self._sequences = SequenceNumbers()
            client = self._clients.get(settings.connection())
            if client is None:
                client = self._clients[settings.connection()] = CompileClient(settings)
            policy_key = (settings.fallback, settings.require_cudagraph)
            policy = self._policies.get(policy_key)
            if policy is None:
                policy = self._policies[policy_key] = FallbackPolicy(
                    settings.fallback, require_cudagraph=settings.require_cudagraph)
        # The client's deadline and token are per settings; the channel is shared.
        return GraphCompiler(_WithSettings(client, settings),
                             RequestBuilder(settings, self._sequences), policy)

    def frame_store(self, settings: Settings, target: str) -> Any:
        """The kiln.frame_store.FrameStore for frames of `target` on settings' kilnd, one per
        connection, deadline and target."""
        from kiln.frame_store import FrameStore  # noqa: PLC0415

        key = (settings.connection(), settings.deadline, target)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = FrameStore(settings, target)
            return store

    def frame_name(self, compile_id: Any) -> str:
        """A name for the graph the backend was handed, unique in this process: Dynamo's
        compile id ("frame 0/0"), numbered on from the second graph of one compile id (the
        DDP optimizer hands the backend one graph per bucket: "frame 0/0-1", ...)."""
        with self._lock:
            if compile_id is None:
                return f"frame {next(self._frames)}"
            name = f"frame {compile_id}"
            n = self._names.get(name, 0)
            self._names[name] = n + 1
            return name if n == 0 else f"{name}-{n}"


class _WithSettings:
    """A shared CompileClient, called with one torch.compile's deadline."""

    def __init__(self, client: Any, settings: Settings) -> None:
        self.client = client
        self.settings = settings

    def compile(self, request: Any) -> Any:
        return self.client.compile(request, timeout=self.settings.deadline)


_process = _Process()


def kiln_backend(gm: Any, example_inputs: Sequence[Any], *,
                 options: Optional[dict] = None, mode: Optional[str] = None) -> Callable:
    """The torch.compile backend: Dynamo's graph goes through AOTAutograd, whose graphs go
    to kilnd one by one (see the module's docstring), unless kilnd holds the whole frame
    (kiln.frame_cache). `mode` is accepted and unused. Where the call's time went is logged
    (kiln.timings): kilnd, the frame's lookup, capture and loading, and the rest, which is
    AOTAutograd's tracing."""
    settings = Settings.from_options(options)
    compiler = _process.graph_compiler(settings)
    frame = _frame_name()
    with timings.ledger() as times:
        compiled = _compiled_frame(gm, example_inputs, compiler, settings, frame)
    timings.say(log, "frame", frame, times, "AOTAutograd and the rest")
    return compiled


def _compiled_frame(gm: Any, example_inputs: Sequence[Any], compiler: GraphCompiler,
                    settings: Settings, frame: str) -> Callable:
    """Dynamo's graph `gm` compiled: loaded whole from kilnd, or traced by AOTAutograd, whose
    graphs go to kilnd."""
    from torch._dynamo.backends.common import aot_autograd  # noqa: PLC0415

    from kiln import frame_cache  # noqa: PLC0415

    _, world_size = _rank_and_world_size()
    refusal = frame_cache.refusal(settings, world_size)
    if refusal is not None:
        log.info("frame %s: not cached in kilnd: %s", frame, refusal)
        return aot_autograd(**_compilers(compiler, settings, frame, False))(gm, example_inputs)
    target = settings.target or _target_of(example_inputs)
    loading = frame_cache.Loading(
        frame, compiler.policy,
        lambda decision, inputs, name, saved_from: _kiln_runner(decision, inputs, name,
                                                                settings.cudagraphs, saved_from))
    with frame_cache.frame_cache(_process.frame_store(settings, target),
                                 frame_cache.frame_tag(settings, target), loading) as cached:
        return aot_autograd(**_compilers(compiler, settings, frame, cached))(gm, example_inputs)


def _compilers(compiler: GraphCompiler, settings: Settings, frame: str,
               cached: bool) -> dict[str, Callable]:
    """AOTAutograd's forward, backward and inference compilers for `frame`; for a frame
    kept in kilnd (`cached`), each makes a KilnOutputCode, which AOTAutograd's cache stores."""
    from kiln.partitioning import aot_autograd_options  # noqa: PLC0415

    if cached:
        from torch._functorch.aot_autograd import SerializableAOTDispatchCompiler  # noqa: PLC0415

        from kiln.output_code import KilnOutputCode  # noqa: PLC0415

    def compile_kind(kind: str) -> Callable:
        def compile_graph(aot_gm: Any, inputs: Sequence[Any]) -> Callable:
            return _compile_aot_graph(compiler, settings, aot_gm, inputs, f"{frame}.{kind}",
                                      kind, cached)

        return SerializableAOTDispatchCompiler(KilnOutputCode, compile_graph) if cached else (
            compile_graph)

    return {"fw_compiler": compile_kind("fw"), "bw_compiler": compile_kind("bw"),
            "inference_compiler": compile_kind("infer"),
            **aot_autograd_options(settings.partitioner, settings.layout_optimization)}


def _compile_aot_graph(compiler: GraphCompiler, settings: Settings, gm: Any,
                       inputs: Sequence[Any], name: str, kind: str,
                       output_code: bool = False) -> Callable:
    """The runner of one AOTAutograd graph; a KilnOutputCode holding it when `output_code`."""
    with timings.ledger() as times:
        runner, ran, saved_from = _graph_runner(compiler, settings, gm, inputs, name, kind)
    timings.say(log, "graph", name, times)
    if not output_code:
        return runner
    from kiln.output_code import KilnOutputCode  # noqa: PLC0415

    kilns = ran.runner == KILN
    return KilnOutputCode(kind, name, runner, ran.artifact if kilns else None, ran.compile_key,
                          ran.reason, saved_from)


def _graph_runner(compiler: GraphCompiler, settings: Settings, gm: Any, inputs: Sequence[Any],
                  name: str, kind: str) -> tuple[Callable, Decision, Optional[int]]:
    """One AOTAutograd graph captured, compiled by kilnd and loaded: its runner, the decision
    the runner carries out and, for a forward, the index of its first saved output."""
    from kiln.capture import (choose_inference_layouts, graph_to_capture,  # noqa: PLC0415
                              static_roles)
    from kiln.graph_proto import capture_to_graph  # noqa: PLC0415

    try:
        with timings.phase("capture"):
            choose_inference_layouts(gm, kind, settings.layout_optimization)
            graph = capture_to_graph(graph_to_capture(gm, inputs, model=name, kind=kind,
                                                      roles=static_roles(kind, len(inputs))))
    except ValueError as e:  # CaptureError is a ValueError, as are encode_arg's refusals
        decision = compiler.capture_failed(e, name)
    else:
        rank, world_size = _rank_and_world_size()
        decision = compiler.compile(graph, name, settings.target or _target_of(inputs), rank,
                                    world_size)
    saved_from = _saved_from(kind)
    runner, ran = _runner(decision, gm, inputs, kind, compiler.policy, name, settings.cudagraphs,
                          saved_from)
    return runner, ran, saved_from


def _saved_from(kind: str) -> Optional[int]:
    """The index of a graph's first output that only autograd reads, which CUDA-graph replays
    hand out in place however small (kiln.cuda_graphs). For a forward, its saved values:
    AOTAutograd returns the mutated inputs, the user's outputs and the intermediate bases
    (num_forward of them, effect tokens aside), then the saved tensors and symbols. For a
    backward, 0: its outputs are gradients, which autograd takes into `.grad` or on to the
    next node (a norm's weight's, however small). None when unknown (an inference graph's
    outputs are the user's)."""
    if kind == "bw":
        return 0
    if kind != "fw":
        return None
    import torch  # noqa: PLC0415

    context = torch._guards.TracingContext.try_get()
    meta = getattr(context, "fw_metadata", None)
    num_forward = getattr(meta, "num_forward", None)
    if not isinstance(num_forward, int):
        return None
    # Tokens lead the outputs; PyTorch versions differ on whether num_forward counts them,
    # and counting them twice only returns a few more copies.
    return num_forward + len(getattr(meta, "tokens", None) or ())


def _kiln_runner(decision: Decision, inputs: Sequence[Any], name: str, cudagraphs: bool,
                 saved_from: Optional[int] = None) -> Callable:
    """Kiln's runtime running the artifact, as AOTAutograd calls a compiled graph; its runs
    captured in CUDA graphs when `cudagraphs` and the plan allows (kiln.cuda_graphs), a
    forward's outputs from `saved_from` on being its saved values."""
    import torch  # noqa: PLC0415
    from functorch.compile import make_boxed_func  # noqa: PLC0415

    from kiln.gpu_runtime import GpuRuntime  # noqa: PLC0415
    from kiln.v1 import artifact_pb2  # noqa: PLC0415

    device = next((x.device for x in inputs if isinstance(x, torch.Tensor) and
                   x.device.type == "cuda"), None)
    with timings.phase("load"):
        runtime = GpuRuntime(artifact_pb2.CompiledGraph.FromString(decision.artifact), device,
                             process_groups=_process_groups(), cudagraphs=cudagraphs,
                             saved_from=saved_from,
                             log=lambda message: log.info("graph %s: %s", name, message))
    if cudagraphs:
        log.info("graph %s: %s", name, "runs are captured in CUDA graphs"
                 if runtime.graph_refusal is None else
                 f"runs are not captured in CUDA graphs: {runtime.graph_refusal}")

    def run(*args: Any) -> list:
        return runtime.run(args)

    return make_boxed_func(run)


def _process_groups() -> list[str]:
    """This process's groups in the order kilnd numbers them (pg0 is the default group)."""
    import torch.distributed as dist  # noqa: PLC0415

    if dist.is_available() and dist.is_initialized():
        return [dist.group.WORLD.group_name]
    return []


def _runner(decision: Decision, gm: Any, inputs: Sequence[Any], kind: str,
            policy: FallbackPolicy, name: str, cudagraphs: bool = False,
            saved_from: Optional[int] = None) -> tuple[Callable, Decision]:
    """The runner `decision` asks for, and the decision it carries out (another when Kiln's
    runtime cannot load the artifact)."""
    from functorch.compile import make_boxed_func  # noqa: PLC0415

    if decision.runner == KILN:
        try:
            return _kiln_runner(decision, inputs, name, cudagraphs, saved_from), decision
        except Exception as e:  # a runtime that cannot load is no reason to stop training
            decision = policy.after_load_failure(e, name)

    if decision.runner == INDUCTOR:
        from torch._inductor.compile_fx import compile_fx_inner  # noqa: PLC0415

        try:
            return compile_fx_inner(gm, list(inputs), is_backward=kind == "bw",
                                    is_inference=kind == "infer"), decision
        except Exception as e:  # inductor failing is no reason to stop training either
            log.warning("inductor could not compile %s (%s: %s); it runs eagerly", kind,
                        type(e).__name__, e)
    assert decision.runner in (EAGER, INDUCTOR)
    return make_boxed_func(gm.forward), decision


def _frame_name() -> str:
    import torch  # noqa: PLC0415

    compile_id = torch._guards.CompileContext.current_compile_id()
    return _process.frame_name(compile_id)


def _rank_and_world_size() -> tuple[int, int]:
    import torch.distributed as dist  # noqa: PLC0415

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def _target_of(inputs: Sequence[Any]) -> str:
    """cuda:sm_XY when any input lives on a CUDA device (its compute capability), else
    x86_64."""
    import torch  # noqa: PLC0415

    for x in inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "cuda":
            major, minor = torch.cuda.get_device_capability(x.device)
            return f"cuda:sm_{major}{minor}"
    return "x86_64"


def register_backend() -> bool:
    """Makes torch.compile(backend="kiln") find this backend in a process where the package
    is not installed (only on PYTHONPATH). Returns False when Dynamo already knows the name,
    from the installed entry point or an earlier call: Dynamo refuses a name twice, and it
    loads the entry point itself when the name is first used."""
    import torch._dynamo  # noqa: PLC0415

    if NAME in torch._dynamo.list_backends(exclude_tags=()):
        return False
    torch._dynamo.register_backend(compiler_fn=kiln_backend, name=NAME)
    return True
