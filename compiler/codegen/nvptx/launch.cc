#include "compiler/codegen/nvptx/launch.h"

#include <algorithm>

namespace kiln::codegen::nvptx {

using loop::IndexExpr;

IndexExpr PointsOf(const loop::Kernel& kernel) {
  IndexExpr points = IndexExpr::Const(1);
  for (const IndexExpr& e : kernel.parallel) points = points * e;
  return points;
}

int64_t ReductionThreads(const loop::Kernel& kernel) {
  if (kernel.reduction.empty() || !kernel.fusible) return 0;
  bool loops = false;
  for (const loop::Stage& s : kernel.stages) loops = loops || s.loops;
  if (!loops) return 0;
  IndexExpr total = IndexExpr::Const(1);
  for (const IndexExpr& e : kernel.reduction) total = total * e;
  if (!total.is_const()) return kBlockThreads;
  const int64_t n = total.const_value();
  if (n < kMinBlockReduction) return 0;
  int64_t threads = kMinBlockReduction;
  while (threads < n && threads < kBlockThreads) threads *= 2;
  return threads;
}

KernelSchedule ScheduleKernel(const loop::Kernel& kernel) {
  const IndexExpr points = PointsOf(kernel);
  if (const int64_t threads = ReductionThreads(kernel); threads > 0) {
    KernelSchedule s;
    s.grid = {points.is_const() ? IndexExpr::Const(std::min(kMaxBlocks, points.const_value()))
                                : IndexExpr::Min({points, IndexExpr::Const(kMaxBlocks)}, nullptr),
              IndexExpr::Const(1), IndexExpr::Const(1)};
    s.block = {IndexExpr::Const(threads), IndexExpr::Const(1), IndexExpr::Const(1)};
    return s;
  }
  IndexExpr blocks;
  if (points.is_const()) {
    const int64_t n = points.const_value();
    blocks = IndexExpr::Const(std::min(kMaxBlocks, (n + kBlockThreads - 1) / kBlockThreads));
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
