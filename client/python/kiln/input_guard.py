"""One call into PyTorch that checks every tensor input of a bound plan's run.

A run checks each input against the plan (kiln.bound_plan: dtype, sizes, strides, device),
a few attribute reads in Python per tensor; a backward takes about 200. Dynamo's
TensorGuards (torch._C._dynamo.guards), which guard every compiled frame, check a list of
tensors against the ones they were made from in C++: Python type, dispatch keys (device
type and autocast's among them), dtype, device index, requires_grad, sizes and strides,
each exactly. An InputGuard is made from the first run's inputs, once they passed the
plan's own checks; a later run whose inputs all fit it needs no other check, and one that
does not fit, or a PyTorch without TensorGuards, is checked in Python as before, which
names the input at fault. TensorGuards are stricter than the plan (a stride of an extent of
1 is free in the plan), so they never let through what the plan refuses.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Optional, Sequence


class InputGuard:
    """Checks the tensor inputs at `indices` of each run in one call, once learned."""

    def __init__(self, indices: Sequence[int]) -> None:
        self._pick: Optional[Callable[[Sequence[Any]], Any]] = None
        if len(indices) > 1:
            self._pick = operator.itemgetter(*indices)
        elif indices:
            index = indices[0]
            self._pick = lambda inputs: (inputs[index],)
        self._check: Optional[Callable[..., bool]] = None
        self._learned = False

    def fits(self, inputs: Sequence[Any]) -> bool:
        """Whether every tensor input is as in the run it learned from (False until then)."""
        return self._check is not None and self._check(*self._pick(inputs))  # type: ignore[misc]

    def learn(self, inputs: Sequence[Any]) -> None:
        """Makes the guard from a run's inputs that passed the plan's checks; only the first
        call counts."""
        if self._learned or self._pick is None:
            return
        self._learned = True
        tensors = self._pick(inputs)
        import torch  # noqa: PLC0415

        make = getattr(getattr(getattr(torch._C, "_dynamo", None), "guards", None),
                       "TensorGuards", None)
        if make is None:
            return
        try:
            # None: every size and stride as the tensors have them.
            guard = make(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None)
            # A guard that refuses the tensors it was made from checks something else.
            if guard.check(*tensors):
                self._check = guard.check
        except (TypeError, ValueError, RuntimeError):
            pass
