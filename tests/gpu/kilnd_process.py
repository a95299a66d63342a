"""kilnd started from a GPU bundle (deploy/gpu-bundle.sh), for the scripts in tests/gpu/.

    with KilnServer(bundle, out_dir) as server:      # kilnd on free loopback ports
        server.env                                    # the bundle's environment, KILN_SERVER set
        server.metrics()                              # compile counters from /metrics
        server.scrape()                               # every sample of /metrics
        server.kill()                                 # kilnd gone as a crash leaves it

kilnd's log goes to out_dir/kilnd.log; nvJitLink is found in PyTorch's CUDA wheels when the
machine has no CUDA toolkit.
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import re
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import Any, Optional, Sequence


def script_parser() -> argparse.ArgumentParser:
    """A parser with the --bundle and --out arguments every script here takes; a script
    with options of its own adds them to it."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--bundle", type=pathlib.Path, required=True)
    parser.add_argument("--out", type=_out_dir, required=True)
    return parser


def _out_dir(path: str) -> pathlib.Path:
    """--out: made when missing, so a script can write under a new folder of $OUT."""
    out = pathlib.Path(path)
    out.mkdir(parents=True, exist_ok=True)
    return out


def bundle_and_out() -> Any:
    """The --bundle and --out arguments, for a script that takes nothing else."""
    return script_parser().parse_args()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def bundle_env(bundle: pathlib.Path) -> dict:
    out = subprocess.run(["bash", "-c", f"source {bundle}/env.sh && env -0"], check=True,
                         capture_output=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def find_nvjitlink() -> str:
    for pkg in ("nvidia.nvjitlink", "nvidia.cu13", "nvidia"):
        try:
            spec = importlib.util.find_spec(pkg)
        except ModuleNotFoundError:
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            for p in pathlib.Path(root).rglob("libnvJitLink.so*"):
                return str(p)
    cuda = pathlib.Path("/usr/local/cuda")
    for p in cuda.rglob("libnvJitLink.so*") if cuda.exists() else []:
        return str(p)
    return ""


def metrics_text(port: int) -> str:
    return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()


def parse_samples(text: str) -> dict:
    """Every sample of a Prometheus text exposition, by its name and labels as written
    (`kiln_resp_commands_total{command="get",outcome="hit"}`); comments left out."""
    out = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        name, _, value = line.rpartition(" ")
        try:
            out[name] = float(value)
        except ValueError:
            continue
    return out


def read_metrics(port: int) -> dict:
    text = metrics_text(port)
    out = {}
    for line in text.splitlines():
        m = re.match(r'(kiln_compile_requests_total|kiln_compiles_total)\{(\w+)="([^"]+)"\} (\S+)',
                     line)
        if m:
            out[f"{m.group(1)}.{m.group(3)}"] = float(m.group(4))
    return out


class KilnServer:
    def __init__(self, bundle: pathlib.Path, out_dir: pathlib.Path,
                 data_dir: Optional[pathlib.Path] = None,
                 extra_args: Sequence[str] = ()) -> None:
        """`extra_args`: more kilnd flags (`--resp-listen 127.0.0.1:PORT`...)."""
        self.env = bundle_env(bundle.resolve())
        self.nvjitlink = find_nvjitlink()
        if self.nvjitlink:
            self.env["KILN_NVJITLINK"] = self.nvjitlink
        self.grpc_port, self.http_port = free_port(), free_port()
        self.address = f"127.0.0.1:{self.grpc_port}"
        self.env["KILN_SERVER"] = self.address
        self.data_dir = data_dir or pathlib.Path(tempfile.mkdtemp(prefix="kiln-data-"))
        self.log = out_dir / "kilnd.log"
        self.extra_args = list(extra_args)
        self.process: Optional[subprocess.Popen] = None

    def __enter__(self) -> "KilnServer":
        self.process = subprocess.Popen(
            ["kilnd", "--listen", self.address, "--metrics-listen",
             f"127.0.0.1:{self.http_port}", "--data-dir", str(self.data_dir),
             *self.extra_args],
            env=self.env, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        for _ in range(300):
            try:
                self.metrics()
                return self
            except OSError:
                if self.process.poll() is not None:
                    raise RuntimeError(f"kilnd exited with {self.process.returncode}; see "
                                       f"{self.log}")
                time.sleep(0.1)
        raise RuntimeError(f"kilnd did not answer on {self.http_port} within 30 s")

    def __exit__(self, *exc: Any) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=30)

    def kill(self) -> Optional[int]:
        """Stops kilnd as a crash or an OOM kill would (SIGKILL: no draining, connections
        dropped) and returns its exit status; None when it was never started."""
        if self.process is None:
            return None
        if self.process.poll() is None:
            self.process.kill()
        return self.process.wait(timeout=30)

    def metrics(self) -> dict:
        return read_metrics(self.http_port)

    def scrape(self) -> dict:
        return parse_samples(metrics_text(self.http_port))
