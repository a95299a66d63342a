#include "compiler/fuse/split_reductions.h"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::fuse {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;

bool Combinable(loop::ReduceKind kind) {
  switch (kind) {
    case loop::ReduceKind::kSum:
    case loop::ReduceKind::kProd:
    case loop::ReduceKind::kMax:
    case loop::ReduceKind::kMin:
    case loop::ReduceKind::kAny:
    case loop::ReduceKind::kAll:
      return true;
    case loop::ReduceKind::kArgMax:
    case loop::ReduceKind::kArgMin:
      return false;
  }
  return false;
}

bool AllConst(const std::vector<IndexExpr>& extents) {
  return std::all_of(extents.begin(), extents.end(),
                     [](const IndexExpr& e) { return e.is_const(); });
}

// The stage of `k` whose reduction can be cut (split_reductions.h), or -1.
int LoopStageToCut(const Kernel& k) {
  if (!k.fusible || k.reduction.empty() || !AllConst(k.parallel) || !AllConst(k.reduction)) {
    return -1;
  }
  int found = -1;
  int32_t next = 0;
  for (size_t s = 0; s < k.stages.size(); ++s) {
    if (k.stages[s].begin != next) return -1;  // stages cover the instructions in order
    next = k.stages[s].end;
    if (!k.stages[s].loops) continue;
    if (found >= 0) return -1;
    found = static_cast<int>(s);
  }
  if (found < 0 || next != static_cast<int32_t>(k.insts.size())) return -1;
  const loop::Stage& loop = k.stages[static_cast<size_t>(found)];
  bool reduces = false;
  for (int32_t i = 0; i < static_cast<int32_t>(k.insts.size()); ++i) {
    const Inst& in = k.insts[static_cast<size_t>(i)];
    if (i < loop.begin && in.op == Opcode::kStore) return -1;
    if (i >= loop.begin && i < loop.end && in.op == Opcode::kReduce) {
      if (!Combinable(in.reduce)) return -1;
      reduces = true;
    }
    if (i < loop.end) continue;
    bool uses_loop_value = false;
    loop::ForEachOperand(in, [&](int32_t v) {
      uses_loop_value |=
          v >= loop.begin && v < loop.end && k.insts[static_cast<size_t>(v)].op != Opcode::kReduce;
    });
    if (uses_loop_value) return -1;
  }
  return reduces ? found : -1;
}

struct Cut {
  int32_t dim = -1;    // the reduction dimension cut
  int64_t parts = 1;   // into this many slices
  int32_t stage = -1;  // the looping stage
};

// The dimension that takes the most parts up to `wanted`, as a divisor of its extent.
Cut ChooseCut(const Kernel& k, int64_t wanted) {
  Cut best;
  for (size_t d = 0; d < k.reduction.size(); ++d) {
    const int64_t extent = k.reduction[d].const_value();
    int64_t parts = std::min(wanted, extent);
    while (parts > 1 && extent % parts != 0) --parts;
    if (parts > best.parts) best = {static_cast<int32_t>(d), parts};
  }
  return best;
}

// The row-major position of the point whose parallel variables are first_var.. over
// `extents`, and the number of points.
IndexExpr FlatPoint(const std::vector<IndexExpr>& extents, int32_t first_var) {
  IndexExpr flat, stride = IndexExpr::Const(1);
  for (size_t d = extents.size(); d-- > 0;) {
    flat = flat + IndexExpr::Var(first_var + static_cast<int32_t>(d)) * stride;
    stride = stride * extents[d];
  }
  return flat;
}

int64_t PointCount(const Kernel& k) {
  int64_t points = 1;
  for (const IndexExpr& e : k.parallel) points *= e.const_value();
  return points;
}

std::vector<int32_t> ReducesOf(const Kernel& k, const loop::Stage& loop) {
  std::vector<int32_t> out;
  for (int32_t i = loop.begin; i < loop.end; ++i) {
    if (k.insts[static_cast<size_t>(i)].op == Opcode::kReduce) out.push_back(i);
  }
  return out;
}

// The kernel's points times cut.parts, each reducing its slice and storing the partials
// (one buffer per reduce result, `partials`).
Kernel PartsKernel(const Kernel& k, const Cut& cut, const std::vector<int32_t>& partials) {
  const loop::Stage& loop = k.stages[static_cast<size_t>(cut.stage)];
  const int32_t np = static_cast<int32_t>(k.parallel.size());
  const int64_t slice = k.reduction[static_cast<size_t>(cut.dim)].const_value() / cut.parts;
  Kernel out;
  out.name = k.name;
  out.nodes = k.nodes;
  out.parallel.push_back(IndexExpr::Const(cut.parts));
  out.parallel.insert(out.parallel.end(), k.parallel.begin(), k.parallel.end());
  out.reduction = k.reduction;
  out.reduction[static_cast<size_t>(cut.dim)] = IndexExpr::Const(slice);
  // Point variables move one place in for the part; the cut dimension's variable becomes the
  // part's first index plus the position within its slice.
  auto var = [&](int32_t v) {
    if (v < np) return IndexExpr::Var(v + 1);
    const IndexExpr inner = IndexExpr::Var(v + 1);
    return v - np == cut.dim ? IndexExpr::Var(0) * IndexExpr::Const(slice) + inner : inner;
  };
  const loop::VarExtents extents = out.Extents();
  for (int32_t i = 0; i < loop.end; ++i) {
    Inst in = k.insts[static_cast<size_t>(i)];
    if (in.op == Opcode::kLoad || in.op == Opcode::kStore || in.op == Opcode::kIndex) {
      in.index = in.index.SubstituteVars(var, extents);
    }
    for (loop::DynIndex& d : in.dyn) d.stride = d.stride.SubstituteVars(var, extents);
    out.insts.push_back(std::move(in));
  }
  out.stages.assign(k.stages.begin(), k.stages.begin() + cut.stage + 1);
  const IndexExpr at =
      IndexExpr::Var(0) * IndexExpr::Const(PointCount(k)) + FlatPoint(k.parallel, 1);
  const std::vector<int32_t> reduces = ReducesOf(k, loop);
  for (size_t j = 0; j < reduces.size(); ++j) {
    Inst store;
    store.op = Opcode::kStore;
    store.type = k.insts[static_cast<size_t>(reduces[j])].type;
    store.a = reduces[j];
    store.buffer = partials[j];
    store.index = at;
    out.insts.push_back(std::move(store));
  }
  out.stages.push_back({false, loop.end, static_cast<int32_t>(out.insts.size())});
  return out;
}

// The kernel's own points, each reducing its partials in order, then its epilogue.
Kernel CombineKernel(const Kernel& k, const Cut& cut, const std::vector<int32_t>& partials) {
  const loop::Stage& loop = k.stages[static_cast<size_t>(cut.stage)];
  const int32_t np = static_cast<int32_t>(k.parallel.size());
  Kernel out;
  out.name = k.name;
  out.nodes = k.nodes;
  out.parallel = k.parallel;
  out.reduction = {IndexExpr::Const(cut.parts)};
  std::vector<int32_t> map(k.insts.size(), -1);
  for (int32_t i = 0; i < loop.begin; ++i) {
    out.insts.push_back(k.insts[static_cast<size_t>(i)]);
    map[static_cast<size_t>(i)] = i;
  }
  out.stages.assign(k.stages.begin(), k.stages.begin() + cut.stage);
  const IndexExpr at =
      IndexExpr::Var(np) * IndexExpr::Const(PointCount(k)) + FlatPoint(k.parallel, 0);
  const std::vector<int32_t> reduces = ReducesOf(k, loop);
  for (size_t j = 0; j < reduces.size(); ++j) {
    const Inst& original = k.insts[static_cast<size_t>(reduces[j])];
    Inst load;
    load.op = Opcode::kLoad;
    load.type = original.type;
    load.buffer = partials[j];
    load.index = at;
    out.insts.push_back(std::move(load));
    Inst reduce;
    reduce.op = Opcode::kReduce;
    reduce.type = original.type;
    reduce.reduce = original.reduce;
    reduce.a = static_cast<int32_t>(out.insts.size() - 1);
    out.insts.push_back(std::move(reduce));
    map[static_cast<size_t>(reduces[j])] = static_cast<int32_t>(out.insts.size() - 1);
  }
  out.stages.push_back({true, loop.begin, static_cast<int32_t>(out.insts.size())});
  const int32_t shift = static_cast<int32_t>(out.insts.size()) - loop.end;
  for (int32_t i = loop.end; i < static_cast<int32_t>(k.insts.size()); ++i) {
    Inst in = k.insts[static_cast<size_t>(i)];
    loop::RemapOperands(&in, map);
    map[static_cast<size_t>(i)] = static_cast<int32_t>(out.insts.size());
    out.insts.push_back(std::move(in));
  }
  for (size_t s = static_cast<size_t>(cut.stage) + 1; s < k.stages.size(); ++s) {
    out.stages.push_back({false, k.stages[s].begin + shift, k.stages[s].end + shift});
  }
  return out;
}

}  // namespace

loop::Program SplitReductions(loop::Program program, const ReductionPartsFn& parts) {
  std::vector<Cut> cuts(program.kernels.size());
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    const Kernel& k = program.kernels[i];
    const int stage = LoopStageToCut(k);
    if (stage < 0) continue;
    const int64_t wanted = parts(program, k);
    if (wanted < 2) continue;
    cuts[i] = ChooseCut(k, wanted);
    cuts[i].stage = stage;
  }
  std::vector<Kernel> kernels;
  std::vector<std::vector<int32_t>> renumbered(program.kernels.size());
  for (size_t i = 0; i < program.kernels.size(); ++i) {
    Kernel& k = program.kernels[i];
    const Cut& cut = cuts[i];
    renumbered[i].push_back(static_cast<int32_t>(kernels.size()));
    if (cut.parts < 2) {
      kernels.push_back(std::move(k));
      continue;
    }
    const loop::Stage& loop = k.stages[static_cast<size_t>(cut.stage)];
    std::vector<int32_t> partials;
    const std::vector<int32_t> reduces = ReducesOf(k, loop);
    for (size_t j = 0; j < reduces.size(); ++j) {
      loop::Buffer b;
      b.kind = loop::Buffer::Kind::kIntermediate;
      b.dtype = loop::DTypeOf(k.insts[static_cast<size_t>(reduces[j])].type);
      b.elements = IndexExpr::Const(cut.parts * PointCount(k));
      b.name = absl::StrCat(k.nodes.empty() ? "" : k.nodes.back(), ".partials", j);
      partials.push_back(static_cast<int32_t>(program.buffers.size()));
      program.buffers.push_back(std::move(b));
    }
    kernels.push_back(PartsKernel(k, cut, partials));
    renumbered[i].push_back(static_cast<int32_t>(kernels.size()));
    kernels.push_back(CombineKernel(k, cut, partials));
  }
  std::vector<loop::Step> steps;
  for (loop::Step& s : program.steps) {
    if (s.kind != loop::Step::Kind::kKernel) {
      steps.push_back(std::move(s));
      continue;
    }
    for (int32_t k : renumbered[static_cast<size_t>(s.kernel)]) {
      loop::Step launch = s;
      launch.kernel = k;
      steps.push_back(std::move(launch));
    }
  }
  program.kernels = std::move(kernels);
  program.steps = std::move(steps);
  return program;
}

}  // namespace kiln::fuse
