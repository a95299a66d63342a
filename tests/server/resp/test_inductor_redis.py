"""kilnd's RESP front as PyTorch Inductor's Redis remote caches use it, through Debian's
python3-redis, and through redis-cli."""
import base64
import json
import os
import pathlib
import pickle
import subprocess
import tempfile

import pytest
import redis

BIN = pathlib.Path(os.environ["KILN_BINARY_DIR"])
READ_TOKEN = "read-token-0123456789"
COMPILE_TOKEN = "compile-token-0123456789"


class Kilnd:
    def __init__(self, tmp, *flags):
        self.proc = subprocess.Popen(
            [str(BIN / "server" / "kilnd"), "--listen", "127.0.0.1:0", "--metrics-listen",
             "127.0.0.1:0", "--data-dir", os.path.join(tmp, "data"), "--resp-listen",
             "127.0.0.1:0", "--compile-isolation", "none", *flags],
            stderr=subprocess.PIPE, text=True)
        for line in self.proc.stderr:
            if '"event":"serving"' in line:
                self.resp_port = json.loads(line)["resp_port"]
                return
        raise RuntimeError("kilnd did not start")

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture
def tmp():
    with tempfile.TemporaryDirectory() as d:
        yield d


class RedisRemoteCacheBackend:
    """What torch/_inductor/remote_cache.py's RedisRemoteCacheBackend does: redis.Redis on
    TORCHINDUCTOR_REDIS_HOST/PORT (or from_url(TORCHINDUCTOR_REDIS_URL)), GET key (None when
    absent) and SET key data, keys `pt2:{cache_id}::{key}:c1`, values bytes."""

    def __init__(self, cache_id, host=None, port=None, url=None):
        self._key_fmt = f"pt2:{cache_id}::{{key}}:c1"
        self._redis = redis.Redis.from_url(url) if url else redis.Redis(host=host, port=port)

    def _get_key(self, key):
        return self._key_fmt.format(key=key)

    def get(self, key):
        value = self._redis.get(self._get_key(key))
        assert value is None or isinstance(value, bytes)
        return value

    def put(self, key, data):
        self._redis.set(self._get_key(key), data)


def json_payload(size):
    """A JSON value as Inductor's JSON serde writes it: a pickled, base64'd artifact."""
    artifact = pickle.dumps({"code": "x" * size, "guards": ["Eq(s0, 128)"]})
    return json.dumps({"data": base64.b64encode(artifact).decode("ascii"),
                       "time_taken_ms": 1234}).encode("ascii")


def test_fx_graph_and_aot_autograd_caches_round_trip(tmp):
    kilnd = Kilnd(tmp)
    try:
        fx = RedisRemoteCacheBackend("fx-graph-v1", host="127.0.0.1", port=kilnd.resp_port)
        aot = RedisRemoteCacheBackend("aot-autograd", host="127.0.0.1", port=kilnd.resp_port)
        key = "fh6b3ytxk5aqcmv3rkmmhhiqc3twjwwyjf5ubpdhksbwlcmhmr2z"
        assert fx.get(key) is None
        big = json_payload(6 << 20)
        fx.put(key, big)
        assert fx.get(key) == big
        # The same key of another cache is another RESP key.
        assert aot.get(key) is None
        small = json_payload(3000)
        aot.put(key, small)
        assert aot.get(key) == small
        assert json.loads(fx.get(key))["time_taken_ms"] == 1234
        # A second client (a second rank) sees what the first stored.
        other = RedisRemoteCacheBackend("fx-graph-v1", url=f"redis://127.0.0.1:{kilnd.resp_port}/0")
        assert other.get(key) == big
    finally:
        kilnd.stop()


def test_redis_url_with_a_token(tmp):
    tokens = os.path.join(tmp, "tokens")
    with open(tokens, "w") as f:
        f.write(f"read {READ_TOKEN} reader\ncompile {COMPILE_TOKEN} trainer\n")
    kilnd = Kilnd(tmp, "--token-file", tokens)
    try:
        port = kilnd.resp_port
        anonymous = RedisRemoteCacheBackend("fx-graph-v1", host="127.0.0.1", port=port)
        with pytest.raises(redis.exceptions.AuthenticationError):
            anonymous.get("k")
        with pytest.raises(redis.exceptions.RedisError):
            RedisRemoteCacheBackend("fx-graph-v1", url=f"redis://:wrong-token-0123456789@127.0.0.1:{port}").get("k")
        writer = RedisRemoteCacheBackend("fx-graph-v1",
                                         url=f"redis://:{COMPILE_TOKEN}@127.0.0.1:{port}/0")
        writer.put("k", b'{"data": "abc"}')
        # A user name in the URL: AUTH USER TOKEN.
        reader = RedisRemoteCacheBackend("fx-graph-v1",
                                         url=f"redis://default:{READ_TOKEN}@127.0.0.1:{port}")
        assert reader.get("k") == b'{"data": "abc"}'
        with pytest.raises(redis.exceptions.ResponseError, match="NOPERM|needs compile"):
            reader.put("k2", b"{}")
        # Any db but 0 is refused when connecting.
        with pytest.raises(redis.exceptions.RedisError):
            RedisRemoteCacheBackend("fx-graph-v1",
                                    url=f"redis://:{READ_TOKEN}@127.0.0.1:{port}/3").get("k")
    finally:
        kilnd.stop()


def test_redis_cli(tmp):
    kilnd = Kilnd(tmp)
    try:
        cli = ["/usr/bin/redis-cli", "-h", "127.0.0.1", "-p", str(kilnd.resp_port)]

        def run(*args, stdin=None):
            return subprocess.run(cli + list(args), input=stdin, capture_output=True,
                                  check=True).stdout

        assert run("PING") == b"PONG\n"
        value = os.urandom(1 << 20)
        assert run("-x", "SET", "pt2:autotune-best-config-v2::k:c1", stdin=value) == b"OK\n"
        assert run("--raw", "GET", "pt2:autotune-best-config-v2::k:c1") == value + b"\n"
        assert run("GET", "missing") == b"\n"
        assert b"unknown command" in run("KEYS", "*")
        assert b"kiln_version" in run("INFO")
        # Several commands on one connection, as redis-cli pipes them.
        out = run(stdin=b"SET a 1\nGET a\nPING\n")
        assert out.split() == [b"OK", b"1", b"PONG"]
    finally:
        kilnd.stop()
