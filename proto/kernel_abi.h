#pragma once

// The calling convention between kernels Kiln generates and the runtimes that launch them.
// It is part of the wire contract: a CompiledGraph's kernels follow it, so a client built
// from another Kiln version still calls them correctly (ABI changes bump kKernelAbiVersion,
// which goes into compile keys).
//
// x86-64 (BINARY_KIND_SHARED_OBJECT): each kernel is an exported C function
//
//     void <Kernel.name>(void* const* params, int64_t begin, int64_t end);
//
// `params[i]` is the i-th KernelParam: for PARAM_KIND_BUFFER the address of the buffer's
// first byte (buffers are 64-byte aligned); for PARAM_KIND_SYMBOL, _RNG_SEED and _RNG_OFFSET
// the address of an int64_t holding the value; for PARAM_KIND_SCALAR the address of the
// value in its Argument's type (int64_t or double). The kernel computes the iterations
// [begin, end) of its outermost parallel loop, whose extent is LaunchConfig.grid[0]; the
// runtime may split that range across threads in any way, so iterations never depend on
// each other. The shared object needs nothing but libc and libm.
//
// CUDA (BINARY_KIND_CUBIN/PTX): each kernel is a PTX entry `<Kernel.name>` whose parameters
// are the KernelParams in order, each passed by value: PARAM_KIND_BUFFER as the buffer's
// device address (a 64-bit pointer), PARAM_KIND_SYMBOL, _RNG_SEED and _RNG_OFFSET as int64_t,
// PARAM_KIND_SCALAR in its Argument's type (int64_t or double). So cuLaunchKernel's
// kernelParams is exactly `params` above: kernelParams[i] is the address of the i-th value.
// Grid and block come from LaunchConfig; the kernel computes every point of its range for
// any grid (it strides over the range by the grid's size), and a grid of 0 blocks is not
// launched.

#include <cstdint>

namespace kiln {

inline constexpr int kKernelAbiVersion = 1;

// The signature of an x86-64 kernel entry.
using CpuKernelFn = void (*)(void* const* params, int64_t begin, int64_t end);

// Alignment of every buffer the runtime allocates, in bytes.
inline constexpr int kBufferAlignment = 64;

}  // namespace kiln
