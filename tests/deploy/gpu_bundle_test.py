"""deploy/gpu-bundle.sh writes a bundle under 64 MiB whose env.sh, in an otherwise empty
environment, runs the bundled kilnd on the bundled libraries and imports the bundled
Python package."""

from __future__ import annotations

import os
import pathlib
import subprocess
import tarfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
BINARY_DIR = pathlib.Path(os.environ.get("KILN_BINARY_DIR", ROOT / "build/release")).resolve()
LIMIT = 64 * 1024 * 1024
SYSTEM = ("libc.so", "libm.so", "libstdc++.so", "libgcc_s.so", "ld-linux", "libpthread.so",
          "libdl.so", "librt.so")


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("bundle") / "kiln"
    run = subprocess.run(["bash", str(ROOT / "deploy/gpu-bundle.sh"), str(out), str(BINARY_DIR)],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return out


def in_empty_environment(bundle: pathlib.Path, tmp: pathlib.Path, script: str) -> str:
    """Runs `script` in bash after sourcing env.sh, with no environment but TMPDIR (where the
    native part unpacks)."""
    run = subprocess.run(["env", "-i", f"TMPDIR={tmp}", "bash", "-c",
                          f'set -e; . "{bundle}/env.sh"; {script}'],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout


def test_bundle_is_small_and_holds_kilnd_its_libraries_and_the_package(
        bundle: pathlib.Path) -> None:
    size = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file())
    assert size <= LIMIT, f"{size} bytes"
    with tarfile.open(bundle / "native.tar.gz") as tar:
        names = [n.removeprefix("./") for n in tar.getnames()]
    assert "bin/kilnd" in names
    libs = [n.removeprefix("lib/") for n in names if n.startswith("lib/") and ".so" in n]
    for expected in ("librocksdb.so", "libgrpc++.so", "libprotobuf.so", "libabsl_", "libssl.so"):
        assert any(lib.startswith(expected) for lib in libs), (expected, libs)
    assert not [lib for lib in libs if lib.startswith(SYSTEM)]
    # The wheel carries the native runtime library, so it is tagged for the platform.
    (wheel,) = (bundle / "wheels").glob("kiln-*-py3-none-linux_x86_64.whl")
    assert (bundle / "python" / "kiln" / "v1" / "compile_pb2.py").is_file()
    runtime = bundle / "python" / "kiln" / "lib" / "libkiln_runtime.so"
    exported = subprocess.run(["nm", "-D", "--defined-only", str(runtime)], capture_output=True,
                              text=True, check=True).stdout
    functions = sorted(line.split()[-1] for line in exported.splitlines() if " T " in line)
    assert functions and all(f.startswith("kiln_cuda_") for f in functions), functions
    needed = subprocess.run(["readelf", "-d", str(runtime)], capture_output=True, text=True,
                            check=True).stdout
    assert "cuda" not in needed.lower(), "the driver is opened at run time, never linked"
    assert (bundle / "python" / "kiln-0.1.0.dist-info" / "entry_points.txt").is_file()


def test_env_sh_runs_the_bundled_kilnd_in_an_empty_environment(bundle: pathlib.Path,
                                                              tmp_path: pathlib.Path) -> None:
    out = in_empty_environment(bundle, tmp_path, 'kilnd --help; echo "ld=$LD_LIBRARY_PATH"; '
                               'command -v kilnd; ldd "$KILN_NATIVE/bin/kilnd"')
    assert "--listen" in out
    native = next(tmp_path.glob("kiln-native-*"))
    assert f"ld={native}/lib\n" in out
    assert f"{native}/bin/kilnd\n" in out
    # Every library that is not the system's resolves inside the bundle.
    for line in out.splitlines():
        if "=>" not in line:
            continue
        name, _, path = line.strip().partition(" => ")
        if not name.startswith(SYSTEM) and not name.startswith("linux-vdso"):
            assert path.startswith(f"{native}/lib/"), line
    # A second shell finds the unpacked folder and leaves it as it is.
    stamp = (native / ".digest").stat().st_mtime_ns
    in_empty_environment(bundle, tmp_path, "kilnd --help >/dev/null")
    assert (native / ".digest").stat().st_mtime_ns == stamp
    assert sorted(p.name for p in tmp_path.iterdir()) == [native.name]


def test_env_sh_puts_the_package_on_the_python_path(bundle: pathlib.Path,
                                                   tmp_path: pathlib.Path) -> None:
    code = ("import kiln, kiln.client; from importlib.metadata import entry_points; "
            "print(kiln.__file__); "
            "print([e.value for e in entry_points(group='torch_dynamo_backends')])")
    out = in_empty_environment(bundle, tmp_path, f'/usr/bin/python3 -c "{code}"')
    assert out.splitlines() == [f"{bundle}/python/kiln/__init__.py",
                                "['kiln.backend:kiln_backend']"]


def test_refuses_a_folder_that_is_not_a_bundle(tmp_path: pathlib.Path) -> None:
    (tmp_path / "precious.txt").write_text("keep me")
    run = subprocess.run(["bash", str(ROOT / "deploy/gpu-bundle.sh"), str(tmp_path),
                          str(BINARY_DIR)], capture_output=True, text=True)
    assert run.returncode != 0 and "refusing" in run.stderr
    assert (tmp_path / "precious.txt").read_text() == "keep me"


@pytest.mark.parametrize("cache, named", [
    ("CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_CXX_FLAGS_RELEASE:STRING=\n",
     "CMAKE_CXX_FLAGS_RELEASE=''"),
    ("CMAKE_BUILD_TYPE:STRING=Debug\nCMAKE_CXX_FLAGS_RELEASE:STRING=-O3 -DNDEBUG\n",
     "CMAKE_BUILD_TYPE='Debug'"),
    ("CMAKE_BUILD_TYPE:STRING=Release\nCMAKE_CXX_FLAGS_RELEASE:STRING=-O3 -DNDEBUG\n"
     "KILN_SANITIZE:STRING=address\n", "KILN_SANITIZE='address'"),
])
def test_a_build_that_is_not_optimized_is_refused(tmp_path: pathlib.Path, cache: str,
                                                  named: str) -> None:
    """What is bundled is measured on the GPU machine: the script refuses a build folder
    configured without optimization or with sanitizers, naming the setting, and writes
    nothing."""
    build = tmp_path / "build"
    for part in ("server/kilnd", "python", "client/libkiln_runtime.so"):
        (build / part).parent.mkdir(parents=True, exist_ok=True)
        (build / part).symlink_to(BINARY_DIR / part)
    (build / "CMakeCache.txt").write_text(cache)
    out = tmp_path / "bundle"
    run = subprocess.run(["bash", str(ROOT / "deploy/gpu-bundle.sh"), str(out), str(build)],
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "not an optimized release build" in run.stderr and named in run.stderr, run.stderr
    assert not out.exists()
