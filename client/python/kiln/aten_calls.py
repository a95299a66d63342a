"""How a bound plan calls ATen ops fast: PyTorch's own bindings and unboxed out= functions,
where an op has them, instead of torch.ops' boxed call, and PyTorch's constructors for
generated code. Importing this module needs no PyTorch.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

# Ops whose torch function takes the schema's positional arguments, and out=: called so, a
# run skips torch.ops' boxed call (parsing each argument against the schema), as Inductor's
# extern kernels do. A GPT-2 step makes about 150 such calls.
UNBOXED_OUT = {"aten.mm.default": ("mm", 2), "aten.bmm.default": ("bmm", 2),
               "aten.addmm.default": ("addmm", 3), "aten.baddbmm.default": ("baddbmm", 3)}


def writes_out(out_op: Any, device: Any) -> bool:
    """Whether an out= overload has a kernel of its own for `device`'s backend (mm.out does).
    PyTorch generates the out= overload of an op that has none (convolution.out): it runs the
    op and copies the result into out, a copy of the whole result every run, where keeping the
    result as its buffer (BoundPlan._learn_adoption) costs nothing. Where PyTorch cannot say, True."""
    import torch  # noqa: PLC0415

    has = getattr(out_op, "has_kernel_for_dispatch_key", None)
    key = getattr(getattr(torch._C, "DispatchKey", None), device.type.upper(), None)
    if has is None or key is None:
        return True
    try:
        return bool(has(key))
    except (RuntimeError, TypeError):
        return True


def unboxed(target: str, positional: int, keywords: int) -> Optional[Callable[..., Any]]:
    """The torch function that writes the result of `target` called with `positional`
    arguments and `keywords` keyword arguments to out=, when it is one of UNBOXED_OUT's and
    called with positional arguments only."""
    import torch  # noqa: PLC0415

    name, arity = UNBOXED_OUT.get(target, ("", -1))
    if positional != arity or keywords:
        return None
    return getattr(getattr(torch._C, "_VariableFunctions", None), name, None)


BINDINGS: dict[str, Optional[Callable[..., Any]]] = {}


def binding(target: str) -> Optional[Callable[..., Any]]:
    """torch's Python binding of an aten op that has no overload but its default (and out=),
    as torch.<name>: the same kernel as torch.ops.aten.<name>.default, through the argument
    parser of PyTorch's own functions instead of the boxed call, which matches each argument
    against the schema (attention and its backward, twice a layer a step). None where there
    is none."""
    if target in BINDINGS:
        return BINDINGS[target]
    import torch  # noqa: PLC0415

    found = None
    namespace, _, rest = target.partition(".")
    name, _, overload = rest.partition(".")
    packet = getattr(torch.ops.aten, name, None) if namespace == "aten" else None
    if overload == "default" and packet is not None:
        try:
            overloads = set(packet.overloads())
        except (AttributeError, RuntimeError):
            overloads = set()
        if overloads and overloads <= {"default", "out"}:
            found = getattr(getattr(torch._C, "_VariableFunctions", None), name, None)
    BINDINGS[target] = found
    return found


def fast_constructors() -> tuple[Optional[Callable[..., Any]], Optional[Callable[..., Any]]]:
    """PyTorch's constructors for generated code (Inductor's wrappers call them), each a C
    function without the Python argument parsing of its public twin; None where this
    PyTorch lacks one:
      _empty_strided_cuda(sizes, strides, dtype)  torch.empty_strided on the current CUDA
          device; sizes and strides are tuples
      _reinterpret_tensor(base, sizes, strides, offset_increment)  a tensor of its own (not
          a view of base) over base's storage, in base's dtype, starting offset_increment
          elements after base's start"""
    import torch  # noqa: PLC0415

    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    return (getattr(guards, "_empty_strided_cuda", None),
            getattr(guards, "_reinterpret_tensor", None))
