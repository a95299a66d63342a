"""kiln.torch_identity on installed packages made here: a wheel's files and its RECORD."""

from __future__ import annotations

import hashlib
import pathlib
import shutil

from kiln import torch_identity

VERSION = "2.11.0+cu130"
SOURCES = {"torch/__init__.py": "import os\n", "torch/nn/linear.py": "class Linear: ...\n",
           "torch/lib/libtorch.so": "\x7fELF", "torch/a,b.py": "quoted = 1\n"}


def install(site: pathlib.Path, version: str = VERSION, sources: dict | None = None,
            record_extra: str = "") -> pathlib.Path:
    """A package of `version` (as its METADATA gives it) installed in `site` as pip leaves
    one: its files and a dist-info folder whose RECORD lists each with its hash and size (CSV,
    a comma in a name quoted)."""
    sources = SOURCES if sources is None else sources
    rows = []
    for name, text in sources.items():
        path = site / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        digest = hashlib.sha256(text.encode()).hexdigest()
        quoted = f'"{name}"' if "," in name else name
        rows.append(f"{quoted},sha256={digest},{len(text.encode())}")
    info = site / f"torch-{version}.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n"
                                   "\nPyTorch's description, which has Version: 0 in it\n")
    rows.append(f"torch-{version}.dist-info/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n" + record_extra)
    return site / "torch"


def test_an_installed_package_is_named_by_its_record_wherever_it_lives(tmp_path) -> None:
    here = torch_identity.identity(str(install(tmp_path / "a")), VERSION)
    assert isinstance(here, bytes) and len(here) == 32
    assert torch_identity.identity(str(tmp_path / "a" / "torch") + "/", VERSION) == here
    # Another machine, another folder, the same wheel: the same identity.
    assert torch_identity.identity(str(install(tmp_path / "b")), VERSION) == here
    # Another build: another RECORD.
    other = dict(SOURCES, **{"torch/nn/linear.py": "class Linear: pass\n"})
    assert torch_identity.identity(str(install(tmp_path / "c", sources=other)), VERSION) \
        not in (None, here)


def test_a_wheel_whose_metadata_leaves_out_the_local_label_is_named_by_its_record(
        tmp_path) -> None:
    # PyPI's wheels: torch-2.11.0.dist-info says Version: 2.11.0, torch.__version__ is
    # 2.11.0+cu130.
    package = str(install(tmp_path / "pypi", version="2.11.0"))
    named = torch_identity.identity(package, VERSION)
    assert isinstance(named, bytes)
    assert torch_identity.identity(package, "2.11.0") not in (None, named)
    assert torch_identity.identity(package, "2.11.1+cu130") is None
    # A METADATA that names a local label must name the one the package reports.
    assert torch_identity.identity(str(install(tmp_path / "cpu", version="2.11.0+cpu")),
                                   VERSION) is None


def test_a_package_not_as_its_record_says_has_no_identity(tmp_path) -> None:
    package = install(tmp_path / "edited")
    (package / "nn" / "linear.py").write_text("class Linear: edited = True\n")
    assert torch_identity.identity(str(package), VERSION) is None
    package = install(tmp_path / "removed")
    (package / "a,b.py").unlink()
    assert torch_identity.identity(str(package), VERSION) is None
    # Only Python sources are compared: a library the RECORD lists may be stripped.
    package = install(tmp_path / "stripped")
    (package / "lib" / "libtorch.so").write_text("")
    assert torch_identity.identity(str(package), VERSION) is not None


def test_without_a_record_for_that_version_and_package_there_is_none(tmp_path) -> None:
    package = install(tmp_path / "v")
    assert torch_identity.identity(str(package), "2.10.0") is None
    shutil.rmtree(tmp_path / "v" / f"torch-{VERSION}.dist-info")
    assert torch_identity.identity(str(package), VERSION) is None
    # A source build: the package and no dist-info at all.
    assert torch_identity.identity(str(tmp_path / "nowhere" / "torch"), VERSION) is None
    # A RECORD that does not list the package's __init__.py describes something else.
    bare = install(tmp_path / "bare", sources={"torch/x.py": "x = 1\n"})
    assert torch_identity.identity(str(bare), VERSION) is None


def test_a_record_without_sizes_gives_none(tmp_path) -> None:
    package = install(tmp_path / "s", record_extra="torch/extra.py,sha256=00,\n")
    (package / "extra.py").write_text("")
    assert torch_identity.identity(str(package), VERSION) is None
