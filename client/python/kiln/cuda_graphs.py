"""A bound plan captured in a CUDA graph and replayed: a run's host work becomes one replay.

    graphed = GraphedPlan(plan, static_inputs={0, 1})   # parameters' input indices
    outputs = graphed.run(inputs)                       # eager, capture, then replays

When: the artifact's CUDA-graph analysis says the plan can be captured (a plan whose only
reason against is its dynamic shapes is captured per set of sizes, one GraphedPlan per
BoundPlan), and no kernel of it draws random numbers (the seed and offset are launch
parameters, which a replay would repeat).

Inputs. A replay reads every input where the capture saw it. Read in place are parameters and
buffers (the analysis's static inputs), outputs of another plan's current capture (a captured
forward's saved tensors, reaching its backward), and inputs whose address was the same in the
two calls before the capture. A replay whose such input moved runs the plan eagerly instead,
and after MAX_MOVES of those the plan is captured again copying the inputs that moved (at most
MAX_CAPTURES captures; then it runs eagerly), less those that lived in, or live now in, another
plan's pool: that plan's outputs, which moved because it ran eagerly or was captured again (a
loss's backward whose tangent moved, feeding the model's backward the logits' gradient), and
which hold still again at its replays. Every other input is copied into a buffer of the
graph's before each replay, all of them in one torch._foreach_copy_: a trainer's batch, the
tangents autograd makes afresh each step for outputs the loss does not read (a transformer's
key-value cache), and inputs of at most SMALL_INPUT_BYTES (the loss's gradient) that are no
other capture's outputs nor parameters (a norm's weight a forward saves for its backward),
even when they held still. An input the plan mutates is copied back after the replay. A replay
checks the inputs it copies against the plan (BoundPlan.check_inputs); one it reads in place is
where the capture saw it, a parameter whose sizes and strides Dynamo's guards fix or a view
another replay made.

Outputs live in the graph's private memory pool, which the next replay overwrites. Outputs of
at most SMALL_OUTPUT_BYTES (a loss, a step count) are returned as copies; larger ones as views
of the pool, and the next replay checks that every such view of the last one is gone (each
pool storage's use count is back to the one reference this module holds: the storages are made
once per capture and every replay's views are made over them), running the plan eagerly when
one is still alive. So a replay never overwrites a tensor the caller still holds: a trainer's
step (forward, backward, optimizer, zero_grad(set_to_none=True)) frees them in time, and a
program that keeps them is right, only slower. Outputs from `saved_from` on, which autograd
alone reads, are views however small: a forward's saved values, which only its backward reads
and autograd frees when the backward has run (a copy would move them every step, and the
backward would copy them into its own graph), and a backward's gradients (saved_from 0), which
autograd takes into `.grad` or on to the next node (a copy would be a kernel and an allocation
for each of a model's norms' weights and biases at every step).
"""

from __future__ import annotations

import bisect
import threading
import weakref
from typing import Any, Callable, Collection, Optional, Sequence

from kiln.bound_plan import BUFFER_INPUT, BoundPlan

# Eager calls before a capture: the first runs the plan's out= checks and fills PyTorch's
# and cuBLAS's lazily made state (a capture must not allocate or initialize them); later ones
# show which input addresses hold still. The capture waits until the same inputs held still
# over two calls in a row with no capture made in between, and no longer than
# MAX_WARMUP_CALLS (counted again from a capture dropped because its inputs moved). Inputs
# that are another capture's outputs need no such wait: a backward whose forward was captured
# reads its saved tensors in that forward's pool, from the same call on.
WARMUP_CALLS = 3
MAX_WARMUP_CALLS = 8
# Replays refused because an in-place input moved, before the plan is captured again, and the
# most captures a GraphedPlan makes (a plan whose inputs keep moving runs eagerly after).
MAX_MOVES = 2
MAX_CAPTURES = 3
MOVED = "an input read in place moved"
ALIVE = "an output of the last replay is alive"
# Outputs a replay returns as copies: a loss, a step count. Larger ones (gradients, saved
# activations, however small a model's) stay in the pool, as copying each would cost a
# kernel per output per replay.
SMALL_OUTPUT_BYTES = 256
# Inputs a replay copies even when they held still (not parameters, nor another capture's
# outputs): a loss's gradient, a step count. Autograd makes them afresh at every step, where
# the allocator hands one out again holds still for a while by chance, and read in place, its
# first move would cost a capture of its plan and of every plan that reads that plan's
# outputs, which move with it. Copying one is a few bytes more in the replay's one copy.
SMALL_INPUT_BYTES = 256
# Copied inputs a capture's log line names.
DESCRIBED = 6

# Every capture whose pool may still hold a caller's tensor, with its GraphedPlan (weakly):
# the views a replay hands out do not own their memory, so a capture (its graph and pool)
# lives until it is no longer its plan's current one and none of its views is alive, even
# past its GraphedPlan (a runtime evicted or collected while a gradient it made lives on).
_captures: list[tuple[Any, "_Capture"]] = []
_captures_lock = threading.Lock()
# Captures made in this process so far: a plan whose inputs come from another plan (a
# backward's from its forward) sees them move when that one is captured, so it does not
# capture in a call during which another capture was made.
_generation = [0]


def _current(owner: Any, capture: "_Capture") -> bool:
    """Whether `capture` is the current one of the GraphedPlan `owner` (a weak reference)."""
    plan = owner()
    return plan is not None and plan._graph is capture


def _pooled(addresses: dict[int, int]) -> set[int]:
    """The keys of `addresses` (input index: address) whose address lies in an output of a
    plan's current capture: a value that plan's replays leave there."""
    with _captures_lock:
        current = [c for o, c in _captures if _current(o, c)]
    return {i for i, a in addresses.items() if any(c.holds(a) for c in current)}


def _keep(owner: "GraphedPlan", capture: "_Capture") -> None:
    with _captures_lock:
        _captures[:] = [(o, c) for o, c in _captures if _current(o, c) or c.in_use()]
        _captures.append((weakref.ref(owner), capture))
        _generation[0] += 1


class GraphedPlan:
    """See the module's docstring. `static_inputs` are the input indices whose address is
    fixed across calls (parameters and buffers)."""

    def __init__(self, plan: BoundPlan, static_inputs: set[int],
                 log: Optional[Callable[[str], None]] = None,
                 saved_from: Optional[int] = None) -> None:
        self.plan = plan
        self.log = log or (lambda message: None)
        self.static_inputs = static_inputs
        self.saved_from = saved_from
        self.calls = 0
        self.replays = 0
        self.captures = 0
        # Runs after a capture that did not replay, by reason.
        self.refusals: dict[str, int] = {}
        self._previous: Optional[list[Optional[int]]] = None  # the last call's input addresses
        self._held_still: Optional[set[int]] = None  # inputs the last call found unmoved
        self._generation = _generation[0]  # captures made in the process by the last call
        self._copied_always: set[int] = set()  # inputs that moved while read in place
        self._graph: Optional[_Capture] = None
        self._moves = 0
        self._dropped_at = 0  # the call that dropped the last capture (0: none yet)

    def run(self, inputs: Sequence[Any], seed: int, offset: int) -> list:
        self.calls += 1
        generation, self._generation = self._generation, _generation[0]
        if self._graph is not None and self._graph.can_replay(inputs):
            # The steady path: one check of the in-place inputs' addresses, and the plan's
            # checks of the others. The next call that does not replay finds no previous
            # addresses to compare with.
            self.plan.check_inputs(inputs, self._graph.checks)
            self._previous = None
            self.replays += 1
            return self._graph.replay(inputs)
        self.plan.check_inputs(inputs)
        addresses = [_address(x) for x in inputs]
        previous, self._previous = self._previous, addresses
        if self._graph is None:
            if previous is None or self.captures >= MAX_CAPTURES:
                return self.plan.run(inputs, seed, offset, checked=True)
            # Parameters and another capture's outputs hold still by construction; any other
            # input is read in place when it held still since the last call, and the capture
            # waits for two calls in a row to agree on which those are, with no capture made
            # in between (which may have moved them: they were another plan's outputs while it
            # ran eagerly).
            candidates = [(i, a) for i, a in enumerate(addresses) if a is not None and
                          i not in self.static_inputs and i not in self._copied_always]
            pooled = _pooled(dict(candidates))
            held = {i for i, a in candidates if i not in pooled and a == previous[i] and
                    (not _small(inputs[i]) or _parameter(inputs[i]))}
            in_place = held | pooled | {i for i in self.static_inputs
                                        if i < len(addresses) and addresses[i] is not None}
            held_still, self._held_still = self._held_still, held
            settled = held_still is not None and held == held_still - pooled and (
                not held or generation == self._generation)
            waited = self.calls - self._dropped_at
            if self.calls <= WARMUP_CALLS or (not settled and waited < MAX_WARMUP_CALLS):
                return self.plan.run(inputs, seed, offset, checked=True)
            self._graph = _Capture(self.plan, inputs, in_place, pooled, seed, offset,
                                   self.saved_from)
            _keep(self, self._graph)
            self.captures += 1
            self._moves = 0
            self.log(f"captured in a CUDA graph at call {self.calls}: {len(in_place)} of "
                     f"{len(inputs)} inputs read in place, {len(self._graph.copies)} copied"
                     f"{_described(inputs, self._graph.copies)}")
        why = self._graph.cannot_replay(addresses)
        if why is None:  # a capture made in this call
            self.replays += 1
            return self._graph.replay(inputs)
        if why not in self.refusals:
            self.log(f"call {self.calls} runs without its CUDA graph: {why}")
        self.refusals[why] = self.refusals.get(why, 0) + 1
        if why == MOVED:
            self._moves += 1
            if self._moves >= MAX_MOVES:
                # Inputs that held still for a while moved after all (they came back to
                # their addresses by chance): capture again, copying those, less another
                # plan's outputs (see the module's docstring).
                moved = self._graph.moved(addresses) - self._graph.pooled
                self._copied_always |= moved - _pooled(
                    {i: addresses[i] for i in moved if addresses[i] is not None})
                self._graph = None
                self._held_still = None
                self._dropped_at = self.calls
                if self.captures >= MAX_CAPTURES:
                    self.log(f"captured {self.captures} times; runs eagerly from now on")
        return self.plan.run(inputs, seed, offset, checked=True)


def _described(inputs: Sequence[Any], copied: Collection[int]) -> str:
    """The inputs a replay copies, by index, dtype and sizes (the first DESCRIBED of them):
    which values did not hold still, so that a trainer can tell why replays copy."""
    if not copied:
        return ""
    shown = [f"#{i} {str(inputs[i].dtype).removeprefix('torch.')}{list(inputs[i].shape)}"
             for i in sorted(copied)[:DESCRIBED]]
    more = f" and {len(copied) - DESCRIBED} more" if len(copied) > DESCRIBED else ""
    return f" ({', '.join(shown)}{more})"


def _small(x: Any) -> bool:
    """An input a replay copies even when it holds still: see SMALL_INPUT_BYTES."""
    return x.numel() * x.element_size() <= SMALL_INPUT_BYTES


def _parameter(x: Any) -> bool:
    """Whether `x` is a module's parameter: a backward's input that its forward saved as it
    is (a norm's weight), where a parameter lives for good, however small."""
    import torch  # noqa: PLC0415

    parameter = getattr(getattr(torch, "nn", None), "Parameter", None)
    return parameter is not None and isinstance(x, parameter)


def _address(x: Any) -> Optional[int]:
    return x.data_ptr() if hasattr(x, "data_ptr") else None


def _span(x: Any) -> int:
    """Elements from a tensor's first to its last, inclusive (strides are not negative)."""
    if x.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(x.size(), x.stride()))


class _Capture:
    """One capture of the plan: its graph, pool, copied inputs and outputs' places."""

    def __init__(self, plan: BoundPlan, inputs: Sequence[Any], in_place: set[int],
                 pooled: set[int], seed: int, offset: int,
                 saved_from: Optional[int] = None) -> None:
        import torch  # noqa: PLC0415

        self.plan = plan
        self.in_place = in_place
        self.addresses = {i: _address(inputs[i]) for i in in_place}
        self.pooled = pooled  # those of them that lived in another plan's capture's pool
        # What a replay checks of its inputs: an input read in place is where the capture saw
        # it, a parameter (whose sizes and strides Dynamo's guards fix) or a value a forward
        # left in its pool, so only the inputs it copies.
        self.checks = [c for c in plan.checks if c.index not in in_place]
        # The same, as torch._C._tensors_data_ptrs_at_indices_equal takes them, and the
        # PyTorch calls a replay makes (None where this PyTorch lacks them).
        self._indices = sorted(in_place)
        self._pointers = [self.addresses.get(i, 0) for i in range(len(inputs))]
        self._same_pointers = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)
        self._construct = getattr(torch._C, "_construct_CUDA_Tensor_From_Storage_And_Metadata",
                                  None)
        # Inputs copied before each replay (tensors not read in place), and their copies.
        self.copies: dict[int, Any] = {}
        static = list(inputs)
        for i, x in enumerate(inputs):
            if i not in in_place and isinstance(x, torch.Tensor):
                # A copy with the input's strides, which may overlap (an expanded gradient
                # of ones): what is copied is the span of memory the input reaches.
                span = _span(x)
                self.copies[i] = torch.empty(span, dtype=x.dtype, device=x.device)
                static[i] = self.copies[i].as_strided(x.size(), x.stride(), 0)
                self.copies[i].copy_(x.as_strided((span,), (1,), x.storage_offset()))
        self.mutated = sorted({s.input_index for s in plan.runtime.steps
                               if s.kind == "write_back"} & set(self.copies))
        # A replay's copies in, as one torch._foreach_copy_ (a launch or a few, not one per
        # input) where this PyTorch has it: the copied inputs' indices, their copies.
        self._copied = list(self.copies)
        self._destinations = list(self.copies.values())
        self._foreach_copy = getattr(torch, "_foreach_copy_", None)
        self.graph = torch.cuda.CUDAGraph()
        self.pool = torch.cuda.graph_pool_handle()
        torch.cuda.synchronize(plan.runtime.device)
        with torch.cuda.graph(self.graph, pool=self.pool):
            outputs = plan.run(static, seed, offset, checked=True)
        # Where each output lives: an input as it is (the caller's tensor), a view of an input
        # (made again from the caller's tensor at each replay), a value, or a place in the pool
        # (storage address and size).
        self.outputs: list[tuple] = []
        copies_from = len(outputs) if saved_from is None else saved_from
        for index, ((kind, payload), out) in enumerate(zip(plan.outputs, outputs)):
            if kind != "view":
                self.outputs.append(("value", out))
            elif index in plan.returned_inputs:
                self.outputs.append(("same", plan.returned_inputs[index]))
            elif plan.buffer_kinds[payload.buffer] == BUFFER_INPUT:
                self.outputs.append(("input", payload))
            else:
                storage = out.untyped_storage()
                small = storage.nbytes() <= SMALL_OUTPUT_BYTES and index < copies_from
                # What a replay makes the output's tensor from, in one call.
                meta = {"dtype": out.dtype, "size": tuple(out.shape),
                        "stride": tuple(out.stride()), "storage_offset": out.storage_offset()}
                self.outputs.append(("small" if small else "pool", storage.data_ptr(),
                                     storage.nbytes(), meta))
        del outputs
        # One storage object per place in the pool, over which every replay makes its views;
        # a pool storage whose use count is above one (this reference) has a view alive.
        construct_storage = torch._C._construct_storage_from_data_pointer
        device = plan.runtime.device
        self.storages: dict[int, Any] = {}
        watched: dict[int, int] = {}
        for place in self.outputs:
            if place[0] in ("small", "pool"):
                _, address, nbytes, _ = place
                if address not in self.storages:
                    self.storages[address] = construct_storage(address, device, nbytes)
                if place[0] == "pool":
                    watched[address] = self.storages[address]._cdata
        self._watched = list(watched.values())
        self._use_count = torch._C._storage_Use_Count
        # The places of the outputs handed out as views of the pool, as sorted first bytes
        # and their ends, for holds().
        spans = sorted((address, address + place_bytes) for address, place_bytes in
                       {place[1]: place[2] for place in self.outputs
                        if place[0] == "pool"}.items())
        self._starts = [start for start, _ in spans]
        self._ends = [end for _, end in spans]

    def holds(self, address: int) -> bool:
        """Whether `address` lies in the pool memory of an output a replay hands out."""
        i = bisect.bisect_right(self._starts, address) - 1
        return i >= 0 and address < self._ends[i]

    def in_use(self) -> bool:
        """Whether a view of the pool that a replay handed out is still alive."""
        use_count = self._use_count
        return any(use_count(cdata) > 1 for cdata in self._watched)

    def moved(self, addresses: list[Optional[int]]) -> set[int]:
        return {i for i, a in self.addresses.items() if addresses[i] != a}

    def can_replay(self, inputs: Sequence[Any]) -> bool:
        """cannot_replay(addresses of `inputs`) is None, in one call into PyTorch where it
        has the one CUDA-graph trees use."""
        same = self._same_pointers
        if same is None or len(inputs) != len(self._pointers):
            return self.cannot_replay([_address(x) for x in inputs]) is None
        try:
            if not same(inputs if isinstance(inputs, list) else list(inputs), self._pointers,
                        self._indices):
                return False
        except (RuntimeError, TypeError):  # an input that is no tensor where one was
            return False
        return not self.in_use()

    def cannot_replay(self, addresses: list[Optional[int]]) -> Optional[str]:
        """Why this call cannot replay (None when it can)."""
        if any(addresses[i] != a for i, a in self.addresses.items()):
            return MOVED
        if self.in_use():
            return ALIVE
        return None

    def replay(self, inputs: Sequence[Any]) -> list:
        import torch  # noqa: PLC0415

        sources = [inputs[i].as_strided(copy.shape, (1,), inputs[i].storage_offset())
                   for i, copy in zip(self._copied, self._destinations)]
        if len(sources) > 1 and self._foreach_copy is not None:
            self._foreach_copy(self._destinations, sources)
        else:
            for copy, source in zip(self._destinations, sources):
                copy.copy_(source)
        self.graph.replay()
        for i in self.mutated:
            x = inputs[i]
            x.as_strided(self.copies[i].shape, (1,), x.storage_offset()).copy_(self.copies[i])
        construct = self._construct
        storages = self.storages
        out: list[Any] = []
        for place in self.outputs:
            kind = place[0]
            if kind == "value":
                out.append(place[1])
                continue
            if kind == "same":  # the caller's input itself
                out.append(inputs[place[1]])
                continue
            if kind == "input":
                view = place[1]
                x = inputs[self.plan.input_of_buffer[view.buffer]]
                t = torch.empty(0, dtype=view.dtype, device=x.device)
                out.append(t.set_(x.untyped_storage(), x.storage_offset() * x.element_size() //
                                  view.itemsize + view.offset, view.sizes, view.strides))
                continue
            _, address, _, meta = place
            storage = storages[address]
            if construct is not None:
                t = construct(meta, storage)
            else:
                t = torch.empty(0, dtype=meta["dtype"], device=storage.device).set_(
                    storage, meta["storage_offset"], meta["size"], meta["stride"])
            out.append(t.clone() if kind == "small" else t)
        return out
