"""Matrix products that kiln.gpu_runtime runs through cuBLASLt inside its launch sequences
(kiln.products, kiln.cuda.Gemm), with the stand-in torch, driver and cuBLASLt
(tests/client/runtime/cuda/fake_libcublaslt.c, which records each product): what reaches
cuBLASLt (operand addresses, workspace, stream, the algorithm for the operands' alignment,
PyTorch's precision settings), and which products stay ATen calls."""

from __future__ import annotations

import ctypes
import os
import pathlib
import sys
from typing import Any, Iterator

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gpu_runtime_test as rt  # noqa: E402  (the stand-ins, as gpu_runtime_test sets them)

FAKE_BLAS = rt.BINARY_DIR / "tests" / "client" / "kiln_fake_libcublaslt.so"
os.environ["KILN_LIBCUBLASLT"] = str(FAKE_BLAS)
torch = rt.torch

from kiln import products  # noqa: E402
from kiln.bound_plan import BoundView  # noqa: E402
from kiln.gpu_runtime import GpuRuntime, InputMismatch  # noqa: E402
from kiln.v1 import artifact_pb2 as pb  # noqa: E402
from kiln.v1 import graph_pb2  # noqa: E402


class Blas:
    """What the stand-in cuBLASLt recorded."""

    def __init__(self) -> None:
        self.lib = ctypes.CDLL(str(FAKE_BLAS))

    def calls(self) -> int:
        return self.lib.fake_cublaslt_call_count()

    def pointers(self, i: int) -> list[int]:
        """Call i's A, B, C, D, bias and workspace: cuBLAS's A is the product's B."""
        out = (ctypes.c_uint64 * 6)()
        self.lib.fake_cublaslt_call_pointers(i, out)
        return list(out)

    def algo(self, i: int) -> list[int]:
        """Call i's assumed alignment, reductions, compute type, bias alignment, compute type,
        TRANSA, TRANSB, workspace bytes."""
        out = (ctypes.c_uint64 * 8)()
        self.lib.fake_cublaslt_call_algo(i, out)
        return list(out)

    def stream(self, i: int) -> int:
        self.lib.fake_cublaslt_call_stream.restype = ctypes.c_void_p
        return self.lib.fake_cublaslt_call_stream(i)


@pytest.fixture
def blas(monkeypatch: pytest.MonkeyPatch) -> Iterator[Blas]:
    monkeypatch.setenv("KILN_PRODUCTS", "cublaslt")
    b = Blas()
    b.lib.fake_cublaslt_find_none(0)
    yield b
    b.lib.fake_cublaslt_find_none(0)


def inputs(b_offset: int = 0) -> list[Any]:
    return [torch.empty_strided([4, 8], [8, 1], torch.float32, "cuda:0"),
            torch.empty_strided([8, 16], [16, 1], torch.float32, "cuda:0", b_offset)]


def test_a_product_runs_in_the_launch_sequence_with_its_operands_addresses(blas: Blas) -> None:
    driver = rt.Driver()
    runtime = GpuRuntime(rt.mm_artifact(128), torch.device("cuda", 0))
    # p at arena offset 128 is the least aligned operand: 128 bytes; an input 64 bytes past a
    # multiple of 256 takes the algorithm for any alignment, 4 bytes.
    for b_offset, alignment in ((0, 128), (16, 4)):
        before, calls, products_before = driver.count(), len(torch.calls), blas.calls()
        x = inputs(b_offset)
        (y,) = runtime.run(x)
        assert len(torch.calls) == calls, "no ATen call: the product is cuBLASLt's"
        assert driver.count() == before + 2 and blas.calls() == products_before + 1
        (_, k0, _), (_, k1, _) = driver.launch(before), driver.launch(before + 1)
        arena = k0[1]  # t, the product's A, sits at the arena's start; p at 128
        assert k1 == [arena + 128, y.untyped_storage().data_ptr()]
        # cuBLAS's first operand is the product's B (the input, its storage offset applied),
        # its second A; C and D are p; no bias; the workspace after the plan's 384 bytes.
        assert blas.pointers(products_before) == [x[1].data_ptr(), arena, arena + 128,
                                                  arena + 128, 0, arena + 512]
        assert blas.stream(products_before) == 0x5EED
        algo = blas.algo(products_before)
        assert algo[0] == alignment, b_offset
        assert algo[2] == 68 and algo[7] == products.GEMM_WORKSPACE_BYTES  # fp32, no TF32
    plan = next(iter(runtime._bound.values()))
    assert plan.products == 1
    assert [s.kind for s in plan.segments] == ["launches"]  # k0, the product, k1: one call
    assert plan.arena_bytes == 512 + products.GEMM_WORKSPACE_BYTES


def test_a_product_whose_result_would_overwrite_its_operand_stays_an_aten_call(
        blas: Blas) -> None:
    said: list[str] = []
    runtime = GpuRuntime(rt.mm_artifact(0), torch.device("cuda", 0),  # p over t, mm's A
                         log=said.append)
    calls = blas.calls()
    runtime.run(inputs())
    assert torch.calls[-1][0] == "aten.mm.default"
    assert blas.calls() == calls
    assert said[0].endswith("the first because aten.mm.default writes over an operand")


def test_pytorchs_matmul_settings_are_read_at_each_run(blas: Blas,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    runtime = GpuRuntime(rt.mm_artifact(128), torch.device("cuda", 0))
    runtime.run(inputs())
    assert blas.algo(blas.calls() - 1)[2] == 68
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    runtime.run(inputs())
    assert blas.algo(blas.calls() - 1)[2] == 77, "CUBLAS_COMPUTE_32F_FAST_TF32"
    assert len(runtime._bound) == 2


def test_an_input_a_product_reads_must_be_on_the_plans_device(blas: Blas) -> None:
    runtime = GpuRuntime(rt.mm_artifact(128), torch.device("cuda", 0))
    x = inputs()
    x[1] = torch.empty_strided([8, 16], [16, 1], torch.float32, "cpu")
    calls = blas.calls()
    with pytest.raises(InputMismatch, match="input b: on cpu, the plan runs on cuda:0"):
        runtime.run(x)
    assert blas.calls() == calls


def test_without_an_algorithm_a_product_is_an_aten_call_and_the_log_says_why(
        blas: Blas) -> None:
    blas.lib.fake_cublaslt_find_none(1)
    said: list[str] = []
    runtime = GpuRuntime(rt.mm_artifact(128), torch.device("cuda", 0), log=said.append)
    calls = blas.calls()
    runtime.run(inputs())
    assert torch.calls[-1][0] == "aten.mm.default"
    assert blas.calls() == calls
    assert said == ["1 of 1 matrix products run as ATen calls, not through cuBLASLt; the first "
                    "because kiln_cuda_gemm_create: cublasLtMatmulAlgoGetHeuristic: "
                    "CUBLAS_STATUS_NOT_SUPPORTED (unknown)"]


def test_kiln_products_says_whether_products_may_run_through_cublaslt(
        blas: Blas, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KILN_PRODUCTS", "aten")
    runtime = GpuRuntime(rt.mm_artifact(128), torch.device("cuda", 0))
    calls = blas.calls()
    runtime.run(inputs())
    assert torch.calls[-1][0] == "aten.mm.default" and blas.calls() == calls
    monkeypatch.setenv("KILN_PRODUCTS", "cublas")
    with pytest.raises(ValueError, match="KILN_PRODUCTS='cublas': expected 'cublaslt' or 'aten'"):
        products.wanted()


def addmm_artifact(beta: int = 1) -> pb.CompiledGraph:
    """y = addmm(bias [16], a [4, 8], b [8, 16]) in float32, the product the graph's output."""
    a = pb.CompiledGraph(target="cuda:sm_90", compile_key="a" * 64)
    for name, size in (("bias", 64), ("a", 128), ("b", 512)):
        a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=len(a.buffers), dtype=1,
                      size_bytes=rt.sym(str(size)), alignment=4, name=name)
    a.buffers.add(kind=pb.BUFFER_KIND_OUTPUT, dtype=1, size_bytes=rt.sym("256"), alignment=64,
                  name="y")
    call = a.steps.add().extern_call
    call.op = "aten.addmm.default"
    call.node = "%3"
    call.args.add().tensor.CopyFrom(rt.view(0, [16], [1], 1))
    call.args.add().tensor.CopyFrom(rt.view(1, [4, 8], [8, 1], 1))
    call.args.add().tensor.CopyFrom(rt.view(2, [8, 16], [16, 1], 1))
    if beta != 1:
        call.kwargs.add(name="beta").value.value.CopyFrom(graph_pb2.Argument(int_value=beta))
    call.outputs.add().CopyFrom(rt.view(3, [4, 16], [16, 1], 1))
    a.outputs.add().view.CopyFrom(rt.view(3, [4, 16], [16, 1], 1))
    for name, sizes, strides in (("bias", [16], [1]), ("a", [4, 8], [8, 1]),
                                 ("b", [8, 16], [16, 1])):
        spec = a.inputs.add(name=name, dtype=1)
        spec.sizes.extend(rt.sym(str(x)) for x in sizes)
        spec.strides.extend(rt.sym(str(x)) for x in strides)
    a.cudagraph.workspace_bytes.CopyFrom(rt.sym("0"))
    return a


def addmm_inputs() -> list[Any]:
    return [torch.empty_strided([16], [1], torch.float32, "cuda:0"),
            torch.empty_strided([4, 8], [8, 1], torch.float32, "cuda:0"),
            torch.empty_strided([8, 16], [16, 1], torch.float32, "cuda:0")]


def test_addmms_bias_is_the_products_epilogue(blas: Blas) -> None:
    runtime = GpuRuntime(addmm_artifact(), torch.device("cuda", 0))
    x = addmm_inputs()
    calls = len(torch.calls)
    (y,) = runtime.run(x)
    assert len(torch.calls) == calls
    p = blas.pointers(blas.calls() - 1)
    assert p[:5] == [x[2].data_ptr(), x[1].data_ptr(), y.data_ptr(), y.data_ptr(),
                     x[0].data_ptr()]
    assert (y.shape, y.stride()) == ([4, 16], [16, 1])


def test_an_addmm_scaling_its_bias_is_an_aten_call(blas: Blas) -> None:
    runtime = GpuRuntime(addmm_artifact(beta=2), torch.device("cuda", 0))
    calls = blas.calls()
    runtime.run(addmm_inputs())
    target, _, kwargs = torch.calls[-1]
    assert (target, kwargs) == ("aten.addmm.default", {"beta": 2})
    assert blas.calls() == calls


def bound(sizes: list[int], strides: list[int], kind: Any = None, offset: int = 0) -> BoundView:
    kind = kind or torch.float32
    return BoundView(0, kind, kind.itemsize, offset, sizes, strides)


SETTINGS = (False, True, True)  # PyTorch's defaults


def describe(target: str, *views: BoundView, out: BoundView,
             **kwargs: Any) -> products.Product | None:
    return products.describe(target, [("view", v) for v in views],
                             {k: ("value", v) for k, v in kwargs.items()}, out, SETTINGS)


def test_products_describe_each_operand_over_batch_rows_and_columns() -> None:
    p = describe("aten.mm.default", bound([4, 8], [1, 4]), bound([8, 16], [16, 1]),
                 out=bound([4, 16], [16, 1]))
    assert p is not None
    assert (p.batch, p.m, p.n, p.k, p.flags) == (1, 4, 16, 8, 0)
    assert p.strides == ((0, 1, 4), (0, 16, 1), (0, 16, 1))
    p = describe("aten.bmm.default", bound([2, 4, 8], [32, 8, 1], torch.bfloat16),
                 bound([2, 8, 16], [0, 16, 1], torch.bfloat16),
                 out=bound([2, 4, 16], [64, 16, 1], torch.bfloat16))
    assert p is not None and p.batch == 2 and p.strides[1] == (0, 16, 1)
    assert p.flags == 2, "bf16 split-k may sum in bf16, as PyTorch allows by default"
    # A bias broadcast over the rows, as a [4, 16] view with row stride 0.
    p = describe("aten.addmm.default", bound([4, 16], [0, 1]), bound([4, 8], [8, 1]),
                 bound([8, 16], [16, 1]), out=bound([4, 16], [16, 1]), beta=1, alpha=1.0)
    assert p is not None and p.flags == 4 and len(p.operands) == 4


def test_products_cublaslt_cannot_do_as_described_stay_aten_calls() -> None:
    b, out = bound([8, 16], [16, 1]), bound([4, 16], [16, 1])
    a = bound([4, 8], [8, 1])
    refused = {
        "an element type cuBLASLt has no product for": describe(
            "aten.mm.default", bound([4, 8], [8, 1], torch.float64), bound(
                [8, 16], [16, 1], torch.float64), out=bound([4, 16], [16, 1], torch.float64)),
        "mixed element types": describe("aten.mm.default", a, bound([8, 16], [16, 1],
                                                                    torch.bfloat16), out=out),
        "a bias of a full matrix": describe("aten.addmm.default", bound([4, 16], [16, 1]), a,
                                            b, out=out),
        "a scaled product": describe("aten.addmm.default", bound([16], [1]), a, b, out=out,
                                     alpha=2),
        "an empty extent": describe("aten.mm.default", bound([4, 0], [0, 1]),
                                    bound([0, 16], [16, 1]), out=out),
        "not a product": describe("aten.add.Tensor", a, a, out=a),
    }
    assert {why: p for why, p in refused.items() if p is not None} == {}


class _Mixed:
    """torch.backends.cuda.matmul of a PyTorch that refuses to read its TF32 setting (set
    through both its APIs), its split-k setting made as (allowed, split-k allowed)."""

    fp32_precision = "none"
    allow_bf16_reduced_precision_reduction = (True, False)
    allow_fp16_reduced_precision_reduction = (False, True)

    @property
    def allow_tf32(self) -> bool:
        raise RuntimeError("PyTorch is checking whether allow_tf32 is enabled for cuBlas "
                           "matmul, but a mix of legacy and new APIs was used")


def test_settings_pytorch_cannot_give_keep_that_types_products_aten_calls(
        blas: Blas, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.backends.cuda, "matmul", _Mixed())
    # fp32: unknown; bf16: split-k refused altogether; fp16: no reduced-precision sums.
    assert products.matmul_settings() == (None, None, False)
    runtime = GpuRuntime(rt.mm_artifact(128), torch.device("cuda", 0))
    calls = blas.calls()
    runtime.run(inputs())
    assert torch.calls[-1][0] == "aten.mm.default" and blas.calls() == calls
    monkeypatch.setattr(_Mixed, "fp32_precision", "tf32")
    assert products.matmul_settings()[0] is True
    runtime.run(inputs())
    assert blas.calls() == calls + 1 and blas.algo(calls)[2] == 77
