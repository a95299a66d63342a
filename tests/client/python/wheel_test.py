"""The kiln wheel, built with Debian's pip and setuptools: it holds the package and the
generated kiln.v1 modules, depends on torch, grpcio and protobuf only, declares the
torch_dynamo_backends entry point, installs, and works from where it was installed."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

import pytest
from conftest import BINARY_DIR, ROOT

HERE = pathlib.Path(__file__).resolve().parent
PACKAGE = ROOT / "client" / "python"
PIP_INSTALL = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
               "--no-cache-dir", "--disable-pip-version-check", "--quiet"]


def own_env(**extra: str) -> dict[str, str]:
    """This process's environment less Kiln's settings, which change what a build packs (a
    test module run before in the process may have set KILN_RUNTIME_LIBRARY), and `extra`."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("KILN_")}, **extra}


def pip_install(*args: str, **extra_env: str) -> None:
    subprocess.run([*PIP_INSTALL, *args], check=True, env=own_env(**extra_env))


def build(out: pathlib.Path, *extra: str) -> pathlib.Path:
    run = subprocess.run([sys.executable, str(PACKAGE / "build_wheel.py"), "--out", str(out),
                          "--proto-python", str(BINARY_DIR / "python"), *extra],
                         capture_output=True, text=True, env=own_env())
    assert run.returncode == 0, run.stderr
    return pathlib.Path(run.stdout.strip())


def clean_python(code: str, *path: pathlib.Path) -> str:
    """Runs `code` with nothing but `path` on PYTHONPATH (no source or build tree)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "KILN_"))}
    env["PYTHONPATH"] = os.pathsep.join(map(str, path))
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         cwd="/")
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    return build(tmp_path_factory.mktemp("dist"))


def test_wheel_contents_and_metadata(wheel: pathlib.Path) -> None:
    assert wheel.name == "kiln-0.1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        metadata = z.read("kiln-0.1.0.dist-info/METADATA").decode()
        entry_points = z.read("kiln-0.1.0.dist-info/entry_points.txt").decode()
    for module in ("__init__", "backend", "capture", "client", "errors", "fallback",
                   "graph_proto", "native", "settings", "v1/__init__", "v1/compile_pb2",
                   "v1/compile_pb2_grpc", "v1/graph_pb2", "v1/errors_pb2", "v1/artifact_pb2"):
        assert f"kiln/{module}.py" in names
    assert not any("__pycache__" in n or n.startswith("kiln/lib/") for n in names)
    requires = sorted(line.split(":", 1)[1].strip() for line in metadata.splitlines()
                      if line.startswith("Requires-Dist:"))
    assert requires == ["grpcio (>=1.51)", "protobuf (>=3.20)", "torch (>=2.8)"]
    assert "[torch_dynamo_backends]\nkiln = kiln.backend:kiln_backend" in entry_points


def test_installed_wheel_works_on_its_own(wheel: pathlib.Path, tmp_path: pathlib.Path) -> None:
    site = tmp_path / "site"
    pip_install("--target", str(site), str(wheel))
    code = ("import kiln, kiln.client, kiln.native\n"
            "from importlib.metadata import entry_points\n"
            "from kiln.v1 import compile_pb2\n"
            "(ep,) = [e for e in entry_points(group='torch_dynamo_backends') if e.name == 'kiln']\n"
            "print(kiln.__file__.startswith(%r), ep.value, kiln.native.runtime_library())"
            % str(site))
    assert clean_python(code, site) == "True kiln.backend:kiln_backend None"


def test_dynamo_finds_the_backend_through_the_entry_point(wheel: pathlib.Path,
                                                           tmp_path: pathlib.Path) -> None:
    site = tmp_path / "site"
    pip_install("--target", str(site), str(wheel))
    fake_torch = HERE / "fake_torch"
    # Without `import kiln`: Dynamo loads the entry point, which imports kiln; the package
    # must not register the name a second time on the way.
    lookup = "import torch._dynamo as d; print(d.lookup_backend('kiln').__module__)"
    assert clean_python(lookup, site, fake_torch) == "kiln.backend"
    # With `import kiln` first, the entry point is left to Dynamo as well.
    assert clean_python("import kiln; " + lookup, site, fake_torch) == "kiln.backend"


def test_wheel_with_the_runtime_library(tmp_path: pathlib.Path) -> None:
    library = tmp_path / "libkiln_runtime.so"
    library.write_bytes(b"\x7fELF stand-in")
    wheel = build(tmp_path / "dist", "--runtime-library", str(library))
    assert wheel.name == "kiln-0.1.0-py3-none-linux_x86_64.whl"
    site = tmp_path / "site"
    pip_install("--target", str(site), str(wheel))
    path = clean_python("import kiln.native; print(kiln.native.runtime_library())", site)
    assert pathlib.Path(path).read_bytes() == library.read_bytes()


def test_install_from_the_source_folder(tmp_path: pathlib.Path) -> None:
    source = tmp_path / "python"
    shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns("__pycache__", "build"))
    site = tmp_path / "site"
    pip_install("--no-build-isolation", "--target", str(site), str(source),
                KILN_PROTO_PYTHON=str(BINARY_DIR / "python"))
    assert (site / "kiln" / "v1" / "compile_pb2.py").is_file()
    assert clean_python("from kiln.v1 import compile_pb2; import kiln.client; print('ok')",
                        site) == "ok"
