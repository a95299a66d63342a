#include "compiler/fuse/order_dims.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <optional>
#include <utility>
#include <vector>

namespace kiln::fuse {
namespace {

using loop::Atom;
using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;

// The constant coefficient of every parallel variable in `e`, or nullopt when some variable
// appears other than as a constant factor of terms (inside a division, times another variable
// or a symbol) or `e` walks a reduction variable (a store inside the reduction loop).
std::optional<std::vector<int64_t>> Coefficients(const IndexExpr& e, int32_t parallel) {
  std::vector<int64_t> coef(static_cast<size_t>(parallel), 0);
  for (const loop::Term& t : e.terms()) {
    int32_t var = -1;
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kVar) {
        if (var >= 0 || a.id >= parallel) return std::nullopt;
        var = a.id;
      } else if (a.operands != nullptr &&
                 (a.operands->first.UsesVars() || a.operands->second.UsesVars())) {
        return std::nullopt;
      }
    }
    if (var < 0) continue;
    if (t.factors.size() != 1) return std::nullopt;  // a symbol times the variable
    coef[static_cast<size_t>(var)] += t.coef;
  }
  return coef;
}

// The parallel variables outermost first by descending coefficient; variables of extent 1
// keep their places among the others' ranks (they walk nothing).
std::vector<int32_t> Ranked(const Kernel& k, const std::vector<int64_t>& coef) {
  std::vector<int32_t> order(coef.size());
  std::iota(order.begin(), order.end(), 0);
  std::vector<int32_t> moving;
  for (int32_t v : order) {
    const IndexExpr& e = k.parallel[static_cast<size_t>(v)];
    if (!(e.is_const() && e.const_value() == 1)) moving.push_back(v);
  }
  std::vector<int32_t> sorted = moving;
  std::stable_sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) {
    return coef[static_cast<size_t>(a)] > coef[static_cast<size_t>(b)];
  });
  size_t next = 0;
  for (int32_t& v : order) {
    const IndexExpr& e = k.parallel[static_cast<size_t>(v)];
    if (!(e.is_const() && e.const_value() == 1)) v = sorted[next++];
  }
  return order;
}

}  // namespace

Kernel OrderDims(Kernel kernel) {
  const int32_t np = static_cast<int32_t>(kernel.parallel.size());
  if (np < 2) return kernel;
  std::optional<std::vector<int32_t>> order;
  bool coalesced_now = true;
  for (const Inst& in : kernel.insts) {
    for (const loop::DynIndex& d : in.dyn) {
      if (d.stride.UsesVars()) return kernel;
    }
    if (in.op != Opcode::kStore) continue;
    const std::optional<std::vector<int64_t>> coef = Coefficients(in.index, np);
    if (!coef) return kernel;
    const std::vector<int32_t> ranked = Ranked(kernel, *coef);
    if (order && *order != ranked) return kernel;  // the stores disagree
    order = ranked;
    if ((*coef)[static_cast<size_t>(ranked.back())] != 1) return kernel;
    if ((*coef)[static_cast<size_t>(np - 1)] != 1) coalesced_now = false;
  }
  if (!order || coalesced_now) return kernel;
  // New variable i is old variable order[i].
  std::vector<int32_t> new_of(static_cast<size_t>(np));
  std::vector<IndexExpr> parallel;
  for (int32_t i = 0; i < np; ++i) {
    new_of[static_cast<size_t>((*order)[static_cast<size_t>(i)])] = i;
    parallel.push_back(kernel.parallel[static_cast<size_t>((*order)[static_cast<size_t>(i)])]);
  }
  kernel.parallel = std::move(parallel);
  const loop::VarExtents extents = kernel.Extents();
  for (Inst& in : kernel.insts) {
    const bool indexed =
        in.op == Opcode::kLoad || in.op == Opcode::kStore || in.op == Opcode::kIndex;
    if (!indexed || !in.index.UsesVars()) continue;
    in.index = in.index.SubstituteVars(
        [&](int32_t w) { return IndexExpr::Var(w < np ? new_of[static_cast<size_t>(w)] : w); },
        extents);
  }
  return kernel;
}

loop::Program OrderDims(loop::Program program) {
  for (Kernel& k : program.kernels) k = OrderDims(std::move(k));
  return program;
}

}  // namespace kiln::fuse
