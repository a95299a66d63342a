#include "compiler/codegen/nvptx/specialize.h"

#include <utility>

#include "compiler/codegen/nvptx/launch.h"

namespace kiln::codegen::nvptx {
namespace {

using loop::Inst;
using loop::Opcode;

// Whether instruction `id` of `k` is p0 < c for a constant c >= `points`: true at every point
// of a walk over p0 in [0, points).
bool BelowAtLeast(const loop::Kernel& k, int32_t id, int64_t points) {
  const Inst& lt = k.insts[static_cast<size_t>(id)];
  if (lt.op != Opcode::kLt) return false;
  const Inst& point = k.insts[static_cast<size_t>(lt.a)];
  const Inst& bound = k.insts[static_cast<size_t>(lt.b)];
  return point.op == Opcode::kIndex && point.index == loop::IndexExpr::Var(0) &&
         bound.op == Opcode::kConst && bound.type == point.type && bound.iimm >= points;
}

// What of mask `id` remains over [0, points): -1 when it always holds, else the mask it
// reduces to.
int32_t Remaining(const loop::Kernel& k, int32_t id, int64_t points) {
  if (BelowAtLeast(k, id, points)) return -1;
  const Inst& both = k.insts[static_cast<size_t>(id)];
  if (both.op != Opcode::kAnd || both.type != loop::ScalarType::kBool) return id;
  if (BelowAtLeast(k, both.b, points)) return both.a;
  if (BelowAtLeast(k, both.a, points)) return both.b;
  return id;
}

}  // namespace

loop::Kernel DropSegmentBounds(loop::Kernel kernel) {
  if (SegmentsOf(kernel) < 2 || kernel.parallel.size() != 1 ||
      kernel.segment_points.size() != kernel.segments.size()) {
    return kernel;
  }
  for (size_t s = 0; s < kernel.segments.size(); ++s) {
    const int64_t points = kernel.segment_points[s];
    for (int32_t i = kernel.segments[s]; i < kernel.SegmentEnd(s); ++i) {
      Inst& in = kernel.insts[static_cast<size_t>(i)];
      if ((in.op == Opcode::kLoad || in.op == Opcode::kStore) && in.mask >= 0) {
        in.mask = Remaining(kernel, in.mask, points);
      }
    }
  }
  return kernel;
}

loop::Program Specialize(loop::Program program) {
  for (loop::Kernel& k : program.kernels) k = DropSegmentBounds(std::move(k));
  return program;
}

}  // namespace kiln::codegen::nvptx
