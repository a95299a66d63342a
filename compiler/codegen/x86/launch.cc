#include "compiler/codegen/x86/launch.h"

namespace kiln::codegen::x86 {

using loop::IndexExpr;

LaunchSplit SplitForLaunch(const loop::Kernel& k) {
  LaunchSplit s;
  s.grid = IndexExpr::Const(1);
  const int32_t np = static_cast<int32_t>(k.parallel.size());
  if (loop::HasLoopStage(k) || np == 0) {
    s.outer_dims = np;
  } else if (np == 1) {
    s.outer_dims = 1;
    s.chunk = kChunk;
    s.grid = IndexExpr::FloorDiv(k.parallel[0] + IndexExpr::Const(kChunk - 1),
                                 IndexExpr::Const(kChunk), nullptr);
    return s;
  } else {
    s.outer_dims = np - 1;
  }
  for (int32_t i = 0; i < s.outer_dims; ++i) s.grid = s.grid * k.parallel[static_cast<size_t>(i)];
  return s;
}

}  // namespace kiln::codegen::x86
