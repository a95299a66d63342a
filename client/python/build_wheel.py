"""Writes the kiln wheel into a folder and prints its path.

    /usr/bin/python3 client/python/build_wheel.py --out build/release/dist \
        [--proto-python build/release/python] [--runtime-library libkiln_runtime.so]

The package's sources and the generated kiln.v1 modules (from the CMake build,
--proto-python) are staged in a temporary folder, which pip builds with the setuptools
already installed (--no-build-isolation: nothing is downloaded), so the source tree stays
clean. The CMake target `kiln_wheel` runs this.
"""

from __future__ import annotations

import argparse
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
from typing import Optional, Sequence

HERE = pathlib.Path(__file__).resolve().parent
DEFAULT_PROTO_PYTHON = HERE.parents[1] / "build" / "release" / "python"
STAGED_FILES = ("pyproject.toml", "setup.py", "README.md")


def stage(dest: pathlib.Path, proto_python: pathlib.Path) -> None:
    """Copies what the wheel is built from into `dest`."""
    v1 = proto_python / "kiln" / "v1"
    if not (v1 / "compile_pb2.py").is_file():
        raise SystemExit(f"no generated kiln.v1 modules in {v1}: build the kiln_proto_python "
                         "target first")
    for name in STAGED_FILES:
        shutil.copyfile(HERE / name, dest / name)
    (dest / "kiln" / "v1").mkdir(parents=True)
    for source in sorted((HERE / "kiln").glob("*.py")):
        shutil.copyfile(source, dest / "kiln" / source.name)
    for source in sorted(v1.glob("*.py")):
        shutil.copyfile(source, dest / "kiln" / "v1" / source.name)


def build_wheel(out: pathlib.Path, proto_python: pathlib.Path = DEFAULT_PROTO_PYTHON,
                runtime_library: Optional[pathlib.Path] = None) -> pathlib.Path:
    """Builds the wheel into `out` (replacing an older kiln wheel there) and returns it."""
    out.mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("KILN_PROTO_PYTHON", "PYTHONPATH")}
    env.pop("KILN_RUNTIME_LIBRARY", None)
    if runtime_library is not None:
        env["KILN_RUNTIME_LIBRARY"] = str(runtime_library.resolve())
    with tempfile.TemporaryDirectory(prefix="kiln-wheel-") as tmp:
        staged = pathlib.Path(tmp) / "src"
        built = pathlib.Path(tmp) / "dist"
        staged.mkdir()
        stage(staged, proto_python)
        run = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
             "--no-index", "--no-cache-dir", "--disable-pip-version-check", "--quiet",
             "--wheel-dir", str(built), str(staged)],
            env=env, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"pip wheel failed:\n{run.stdout}{run.stderr}")
        (wheel,) = built.glob("kiln-*.whl")
        for old in out.glob("kiln-*.whl"):
            old.unlink()
        return pathlib.Path(shutil.copy2(wheel, out / wheel.name))


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, type=pathlib.Path, help="folder for the wheel")
    parser.add_argument("--proto-python", type=pathlib.Path, default=DEFAULT_PROTO_PYTHON,
                        help="folder holding the generated kiln/v1 (default: %(default)s)")
    parser.add_argument("--runtime-library", type=pathlib.Path,
                        help="native runtime library to ship as kiln/lib/libkiln_runtime.so")
    args = parser.parse_args(argv)
    print(build_wheel(args.out, args.proto_python, args.runtime_library))
    return 0


if __name__ == "__main__":
    sys.exit(main())
