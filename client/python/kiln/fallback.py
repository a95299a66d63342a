"""How a graph runs when kilnd gives it no usable artifact, and the one warning that says so.

The `fallback` setting picks the runner: `eager` (default) runs the graph as PyTorch would
without compiling it, `inductor` compiles it with PyTorch's own compiler, `error` raises.
Training is never stopped by kilnd being unreachable, slow, or failing a compile unless
`error` asks for it; a rank divergence is always raised (kiln.errors says why), and so is a
plan that cannot be captured in a CUDA graph when `require_cudagraph` is set: a user who
requires capture asked to be told, as PyTorch's cudagraph_or_error does, not to train on
uncaptured graphs.

Each kind of failure (unreachable, timeout, each rejection code, damaged artifact) warns
once per process, as a KilnWarning; every later fallback is logged to the "kiln" logger.
A graph kilnd compiled for a CUDA target runs on Kiln's runtime (kiln.gpu_runtime); one it
compiled for a target this package has no runtime for, or whose artifact the runtime cannot
load, runs per `fallback` too.

Thread-safe. Needs no PyTorch: the decisions are names of runners, which the backend runs.
"""

from __future__ import annotations

import logging
import threading
import warnings
from dataclasses import dataclass, field
from typing import Callable, Optional

from kiln.errors import (ArtifactMismatch, CaptureFailed, CompileFailed, CompileTimeout,
                         KilnError, RankDivergence, ServerUnreachable)

EAGER = "eager"
INDUCTOR = "inductor"
ERROR = "error"
KILN = "kiln"  # the decision to run kilnd's artifact with Kiln's runtime
RUNNER_WORDS = {EAGER: "eagerly", INDUCTOR: "with inductor"}

log = logging.getLogger("kiln")


class KilnWarning(UserWarning):
    """Kiln could not use kilnd's answer for a graph; it runs per the fallback setting."""


@dataclass(frozen=True)
class Decision:
    """How one graph runs: `runner` is "kiln" (kilnd's artifact, whose bytes are
    `artifact` and whose key is `compile_key`, on Kiln's runtime), "eager" or "inductor";
    `reason` says why, in a line."""

    runner: str
    reason: str
    artifact: bytes = field(default=b"", repr=False, compare=False)
    compile_key: str = ""


class FallbackPolicy:
    """Decides how each graph runs, from the `fallback` setting and what kilnd answered."""

    def __init__(self, fallback: str, warn: Optional[Callable[[str], None]] = None,
                 require_cudagraph: bool = False) -> None:
        if fallback not in (EAGER, INDUCTOR, ERROR):
            raise ValueError(f"unknown fallback '{fallback}'")
        self.fallback = fallback
        self.require_cudagraph = require_cudagraph
        self._warn = warn or _warn
        self._lock = threading.Lock()
        self._warned: set[tuple[str, ...]] = set()

    def after_failure(self, error: KilnError, graph: str) -> Decision:
        """The runner for `graph` (a name for messages) after kilnd failed it with `error`.
        Raises `error` itself for a rank divergence, for anything but a CompileFailed, for
        kilnd's FAILED_PRECONDITION under require_cudagraph (the plan cannot be captured; the
        message lists the reasons), and for every failure under fallback=error."""
        if isinstance(error, RankDivergence) or not isinstance(error, CompileFailed):
            raise error
        if self.require_cudagraph and error.code == "FAILED_PRECONDITION":
            raise error
        if self.fallback == ERROR:
            raise error
        words = RUNNER_WORDS[self.fallback]
        reason = f"{_failure_kind(error)} ({error})"
        self._once((type(error).__name__, error.code),
                   f"kiln: {reason}; graph {graph} and any other graph that fails this way "
                   f"run {words} (fallback={self.fallback}), training goes on. Later "
                   "failures are logged to the 'kiln' logger.")
        log.info("graph %s runs %s: %s", graph, words, reason)
        return Decision(self.fallback, reason)

    def after_success(self, compile_key: str, outcome: str, graph: str,
                      loadable: bool = True, artifact: bytes = b"") -> Decision:
        """The runner for `graph` after kilnd answered with a verified artifact: Kiln's
        runtime when this package can load it (`loadable`: its runtime runs CUDA targets),
        else the fallback setting (eagerly under fallback=error, since nothing failed),
        said once."""
        reason = f"kilnd compiled it (key {compile_key[:12]}, {outcome})"
        if loadable:
            log.info("graph %s runs on Kiln's runtime: %s", graph, reason)
            return Decision(KILN, reason, artifact, compile_key)
        runner = EAGER if self.fallback == ERROR else self.fallback
        words = RUNNER_WORDS[runner]
        self._once(("no runtime",),
                   f"kiln: kilnd compiles this model's graphs (graph {graph}: {reason}), but "
                   "this kiln package runs Kiln's kernels on CUDA GPUs only; the graphs "
                   f"run {words}.")
        log.info("graph %s runs %s: %s, no runtime for its target", graph, words, reason)
        return Decision(runner, reason)

    def after_load_failure(self, error: Exception, graph: str) -> Decision:
        """The runner for `graph` when Kiln's runtime cannot load kilnd's artifact (no
        runtime library, a driver error, an artifact it cannot run). Raises under
        fallback=error."""
        if self.fallback == ERROR:
            raise error
        words = RUNNER_WORDS[self.fallback]
        reason = f"Kiln's runtime cannot load the compiled graph ({type(error).__name__}: {error})"
        self._once(("load", type(error).__name__),
                   f"kiln: {reason}; graph {graph} and any other graph that fails this way "
                   f"run {words} (fallback={self.fallback}), training goes on.")
        log.info("graph %s runs %s: %s", graph, words, reason)
        return Decision(self.fallback, reason)

    def _once(self, kind: tuple[str, ...], message: str) -> None:
        with self._lock:
            if kind in self._warned:
                return
            self._warned.add(kind)
        self._warn(message)


def _failure_kind(error: CompileFailed) -> str:
    if isinstance(error, ServerUnreachable):
        return "kilnd is unreachable"
    if isinstance(error, CompileTimeout):
        return "kilnd did not answer within the deadline"
    if isinstance(error, CaptureFailed):
        return "the graph cannot be sent to kilnd"
    if isinstance(error, ArtifactMismatch):
        return "kilnd sent a compiled graph whose bytes do not match their digest"
    return "kilnd could not compile the graph"


def _warn(message: str) -> None:
    warnings.warn(message, KilnWarning, stacklevel=3)
