"""Every corpus graph compiled for sm_90 by kilnd and run on the GPU by Kiln's runtime,
against PyTorch running the same graph eagerly on the same inputs.

Run from the repository root on the GPU machine, after `deploy/gpu-bundle.sh .bundle` and
`tests/gpu/input_ranges.sh .gpu` here (both carried with the tree):

    python3 tests/gpu/run_corpus.py --bundle .bundle --ranges .gpu/input_ranges.json \
        --out $OUT [--only SUBSTRING,...] [--timing] [--debug .gpu/name_maps.json]

Per graph: the compile request's wall time (kilnd on this machine's cores, a cache miss),
the plan's kernels, externs and fallbacks, then one run on random inputs (uniform in the
ranges kilnc inferred: embedding indices below the table's rows, weights within their
initialization bound, variances positive, other floats in [-1, 1)) compared output by output with eager PyTorch: the largest difference relative to
the output's largest magnitude, against a tolerance per dtype (the graph's least precise float
dtype's when that is lower: bf16 values feeding a float32 output), widened to twice the
difference between eager on the GPU and eager on the CPU where that is larger, up to four
times (a sum of cancelling bf16 terms is only as exact as any two implementations agree). NaNs must sit
where eager's do and infinities match. Both sides start from
the same generator state; graphs that draw random numbers (dropout) compare shapes and
dtypes only. A second run of the same runtime (extern results written in place or kept as
their buffers, as the first run learned) must reproduce the first. Where the artifact says the plan is capturable, the run is also captured in a
CUDA graph and replayed, and the replay must reproduce the first run. Collective graphs run
on a single-rank NCCL group. With --timing (graphs without random numbers), each side's
time per run (CUDA events, median of 20: eager, Kiln, and Inductor compiling the same
graph through torch.compile) and, from the profiler, the GPU time of the generated kernels
(Kiln's kiln_k*, Inductor's triton_*) and of the rest are recorded too, with the host's time
per Kiln run and the Python functions it goes to (cProfile). With --debug, a graph that fails
is run again step by step against eager values of every node, and the first step whose
buffers differ is reported.

Graphs run in a worker process; a graph that kills it (a crash in a kernel or a library) is
reported as such and the worker restarts at the next graph. Writes OUT/corpus_gpu.json and
prints one line per graph.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import subprocess
import sys
import time
import traceback
from typing import Any, Optional, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer  # noqa: E402

# Error relative to the output's largest magnitude that passes, by dtype. Both sides run in
# the graph's own dtypes on the same GPU; they differ in reduction order and in where
# low-precision values are rounded (Kiln keeps fp32 inside a fused kernel).
TOLERANCE = {"float32": 1e-4, "float64": 1e-9, "float16": 1e-2, "bfloat16": 4e-2}
RANDOM_OPS = ("rand", "dropout", "bernoulli", "philox", "native_dropout")


def load_graph(path: pathlib.Path) -> Any:
    from kiln.graph_proto import capture_to_graph

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        text = f.read()
    capture = json.loads(text)
    return capture_to_graph(capture)


def make_inputs(graph: Any, ranges: dict, device: Any, seed: int) -> list:
    import torch
    from kiln.aten import sym_value, torch_dtype

    symbols = {s.name: getattr(s, s.WhichOneof("hint")) for s in graph.symbols
               if s.WhichOneof("hint")}
    gen = torch.Generator(device=device).manual_seed(seed)
    out: list = []

    def ev(s: Any) -> int:
        return int(s.value) if s.WhichOneof("kind") != "expr" else int(sym_value(s.expr, symbols))

    for gi in graph.inputs:
        m = gi.meta
        if m.HasField("symbolic"):
            out.append(int(sym_value(m.symbolic.expr, symbols)))
            continue
        if not m.HasField("tensor"):
            out.append(None)
            continue
        t = m.tensor
        dtype = torch_dtype(t.dtype)
        sizes = [ev(s) for s in t.sizes]
        strides = [ev(s) for s in t.strides] if len(t.strides) == len(sizes) else None
        if strides is None:
            strides, acc = [], 1
            for s in reversed(sizes):
                strides.insert(0, acc)
                acc *= max(s, 1)
        offset = ev(t.storage_offset) if t.HasField("storage_offset") else 0
        span = 0 if any(s == 0 for s in sizes) else 1 + sum((s - 1) * st for s, st in
                                                            zip(sizes, strides))
        n = offset + span
        if dtype.is_floating_point:
            lo, hi = ranges.get(gi.name, (-1, 1))
            base = torch.empty(n, dtype=torch.float32, device=device).uniform_(
                float(lo), float(hi), generator=gen).to(dtype)
        elif dtype == torch.bool:
            base = torch.randint(0, 2, (n,), generator=gen, device=device).bool()
        else:
            lo, hi = ranges.get(gi.name, (0, 2))
            base = torch.randint(lo, hi, (n,), generator=gen, device=device, dtype=dtype)
        out.append(base.as_strided(sizes, strides, offset))
    return out


# Operands that PyTorch's eager kernels read through host pointers whatever device the
# capture recorded: memory-efficient attention's saved Philox seed and offset. Its forward
# returns them on the CPU outside CUDA-graph capture (and Kiln's runtime passes on such host
# results as they are), while the capture's fake tensors say cuda. Both sides get them on the
# CPU, as a backward gets them in training.
HOST_OPERANDS = {"aten._scaled_dot_product_efficient_attention_backward.default": (7, 8)}


def on_host(graph: Any, inputs: list) -> list:
    """`inputs` with those HOST_OPERANDS reads moved to the CPU."""
    names = set()
    for node in graph.nodes:
        for pos in HOST_OPERANDS.get(node.target, ()):
            if pos < len(node.args) and node.args[pos].HasField("ref"):
                names.add(node.args[pos].ref.node)
    return [x.cpu() if gi.name in names and hasattr(x, "cpu") else x
            for gi, x in zip(graph.inputs, inputs)]


def clone(values: list) -> list:
    import torch

    out = []
    for v in values:
        if isinstance(v, torch.Tensor):
            # A copy of the whole storage viewed the same way: inputs may be expanded (stride
            # 0), which copy_ into a fresh strided tensor refuses.
            c = torch.empty(0, dtype=v.dtype, device=v.device)
            out.append(c.set_(v.untyped_storage().clone(), v.storage_offset(), v.shape,
                              v.stride()))
        else:
            out.append(v)
    return out


def rng_state_outputs(graph: Any) -> set:
    """Positions of graph outputs that are an attention op's RNG state (philox seed and
    offset): without dropout PyTorch leaves them uninitialized, so they are compared by
    shape only."""
    attention = {n.name for n in graph.nodes if "attention" in n.target}
    getitems = {n.name: n.args[0].ref.node for n in graph.nodes
                if n.target == "operator.getitem" and n.args and n.args[0].HasField("ref")}
    out = set()
    items = graph.output.list.items if graph.output.HasField("list") else [graph.output]
    for i, a in enumerate(items):
        if not a.HasField("ref"):
            continue
        node = getitems.get(a.ref.node, a.ref.node)
        meta = next((n.outputs for n in graph.nodes if n.name == a.ref.node), [])
        is_int = any(m.HasField("tensor") and m.tensor.dtype == 5 for m in meta)  # int64
        if node in attention and is_int:
            out.add(i)
    return out


# The most eager_spread may widen an output's tolerance by: a second opinion, not a pass.
MAX_WIDENING = 4


def compare(ref: list, got: list, random_graph: bool, precision: str = "",
            skip: frozenset = frozenset(),
            spread: Sequence[float] = ()) -> tuple[bool, float, str]:
    """(ok, worst error / tolerance, message of the worst output). `precision` names the
    tolerance of a graph whose floats pass through a lower precision than their own;
    `spread`, per output, how far a second eager implementation lands from `ref` (see
    eager_spread): twice that widens the output's tolerance, up to MAX_WIDENING times."""
    import torch

    if len(ref) != len(got):
        return False, float("inf"), f"{len(got)} outputs, eager has {len(ref)}"
    worst, message, ok = 0.0, "", True
    for i, (r, g) in enumerate(zip(ref, got)):
        if not isinstance(r, torch.Tensor):
            if r != g and not (r is None and g is None):
                return False, float("inf"), f"output {i}: {g!r}, eager {r!r}"
            continue
        if not isinstance(g, torch.Tensor):
            return False, float("inf"), f"output {i}: {type(g).__name__}, eager a tensor"
        if list(r.shape) != list(g.shape) or r.dtype != g.dtype:
            return False, float("inf"), (f"output {i}: {list(g.shape)} {g.dtype}, eager "
                                         f"{list(r.shape)} {r.dtype}")
        if r.numel() == 0 or random_graph or i in skip:
            continue
        if not r.dtype.is_floating_point:
            bad = int((r != g).sum())
            if bad:
                return False, float("inf"), f"output {i}: {bad} of {r.numel()} elements differ"
            continue
        rd, gd = r.double(), g.double()
        finite = torch.isfinite(rd)
        # NaN equals nothing, itself included: NaNs must sit where eager's do, infinities
        # must match in sign.
        if not torch.equal(torch.isnan(rd), torch.isnan(gd)) or \
                not torch.equal(torch.isinf(rd), torch.isinf(gd)) or \
                not torch.equal(rd[torch.isinf(rd)], gd[torch.isinf(gd)]):
            return False, float("inf"), f"output {i}: non-finite values differ"
        scale = max(float(rd[finite].abs().max()) if finite.any() else 0.0, 1e-6)
        err = float((rd[finite] - gd[finite]).abs().max()) / scale if finite.any() else 0.0
        tol = max(TOLERANCE[str(r.dtype).removeprefix("torch.")], TOLERANCE.get(precision, 0))
        if i < len(spread):
            tol = max(tol, min(2 * spread[i], MAX_WIDENING * tol))
        if err / tol > worst:
            worst = err / tol
            message = f"output {i} {list(r.shape)} {r.dtype}: error {err:.3g} of max |x| {scale:.3g}"
        ok = ok and err <= tol
    return ok, worst, message


def eager_spread(graph: Any, inputs: list, ref: list) -> list[float]:
    """Per output, the largest difference, relative to the output's largest magnitude,
    between eager PyTorch on the CPU and `ref` (eager on the GPU) for the same inputs: how
    much two correct implementations disagree where a result is a small sum of large
    cancelling terms (a bias gradient summed from bf16 values). Empty when the graph does
    not run on the CPU."""
    import torch
    from kiln.aten import run_graph

    try:
        cpu = run_graph(graph, [x.cpu() if isinstance(x, torch.Tensor) else x
                                for x in clone(inputs)], torch.device("cpu"))
    except Exception:  # an op without a CPU kernel: no second opinion
        return []
    spread = []
    for r, c in zip(ref, cpu):
        if not (isinstance(r, torch.Tensor) and isinstance(c, torch.Tensor)) or \
                not r.dtype.is_floating_point or r.shape != c.shape or r.numel() == 0:
            spread.append(0.0)
            continue
        rd, cd = r.double().cpu(), c.double()
        finite = torch.isfinite(rd) & torch.isfinite(cd)
        if not finite.any():
            spread.append(0.0)
            continue
        scale = max(float(rd[finite].abs().max()), 1e-6)
        spread.append(float((rd[finite] - cd[finite]).abs().max()) / scale)
    return spread


def kernel_time_ms(fn: Any, repeat: int = 5) -> dict:
    """GPU time per call of fn's kernels, from the profiler, by who wrote them: Kiln's
    generated kernels (kiln_k*), Inductor's (triton_*), and everything else (cuBLAS,
    cuDNN, attention, copies)."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(repeat):
            fn()
        torch.cuda.synchronize()
    out = {"generated": 0.0, "other": 0.0}
    by_kernel: dict = {}
    by_other: dict = {}
    for e in prof.events():
        if e.device_type != torch.autograd.DeviceType.CUDA:
            continue
        ms = (e.device_time if hasattr(e, "device_time") else e.cuda_time) / 1000.0 / repeat
        generated = e.name.startswith(("kiln_k", "triton_"))
        out["generated" if generated else "other"] += ms
        into = by_kernel if generated else by_other
        into[e.name] = into.get(e.name, 0.0) + ms
    result: dict = {k: round(v, 4) for k, v in out.items()}
    # The slowest generated kernels, and the slowest others (library kernels, copies), for
    # finding what holds a graph back.
    for key, kernels in (("slowest", by_kernel), ("slowest_other", by_other)):
        result[key] = [[name[:120], round(ms, 4)] for name, ms in
                       sorted(kernels.items(), key=lambda kv: -kv[1])[:10]]
    return result


def host_profile(fn: Any, repeat: int = 20, top: int = 15) -> dict:
    """The host's time per call of fn (the calls issued back to back, one synchronization at
    the end: when it is near the GPU time, the GPU waits on the host) and where it goes: the
    functions with the most time of their own under cProfile, per call."""
    import cProfile
    import pstats

    import torch

    fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeat):
        fn()
    host_ms = (time.perf_counter() - start) * 1e3 / repeat
    torch.cuda.synchronize()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(repeat):
        fn()
    profiler.disable()
    torch.cuda.synchronize()
    stats = pstats.Stats(profiler).stats  # (file, line, name) -> (cc, nc, own, cumulative, _)
    ranked = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    return {"host_ms": round(host_ms, 3), "own_ms_per_call": [
        [f"{pathlib.Path(f).name}:{line}({name})", round(v[2] * 1e3 / repeat, 3),
         v[1] // repeat] for (f, line, name), v in ranked]}


def gpu_time_ms(fn: Any, repeat: int = 20) -> float:
    import torch

    fn()
    times = []
    for _ in range(repeat):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return sorted(times)[len(times) // 2]


def replay_matches(runtime: Any, inputs: list, first: list, random_graph: bool,
                   precision: str, skip: frozenset) -> tuple[bool, str]:
    import torch

    # Under capture the Philox seed and offset HOST_OPERANDS names are read on the device, as
    # a captured forward leaves them.
    static = [x.cuda() if isinstance(x, torch.Tensor) and x.device.type == "cpu" else x
              for x in clone(inputs)]
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        runtime.run(clone(static))  # warm up off the default stream, as capture wants
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    torch.manual_seed(0)
    with torch.cuda.graph(graph):
        outputs = runtime.run(static, rng_seed=1234, rng_offset=0)
    for x, v in zip(static, inputs):
        if isinstance(x, torch.Tensor):
            x.untyped_storage().copy_(v.untyped_storage())
    graph.replay()
    torch.cuda.synchronize()
    ok, _, message = compare(first, outputs, random_graph, precision, skip)
    return ok, message


def lowest_precision(graph: Any) -> str:
    """The tolerance key of the graph's least precise floating dtype: a float32 output
    computed from bf16 values is only as exact as bf16."""
    dtypes = {gi.meta.tensor.dtype for gi in graph.inputs if gi.meta.HasField("tensor")}
    for n in graph.nodes:
        dtypes |= {m.tensor.dtype for m in n.outputs if m.HasField("tensor")}
    for dtype, key in ((4, "bfloat16"), (3, "float16")):  # DTYPE_BFLOAT16, DTYPE_FLOAT16
        if dtype in dtypes:
            return key
    return ""


def draws_random_numbers(graph: Any) -> bool:
    for n in graph.nodes:
        if any(w in n.target for w in RANDOM_OPS):
            return True
        # Attention with dropout: a positive float among its arguments is dropout_p.
        if "attention" in n.target and any(
                a.WhichOneof("kind") == "float_value" and a.float_value > 0
                for a in list(n.args) + [k.value for k in n.kwargs if k.name == "dropout_p"]):
            return True
    return False


def first_divergence(graph: Any, artifact: Any, runtime: Any, inputs: list, names: dict,
                     precision: str) -> dict:
    """Runs the plan step by step against eager values of every node: after each kernel or
    call, the buffers holding its nodes' values, viewed with the eager value's sizes and
    strides, are compared. Returns the first step whose values differ (or {})."""
    import torch
    from kiln.aten import run_graph

    values: dict = {}
    torch.manual_seed(0)
    run_graph(graph, clone(inputs), torch.device("cuda", 0), values)
    by_buffer: dict = {}
    for i, b in enumerate(artifact.buffers):
        node, _, out = b.name.partition(".")
        original = names.get(node)
        if original is None or original not in values:
            continue
        v = values[original]
        if out:
            v = v[int(out)] if isinstance(v, (list, tuple)) else None
        if isinstance(v, torch.Tensor) and b.kind != 1:  # not an input
            by_buffer[i] = v
    written: dict = {}
    for i, st in enumerate(artifact.steps):
        kind = st.WhichOneof("kind")
        if kind == "launch":
            k = artifact.kernels[st.launch.kernel]
            written[i] = sorted({p.buffer for p in k.params if p.kind == 1
                                 and artifact.buffers[p.buffer].name.partition(".")[0] in
                                 set(k.nodes)})
        elif kind in ("extern_call", "fallback"):
            written[i] = sorted({o.buffer for o in getattr(st, kind).outputs if o.buffer >= 0})
    found: dict = {}

    def check(index: int, buffer_view: Any) -> None:
        if found:
            return
        torch.cuda.synchronize()
        for b in written.get(index, []):
            ref = by_buffer.get(b)
            if ref is None:
                continue
            got = buffer_view(b, ref.dtype, ref.shape, ref.stride())
            ok, worst, message = compare([ref], [got], False, precision)
            if not ok:
                found.update(step=index, label=runtime.steps[index].label,
                             buffer=artifact.buffers[b].name,
                             node=names.get(artifact.buffers[b].name.partition(".")[0]),
                             message=message)
                return

    torch.manual_seed(0)
    runtime.run(clone(inputs), rng_seed=1234, rng_offset=0, after_step=check)
    return found


def run_one(path: pathlib.Path, client: Any, builder: Any, ranges: dict, timing: bool,
            groups: list, names: Optional[dict] = None) -> dict:
    import torch
    from kiln.aten import run_graph
    from kiln.gpu_runtime import GpuRuntime
    from kiln.v1 import artifact_pb2

    name = path.name.removesuffix(".gz").removesuffix(".json")
    entry: dict = {"graph": name, "file": path.name}
    graph = load_graph(path)
    start = time.perf_counter()
    result = client.compile(builder.build(graph, "cuda:sm_90"), timeout=600)
    entry["compile_s"] = round(time.perf_counter() - start, 3)
    artifact = artifact_pb2.CompiledGraph.FromString(result.compiled_graph)
    s = artifact.summary
    entry.update(kernels=s.kernels, externs=s.extern_steps, fallbacks=s.fallback_steps,
                 capturable=artifact.cudagraph.capturable,
                 reasons=[f"{r.node}: {r.detail}" for r in artifact.cudagraph.reasons][:4])
    random_graph = draws_random_numbers(graph)
    entry["random"] = random_graph
    precision = lowest_precision(graph)
    device = torch.device("cuda", 0)
    inputs = on_host(graph, make_inputs(graph, ranges.get(path.name, {}), device, seed=1))
    # The same generator state for both sides: ops that report RNG state (attention's
    # philox seed and offset) then agree.
    torch.manual_seed(0)
    ref = run_graph(graph, clone(inputs), device)
    runtime = GpuRuntime(artifact, device, process_groups=groups)
    torch.manual_seed(0)
    got = runtime.run(clone(inputs), rng_seed=1234, rng_offset=0)
    torch.cuda.synchronize()
    skip = frozenset(rng_state_outputs(graph))
    ok, worst, message = compare(ref, got, random_graph, precision, skip)
    if not ok and worst != float("inf"):
        # A second opinion before blaming the compiler: eager on the CPU.
        spread = eager_spread(graph, inputs, ref)
        if spread:
            entry["cpu_spread"] = [[i, round(x, 6)] for i, x in enumerate(spread) if x > 0]
            ok, worst, message = compare(ref, got, random_graph, precision, skip, spread)
    entry.update(ok=ok, worst=round(worst, 4), message=message)
    # A second run reuses the bound plan as training does: extern results written in place
    # or kept as their buffers, which the first run learned. It must give the first's outputs.
    torch.manual_seed(0)
    again = runtime.run(clone(inputs), rng_seed=1234, rng_offset=0)
    torch.cuda.synchronize()
    entry["rerun_ok"], _, entry["rerun_message"] = compare(got, again, random_graph, precision,
                                                           skip)
    if not ok and names is not None:
        entry["divergence"] = first_divergence(graph, artifact, runtime, inputs, names,
                                               precision)
    if artifact.cudagraph.capturable:
        entry["replay_ok"], entry["replay_message"] = replay_matches(runtime, inputs, got,
                                                                     random_graph, precision,
                                                                     skip)
    if timing and not random_graph:
        from kiln.aten import to_graph_module

        a, b, c = clone(inputs), clone(inputs), clone(inputs)
        entry["eager_ms"] = round(gpu_time_ms(lambda: run_graph(graph, a, device)), 4)
        entry["kiln_ms"] = round(gpu_time_ms(lambda: runtime.run(b)), 4)
        entry["kiln_kernels_ms"] = kernel_time_ms(lambda: runtime.run(b))
        entry["kiln_host"] = host_profile(lambda: runtime.run(b))
        try:
            start = time.perf_counter()
            inductor = torch.compile(to_graph_module(graph, device), dynamic=False)
            inductor(*clone(inputs))
            entry["inductor_compile_s"] = round(time.perf_counter() - start, 3)
            entry["inductor_ms"] = round(gpu_time_ms(lambda: inductor(*c)), 4)
            entry["inductor_kernels_ms"] = kernel_time_ms(lambda: inductor(*c))
        except Exception as e:  # Inductor failing on a graph is a fact to report
            entry["inductor_error"] = f"{type(e).__name__}: {e}"[:300]
    return entry


def worker(args: argparse.Namespace) -> int:
    """Runs the graphs named on the command line in turn, appending each one's result to
    args.results; a line {"start": name} comes first, so the parent can tell which graph a
    crash took down."""
    import torch
    import torch.distributed as dist
    from kiln.client import CompileClient, RequestBuilder
    from kiln.settings import Settings

    torch.cuda.set_device(0)
    # Full float32 on both sides: with TF32 convolutions and matmuls differ by ~1e-4 between
    # the algorithms cuDNN picks for differently aligned inputs.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    # One rank of one: the collective graphs run on a real (single-rank) NCCL group.
    dist.init_process_group("nccl", store=dist.HashStore(), rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    groups = [dist.group.WORLD.group_name]
    ranges = json.loads(args.ranges.read_text())
    name_maps = json.loads(args.debug.read_text()) if args.debug else {}
    settings = Settings.from_options({"server": args.server})
    client = CompileClient(settings)
    builder = RequestBuilder(settings)
    with open(args.results, "a") as results:
        for name in args.graph:
            path = pathlib.Path(name)
            results.write(json.dumps({"start": path.name}) + "\n")
            results.flush()
            try:
                entry = run_one(path, client, builder, ranges, args.timing, groups,
                                name_maps.get(path.name) if args.debug else None)
            except Exception as e:  # one graph's failure is a row of the report
                entry = {"graph": path.name, "file": path.name, "ok": False,
                         "error": f"{type(e).__name__}: {e}"[:2000],
                         "trace": traceback.format_exc()[-3000:]}
                if type(e).__name__ == "AcceleratorError":
                    # A fault on the device poisons this process's CUDA context: the
                    # parent starts a fresh worker at the next graph.
                    results.write(json.dumps(entry) + "\n")
                    results.flush()
                    os._exit(3)
            results.write(json.dumps(entry) + "\n")
            results.flush()
    dist.destroy_process_group()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", type=pathlib.Path)
    parser.add_argument("--ranges", type=pathlib.Path, required=True)
    parser.add_argument("--graphs", type=pathlib.Path, default=pathlib.Path("tests/data/graphs"))
    parser.add_argument("--out", type=pathlib.Path)
    parser.add_argument("--only", default="")
    parser.add_argument("--timing", action="store_true")
    parser.add_argument("--debug", type=pathlib.Path,
                        help="name_maps.json: find the first step of a failing graph that "
                        "differs from eager")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--server", help=argparse.SUPPRESS)
    parser.add_argument("--results", type=pathlib.Path, help=argparse.SUPPRESS)
    parser.add_argument("graph", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    wanted = args.only.split(",")
    paths = sorted(str(p) for p in args.graphs.iterdir()
                   if p.name.endswith((".json", ".json.gz")) and any(w in p.name for w in wanted))
    args.out.mkdir(parents=True, exist_ok=True)
    results = args.out / "corpus_gpu.jsonl"
    results.write_text("")
    report: list = []
    with KilnServer(args.bundle, args.out) as server:
        # A worker killed by a signal leaves the Python stack it died in on stderr.
        env = dict(server.env, PYTHONUNBUFFERED="1", PYTHONFAULTHANDLER="1")
        remaining = paths
        while remaining:
            worker_args = [sys.executable, __file__, "--worker", "--ranges", str(args.ranges),
                           "--server", server.address, "--results", str(results)]
            if args.timing:
                worker_args.append("--timing")
            if args.debug:
                worker_args += ["--debug", str(args.debug)]
            p = subprocess.run(worker_args + remaining, env=env, capture_output=True, text=True)
            lines = [json.loads(x) for x in results.read_text().splitlines() if x.strip()]
            done = {e["file"] if "file" in e else e["start"] for e in lines}
            finished = {e.get("file") for e in lines if "file" in e}
            crashed = [e["start"] for e in lines if "start" in e and e["start"] not in finished]
            # Exit status 3: the worker left after a device fault it reported itself.
            if crashed or p.returncode not in (0, 3):
                name = crashed[-1] if crashed else "(worker)"
                with open(results, "a") as f:
                    f.write(json.dumps({"graph": name, "file": name, "ok": False,
                                        "error": f"the process died ({p.returncode})",
                                        "trace": p.stderr[-3000:]}) + "\n")
                done.add(name)
            remaining = [r for r in remaining if pathlib.Path(r).name not in done]
    for line in results.read_text().splitlines():
        e = json.loads(line)
        if "graph" in e:
            report.append(e)
            print(json.dumps({k: v for k, v in e.items() if k != "trace"})[:400], flush=True)
    (args.out / "corpus_gpu.json").write_text(json.dumps(report, indent=1))
    passed = sum(1 for e in report if e.get("ok"))
    print(f"{passed} of {len(report)} graphs match eager PyTorch")
    reran = [e for e in report if "rerun_ok" in e]
    print(f"{sum(1 for e in reran if e['rerun_ok'])} of {len(reran)} second runs match the "
          "first")
    replayed = [e for e in report if "replay_ok" in e]
    print(f"{sum(1 for e in replayed if e['replay_ok'])} of {len(replayed)} CUDA-graph replays "
          "match the first run")
    return 0


if __name__ == "__main__":
    sys.exit(main())
