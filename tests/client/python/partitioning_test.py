"""kiln.partitioning: the partitioner and the decompositions AOTAutograd is handed, with a
stand-in for PyTorch's modules."""

from __future__ import annotations

import sys
import types

import pytest

from kiln import partitioning


def stand_in_torch(monkeypatch: pytest.MonkeyPatch, missing: tuple[str, ...] = ()) -> list:
    """torch.ops.aten with every op but `missing` (as packet.overload), torch._decomp whose
    table maps each op asked for to a decomposition naming it, and torch._functorch's
    partitioners; returns the list of ops get_decompositions was asked for."""
    asked: list = []

    class Packet:
        def __init__(self, packet: str) -> None:
            self.packet = packet

        def __getattr__(self, overload: str) -> str:
            if f"{self.packet}.{overload}" in missing:
                raise AttributeError(overload)
            return f"aten.{self.packet}.{overload}"

    aten = types.SimpleNamespace()
    for name in partitioning.MIN_CUT_DECOMPOSITIONS:
        setattr(aten, name.split(".")[1], Packet(name.split(".")[1]))
    decomp = types.ModuleType("torch._decomp")

    def get_decompositions(ops: list) -> dict:
        asked.extend(ops)
        return {op: f"decomposition of {op}" for op in ops}

    decomp.get_decompositions = get_decompositions
    partitioners = types.ModuleType("torch._functorch.partitioners")
    partitioners.default_partition = "default_partition"
    partitioners.min_cut_rematerialization_partition = "min_cut_rematerialization_partition"
    functorch = types.ModuleType("torch._functorch")
    functorch.partitioners = partitioners
    torch = types.ModuleType("torch")
    torch.ops = types.SimpleNamespace(aten=aten)
    torch._decomp = decomp
    torch._functorch = functorch
    for name, module in (("torch", torch), ("torch._decomp", decomp),
                         ("torch._functorch", functorch),
                         ("torch._functorch.partitioners", partitioners)):
        monkeypatch.setitem(sys.modules, name, module)
    return asked


def test_min_cut_decomposes_the_loss_and_detach_and_default_nothing(
        monkeypatch: pytest.MonkeyPatch) -> None:
    asked = stand_in_torch(monkeypatch)
    options = partitioning.aot_autograd_options("min_cut")
    assert options["partition_fn"] == "min_cut_rematerialization_partition"
    assert sorted(options["decompositions"]) == sorted(
        ["aten.detach.default", "aten._log_softmax.default",
         "aten._log_softmax_backward_data.default", "aten.nll_loss_forward.default",
         "aten.nll_loss_backward.default"])
    assert options["decompositions"]["aten.detach.default"] == (
        "decomposition of aten.detach.default")
    asked.clear()
    assert options["keep_inference_input_mutations"] is True
    assert partitioning.aot_autograd_options("default") == {
        "partition_fn": "default_partition", "decompositions": {},
        "keep_inference_input_mutations": True}
    assert asked == []


def test_an_op_this_pytorch_lacks_is_left_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_torch(monkeypatch, missing=("nll_loss_backward.default",))
    table = partitioning.decompositions("min_cut")
    assert "aten.nll_loss_backward.default" not in table
    assert len(table) == len(partitioning.MIN_CUT_DECOMPOSITIONS) - 1


def test_the_recipe_names_the_partitioner_and_changes_with_its_decompositions(
        monkeypatch: pytest.MonkeyPatch) -> None:
    assert partitioning.recipe("default") == "default"
    base = partitioning.recipe("min_cut")
    assert base.startswith("min_cut.") and base == partitioning.recipe("min_cut")
    monkeypatch.setitem(partitioning._DECOMPOSED, "min_cut",
                        partitioning.MIN_CUT_DECOMPOSITIONS[1:])
    assert partitioning.recipe("min_cut") not in (base, "min_cut")
    # Layouts chosen on the joint graph give other graphs too.
    assert partitioning.recipe("default", layouts=True) == "default.channels_last"


def test_an_unknown_partitioner_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in_torch(monkeypatch)
    for call in (partitioning.recipe, partitioning.partition_fn, partitioning.decompositions):
        with pytest.raises(ValueError, match="unknown partitioner 'greedy'; known: min_cut, "
                                             "default"):
            call("greedy")
