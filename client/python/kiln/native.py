"""Where the package keeps Kiln's native runtime library.

The runtime that loads and runs the kernels kilnd compiles (client/runtime: a C ABI, no
Python ABI, so one build serves every Python version) ships inside the wheel as
kiln/lib/libkiln_runtime.so when the wheel is built with it (client/python/build_wheel.py
--runtime-library); such a wheel is tagged for linux_x86_64 instead of any platform.
"""

from __future__ import annotations

import pathlib
from typing import Optional

LIBRARY_DIR = pathlib.Path(__file__).resolve().parent / "lib"
RUNTIME_LIBRARY = "libkiln_runtime.so"


def runtime_library() -> Optional[pathlib.Path]:
    """The path of the bundled runtime library, or None when this package has none."""
    path = LIBRARY_DIR / RUNTIME_LIBRARY
    return path if path.is_file() else None
