"""How the kiln backend is configured: torch.compile's `options={...}`, then the
environment, then defaults.

    torch.compile(model, backend="kiln", options={"server": "kiln:50051", "fallback": "error"})

| option | environment | default |
| --- | --- | --- |
| server | KILN_SERVER | 127.0.0.1:50051 (host:port, or a gRPC target such as unix:PATH; or a fleet: host:port,host:port,... routed as kiln.fleet says) |
| token_file | KILN_TOKEN_FILE | none: no bearer token |
| ca_cert | KILN_CA_CERT | none: plaintext; set, TLS with these PEM roots |
| client_cert, client_key | KILN_CLIENT_CERT, KILN_CLIENT_KEY | none; both for mutual TLS |
| job_id | KILN_JOB_ID | the launcher's run id: TORCHELASTIC_RUN_ID, else SLURM_JOB_ID |
| fallback | KILN_FALLBACK | eager (or inductor, error): how a graph runs when kilnd fails |
| cudagraphs | KILN_CUDAGRAPHS | false: capture CUDA graphs where the plan allows |
| require_cudagraph | KILN_REQUIRE_CUDAGRAPH | false: a plan that cannot be captured is an error |
| frame_cache | KILN_FRAME_CACHE | true: keep compiled frames in kilnd, so a fresh process skips AOTAutograd's tracing (single-rank processes; kiln.frame_cache) |
| deadline | KILN_DEADLINE | 300: seconds one compile request may take |
| precision | KILN_PRECISION | strict (or allow_tf32, fast_math) |
| target | KILN_TARGET | from the graph's device: cuda:sm_XY, or x86_64 |
| partitioner | KILN_PARTITIONER | min_cut (or default): how AOTAutograd splits the joint graph into forward and backward (kiln.backend) |
| layout_optimization | KILN_LAYOUT_OPTIMIZATION | true: the activations around convolutions are channels last (kiln.layouts) |
| backend_options | (none) | {}: named compiler switches, part of the compile key |

Booleans from the environment are 1/0, true/false, yes/no, on/off. Every bad value is a
SettingsError naming the option and where the value came from. Reading settings needs no
PyTorch.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Optional

from kiln.errors import SettingsError
from kiln.fleet import parse_fleet

FALLBACKS = ("eager", "inductor", "error")
PRECISIONS = ("strict", "allow_tf32", "fast_math")
PARTITIONERS = ("min_cut", "default")
DEFAULT_PARTITIONER = PARTITIONERS[0]
DEFAULT_SERVER = "127.0.0.1:50051"
DEFAULT_DEADLINE_SECONDS = 300.0
# Launchers' run ids, in the order they are tried when KILN_JOB_ID is not set. torchrun
# writes "none" when no --rdzv-id was given, which names no job.
LAUNCHER_JOB_IDS = ("TORCHELASTIC_RUN_ID", "SLURM_JOB_ID")
TARGET = re.compile(r"^(x86_64|cuda:sm_[0-9]+a?)$")
BACKEND_OPTION_NAME = re.compile(r"^[A-Za-z0-9_.\-]+$")
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


@dataclass(frozen=True)
class Settings:
    """One backend configuration, validated. `token` holds the token file's contents."""

    server: str = DEFAULT_SERVER
    token_file: Optional[str] = None
    token: str = field(default="", repr=False)
    ca_cert: Optional[str] = None
    client_cert: Optional[str] = None
    client_key: Optional[str] = None
    job_id: str = ""
    fallback: str = "eager"
    cudagraphs: bool = False
    require_cudagraph: bool = False
    frame_cache: bool = True
    deadline: float = DEFAULT_DEADLINE_SECONDS
    precision: str = "strict"
    target: Optional[str] = None
    partitioner: str = DEFAULT_PARTITIONER
    layout_optimization: bool = True
    backend_options: Mapping[str, str] = field(default_factory=dict, hash=False)

    @staticmethod
    def from_options(options: Optional[Mapping[str, Any]] = None,
                     environ: Optional[Mapping[str, str]] = None) -> "Settings":
        """The settings that `options` (torch.compile's) and `environ` (os.environ when not
        given) name; raises SettingsError for an unknown option or a bad value."""
        return _Reader(dict(options or {}), os.environ if environ is None else environ).read()

    @property
    def servers(self) -> list[str]:
        """The instances `server` lists (one, or a fleet; see kiln.fleet)."""
        return parse_fleet(self.server)

    def connection(self) -> tuple:
        """What identifies a channel to kilnd: settings that share it share one channel."""
        return (self.server, self.token, self.ca_cert, self.client_cert, self.client_key)


class _Reader:
    def __init__(self, options: dict, environ: Mapping[str, str]) -> None:
        self.options = options
        self.environ = environ
        known = {f.name for f in dataclasses.fields(Settings)} - {"token"}
        for name in options:
            if name not in known:
                raise SettingsError(str(name), "options",
                                    f"unknown option; known: {', '.join(sorted(known))}")

    def value(self, name: str, env: Optional[str]) -> tuple[Any, str]:
        """The raw value of `name` and where it came from; (None, "") when unset."""
        if name in self.options and self.options[name] is not None:
            return self.options[name], "options"
        if env is not None and self.environ.get(env, "") != "":
            return self.environ[env], env
        return None, ""

    def text(self, name: str, env: Optional[str], default: Optional[str] = None,
             check: Optional[Callable[[str], Optional[str]]] = None) -> Optional[str]:
        raw, source = self.value(name, env)
        if raw is None:
            return default
        if not isinstance(raw, str):
            raise SettingsError(name, source, f"expected a string, got {type(raw).__name__}")
        problem = check(raw) if check else None
        if problem:
            raise SettingsError(name, source, problem)
        return raw

    def choice(self, name: str, env: str, choices: tuple, default: str) -> str:
        def check(v: str) -> Optional[str]:
            return None if v in choices else f"'{v}' is not one of {', '.join(choices)}"

        return self.text(name, env, default, check) or default

    def flag(self, name: str, env: str, default: bool = False) -> bool:
        raw, source = self.value(name, env)
        if raw is None:
            return default
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in _TRUE + _FALSE:
            return raw.strip().lower() in _TRUE
        raise SettingsError(name, source, f"expected a boolean, got {raw!r}")

    def readable(self, name: str, env: str) -> Optional[str]:
        def check(path: str) -> Optional[str]:
            return None if os.access(path, os.R_OK) and os.path.isfile(path) else (
                f"cannot read file '{path}'")

        return self.text(name, env, None, check)

    def seconds(self, name: str, env: str, default: float) -> float:
        raw, source = self.value(name, env)
        if raw is None:
            return default
        try:
            if isinstance(raw, bool):
                raise ValueError
            value = float(raw)
        except (TypeError, ValueError):
            raise SettingsError(name, source, f"expected seconds, got {raw!r}") from None
        if not math.isfinite(value) or value <= 0:
            raise SettingsError(name, source, f"expected a positive number of seconds, got {raw!r}")
        return value

    def job_id(self) -> str:
        explicit = self.text("job_id", "KILN_JOB_ID")
        if explicit is not None:
            return explicit
        for env in LAUNCHER_JOB_IDS:
            value = self.environ.get(env, "")
            if value and value != "none":
                return value
        return ""

    def backend_options(self) -> dict[str, str]:
        raw = self.options.get("backend_options") or {}
        if not isinstance(raw, Mapping):
            raise SettingsError("backend_options", "options",
                                f"expected a dict of names to strings, got {type(raw).__name__}")
        out = {}
        for k, v in raw.items():
            if not isinstance(k, str) or not BACKEND_OPTION_NAME.match(k):
                raise SettingsError("backend_options", "options", f"bad option name {k!r}")
            if isinstance(v, bool):
                v = "true" if v else "false"
            if not isinstance(v, (str, int, float)):
                raise SettingsError("backend_options", "options",
                                    f"'{k}': expected a string or number, got {type(v).__name__}")
            out[k] = str(v)
        return out

    def read(self) -> Settings:
        server = self.text("server", "KILN_SERVER", DEFAULT_SERVER, _check_server)
        token_file = self.readable("token_file", "KILN_TOKEN_FILE")
        token = ""
        if token_file is not None:
            with open(token_file, encoding="utf-8") as f:
                token = f.read().strip()
            if not token or any(c.isspace() for c in token):
                raise SettingsError("token_file", self.value("token_file", "KILN_TOKEN_FILE")[1],
                                    f"'{token_file}' does not hold one token")
        ca_cert = self.readable("ca_cert", "KILN_CA_CERT")
        client_cert = self.readable("client_cert", "KILN_CLIENT_CERT")
        client_key = self.readable("client_key", "KILN_CLIENT_KEY")
        if (client_cert is None) != (client_key is None):
            missing = "client_key" if client_key is None else "client_cert"
            given = ("client_cert", "KILN_CLIENT_CERT") if client_key is None else (
                "client_key", "KILN_CLIENT_KEY")
            raise SettingsError(missing, self.value(*given)[1],
                                "mutual TLS needs both client_cert and client_key")
        if client_cert is not None and ca_cert is None:
            raise SettingsError("ca_cert", self.value("client_cert", "KILN_CLIENT_CERT")[1],
                                "a client certificate needs TLS: set ca_cert as well")
        return Settings(
            server=server or DEFAULT_SERVER,
            token_file=token_file,
            token=token,
            ca_cert=ca_cert,
            client_cert=client_cert,
            client_key=client_key,
            job_id=self.job_id(),
            fallback=self.choice("fallback", "KILN_FALLBACK", FALLBACKS, "eager"),
            cudagraphs=self.flag("cudagraphs", "KILN_CUDAGRAPHS"),
            require_cudagraph=self.flag("require_cudagraph", "KILN_REQUIRE_CUDAGRAPH"),
            frame_cache=self.flag("frame_cache", "KILN_FRAME_CACHE", default=True),
            deadline=self.seconds("deadline", "KILN_DEADLINE", DEFAULT_DEADLINE_SECONDS),
            precision=self.choice("precision", "KILN_PRECISION", PRECISIONS, "strict"),
            target=self.text("target", "KILN_TARGET", None, _check_target),
            partitioner=self.choice("partitioner", "KILN_PARTITIONER", PARTITIONERS,
                                    DEFAULT_PARTITIONER),
            layout_optimization=self.flag("layout_optimization", "KILN_LAYOUT_OPTIMIZATION",
                                          default=True),
            backend_options=self.backend_options(),
        )


def _check_server(servers: str) -> Optional[str]:
    try:
        addresses = parse_fleet(servers)
    except ValueError as e:
        return str(e)
    for address in addresses:
        problem = _check_address(address)
        if problem:
            return problem
    return None


def _check_address(address: str) -> Optional[str]:
    # gRPC targets with a scheme (unix:PATH, dns:///host:port, ...) are passed through.
    if re.match(r"^(unix|unix-abstract|dns|ipv4|ipv6|vsock):.", address):
        return None
    host, colon, port = address.rpartition(":")
    if not colon or not host:
        return f"'{address}' is not host:port"
    if not port.isdigit() or not 0 < int(port) < 65536:
        return f"'{address}' has no valid port"
    return None


def _check_target(target: str) -> Optional[str]:
    return None if TARGET.match(target) else f"'{target}' is not x86_64 or cuda:sm_NN"
