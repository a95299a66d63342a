#pragma once

// The compiler fingerprint: a SHA-256 (64 lowercase hex digits) over everything that makes up
// this build's compiler, so that compile keys change whenever the compiler could emit other
// code. It covers every source and header of kiln_compiler, the contract files outside
// compiler/ that its output depends on (proto/kernel_abi.h, the dtypes, the kiln.v1 graph,
// compile and artifact schemas) and the build settings that change what it emits (the C++
// compiler that built it, the LLVM it links). Generated at build time by
// cmake/fingerprint.cmake (see compiler/CMakeLists.txt for the list of inputs); an unchanged
// rebuild gives the same value on any machine and in any source directory.

namespace kiln::canon {

extern const char kCompilerFingerprint[];

}  // namespace kiln::canon
