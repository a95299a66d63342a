"""kiln.frame_cache without PyTorch: what a frame key's tag depends on, which processes keep
frames, what AOTAutogradCache is pointed at while the backend runs (a stand-in for the
PyTorch modules it patches) and that all of it is undone after, and a PyTorch without them."""

from __future__ import annotations

import contextlib
import logging
import pathlib
import sys
import types
from typing import Any, Iterator

import pytest

from kiln import frame_cache, timings, torch_identity
from kiln.fallback import KILN, FallbackPolicy
from kiln.settings import Settings

HERE = pathlib.Path(__file__).resolve().parent


def settings(**options: Any) -> Settings:
    return Settings.from_options(options, {})


def test_the_tag_names_the_options_that_change_the_graphs_or_kilnds_code_and_no_others() -> None:
    base = frame_cache.frame_tag(settings(), "cuda:sm_90")
    assert base.startswith(f"kiln-frame-{frame_cache.FORMAT}-")
    assert frame_cache.frame_tag(settings(), "cuda:sm_90") == base
    for changed in (frame_cache.frame_tag(settings(), "x86_64"),
                    frame_cache.frame_tag(settings(precision="allow_tf32"), "cuda:sm_90"),
                    frame_cache.frame_tag(settings(require_cudagraph=True), "cuda:sm_90"),
                    frame_cache.frame_tag(settings(backend_options={"unroll": 4}), "cuda:sm_90"),
                    frame_cache.frame_tag(settings(partitioner="default"), "cuda:sm_90"),
                    frame_cache.frame_tag(settings(layout_optimization=False), "cuda:sm_90")):
        assert changed != base
    # Where the frame runs, how it is launched and where kilnd is do not change the code.
    for same in (settings(cudagraphs=True), settings(server="elsewhere:1"),
                 settings(fallback="error"), settings(job_id="another-job")):
        assert frame_cache.frame_tag(same, "cuda:sm_90") == base


def test_frames_are_kept_for_single_rank_processes_that_leave_the_setting_on() -> None:
    assert frame_cache.refusal(settings(), 1) is None
    assert "frame_cache is off" in frame_cache.refusal(settings(frame_cache=False), 1)
    assert "one of 2 ranks" in frame_cache.refusal(settings(), 2)


class StandIn:
    """The modules frame_cache patches: functorch's and torch.compiler's config (a patch
    that sets attributes and restores them), AOTAutogradCache and Inductor's codecache (what
    its cache key is made of), on a machine with one GPU."""

    def __init__(self) -> None:
        self.functorch = self.config(enable_autograd_cache=True,
                                     enable_remote_autograd_cache=None,
                                     bundled_autograd_cache=False,
                                     force_non_lazy_backward_lowering=False)
        self.compiler = self.config(cache_key_tag="")

        class AOTAutogradCache:
            @staticmethod
            def get_remote_cache() -> None:
                return None

            @staticmethod
            def _write_to_local_cache(key: str, content: bytes) -> None:
                raise AssertionError("written to the local disk")

        self.cache = AOTAutogradCache

        class CacheBase:
            @staticmethod
            def get_system() -> dict:
                return {"device": {"name": "NVIDIA H100"},
                        "version": {"triton": "a hash of Triton's sources", "cuda": "13.0"}}

        self.codecache = types.ModuleType("torch._inductor.codecache")
        self.codecache.CacheBase = CacheBase
        self.codecache.init_backend_registration = self.register_inductor_backends
        self.registered = 0
        self.sources_hashed = 0
        self.codecache.torch_key = self.hash_torch_sources
        self.autograd_cache = types.ModuleType("torch._functorch._aot_autograd.autograd_cache")
        self.autograd_cache.AOTAutogradCache = self.cache
        self.autograd_cache.autograd_cache_key = self.autograd_cache_key

    def register_inductor_backends(self) -> None:
        self.registered += 1

    def hash_torch_sources(self) -> bytes:
        self.sources_hashed += 1
        return b"a hash of PyTorch's sources"

    def autograd_cache_key(self, gm: Any, args: Any, aot_config: Any,
                           fx_config: Any) -> tuple[dict, list]:
        """AOTAutograd's key of a frame: what Inductor's key machinery gives it."""
        self.codecache.init_backend_registration()
        return self.codecache.CacheBase.get_system(), [f"{gm} {args}",
                                                       self.codecache.torch_key()]

    @staticmethod
    def config(**values: Any) -> types.SimpleNamespace:
        config = types.SimpleNamespace(**values)

        @contextlib.contextmanager
        def patch(**changes: Any) -> Iterator[None]:
            for name in changes:
                if not hasattr(config, name):
                    raise AttributeError(name)
            saved = {name: getattr(config, name) for name in changes}
            for name, value in changes.items():
                setattr(config, name, value)
            try:
                yield
            finally:
                for name, value in saved.items():
                    setattr(config, name, value)

        config.patch = patch
        return config

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        torch = types.ModuleType("torch")
        torch.compiler = types.SimpleNamespace(config=self.compiler)
        torch.cuda = types.SimpleNamespace(
            is_available=lambda: True, current_device=lambda: 0,
            get_device_properties=lambda i: types.SimpleNamespace(name="NVIDIA H100"))
        torch.version = types.SimpleNamespace(cuda="13.0", hip=None)
        inductor = types.ModuleType("torch._inductor")
        inductor.codecache = self.codecache
        functorch = types.ModuleType("torch._functorch")
        functorch.config = self.functorch
        aot = types.ModuleType("torch._functorch._aot_autograd")
        aot.autograd_cache = autograd_cache = self.autograd_cache
        for name, module in (("torch", torch), ("torch._functorch", functorch),
                             ("torch._functorch._aot_autograd", aot),
                             ("torch._functorch._aot_autograd.autograd_cache", autograd_cache),
                             ("torch._inductor", inductor),
                             ("torch._inductor.codecache", self.codecache)):
            monkeypatch.setitem(sys.modules, name, module)


def loading() -> frame_cache.Loading:
    return frame_cache.Loading("frame 3/0", FallbackPolicy("eager"),
                               lambda decision, inputs, name, saved_from: (
                                   decision, list(inputs), name, saved_from))


def test_while_the_backend_runs_aotautogradcache_reads_kilnd_and_writes_nothing_locally(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    stand_in = StandIn()
    stand_in.install(monkeypatch)
    frame_cache._system.cache_clear()  # the stand-in's GPU, not one an earlier test saw
    frame_cache._installed_torch.cache_clear()
    store = object()
    with frame_cache.frame_cache(store, "kiln-frame-tag", loading()) as cached:
        assert cached
        f = stand_in.functorch
        assert (f.enable_autograd_cache, f.enable_remote_autograd_cache,
                f.bundled_autograd_cache, f.force_non_lazy_backward_lowering) == (
                    False, True, True, True)
        assert stand_in.compiler.cache_key_tag == "kiln-frame-tag"
        assert stand_in.cache.get_remote_cache() is store
        stand_in.cache._write_to_local_cache("key", b"frame")  # does nothing
        # A frame's key knows the GPU and CUDA but not Triton, and registers no Inductor
        # backends.
        with timings.ledger() as times:
            system, lines = stand_in.autograd_cache.autograd_cache_key("gm", [1], None, {})
        assert set(times.seconds) == {"frame key"}  # its time is the frame key's
        assert "triton" not in str(system)
        assert (system["device"], system["cuda"], len(system["hash"])) == (
            "NVIDIA H100", "13.0", 64)
        assert stand_in.registered == 0
        # The stand-in PyTorch has no RECORD: its sources are hashed.
        assert lines == ["gm [1]", b"a hash of PyTorch's sources"]
        # Inductor compiling a graph that falls back to it keys it as it always does.
        assert "triton" in stand_in.codecache.CacheBase.get_system()["version"]
        stand_in.codecache.init_backend_registration()
        assert stand_in.registered == 1
        with caplog.at_level(logging.INFO, logger="kiln"):
            decision, inputs, name, saved_from = frame_cache.load("bw", "ab" * 32,
                                                                  b"artifact", ["x"])
        # A graph loaded from its frame says how long its loading took.
        timed = [r for r in caplog.records if hasattr(r, "kiln_times")]
        assert [r.kiln_times["name"] for r in timed] == ["frame 3/0.bw"]
        assert (decision.runner, decision.artifact, decision.compile_key) == (
            KILN, b"artifact", "ab" * 32)
        assert (inputs, name, saved_from) == (["x"], "frame 3/0.bw", None)
        assert frame_cache.load("fw", "ab" * 32, b"artifact", ["x"], 5)[3] == 5
    # Everything is as it was.
    f = stand_in.functorch
    assert (f.enable_autograd_cache, f.enable_remote_autograd_cache, f.bundled_autograd_cache,
            f.force_non_lazy_backward_lowering) == (True, None, False, False)
    assert stand_in.compiler.cache_key_tag == ""
    assert stand_in.cache.get_remote_cache() is None
    assert stand_in.autograd_cache.autograd_cache_key("gm", [1], None, {})[0]["version"][
        "triton"]
    assert stand_in.registered == 2
    with pytest.raises(AssertionError):
        stand_in.cache._write_to_local_cache("key", b"frame")
    with pytest.raises(RuntimeError, match="inside the kiln backend only"):
        frame_cache.load("fw", "ab" * 32, b"artifact", [])


def test_a_frame_key_names_an_installed_pytorch_by_its_record(
        monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> None:
    import torch_identity_test

    stand_in = StandIn()
    stand_in.install(monkeypatch)
    package = torch_identity_test.install(tmp_path)
    torch = sys.modules["torch"]
    monkeypatch.setattr(torch, "__file__", str(package / "__init__.py"), raising=False)
    monkeypatch.setattr(torch, "__version__", torch_identity_test.VERSION, raising=False)
    frame_cache._installed_torch.cache_clear()
    record = torch_identity.identity(str(package), torch_identity_test.VERSION)
    assert record is not None
    try:
        with frame_cache.frame_cache(object(), "kiln-frame-tag", loading()):
            for _ in range(2):
                _, lines = stand_in.autograd_cache.autograd_cache_key("gm", [1], None, {})
                assert lines == ["gm [1]", record]
        assert stand_in.sources_hashed == 0
        # Inductor's own keys still hash the sources.
        assert stand_in.codecache.torch_key() == b"a hash of PyTorch's sources"
        assert stand_in.sources_hashed == 1
    finally:
        frame_cache._installed_torch.cache_clear()


def test_a_pytorch_without_what_the_cache_needs_changes_nothing_and_says_so_once(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    stand_in = StandIn()
    del stand_in.functorch.bundled_autograd_cache  # an older PyTorch
    stand_in.install(monkeypatch)
    monkeypatch.setattr(frame_cache, "_said_unavailable", type(frame_cache._said_unavailable)())
    with caplog.at_level(logging.WARNING, logger="kiln"):
        for _ in range(2):
            with frame_cache.frame_cache(object(), "tag", loading()) as cached:
                assert not cached
                assert stand_in.functorch.enable_autograd_cache is True
                assert stand_in.compiler.cache_key_tag == ""
                assert stand_in.cache.get_remote_cache() is None
    assert len(caplog.records) == 1
    assert "bundled_autograd_cache" in caplog.records[0].getMessage()
    # And with no PyTorch modules at all (the stand-in of backend_test has only Dynamo's).
    monkeypatch.delitem(sys.modules, "torch._functorch")
    monkeypatch.setitem(sys.modules, "torch._functorch", None)
    with frame_cache.frame_cache(object(), "tag", loading()) as cached:
        assert not cached
