"""Inductor warm-starting from kilnd's RESP front, against warm from a real Redis and warm
from the local disk cache, in one run on a GPU machine.

Prepare here (the bundle and .gpu/ travel with the tree):

    cmake --build --preset release --target kilnd kiln_proto_python kiln_runtime_c
    deploy/gpu-bundle.sh .bundle
    tests/gpu/redis_server.sh .gpu/redis     # redis-server, with the libraries Ubuntu lacks
    tests/gpu/redis_py.sh .gpu/pylib         # Debian's redis client, for a Python without one

and run from the repository root on the GPU machine (about 4 minutes on one H100):

    python3 tests/gpu/inductor_remote_cache.py --bundle .bundle --out $OUT \
        [--redis .gpu/redis] [--pylib .gpu/pylib] [--config gpt2_124m_fp32] [--steps 3]

Each mode trains one configuration of step_time.py (GPT-2 124M by default) for --steps AdamW
steps with torch.compile (Inductor) in a fresh process, from the same seed, its local caches
in a fresh TORCHINDUCTOR_CACHE_DIR (and TRITON_CACHE_DIR under it) unless said otherwise:
  cold        remote caches on kilnd's RESP front, kilnd empty: compiles, fills kilnd
  warm_kilnd  remote caches on kilnd, now full
  warm_local  the local cache dir the cold run filled; the remote unreachable
  cold_redis  remote caches on redis-server, empty: compiles, fills Redis
  warm_redis  remote caches on redis-server, now full
The remote caches are Inductor's FX graph, AOTAutograd and autotune caches (--caches), whose
Redis backend (torch/_inductor/remote_cache.py) reads TORCHINDUCTOR_REDIS_HOST/PORT. Every
mode sets the same cache flags: AOTAutograd's cache key covers functorch's config, which
holds the remote flag, so entries written with remote caches on miss in a process with them
off. warm_local therefore keeps the flags and is given a port where nothing listens: a local
hit never asks the remote, and its remote counters (zero) show it did not.

Each process records its first step's time (Dynamo, AOTAutograd, cache lookups, compiles
and loading included; the step runs the forward, the backward and the optimizer's step), its
later steps', its losses, PyTorch's cache counters (torch._dynamo.utils.counters: FX graph
and AOTAutograd hits and misses; torch._inductor.remote_cache.cache_stats: remote gets that
hit or missed, puts) and the servers' own counts over it (kilnd: kiln_resp_commands_total;
Redis: INFO commandstats and keyspace hits). Before any compile, a probe process sets and
gets a key on each server through the redis client the workers will import, so a missing
client or a server that does not answer fails in seconds, not after a cold compile (Inductor
itself treats an unreachable Redis as a miss, silently).

The report puts warm_kilnd's first step beside warm_redis's, warm_local's and cold's, and
checks that each warm run was one: no FX graph or AOTAutograd miss, remote hits from its
server (none for warm_local), the same losses as its cold run. Writes
OUT/inductor_remote_cache.json after each mode, OUT/inductor_remote_cache.txt at the end,
each process's events under OUT/inductor_remote_cache_runs/, kilnd.log and redis.log. A
mode that fails is a row that says why; the runs stop before --budget seconds.
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any, BinaryIO, Callable, Optional, Sequence

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from kilnd_process import KilnServer, free_port, script_parser  # noqa: E402
from worker_process import logged, run_worker  # noqa: E402

STEPS = 3
TIMEOUT_S = 300.0
BUDGET_S = 540.0
MIN_MODE_S = 30.0
PROBE_TIMEOUT_S = 60.0
OUTPUT_TAIL = 3000
RUNS_DIR = "inductor_remote_cache_runs"
HOST = "127.0.0.1"
# The directory of a copied redis client (redis_py.sh), for a Python that has none.
PYLIB_ENV = "KILN_BENCH_PYLIB"
# Inductor's remote caches by the name --caches takes, and the variable that turns each on.
CACHE_ENV = {
    "fx_graph": "TORCHINDUCTOR_FX_GRAPH_REMOTE_CACHE",
    "autograd": "TORCHINDUCTOR_AUTOGRAD_REMOTE_CACHE",
    "autotune": "TORCHINDUCTOR_AUTOTUNE_REMOTE_CACHE",
    "bundled_autotune": "TORCHINDUCTOR_BUNDLED_AUTOTUNE_REMOTE_CACHE",
}
DEFAULT_CACHES = ("fx_graph", "autograd", "autotune")
# Inherited settings that would change what a mode measures: dropped from every mode's env.
CLEARED_ENV = (*CACHE_ENV.values(), "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR",
               "TORCHINDUCTOR_FORCE_DISABLE_CACHES", "TORCHINDUCTOR_FX_GRAPH_CACHE",
               "TORCHINDUCTOR_AUTOGRAD_CACHE", "TORCHINDUCTOR_REDIS_HOST",
               "TORCHINDUCTOR_REDIS_PORT", "TORCHINDUCTOR_REDIS_URL",
               "TORCHINDUCTOR_REDIS_EXPIRE")


@dataclass(frozen=True)
class Mode:
    name: str
    remote: str  # "kilnd", "redis", or "none" (an address where nothing listens)
    cache_dir_of: str = ""  # the mode whose local cache dir this one reuses; "": a fresh one
    cold_of: str = ""  # for a warm mode, the cold run whose entries it reads


MODES = (
    Mode("cold", "kilnd"),
    Mode("warm_kilnd", "kilnd", cold_of="cold"),
    Mode("warm_local", "none", cache_dir_of="cold", cold_of="cold"),
    Mode("cold_redis", "redis"),
    Mode("warm_redis", "redis", cold_of="cold_redis"),
)
MODE_BY_NAME = {m.name: m for m in MODES}


# --- RESP, for the probes and Redis's counters (no redis package needed) ----------------------


class RespError(Exception):
    """An error reply (`-ERR ...`)."""


def read_reply(stream: BinaryIO) -> Any:
    """One RESP2 reply: str (simple), int, bytes or None (bulk), list (array); an error
    reply raises RespError."""
    line = stream.readline()
    if not line.endswith(b"\r\n"):
        raise ConnectionError("connection closed in the middle of a reply")
    kind, body = line[:1], line[1:-2]
    if kind == b"+":
        return body.decode()
    if kind == b"-":
        raise RespError(body.decode(errors="replace"))
    if kind == b":":
        return int(body)
    if kind == b"$":
        size = int(body)
        if size < 0:
            return None
        data = stream.read(size + 2)
        if len(data) != size + 2:
            raise ConnectionError("connection closed in the middle of a bulk string")
        return data[:-2]
    if kind == b"*":
        count = int(body)
        return None if count < 0 else [read_reply(stream) for _ in range(count)]
    raise ValueError(f"not a RESP reply: {line[:40]!r}")


def encode_command(*args: Any) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else str(arg).encode()
        out += [b"$%d\r\n" % len(data), data, b"\r\n"]
    return b"".join(out)


def resp_command(port: int, *args: Any, timeout: float = 10.0) -> Any:
    """Sends one command on a new connection and returns its reply."""
    with socket.create_connection((HOST, port), timeout=timeout) as sock:
        sock.sendall(encode_command(*args))
        return read_reply(sock.makefile("rb"))


def wait_for_ping(port: int, process: subprocess.Popen, what: str, log: pathlib.Path,
                  seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if resp_command(port, "PING", timeout=2.0) == "PONG":
                return
        except (OSError, RespError):
            pass
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited with {process.returncode}; see {log}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer PING on port {port} within {seconds:.0f} s")
        time.sleep(0.1)


# --- the servers ----------------------------------------------------------------------------


def missing_libraries(binary: pathlib.Path, env: dict) -> list[str]:
    """The libraries `ldd` cannot find for `binary` under `env` (its LD_LIBRARY_PATH); none
    when the machine has no ldd (starting the server then tells)."""
    try:
        out = subprocess.run(["ldd", str(binary)], env=env, capture_output=True,
                             text=True).stdout
    except FileNotFoundError:
        return []
    return [line.split()[0] for line in out.splitlines() if "not found" in line]


class RedisServer:
    """redis-server as redis_server.sh copied it (DIR/bin, DIR/lib), on a free loopback port,
    in memory only; its log in out_dir/redis.log."""

    def __init__(self, directory: pathlib.Path, out_dir: pathlib.Path) -> None:
        self.binary = directory.resolve() / "bin" / "redis-server"
        if not self.binary.exists():
            raise RuntimeError(f"no {self.binary}: run tests/gpu/redis_server.sh {directory} "
                               "on the build machine and carry it")
        self.env = dict(os.environ)
        lib = str(directory.resolve() / "lib")
        self.env["LD_LIBRARY_PATH"] = lib + (":" + self.env["LD_LIBRARY_PATH"]
                                             if self.env.get("LD_LIBRARY_PATH") else "")
        missing = missing_libraries(self.binary, self.env)
        if missing:
            raise RuntimeError(f"{self.binary} needs {', '.join(missing)}, missing here: run "
                               f"tests/gpu/redis_server.sh {directory} --all")
        self.port = free_port()
        self.log = out_dir / "redis.log"
        self.data_dir = pathlib.Path(tempfile.mkdtemp(prefix="redis-data-"))
        self.process: Optional[subprocess.Popen] = None

    def __enter__(self) -> "RedisServer":
        self.process = subprocess.Popen(
            [str(self.binary), "--port", str(self.port), "--bind", HOST, "--save", "",
             "--appendonly", "no", "--dir", str(self.data_dir), "--logfile", str(self.log)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        try:
            wait_for_ping(self.port, self.process, "redis-server", self.log)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=30)
        shutil.rmtree(self.data_dir, ignore_errors=True)

    def info(self) -> str:
        reply = resp_command(self.port, "INFO", "all")
        return reply.decode() if isinstance(reply, bytes) else str(reply)

    def counts(self) -> dict:
        return redis_counts(self.info())


def kilnd_with_resp(bundle: pathlib.Path, out: pathlib.Path) -> tuple[KilnServer, int]:
    port = free_port()
    return KilnServer(bundle, out, extra_args=["--resp-listen", f"{HOST}:{port}"]), port


# --- reading the servers' counters ----------------------------------------------------------


def resp_counts(samples: dict) -> dict:
    """kilnd's kiln_resp_commands_total as {"get.hit": n, "set.ok": n, ...}."""
    prefix = "kiln_resp_commands_total{"
    out = {}
    for name, value in samples.items():
        if not name.startswith(prefix):
            continue
        labels = dict(part.split("=", 1) for part in name[len(prefix):-1].split(","))
        out[f"{labels['command'].strip(chr(34))}.{labels['outcome'].strip(chr(34))}"] = value
    return out


def redis_counts(info: str) -> dict:
    """From Redis's INFO: calls of each command ("get.calls"; not INFO, which is this
    script's own), keyspace hits and misses, error replies and the keys of db0."""
    out = {}
    for line in info.splitlines():
        key, sep, value = line.strip().partition(":")
        if not sep:
            continue
        if key.startswith("cmdstat_") and key != "cmdstat_info":
            fields = dict(f.split("=", 1) for f in value.split(",") if "=" in f)
            out[f"{key[len('cmdstat_'):]}.calls"] = float(fields.get("calls", 0))
        elif key in ("keyspace_hits", "keyspace_misses", "total_error_replies"):
            out[key] = float(value)
        elif key == "db0":
            fields = dict(f.split("=", 1) for f in value.split(",") if "=" in f)
            out["keys"] = float(fields.get("keys", 0))
    return out


def delta(before: dict, after: dict) -> dict:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0)}


def server_summary(kind: str, change: dict) -> dict:
    """GETs, their hits and misses, SETs and errors a server answered over one process."""
    if kind == "kilnd":
        return {"gets": sum(v for k, v in change.items() if k.startswith("get.")),
                "hits": change.get("get.hit", 0.0), "misses": change.get("get.miss", 0.0),
                "sets": change.get("set.ok", 0.0),
                "errors": sum(v for k, v in change.items()
                              if k.split(".")[1] in ("error", "denied", "unauthenticated"))}
    return {"gets": change.get("get.calls", 0.0), "hits": change.get("keyspace_hits", 0.0),
            "misses": change.get("keyspace_misses", 0.0), "sets": change.get("set.calls", 0.0),
            "errors": change.get("total_error_replies", 0.0)}


# --- each mode's environment ----------------------------------------------------------------


def mode_env(base: dict, port: int, cache_dir: pathlib.Path, caches: Sequence[str],
             pylib: Optional[pathlib.Path]) -> dict:
    """`base` with Inductor's local caches in `cache_dir`, the remote caches named in `caches`
    on (the others off) and pointed at HOST:port, and the copied redis client's directory."""
    unknown = [c for c in caches if c not in CACHE_ENV]
    if unknown:
        raise ValueError(f"unknown caches {unknown}; known: {', '.join(CACHE_ENV)}")
    env = {k: v for k, v in base.items() if k not in CLEARED_ENV}
    for name, var in CACHE_ENV.items():
        env[var] = "1" if name in caches else "0"
    env.update({"TORCHINDUCTOR_FX_GRAPH_CACHE": "1", "TORCHINDUCTOR_AUTOGRAD_CACHE": "1",
                "TORCHINDUCTOR_CACHE_DIR": str(cache_dir),
                "TRITON_CACHE_DIR": str(cache_dir / "triton"),
                "TORCHINDUCTOR_REDIS_HOST": HOST, "TORCHINDUCTOR_REDIS_PORT": str(port)})
    env.pop(PYLIB_ENV, None)
    if pylib is not None:
        env[PYLIB_ENV] = str(pylib.resolve())
    return env


# --- the worker processes (PyTorch only in train) -------------------------------------------


def import_redis() -> Any:
    """The redis client: the machine's own, else the copy in $KILN_BENCH_PYLIB, appended to
    sys.path so that packages the machine has (packaging...) stay first. PyTorch's remote
    cache module finds it imported."""
    try:
        import redis
    except ImportError:
        pylib = os.environ.get(PYLIB_ENV)
        if not pylib:
            raise ImportError("no module named redis here and no --pylib: run "
                              "tests/gpu/redis_py.sh .gpu/pylib on the build machine") from None
        sys.path.append(pylib)
        try:
            import redis
        except ImportError as e:
            raise ImportError(f"no module named redis, not even in {pylib}: {e}") from None
    return redis


def probe(port: int) -> dict:
    """What Inductor's Redis backend does, once: PING, SET a key, GET it back."""
    redis = import_redis()
    client = redis.Redis(host=os.environ.get("TORCHINDUCTOR_REDIS_HOST", HOST), port=port)
    client.ping()
    key = f"pt2:kiln-bench-probe::{uuid.uuid4().hex}:c1"
    value = json.dumps({"probe": True}).encode()
    client.set(key, value)
    got = client.get(key)
    if got != value:
        raise RuntimeError(f"GET {key} answered {got!r}, not the {len(value)} bytes SET")
    return {"redis_version": getattr(redis, "__version__", "?"), "redis_file": redis.__file__}


def remote_cache_stats() -> dict:
    """torch._inductor.remote_cache.cache_stats: per remote cache, gets that hit or missed,
    puts and exceptions."""
    try:
        from torch._inductor import remote_cache

        stats = remote_cache.cache_stats._stats
    except (ImportError, AttributeError):
        return {}
    return {name: {f: getattr(stat, f, 0) for f in ("hit", "miss", "put", "exception")}
            for name, stat in stats.items()}


def cache_config() -> dict:
    """The cache settings in effect in this process, as PyTorch read them."""
    import torch._functorch.config as functorch
    import torch._inductor.config as inductor

    return {name: getattr(module, name, None) for module, names in (
        (inductor, ("fx_graph_cache", "fx_graph_remote_cache", "autotune_remote_cache",
                    "bundled_autotune_remote_cache", "bundle_triton_into_fx_graph_cache")),
        (functorch, ("enable_autograd_cache", "enable_remote_autograd_cache")))
            for name in names}


def train(config: str, steps: int, write_event: Callable[..., None]) -> None:
    redis = import_redis()
    write_event(event="redis", version=getattr(redis, "__version__", "?"), file=redis.__file__)
    import torch
    from torch._dynamo.utils import counters

    import capture_corpus as corpus
    from step_time import prepared
    from train_models import backward_step

    bench, dtype, model, batches = prepared(config, steps)
    opt = torch.optim.AdamW(model.parameters(), lr=bench.lr)
    run = torch.compile(model)
    for step, batch in enumerate(batches, 1):
        torch.cuda.synchronize()
        start = time.perf_counter()
        loss = backward_step(run, batch, opt, corpus.autocast(dtype))
        opt.step()
        value = loss.item()
        torch.cuda.synchronize()
        write_event(event="step", step=step, loss=value, seconds=time.perf_counter() - start)
    write_event(event="caches", inductor=dict(counters["inductor"]),
                aot_autograd=dict(counters["aot_autograd"]), remote=remote_cache_stats(),
                config=cache_config())
    write_event(event="done", device=torch.cuda.get_device_name(), torch=torch.__version__)


def worker(config: str, steps: int, events_path: pathlib.Path) -> int:
    return logged(events_path, lambda write_event: train(config, steps, write_event), OUTPUT_TAIL)


# --- reading runs (no PyTorch) --------------------------------------------------------------


def summarize(events: list[dict], returncode: Optional[int], output: str,
              timed_out_after: Optional[float]) -> dict:
    """One process's figures: first and median later step (seconds), losses, PyTorch's cache
    counters; or why it did not finish."""
    steps = [e for e in events if e.get("event") == "step"]
    run: dict = {"steps": len(steps), "losses": [e["loss"] for e in steps]}
    if steps:
        run["first_s"] = steps[0]["seconds"]
    if len(steps) > 1:
        run["steady_s"] = statistics.median(e["seconds"] for e in steps[1:])
    caches = next((e for e in events if e.get("event") == "caches"), None)
    if caches:
        inductor, aot = caches.get("inductor", {}), caches.get("aot_autograd", {})
        remote = caches.get("remote", {})
        classes = [v for k, v in remote.items() if not k.startswith("backend:")]
        run["pytorch"] = {
            "fx_hit": inductor.get("fxgraph_cache_hit", 0),
            "fx_miss": inductor.get("fxgraph_cache_miss", 0),
            "fx_bypass": inductor.get("fxgraph_cache_bypass", 0),
            "aot_hit": aot.get("autograd_cache_hit", 0),
            "aot_miss": aot.get("autograd_cache_miss", 0),
            "aot_bypass": aot.get("autograd_cache_bypass", 0),
            "remote_hit": sum(v.get("hit", 0) for v in classes),
            "remote_miss": sum(v.get("miss", 0) for v in classes),
            "remote_put": sum(v.get("put", 0) for v in classes),
            "remote_exception": sum(v.get("exception", 0) for v in classes)}
        run["remote_caches"] = remote
        run["config"] = caches.get("config", {})
    redis = next((e for e in events if e.get("event") == "redis"), None)
    if redis:
        run["redis_client"] = f"{redis.get('version')} ({redis.get('file')})"
    done = next((e for e in events if e.get("event") == "done"), None)
    error = next((e for e in events if e.get("event") == "error"), None)
    if done:
        run["device"], run["torch"] = done.get("device"), done.get("torch")
    else:
        run["failed"] = (error["error"] if error else
                         f"timed out after {timed_out_after:.0f} s" if timed_out_after else
                         f"exited with {returncode}")
        run["output_tail"] = output[-OUTPUT_TAIL:]
    return run


def loss_difference(run: dict, reference: Optional[dict]) -> Optional[float]:
    """The largest difference of a run's losses from its cold run's, relative to the cold
    run's first: a warm start runs the same kernels, so 0."""
    if not reference or not reference.get("losses") or not run.get("losses"):
        return None
    ref = reference["losses"]
    return max(abs(a - b) for a, b in zip(run["losses"], ref)) / abs(ref[0])


def warm_problems(mode: Mode, run: dict, cold: Optional[dict]) -> list[str]:
    """Why a warm run was not a warm start from where it should have been; empty when it
    was."""
    if run.get("failed"):
        return [f"failed: {run['failed'][:200]}"]
    out = []
    pt = run.get("pytorch")
    if not pt:
        return ["no cache counters"]
    if pt["fx_miss"] or pt["aot_miss"]:
        out.append(f"{pt['fx_miss']} FX graph and {pt['aot_miss']} AOTAutograd misses")
    if not pt["fx_hit"] and not pt["aot_hit"]:
        out.append("no FX graph or AOTAutograd hit")
    server = run.get("server") or {}
    if mode.remote == "none":
        if pt["remote_hit"] or pt["remote_miss"] or pt["remote_exception"]:
            out.append(f"asked the remote {pt['remote_hit'] + pt['remote_miss']} times")
    else:
        if not pt["remote_hit"]:
            out.append("no remote hit")
        if pt["remote_miss"]:
            out.append(f"{pt['remote_miss']} remote misses")
        if not server.get("hits"):
            out.append(f"{mode.remote} answered no GET with a value")
    if server.get("errors"):
        out.append(f"{mode.remote} answered {server['errors']:.0f} errors")
    diff = loss_difference(run, cold)
    if diff:
        out.append(f"losses differ from {mode.cold_of}'s by {diff:.1e}")
    return out


def cold_problems(mode: Mode, run: dict) -> list[str]:
    """Why a cold run did not fill its server."""
    if run.get("failed"):
        return [f"failed: {run['failed'][:200]}"]
    server = run.get("server") or {}
    out = []
    if not server.get("sets"):
        out.append(f"nothing SET on {mode.remote}")
    if server.get("errors"):
        out.append(f"{mode.remote} answered {server['errors']:.0f} errors")
    return out


def ratio(a: Optional[dict], b: Optional[dict], key: str = "first_s") -> Optional[float]:
    if not a or not b or a.get(key) is None or not b.get(key):
        return None
    return a[key] / b[key]


RATIOS = (
    ("warm_kilnd first / warm_redis first", "warm_kilnd", "warm_redis"),
    ("warm_kilnd first / warm_local first", "warm_kilnd", "warm_local"),
    ("warm_kilnd first / cold first", "warm_kilnd", "cold"),
    ("warm_redis first / cold_redis first", "warm_redis", "cold_redis"),
    ("cold (into kilnd) first / cold_redis first", "cold", "cold_redis"),
)


def ratios(runs: dict) -> dict:
    return {label: ratio(runs.get(a), runs.get(b)) for label, a, b in RATIOS
            if a in runs and b in runs}


def _num(value: Optional[float], spec: str) -> str:
    return "-" if value is None else format(value, spec)


def table(config: str, runs: dict, ratio_values: dict, checks: dict) -> str:
    lines = [f"## {config}",
             "| mode | remote | first step s | later step ms | FX hit/miss | AOT hit/miss | "
             "remote hit/miss/put | server GET hit/miss, SET | loss vs cold |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name, run in runs.items():
        mode = MODE_BY_NAME[name]
        if run.get("failed"):
            lines.append(f"| {name} | {mode.remote} | failed: {run['failed'][:120]} "
                         "| | | | | | |")
            continue
        pt = run.get("pytorch") or {}
        server = run.get("server")
        steady = run.get("steady_s")
        served = (f"{server['hits']:.0f}/{server['misses']:.0f}, {server['sets']:.0f}"
                  if server else "")
        lines.append(
            f"| {name} | {mode.remote} | {_num(run.get('first_s'), '.2f')} | "
            f"{_num(steady and steady * 1e3, '.1f')} | "
            f"{pt.get('fx_hit', '-')}/{pt.get('fx_miss', '-')} | "
            f"{pt.get('aot_hit', '-')}/{pt.get('aot_miss', '-')} | "
            f"{pt.get('remote_hit', '-')}/{pt.get('remote_miss', '-')}/"
            f"{pt.get('remote_put', '-')} | {served} | "
            f"{_num(loss_difference(run, runs.get(mode.cold_of)), '.1e')} |")
    lines.append("")
    lines += [f"- {label}: {_num(value, '.2f')}" for label, value in ratio_values.items()]
    lines += [f"- {name}: {'ok' if not problems else '; '.join(problems)}"
              for name, problems in checks.items()]
    return "\n".join(lines) + "\n"


def dir_bytes(path: pathlib.Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


# --- the runner -----------------------------------------------------------------------------


def run_probe(port: int, env: dict, python_flags: Sequence[str] = ()) -> dict:
    """probe() in a fresh process with a mode's environment: {"ok": True, "redis_version"...}
    or {"ok": False, "error": ...}."""
    result = run_worker([*python_flags, str(pathlib.Path(__file__).resolve()), "--probe",
                         str(port)], env, PROBE_TIMEOUT_S)
    last = result.output.strip().splitlines()[-1:] or [""]
    try:
        answer = json.loads(last[0])
    except json.JSONDecodeError:
        answer = {"ok": False, "error": (f"timed out after {PROBE_TIMEOUT_S:.0f} s"
                                         if result.timed_out_after else
                                         f"exited with {result.returncode}"),
                  "output_tail": result.output[-OUTPUT_TAIL:]}
    return answer


def run_mode(config: str, mode: Mode, steps: int, timeout: float, env: dict,
             counts: Optional[Callable[[], dict]], out: pathlib.Path) -> dict:
    events_path = out / RUNS_DIR / f"{config}.{mode.name}.jsonl"
    events_path.parent.mkdir(parents=True, exist_ok=True)
    events_path.write_text("")
    before = read_counts(counts)
    result = run_worker([str(pathlib.Path(__file__).resolve()), "--worker", config,
                         str(steps), str(events_path)], env, timeout)
    from train_models import read_events

    run = summarize(read_events(events_path), result.returncode, result.output,
                    result.timed_out_after)
    run["process_s"] = result.seconds
    after = read_counts(counts)
    if before is not None and after is not None:
        change = delta(before, after)
        run["server_counts"] = change
        run["server"] = server_summary(mode.remote, change)
    elif counts:
        run["server_error"] = f"{mode.remote}'s counters could not be read"
    return run


def read_counts(counts: Optional[Callable[[], dict]]) -> Optional[dict]:
    """A server's counters; None when there is no server or it does not answer."""
    if counts is None:
        return None
    try:
        return counts()
    except (OSError, RespError, ValueError):
        return None


def failed(reason: str) -> dict:
    return {"failed": reason, "steps": 0, "losses": []}


def main(argv: Optional[list[str]] = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--worker"]:  # the runner's own call: CONFIG STEPS EVENTS_PATH
        config, steps, events_path = argv[1:]
        return worker(config, int(steps), pathlib.Path(events_path))
    if argv[:1] == ["--probe"]:  # PORT; prints one JSON line
        try:
            print(json.dumps({"ok": True, **probe(int(argv[1]))}))
            return 0
        except Exception as e:
            print(json.dumps({"ok": False, "error": f"{type(e).__name__}: {e}"[:2000]}))
            return 1
    from step_time import CONFIGS

    parser = script_parser()
    parser.add_argument("--config", default="gpt2_124m_fp32",
                        help=f"one of {', '.join(CONFIGS)}")
    parser.add_argument("--redis", type=pathlib.Path, default=pathlib.Path(".gpu/redis"),
                        help="redis_server.sh's copy of redis-server")
    parser.add_argument("--pylib", type=pathlib.Path, default=pathlib.Path(".gpu/pylib"),
                        help="redis_py.sh's copy of the redis client, used where Python "
                             "has none (ignored when missing)")
    parser.add_argument("--caches", default=",".join(DEFAULT_CACHES),
                        help=f"remote caches to turn on, of {', '.join(CACHE_ENV)}")
    parser.add_argument("--modes", default=",".join(m.name for m in MODES))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--timeout", type=float, default=TIMEOUT_S, help="per mode, seconds")
    parser.add_argument("--budget", type=float, default=BUDGET_S,
                        help="seconds for the whole run; a mode that cannot start with "
                             f"{MIN_MODE_S:.0f} s left is skipped")
    args = parser.parse_args(argv)
    if args.config not in CONFIGS:
        parser.error(f"unknown configuration {args.config}; known: {', '.join(CONFIGS)}")
    caches = [c for c in args.caches.split(",") if c]
    if [c for c in caches if c not in CACHE_ENV]:
        parser.error(f"unknown caches in {args.caches}; known: {', '.join(CACHE_ENV)}")
    names = [m for m in args.modes.split(",") if m]
    if [m for m in names if m not in MODE_BY_NAME]:
        parser.error(f"unknown modes in {args.modes}; known: {', '.join(MODE_BY_NAME)}")
    if args.steps < 1:
        parser.error("--steps must be at least 1")
    pylib = args.pylib if args.pylib.is_dir() else None
    started = time.monotonic()
    report: dict = {"config": args.config, "steps": args.steps, "caches": caches,
                    "pylib": str(pylib) if pylib else None, "probes": {}, "runs": {}}
    out_json = args.out / "inductor_remote_cache.json"
    work = pathlib.Path(tempfile.mkdtemp(prefix="inductor-remote-"))
    cache_dirs: dict[str, pathlib.Path] = {}
    runs: dict = report["runs"]
    kiln, resp_port = kilnd_with_resp(args.bundle, args.out)
    with kiln:
        wait_for_ping(resp_port, kiln.process, "kilnd's RESP front", kiln.log)
        base = dict(kiln.env)
        redis_server: Optional[RedisServer] = None
        redis_error = ""
        if any(MODE_BY_NAME[n].remote == "redis" for n in names):
            try:
                redis_server = RedisServer(args.redis, args.out).__enter__()
            except (RuntimeError, OSError) as e:
                redis_error = str(e)
        try:
            servers = {"kilnd": (resp_port, lambda: resp_counts(kiln.scrape()))}
            if redis_server is not None:
                servers["redis"] = (redis_server.port, redis_server.counts)
            probe_dir = work / "probe"
            for kind, (port, _) in servers.items():
                report["probes"][kind] = run_probe(port, mode_env(base, port, probe_dir,
                                                                  caches, pylib))
                print(f"probe {kind}: {json.dumps(report['probes'][kind])[:400]}", flush=True)
            for name in names:
                mode = MODE_BY_NAME[name]
                left = args.budget - (time.monotonic() - started)
                probe_answer = report["probes"].get(mode.remote, {"ok": True})
                if mode.remote == "redis" and redis_server is None:
                    runs[name] = failed(f"no Redis: {redis_error}")
                elif not probe_answer.get("ok"):
                    runs[name] = failed(f"{mode.remote} probe: {probe_answer.get('error')}")
                elif mode.cache_dir_of and mode.cache_dir_of not in cache_dirs:
                    runs[name] = failed(f"needs {mode.cache_dir_of}'s cache dir; run it first")
                elif left < MIN_MODE_S:
                    runs[name] = failed(f"skipped: {left:.0f} s of --budget left")
                else:
                    cache_dir = (cache_dirs[mode.cache_dir_of] if mode.cache_dir_of else
                                 work / name)
                    cache_dirs[name] = cache_dir
                    port, counts = servers.get(mode.remote, (free_port(), None))
                    env = mode_env(base, port, cache_dir, caches, pylib)
                    runs[name] = run_mode(args.config, mode, args.steps,
                                          min(args.timeout, left - 5), env, counts, args.out)
                    runs[name]["local_cache_bytes"] = dir_bytes(cache_dir)
                brief = {k: v for k, v in runs[name].items()
                         if k not in ("losses", "remote_caches", "output_tail", "config")}
                print(f"{name}: {json.dumps(brief)[:600]}", flush=True)
                out_json.write_text(json.dumps(report, indent=1))
        finally:
            if redis_server is not None:
                redis_server.__exit__(None, None, None)
    shutil.rmtree(work, ignore_errors=True)
    checks = {}
    for name, run in runs.items():
        mode = MODE_BY_NAME[name]
        checks[name] = (warm_problems(mode, run, runs.get(mode.cold_of)) if mode.cold_of
                        else cold_problems(mode, run))
    report["ratios"] = ratios(runs)
    report["checks"] = checks
    out_json.write_text(json.dumps(report, indent=1))
    text = table(args.config, runs, report["ratios"], checks)
    (args.out / "inductor_remote_cache.txt").write_text(text)
    print(text, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
