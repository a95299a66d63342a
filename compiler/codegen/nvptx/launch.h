#pragma once

// How a kernel runs on an sm_90 GPU, and so how its entry walks its parallel space. Every
// kernel is one flat range: its parallel dimensions flattened row-major into `points`. Each
// thread takes point blockIdx.x * blockDim.x + threadIdx.x and then every
// gridDim.x * blockDim.x-th point after it (a grid-stride loop), so any grid computes every
// point exactly once. A point of a reduction is one row, which its thread reduces on its own,
// or, for reductions long enough, the threads of a block or of a warp split it (SplitOf): then
// block blockIdx.x takes the block's group of points blockIdx.x and every gridDim.x-th group
// after it. A point of a pointwise kernel is a run of
// VectorLanes consecutive elements along its innermost dimension (the innermost extent counts
// runs, the last of a row possibly short), or one element for a kernel without runs.
//
// Blocks have kBlockThreads threads; a kernel without a block per point is compiled for that
// block size and must be launched with the block its schedule gives. A pointwise kernel gets a
// thread per point, its grid as many blocks as that takes (up to the hardware's limit, past
// which it strides): a streaming kernel keeps the most loads in flight when every thread issues
// its one run's loads and exits, while a grid-stride loop over a few waves of blocks has each
// thread wait on a load before issuing the next (bf16 to float32 on an H200: 0.62 of a copy's
// bandwidth striding, 0.89 a thread per run). A split reduction's grid, a block per group of
// points, covers every group once up to kMaxBlocks blocks (a few waves over the H100's 132
// SMs) and strides past that. A range with symbolic extent gets one thread (or group) per
// point. A range of
// zero points gives a grid of 0, which the runtime does not launch. Pure functions.

#include <cstdint>

#include "compiler/codegen/backend.h"
#include "compiler/loop/index_expr.h"
#include "compiler/loop/ir.h"

namespace kiln::codegen::nvptx {

inline constexpr int64_t kBlockThreads = 256;
inline constexpr int64_t kStreamingMultiprocessors = 132;
inline constexpr int64_t kBlocksPerMultiprocessor = 8;
inline constexpr int64_t kMaxBlocks = kStreamingMultiprocessors * kBlocksPerMultiprocessor;
// The most blocks a pointwise kernel's grid has: the hardware's limit on grid x.
inline constexpr int64_t kMaxGridBlocks = (int64_t{1} << 31) - 1;

// The widest access of sm_90: ld/st.global.v4 of 32-bit words.
inline constexpr int32_t kVectorBytes = 16;

// The elements each point of `kernel`, a kernel of `program`, covers along its innermost
// parallel dimension: a power of two, 1 for a kernel without runs. A kernel gets runs when it
// is pointwise (no reduction dimension, and its stores land where its indices say rather than
// where data says) and some load or store of it walks memory contiguously along the innermost
// dimension with an alignment that can hold (codegen/llvm/point_runs.h); those accesses become
// vector accesses of the whole run, where the run's buffers are aligned (kernel_abi.h). A
// kernel with a contiguous store that cannot align (rows of an odd length) gets no runs: in a
// run, that store would be one per element with a warp's lanes `lanes` elements apart, each
// instruction writing a sector per lane for two of its bytes. GPT-2 124M bf16's copy of the
// logits out of their padded rows took 474 us so on an H200, 314-325 us a point a thread, and
// 112 us walking its rows as one flat range in aligned runs (fuse::FlattenUnalignedRows,
// which the coalesce phase applies first). A load that cannot align keeps the runs: its
// lanes' sectors stay in L1 for the run's next elements, and the copy into padded rows took
// 0.19 ms longer a point a thread (each thread's two bytes at a time).
//
// The run is as long as makes the narrowest such access kVectorBytes wide (4 f32, 8 bf16, 16
// bytes), so that narrow types move 16 bytes per instruction as wide ones do, up to where the
// widest takes two such accesses (8 f32 beside bf16, 4 f64): longer runs would only hold more
// registers per thread. A constant innermost extent shorter than that shortens the run to the
// largest power of two that fits.
//
// A small kernel whose points compute much gets no runs (kMaxScalarPoints, kMinScalarInsts):
// a run's code is a point's times its lanes, one straight line each thread fetches anew, and
// such a kernel's time goes to fetching it rather than to memory. AdamW's update over 192
// parameters took 3.5 us in runs of 4 (48 threads, half their cycles stalled on instruction
// fetch), as long as Inductor's kernel for every parameter of the model.
int32_t VectorLanes(const loop::Program& program, const loop::Kernel& kernel);

// Kernels of at most this many points (counting each segment's own) and at least
// kMinScalarInsts instructions in a segment run a point a thread (VectorLanes): half the
// threads the machine holds at once, so every point still gets a thread of its own.
inline constexpr int64_t kMaxScalarPoints = kStreamingMultiprocessors * 1024;
inline constexpr size_t kMinScalarInsts = 32;

// The number of points of `kernel` when each covers `lanes` elements of its innermost
// dimension: the product of its parallel extents, the innermost one divided by `lanes`
// rounded up (1 without any dimension).
loop::IndexExpr PointsOf(const loop::Kernel& kernel, int32_t lanes);

// Reductions shorter than this stay in one thread per point. From a warp's width on, a warp
// per point reads each row with one access and combines it in five shuffles, where one
// thread walks the row in turn (a layer norm over rows of 32 took 6.6 us in one thread per
// row against 2 us for Inductor's kernel).
inline constexpr int64_t kMinBlockReduction = 32;
// Unless a thread each would leave SMs idle (fewer points than kFewPointThreads, two warps on
// each SM): then rows of this many or more get a warp each too. ResNet-18's last batch norms
// sum 16 elements into each of 512 channels, which a thread each ran on 2 of 132 SMs;
// EfficientNet's into 1,152, on 5. A 3x3 max pool's 32,768 windows keep a thread each: a
// warp each ran 4 times slower, 23 of its lanes idle.
inline constexpr int64_t kMinFewRowsReduction = 8;
inline constexpr int64_t kFewPointThreads = kStreamingMultiprocessors * 64;
// Rows up to this long are reduced by one warp each (shuffles only, no barrier); longer ones
// by a block of kMinRowThreads to kBlockThreads threads.
inline constexpr int64_t kMaxWarpReduction = 1024;
inline constexpr int64_t kMinRowThreads = 64;
// Rows of kMinRowThreads * kRowElementsPerThread or more elements get a block each, not a warp,
// when a warp each would give the kernel fewer threads than kFewRowsThreads (a block on each SM):
// batch norm's per-channel sums of 64 rows of 1,024 took 8 blocks, each thread walking 32
// elements, where 64 blocks of 256 threads walk 4 each.
inline constexpr int64_t kFewRowsThreads = kStreamingMultiprocessors * kBlockThreads;
inline constexpr int64_t kRowElementsPerThread = 4;
// Points a block takes together when its lanes walk neighbouring points (a column
// reduction). A reduction large enough to be cut into parts (ReductionParts) takes
// kColumnPoints: a warp's 32 lanes then read 128 contiguous bytes of one row of f32, a whole
// line, where 8 points read a 32-byte sector of each of four rows and left a fifth of the
// memory system's bandwidth unused, and the parts make up for the fewer blocks. Others, and
// symbolic ones, take kMinColumnPoints (8 f32 are one sector), which keeps four times the
// blocks.
inline constexpr int64_t kColumnPoints = 32;
inline constexpr int64_t kMinColumnPoints = 8;
// The threads of a block that splits columns of kMinColumnBlockRows or more rows: a sum down
// 1,024 columns then keeps 32 warps of loads in flight on each of its 128 blocks' SMs, where
// kBlockThreads left three quarters of the memory system idle. Such kernels are compiled to
// use at most 64 registers a thread (maxntid), which that many threads need.
inline constexpr int64_t kColumnThreads = 1024;
inline constexpr int64_t kMinColumnBlockRows = 1024;
// The most elements of a split reduction one thread takes in an unrolled loop
// (KernelAbi::SplitTrips): a row of 1,024 for a warp, of 8,192 for a block.
inline constexpr int64_t kMaxUnrolledTrips = 32;

// How the threads of a block share the points of a kernel whose reductions they split: the
// block computes `points` points at once, `slices()` threads each, each thread taking every
// slices()-th element of the point's flattened reduction space from its slice on (of each
// row of the innermost reduction dimension, when there are several dimensions and that row
// is constant and at least slices() long: no division per element).
//  - rows (column false): thread t is slice t % slices() of point t / slices(), so a point's
//    threads are neighbouring lanes: for reductions along contiguous memory, whose lanes then
//    read neighbouring elements. A block per point (points 1) for long rows, a warp per point
//    (slices 32) for rows up to kMaxWarpReduction.
//  - columns: thread t is slice t / points of point t % points, so neighbouring lanes take
//    neighbouring points: for reductions across rows whose points are contiguous in memory
//    (a sum over the batch), which read each row's points with one warp-wide access instead
//    of one access per thread.
// Partials combine in an order fixed by the layout (kernel_abi.h), so results do not vary
// between runs.
struct ReductionSplit {
  int64_t threads = 0;  // the block's threads; 0 when each point is one thread's
  int64_t points = 1;   // points per block
  bool column = false;
  int64_t slices() const { return threads / points; }
};

// How `kernel`'s threads share its points. A kernel splits its reductions when it reduces over
// kMinBlockReduction or more elements (kMinFewRowsReduction for fewer than kFewPointThreads
// points, or a symbolic count) and its loops store nowhere data
// decides (a scatter adds into rows in order, so its threads must own whole columns). Its
// reductions are columns when some load of a looping stage walks memory contiguously along the
// innermost parallel dimension (of kMinColumnPoints or more points) and none that depends on that
// dimension walks along the innermost reduction dimension (a layer norm's weight gradient reads
// its rows' mean and rstd, the same for every column, beside the columns: GPT-2 124M's took
// 18.4 us on an H200 split as rows, each block walking one column 768 elements apart). Rows of
// kMaxWarpReduction or fewer get a warp each, unless there are so few of them that a block each
// fills more of the machine (kFewRowsThreads); longer rows, and those, kMinRowThreads to
// kBlockThreads threads, a power of two, the fewest that cover a constant reduction (at
// kRowElementsPerThread elements a thread, for the few short ones).
ReductionSplit SplitOf(const loop::Kernel& kernel);

// The threads of a block of `kernel` when they split its reductions (SplitOf), else 0.
inline int64_t ReductionThreads(const loop::Kernel& kernel) { return SplitOf(kernel).threads; }

// The threads an H100 holds at once: 2,048 on each SM.
inline constexpr int64_t kResidentThreads = kStreamingMultiprocessors * 2048;
// A reduction whose blocks hold fewer threads than the machine does is cut into parts
// (fuse/split_reductions.h) when it reads at least this many elements: below it, the second
// kernel's launch costs about what the idle SMs do.
inline constexpr int64_t kMinCutElements = int64_t{1} << 20;
// Each part keeps at least this many elements of a point's reduction: 8 rows for each thread of
// a column split's block.
inline constexpr int64_t kMinPartElements = 256;
inline constexpr int64_t kMaxReductionParts = 1024;

// Into how many parts `kernel` should cut its reduction (codegen::Backend::ReductionParts):
// for a kernel that splits its reductions (SplitOf) over a constant space whose blocks hold
// fewer than kResidentThreads threads and that reads kMinCutElements or more, enough parts
// for about twice kResidentThreads (two waves of blocks, so that no SM waits out a long tail),
// as far as kMinPartElements and kMaxReductionParts allow; else 1.
int64_t ReductionParts(const loop::Kernel& kernel);

// How many segments of `kernel` (loop::Kernel::segments) get blocks of their own: all of
// them for a kernel of one stage that does not reduce, over a constant space (fusion joins
// independent kernels only over small constant spaces), else 1. Each segment then has the
// blocks SegmentBlocks gives it, in segment order along the grid, walking its points as a
// kernel of its own would: the kernel's points, or its own first ones where fusion joined
// kernels of different extents (loop::Kernel::segment_points). The segments' memory
// latencies overlap, where one thread running them one after the other would wait out each.
// SegmentBlocks gives 0 blocks for a kernel over a symbolic space (which has one segment).
int64_t SegmentsOf(const loop::Kernel& kernel);
std::vector<int64_t> SegmentBlocks(const loop::Program& program, const loop::Kernel& kernel);

// One thread per point: grid {blocks, 1, 1} (times SegmentsOf), block {kBlockThreads, 1, 1},
// with points of VectorLanes elements. Split reductions (SplitOf): grid {points / split.points
// rounded up, at most kMaxBlocks}, block {split.threads, 1, 1}.
KernelSchedule ScheduleKernel(const loop::Program& program, const loop::Kernel& kernel);

}  // namespace kiln::codegen::nvptx
