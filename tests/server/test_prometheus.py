"""A real Prometheus server scrapes kilnd's /metrics and reports the right values."""
import json
import os
import pathlib
import re
import socket
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request

BIN = pathlib.Path(os.environ["KILN_BINARY_DIR"])
PROMETHEUS = "/usr/bin/prometheus"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_kilnd(data_dir):
    proc = subprocess.Popen([str(BIN / "server" / "kilnd"), "--listen", "127.0.0.1:0",
                             "--metrics-listen", "127.0.0.1:0", "--data-dir", data_dir],
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stderr:
        if '"event":"serving"' in line:
            serving = json.loads(line)
            return proc, serving["grpc_port"], serving["http_port"]
    raise RuntimeError("kilnd did not start")


def query(port, expr):
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as r:
        body = json.load(r)
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scrapes_rpc_counts():
    with tempfile.TemporaryDirectory() as tmp:
        kilnd, grpc_port, http_port = start_kilnd(os.path.join(tmp, "data"))
        prom = None
        try:
            checks = 7
            for _ in range(checks):
                subprocess.run([str(BIN / "client" / "kiln"), "health", "--server",
                                f"127.0.0.1:{grpc_port}"], check=True, capture_output=True)
            graph = pathlib.Path(os.environ["KILN_GRAPHS_DIR"]) / "mlp_fp32.fw.json"
            compiles = 3
            for _ in range(compiles):
                subprocess.run([str(BIN / "client" / "kiln"), "compile", str(graph), "--server",
                                f"127.0.0.1:{grpc_port}", "--target", "x86_64"],
                               check=True, capture_output=True)
            # kilnd's own text is well-formed and already has the count.
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=5) as r:
                text = r.read().decode()
                assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert re.search(r'^kiln_build_info\{version="[^"]+"\} 1$', text, re.M)
            assert re.search(r"^process_open_fds \d+$", text, re.M)
            line = ('kiln_grpc_server_handled_total{grpc_service="grpc.health.v1.Health",'
                    f'grpc_method="Check",grpc_code="OK"}} {checks}')
            assert line in text.splitlines(), text

            prom_port = free_port()
            config = pathlib.Path(tmp) / "prometheus.yml"
            config.write_text(
                "global:\n  scrape_interval: 1s\n"
                "scrape_configs:\n  - job_name: kilnd\n    static_configs:\n"
                f"      - targets: ['127.0.0.1:{http_port}']\n")
            prom = subprocess.Popen([PROMETHEUS, f"--config.file={config}",
                                     f"--storage.tsdb.path={tmp}/tsdb",
                                     f"--web.listen-address=127.0.0.1:{prom_port}"],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            expr = ('kiln_grpc_server_handled_total{grpc_service="grpc.health.v1.Health",'
                    'grpc_method="Check",grpc_code="OK"}')
            deadline = time.time() + 60
            result = []
            while time.time() < deadline:
                try:
                    result = query(prom_port, expr)
                except OSError:
                    result = []
                if result:
                    break
                time.sleep(0.5)
            assert result, "Prometheus never scraped kilnd"
            assert float(result[0]["value"][1]) == checks
            assert result[0]["metric"]["job"] == "kilnd"
            hits = query(prom_port, 'kiln_compile_requests_total{outcome="hit"}')
            assert float(hits[0]["value"][1]) == compiles - 1
            misses = query(prom_port, 'kiln_compile_requests_total{outcome="miss"}')
            assert float(misses[0]["value"][1]) == 1
            compiled = query(prom_port, 'kiln_compiles_total{result="ok"}')
            assert float(compiled[0]["value"][1]) == 1
            up = query(prom_port, 'up{job="kilnd"}')
            assert float(up[0]["value"][1]) == 1
        finally:
            if prom:
                prom.terminate()
                prom.wait(timeout=10)
            kilnd.terminate()
            assert kilnd.wait(timeout=10) == 0
