"""The installed PyTorch's identity in a frame key, read from its wheel's RECORD.

AOTAutogradCache keys a frame by, among other things, PyTorch's torch_key: a hash of every
Python source of the package, which takes about 0.4 s of each fresh process's first frame key
on the GPU machines (it is cached for the process only). An installer writes a RECORD beside
the package naming every file it installed with its SHA-256 and size, so the version and the
RECORD identify the installed sources as well, in a few milliseconds:

    identity("/usr/lib/python3/site-packages/torch", "2.11.0+cu130")  # bytes, or None

It holds while the package is as installed: every Python source the RECORD lists must be on
disk with the recorded size, as an edit almost always changes a file's size. Otherwise, and
where no RECORD describes the package (a source build, an editable install), it is None and
the caller hashes the sources as PyTorch does. The identity leaves out where the package lives,
so machines with the same wheel installed agree on frame keys, as they do with torch_key.

Importing this module needs no PyTorch.
"""

from __future__ import annotations

import csv
import hashlib
import io
import os
from typing import Optional

# The identity's own version: a change to what it covers changes every key made with it.
FORMAT = b"kiln torch record 1"


def identity(package_dir: str, version: str) -> Optional[bytes]:
    """The identity of the package at `package_dir` (PyTorch's directory) of `version`;
    None when no RECORD describes it as it is on disk."""
    site, name = os.path.split(os.path.normpath(package_dir))
    record = _record(site, name, version)
    if record is None:
        return None
    try:
        sources = [(row[0], int(row[2]))
                   for row in csv.reader(io.StringIO(record.decode("utf-8", errors="replace")))
                   if len(row) == 3 and row[0].startswith(name + "/") and row[0].endswith(".py")]
    except (csv.Error, ValueError):  # a RECORD cut short, a size not recorded
        return None
    if not any(path == f"{name}/__init__.py" for path, _ in sources):
        return None  # a RECORD of some other package of that name
    for path, size in sources:
        try:
            if os.stat(os.path.join(site, path)).st_size != size:
                return None
        except OSError:  # a file gone
            return None
    return hashlib.sha256(b"\0".join([FORMAT, version.encode(), record])).digest()


def _record(site: str, name: str, version: str) -> Optional[bytes]:
    """The RECORD of the distribution `name`-`version` installed in `site`. Its METADATA may
    give the version without the local label that the package reports (2.11.0 for
    2.11.0+cu130: a wheel from PyPI is named so); the RECORD tells such builds apart."""
    try:
        entries = os.listdir(site)
    except OSError:
        return None
    prefix = name.replace("-", "_") + "-"
    for entry in sorted(entries):
        if not (entry.startswith(prefix) and entry.endswith(".dist-info")):
            continue
        folder = os.path.join(site, entry)
        if _version(os.path.join(folder, "METADATA")) not in (version, version.split("+")[0]):
            continue
        try:
            with open(os.path.join(folder, "RECORD"), "rb") as f:
                return f.read()
        except OSError:
            return None
    return None


def _version(metadata: str) -> Optional[str]:
    """The Version: field of a METADATA file, which leads it (None when unreadable)."""
    try:
        with open(metadata, encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
                if not line.strip():  # the headers end at the first empty line
                    return None
    except OSError:
        return None
    return None
