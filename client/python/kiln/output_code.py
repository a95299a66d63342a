"""A graph kilnd compiled, as AOTAutograd's cache holds it (kiln.frame_cache).

Needs PyTorch: imported by the backend when it runs, and by pickle when a frame is loaded.
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

from torch._functorch._aot_autograd.autograd_cache import BypassAOTAutogradCache
from torch._inductor.output_code import OutputCode

from kiln import frame_cache


class KilnOutputCode(OutputCode):
    """One forward, backward or inference graph (`kind`) of a frame, called as AOTAutograd
    calls compiled graphs (one list of inputs). `artifact` is the kiln.v1.CompiledGraph kilnd
    answered with (key `compile_key`); a graph that runs per fallback has none, and its
    frame is not stored. Its outputs from `saved_from` on are read by autograd alone (a
    forward's saved values, a backward's gradients: kiln.cuda_graphs). Pickled without its
    runner, which post_compile makes again."""

    saved_from: Optional[int] = None  # what a frame pickled without the field loads with

    def __init__(self, kind: str, name: str, runner: Callable, artifact: Optional[bytes] = None,
                 compile_key: str = "", reason: str = "",
                 saved_from: Optional[int] = None) -> None:
        self.kind = kind
        self.name = name
        self.artifact = artifact
        self.compile_key = compile_key
        self.reason = reason
        self.saved_from = saved_from
        self._runner: Optional[Callable] = runner
        self._boxed_call = True

    def __call__(self, inputs: Sequence[Any]) -> Any:
        assert self._runner is not None, f"graph {self.name} was loaded without post_compile"
        return self._runner(inputs)

    def prepare_for_serialization(self) -> None:
        if self.artifact is None:
            raise BypassAOTAutogradCache(f"graph {self.name} does not run kilnd's code "
                                         f"({self.reason}); its frame is not stored")
        self._runner = None

    def post_compile(self, example_inputs: Sequence[Any], constants: Any,
                     graph_kwargs: Any) -> None:
        if self._runner is None:
            assert self.artifact is not None
            self._runner = frame_cache.load(self.kind, self.compile_key, self.artifact,
                                            example_inputs, self.saved_from)

    def set_triton_bundle(self, triton_bundle: Any) -> None:
        pass  # no Triton kernels

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_runner"] = None
        return state
