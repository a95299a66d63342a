"""Which of a bound plan's matrix products Kiln's GPU runtime runs through cuBLASLt, inside
its launch sequences (kiln.cuda.Gemm), instead of as ATen calls.

A GPT-2 step makes about 150 products. As ATen calls each costs the host PyTorch's argument
parsing, dispatch, a tensor for every operand and cuBLASLt's heuristic query, tens of
microseconds; as a record of a launch sequence it costs cuBLASLt's launch alone, and the
kernels around it go in the same call. The product is the same: cuBLASLt on PyTorch's stream,
its compute type and reductions as PyTorch's settings say (torch.backends.cuda.matmul), read
at each run.

describe() takes aten.mm, bmm, addmm and baddbmm whose operands are all fp32, fp16 or bf16,
with a bias (addmm, baddbmm) that is one row of n contiguous elements broadcast over the rest,
and alpha and beta 1; kiln.cuda.Gemm then refuses operands cuBLASLt cannot read as they lie
(laid out by neither rows nor columns). Anything else stays an ATen call, and so does every
product with KILN_PRODUCTS=aten (to compare the two, or to rule cuBLASLt out).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Optional

from kiln import cuda

# What a run's products share as cuBLASLt's workspace, at the end of the run's arena: what
# PyTorch gives cuBLAS on Hopper.
GEMM_WORKSPACE_BYTES = 32 << 20

# Product targets: (batched, biased).
TARGETS = {"aten.mm.default": (False, False), "aten.bmm.default": (True, False),
           "aten.addmm.default": (False, True), "aten.baddbmm.default": (True, True)}


@dataclass(frozen=True)
class Product:
    """A product as kiln.cuda.Gemm takes it; `operands` are the bound views of A, B, D and
    the bias if there is one (kiln.bound_plan.BoundView)."""

    dtype: int
    flags: int
    batch: int
    m: int
    n: int
    k: int
    strides: tuple[tuple[int, int, int], ...]
    operands: tuple[Any, ...]


def wanted() -> bool:
    """Whether products may run through cuBLASLt (KILN_PRODUCTS: cublaslt, the default, or
    aten); raises ValueError naming any other value."""
    value = os.environ.get("KILN_PRODUCTS", "cublaslt")
    if value not in ("cublaslt", "aten"):
        raise ValueError(f"KILN_PRODUCTS={value!r}: expected 'cublaslt' or 'aten'")
    return value == "cublaslt"


def matmul_settings() -> tuple[Optional[bool], Optional[bool], Optional[bool]]:
    """PyTorch's settings that change a product's arithmetic: TF32 for fp32, and split-k sums
    in the element's type for bf16 and fp16. None where this PyTorch cannot say (it refuses
    to read a TF32 setting made through both its APIs) or asks for what the products do not
    do (no split-k at all): that type's products stay ATen calls, which know."""
    import torch  # noqa: PLC0415

    m = torch.backends.cuda.matmul
    try:
        precision = getattr(m, "fp32_precision", None)  # PyTorch 2.9's API
        tf32: Optional[bool] = precision == "tf32" if precision in ("tf32", "ieee") else \
            bool(m.allow_tf32)
    except RuntimeError:
        tf32 = None
    return (tf32, _reduction(m, "allow_bf16_reduced_precision_reduction"),
            _reduction(m, "allow_fp16_reduced_precision_reduction"))


def _reduction(matmul: Any, name: str) -> Optional[bool]:
    """A reduced-precision-reduction setting: a bool, or (allowed, split-k allowed)."""
    try:
        value = getattr(matmul, name)
    except (AttributeError, RuntimeError):
        return None
    if isinstance(value, tuple):
        return bool(value[0]) if len(value) > 1 and value[1] else None
    return bool(value)


def describe(target: str, args: list[tuple[str, Any]], kwargs: dict[str, tuple[str, Any]],
             out: Any, settings: tuple[Optional[bool], ...]) -> Optional[Product]:
    """The product of call `target` (its bound arguments, as kiln.bound_plan binds them, and
    its output view), or None when it stays an ATen call."""
    kind = TARGETS.get(target)
    if kind is None or out is None:
        return None
    batched, biased = kind
    if len(args) != (3 if biased else 2) or any(k != "view" or v is None for k, v in args):
        return None
    if any(name not in ("alpha", "beta") or k != "value" or v != 1
           for name, (k, v) in kwargs.items()):
        return None
    views = [v for _, v in args]
    bias = views.pop(0) if biased else None
    a, b = views
    dtype = _element_types().get(out.dtype)
    rank = 3 if batched else 2
    if dtype is None or any(v.dtype != out.dtype for v in (a, b, bias) if v is not None) or \
            any(len(v.sizes) != rank for v in (a, b, out)):
        return None
    # Sizes and strides over (batch, row, column); a matrix is a batch of one.
    (a_sizes, a_strides), (b_sizes, b_strides), (d_sizes, d_strides) = (
        (v.sizes, v.strides) if batched else ([1] + v.sizes, [0] + v.strides)
        for v in (a, b, out))
    batch, m, k = a_sizes
    n = b_sizes[2]
    if b_sizes != [batch, k, n] or d_sizes != [batch, m, n] or min(batch, m, n, k) <= 0:
        return None
    if bias is not None and not _is_row(bias, n):
        return None
    # TF32 for fp32, reduced-precision split-k sums for fp16 and bf16.
    allowed = settings[(cuda.GEMM_F32, cuda.GEMM_BF16, cuda.GEMM_F16).index(dtype)]
    if allowed is None:
        return None
    flags = cuda.GEMM_BIAS if bias is not None else 0
    if allowed:
        flags |= cuda.GEMM_TF32 if dtype == cuda.GEMM_F32 else cuda.GEMM_REDUCED_REDUCTION
    operands = (a, b, out) + ((bias,) if bias is not None else ())
    return Product(dtype, flags, batch, m, n, k,
                   (tuple(a_strides), tuple(b_strides), tuple(d_strides)), operands)


def _element_types() -> dict[Any, int]:
    import torch  # noqa: PLC0415

    return {torch.float32: cuda.GEMM_F32, torch.float16: cuda.GEMM_F16,
            torch.bfloat16: cuda.GEMM_BF16}


def _is_row(bias: Any, n: int) -> bool:
    """Whether a bias view is n contiguous elements, the same for every row and batch."""
    if not bias.sizes or bias.sizes[-1] != n or (n > 1 and bias.strides[-1] != 1):
        return False
    return all(size == 1 or stride == 0 for size, stride in zip(bias.sizes[:-1], bias.strides[:-1]))
