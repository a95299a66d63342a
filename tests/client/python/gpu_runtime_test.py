"""kiln.gpu_runtime's plan bookkeeping without a GPU or PyTorch: a stand-in torch
(fake_torch.py) whose tensors are address ranges, and the stand-in CUDA driver
(tests/client/runtime/cuda/fake_libcuda.c) recording each launch. What reaches the driver —
pointers (an input's storage offset applied, arena offsets), symbols, RNG seed and offset,
grid and block —, what reaches the ATen ops of extern steps, and the errors for artifacts and
inputs that do not fit."""

from __future__ import annotations

import ctypes
import hashlib
import os
import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import fake_torch  # noqa: E402

BINARY_DIR = pathlib.Path(os.environ.get("KILN_BINARY_DIR", "build/release"))
FAKE_DRIVER = BINARY_DIR / "tests" / "client" / "kiln_fake_libcuda.so"
os.environ["KILN_RUNTIME_LIBRARY"] = str(BINARY_DIR / "client" / "libkiln_runtime.so")
os.environ["KILN_LIBCUDA"] = str(FAKE_DRIVER)
# Products here stay ATen calls; gpu_products_test runs them through the stand-in cuBLASLt.
os.environ["KILN_PRODUCTS"] = "aten"
torch = fake_torch.install()

from kiln.gpu_runtime import GpuRuntime, InputMismatch, RuntimeLoadError  # noqa: E402
from kiln.v1 import artifact_pb2 as pb  # noqa: E402

IMAGE = b"kernel kiln_k0 6\n"


def sym(text: str):  # type: ignore[no-untyped-def]
    from kiln.v1 import graph_pb2

    return graph_pb2.SymInt(expr=text) if not text.isdigit() else graph_pb2.SymInt(value=int(text))


def artifact(image: bytes = IMAGE, kernel: str = "kiln_k0") -> pb.CompiledGraph:
    """y = f(x) over x[s0] float32: one kernel reading x, writing y, using an arena buffer."""
    a = pb.CompiledGraph(target="cuda:sm_90", compile_key="k" * 64, symbols=["s0"])
    a.symbol_sources.add(symbol="s0", input_index=0, dim=0)
    a.modules.add(target="cuda:sm_90", kind=pb.BINARY_KIND_CUBIN, binary=image,
                  digest=pb.Digest(hash=hashlib.sha256(image).hexdigest(),
                                   size_bytes=len(image)))
    k = a.kernels.add(name=kernel, module=0)
    for b in range(3):
        k.params.add(kind=pb.PARAM_KIND_BUFFER, buffer=b)
    k.params.add(kind=pb.PARAM_KIND_SYMBOL, symbol="s0")
    k.params.add(kind=pb.PARAM_KIND_RNG_SEED)
    k.params.add(kind=pb.PARAM_KIND_RNG_OFFSET)
    k.launch.grid.extend([sym("CeilDiv(s0, 256)"), sym("1"), sym("1")])
    k.launch.block.extend([sym("256"), sym("1"), sym("1")])
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=0, dtype=1, size_bytes=sym("4*s0"),
                  alignment=4, name="x")
    a.buffers.add(kind=pb.BUFFER_KIND_OUTPUT, dtype=1, size_bytes=sym("4*s0"), alignment=64,
                  name="y")
    a.buffers.add(kind=pb.BUFFER_KIND_INTERMEDIATE, dtype=1, size_bytes=sym("4*s0"),
                  arena_offset=sym("128"), alignment=64, name="t")
    a.steps.add().launch.kernel = 0
    out = a.outputs.add()
    out.view.buffer = 1
    out.view.sizes.append(sym("s0"))
    out.view.strides.append(sym("1"))
    out.view.offset.CopyFrom(sym("0"))
    out.view.dtype = 1
    spec = a.inputs.add(name="x", dtype=1)
    spec.sizes.append(sym("s0"))
    spec.strides.append(sym("1"))
    a.cudagraph.workspace_bytes.CopyFrom(sym("128 + 4*s0"))
    a.cudagraph.rng_offset_increment = 4
    return a


class Driver:
    """What the stand-in driver recorded."""

    def __init__(self) -> None:
        lib = ctypes.CDLL(str(FAKE_DRIVER))
        lib.fake_cuda_launch_values.restype = ctypes.POINTER(ctypes.c_uint64)
        lib.fake_cuda_launch_geometry.restype = ctypes.POINTER(ctypes.c_uint)
        lib.fake_cuda_launch_stream.restype = ctypes.c_void_p
        lib.fake_cuda_launch_name.restype = ctypes.c_char_p
        self.lib = lib

    def count(self) -> int:
        return self.lib.fake_cuda_launch_count()

    def launch(self, i: int) -> tuple[list[int], list[int], int]:
        g = self.lib.fake_cuda_launch_geometry(i)
        v = self.lib.fake_cuda_launch_values(i)
        return ([g[k] for k in range(7)], [v[k] for k in range(self.lib.fake_cuda_launch_params(i))],
                self.lib.fake_cuda_launch_stream(i))


def cuda_input(n: int, offset: int = 0, stride: int = 1, kind=None):  # type: ignore[no-untyped-def]
    return torch.empty_strided([n], [stride], kind or torch.float32, "cuda:0", offset)


def test_a_launch_gets_pointers_symbols_rng_and_geometry() -> None:
    driver = Driver()
    runtime = GpuRuntime(artifact(), torch.device("cuda", 0))
    x = cuda_input(1000, offset=3)
    before = driver.count()
    (y,) = runtime.run([x], rng_seed=77)
    assert driver.count() == before + 1
    geometry, values, stream = driver.launch(before)
    assert geometry == [4, 1, 1, 256, 1, 1, 0]  # ceil(1000 / 256) blocks
    assert stream == 0x5EED  # PyTorch's current stream
    # The input buffer starts at the tensor's first element: its storage offset applied.
    assert values[0] == x.untyped_storage().data_ptr() + 3 * 4
    assert values[1] == y.untyped_storage().data_ptr()
    assert values[3:] == [1000, 77, 0]
    # The output is a view of the output buffer with the plan's geometry.
    assert (y.shape, y.stride(), y.storage_offset()) == ([1000], [1], 0)

    # The next run draws fresh numbers: the offset moves by the plan's increment.
    runtime.run([x], rng_seed=77)
    assert driver.launch(before + 1)[1][5] == 4


def test_arena_buffers_sit_at_their_offsets() -> None:
    driver = Driver()
    runtime = GpuRuntime(artifact(), torch.device("cuda", 0))
    before = driver.count()
    runtime.run([cuda_input(512)])
    _, values, _ = driver.launch(before)
    # The arena is allocated per run; the intermediate is 128 bytes into it, 64-aligned.
    assert values[2] % 64 == (values[2] - 128) % 64
    assert values[2] - 128 not in (values[0], values[1])


def test_an_empty_input_launches_nothing() -> None:
    driver = Driver()
    runtime = GpuRuntime(artifact(), torch.device("cuda", 0))
    before = driver.count()
    (y,) = runtime.run([cuda_input(0)])
    assert driver.count() == before
    assert y.shape == [0]


def test_inputs_that_do_not_fit_are_refused_naming_the_input() -> None:
    runtime = GpuRuntime(artifact(), torch.device("cuda", 0))
    with pytest.raises(InputMismatch, match="input x: dtype torch.float16"):
        runtime.run([cuda_input(8, kind=torch.float16)])
    with pytest.raises(InputMismatch, match=r"input x: strides \[2\], the plan expects \[1\]"):
        runtime.run([cuda_input(8, stride=2)])
    with pytest.raises(InputMismatch, match="input x: on cpu"):
        runtime.run([torch.empty_strided([8], [1], torch.float32, "cpu")])
    with pytest.raises(InputMismatch, match="the plan takes 1 inputs, 2 given"):
        runtime.run([cuda_input(8), cuda_input(8)])
    # An input no step reads is checked too, after the steps.
    a = artifact()
    spec = a.inputs.add(name="u", dtype=1)
    spec.sizes.append(sym("2"))
    spec.strides.append(sym("1"))
    runtime = GpuRuntime(a, torch.device("cuda", 0))
    runtime.run([cuda_input(8), cuda_input(2)])
    with pytest.raises(InputMismatch, match=r"input u: sizes \[3\]"):
        runtime.run([cuda_input(8), cuda_input(3)])


def test_artifacts_the_runtime_cannot_run_are_refused_saying_why() -> None:
    wrong_target = artifact()
    wrong_target.target = "x86_64"
    with pytest.raises(RuntimeLoadError, match="artifact is for 'x86_64'"):
        GpuRuntime(wrong_target, torch.device("cuda", 0))
    damaged = artifact()
    damaged.modules[0].binary = b"kernel kiln_k0 7\n"
    with pytest.raises(RuntimeLoadError, match="module 0: its bytes do not match its digest"):
        GpuRuntime(damaged, torch.device("cuda", 0))
    with pytest.raises(RuntimeLoadError, match="kernel 0 \\(kiln_k9\\).*CUDA_ERROR_NOT_FOUND"):
        GpuRuntime(artifact(kernel="kiln_k9"), torch.device("cuda", 0))
    bad_expr = artifact()
    bad_expr.kernels[0].launch.grid[0].expr = "CeilDiv(s7, 256)"
    with pytest.raises(RuntimeLoadError, match="unknown symbol 's7'"):
        GpuRuntime(bad_expr, torch.device("cuda", 0))


def view(buffer: int, sizes: list[int], strides: list[int], dtype: int) -> pb.TensorView:
    v = pb.TensorView(buffer=buffer, dtype=dtype, offset=sym("0"))
    v.sizes.extend(sym(str(x)) for x in sizes)
    v.strides.extend(sym(str(x)) for x in strides)
    return v


def embedding_backward_artifact(padding_idx: int, scale: bool) -> pb.CompiledGraph:
    """grad_weight = embedding_dense_backward(grad [6, 4] float32, indices [6] int64, 10,
    padding_idx, scale) as the compiler plans it: one extern step and no kernels."""
    a = pb.CompiledGraph(target="cuda:sm_90", compile_key="e" * 64)
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=0, dtype=1, size_bytes=sym("96"),
                  alignment=4, name="grad")
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=1, dtype=5, size_bytes=sym("48"),
                  alignment=8, name="indices")
    a.buffers.add(kind=pb.BUFFER_KIND_OUTPUT, dtype=1, size_bytes=sym("160"), alignment=64,
                  name="grad_weight")
    call = a.steps.add().extern_call
    call.op = "aten.embedding_dense_backward.default"
    call.node = "%2"
    call.rng_stream = -1
    call.args.add().tensor.CopyFrom(view(0, [6, 4], [4, 1], 1))
    call.args.add().tensor.CopyFrom(view(1, [6], [1], 5))
    call.args.add().value.int_value = 10
    call.args.add().value.int_value = padding_idx
    call.args.add().value.bool_value = scale
    call.outputs.add().CopyFrom(view(2, [10, 4], [4, 1], 1))
    a.outputs.add().view.CopyFrom(view(2, [10, 4], [4, 1], 1))
    for name, dtype, sizes, strides in (("grad", 1, [6, 4], [4, 1]), ("indices", 5, [6], [1])):
        spec = a.inputs.add(name=name, dtype=dtype)
        spec.sizes.extend(sym(str(x)) for x in sizes)
        spec.strides.extend(sym(str(x)) for x in strides)
    a.cudagraph.workspace_bytes.CopyFrom(sym("0"))
    a.cudagraph.capturable = True
    return a


@pytest.mark.parametrize("padding_idx,scale", [(-1, False), (3, True)])
def test_the_embedding_gradient_is_atens_sorting_kernel(padding_idx: int, scale: bool) -> None:
    # ATen's CUDA embedding_dense_backward sums each row in index order (deterministic) and
    # handles padding_idx and scale_grad_by_freq itself: the runtime passes them through.
    driver = Driver()
    runtime = GpuRuntime(embedding_backward_artifact(padding_idx, scale), torch.device("cuda", 0))
    grad = torch.empty_strided([6, 4], [4, 1], torch.float32, "cuda:0", 8)
    indices = torch.empty_strided([6], [1], torch.int64, "cuda:0")
    launches, calls, copies = driver.count(), len(torch.calls), len(torch.copies)
    (grad_weight,) = runtime.run([grad, indices])
    assert driver.count() == launches, "no kernel of Kiln's computes it"
    assert len(torch.calls) == calls + 1
    target, args, kwargs = torch.calls[-1]
    assert target == "torch.embedding_dense_backward"  # PyTorch's binding, not torch.ops'
    assert args[2:] == (10, padding_idx, scale) and kwargs == {}
    # The op reads the caller's tensors where they are.
    assert (args[0].data_ptr(), args[0].shape, args[0].stride()) == (grad.data_ptr(), [6, 4],
                                                                     [4, 1])
    assert (args[1].data_ptr(), args[1].dtype) == (indices.data_ptr(), torch.int64)
    # Its result lands in the output the runtime returns.
    assert len(torch.copies) == copies + 1
    dst, src = torch.copies[-1]
    assert dst.data_ptr() == grad_weight.data_ptr() and dst.shape == [10, 4]
    assert (src.shape, src.dtype) == ([10, 4], torch.float32)


def test_an_extern_result_that_is_an_output_is_returned_as_it_is_after_the_first_run() -> None:
    runtime = GpuRuntime(embedding_backward_artifact(-1, False), torch.device("cuda", 0))
    grad = torch.empty_strided([6, 4], [4, 1], torch.float32, "cuda:0", 8)
    indices = torch.empty_strided([6], [1], torch.int64, "cuda:0")
    runtime.run([grad, indices])
    copies = len(torch.copies)
    (grad_weight,) = runtime.run([grad, indices])
    assert len(torch.copies) == copies, "the op's result is the output: no copy"
    assert (grad_weight.shape, grad_weight.stride(), grad_weight.dtype) == ([10, 4], [4, 1],
                                                                             torch.float32)


def test_an_output_that_is_an_input_as_it_is_is_that_input() -> None:
    # A forward returns a parameter it saves for its backward: the run returns the caller's
    # tensor, as PyTorch's generated code does. A view of it that differs (a transpose, a
    # later start) is a tensor of its own over the input's memory.
    a = embedding_backward_artifact(-1, False)
    a.outputs.add().view.CopyFrom(view(0, [6, 4], [4, 1], 1))
    a.outputs.add().view.CopyFrom(view(0, [4, 6], [1, 4], 1))
    later = a.outputs.add()
    later.view.CopyFrom(view(0, [5, 4], [4, 1], 1))
    later.view.offset.CopyFrom(sym("4"))
    runtime = GpuRuntime(a, torch.device("cuda", 0))
    grad = torch.empty_strided([6, 4], [4, 1], torch.float32, "cuda:0", 8)
    indices = torch.empty_strided([6], [1], torch.int64, "cuda:0")
    for _ in range(2):  # checked, then as the first run's (kiln.input_guard)
        _, same, transposed, rows = runtime.run([grad, indices])
        assert same is grad
        assert transposed is not grad and (transposed.shape, transposed.stride()) == ([4, 6],
                                                                                      [1, 4])
        assert transposed.data_ptr() == grad.data_ptr()
        assert rows.shape == [5, 4] and rows.data_ptr() == grad.data_ptr() + 4 * 4
    (plan,) = runtime._bound.values()
    assert plan.returned_inputs == {1: 0}


def test_an_output_viewing_a_kept_extern_result_otherwise_is_a_view_of_it() -> None:
    # The min-cut partitioner saves a transpose of an op's result beside the result: the
    # transpose, listed first, is the output that covers the buffer when the plan is bound.
    a = embedding_backward_artifact(-1, False)
    transposed = view(2, [4, 10], [1, 4], 1)
    a.outputs.insert(0, pb.OutputBinding(view=transposed))
    runtime = GpuRuntime(a, torch.device("cuda", 0))
    grad = torch.empty_strided([6, 4], [4, 1], torch.float32, "cuda:0", 8)
    indices = torch.empty_strided([6], [1], torch.int64, "cuda:0")
    for run in range(3):  # the first run copies the result, later ones keep it
        t, grad_weight = runtime.run([grad, indices])
        assert (t.shape, t.stride(), grad_weight.shape, grad_weight.stride()) == (
            [4, 10], [1, 4], [10, 4], [4, 1]), f"run {run}"
        assert t.untyped_storage() is grad_weight.untyped_storage()
        assert t.data_ptr() == grad_weight.data_ptr()


def mm_artifact(product_offset: int) -> pb.CompiledGraph:
    """y = k1(mm(k0(a), b)) over a [4, 8] and b [8, 16] float32: k0 writes t (arena offset
    0, 128 bytes), the extern mm writes p at `product_offset` in the arena, k1 reads p and
    writes the output y. A p at offset 0 shares t's memory (t dies at the mm)."""
    image = b"kernel kiln_k0 2\nkernel kiln_k1 2\n"
    a = pb.CompiledGraph(target="cuda:sm_90", compile_key="m" * 64)
    a.modules.add(target="cuda:sm_90", kind=pb.BINARY_KIND_CUBIN, binary=image,
                  digest=pb.Digest(hash=hashlib.sha256(image).hexdigest(),
                                   size_bytes=len(image)))
    for name, reads, writes in (("kiln_k0", 0, 2), ("kiln_k1", 4, 3)):
        k = a.kernels.add(name=name, module=0)
        k.params.add(kind=pb.PARAM_KIND_BUFFER, buffer=reads)
        k.params.add(kind=pb.PARAM_KIND_BUFFER, buffer=writes)
        k.launch.grid.extend([sym("1"), sym("1"), sym("1")])
        k.launch.block.extend([sym("128"), sym("1"), sym("1")])
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=0, dtype=1, size_bytes=sym("128"),
                  alignment=4, name="a")
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=1, dtype=1, size_bytes=sym("512"),
                  alignment=4, name="b")
    a.buffers.add(kind=pb.BUFFER_KIND_INTERMEDIATE, dtype=1, size_bytes=sym("128"),
                  arena_offset=sym("0"), alignment=64, name="t")
    a.buffers.add(kind=pb.BUFFER_KIND_OUTPUT, dtype=1, size_bytes=sym("256"), alignment=64,
                  name="y")
    a.buffers.add(kind=pb.BUFFER_KIND_INTERMEDIATE, dtype=1, size_bytes=sym("256"),
                  arena_offset=sym(str(product_offset)), alignment=64, name="p")
    a.steps.add().launch.kernel = 0
    call = a.steps.add().extern_call
    call.op = "aten.mm.default"
    call.node = "%3"
    call.args.add().tensor.CopyFrom(view(2, [4, 8], [8, 1], 1))
    call.args.add().tensor.CopyFrom(view(1, [8, 16], [16, 1], 1))
    call.outputs.add().CopyFrom(view(4, [4, 16], [16, 1], 1))
    a.steps.add().launch.kernel = 1
    a.outputs.add().view.CopyFrom(view(3, [4, 16], [16, 1], 1))
    for name, sizes, strides in (("a", [4, 8], [8, 1]), ("b", [8, 16], [16, 1])):
        spec = a.inputs.add(name=name, dtype=1)
        spec.sizes.extend(sym(str(x)) for x in sizes)
        spec.strides.extend(sym(str(x)) for x in strides)
    a.cudagraph.workspace_bytes.CopyFrom(sym(str(max(128, product_offset + 256))))
    return a


def mm_inputs():  # type: ignore[no-untyped-def]
    return [torch.empty_strided([4, 8], [8, 1], torch.float32, "cuda:0"),
            torch.empty_strided([8, 16], [16, 1], torch.float32, "cuda:0")]


def test_kernels_between_other_steps_launch_in_order_with_the_runs_addresses() -> None:
    driver = Driver()
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    for _ in range(2):  # the second run reuses the bound plan with new buffers
        before, calls = driver.count(), len(torch.calls)
        (y,) = runtime.run(mm_inputs())
        assert driver.count() == before + 2
        (_, k0, _), (_, k1, _) = driver.launch(before), driver.launch(before + 1)
        arena = k0[1]  # t sits at the arena's start
        assert k1 == [arena + 128, y.untyped_storage().data_ptr()]
        assert len(torch.calls) == calls + 1
        (mm_a, _), _ = torch.calls[-1][1], torch.calls[-1][2]
        assert mm_a.data_ptr() == arena


def test_a_step_callback_sees_an_output_buffer_no_step_has_touched_in_its_own_memory() -> None:
    # y is first written by k1 (step 2); a callback after step 0 viewing it gets y's memory,
    # which the run then keeps for k1 and returns.
    driver = Driver()
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    seen = {}

    def after(index: int, buffer_view) -> None:  # type: ignore[no-untyped-def]
        if index == 0:
            seen["y"] = buffer_view(3, torch.float32, [4, 16], [16, 1])

    (y,) = runtime.run(mm_inputs(), after_step=after)
    assert seen["y"].data_ptr() == y.data_ptr()
    assert driver.launch(driver.count() - 1)[1][1] == y.data_ptr()


def test_each_input_is_checked_before_the_first_step_that_reads_it() -> None:
    # k0 launches before b, which only the product reads, is checked: the GPU starts while
    # the host checks the rest. A b that does not fit stops the run before the product.
    driver = Driver()
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    runtime.run(mm_inputs())
    a, _ = mm_inputs()
    launches, calls = driver.count(), len(torch.calls)
    wrong = torch.empty_strided([8, 16], [1, 8], torch.float32, "cuda:0")
    with pytest.raises(InputMismatch, match=r"input b: strides \[1, 8\], the plan expects"):
        runtime.run([a, wrong])
    assert (driver.count(), len(torch.calls)) == (launches + 1, calls)
    # An a that does not fit stops it before anything runs.
    with pytest.raises(InputMismatch, match="input a: dtype torch.float16"):
        runtime.run([torch.empty_strided([4, 8], [8, 1], torch.float16, "cuda:0"), wrong])
    assert driver.count() == launches + 1


def test_every_input_is_checked_before_a_write_back_writes() -> None:
    a = mm_artifact(128)
    for name in ("c", "unused"):  # c receives y at the end; nothing reads unused
        spec = a.inputs.add(name=name, dtype=1)
        spec.sizes.extend([sym("4"), sym("16")])
        spec.strides.extend([sym("16"), sym("1")])
    a.steps.add().write_back.CopyFrom(pb.WriteBackStep(input_index=2,
                                                       src=view(3, [4, 16], [16, 1], 1)))
    runtime = GpuRuntime(a, torch.device("cuda", 0))

    def tensor(strides: list[int]):  # type: ignore[no-untyped-def]
        return torch.empty_strided([4, 16], strides, torch.float32, "cuda:0")

    c = tensor([16, 1])
    runtime.run(mm_inputs() + [c, tensor([16, 1])])
    assert torch.copies[-1][0].data_ptr() == c.data_ptr()  # y written back into c
    copies = len(torch.copies)
    with pytest.raises(InputMismatch, match="input c: strides"):
        runtime.run(mm_inputs() + [tensor([1, 4]), tensor([16, 1])])
    with pytest.raises(InputMismatch, match="input unused: strides"):
        runtime.run(mm_inputs() + [c, tensor([1, 4])])
    assert len(torch.copies) == copies  # neither wrote c back


def write_back_artifact(c_strides: list[int]) -> pb.CompiledGraph:
    """mm_artifact, then y written back into input c ([4, 16] float32 with these strides),
    whose buffer the plan has, and an input `unused` nothing reads."""
    a = mm_artifact(128)
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=2, dtype=1, size_bytes=sym("256"),
                  alignment=4, name="c")
    for name, strides in (("c", c_strides), ("unused", [16, 1])):
        spec = a.inputs.add(name=name, dtype=1)
        spec.sizes.extend([sym("4"), sym("16")])
        spec.strides.extend(sym(str(x)) for x in strides)
    a.steps.add().write_back.CopyFrom(pb.WriteBackStep(input_index=2,
                                                       src=view(3, [4, 16], [16, 1], 1)))
    return a


def test_a_dense_write_back_is_a_device_copy_after_the_last_kernel() -> None:
    driver = Driver()
    runtime = GpuRuntime(write_back_artifact([16, 1]), torch.device("cuda", 0))
    c = torch.empty_strided([4, 16], [16, 1], torch.float32, "cuda:0", 4)
    before, copies = driver.count(), len(torch.copies)
    (y,) = runtime.run(mm_inputs() + [c, torch.empty_strided([4, 16], [16, 1], torch.float32,
                                                             "cuda:0")])
    assert len(torch.copies) == copies + 1  # the mm's first result only, not the write-back
    assert driver.count() == before + 3  # k0, k1 and the copy
    assert driver.lib.fake_cuda_launch_name(before + 2) == b"cuMemcpyDtoDAsync"
    _, (dst, src, size), _ = driver.launch(before + 2)
    assert (dst, src, size) == (c.data_ptr(), y.data_ptr(), 256)
    # A bad input that nothing reads still stops the run before the copy writes c.
    before = driver.count()
    with pytest.raises(InputMismatch, match="input unused: strides"):
        runtime.run(mm_inputs() + [c, torch.empty_strided([4, 16], [1, 4], torch.float32,
                                                          "cuda:0")])
    assert all(driver.lib.fake_cuda_launch_name(i) != b"cuMemcpyDtoDAsync"
               for i in range(before, driver.count()))


def test_a_write_back_into_a_strided_input_stays_a_copy_call() -> None:
    driver = Driver()
    runtime = GpuRuntime(write_back_artifact([1, 4]), torch.device("cuda", 0))
    c = torch.empty_strided([4, 16], [1, 4], torch.float32, "cuda:0")
    before = driver.count()
    runtime.run(mm_inputs() + [c, torch.empty_strided([4, 16], [16, 1], torch.float32,
                                                      "cuda:0")])
    assert driver.count() == before + 2  # k0 and k1
    assert torch.copies[-1][0].data_ptr() == c.data_ptr()


def test_a_write_back_of_the_inputs_own_memory_copies_nothing_and_checks_before_its_kernel(
        ) -> None:
    # The compiler's batched copy stored the new value into c (here: k1, the last step but
    # the free before the write-back); the write-back names c's own buffer.
    a = write_back_artifact([16, 1])
    a.steps.add().free.buffer = 4
    a.steps[-2].write_back.src.CopyFrom(view(5, [4, 16], [16, 1], 1))
    a.steps.append(a.steps.pop(-2))  # the write-back after the free
    driver = Driver()
    runtime = GpuRuntime(a, torch.device("cuda", 0))
    c = torch.empty_strided([4, 16], [16, 1], torch.float32, "cuda:0", 4)
    unused = torch.empty_strided([4, 16], [16, 1], torch.float32, "cuda:0")
    before, copies = driver.count(), len(torch.copies)
    runtime.run(mm_inputs() + [c, unused])
    assert driver.count() == before + 2  # k0 and k1, no copy
    assert len(torch.copies) == copies + 1  # the mm's first result only
    # A bad input that nothing reads stops the run before k1, which writes c.
    before = driver.count()
    with pytest.raises(InputMismatch, match="input unused: strides"):
        runtime.run(mm_inputs() + [c, torch.empty_strided([4, 16], [1, 4], torch.float32,
                                                          "cuda:0")])
    assert driver.count() == before + 1  # k0 only


def test_an_extern_result_is_written_in_place_once_its_first_run_fits() -> None:
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    copies = len(torch.copies)
    runtime.run(mm_inputs())
    # The first run copies the op's result into the plan's buffer and learns it fits.
    assert len(torch.copies) == copies + 1
    assert torch.calls[-1][0] == "aten.mm.default"
    runtime.run(mm_inputs())
    assert len(torch.copies) == copies + 1, "no copy: mm wrote into the arena itself"
    target, args, kwargs = torch.calls[-1]
    assert target == "torch.mm"  # unboxed, as Inductor calls it
    assert (kwargs["out"].shape, kwargs["out"].stride()) == ([4, 16], [16, 1])
    assert kwargs["out"].data_ptr() == args[0].data_ptr() + 128


def test_without_the_torch_function_the_out_overload_is_called(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch._C, "_VariableFunctions", None)
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    for _ in range(2):
        runtime.run(mm_inputs())
    target, args, kwargs = torch.calls[-1]
    assert target == "aten.mm.out"
    assert kwargs["out"].data_ptr() == args[0].data_ptr() + 128


def test_an_out_overload_that_copies_the_ops_result_is_not_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # As PyTorch's generated convolution.out: no CUDA kernel of its own, only the op and a copy.
    monkeypatch.setattr(torch.ops.aten.mm.out, "kernels", set())
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    copies = len(torch.copies)
    for _ in range(3):
        (y,) = runtime.run(mm_inputs())
    assert len(torch.copies) == copies + 1, "the first run's copy only: the result is p"
    target, _, kwargs = torch.calls[-1]
    assert target == "aten.mm.default" and "out" not in kwargs


def test_an_extern_result_over_its_own_arguments_memory_is_kept_as_its_buffer() -> None:
    # p at offset 0 overlaps t, mm's first argument: mm must not write where it reads. The
    # first run copies mm's result into p; later runs keep the result itself as p, and the
    # kernel after it reads it there.
    driver = Driver()
    runtime = GpuRuntime(mm_artifact(0), torch.device("cuda", 0))
    copies = len(torch.copies)
    runtime.run(mm_inputs())
    assert torch.calls[-1][0] == "aten.mm.default"
    assert len(torch.copies) == copies + 1
    before = driver.count()
    (y,) = runtime.run(mm_inputs())
    assert torch.calls[-1][0] == "aten.mm.default"
    assert len(torch.copies) == copies + 1, "no copy: the result is p"
    (_, k0, _), (_, k1, _) = driver.launch(before), driver.launch(before + 1)
    result = torch.mm_results[-1]
    assert k1 == [result.data_ptr(), y.untyped_storage().data_ptr()]
    assert k0[1] != result.data_ptr()  # t stays in the arena


def test_a_result_that_does_not_fit_its_first_runs_layout_is_copied() -> None:
    runtime = GpuRuntime(mm_artifact(0), torch.device("cuda", 0))
    runtime.run(mm_inputs())
    copies = len(torch.copies)
    torch.mm_column_major.append(True)  # mm now returns its product column-major
    try:
        runtime.run(mm_inputs())
    finally:
        torch.mm_column_major.clear()
    assert len(torch.copies) == copies + 1
    dst, src = torch.copies[-1]
    assert (src.stride(), dst.stride()) == ([1, 4], [16, 1])


def test_each_size_of_a_dynamic_dimension_binds_its_own_plan() -> None:
    driver = Driver()
    runtime = GpuRuntime(artifact(), torch.device("cuda", 0))
    for n, blocks in ((1000, 4), (100, 1), (1000, 4), (5000, 20)):
        before = driver.count()
        runtime.run([cuda_input(n)])
        geometry, values, _ = driver.launch(before)
        assert geometry[0] == blocks and values[3] == n


def test_an_output_that_is_its_whole_buffer_is_the_allocation_itself() -> None:
    a = artifact()
    a.outputs.add().CopyFrom(a.outputs[0])  # the same output twice: aliases of one another
    (y, alias) = GpuRuntime(a, torch.device("cuda", 0)).run([cuda_input(1000)])
    # Allocated as the output (float32, exactly its bytes), not as flat bytes viewed later.
    assert y.dtype == torch.float32 and y.untyped_storage().nbytes() == 4000
    assert alias is not y and alias.untyped_storage() is y.untyped_storage()
    assert (alias.shape, alias.stride(), alias.storage_offset()) == ([1000], [1], 0)
    # A buffer larger than its output view is a flat allocation the output is set over.
    a.buffers[1].size_bytes.CopyFrom(sym("4*s0 + 64"))
    (y, _) = GpuRuntime(a, torch.device("cuda", 0)).run([cuda_input(1000)])
    assert y.dtype == torch.float32 and y.untyped_storage().nbytes() == 4096  # 64-aligned


def layouts(tensors):  # type: ignore[no-untyped-def]
    return [(t.shape, t.stride(), t.dtype, t.data_ptr() - t.untyped_storage().data_ptr(),
             t.untyped_storage().nbytes()) for t in tensors]


def test_pytorchs_lighter_constructors_make_the_same_tensors_as_the_public_ones(
        monkeypatch: pytest.MonkeyPatch) -> None:
    a = embedding_backward_artifact(-1, False)
    a.outputs.insert(0, pb.OutputBinding(view=view(2, [4, 10], [1, 4], 1)))
    grad = torch.empty_strided([6, 4], [4, 1], torch.float32, "cuda:0", 8)
    indices = torch.empty_strided([6], [1], torch.int64, "cuda:0")

    def runs() -> list:
        runtime = GpuRuntime(a, torch.device("cuda", 0))
        return [layouts(runtime.run([grad, indices])) for _ in range(2)] + \
            [layouts(GpuRuntime(mm_artifact(128), torch.device("cuda", 0)).run(mm_inputs()))]

    torch.fast_calls.clear()
    fast = runs()
    # Outputs, the arena and every view of a buffer come from the lighter constructors.
    assert {"_empty_strided_cuda", "_reinterpret_tensor"} <= set(torch.fast_calls)
    monkeypatch.setattr(torch._C, "_dynamo", None)  # a PyTorch without them
    torch.fast_calls.clear()
    assert runs() == fast
    assert torch.fast_calls == []


def test_an_output_is_allocated_just_before_the_first_step_that_touches_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The GPU starts on the first kernels while the host allocates later steps' outputs; an
    # output no step touches is allocated before them all.
    driver = Driver()
    a = mm_artifact(128)
    a.buffers.add(kind=pb.BUFFER_KIND_OUTPUT, dtype=1, size_bytes=sym("64"), alignment=64,
                  name="z")
    a.outputs.add().view.CopyFrom(view(5, [16], [1], 1))
    made: list[tuple[tuple, int, int]] = []  # (sizes, launches so far, ATen calls so far)
    allocate = torch._C._dynamo.guards._empty_strided_cuda

    def recorded(sizes: tuple, strides: tuple, kind):  # type: ignore[no-untyped-def]
        made.append((sizes, driver.count(), len(torch.calls)))
        return allocate(sizes, strides, kind)

    monkeypatch.setattr(torch._C._dynamo.guards, "_empty_strided_cuda", recorded)
    runtime = GpuRuntime(a, torch.device("cuda", 0))
    for _ in range(2):
        made.clear()
        launches, calls = driver.count(), len(torch.calls)
        y, z = runtime.run(mm_inputs())
        # The arena and z first, then y after k0 and the product, before k1.
        assert made == [((128 + 256,), launches, calls), ((16,), launches, calls),
                        ((4, 16), launches + 1, calls + 1)]
        assert driver.launch(launches + 1)[1][1] == y.data_ptr()
        assert z.shape == [16]


def test_a_run_off_the_current_device_allocates_on_the_plans_device(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # _empty_strided_cuda allocates on the current device; a plan for another one asks
    # PyTorch for its own device instead.
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    torch.fast_calls.clear()
    (y,) = GpuRuntime(mm_artifact(128), torch.device("cuda", 0)).run(mm_inputs())
    assert "_empty_strided_cuda" not in torch.fast_calls
    assert y.device == torch.device("cuda", 0)


def test_an_op_runs_through_pytorchs_binding_until_it_refuses_the_arguments(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from kiln import aten_calls

    refused: list[tuple] = []

    def binding(*args: object, **kwargs: object) -> None:
        refused.append(args)
        raise TypeError("embedding_dense_backward() received an invalid combination of arguments")

    monkeypatch.setattr(aten_calls, "BINDINGS", {})
    monkeypatch.setattr(torch._C._VariableFunctions, "embedding_dense_backward", binding)
    runtime = GpuRuntime(embedding_backward_artifact(-1, False), torch.device("cuda", 0))
    grad = torch.empty_strided([6, 4], [4, 1], torch.float32, "cuda:0", 8)
    indices = torch.empty_strided([6], [1], torch.int64, "cuda:0")
    for _ in range(2):
        runtime.run([grad, indices])
        assert torch.calls[-1][0] == "aten.embedding_dense_backward.default"
    assert len(refused) == 1, "once refused, the plan keeps to torch.ops"
    # An op with overloads besides its default and out= has none: PyTorch's binding could
    # pick another.
    assert aten_calls.binding("aten.addmm.default") is None
    assert aten_calls.binding("aten.mm.default") is torch._C._VariableFunctions.mm


def counted_checks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of inputs each of the plan's Python checks looked at, in order."""
    from kiln import bound_plan

    seen: list[int] = []
    real = bound_plan._check

    def check(inputs, checks, device, tensor):  # type: ignore[no-untyped-def]
        seen.append(len(checks))
        return real(inputs, checks, device, tensor)

    monkeypatch.setattr(bound_plan, "_check", check)
    return seen


def test_inputs_as_the_first_runs_are_checked_in_one_call(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = counted_checks(monkeypatch)
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    runtime.run(mm_inputs())
    assert sum(seen) == 2, "the first run checks both inputs in Python"
    seen.clear()
    guard_checks = len(torch.guard_checks)
    runtime.run(mm_inputs())  # new tensors, the same layouts
    assert sum(seen) == 0
    assert len(torch.guard_checks) == guard_checks + 1
    # One that no longer fits is found by the plan's checks, which name it.
    x = mm_inputs()
    x[1] = torch.empty_strided([8, 16], [1, 8], torch.float32, "cuda:0")
    with pytest.raises(InputMismatch, match=r"input b: strides \[1, 8\], the plan expects "
                                            r"\[16, 1\]"):
        runtime.run(x)


def test_without_tensor_guards_every_run_checks_in_python(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = counted_checks(monkeypatch)
    monkeypatch.delattr(torch._C._dynamo.guards, "TensorGuards")
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    for _ in range(2):
        runtime.run(mm_inputs())
    assert sum(seen) == 4


def test_a_guard_that_refuses_the_tensors_it_was_made_from_is_not_used(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = counted_checks(monkeypatch)
    monkeypatch.setattr(torch.TensorGuards, "check", lambda self, *tensors: False)
    runtime = GpuRuntime(mm_artifact(128), torch.device("cuda", 0))
    for _ in range(3):
        runtime.run(mm_inputs())
    assert sum(seen) == 6
