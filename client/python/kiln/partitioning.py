"""How AOTAutograd splits a joint graph for Kiln: the partitioner that the setting
`partitioner` names (kiln.settings), and the ops AOTAutograd decomposes while it traces, so
that the partitioner sees what it may recompute.

Min-cut recomputes in the backward what is cheap to compute again from values the forward
saves anyway, and saves the rest. It recomputes only ops on its allowlist (pointwise ops,
reductions such as amax and sum, gather, views), and never a value that a backward op off the
list reads. Left whole, a cross-entropy loss defeats both rules:

- `_log_softmax` is not on the list, so its output, the log-probabilities, is saved: for
  GPT-2 that is [2048, 50257] f32, 411 MB, written by the forward and read by the backward;
- its backward reads that output through `detach`, which is not on the list either.

MIN_CUT_DECOMPOSITIONS decomposes the loss's four ops into amax, exp, sum, log, gather and
scatter, and `detach` into `alias` (a view, which min-cut looks through). Min-cut then saves
the row maximum and the log of the row sum ([2048, 1] each) and the backward recomputes the
log-probabilities from the logits, which the graph holds anyway. kilnd compiles either form;
the decomposed one is what it would have made of the ops itself.

`default` keeps everything the backward reads, as eager does, and decomposes nothing.

Importing this module needs no PyTorch.
"""

from __future__ import annotations

import hashlib
from typing import Any, Callable

MIN_CUT_DECOMPOSITIONS = (
    "aten.detach.default",
    "aten._log_softmax.default",
    "aten._log_softmax_backward_data.default",
    "aten.nll_loss_forward.default",
    "aten.nll_loss_backward.default",
)

_DECOMPOSED = {"min_cut": MIN_CUT_DECOMPOSITIONS, "default": ()}


def decomposed(partitioner: str) -> tuple[str, ...]:
    """The aten ops (as aten.NAME.OVERLOAD) that AOTAutograd decomposes for `partitioner`."""
    try:
        return _DECOMPOSED[partitioner]
    except KeyError:
        raise ValueError(f"unknown partitioner {partitioner!r}; known: "
                         f"{', '.join(_DECOMPOSED)}") from None


def recipe(partitioner: str, layouts: bool = False) -> str:
    """Names the partitioner and its decompositions, and whether layouts are chosen on the
    joint graph (kiln.layouts), for keys of what AOTAutograd made of a graph
    (kiln.frame_cache): either changes the graphs."""
    ops = decomposed(partitioner)
    name = partitioner
    if ops:
        name = f"{partitioner}.{hashlib.sha256(','.join(ops).encode()).hexdigest()[:8]}"
    return f"{name}.channels_last" if layouts else name


def partition_fn(partitioner: str, layouts: bool = False) -> Callable:
    """AOTAutograd's partitioner that `partitioner` names; with `layouts`, choosing the
    activations' layouts on the joint graph before it partitions (kiln.layouts)."""
    from torch._functorch import partitioners  # noqa: PLC0415

    decomposed(partitioner)  # refuses an unknown name
    if partitioner == "default":
        partition = partitioners.default_partition
    else:
        partition = partitioners.min_cut_rematerialization_partition
    if not layouts:
        return partition
    from kiln.layouts import wrap_partition  # noqa: PLC0415

    return wrap_partition(partition)


def decompositions(partitioner: str) -> dict[Any, Callable]:
    """PyTorch's decompositions of decomposed(partitioner), for aot_autograd's
    `decompositions`: an op this PyTorch lacks, or has no decomposition for, is left whole."""
    ops = decomposed(partitioner)
    if not ops:
        return {}
    import torch  # noqa: PLC0415
    from torch._decomp import get_decompositions  # noqa: PLC0415

    overloads = []
    for name in ops:
        _, packet, overload = name.split(".")
        op = getattr(getattr(torch.ops.aten, packet, None), overload, None)
        if op is not None:
            overloads.append(op)
    return get_decompositions(overloads)


def aot_autograd_options(partitioner: str, layouts: bool = False) -> dict[str, Any]:
    """aot_autograd's keyword arguments for `partitioner` (and `layouts`, kiln.layouts):
    partition_fn and decompositions,
    and keep_inference_input_mutations, as Inductor asks: a graph writes the inputs it mutates
    that autograd does not see (a batch norm's running statistics, an optimizer's state) itself,
    with `copy_`, which kilnd plans as write-backs at the end of the graph, instead of returning
    each new value for AOTAutograd's wrapper to copy in after the call (a copy_ from Python per
    input and run; ResNet-18 has 60 such inputs)."""
    return {"partition_fn": partition_fn(partitioner, layouts),
            "decompositions": decompositions(partitioner),
            "keep_inference_input_mutations": True}
