"""Kiln's matrix products through cuBLASLt (kiln.products, kiln.cuda.Gemm inside launch
sequences) against PyTorch's on the GPU machine, each figure beside its anchor from the same
process:

    python3 tests/gpu/products.py --bundle .bundle --out $OUT

The cases are GPT-2 124M's products at batch 4 x 512 as AOTAutograd leaves them (the linear
layers' addmm with the weight transposed, the head's mm, a weight gradient's transposed
activations, attention's bmm), in fp32 and bf16, and a bf16 product whose input starts two
bytes past an alignment (the algorithm for any alignment). For each:

- the result against PyTorch's product of the same tensors (torch.mm, addmm, bmm): the largest
  difference relative to the largest value, and the share of elements bitwise equal;
- the GPU's time per product (CUDA events over 50 back-to-back products), Kiln's beside
  PyTorch's;
- the host's time per product: one launch sequence of one product, and per product of a
  sequence of ten, beside the runtime's ATen path (a tensor over each operand, then
  torch.mm(..., out=)) and torch's call alone, issued 200 times without waiting;
- a second eager run and one CUDA-graph capture and replay of Kiln's product, each bitwise
  against its first run (PyTorch may pick another algorithm; Kiln keeps its own).

Writes OUT/products.json and prints the table.
"""

from __future__ import annotations

import json
import pathlib
import statistics
import sys
import time
from typing import Any, Callable

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import bundle_and_out  # noqa: E402

BATCH_TOKENS, WIDTH, VOCAB, HEADS, SEQ = 2048, 768, 50257, 48, 512


def cases(torch: Any, dtype: Any) -> dict[str, tuple[str, list[Any]]]:
    """Name -> (target, operands as the plan passes them: bias first for addmm)."""
    dev = "cuda"

    def x(*shape: int) -> Any:
        return torch.randn(*shape, device=dev, dtype=dtype)

    def linear(out_features: int, in_features: int) -> tuple[str, list[Any]]:
        weight = x(out_features, in_features)  # nn.Linear's, read transposed
        return ("aten.addmm.default", [x(out_features), x(BATCH_TOKENS, in_features), weight.t()])

    grad = x(BATCH_TOKENS, 4 * WIDTH)
    q, k = x(HEADS, SEQ, 64), x(HEADS, SEQ, 64)
    unaligned = x(BATCH_TOKENS * WIDTH + 1)[1:].view(BATCH_TOKENS, WIDTH)
    return {
        "qkv": linear(3 * WIDTH, WIDTH),
        "attn_proj": linear(WIDTH, WIDTH),
        "fc": linear(4 * WIDTH, WIDTH),
        "fc_proj": linear(WIDTH, 4 * WIDTH),
        "head": ("aten.mm.default", [x(BATCH_TOKENS, WIDTH), x(VOCAB, WIDTH).t()]),
        "grad_weight": ("aten.mm.default", [grad.t(), x(BATCH_TOKENS, WIDTH)]),
        "grad_input": ("aten.mm.default", [grad, x(4 * WIDTH, WIDTH)]),
        "scores": ("aten.bmm.default", [q, k.transpose(1, 2)]),
        "unaligned": ("aten.mm.default", [unaligned, x(WIDTH, WIDTH)]),
    }


def torch_product(torch: Any, target: str, operands: list[Any], out: Any) -> None:
    fns = torch._C._VariableFunctions
    if target == "aten.addmm.default":
        fns.addmm(*operands, out=out)
    elif target == "aten.bmm.default":
        fns.bmm(*operands, out=out)
    else:
        fns.mm(*operands, out=out)


class KilnProduct:
    """One product as the runtime binds it: a Gemm from kiln.products.describe over views of
    the operands, in a launch sequence whose slots are the operands' addresses."""

    def __init__(self, torch: Any, target: str, operands: list[Any], out: Any) -> None:
        from kiln import cuda, products
        from kiln.bound_plan import BoundView

        views = [BoundView(i, t.dtype, t.element_size(), 0, list(t.shape), list(t.stride()))
                 for i, t in enumerate(operands + [out])]
        product = products.describe(target, [("view", v) for v in views[:-1]], {}, views[-1],
                                    products.matmul_settings())
        assert product is not None, target
        self.tensors = operands + [out]
        index = {id(v): i for i, v in enumerate(views)}
        self.workspace = torch.empty(products.GEMM_WORKSPACE_BYTES, dtype=torch.uint8,
                                     device="cuda")
        addresses = [t.data_ptr() for t in self.tensors] + [self.workspace.data_ptr()]
        order = [index[id(v)] for v in product.operands]  # A, B, D, bias
        # As the runtime binds a product of inputs: each expected at 256 bytes, and a run
        # whose address is less aligned takes the algorithm for any alignment.
        self.gemm = cuda.Gemm(torch.cuda.current_device(), product.dtype, product.flags,
                              product.batch, product.m, product.n, product.k, product.strides,
                              [0] * len(order), [256] * len(order),
                              products.GEMM_WORKSPACE_BYTES)
        slots = order[:3] + [len(self.tensors)] + order[3:]
        self.table = cuda.SlotTable(addresses)
        self.one = cuda.LaunchSequence([(self.gemm, slots)])
        self.ten = cuda.LaunchSequence([(self.gemm, slots)] * 10)
        self.stream = torch.cuda.current_stream().cuda_stream

    def run(self, stream: int = 0) -> None:
        """One product on `stream` (0: the stream current when it was made, as a plan's run
        reads its stream once)."""
        self.one.run(self.table, stream or self.stream)


def gpu_ms(torch: Any, fn: Callable[[], None], calls: int = 50) -> float:
    """Median GPU time of one call over three rounds of `calls` back-to-back calls."""
    times = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return statistics.median(times)


def host_us(torch: Any, fn: Callable[[], None], calls: int = 200, per: int = 1) -> float:
    """The host's microseconds per product, `calls` calls issued without waiting (best of 5)."""
    best = float("inf")
    for _ in range(5):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / (calls * per) * 1e6)
    torch.cuda.synchronize()
    return best


def main() -> int:
    args = bundle_and_out()
    sys.path.insert(0, str(args.bundle.resolve() / "python"))
    import torch

    guards = torch._C._dynamo.guards
    rows = []
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.bfloat16):
        for name, (target, operands) in cases(torch, dtype).items():
            a, b = operands[-2], operands[-1]
            shape = list(a.shape[:-1]) + [b.shape[-1]]
            expected = torch.empty(shape, device="cuda", dtype=dtype)
            torch_product(torch, target, operands, expected)
            out = torch.empty(shape, device="cuda", dtype=dtype)
            kiln = KilnProduct(torch, target, operands, out)
            kiln.run()
            torch.cuda.synchronize()
            first = out.clone()
            scale = expected.float().abs().max().item() or 1.0
            diff = (out.float() - expected.float()).abs().max().item() / scale
            equal = (out == expected).float().mean().item()

            def aten_path() -> None:
                # What the runtime did per product before: a tensor over each operand, then
                # PyTorch's product into the plan's memory.
                views = [guards._reinterpret_tensor(t, t.shape, t.stride(), 0)
                         for t in operands + [out]]
                torch_product(torch, target, views[:-1], views[-1])

            row = {
                "case": name, "dtype": str(dtype).replace("torch.", ""),
                "rel_diff": diff, "equal": round(equal, 4),
                "kiln_gpu_ms": gpu_ms(torch, kiln.run),
                "torch_gpu_ms": gpu_ms(torch, lambda: torch_product(torch, target, operands, out)),
                "kiln_host_us": host_us(torch, kiln.run),
                "kiln_host_us_in_ten": host_us(torch, lambda: kiln.ten.run(kiln.table, kiln.stream),
                                               calls=20, per=10),
                "aten_path_host_us": host_us(torch, aten_path),
                "torch_host_us": host_us(torch, lambda: torch_product(torch, target, operands,
                                                                      out)),
            }
            # The timings above left PyTorch's product in `out`: Kiln's runs again, then once
            # more in a capture; each must be bitwise its first run (the same algorithm).
            kiln.run()
            torch.cuda.synchronize()
            row["repeat_equal"] = bool(torch.equal(out, first))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                kiln.run(torch.cuda.current_stream().cuda_stream)  # the capturing stream
            out.zero_()
            graph.replay()
            torch.cuda.synchronize()
            row["graph_equal"] = bool(torch.equal(out, first))
            rows.append(row)
            print(json.dumps(row), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "products.json").write_text(json.dumps(rows, indent=1))
    print(f"{'case':12} {'dtype':9} {'rel diff':>9} {'equal':>6} {'gpu ms k/t':>16} "
          f"{'ratio':>6} {'host us kiln':>12} {'in ten':>7} {'aten path':>9} {'torch':>6} "
          f"{'ratio':>6} graph")
    bad = 0
    for r in rows:
        tolerance = 1e-5 if r["dtype"] == "float32" else 1e-2
        ok = r["rel_diff"] <= tolerance and r["repeat_equal"] and r["graph_equal"]
        bad += not ok
        print(f"{r['case']:12} {r['dtype']:9} {r['rel_diff']:9.2e} {r['equal']:6.3f} "
              f"{r['kiln_gpu_ms']:7.4f}/{r['torch_gpu_ms']:7.4f} "
              f"{r['kiln_gpu_ms'] / r['torch_gpu_ms']:6.3f} {r['kiln_host_us']:12.2f} "
              f"{r['kiln_host_us_in_ten']:7.2f} {r['aten_path_host_us']:9.2f} "
              f"{r['torch_host_us']:6.2f} {r['kiln_host_us'] / r['aten_path_host_us']:6.3f} "
              f"{'ok' if ok else 'MISMATCH'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
