"""kiln.cuda_graphs's decisions without a GPU or PyTorch (the stand-ins of gpu_runtime_test):
when a plan is captured, which inputs a replay reads in place and which it copies, and when a
call runs eagerly instead of replaying over a tensor the caller still holds."""

from __future__ import annotations

import gc

import gpu_runtime_test as rt
import pytest

from kiln import cuda_graphs
from kiln.gpu_runtime import GpuRuntime, InputMismatch
from kiln.v1 import artifact_pb2 as pb

torch = rt.torch


def graphable(static: bool) -> pb.CompiledGraph:
    """rt.artifact() without its RNG parameters; input 0 static (a parameter) or not."""
    a = rt.artifact(image=b"kernel kiln_graphed 4\n", kernel="kiln_graphed")
    del a.kernels[0].params[4:]
    if static:
        a.cudagraph.static_inputs.append(0)
    return a


def runtime(a: pb.CompiledGraph, messages: list[str] | None = None) -> GpuRuntime:
    return GpuRuntime(a, torch.device("cuda", 0), cudagraphs=True,
                      log=(messages.append if messages is not None else None))


def graph_of(r: GpuRuntime) -> cuda_graphs.GraphedPlan:
    (plan,) = r._bound.values()
    return plan.graphed


def test_a_plan_whose_kernels_draw_random_numbers_is_not_captured() -> None:
    r = runtime(rt.artifact())
    assert r.graph_refusal is not None and "random numbers" in r.graph_refusal
    assert runtime(graphable(True)).graph_refusal is None
    not_capturable = graphable(True)
    not_capturable.cudagraph.reasons.add(blocker=pb.CAPTURE_BLOCKER_CPU_TENSOR, node="x",
                                         detail="input 0 is on the CPU")
    assert runtime(not_capturable).graph_refusal == "x: input 0 is on the CPU"
    dynamic = graphable(True)
    dynamic.cudagraph.reasons.add(blocker=pb.CAPTURE_BLOCKER_DYNAMIC_SHAPE,
                                  detail="sizes depend on 1 symbol(s)")
    assert runtime(dynamic).graph_refusal is None, "captured per set of sizes"


def test_after_warm_up_calls_replay_reading_parameters_in_place() -> None:
    driver = rt.Driver()
    messages: list[str] = []
    r = runtime(graphable(static=True), messages)
    x = rt.cuda_input(1 << 15)  # 128 KiB: an output the replay hands out as a pool view
    launches = driver.count()
    outputs = []
    for _ in range(6):
        (y,) = r.run([x])
        outputs.append((y.data_ptr(), y.shape))
        del y
        gc.collect()
    g = graph_of(r)
    # Three eager calls, a capture (which runs the plan once), then replays only.
    assert driver.count() == launches + 4
    assert (g.captures, g.replays, g.refusals) == (1, 3, {})
    assert messages == ["captured in a CUDA graph at call 4: 1 of 1 inputs read in place, "
                        "0 copied"]
    # Each replay's output is the captured output's memory.
    assert outputs[3] == outputs[4] == outputs[5]


def test_an_input_that_moves_is_copied_before_each_replay() -> None:
    r = runtime(graphable(static=False))
    for _ in range(5):
        copies = len(torch.copies)
        x = rt.cuda_input(1 << 15)
        (y,) = r.run([x])
        del y
    g = graph_of(r)
    assert (g.captures, g.replays) == (1, 2)
    # The last replay copied x into the graph's own buffer (the span it reaches) first.
    dst, src = torch.copies[copies]
    assert src.data_ptr() == x.data_ptr() and dst.shape == [1 << 15]
    assert dst.data_ptr() == g._graph.copies[0].data_ptr()


def test_inputs_that_move_are_copied_in_one_foreach_copy() -> None:
    a = graphable(static=False)
    a.buffers.add(kind=pb.BUFFER_KIND_INPUT, input_index=1, dtype=1,
                  size_bytes=rt.sym("4*s0"), alignment=4, name="w")
    spec = a.inputs.add(name="w", dtype=1)
    spec.sizes.append(rt.sym("s0"))
    spec.strides.append(rt.sym("1"))
    r = runtime(a)
    for _ in range(5):
        foreach, copies = len(torch.foreach_copies), len(torch.copies)
        x, w = rt.cuda_input(1 << 15), rt.cuda_input(1 << 15)
        (y,) = r.run([x, w])
        del y
    assert graph_of(r).replays == 2
    # The last replay copied both inputs in one call, each into its own buffer of the graph's.
    assert torch.foreach_copies[foreach:] == [2]
    got = [(dst.data_ptr(), src.data_ptr()) for dst, src in torch.copies[copies:]]
    assert got == [(graph_of(r)._graph.copies[0].data_ptr(), x.data_ptr()),
                   (graph_of(r)._graph.copies[1].data_ptr(), w.data_ptr())]


def test_a_call_while_the_last_replays_output_is_alive_runs_eagerly() -> None:
    driver = rt.Driver()
    messages: list[str] = []
    r = runtime(graphable(static=True), messages)
    x = rt.cuda_input(1 << 15)
    for _ in range(4):
        (y,) = r.run([x])
        del y
    (held,) = r.run([x])  # a replay: `held` views the graph's pool
    assert graph_of(r).replays == 2
    launches = driver.count()
    (other,) = r.run([x])
    assert driver.count() == launches + 1, "ran eagerly: a replay would overwrite `held`"
    assert other.data_ptr() != held.data_ptr()
    assert graph_of(r).refusals == {cuda_graphs.ALIVE: 1}
    del held, other
    gc.collect()
    r.run([x])
    assert driver.count() == launches + 1, "replays again once `held` is gone"
    assert messages[-1] == f"call 6 runs without its CUDA graph: {cuda_graphs.ALIVE}"


def test_a_small_output_is_returned_as_a_copy() -> None:
    r = runtime(graphable(static=True))
    x = rt.cuda_input(16)
    kept = [r.run([x])[0] for _ in range(7)]  # kept alive: copies do not block replays
    g = graph_of(r)
    assert (g.replays, g.refusals) == (4, {})
    assert len({t.data_ptr() for t in kept[3:]}) == 4


def test_a_backwards_small_gradient_is_a_view_of_the_pool() -> None:
    # A norm's weight's gradient, which autograd takes into .grad: no copy at each replay.
    r = GpuRuntime(graphable(static=True), torch.device("cuda", 0), cudagraphs=True,
                   saved_from=0)
    x = rt.cuda_input(16)
    grads = []
    for _ in range(6):
        (grad,) = r.run([x])
        grads.append(grad.data_ptr())
        del grad  # the optimizer's zero_grad(set_to_none=True)
    g = graph_of(r)
    assert (g.replays, g.refusals) == (3, {})
    assert grads[3] == grads[4] == grads[5]


def test_inputs_read_in_place_that_keep_moving_are_copied_after_a_new_capture() -> None:
    messages: list[str] = []
    r = runtime(graphable(static=False), messages)
    # The same address for four calls (a forward's pool), then a new one every call.
    same = rt.cuda_input(1 << 15)
    for i in range(10):
        (y,) = r.run([same if i < 4 else rt.cuda_input(1 << 15)])
        del y
    g = graph_of(r)
    assert g.captures == 2
    assert g.refusals == {cuda_graphs.MOVED: cuda_graphs.MAX_MOVES}
    assert g._graph.addresses == {}, "input 0 is now copied"
    assert messages[-1].endswith("0 of 1 inputs read in place, 1 copied (#0 float32[32768])")


def test_a_backward_reads_its_forwards_saved_tensors_in_place() -> None:
    # The forward's output is new each call while it runs eagerly (calls 1-3), then at its
    # pool's address from the call it is captured (4): the backward, fed by it, reads it in
    # place, captured in that call already.
    messages: list[str] = []
    forward = runtime(graphable(static=True))
    backward = runtime(graphable(static=False), messages)
    x = rt.cuda_input(1 << 15)
    for _ in range(8):
        (saved,) = forward.run([x])
        (y,) = backward.run([saved])
        del saved, y
    assert graph_of(forward).captures == 1
    g = graph_of(backward)
    assert messages == ["captured in a CUDA graph at call 4: 1 of 1 inputs read in place, "
                        "0 copied"]
    assert (g.captures, g.replays, g.refusals) == (1, 5, {})


def test_a_chain_of_plans_each_fed_by_the_last_is_captured_in_one_call() -> None:
    # A model's forward, its loss's forward, the loss's backward, the model's backward: each
    # reads the outputs of the one before, which are in its pool from the call it is captured.
    messages: list[str] = []
    chain = [runtime(graphable(static=True), messages)] + [
        runtime(graphable(static=False), messages) for _ in range(3)]
    x = rt.cuda_input(1 << 15)
    for _ in range(6):
        value = x
        for r in chain:
            (value,) = r.run([value])
        del value
    assert [graph_of(r).captures for r in chain] == [1, 1, 1, 1]
    assert messages == ["captured in a CUDA graph at call 4: 1 of 1 inputs read in place, "
                        "0 copied"] * 4


def test_an_input_from_another_plans_pool_is_read_in_place_again_after_that_plan_moves_it(
) -> None:
    # A loss's backward (the producer) captured, then its tangent moves every call: it runs
    # eagerly and is captured again, and the model's backward (the consumer), which read its
    # output in place, sees that output move. The consumer reads it in place again in the
    # producer's new pool, from the producer's new capture on, instead of copying it at every
    # replay.
    messages: list[str] = []
    producer = runtime(graphable(static=False))
    consumer = runtime(graphable(static=False), messages)
    tangent = rt.cuda_input(1 << 15)
    for call in range(1, 15):
        (gradient,) = producer.run([tangent if call <= 6 else rt.cuda_input(1 << 15)])
        (y,) = consumer.run([gradient])
        del gradient, y
    assert graph_of(producer).captures == 2
    g = graph_of(consumer)
    assert (g.captures, g.refusals) == (2, {cuda_graphs.MOVED: cuda_graphs.MAX_MOVES})
    assert g._copied_always == set()
    assert messages[0] == ("captured in a CUDA graph at call 4: 1 of 1 inputs read in place, "
                           "0 copied")
    assert messages[-1] == ("captured in a CUDA graph at call 10: 1 of 1 inputs read in "
                            "place, 0 copied")
    assert g._graph.pooled == {0}


def test_a_small_input_is_copied_though_it_held_still() -> None:
    # A loss's gradient: a scalar autograd makes at every step, at one address for a while.
    messages: list[str] = []
    r = runtime(graphable(static=False), messages)
    elements = cuda_graphs.SMALL_INPUT_BYTES // 4
    scalar = rt.cuda_input(elements)
    for call in range(1, 11):
        (y,) = r.run([scalar if call <= 6 else rt.cuda_input(elements)])
        del y
    g = graph_of(r)
    # Its move after the capture costs no eager run and no capture.
    assert (g.captures, g.refusals, g.replays) == (1, {}, 7)
    assert messages == ["captured in a CUDA graph at call 4: 0 of 1 inputs read in place, "
                        "1 copied (#0 float32[64])"]


def test_a_small_parameter_is_read_in_place() -> None:
    # A norm's weight, which a forward saves as it is for its backward: a parameter, at one
    # address for good, however small.
    messages: list[str] = []
    r = runtime(graphable(static=False), messages)
    weight = torch.nn.Parameter(rt.cuda_input(cuda_graphs.SMALL_INPUT_BYTES // 4))
    for _ in range(6):
        (y,) = r.run([weight])
        del y
    g = graph_of(r)
    assert (g.captures, g.refusals, g.replays) == (1, {}, 3)
    assert g._graph is not None and g._graph.copies == {}
    assert messages == ["captured in a CUDA graph at call 4: 1 of 1 inputs read in place, "
                        "0 copied"]


def test_an_input_read_in_place_that_is_no_tensor_any_more_is_not_replayed_over() -> None:
    r = runtime(graphable(static=True))
    x = rt.cuda_input(1 << 15)
    for _ in range(cuda_graphs.WARMUP_CALLS + 2):
        r.run([x])
        gc.collect()
    g = graph_of(r)
    assert g.replays == 2  # the capture's call and one more
    assert g._graph is not None and g._graph.can_replay([x])
    # The one-call check says no instead of raising.
    assert not g._graph.can_replay([object()])


def forward_saving_a_seed() -> GpuRuntime:
    """A forward whose output 0 is the user's (a loss: a copy) and output 1, as small, a value
    saved for the backward alone (an attention's RNG seed)."""
    a = graphable(static=True)
    a.buffers.add().CopyFrom(a.buffers[1])
    a.buffers[3].name = "seed"
    a.outputs.add().CopyFrom(a.outputs[0])
    a.outputs[1].view.buffer = 3
    return GpuRuntime(a, torch.device("cuda", 0), cudagraphs=True, saved_from=1)


def test_a_forwards_small_saved_values_stay_in_the_pool() -> None:
    # The saved value is the pool's memory at every replay, and a replay waits until the last
    # one's is gone.
    r = forward_saving_a_seed()
    x = rt.cuda_input(16)
    losses, saved = [], []
    for _ in range(6):
        loss, value = r.run([x])
        losses.append(loss)  # kept, as a trainer keeps its losses
        saved.append(value.data_ptr())
        del value
    g = graph_of(r)
    assert (g.replays, g.refusals) == (3, {})
    assert len({t.data_ptr() for t in losses[3:]}) == 3
    assert saved[3] == saved[4] == saved[5]
    _, held = r.run([x])
    r.run([x])
    assert g.refusals == {cuda_graphs.ALIVE: 1}
    del held


def test_a_backward_reads_its_forwards_small_saved_values_in_place() -> None:
    # Small, but another capture's output: it holds still at the forward's replays.
    messages: list[str] = []
    forward, backward = forward_saving_a_seed(), runtime(graphable(static=False), messages)
    x = rt.cuda_input(16)
    for _ in range(6):
        loss, value = forward.run([x])
        (y,) = backward.run([value])
        del loss, value, y
    assert messages == ["captured in a CUDA graph at call 4: 1 of 1 inputs read in place, "
                        "0 copied"]


def test_a_replay_returns_an_output_that_is_an_input_as_that_input() -> None:
    a = graphable(static=True)
    a.outputs.add().view.CopyFrom(a.outputs[0].view)
    a.outputs[1].view.buffer = 0  # x itself, as a forward returns a parameter it saves
    r = runtime(a)
    x = rt.cuda_input(1 << 15)
    for _ in range(6):
        y, same = r.run([x])
        assert same is x
        del y, same
    assert graph_of(r).replays == 3


def test_a_replay_checks_the_inputs_it_copies() -> None:
    r = runtime(graphable(static=False))
    for _ in range(5):
        (y,) = r.run([rt.cuda_input(1 << 15)])
        del y
    assert graph_of(r).replays == 2
    with pytest.raises(InputMismatch, match="input x: dtype"):
        r.run([rt.cuda_input(1 << 15, kind=torch.float16)])
    with pytest.raises(InputMismatch, match="input x: strides"):
        r.run([rt.cuda_input(1 << 15, stride=2)])
    assert graph_of(r).replays == 2


def test_a_pytorch_that_cannot_count_a_storages_users_is_not_captured(monkeypatch) -> None:
    monkeypatch.delattr(torch._C, "_storage_Use_Count")
    monkeypatch.setattr(torch, "__version__", "2.0.1", raising=False)
    assert runtime(graphable(True)).graph_refusal == (
        "PyTorch 2.0.1 lacks torch._C._storage_Use_Count")
