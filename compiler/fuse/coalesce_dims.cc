#include "compiler/fuse/coalesce_dims.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

namespace kiln::fuse {
namespace {

using loop::Atom;
using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;

bool Mentions(const IndexExpr& e, int32_t var) {
  std::vector<int32_t> vars;
  e.CollectVars(&vars);
  for (int32_t v : vars) {
    if (v == var) return true;
  }
  return false;
}

// Whether `e` uses variables `u` and `v` only as plain factors of terms, at most one of them
// once in any term.
bool AffineIn(const IndexExpr& e, int32_t u, int32_t v) {
  for (const loop::Term& t : e.terms()) {
    int count = 0;
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kVar) {
        if (a.id == u || a.id == v) ++count;
      } else if (a.operands != nullptr &&
                 (Mentions(a.operands->first, u) || Mentions(a.operands->first, v) ||
                  Mentions(a.operands->second, u) || Mentions(a.operands->second, v))) {
        return false;
      }
    }
    if (count > 1) return false;
  }
  return true;
}

// Every index of the kernel's instructions, which all read their loop variables from here.
std::vector<IndexExpr*> IndicesOf(Kernel& k) {
  std::vector<IndexExpr*> out;
  for (Inst& in : k.insts) {
    if (in.op == Opcode::kLoad || in.op == Opcode::kStore || in.op == Opcode::kIndex) {
      out.push_back(&in.index);
    }
  }
  return out;
}

bool DynStridesUseVars(const Kernel& k) {
  for (const Inst& in : k.insts) {
    for (const loop::DynIndex& d : in.dyn) {
      if (d.stride.UsesVars()) return true;
    }
  }
  return false;
}

// Whether every index (every store's, with `stores_only`) is c*(E*u + v) + (terms without u
// or v), E the extent of v; with `stores_only`, c is 1 and every store mentions u or v.
bool Mergeable(Kernel& k, int32_t u, int32_t v, bool stores_only = false) {
  const IndexExpr& inner = *k.Extent(v);
  const loop::VarExtents extents = k.Extents();
  auto at = [&](const IndexExpr& e, int64_t uval, int64_t vval) {
    return e.SubstituteVars(
        [&](int32_t w) {
          if (w == u) return IndexExpr::Const(uval);
          if (w == v) return IndexExpr::Const(vval);
          return IndexExpr::Var(w);
        },
        extents);
  };
  for (const Inst& in : k.insts) {
    const bool indexed = in.op == Opcode::kStore ||
                         (!stores_only && (in.op == Opcode::kLoad || in.op == Opcode::kIndex));
    if (!indexed) continue;
    const IndexExpr& e = in.index;
    if (!Mentions(e, u) && !Mentions(e, v)) {
      if (stores_only) return false;
      continue;
    }
    if (!AffineIn(e, u, v)) return false;
    const IndexExpr base = at(e, 0, 0);
    const IndexExpr cu = at(e, 1, 0) - base;
    const IndexExpr cv = at(e, 0, 1) - base;
    if (cu != cv * inner) return false;
    if (stores_only && cv != IndexExpr::Const(1)) return false;
  }
  return true;
}

// The kernel with variable `drop` removed and every index rewritten through `map`
// (old variable -> expression over the new variables).
void Rewrite(Kernel& k, int32_t drop, const std::function<IndexExpr(int32_t)>& map) {
  const size_t np = k.parallel.size();
  const size_t d = static_cast<size_t>(drop);
  if (d < np) {
    k.parallel.erase(k.parallel.begin() + static_cast<std::ptrdiff_t>(d));
  } else {
    k.reduction.erase(k.reduction.begin() + static_cast<std::ptrdiff_t>(d - np));
  }
  const loop::VarExtents extents = k.Extents();
  for (IndexExpr* e : IndicesOf(k)) {
    if (e->UsesVars()) *e = e->SubstituteVars(map, extents);
  }
}

// Merges u and u + 1 into u; true when it did.
bool MergePair(Kernel& k, int32_t u) {
  const int32_t v = u + 1;
  if (!Mergeable(k, u, v)) return false;
  const size_t np = k.parallel.size(), d = static_cast<size_t>(u);
  IndexExpr& extent = d < np ? k.parallel[d] : k.reduction[d - np];
  extent = extent * *k.Extent(v);
  Rewrite(k, v, [&](int32_t w) {
    if (w == u) return IndexExpr::Const(0);
    if (w == v) return IndexExpr::Var(u);
    return IndexExpr::Var(w > v ? w - 1 : w);
  });
  return true;
}

// Merges u and u + 1 into u as a flat index over both, u becoming its quotient by the extent
// of u + 1 and u + 1 its remainder.
void FlattenPair(Kernel& k, int32_t u) {
  const int32_t v = u + 1;
  const IndexExpr inner = *k.Extent(v);
  k.parallel[static_cast<size_t>(u)] = k.parallel[static_cast<size_t>(u)] * inner;
  Rewrite(k, v, [&](int32_t w) {
    if (w == u) return IndexExpr::FloorDiv(IndexExpr::Var(u), inner, k.Extents());
    if (w == v) return IndexExpr::Mod(IndexExpr::Var(u), inner, k.Extents());
    return IndexExpr::Var(w > v ? w - 1 : w);
  });
}

// Whether some store of `k` writes rows of `row` elements of its buffer that cannot all
// start at a multiple of kRowAlignmentBytes.
bool StoresUnalignedRows(const loop::Program& program, const Kernel& k, int64_t row) {
  for (const Inst& in : k.insts) {
    if (in.op != Opcode::kStore) continue;
    const int64_t bytes =
        loop::ByteSize(loop::ScalarTypeOf(program.buffers[static_cast<size_t>(in.buffer)].dtype));
    if (row * bytes % kRowAlignmentBytes != 0) return true;
  }
  return false;
}

// Drops variable u (of constant extent 1); true when it did.
bool DropUnit(Kernel& k, int32_t u) {
  const IndexExpr& e = *k.Extent(u);
  if (!e.is_const() || e.const_value() != 1) return false;
  Rewrite(k, u, [&](int32_t w) {
    return w == u ? IndexExpr::Const(0) : IndexExpr::Var(w > u ? w - 1 : w);
  });
  return true;
}

// One merge or drop among the variables [begin, end) of one kind, innermost first.
bool CoalesceOnce(Kernel& k, int32_t begin, int32_t end) {
  for (int32_t u = end - 2; u >= begin; --u) {
    if (MergePair(k, u)) return true;
  }
  if (end - begin < 2) return false;
  for (int32_t u = end - 1; u >= begin; --u) {
    if (DropUnit(k, u)) return true;
  }
  return false;
}

// Runs [begin, end) of `fine`'s dimensions whose extents multiply to each of `coarse`'s in
// turn, covering both; nullopt when the extents do not group that way.
std::optional<std::vector<std::pair<int32_t, int32_t>>> Runs(const std::vector<IndexExpr>& fine,
                                                             const std::vector<IndexExpr>& coarse) {
  std::vector<std::pair<int32_t, int32_t>> runs;
  int32_t d = 0;
  const int32_t n = static_cast<int32_t>(fine.size());
  for (const IndexExpr& want : coarse) {
    const int32_t begin = d;
    if (d == n) return std::nullopt;  // `coarse` has dimensions left over
    IndexExpr product = fine[static_cast<size_t>(d++)];
    while (product != want && d < n) product = product * fine[static_cast<size_t>(d++)];
    if (product != want) return std::nullopt;
    runs.emplace_back(begin, d);
  }
  if (d != n) return std::nullopt;
  return runs;
}

}  // namespace

Kernel CoalesceDims(Kernel kernel) {
  if (DynStridesUseVars(kernel)) return kernel;
  for (bool changed = true; changed;) {
    const int32_t np = static_cast<int32_t>(kernel.parallel.size());
    changed = CoalesceOnce(kernel, 0, np) || CoalesceOnce(kernel, np, kernel.num_vars());
  }
  return kernel;
}

std::optional<Kernel> CoalesceTo(const Kernel& kernel, const std::vector<IndexExpr>& parallel) {
  if (kernel.parallel.size() <= parallel.size() || DynStridesUseVars(kernel)) return std::nullopt;
  // The kernel's dimensions merged into each target dimension.
  const auto groups = Runs(kernel.parallel, parallel);
  if (!groups) return std::nullopt;
  Kernel out = kernel;
  for (size_t g = groups->size(); g-- > 0;) {
    for (int32_t u = (*groups)[g].second - 2; u >= (*groups)[g].first; --u) {
      if (!MergePair(out, u)) return std::nullopt;
    }
  }
  return out;
}

std::optional<Kernel> SplitTo(const Kernel& kernel, const std::vector<IndexExpr>& parallel) {
  if (!kernel.reduction.empty() || !kernel.segments.empty() ||
      kernel.parallel.size() >= parallel.size() || DynStridesUseVars(kernel)) {
    return std::nullopt;
  }
  const auto runs = Runs(parallel, kernel.parallel);
  if (!runs) return std::nullopt;
  // Each old variable as an expression over the new ones of its run: each counts in units of
  // the extents inside it.
  std::vector<IndexExpr> old_as_new;
  for (const auto& [begin, end] : *runs) {
    IndexExpr value = IndexExpr::Const(0), unit = IndexExpr::Const(1);
    for (int32_t k = end; k-- > begin;) {
      value = value + unit * IndexExpr::Var(k);
      unit = unit * parallel[static_cast<size_t>(k)];
    }
    old_as_new.push_back(value);
  }
  Kernel out = kernel;
  out.parallel = parallel;
  const loop::VarExtents extents = out.Extents();
  for (IndexExpr* e : IndicesOf(out)) {
    if (e->UsesVars()) {
      *e =
          e->SubstituteVars([&](int32_t w) { return old_as_new[static_cast<size_t>(w)]; }, extents);
    }
  }
  return out;
}

Kernel FlattenUnalignedRows(const loop::Program& program, Kernel kernel) {
  if (!kernel.reduction.empty() || kernel.parallel.size() < 2 || DynStridesUseVars(kernel)) {
    return kernel;
  }
  const int32_t np = static_cast<int32_t>(kernel.parallel.size());
  const IndexExpr& row = kernel.parallel.back();
  if (!row.is_const() || !StoresUnalignedRows(program, kernel, row.const_value())) {
    return kernel;
  }
  // Only the whole parallel space as one flat range: a part of it would leave each store's
  // runs as unaligned as its rows.
  for (int32_t u = np - 2; u >= 0; --u) {
    if (!Mergeable(kernel, u, u + 1, /*stores_only=*/true)) return kernel;
  }
  for (int32_t u = np - 2; u >= 0; --u) FlattenPair(kernel, u);
  return kernel;
}

loop::Program CoalesceDims(loop::Program program) {
  for (Kernel& k : program.kernels) {
    k = FlattenUnalignedRows(program, CoalesceDims(std::move(k)));
  }
  return program;
}

loop::Kernel PadTo(const loop::Kernel& kernel, int64_t extent) {
  loop::Kernel out = kernel;
  out.parallel = {IndexExpr::Const(extent)};
  out.insts.clear();
  out.segments.clear();
  const int64_t own = kernel.parallel[0].const_value();
  out.segment_points = kernel.segment_points;
  out.segment_points.resize(std::max<size_t>(1, kernel.segments.size()), own);
  std::vector<int32_t> map(kernel.insts.size(), -1);
  size_t segment = 0;
  size_t stage = 0;
  std::vector<loop::Stage> stages = kernel.stages;
  for (int32_t i = 0; i < static_cast<int32_t>(kernel.insts.size()); ++i) {
    while (stage < stages.size() && kernel.stages[stage].begin == i) {
      stages[stage++].begin = static_cast<int32_t>(out.insts.size());
    }
    if (segment < kernel.segments.size() && kernel.segments[segment] == i) {
      out.segments.push_back(static_cast<int32_t>(out.insts.size()));
      ++segment;
    }
    loop::Inst in = kernel.insts[static_cast<size_t>(i)];
    loop::RemapOperands(&in, map);
    if (in.op == loop::Opcode::kLoad || in.op == loop::Opcode::kStore) {
      auto push = [&](loop::Inst x) {
        out.insts.push_back(std::move(x));
        return static_cast<int32_t>(out.insts.size() - 1);
      };
      loop::Inst point, bound, below;
      point.op = loop::Opcode::kIndex;
      point.type = loop::ScalarType::kI64;
      point.index = IndexExpr::Var(0);
      bound.op = loop::Opcode::kConst;
      bound.type = loop::ScalarType::kI64;
      bound.iimm = kernel.parallel[0].const_value();
      below.op = loop::Opcode::kLt;
      below.type = loop::ScalarType::kBool;
      below.a = push(point);
      below.b = push(bound);
      int32_t mask = push(below);
      if (in.mask >= 0) {
        loop::Inst both;
        both.op = loop::Opcode::kAnd;
        both.type = loop::ScalarType::kBool;
        both.a = in.mask;
        both.b = mask;
        mask = push(both);
      }
      in.mask = mask;
    }
    out.insts.push_back(std::move(in));
    map[static_cast<size_t>(i)] = static_cast<int32_t>(out.insts.size() - 1);
  }
  if (out.segments.empty()) out.segments.push_back(0);  // one segment, of `own` points
  for (; stage < stages.size(); ++stage) {
    stages[stage].begin = static_cast<int32_t>(out.insts.size());
  }
  for (size_t s = 0; s < stages.size(); ++s) {
    stages[s].end =
        s + 1 < stages.size() ? stages[s + 1].begin : static_cast<int32_t>(out.insts.size());
  }
  out.stages = std::move(stages);
  return out;
}

}  // namespace kiln::fuse
