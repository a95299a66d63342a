"""kiln.cuda (the runtime library through ctypes) against the stand-in driver
tests/client/runtime/cuda/fake_libcuda.c, and on a machine with no driver at all."""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys

import pytest

BINARY_DIR = pathlib.Path(os.environ.get("KILN_BINARY_DIR", "build/release"))
RUNTIME = BINARY_DIR / "client" / "libkiln_runtime.so"
FAKE = BINARY_DIR / "tests" / "client" / "kiln_fake_libcuda.so"


@pytest.fixture(scope="module")
def cuda(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    os.environ["KILN_RUNTIME_LIBRARY"] = str(RUNTIME)
    os.environ["KILN_LIBCUDA"] = str(FAKE)
    import kiln.cuda

    return kiln.cuda


def fake() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(FAKE))
    lib.fake_cuda_launch_values.restype = ctypes.POINTER(ctypes.c_uint64)
    lib.fake_cuda_launch_geometry.restype = ctypes.POINTER(ctypes.c_uint)
    lib.fake_cuda_launch_name.restype = ctypes.c_char_p
    lib.fake_cuda_launch_stream.restype = ctypes.c_void_p
    return lib


def test_the_driver_version_comes_from_the_driver(cuda) -> None:  # type: ignore[no-untyped-def]
    assert cuda.driver_version() == 13000


def test_launch_passes_pointers_ints_and_negative_ints(cuda) -> None:  # type: ignore[no-untyped-def]
    module = cuda.Module(b"kernel kiln_k0 4\n")
    function = module.function("kiln_k0")
    before = fake().fake_cuda_launch_count()
    cuda.launch(function, (3, 1, 1), (256, 1, 1), 0, 0xABC, [0x7F0000001000, 5, -1, 2**63])
    f = fake()
    assert f.fake_cuda_launch_count() == before + 1
    assert f.fake_cuda_launch_name(before) == b"kiln_k0"
    assert f.fake_cuda_launch_stream(before) == 0xABC
    assert [f.fake_cuda_launch_geometry(before)[i] for i in range(7)] == [3, 1, 1, 256, 1, 1, 0]
    values = f.fake_cuda_launch_values(before)
    assert [values[i] for i in range(4)] == [0x7F0000001000, 5, 2**64 - 1, 2**63]
    assert function.attributes() == {"registers": 32, "static_shared_bytes": 1024,
                                     "max_threads_per_block": 1024}
    module.close()
    module.close()  # closing twice is harmless


def test_errors_name_the_call_and_the_kernel(cuda) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(cuda.CudaError, match="CUDA_ERROR_INVALID_IMAGE") as e:
        cuda.Module(b"bad cubin")
    assert e.value.code == 200
    module = cuda.Module(b"kernel k 0\n")
    with pytest.raises(cuda.CudaError, match="CUDA_ERROR_NOT_FOUND.*for kernel nope"):
        module.function("nope")
    with pytest.raises(cuda.CudaError, match="more than 256"):
        cuda.launch(module.function("k"), (1, 1, 1), (1, 1, 1), 0, 0, [0] * 257)
    module.close()
    with pytest.raises(cuda.CudaError, match="module is closed"):
        module.function("k")


def test_without_a_driver_the_error_says_so() -> None:
    script = ("import kiln.cuda as c\n"
              "try:\n    c.driver_version()\nexcept c.CudaError as e:\n    print(e)\n")
    env = dict(os.environ, KILN_RUNTIME_LIBRARY=str(RUNTIME),
               KILN_LIBCUDA="/nonexistent/libcuda.so.1")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "cannot open the CUDA driver /nonexistent/libcuda.so.1" in out


def test_without_the_runtime_library_the_error_names_the_path() -> None:
    script = ("import kiln.cuda as c\n"
              "try:\n    c.driver_version()\nexcept c.CudaError as e:\n    print(e)\n")
    env = dict(os.environ, KILN_RUNTIME_LIBRARY="/nonexistent/libkiln_runtime.so")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, check=True).stdout
    assert "cannot load Kiln's runtime library /nonexistent/libkiln_runtime.so" in out


def test_sequences_of_a_run_read_one_slot_table(cuda) -> None:  # type: ignore[no-untyped-def]
    module = cuda.Module(b"kernel kiln_k0 2\nkernel kiln_k1 1\n")
    first = cuda.LaunchSequence([(module.function("kiln_k0"), (1, 1, 1), (32, 1, 1), 0, [2, 0])])
    second = cuda.LaunchSequence([(module.function("kiln_k1"), (2, 1, 1), (64, 1, 1), 0, [1])])
    table = cuda.SlotTable([0x7F0000001000, -1, 9])  # negative ints as two's complement
    assert table.count == 3
    f = fake()
    before = f.fake_cuda_launch_count()
    first.run(table, 0)
    second.run(table, 0)
    second.run([5, 6], 0)  # plain values still work: a table is made for the call
    assert f.fake_cuda_launch_count() == before + 3
    values = [f.fake_cuda_launch_values(before + i) for i in range(3)]
    assert [values[0][0], values[0][1]] == [9, 0x7F0000001000]
    assert [values[1][0], values[2][0]] == [2**64 - 1, 6]
    with pytest.raises(cuda.SequenceFailed, match="takes slot 1 of 1"):
        second.run(cuda.SlotTable([1]), 0)
    module.close()


def test_a_copy_runs_in_a_sequence_at_its_offsets(cuda) -> None:  # type: ignore[no-untyped-def]
    module = cuda.Module(b"kernel kiln_k0 1\n")
    seq = cuda.LaunchSequence([(module.function("kiln_k0"), (1, 1, 1), (32, 1, 1), 0, [0]),
                               (cuda.Copy(48, dst_offset=16, src_offset=8), [0, 1])])
    f = fake()
    before = f.fake_cuda_launch_count()
    seq.run(cuda.SlotTable([0x7F0000001000, 0x7F0000002000]), 0x99)
    assert f.fake_cuda_launch_count() == before + 2
    assert f.fake_cuda_launch_name(before + 1) == b"cuMemcpyDtoDAsync"
    values = f.fake_cuda_launch_values(before + 1)
    assert [values[0], values[1], values[2]] == [0x7F0000001010, 0x7F0000002008, 48]
    assert f.fake_cuda_launch_stream(before + 1) == 0x99
    with pytest.raises(cuda.CudaError, match="copy of 48 bytes: 1 parameters, not 2"):
        cuda.LaunchSequence([(cuda.Copy(48), [0])])
    with pytest.raises(cuda.CudaError, match="copy of 0 bytes: nothing to copy"):
        cuda.LaunchSequence([(cuda.Copy(0), [0, 1])])
    module.close()
