"""A warm start skips AOTAutograd's tracing: compiled frames kept in kilnd.

PyTorch's AOTAutogradCache keys a Dynamo graph (its nodes, input metadata, AOTAutograd's
and Inductor's configuration, the PyTorch version) to what AOTAutograd made of it, and on a
hit rebuilds the runtime wrappers without tracing. It does so for a backend whose compilers
return a picklable OutputCode (kiln.output_code.KilnOutputCode, which holds kilnd's compiled
graph) wrapped in SerializableAOTDispatchCompiler. While the kiln backend handles a graph,
frame_cache() points that cache at kilnd:

- the entry bundles the compiled graphs with AOTAutograd's metadata
  (functorch's bundled_autograd_cache), so one blob is the whole frame;
- entries are read from and written to kilnd only (kiln.frame_store.FrameStore, keyed by
  kilnd's toolchain for the target), never to the local disk: kilnd is where the compiled
  code lives and knows when its compiler changed;
- the key carries a tag (torch.compiler.config.cache_key_tag) naming Kiln's entry format and
  the compile options that change the generated code, so Inductor's entries and Kiln's never
  meet, nor Kiln's under other options;
- the backward is compiled with the forward (force_non_lazy_backward_lowering), so the entry
  is written while these settings hold;
- the key leaves out what only Inductor's code depends on and is slow to find: Triton's
  version (a hash of its sources) and the custom passes of Inductor's code generators (which
  imports them all). Together they were over two seconds of a warm start;
- the key names PyTorch by its wheel's RECORD (kiln.torch_identity) where that describes the
  installed package as it is, rather than by torch_key's hash of every source file (0.4 s of a
  warm start); elsewhere by torch_key.

A frame whose graphs do not all run kilnd's code (a fallback) is not stored. Processes of
several ranks do not use the cache: a rank that loads its frame sends no compile request,
and a rank that does not would wait for it at kilnd's rendezvous.

Importing this module needs no PyTorch; frame_cache() imports it.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Optional, Sequence

from kiln import partitioning, timings, torch_identity
from kiln.client import compile_options
from kiln.fallback import Decision, FallbackPolicy
from kiln.settings import Settings

log = logging.getLogger("kiln")

# The version of the entries this package writes: a change to KilnOutputCode's fields, or to
# what a frame holds, changes it, and every key with it. 2: a backward's saved_from is 0.
FORMAT = 2


def frame_tag(settings: Settings, target: str) -> str:
    """The tag in every frame key: Kiln's entry format, the partitioner, the ops AOTAutograd
    decomposes for it and the layout choice (kiln.partitioning.recipe), which change the graphs
    AOTAutograd hands over (AOTAutogradCache's key leaves both out), and a digest of the
    compile options (target, precision, require_cudagraph, backend options) that change
    kilnd's code."""
    options = compile_options(settings, target).SerializeToString(deterministic=True)
    digest = hashlib.sha256(options).hexdigest()[:16]
    recipe = partitioning.recipe(settings.partitioner, settings.layout_optimization)
    return f"kiln-frame-{FORMAT}-{recipe}-{digest}"


def refusal(settings: Settings, world_size: int) -> Optional[str]:
    """Why frames of a process with these settings are not cached; None when they are."""
    if not settings.frame_cache:
        return "frame_cache is off"
    if world_size > 1:
        return (f"this process is one of {world_size} ranks, whose compile requests meet at "
                "kilnd's rendezvous")
    return None


@dataclass(frozen=True)
class Loading:
    """What a frame found in kilnd needs to run, for the backend call that found it:
    `frame` names it in messages, `policy` decides how its graphs run, `run_kiln` makes a
    graph's runner from a decision, the graph's example inputs, its name and, for a forward,
    the index of its first saved output (kiln.cuda_graphs)."""

    frame: str
    policy: FallbackPolicy
    run_kiln: Callable[[Decision, Sequence[Any], str, Optional[int]], Callable]


_local = threading.local()


def load(kind: str, compile_key: str, artifact: bytes, example_inputs: Sequence[Any],
         saved_from: Optional[int] = None) -> Callable:
    """The runner of a graph of a frame found in kilnd (KilnOutputCode.post_compile)."""
    loading: Optional[Loading] = getattr(_local, "loading", None)
    if loading is None:
        raise RuntimeError("a compiled frame of Kiln's loads inside the kiln backend only")
    name = f"{loading.frame}.{kind}"
    decision = loading.policy.after_success(compile_key, "frame found in kilnd", name,
                                            artifact=artifact)
    with timings.ledger() as times:
        runner = loading.run_kiln(decision, example_inputs, name, saved_from)
    timings.say(log, "graph", name, times)
    return runner


@contextlib.contextmanager
def frame_cache(store: Any, tag: str, loading: Loading) -> Iterator[bool]:
    """While the kiln backend handles a graph: AOTAutogradCache reads and writes frames
    through `store` (a kiln.frame_store.FrameStore) under keys tagged `tag`, and loads them
    as `loading` says. Yields False, having changed nothing, when this PyTorch lacks what the
    cache needs (said once)."""
    stack = contextlib.ExitStack()
    try:
        for patch in _patches(store, tag):
            stack.enter_context(patch)
    except (ImportError, AttributeError, AssertionError) as e:
        stack.close()
        _say_unavailable(e)
        yield False
        return
    with stack:
        _local.loading = loading
        try:
            yield True
        finally:
            _local.loading = None


def _patches(store: Any, tag: str) -> list:
    from unittest import mock  # noqa: PLC0415

    import torch  # noqa: PLC0415
    from torch._functorch import config as functorch_config  # noqa: PLC0415
    from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache  # noqa: PLC0415

    # Looked up first, so a PyTorch without them raises here and nothing is patched.
    for name in ("get_remote_cache", "_write_to_local_cache"):
        getattr(AOTAutogradCache, name)
    return _key_patches(mock) + [
        functorch_config.patch(enable_autograd_cache=False, enable_remote_autograd_cache=True,
                               bundled_autograd_cache=True,
                               force_non_lazy_backward_lowering=True),
        torch.compiler.config.patch(cache_key_tag=tag),
        mock.patch.object(AOTAutogradCache, "get_remote_cache", staticmethod(lambda: store)),
        mock.patch.object(AOTAutogradCache, "_write_to_local_cache",
                          staticmethod(lambda key, content: None)),
    ]


def _key_patches(mock: Any) -> list:
    """While AOTAutogradCache computes a frame's key (autograd_cache_key), Inductor's key
    machinery leaves out what only Inductor's code depends on, and names PyTorch by its RECORD,
    where this PyTorch has them (a PyTorch without them keys frames as it does). Only then: a
    graph that falls back to Inductor inside the backend is keyed in Inductor's own caches as
    it always is."""
    from torch._functorch._aot_autograd import autograd_cache  # noqa: PLC0415
    from torch._inductor import codecache  # noqa: PLC0415

    def inductor_only() -> list:
        patches = []
        if hasattr(getattr(codecache, "CacheBase", None), "get_system"):
            patches.append(mock.patch.object(codecache.CacheBase, "get_system",
                                             staticmethod(_system)))
        if hasattr(codecache, "init_backend_registration"):
            patches.append(mock.patch.object(codecache, "init_backend_registration",
                                             lambda: None))
        if hasattr(codecache, "torch_key"):
            hash_sources = codecache.torch_key
            patches.append(mock.patch.object(codecache, "torch_key",
                                             lambda: _installed_torch() or hash_sources()))
        return patches

    key_of = getattr(autograd_cache, "autograd_cache_key", None)
    if key_of is None:
        return []

    def frame_key(*args: Any, **kwargs: Any) -> Any:
        with timings.phase("frame key"), contextlib.ExitStack() as stack:
            for patch in inductor_only():
                stack.enter_context(patch)
            return key_of(*args, **kwargs)

    return [mock.patch.object(autograd_cache, "autograd_cache_key", frame_key)]


@functools.cache
def _installed_torch() -> Optional[bytes]:
    """The imported PyTorch's identity from its RECORD (kiln.torch_identity), None where no
    RECORD describes it as it is."""
    import torch  # noqa: PLC0415

    where, version = getattr(torch, "__file__", None), getattr(torch, "__version__", None)
    if not where or not isinstance(version, str):
        return None
    return torch_identity.identity(os.path.dirname(where), version)


@functools.cache
def _system() -> dict:
    """Inductor's description of the system a cache entry was made on, less Triton's
    version: the GPU's name and the CUDA (or HIP) version PyTorch was built with; empty on a
    machine without a GPU."""
    import torch  # noqa: PLC0415

    system: dict = {}
    try:
        if torch.cuda.is_available():
            properties = torch.cuda.get_device_properties(torch.cuda.current_device())
            if torch.version.cuda is not None:
                system = {"device": properties.name, "cuda": torch.version.cuda}
            else:
                system = {"device": properties.gcnArchName, "hip": torch.version.hip}
    except (AssertionError, RuntimeError):
        system = {}
    system["hash"] = hashlib.sha256(json.dumps(system, sort_keys=True).encode()).hexdigest()
    return system


_said_unavailable = threading.Event()


def _say_unavailable(error: Exception) -> None:
    if not _said_unavailable.is_set():
        _said_unavailable.set()
        log.warning("kiln: this PyTorch's AOTAutogradCache lacks what Kiln's frame cache needs "
                    "(%s: %s); every process traces its frames", type(error).__name__, error)
