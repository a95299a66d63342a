"""Achieved memory bandwidth of Kiln's generated sm_90 kernels, beside a device-to-device
copy of the same bytes measured in the same process (the anchor), on the GPU machine.

    python3 tests/gpu/bandwidth.py --bundle .bundle --out $OUT

Each case is a small PyTorch function over tensors of 64 MiB or more (pointwise ops,
row and column reductions, softmax, layer norm), traced to an aten graph (make_fx),
captured and compiled for sm_90 by kilnd from the bundle, and run by Kiln's runtime. The
time is the profiler's GPU time of the kiln_k* kernels per call (median of 5 calls' sums);
the bytes are the graph's inputs read plus its outputs written once, the least any
implementation moves. Inductor's Triton kernels for the same function (torch.compile,
default mode) are timed the same way, beside them. The anchor is the bandwidth of copy_
between two 256 MiB buffers (read + write), its kernel timed the same way; every case
moves 128 MiB or more, well past the L2 cache. Writes OUT/bandwidth.json and prints a
table: bytes, kernel time, GB/s, and GB/s as a fraction of the copy's, Kiln's and
Inductor's.
"""

from __future__ import annotations

import json
import pathlib
import sys
from typing import Any, Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer, bundle_and_out  # noqa: E402

MIB = 1 << 20


def cases(torch: Any) -> dict[str, tuple[Callable, list]]:
    import torch.nn.functional as F

    # Every case moves 128 MiB or more: far past the H100's 50 MB L2, so both the kernels and
    # the copy run at the speed of memory.
    n = 64 * MIB // 4  # float32 elements in 64 MiB
    rows, cols = 65536, 1024  # 256 MiB
    vocab = 50257
    dev = "cuda"

    def x(*shape: int, dtype: Any = torch.float32) -> Any:
        return torch.randn(*shape, device=dev, dtype=dtype)

    return {
        "add": (lambda a, b: a + b, [x(n), x(n)]),
        "mul_add_relu": (lambda a, b, c: torch.relu(a * b + c), [x(n), x(n), x(n)]),
        "gelu": (lambda a: F.gelu(a), [x(n)]),
        "gelu_bf16": (lambda a: F.gelu(a), [x(2 * n, dtype=torch.bfloat16)]),
        "scale_bf16_to_f32": (lambda a: a.float() * 2.0, [x(2 * n, dtype=torch.bfloat16)]),
        "sum_rows": (lambda a: a.sum(-1), [x(rows, cols)]),
        "sum_cols": (lambda a: a.sum(0), [x(rows, cols)]),
        "amax_rows": (lambda a: a.amax(-1), [x(rows, cols)]),
        "amax_cols": (lambda a: a.amax(0), [x(rows, cols)]),
        "sum_all": (lambda a: a.sum(), [x(n)]),
        # Batch norm's per-channel statistics at ResNet's first stage, batch 256.
        "channel_sums": (lambda a: a.sum((0, 2, 3)), [x(256, 64, 56, 56)]),
        "softmax": (lambda a: torch.softmax(a, -1), [x(rows, cols)]),
        "layer_norm": (lambda a, w, b: F.layer_norm(a, (cols,), w, b),
                       [x(rows, cols), x(cols), x(cols)]),
        "rms_norm": (lambda a, w: a * torch.rsqrt(a.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                     [x(rows, cols), x(cols)]),
        # A language model's loss over GPT-2's vocabulary (rows of 50,257: odd, so no row
        # starts aligned), forward and backward as AOTAutograd leaves them.
        "log_softmax_vocab": (lambda a: torch.log_softmax(a, -1), [x(2048, vocab)]),
        "cross_entropy_bw": (
            lambda g, ls, t, w: torch.ops.aten._log_softmax_backward_data(
                torch.ops.aten.nll_loss_backward(g, ls, t, None, 1, -100, w), ls, 1,
                torch.float32),
            [torch.ones((), device=dev), torch.log_softmax(x(2048, vocab), -1),
             torch.randint(0, vocab, (2048,), device=dev), torch.tensor(2048.0, device=dev)]),
    }


def nbytes(values: Any) -> int:
    import torch

    if isinstance(values, torch.Tensor):
        return values.numel() * values.element_size()
    if isinstance(values, (list, tuple)):
        return sum(nbytes(v) for v in values)
    return 0


def kernel_times(fn: Callable, prefix: str, repeat: int = 5) -> dict[str, float]:
    """GPU ms of each kernel whose name starts with `prefix` in one call of `fn`: the run
    whose total is the median of `repeat`."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    runs = []
    for _ in range(repeat):
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        times: dict[str, float] = {}
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA and e.name.startswith(prefix):
                t = e.device_time if hasattr(e, "device_time") else e.cuda_time
                times[e.name] = times.get(e.name, 0.0) + t / 1000.0
        runs.append(times)
    runs.sort(key=lambda t: sum(t.values()))
    return runs[len(runs) // 2]


def kernel_ms(fn: Callable, prefix: str, repeat: int = 5) -> float:
    return sum(kernel_times(fn, prefix, repeat).values())


def copy_gbps(nbytes_: int) -> float:
    """Bandwidth of copy_ between two buffers of `nbytes_`: bytes read plus written over the
    copy kernel's GPU time, timed like the generated kernels."""
    import torch

    src = torch.empty(nbytes_, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    ms = kernel_ms(lambda: dst.copy_(src), "")
    return 2 * nbytes_ / (ms / 1000) / 1e9


def main() -> int:
    args = bundle_and_out()
    with KilnServer(args.bundle, args.out) as server:
        sys.path.insert(0, str(args.bundle.resolve() / "python"))
        import torch
        from torch.fx.experimental.proxy_tensor import make_fx

        from kiln.capture import graph_to_capture
        from kiln.client import CompileClient, RequestBuilder
        from kiln.gpu_runtime import GpuRuntime
        from kiln.graph_proto import capture_to_graph
        from kiln.settings import Settings
        from kiln.v1 import artifact_pb2

        torch.manual_seed(0)
        settings = Settings.from_options({"server": server.address})
        client = CompileClient(settings)
        builder = RequestBuilder(settings)
        rows = []
        for name, (fn, inputs) in cases(torch).items():
            gm = make_fx(fn)(*inputs)
            graph = capture_to_graph(graph_to_capture(gm, inputs, model=name, kind="infer"))
            result = client.compile(builder.build(graph, "cuda:sm_90"), timeout=600)
            artifact = artifact_pb2.CompiledGraph.FromString(result.compiled_graph)
            runtime = GpuRuntime(artifact, torch.device("cuda", 0))
            outputs = runtime.run(inputs)
            expected = fn(*inputs)
            expected = list(expected) if isinstance(expected, (list, tuple)) else [expected]
            ok = all(torch.allclose(o.float(), e.float(), rtol=2e-2, atol=2e-2)
                     for o, e in zip(outputs, expected))
            moved = nbytes(inputs) + nbytes(outputs)
            per_kernel = kernel_times(lambda: runtime.run(inputs), "kiln_k")
            ms = sum(per_kernel.values())
            anchor = copy_gbps(256 * MIB)
            gbps = moved / (ms / 1000) / 1e9 if ms > 0 else 0.0
            inductor = torch.compile(fn)
            inductor(*inputs)
            inductor_ms = kernel_ms(lambda: inductor(*inputs), "triton_")
            inductor_gbps = moved / (inductor_ms / 1000) / 1e9 if inductor_ms > 0 else 0.0
            rows.append({"case": name, "kernels": len(artifact.kernels), "bytes": moved,
                         "kernel_ms": round(ms, 4), "gbps": round(gbps, 1),
                         "copy_gbps": round(anchor, 1), "of_copy": round(gbps / anchor, 3),
                         "inductor_ms": round(inductor_ms, 4),
                         "inductor_of_copy": round(inductor_gbps / anchor, 3),
                         "matches_eager": ok,
                         "per_kernel_ms": {k: round(v, 4) for k, v in per_kernel.items()}})
            print(json.dumps(rows[-1]), flush=True)
    (args.out / "bandwidth.json").write_text(json.dumps(rows, indent=1))
    print(f"{'case':<18} {'kernels':>7} {'MiB':>6} {'ms':>8} {'GB/s':>7} {'copy GB/s':>9} "
          f"{'of copy':>7} {'Inductor of copy':>16}")
    for r in rows:
        print(f"{r['case']:<18} {r['kernels']:>7} {r['bytes'] / MIB:>6.0f} {r['kernel_ms']:>8.4f} "
              f"{r['gbps']:>7.0f} {r['copy_gbps']:>9.0f} {r['of_copy']:>7.2f} "
              f"{r['inductor_of_copy']:>16.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
