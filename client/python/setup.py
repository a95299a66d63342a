"""The build steps of the kiln wheel that pyproject.toml cannot say.

- The generated kiln.v1 modules join the package. build_wheel.py stages them beside the
  sources; building straight from client/python takes them from KILN_PROTO_PYTHON (a folder
  holding kiln/v1/*_pb2.py), by default the release build tree (build/release/python).
- KILN_RUNTIME_LIBRARY, when set, names Kiln's native runtime library, which ships as
  kiln/lib/libkiln_runtime.so; the wheel is then tagged py3-none-<platform>, since the
  library has a C ABI and no Python ABI (kiln/native.py finds it at run time).
"""

import os
import pathlib
import shutil

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

try:
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:  # setuptools < 70.1 takes bdist_wheel from the wheel package
    from wheel.bdist_wheel import bdist_wheel

HERE = pathlib.Path(__file__).resolve().parent
STAGED_V1 = HERE / "kiln" / "v1"
RUNTIME_LIBRARY = "libkiln_runtime.so"


def runtime_library():
    path = os.environ.get("KILN_RUNTIME_LIBRARY", "")
    if path and not os.path.isfile(path):
        raise SystemExit(f"KILN_RUNTIME_LIBRARY names no file: {path}")
    return path or None


def generated_v1():
    """The folder of generated kiln.v1 modules to copy in; None when they are staged."""
    if (STAGED_V1 / "compile_pb2.py").is_file():
        return None
    root = pathlib.Path(os.environ.get("KILN_PROTO_PYTHON",
                                       HERE.parents[1] / "build" / "release" / "python"))
    v1 = root / "kiln" / "v1"
    if not (v1 / "compile_pb2.py").is_file():
        raise SystemExit(f"the generated kiln.v1 modules are not in {v1}: build them "
                         "(cmake --build --preset release --target kiln_proto_python) or set "
                         "KILN_PROTO_PYTHON to the folder that holds kiln/v1")
    return v1


class BuildPy(build_py):
    def run(self):
        super().run()
        package = pathlib.Path(self.build_lib) / "kiln"
        v1 = generated_v1()
        if v1 is not None:
            (package / "v1").mkdir(parents=True, exist_ok=True)
            for source in sorted(v1.glob("*.py")):
                shutil.copyfile(source, package / "v1" / source.name)
        library = runtime_library()
        if library is not None:
            (package / "lib").mkdir(parents=True, exist_ok=True)
            shutil.copyfile(library, package / "lib" / RUNTIME_LIBRARY)


class PlatformDistribution(Distribution):
    """A distribution with native code: its files go to the wheel's root (platlib), where
    an unpacked wheel on PYTHONPATH finds them, rather than under .data/purelib."""

    def has_ext_modules(self):
        return runtime_library() is not None


class BdistWheel(bdist_wheel):
    def get_tag(self):
        python, abi, platform = super().get_tag()
        if runtime_library() is not None:
            return "py3", "none", platform
        return python, abi, platform


setup(
    packages=["kiln", "kiln.v1"] if STAGED_V1.is_dir() else ["kiln"],
    cmdclass={"build_py": BuildPy, "bdist_wheel": BdistWheel},
    distclass=PlatformDistribution,
)
