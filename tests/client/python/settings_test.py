"""kiln.settings: options over the environment over defaults, and errors that name the
option and where its bad value came from."""

from __future__ import annotations

import pathlib

import pytest

from kiln.errors import SettingsError
from kiln.settings import DEFAULT_DEADLINE_SECONDS, DEFAULT_SERVER, Settings


def test_defaults_with_an_empty_environment() -> None:
    s = Settings.from_options(None, {})
    assert s.server == DEFAULT_SERVER
    assert (s.fallback, s.precision, s.deadline) == ("eager", "strict", DEFAULT_DEADLINE_SECONDS)
    assert not s.cudagraphs and not s.require_cudagraph and s.frame_cache
    assert s.job_id == "" and s.token == "" and s.target is None
    assert s.ca_cert is None and dict(s.backend_options) == {}
    assert s.partitioner == "min_cut" and s.layout_optimization


def test_environment_is_read() -> None:
    env = {"KILN_SERVER": "kiln.internal:7000", "KILN_FALLBACK": "inductor",
           "KILN_CUDAGRAPHS": "yes", "KILN_REQUIRE_CUDAGRAPH": "1", "KILN_DEADLINE": "2.5",
           "KILN_PRECISION": "allow_tf32", "KILN_TARGET": "cuda:sm_90", "KILN_JOB_ID": "run-7",
           "KILN_FRAME_CACHE": "off", "KILN_PARTITIONER": "default",
           "KILN_LAYOUT_OPTIMIZATION": "0"}
    s = Settings.from_options({}, env)
    assert not s.frame_cache and not s.layout_optimization
    assert s.partitioner == "default"
    assert s.server == "kiln.internal:7000"
    assert s.fallback == "inductor"
    assert s.cudagraphs and s.require_cudagraph
    assert s.deadline == 2.5
    assert s.precision == "allow_tf32"
    assert s.target == "cuda:sm_90"
    assert s.job_id == "run-7"


def test_options_win_over_the_environment() -> None:
    env = {"KILN_SERVER": "env:1", "KILN_FALLBACK": "inductor", "KILN_CUDAGRAPHS": "true",
           "KILN_DEADLINE": "9", "KILN_JOB_ID": "from-env"}
    s = Settings.from_options({"server": "opt:2", "fallback": "error", "cudagraphs": False,
                               "deadline": 3, "job_id": "from-options"}, env)
    assert (s.server, s.fallback, s.cudagraphs, s.deadline, s.job_id) == (
        "opt:2", "error", False, 3.0, "from-options")


def test_an_option_set_to_none_leaves_the_environment_in_charge() -> None:
    s = Settings.from_options({"fallback": None}, {"KILN_FALLBACK": "error"})
    assert s.fallback == "error"


def test_job_id_defaults_to_the_launchers_run_id() -> None:
    assert Settings.from_options({}, {"TORCHELASTIC_RUN_ID": "elastic-1"}).job_id == "elastic-1"
    assert Settings.from_options({}, {"SLURM_JOB_ID": "4711"}).job_id == "4711"
    both = {"TORCHELASTIC_RUN_ID": "elastic-1", "SLURM_JOB_ID": "4711"}
    assert Settings.from_options({}, both).job_id == "elastic-1"
    # torchrun without --rdzv-id says "none", which names no job.
    assert Settings.from_options({}, {"TORCHELASTIC_RUN_ID": "none"}).job_id == ""
    assert Settings.from_options({}, {**both, "KILN_JOB_ID": "mine"}).job_id == "mine"


@pytest.mark.parametrize("options,env,option,source,words", [
    ({"fallback": "eagre"}, {}, "fallback", "options", "'eagre' is not one of eager"),
    ({}, {"KILN_FALLBACK": "later"}, "fallback", "KILN_FALLBACK", "'later' is not one of"),
    ({}, {"KILN_CUDAGRAPHS": "maybe"}, "cudagraphs", "KILN_CUDAGRAPHS", "expected a boolean"),
    ({"require_cudagraph": 2}, {}, "require_cudagraph", "options", "expected a boolean"),
    ({}, {"KILN_FRAME_CACHE": "sometimes"}, "frame_cache", "KILN_FRAME_CACHE",
     "expected a boolean"),
    ({"deadline": -1}, {}, "deadline", "options", "positive number of seconds"),
    ({}, {"KILN_DEADLINE": "soon"}, "deadline", "KILN_DEADLINE", "expected seconds"),
    ({"deadline": float("inf")}, {}, "deadline", "options", "positive number of seconds"),
    ({"server": "no-port"}, {}, "server", "options", "is not host:port"),
    ({}, {"KILN_SERVER": "host:99999"}, "server", "KILN_SERVER", "no valid port"),
    ({"server": 50051}, {}, "server", "options", "expected a string"),
    ({"precision": "tf32"}, {}, "precision", "options", "is not one of strict"),
    ({}, {"KILN_PARTITIONER": "mincut"}, "partitioner", "KILN_PARTITIONER",
     "'mincut' is not one of min_cut, default"),
    ({"target": "sm_90"}, {}, "target", "options", "is not x86_64 or cuda:sm_NN"),
    ({}, {"KILN_LAYOUT_OPTIMIZATION": "nhwc"}, "layout_optimization",
     "KILN_LAYOUT_OPTIMIZATION", "expected a boolean"),
    ({"backend_options": {"a b": "1"}}, {}, "backend_options", "options", "bad option name"),
    ({"backend_options": {"a": [1]}}, {}, "backend_options", "options", "expected a string"),
    ({"serverr": "x:1"}, {}, "serverr", "options", "unknown option"),
])
def test_bad_values_name_the_option(options: dict, env: dict, option: str, source: str,
                                     words: str) -> None:
    with pytest.raises(SettingsError) as e:
        Settings.from_options(options, env)
    assert e.value.option == option
    assert e.value.source == source
    assert f"'{option}'" in str(e.value) and words in str(e.value)
    if source != "options":
        assert source in str(e.value)


def test_grpc_targets_with_a_scheme_pass() -> None:
    assert Settings.from_options({"server": "unix:/run/kiln.sock"}, {}).server == (
        "unix:/run/kiln.sock")
    assert Settings.from_options({"server": "dns:///kiln:50051"}, {}).server == (
        "dns:///kiln:50051")
    assert Settings.from_options({"server": "[::1]:50051"}, {}).server == "[::1]:50051"


def test_token_and_tls_files(tmp_path: pathlib.Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    ca, cert, key = (tmp_path / n for n in ("ca.pem", "cert.pem", "key.pem"))
    for f in (ca, cert, key):
        f.write_text("PEM")
    s = Settings.from_options({"client_cert": str(cert)},
                              {"KILN_TOKEN_FILE": str(token), "KILN_CA_CERT": str(ca),
                               "KILN_CLIENT_KEY": str(key)})
    assert s.token == "s3cret"
    assert (s.ca_cert, s.client_cert, s.client_key) == (str(ca), str(cert), str(key))
    assert "s3cret" not in repr(s)


def test_bad_token_and_tls_files(tmp_path: pathlib.Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(SettingsError, match="KILN_TOKEN_FILE.*cannot read file"):
        Settings.from_options({}, {"KILN_TOKEN_FILE": missing})
    two = tmp_path / "two"
    two.write_text("one two\n")
    with pytest.raises(SettingsError, match="'token_file'.*does not hold one token"):
        Settings.from_options({"token_file": str(two)}, {})
    pem = tmp_path / "pem"
    pem.write_text("PEM")
    with pytest.raises(SettingsError) as e:
        Settings.from_options({"ca_cert": str(pem), "client_cert": str(pem)}, {})
    assert e.value.option == "client_key"
    with pytest.raises(SettingsError) as e:
        Settings.from_options({}, {"KILN_CLIENT_CERT": str(pem), "KILN_CLIENT_KEY": str(pem)})
    assert e.value.option == "ca_cert" and e.value.source == "KILN_CLIENT_CERT"


def test_backend_options_become_strings() -> None:
    s = Settings.from_options({"backend_options": {"unroll": 4, "fuse": True, "mode": "x"}}, {})
    assert dict(s.backend_options) == {"unroll": "4", "fuse": "true", "mode": "x"}


def test_settings_are_frozen() -> None:
    s = Settings.from_options({}, {})
    with pytest.raises(AttributeError):
        s.server = "elsewhere:1"  # type: ignore[misc]


def test_server_may_list_a_fleet():
    s = Settings.from_options({}, {"KILN_SERVER": "kiln-0.kiln:50051, kiln-1.kiln:50051"})
    assert s.servers == ["kiln-0.kiln:50051", "kiln-1.kiln:50051"]
    assert Settings.from_options({}, {}).servers == [DEFAULT_SERVER]
    with pytest.raises(SettingsError, match="KILN_SERVER.*'kiln-2' is not host:port"):
        Settings.from_options({}, {"KILN_SERVER": "kiln-0:50051,kiln-2"})
    with pytest.raises(SettingsError, match="empty entry"):
        Settings.from_options({"server": "kiln-0:50051,,kiln-1:50051"}, {})
