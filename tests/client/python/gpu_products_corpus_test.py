"""Every matrix product of real graphs, compiled for sm_90 by kilnc, binds as a cuBLASLt
product of the GPU runtime (kiln.products): the layouts the compiler gives products' operands
are ones cuBLASLt reads as they lie. The artifacts' cubins are swapped for the stand-in
driver's images of the same kernels (tests/client/runtime/cuda/fake_libcuda.c), and the
stand-in cuBLASLt prepares the products, as gpu_products_test does."""

from __future__ import annotations

import gzip
import hashlib
import os
import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
import gpu_products_test  # noqa: E402  (the stand-ins, cuBLASLt's included)
import gpu_runtime_test as rt  # noqa: E402

torch = rt.torch
blas = gpu_products_test.blas  # the fixture

import kiln.gpu_runtime  # noqa: E402
from kiln import products  # noqa: E402
from kiln.gpu_runtime import GpuRuntime  # noqa: E402
from kiln.v1 import artifact_pb2 as pb  # noqa: E402

GRAPHS = pathlib.Path(os.environ.get("KILN_GRAPHS_DIR", "tests/data/graphs"))
KILNC = rt.BINARY_DIR / "compiler" / "kilnc"
# GPT-2 (both AOTAutograd splits), Llama, BERT and nanoGPT under bf16 and fp16, fp32 GPT-2.
CASES = ["gpt2_bf16.fw", "gpt2_bf16_1.bw", "min_cut/gpt2_bf16.fw", "gpt2_fp32_1.bw",
         "llama_bf16.fw", "llama_bf16.bw", "bert_fp16.bw", "nanogpt_bf16.bw"]


def compiled(name: str, tmp_path: pathlib.Path) -> pb.CompiledGraph:
    graph = tmp_path / (pathlib.Path(name).name + ".json")
    graph.write_bytes(gzip.decompress((GRAPHS / (name + ".json.gz")).read_bytes()))
    out = tmp_path / "artifact.pb"
    run = subprocess.run([str(KILNC), "--target", "cuda:sm_90", str(graph), "-o", str(out)],
                         capture_output=True, text=True, timeout=600)
    if run.returncode != 0 and "UNIMPLEMENTED" in run.stderr + run.stdout:
        pytest.skip("this build has no sm_90 backend")
    assert run.returncode == 0, run.stderr
    artifact = pb.CompiledGraph.FromString(out.read_bytes())
    # The stand-in driver's module images: each kernel by name with its parameter count.
    for i, module in enumerate(artifact.modules):
        image = "".join(f"kernel {k.name} {len(k.params)}\n" for k in artifact.kernels
                        if k.module == i).encode()
        module.kind = pb.BINARY_KIND_CUBIN
        module.binary = image
        module.digest.hash = hashlib.sha256(image).hexdigest()
        module.digest.size_bytes = len(image)
    return artifact


@pytest.mark.parametrize("name", CASES)
def test_every_product_of_a_real_graph_binds_as_a_cublaslt_product(
        name: str, tmp_path: pathlib.Path, blas: gpu_products_test.Blas,
        monkeypatch: pytest.MonkeyPatch) -> None:
    artifact = compiled(name, tmp_path)
    # Ops the stand-in torch lacks (attention) are looked up on loading, never called here.
    resolve = kiln.gpu_runtime.resolve_op
    monkeypatch.setattr(kiln.gpu_runtime, "resolve_op",
                        lambda target: _resolve_or_stand_in(resolve, target))
    runtime = GpuRuntime(artifact, torch.device("cuda", 0))
    assert not runtime.symbols, "the cases have static shapes"
    plan = runtime.bound([])
    calls = [s.call for s in runtime.steps if s.kind == "call"]
    wanted = [c for c in calls if c.target in products.TARGETS]
    assert wanted, "every case has products"
    left = [(s.call.target, [v.sizes for v in s.call.tensor_args()],
             [v.strides for v in s.call.tensor_args()])
            for s in plan.segments if s.kind == "call" and s.call.target in products.TARGETS]
    assert left == [] and plan.products == len(wanted)


def _resolve_or_stand_in(resolve, target: str):  # type: ignore[no-untyped-def]
    try:
        return resolve(target)
    except ValueError:
        return lambda *args, **kwargs: None

