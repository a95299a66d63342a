"""What the Python package's tests share: the corpus, and a kilnd started on loopback."""

from __future__ import annotations

import gzip
import json
import os
import pathlib
import subprocess
import threading
from typing import Iterator

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[3]
GRAPHS = pathlib.Path(os.environ.get("KILN_GRAPHS_DIR", ROOT / "tests/data/graphs"))
BINARY_DIR = pathlib.Path(os.environ.get("KILN_BINARY_DIR", ROOT / "build/release")).resolve()


def read_capture(name: str) -> dict:
    """A corpus graph file as the capture dict kiln.capture writes."""
    data = (GRAPHS / name).read_bytes()
    return json.loads(gzip.decompress(data) if name.endswith(".gz") else data)


class Kilnd:
    """A kilnd child process on 127.0.0.1 with its own data folder; its JSON log lines are
    kept in `logs`."""

    def __init__(self, data_dir: pathlib.Path, *flags: str, listen: str = "127.0.0.1:0",
                 metrics_listen: str = "") -> None:
        self.proc = subprocess.Popen(
            [str(BINARY_DIR / "server" / "kilnd"), "--listen", listen, "--metrics-listen",
             metrics_listen, "--data-dir", str(data_dir), *flags],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            text=True)
        self.logs: list[dict] = []
        self._lock = threading.Lock()
        self.port = 0
        for line in self.proc.stderr:
            self._keep(line)
            if '"event":"serving"' in line:
                self.port = json.loads(line)["grpc_port"]
                self.http_port = json.loads(line)["http_port"]
                break
        if not self.port:
            self.proc.wait()
            raise RuntimeError(f"kilnd did not start: {self.logs}")
        # The rest of stderr is drained so kilnd never blocks on a full pipe.
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def _keep(self, line: str) -> None:
        try:
            record = json.loads(line)
        except ValueError:
            return
        with self._lock:
            self.logs.append(record)

    def _drain(self) -> None:
        for line in self.proc.stderr:
            self._keep(line)

    def events(self, name: str) -> list[dict]:
        with self._lock:
            return [r for r in self.logs if r.get("event") == name]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._reader.join(timeout=5)


@pytest.fixture(scope="module")
def kilnd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Kilnd]:
    server = Kilnd(tmp_path_factory.mktemp("kilnd") / "data", "--rendezvous-timeout", "20")
    yield server
    server.stop()
