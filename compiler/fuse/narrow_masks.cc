#include "compiler/fuse/narrow_masks.h"

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <map>
#include <optional>
#include <utility>

namespace kiln::fuse {
namespace {

using loop::Atom;
using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;

// Where a mask lets a variable through: lo <= v (lo >= 0) and v < hi, either unknown.
struct Part {
  std::optional<IndexExpr> lo;
  std::optional<IndexExpr> hi;
};

// How deep a mask's conjunctions are followed.
constexpr int kMaxDepth = 32;

std::optional<int32_t> AsVar(const Inst& in) {
  if (in.op != Opcode::kIndex || in.index.terms().size() != 1) return std::nullopt;
  const loop::Term& t = in.index.terms()[0];
  if (t.coef != 1 || t.factors.size() != 1 || t.factors[0].kind != Atom::Kind::kVar) {
    return std::nullopt;
  }
  return t.factors[0].id;
}

// The value of an instruction that uses no variable: a kIndex over symbols or an integer
// constant.
std::optional<IndexExpr> Bound(const Inst& in) {
  if (in.op == Opcode::kIndex && !in.index.UsesVars()) return in.index;
  if (in.op == Opcode::kConst && !loop::IsFloat(in.type)) return IndexExpr::Const(in.iimm);
  return std::nullopt;
}

// a < b as b > a, and so on.
Opcode Mirrored(Opcode op) {
  switch (op) {
    case Opcode::kLt:
      return Opcode::kGt;
    case Opcode::kLe:
      return Opcode::kGe;
    case Opcode::kGt:
      return Opcode::kLt;
    default:
      return Opcode::kLe;  // kGe
  }
}

// Keeps the tighter of two bounds when both are constants, else the first found.
void Tighten(std::optional<IndexExpr>& bound, IndexExpr value, bool lower) {
  if (!bound.has_value()) {
    bound = std::move(value);
  } else if (bound->is_const() && value.is_const() &&
             (lower ? value.const_value() > bound->const_value()
                    : value.const_value() < bound->const_value())) {
    bound = std::move(value);
  }
}

void CollectParts(const Kernel& kernel, int32_t mask, int depth, std::map<int32_t, Part>* parts) {
  if (mask < 0 || static_cast<size_t>(mask) >= kernel.insts.size() || depth > kMaxDepth) return;
  const Inst& in = kernel.insts[static_cast<size_t>(mask)];
  if (in.op == Opcode::kAnd) {
    CollectParts(kernel, in.a, depth + 1, parts);
    CollectParts(kernel, in.b, depth + 1, parts);
    return;
  }
  if (in.op != Opcode::kLt && in.op != Opcode::kLe && in.op != Opcode::kGt &&
      in.op != Opcode::kGe) {
    return;
  }
  if (in.a < 0 || in.b < 0) return;
  const Inst& x = kernel.insts[static_cast<size_t>(in.a)];
  const Inst& y = kernel.insts[static_cast<size_t>(in.b)];
  Opcode op = in.op;
  std::optional<int32_t> var = AsVar(x);
  std::optional<IndexExpr> bound = Bound(y);
  if (!var.has_value() || !bound.has_value()) {
    var = AsVar(y);
    bound = Bound(x);
    op = Mirrored(op);
  }
  if (!var.has_value() || !bound.has_value()) return;
  Part& part = (*parts)[*var];
  switch (op) {
    case Opcode::kLt:
      Tighten(part.hi, *std::move(bound), /*lower=*/false);
      break;
    case Opcode::kLe:
      Tighten(part.hi, *bound + IndexExpr::Const(1), /*lower=*/false);
      break;
    case Opcode::kGt:
      Tighten(part.lo, *bound + IndexExpr::Const(1), /*lower=*/true);
      break;
    default:  // kGe
      Tighten(part.lo, *std::move(bound), /*lower=*/true);
      break;
  }
}

// Divisions, remainders, Max and Min in `e`, nested ones included: what an index costs.
int Cost(const IndexExpr& e) {
  int cost = 0;
  for (const loop::Term& t : e.terms()) {
    for (const Atom& a : t.factors) {
      if (a.operands != nullptr) {
        cost += 1 + Cost(a.operands->first) + Cost(a.operands->second);
      }
    }
  }
  return cost;
}

// `index` simplified where every variable of `parts` is inside its part: when that costs
// less, the new index; otherwise nullopt.
std::optional<IndexExpr> Narrowed(const Kernel& kernel, const IndexExpr& index,
                                  const std::map<int32_t, Part>& parts) {
  // Each narrowed variable's extent over its part (v' = v - lo < hi - lo), or unknown.
  std::map<int32_t, std::optional<IndexExpr>> extents;
  for (const auto& [var, part] : parts) {
    const IndexExpr* whole = kernel.Extent(var);
    std::optional<IndexExpr> hi = part.hi;
    if (!hi.has_value() && whole != nullptr) hi = *whole;
    if (hi.has_value()) {
      IndexExpr extent = part.lo.has_value() ? *hi - *part.lo : *hi;
      if (extent.is_const() && extent.const_value() <= 0) return std::nullopt;  // never read
      extents[var] = std::move(extent);
    } else {
      extents[var] = std::nullopt;
    }
  }
  const loop::VarExtents over_parts = [&](int32_t var) -> const IndexExpr* {
    auto it = extents.find(var);
    if (it == extents.end()) return kernel.Extent(var);
    return it->second.has_value() ? &*it->second : nullptr;
  };
  // Back over the whole space, nothing proven about a narrowed variable.
  const loop::VarExtents unknown_parts = [&](int32_t var) -> const IndexExpr* {
    return parts.count(var) != 0 ? nullptr : kernel.Extent(var);
  };
  // v -> v + sign * lo for each narrowed variable with a lower bound.
  const auto shift = [&parts](int64_t sign) {
    return [&parts, sign](int32_t var) {
      auto it = parts.find(var);
      if (it == parts.end() || !it->second.lo.has_value()) return IndexExpr::Var(var);
      return IndexExpr::Var(var) + IndexExpr::Const(sign) * *it->second.lo;
    };
  };
  const IndexExpr back =
      index.SubstituteVars(shift(1), over_parts).SubstituteVars(shift(-1), unknown_parts);
  if (Cost(back) >= Cost(index)) return std::nullopt;
  return back;
}

}  // namespace

Kernel NarrowMaskedIndices(Kernel kernel) {
  std::map<int32_t, std::map<int32_t, Part>> parts_of_mask;
  for (size_t i = 0; i < kernel.insts.size(); ++i) {
    const Inst& in = kernel.insts[i];
    if ((in.op != Opcode::kLoad && in.op != Opcode::kStore) || in.mask < 0) continue;
    auto [it, fresh] = parts_of_mask.try_emplace(in.mask);
    if (fresh) {
      CollectParts(kernel, in.mask, 0, &it->second);
      // A lower bound at or below zero narrows nothing: variables start at 0.
      for (auto part = it->second.begin(); part != it->second.end();) {
        std::optional<IndexExpr>& lo = part->second.lo;
        if (lo.has_value() && lo->is_const() && lo->const_value() <= 0) lo.reset();
        part = part->second.lo.has_value() || part->second.hi.has_value() ? std::next(part)
                                                                          : it->second.erase(part);
      }
    }
    if (it->second.empty()) continue;
    std::optional<IndexExpr> narrowed = Narrowed(kernel, in.index, it->second);
    if (narrowed.has_value()) kernel.insts[i].index = *std::move(narrowed);
  }
  return kernel;
}

loop::Program NarrowMaskedIndices(loop::Program program) {
  for (Kernel& kernel : program.kernels) kernel = NarrowMaskedIndices(std::move(kernel));
  return program;
}

}  // namespace kiln::fuse
