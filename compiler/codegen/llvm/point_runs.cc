#include "compiler/codegen/llvm/point_runs.h"

#include <algorithm>
#include <utility>

namespace kiln::codegen {
namespace {

using loop::Atom;
using loop::IndexExpr;
using loop::Term;

bool Mentions(const Atom& atom, int32_t var) {
  if (atom.kind == Atom::Kind::kVar) return atom.id == var;
  if (!atom.operands) return false;
  std::vector<int32_t> vars;
  atom.operands->first.CollectVars(&vars);
  atom.operands->second.CollectVars(&vars);
  return std::find(vars.begin(), vars.end(), var) != vars.end();
}

bool Mentions(const Term& term, int32_t var) {
  return std::any_of(term.factors.begin(), term.factors.end(),
                     [&](const Atom& a) { return Mentions(a, var); });
}

// `access` as a vector access of `lanes` elements, or nothing (inst -1) when a constant term
// of its index keeps it from ever being aligned.
VectorAccess VectorAccessOf(const loop::Program& program, const loop::Kernel& kernel, int32_t inst,
                            int32_t var, int32_t lanes, int32_t max_access_bytes) {
  const loop::Inst& access = kernel.insts[static_cast<size_t>(inst)];
  const int32_t size =
      loop::ByteSize(loop::ScalarTypeOf(program.buffers[static_cast<size_t>(access.buffer)].dtype));
  VectorAccess out;
  out.buffer = access.buffer;
  out.align = std::min(max_access_bytes, lanes * size);
  out.elements = out.align / size;
  for (const Term& t : access.index.terms()) {
    if (Mentions(t, var) || t.coef % out.elements == 0) continue;
    IndexExpr multiple = IndexExpr::Const(t.coef);
    bool symbolic = false;
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kOpaque) return {};
      if (a.kind != Atom::Kind::kSym) continue;
      multiple = multiple * IndexExpr::Sym(a.id);
      symbolic = true;
    }
    if (!symbolic) return {};
    out.multiples.push_back(std::move(multiple));
  }
  out.inst = inst;
  return out;
}

}  // namespace

bool WalksContiguously(const loop::Inst& access, int32_t var) {
  if (access.op != loop::Opcode::kLoad && access.op != loop::Opcode::kStore) return false;
  if (access.mask >= 0 || !access.dyn.empty()) return false;
  // The normal form merges like terms: a unit step is the one term 1 * p<var>.
  int unit_terms = 0;
  for (const Term& t : access.index.terms()) {
    if (!Mentions(t, var)) continue;
    const bool unit = t.coef == 1 && t.factors.size() == 1 &&
                      t.factors[0].kind == Atom::Kind::kVar && t.factors[0].id == var;
    if (!unit) return false;
    ++unit_terms;
  }
  return unit_terms == 1;
}

PointRuns PlanPointRuns(const loop::Program& program, const loop::Kernel& kernel, int32_t dim,
                        int32_t lanes, int32_t max_access_bytes) {
  PointRuns runs;
  runs.dim = dim;
  runs.lanes = lanes;
  for (size_t i = 0; i < kernel.insts.size(); ++i) {
    if (!WalksContiguously(kernel.insts[i], dim)) continue;
    VectorAccess v =
        VectorAccessOf(program, kernel, static_cast<int32_t>(i), dim, lanes, max_access_bytes);
    if (v.inst >= 0) runs.vectors.push_back(std::move(v));
  }
  return runs;
}

}  // namespace kiln::codegen
