#include "compiler/codegen/nvptx/launch.h"

#include <algorithm>

namespace kiln::codegen::nvptx {

using loop::IndexExpr;

IndexExpr PointsOf(const loop::Kernel& kernel) {
  IndexExpr points = IndexExpr::Const(1);
  for (const IndexExpr& e : kernel.parallel) points = points * e;
  return points;
}

KernelSchedule ScheduleKernel(const loop::Kernel& kernel) {
  const IndexExpr points = PointsOf(kernel);
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
