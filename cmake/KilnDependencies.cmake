# Every dependency comes from Debian's packages (deploy/bootstrap.sh installs them).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
find_package(RocksDB CONFIG REQUIRED)
find_package(nlohmann_json CONFIG REQUIRED)
find_package(CLI11 CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)
find_package(spdlog CONFIG REQUIRED)
find_package(LLVM 16 CONFIG REQUIRED PATHS /usr/lib/llvm-16/lib/cmake/llvm NO_DEFAULT_PATH)
# x86-64 code generation links LLVM by component (static libraries, never libLLVM-16.so)
# and LLD's ELF linker as a library (liblld-16-dev): artifacts are linked in process. sm_90
# code generation adds the NVPTX target, the bitcode reader and the linker (for libdevice).
llvm_map_components_to_libnames(KILN_LLVM_LIBS
  analysis asmprinter binaryformat bitreader bitwriter codegen core debuginfodwarf demangle
  instcombine ipo linker lto mc nvptxcodegen nvptxdesc nvptxinfo object option passes
  scalaropts support target targetparser transformutils vectorize x86asmparser x86codegen
  x86desc x86info)
# LLVM's exported link interfaces name zstd's CMake target, which Debian's zstd lacks.
if(NOT TARGET zstd::libzstd_shared)
  find_library(KILN_ZSTD_LIBRARY zstd REQUIRED)
  add_library(zstd::libzstd_shared SHARED IMPORTED)
  set_target_properties(zstd::libzstd_shared PROPERTIES IMPORTED_LOCATION ${KILN_ZSTD_LIBRARY})
endif()
find_library(KILN_LLD_ELF lldELF PATHS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)
find_library(KILN_LLD_COMMON lldCommon PATHS ${LLVM_LIBRARY_DIR} NO_DEFAULT_PATH REQUIRED)

find_program(KILN_PROTOC protoc REQUIRED)
find_program(KILN_GRPC_CPP_PLUGIN grpc_cpp_plugin REQUIRED)
find_program(KILN_GRPC_PYTHON_PLUGIN grpc_python_plugin)

# xxHash, header only (XXH_INLINE_ALL): the cache's in-memory checksums.
find_path(KILN_XXHASH_INCLUDE xxhash.h REQUIRED)

find_path(KILN_HTTPLIB_INCLUDE httplib.h REQUIRED)
# Debian builds cpp-httplib as a shared library; its header must see the same switches.
find_library(KILN_HTTPLIB_LIBRARY cpp-httplib REQUIRED)
add_library(kiln_httplib INTERFACE)
target_include_directories(kiln_httplib SYSTEM INTERFACE ${KILN_HTTPLIB_INCLUDE})
target_link_libraries(kiln_httplib INTERFACE ${KILN_HTTPLIB_LIBRARY})
target_compile_definitions(kiln_httplib INTERFACE CPPHTTPLIB_OPENSSL_SUPPORT
  CPPHTTPLIB_ZLIB_SUPPORT CPPHTTPLIB_BROTLI_SUPPORT)

# hiredis (libhiredis-dev): the RESP protocol for the shared cache tier on Redis Cluster.
find_path(KILN_HIREDIS_INCLUDE hiredis/hiredis.h REQUIRED)
find_library(KILN_HIREDIS_LIBRARY hiredis REQUIRED)
add_library(kiln_hiredis INTERFACE)
target_include_directories(kiln_hiredis SYSTEM INTERFACE ${KILN_HIREDIS_INCLUDE})
target_link_libraries(kiln_hiredis INTERFACE ${KILN_HIREDIS_LIBRARY})

# The CUDA toolkit (not a Debian package) supplies nvJitLink and libdevice for sm_90.
set(KILN_CUDA_HOME "$ENV{CUDA_HOME}")
if(NOT KILN_CUDA_HOME)
  set(KILN_CUDA_HOME /usr/local/cuda)
endif()
find_path(KILN_NVJITLINK_INCLUDE nvJitLink.h HINTS ${KILN_CUDA_HOME}/include NO_DEFAULT_PATH)
find_library(KILN_NVJITLINK_LIBRARY nvJitLink HINTS ${KILN_CUDA_HOME}/lib64 NO_DEFAULT_PATH)
find_file(KILN_LIBDEVICE libdevice.10.bc HINTS ${KILN_CUDA_HOME}/nvvm/libdevice NO_DEFAULT_PATH)
if(KILN_NVJITLINK_INCLUDE AND KILN_NVJITLINK_LIBRARY AND KILN_LIBDEVICE)
  set(KILN_HAVE_CUDA ON)
  message(STATUS "Kiln: nvJitLink at ${KILN_NVJITLINK_LIBRARY}")
else()
  set(KILN_HAVE_CUDA OFF)
  message(WARNING "Kiln: nvJitLink or libdevice not found under ${KILN_CUDA_HOME}; the sm_90 target is disabled")
endif()

if(KILN_BUILD_TESTS)
  find_package(GTest CONFIG REQUIRED)
  # zlib: the test corpus is gzipped.
  find_package(ZLIB REQUIRED)
endif()
if(KILN_BUILD_BENCHMARKS)
  find_package(benchmark CONFIG REQUIRED)
endif()
