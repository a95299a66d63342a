"""inductor_remote_cache.py without PyTorch or a GPU: its RESP reading, each mode's
environment, the servers' counters, the checks and the table; redis_server.sh's and
redis_py.sh's copies working on their own; and the runner against a real kilnd (RESP front)
and the copied redis-server, its workers failing where PyTorch is missing."""

from __future__ import annotations

import io
import json
import os
import pathlib
import subprocess
import sys

import pytest

import inductor_remote_cache as irc

HERE = pathlib.Path(__file__).resolve().parent
BINARY_DIR = pathlib.Path(os.environ.get("KILN_BINARY_DIR",
                                         HERE.parents[1] / "build/release")).resolve()
PYTHON312 = pathlib.Path("/root/.pyenv/versions/3.12.1/bin/python3")


# --- RESP -----------------------------------------------------------------------------------


def test_replies_of_every_kind_are_read() -> None:
    stream = io.BytesIO(b"+PONG\r\n:42\r\n$5\r\nhe\r\no\r\n$-1\r\n*2\r\n$1\r\na\r\n:7\r\n"
                        b"*-1\r\n$0\r\n\r\n")
    assert irc.read_reply(stream) == "PONG"
    assert irc.read_reply(stream) == 42
    assert irc.read_reply(stream) == b"he\r\no"  # bulk strings are binary-safe
    assert irc.read_reply(stream) is None
    assert irc.read_reply(stream) == [b"a", 7]
    assert irc.read_reply(stream) is None
    assert irc.read_reply(stream) == b""


def test_an_error_reply_raises_and_a_cut_reply_is_a_closed_connection() -> None:
    with pytest.raises(irc.RespError, match="ERR unknown command 'FLUSHALL'"):
        irc.read_reply(io.BytesIO(b"-ERR unknown command 'FLUSHALL'\r\n"))
    with pytest.raises(ConnectionError):
        irc.read_reply(io.BytesIO(b"$10\r\nshort\r\n"))
    with pytest.raises(ConnectionError):
        irc.read_reply(io.BytesIO(b""))
    with pytest.raises(ValueError, match="not a RESP reply"):
        irc.read_reply(io.BytesIO(b"HTTP/1.1 400\r\n"))


def test_commands_are_arrays_of_bulk_strings() -> None:
    assert (irc.encode_command("SET", "k", b"\x00v") ==
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\n\x00v\r\n")
    assert irc.encode_command("INFO", "all") == b"*2\r\n$4\r\nINFO\r\n$3\r\nall\r\n"


# --- each mode's environment ----------------------------------------------------------------


def test_a_mode_env_points_every_remote_cache_at_its_server(tmp_path: pathlib.Path) -> None:
    base = {"PATH": "/bin", "TORCHINDUCTOR_REDIS_URL": "redis://elsewhere:1/0",
            "TORCHINDUCTOR_REDIS_EXPIRE": "60", "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1",
            "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE": "1", "TRITON_CACHE_DIR": "/old",
            irc.PYLIB_ENV: "/stale"}
    env = irc.mode_env(base, 6390, tmp_path / "cold", irc.DEFAULT_CACHES, tmp_path / "pylib")
    assert env["PATH"] == "/bin"
    assert env["TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE"] == "1"
    assert env["TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE"] == "1"
    assert env["TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE"] == "1"
    assert env["TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE"] == "0"  # not asked for
    assert (env["TORCHINDUCTOR_REDIS_HOST"], env["TORCHINDUCTOR_REDIS_PORT"]) == ("127.0.0.1",
                                                                                  "6390")
    # A URL or an expiry inherited from the shell would send the caches elsewhere or make
    # SET carry EX; a forced disable would measure nothing.
    for gone in ("TORCHINDUCTOR_REDIS_URL", "TORCHINDUCTOR_REDIS_EXPIRE",
                 "TORCHINDUCTOR_FORCE_DISABLE_CACHES"):
        assert gone not in env
    assert env["TORCHINDUCTOR_CACHE_DIR"] == str(tmp_path / "cold")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "cold" / "triton")
    assert env[irc.PYLIB_ENV] == str((tmp_path / "pylib").resolve())
    assert irc.PYLIB_ENV not in irc.mode_env(base, 1, tmp_path, ["fx_graph"], None)
    with pytest.raises(ValueError, match="unknown caches \\['fx'\\]"):
        irc.mode_env(base, 1, tmp_path, ["fx"], None)


def test_every_mode_sets_the_same_cache_flags() -> None:
    # AOTAutograd's cache key covers the remote flag: warm_local must read what cold wrote
    # with the same flags, only the address differs.
    envs = [irc.mode_env({}, port, pathlib.Path("/c"), irc.DEFAULT_CACHES, None)
            for port in (6390, 7001)]
    flags = [{k: v for k, v in e.items() if k.endswith("_CACHE")} for e in envs]
    assert flags[0] == flags[1]
    assert irc.MODE_BY_NAME["warm_local"].cache_dir_of == "cold"
    assert irc.MODE_BY_NAME["warm_local"].remote == "none"
    # Cold runs come before the warm runs that read them.
    order = [m.name for m in irc.MODES]
    for mode in irc.MODES:
        for needed in (mode.cold_of, mode.cache_dir_of):
            assert not needed or order.index(needed) < order.index(mode.name)


# --- the servers' counters ------------------------------------------------------------------


def test_kilnd_resp_counters_become_gets_hits_and_sets() -> None:
    samples = {'kiln_resp_commands_total{command="get",outcome="hit"}': 5.0,
               'kiln_resp_commands_total{command="get",outcome="miss"}': 2.0,
               'kiln_resp_commands_total{command="set",outcome="ok"}': 3.0,
               'kiln_resp_commands_total{command="other",outcome="error"}': 1.0,
               'kiln_cache_hits_total': 9.0}
    counts = irc.resp_counts(samples)
    assert counts == {"get.hit": 5.0, "get.miss": 2.0, "set.ok": 3.0, "other.error": 1.0}
    change = irc.delta({"get.hit": 1.0, "set.ok": 3.0}, counts)
    assert change == {"get.hit": 4.0, "get.miss": 2.0, "other.error": 1.0}
    assert irc.server_summary("kilnd", change) == {"gets": 6.0, "hits": 4.0, "misses": 2.0,
                                                    "sets": 0.0, "errors": 1.0}


def test_redis_info_becomes_gets_hits_and_sets() -> None:
    info = ("# Stats\r\nkeyspace_hits:7\r\nkeyspace_misses:3\r\ntotal_error_replies:0\r\n"
            "# Commandstats\r\ncmdstat_info:calls=2,usec=9\r\n"
            "cmdstat_get:calls=10,usec=55,usec_per_call=5.50,"
            "rejected_calls=0,failed_calls=0\r\ncmdstat_set:calls=4,usec=20\r\n"
            "# Keyspace\r\ndb0:keys=4,expires=0,avg_ttl=0\r\n")
    counts = irc.redis_counts(info)
    assert counts == {"keyspace_hits": 7.0, "keyspace_misses": 3.0, "total_error_replies": 0.0,
                      "get.calls": 10.0, "set.calls": 4.0, "keys": 4.0}
    assert irc.server_summary("redis", counts) == {"gets": 10.0, "hits": 7.0, "misses": 3.0,
                                                   "sets": 4.0, "errors": 0.0}


# --- reading runs, checks, the table --------------------------------------------------------


def events(first: float, later: float, losses: list[float], fx: tuple = (4, 0),
           aot: tuple = (2, 0), remote: tuple = (6, 0, 0)) -> list[dict]:
    out = [{"event": "redis", "version": "4.3.4", "file": "/p/redis/__init__.py"}]
    out += [{"event": "step", "step": i + 1, "loss": loss,
             "seconds": first if i == 0 else later} for i, loss in enumerate(losses)]
    out.append({"event": "caches",
                "inductor": {"fxgraph_cache_hit": fx[0], "fxgraph_cache_miss": fx[1]},
                "aot_autograd": {"autograd_cache_hit": aot[0], "autograd_cache_miss": aot[1]},
                "remote": {"RemoteFxGraphCache": {"hit": remote[0], "miss": remote[1],
                                                  "put": remote[2], "exception": 0},
                           "backend:RedisRemoteCacheBackend": {"hit": 99, "miss": 99,
                                                               "put": 99, "exception": 0}},
                "config": {"fx_graph_remote_cache": True}})
    return out + [{"event": "done", "device": "H100", "torch": "2.11.0"}]


def test_a_finished_run_has_its_times_and_cache_counters() -> None:
    run = irc.summarize(events(9.5, 0.05, [3.0, 2.5, 2.0]), 0, "", None)
    assert run["first_s"] == 9.5
    assert run["steady_s"] == pytest.approx(0.05)
    # The backend's own line counts the same gets again: only the caches' are summed.
    assert run["pytorch"] == {"fx_hit": 4, "fx_miss": 0, "fx_bypass": 0, "aot_hit": 2,
                              "aot_miss": 0, "aot_bypass": 0, "remote_hit": 6,
                              "remote_miss": 0, "remote_put": 0, "remote_exception": 0}
    assert run["redis_client"] == "4.3.4 (/p/redis/__init__.py)"
    assert "failed" not in run


def test_a_run_that_did_not_finish_says_why() -> None:
    evs = events(9.5, 0.05, [3.0])[:2]
    assert irc.summarize(evs, None, "tail", 300.0)["failed"] == "timed out after 300 s"
    evs.append({"event": "error", "error": "ModuleNotFoundError: No module named 'torch'"})
    run = irc.summarize(evs, 1, "tail", None)
    assert run["failed"] == "ModuleNotFoundError: No module named 'torch'"
    assert run["output_tail"] == "tail"


def test_a_warm_run_is_checked_against_its_server_and_its_cold_run() -> None:
    warm_kilnd = irc.MODE_BY_NAME["warm_kilnd"]
    cold = dict(irc.summarize(events(40.0, 0.05, [3.0, 2.5], fx=(0, 4), aot=(0, 2),
                                     remote=(0, 6, 6)), 0, "", None),
                server={"gets": 6, "hits": 0, "misses": 6, "sets": 6, "errors": 0})
    warm = dict(irc.summarize(events(9.0, 0.05, [3.0, 2.5]), 0, "", None),
                server={"gets": 6, "hits": 6, "misses": 0, "sets": 0, "errors": 0})
    assert irc.warm_problems(warm_kilnd, warm, cold) == []
    assert irc.cold_problems(irc.MODE_BY_NAME["cold"], cold) == []
    # A warm run that compiled, got nothing from kilnd and trained differently says so.
    bad = dict(irc.summarize(events(40.0, 0.05, [3.0, 2.6], fx=(3, 1), aot=(0, 2),
                                    remote=(0, 6, 6)), 0, "", None),
               server={"gets": 6, "hits": 0, "misses": 6, "sets": 6, "errors": 2})
    problems = irc.warm_problems(warm_kilnd, bad, cold)
    assert "1 FX graph and 2 AOTAutograd misses" in problems
    assert "no remote hit" in problems
    assert "6 remote misses" in problems
    assert "kilnd answered no GET with a value" in problems
    assert "kilnd answered 2 errors" in problems
    assert "losses differ from cold's by 3.3e-02" in problems
    assert irc.cold_problems(irc.MODE_BY_NAME["cold_redis"],
                             dict(cold, server={"sets": 0})) == ["nothing SET on redis"]


def test_warm_local_must_not_ask_the_remote() -> None:
    warm_local = irc.MODE_BY_NAME["warm_local"]
    cold = irc.summarize(events(40.0, 0.05, [3.0, 2.5]), 0, "", None)
    local = irc.summarize(events(8.0, 0.05, [3.0, 2.5], remote=(0, 0, 0)), 0, "", None)
    assert irc.warm_problems(warm_local, local, cold) == []
    asked = irc.summarize(events(8.0, 0.05, [3.0, 2.5], remote=(0, 2, 0)), 0, "", None)
    assert irc.warm_problems(warm_local, asked, cold) == ["asked the remote 2 times"]
    assert irc.warm_problems(warm_local, {"failed": "boom"}, cold) == ["failed: boom"]


def test_the_table_has_a_row_per_mode_the_ratios_and_the_checks() -> None:
    runs = {"cold": dict(irc.summarize(events(40.0, 0.05, [3.0, 2.5], fx=(0, 4), aot=(0, 2),
                                              remote=(0, 6, 6)), 0, "", None),
                         server={"gets": 6, "hits": 0, "misses": 6, "sets": 6, "errors": 0}),
            "warm_kilnd": dict(irc.summarize(events(10.0, 0.05, [3.0, 2.5]), 0, "", None),
                               server={"gets": 6, "hits": 6, "misses": 0, "sets": 0,
                                       "errors": 0}),
            "warm_local": irc.summarize(events(8.0, 0.05, [3.0, 2.5], remote=(0, 0, 0)), 0,
                                        "", None),
            "cold_redis": {"failed": "no Redis: no .gpu/redis/bin/redis-server"},
            "warm_redis": {"failed": "no Redis: no .gpu/redis/bin/redis-server"}}
    values = irc.ratios(runs)
    assert values["warm_kilnd first / warm_local first"] == pytest.approx(1.25)
    assert values["warm_kilnd first / cold first"] == pytest.approx(0.25)
    assert values["warm_kilnd first / warm_redis first"] is None
    checks = {"warm_kilnd": [], "warm_redis": ["failed: no Redis"]}
    text = irc.table("gpt2_124m_fp32", runs, values, checks)
    assert "| cold | kilnd | 40.00 | 50.0 | 0/4 | 0/2 | 0/6/6 | 0/6, 6 | - |" in text
    assert "| warm_kilnd | kilnd | 10.00 | 50.0 | 4/0 | 2/0 | 6/0/0 | 6/0, 0 | 0.0e+00 |" in text
    assert "| warm_local | none | 8.00 | 50.0 | 4/0 | 2/0 | 0/0/0 |  | 0.0e+00 |" in text
    assert "| cold_redis | redis | failed: no Redis: no .gpu/redis/bin/redis-server |" in text
    assert "- warm_kilnd first / warm_local first: 1.25" in text
    assert "- warm_kilnd first / warm_redis first: -" in text
    assert "- warm_kilnd: ok" in text
    assert "- warm_redis: failed: no Redis" in text


# --- the helper scripts' copies -------------------------------------------------------------


@pytest.fixture(scope="module")
def redis_copy(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("gpu") / "redis"
    run = subprocess.run(["bash", str(HERE / "redis_server.sh"), str(out)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    return out


@pytest.fixture(scope="module")
def pylib(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("gpu") / "pylib"
    run = subprocess.run(["bash", str(HERE / "redis_py.sh"), str(out)], capture_output=True,
                         text=True)
    assert run.returncode == 0, run.stderr
    return out


def test_the_redis_server_copy_is_small_and_runs_on_its_own_libraries(
        redis_copy: pathlib.Path, tmp_path: pathlib.Path) -> None:
    size = sum(p.stat().st_size for p in redis_copy.rglob("*") if p.is_file())
    assert size < 10 * 1024 * 1024
    libs = sorted(p.name for p in (redis_copy / "lib").iterdir())
    assert "liblzf.so.1" in libs and "libjemalloc.so.2" in libs
    assert not [lib for lib in libs if lib.startswith(("libc.so", "libssl", "libstdc++"))]
    server = irc.RedisServer(redis_copy, tmp_path)
    # The copied libraries are the ones it loads, not the system's.
    ldd = subprocess.run(["ldd", str(server.binary)], env=server.env, capture_output=True,
                         text=True).stdout
    assert f"{redis_copy.resolve()}/lib/liblzf.so.1" in ldd
    assert irc.missing_libraries(server.binary, server.env) == []
    with server:
        assert irc.resp_command(server.port, "PING") == "PONG"
        assert irc.resp_command(server.port, "SET", "pt2:x::k:c1", b"\x00\xffv") == "OK"
        assert irc.resp_command(server.port, "GET", "pt2:x::k:c1") == b"\x00\xffv"
        counts = server.counts()
        assert counts["set.calls"] == 1 and counts["get.calls"] == 1 and counts["keys"] == 1
        assert counts["keyspace_hits"] == 1
    assert server.process.poll() is not None


def test_a_missing_redis_copy_or_library_is_named(tmp_path: pathlib.Path) -> None:
    with pytest.raises(RuntimeError, match="run tests/gpu/redis_server.sh"):
        irc.RedisServer(tmp_path / "nothing", tmp_path)
    # A redis-server whose library the machine lacks: a program linked to one that is gone.
    (tmp_path / "gone.c").write_text("int gone(void) { return 0; }\n")
    (tmp_path / "main.c").write_text("int gone(void);\nint main(void) { return gone(); }\n")
    copy = tmp_path / "copy"
    (copy / "bin").mkdir(parents=True)
    (copy / "lib").mkdir()
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(copy / "lib/libkilngone.so"),
                    str(tmp_path / "gone.c")], check=True)
    subprocess.run(["cc", "-o", str(copy / "bin/redis-server"), str(tmp_path / "main.c"),
                    f"-L{copy / 'lib'}", "-lkilngone"], check=True)
    irc.RedisServer(copy, tmp_path)  # all there
    (copy / "lib/libkilngone.so").unlink()
    with pytest.raises(RuntimeError, match="needs libkilngone.so, missing here: run "
                                           "tests/gpu/redis_server.sh .* --all"):
        irc.RedisServer(copy, tmp_path)


@pytest.mark.parametrize("python", ["/usr/bin/python3", str(PYTHON312)])
def test_the_redis_client_copy_imports_in_an_isolated_interpreter(pylib: pathlib.Path,
                                                                  python: str) -> None:
    if not pathlib.Path(python).exists():
        pytest.skip(f"no {python} on this machine")
    run = subprocess.run(
        [python, "-B", "-I", "-S", "-c",
         "import sys; sys.path.insert(0, sys.argv[1]); import redis, redis.commands.json; "
         "print(redis.__version__, redis.__file__)", str(pylib)],
        capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    version, path = run.stdout.split()
    assert version != "99.99.99"  # the metadata came along
    assert path.startswith(str(pylib))
    assert not list(pylib.rglob("*.so")) and not list(pylib.rglob("__pycache__"))


# --- the runner against a real kilnd and the copied redis-server ----------------------------


@pytest.fixture
def bundle(tmp_path: pathlib.Path) -> pathlib.Path:
    """A bundle of the kilnd built here: KilnServer needs only env.sh putting it on PATH."""
    kilnd = BINARY_DIR / "server" / "kilnd"
    if not kilnd.exists():
        pytest.fail(f"no {kilnd}: build the kilnd target")
    out = tmp_path / "bundle"
    out.mkdir()
    (out / "env.sh").write_text(f'export PATH="{kilnd.parent}:$PATH"\n')
    return out


def test_probes_do_what_inductors_backend_does_with_the_copied_client(
        bundle: pathlib.Path, redis_copy: pathlib.Path, pylib: pathlib.Path,
        tmp_path: pathlib.Path) -> None:
    kiln, port = irc.kilnd_with_resp(bundle, tmp_path)
    kiln.extra_args += ["--compile-isolation", "none"]
    with kiln, irc.RedisServer(redis_copy, tmp_path) as redis_server:
        irc.wait_for_ping(port, kiln.process, "kilnd", kiln.log)
        before = irc.resp_counts(kiln.scrape())
        # -S: no site-packages in the probe, so `redis` comes from the copy.
        env = irc.mode_env(dict(os.environ), port, tmp_path / "c", irc.DEFAULT_CACHES, pylib)
        answer = irc.run_probe(port, env, python_flags=["-S"])
        assert answer["ok"], answer
        assert answer["redis_file"].startswith(str(pylib.resolve()))
        change = irc.delta(before, irc.resp_counts(kiln.scrape()))
        assert irc.server_summary("kilnd", change) == {"gets": 1, "hits": 1, "misses": 0,
                                                        "sets": 1, "errors": 0}
        env = irc.mode_env(dict(os.environ), redis_server.port, tmp_path / "c",
                           irc.DEFAULT_CACHES, pylib)
        assert irc.run_probe(redis_server.port, env, python_flags=["-S"])["ok"]
        assert redis_server.counts()["keys"] == 1
        # Without the copy, a Python that lacks redis says what to run.
        no_copy = irc.mode_env(dict(os.environ), port, tmp_path / "c", irc.DEFAULT_CACHES, None)
        answer = irc.run_probe(port, no_copy, python_flags=["-S"])
        assert not answer["ok"]
        assert "tests/gpu/redis_py.sh" in answer["error"]
        # A server that is not there fails the probe instead of a silent miss.
        answer = irc.run_probe(irc.free_port(), env, python_flags=["-S"])
        assert not answer["ok"] and "ConnectionError" in answer["error"]


def test_the_runner_reports_every_mode_when_pytorch_is_missing(
        bundle: pathlib.Path, redis_copy: pathlib.Path, pylib: pathlib.Path,
        tmp_path: pathlib.Path) -> None:
    if subprocess.run([sys.executable, "-c", "import torch"], capture_output=True).returncode == 0:
        pytest.skip("PyTorch is installed here: the workers would train")
    out = tmp_path / "out"
    assert irc.main(["--bundle", str(bundle), "--out", str(out), "--redis", str(redis_copy),
                     "--pylib", str(pylib), "--timeout", "60"]) == 0
    report = json.loads((out / "inductor_remote_cache.json").read_text())
    assert report["probes"]["kilnd"]["ok"] and report["probes"]["redis"]["ok"]
    assert list(report["runs"]) == [m.name for m in irc.MODES]
    for name, run in report["runs"].items():
        # Each worker got as far as importing PyTorch, after the redis client.
        assert run["failed"] == "ModuleNotFoundError: No module named 'torch'", (name, run)
        assert run["redis_client"].startswith("4.3.4")
        assert report["checks"][name][0].startswith("failed: ModuleNotFoundError")
    assert report["runs"]["cold"]["server"]["sets"] == 0
    text = (out / "inductor_remote_cache.txt").read_text()
    assert "| warm_kilnd | kilnd | failed: ModuleNotFoundError" in text
    assert (out / "kilnd.log").exists() and (out / "redis.log").exists()
    assert (out / irc.RUNS_DIR / "gpt2_124m_fp32.warm_local.jsonl").exists()


def test_a_missing_redis_fails_only_the_redis_modes(bundle: pathlib.Path, pylib: pathlib.Path,
                                                    tmp_path: pathlib.Path) -> None:
    out = tmp_path / "out"
    assert irc.main(["--bundle", str(bundle), "--out", str(out), "--redis",
                     str(tmp_path / "none"), "--pylib", str(pylib), "--modes",
                     "cold_redis,warm_local", "--budget", "0"]) == 0
    runs = json.loads((out / "inductor_remote_cache.json").read_text())["runs"]
    assert runs["cold_redis"]["failed"].startswith("no Redis: no ")
    assert "redis_server.sh" in runs["cold_redis"]["failed"]
    assert runs["warm_local"]["failed"] == "needs cold's cache dir; run it first"


def test_a_server_that_stopped_answering_leaves_its_counts_out() -> None:
    def gone() -> dict:
        return irc.redis_counts(irc.resp_command(irc.free_port(), "INFO", "all"))

    assert irc.read_counts(gone) is None
    assert irc.read_counts(None) is None
    assert irc.read_counts(lambda: {"get.hit": 1.0}) == {"get.hit": 1.0}
