#include "compiler/codegen/nvptx/launch.h"

#include <algorithm>
#include <vector>

#include "compiler/codegen/llvm/point_runs.h"

namespace kiln::codegen::nvptx {

using loop::IndexExpr;

namespace {

// Whether `kernel` has few points (each segment's own, where it has them) and a segment of many
// instructions: what VectorLanes runs a point a thread.
bool SmallAndLong(const loop::Kernel& kernel) {
  const size_t segments = std::max<size_t>(1, kernel.segments.size());
  int64_t points = 0;
  if (kernel.segment_points.size() == segments) {
    for (const int64_t p : kernel.segment_points) points += p;
  } else {
    const IndexExpr all = PointsOf(kernel, 1);
    if (!all.is_const()) return false;
    points = all.const_value() * static_cast<int64_t>(segments);
  }
  if (points > kMaxScalarPoints) return false;
  for (size_t s = 0; s < segments; ++s) {
    const int32_t begin = kernel.segments.empty() ? 0 : kernel.segments[s];
    const int32_t end =
        kernel.segments.empty() ? static_cast<int32_t>(kernel.insts.size()) : kernel.SegmentEnd(s);
    if (static_cast<size_t>(end - begin) >= kMinScalarInsts) return true;
  }
  return false;
}

}  // namespace

int32_t VectorLanes(const loop::Program& program, const loop::Kernel& kernel) {
  if (kernel.parallel.empty() || !kernel.reduction.empty() || loop::HasLoopStage(kernel) ||
      !kernel.fusible || SmallAndLong(kernel)) {
    return 1;
  }
  const int32_t dim = static_cast<int32_t>(kernel.parallel.size() - 1);
  int32_t narrowest = 0, widest = 0;
  std::vector<int32_t> stores;  // the contiguous stores
  for (size_t i = 0; i < kernel.insts.size(); ++i) {
    const loop::Inst& in = kernel.insts[i];
    if (!WalksContiguously(in, dim)) continue;
    if (in.op == loop::Opcode::kStore) stores.push_back(static_cast<int32_t>(i));
    const int32_t size =
        loop::ByteSize(loop::ScalarTypeOf(program.buffers[static_cast<size_t>(in.buffer)].dtype));
    narrowest = narrowest == 0 ? size : std::min(narrowest, size);
    widest = std::max(widest, size);
  }
  if (widest == 0) return 1;
  int32_t lanes = std::min(kVectorBytes / narrowest, 2 * kVectorBytes / widest);
  if (const IndexExpr& extent = kernel.parallel.back(); extent.is_const()) {
    while (lanes > 1 && lanes > extent.const_value()) lanes /= 2;
  }
  if (lanes < 2) return 1;
  const PointRuns runs = PlanPointRuns(program, kernel, dim, lanes, kVectorBytes);
  if (runs.vectors.empty()) return 1;
  // Every contiguous store must become a vector (see the header).
  size_t vector_stores = 0;
  for (const VectorAccess& v : runs.vectors) {
    vector_stores += std::binary_search(stores.begin(), stores.end(), v.inst);
  }
  return vector_stores == stores.size() ? lanes : 1;
}

IndexExpr PointsOf(const loop::Kernel& kernel, int32_t lanes) {
  IndexExpr points = IndexExpr::Const(1);
  for (size_t d = 0; d < kernel.parallel.size(); ++d) {
    IndexExpr extent = kernel.parallel[d];
    if (lanes > 1 && d + 1 == kernel.parallel.size()) {
      extent = extent.is_const() ? IndexExpr::Const((extent.const_value() + lanes - 1) / lanes)
                                 : IndexExpr::CeilDiv(extent, IndexExpr::Const(lanes), nullptr);
    }
    points = points * extent;
  }
  return points;
}

namespace {

// Whether the index of `in` (or a data-dependent term of it) involves loop variable `var`.
bool Involves(const loop::Inst& in, int32_t var) {
  std::vector<int32_t> vars;
  in.index.CollectVars(&vars);
  for (const loop::DynIndex& d : in.dyn) d.stride.CollectVars(&vars);
  return std::find(vars.begin(), vars.end(), var) != vars.end();
}

// Whether some load of a looping stage of `kernel` steps through consecutive elements of its
// buffer as loop variable `var` steps, counting only loads that also involve variable `along`
// when it is not -1.
bool LoopLoadsWalk(const loop::Kernel& kernel, int32_t var, int32_t along = -1) {
  for (const loop::Stage& s : kernel.stages) {
    if (!s.loops) continue;
    for (int32_t i = s.begin; i < s.end; ++i) {
      const loop::Inst& in = kernel.insts[static_cast<size_t>(i)];
      if (in.op == loop::Opcode::kLoad && WalksContiguously(in, var) &&
          (along < 0 || Involves(in, along))) {
        return true;
      }
    }
  }
  return false;
}

// The blocks each of `segments` segments gets for `points` points a thread each.
int64_t BlocksPerSegment(int64_t points, int64_t segments) {
  return std::min(kMaxGridBlocks / segments, (points + kBlockThreads - 1) / kBlockThreads);
}

// The elements of each point's reduction.
IndexExpr ReductionElements(const loop::Kernel& kernel) {
  IndexExpr total = IndexExpr::Const(1);
  for (const IndexExpr& e : kernel.reduction) total = total * e;
  return total;
}

}  // namespace

ReductionSplit SplitOf(const loop::Kernel& kernel) {
  if (kernel.reduction.empty() || !kernel.fusible || !loop::HasLoopStage(kernel)) return {};
  const IndexExpr total = ReductionElements(kernel);
  const IndexExpr points = PointsOf(kernel, 1);
  const bool few = points.is_const() && points.const_value() * 32 < kFewRowsThreads;
  if (total.is_const() && total.const_value() < kMinBlockReduction) {
    if (!points.is_const() || points.const_value() >= kFewPointThreads ||
        total.const_value() < kMinFewRowsReduction) {
      return {};
    }
    return {.threads = kBlockThreads, .points = kBlockThreads / 32};
  }
  const int32_t np = static_cast<int32_t>(kernel.parallel.size());
  const int32_t innermost_reduction = kernel.num_vars() - 1;
  // A load that walks the rows but is the same for every column (a layer norm's mean and rstd
  // beside the columns of its weight gradient) is one broadcast read for a warp of columns.
  if (np > 0 && LoopLoadsWalk(kernel, np - 1) &&
      !LoopLoadsWalk(kernel, innermost_reduction, np - 1)) {
    const IndexExpr& columns = kernel.parallel.back();
    if (!columns.is_const() || columns.const_value() >= kMinColumnPoints) {
      const bool long_columns = !total.is_const() || total.const_value() >= kMinColumnBlockRows;
      const bool wide = columns.is_const() && columns.const_value() >= kColumnPoints &&
                        total.is_const() &&
                        columns.const_value() * total.const_value() >= kMinCutElements;
      return {.threads = long_columns ? kColumnThreads : kBlockThreads,
              .points = wide ? kColumnPoints : kMinColumnPoints,
              .column = true};
    }
  }
  if (!total.is_const()) return {.threads = kBlockThreads};
  const int64_t n = total.const_value();
  int64_t per_thread = 1;
  if (n <= kMaxWarpReduction) {
    if (!few || n < kMinRowThreads * kRowElementsPerThread) {
      return {.threads = kBlockThreads, .points = kBlockThreads / 32};
    }
    per_thread = kRowElementsPerThread;
  }
  int64_t threads = kMinRowThreads;
  while (threads * per_thread < n && threads < kBlockThreads) threads *= 2;
  return {.threads = threads};
}

int64_t ReductionParts(const loop::Kernel& kernel) {
  const ReductionSplit split = SplitOf(kernel);
  const IndexExpr points = PointsOf(kernel, 1);
  const IndexExpr total = ReductionElements(kernel);
  if (split.threads == 0 || !points.is_const() || !total.is_const()) return 1;
  const int64_t blocks = (points.const_value() + split.points - 1) / split.points;
  const int64_t threads = std::min(blocks, kMaxBlocks) * split.threads;
  const int64_t n = total.const_value();
  if (threads >= kResidentThreads || points.const_value() * n < kMinCutElements) return 1;
  const int64_t wanted = (2 * kResidentThreads + threads - 1) / threads;
  return std::max<int64_t>(1, std::min({wanted, n / kMinPartElements, kMaxReductionParts}));
}

int64_t SegmentsOf(const loop::Kernel& kernel) {
  if (kernel.segments.size() < 2 || !kernel.reduction.empty() || kernel.stages.size() != 1 ||
      kernel.stages[0].loops || !kernel.fusible) {
    return 1;
  }
  for (const IndexExpr& e : kernel.parallel) {
    if (!e.is_const()) return 1;
  }
  return static_cast<int64_t>(kernel.segments.size());
}

std::vector<int64_t> SegmentBlocks(const loop::Program& program, const loop::Kernel& kernel) {
  const int32_t lanes = VectorLanes(program, kernel);
  const IndexExpr points = PointsOf(kernel, lanes);
  const int64_t segments = SegmentsOf(kernel);
  if (!points.is_const()) return std::vector<int64_t>(static_cast<size_t>(segments), 0);
  std::vector<int64_t> blocks;
  for (int64_t s = 0; s < segments; ++s) {
    const bool narrowed =
        segments > 1 && kernel.segment_points.size() == static_cast<size_t>(segments);
    const int64_t own = !narrowed
                            ? points.const_value()
                            : (kernel.segment_points[static_cast<size_t>(s)] + lanes - 1) / lanes;
    blocks.push_back(BlocksPerSegment(own, segments));
  }
  return blocks;
}

KernelSchedule ScheduleKernel(const loop::Program& program, const loop::Kernel& kernel) {
  if (const ReductionSplit split = SplitOf(kernel); split.threads > 0) {
    const IndexExpr points = PointsOf(kernel, 1);
    KernelSchedule s;
    if (points.is_const()) {
      const int64_t groups = (points.const_value() + split.points - 1) / split.points;
      s.grid = {IndexExpr::Const(std::min(kMaxBlocks, groups)), IndexExpr::Const(1),
                IndexExpr::Const(1)};
    } else {
      const IndexExpr groups =
          split.points == 1 ? points
                            : IndexExpr::CeilDiv(points, IndexExpr::Const(split.points), nullptr);
      s.grid = {IndexExpr::Min({groups, IndexExpr::Const(kMaxBlocks)}, nullptr),
                IndexExpr::Const(1), IndexExpr::Const(1)};
    }
    s.block = {IndexExpr::Const(split.threads), IndexExpr::Const(1), IndexExpr::Const(1)};
    return s;
  }
  const IndexExpr points = PointsOf(kernel, VectorLanes(program, kernel));
  IndexExpr blocks;
  if (points.is_const()) {
    int64_t total = 0;
    for (int64_t b : SegmentBlocks(program, kernel)) total += b;
    blocks = IndexExpr::Const(total);
  } else {
    blocks = IndexExpr::FloorDiv(points + IndexExpr::Const(kBlockThreads - 1),
                                 IndexExpr::Const(kBlockThreads), nullptr);
  }
  KernelSchedule s;
  s.grid = {blocks, IndexExpr::Const(1), IndexExpr::Const(1)};
  s.block = {IndexExpr::Const(kBlockThreads), IndexExpr::Const(1), IndexExpr::Const(1)};
  return s;
}

}  // namespace kiln::codegen::nvptx
