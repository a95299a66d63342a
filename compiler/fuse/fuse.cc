#include "compiler/fuse/fuse.h"

#include <algorithm>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "compiler/fuse/coalesce_dims.h"
#include "compiler/fuse/segments.h"
#include "compiler/fuse/share_loops.h"

namespace kiln::fuse {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;
using loop::Program;
using loop::Step;

bool Reads(const Inst& in) { return in.op == Opcode::kLoad; }
bool Writes(const Inst& in) { return in.op == Opcode::kStore; }

// Buffers that must stay in memory whatever kernels do with them: inputs, what outputs and
// write-backs view, what extern and fallback steps read or write.
std::vector<bool> PinnedBuffers(const Program& p) {
  std::vector<bool> pinned(p.buffers.size(), false);
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].kind == loop::Buffer::Kind::kInput) pinned[b] = true;
  }
  for (const loop::Output& o : p.outputs) {
    if (o.kind == loop::Output::Kind::kTensor) pinned[static_cast<size_t>(o.tensor.buffer)] = true;
  }
  std::function<void(const loop::CallArg&)> arg = [&](const loop::CallArg& a) {
    if (a.kind == loop::CallArg::Kind::kTensor) pinned[static_cast<size_t>(a.tensor.buffer)] = true;
    for (const loop::CallArg& x : a.items) arg(x);
  };
  for (const Step& s : p.steps) {
    if (s.kind == Step::Kind::kWriteBack) pinned[static_cast<size_t>(s.src.buffer)] = true;
    if (s.kind != Step::Kind::kExtern) continue;
    for (const loop::CallArg& a : s.call.args) arg(a);
    for (const auto& kv : s.call.kwargs) arg(kv.second);
    for (const loop::TensorRef& r : s.call.outputs) {
      if (r.buffer >= 0) pinned[static_cast<size_t>(r.buffer)] = true;
    }
  }
  return pinned;
}

bool HasLoops(const Kernel& k) { return loop::HasLoopStage(k); }

// A producer read at more than one site inlines only when it reads at most this many buffers:
// each site loads them again. Without the bound, a chain of sums in which every link has two
// readers (a residual stream's gradient, added to after each layer norm's backward) grows
// into every later kernel, and each reads all the earlier links' inputs again (quadratic
// traffic over the layers).
constexpr size_t kMaxRecomputedReads = 4;

// Independent siblings over a space of at most this many points (a constant) join although
// they share no data: such a kernel costs about its launch (a few microseconds), so an
// optimizer step that updates many small parameters of one shape becomes one launch per shape
// instead of one per parameter. Larger kernels gain nothing from it, and one moved up keeps
// its results alive longer.
constexpr int64_t kMaxIndependentJoinPoints = int64_t{1} << 20;

bool SmallConstantSpace(const std::vector<IndexExpr>& extents) {
  int64_t points = 1;
  for (const IndexExpr& e : extents) {
    if (!e.is_const()) return false;
    points *= e.const_value();
    if (points > kMaxIndependentJoinPoints) return false;
  }
  return true;
}

// Independent pointwise kernels over one constant dimension each, of different extents, join
// when the larger has at most this many points: the smaller one is seen over the larger
// space with its memory accesses masked (PadTo), and each keeps threads of its own (segments).
// An optimizer step's updates of parameters of many shapes become one launch; the masks can
// keep a kernel from moving vectors, so large ones stay apart.
constexpr int64_t kMaxPaddedJoinPoints = int64_t{1} << 16;
// A padded join stops growing a kernel at this many instructions: code generation's time grows
// faster than a function's length, and one kernel compiles on one thread.
constexpr size_t kMaxPaddedJoinInsts = 600;

bool PaddedJoinable(const std::vector<IndexExpr>& a, const std::vector<IndexExpr>& b) {
  return a.size() == 1 && b.size() == 1 && a[0].is_const() && b[0].is_const() && a[0] != b[0] &&
         std::max(a[0].const_value(), b[0].const_value()) <= kMaxPaddedJoinPoints;
}

bool SameExtents(const std::vector<IndexExpr>& a, const std::vector<IndexExpr>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

// The order of a dense store layout, outermost first, or empty when the store index is not
// a dense (permuted row-major) layout of the kernel's parallel space.
std::vector<int32_t> DenseOrder(const Kernel& k, const Inst& store) {
  const size_t n = k.parallel.size();
  if (!store.dyn.empty() || store.mask >= 0) return {};
  std::vector<IndexExpr> stride(n);
  IndexExpr rest = store.index;
  for (size_t d = 0; d < n; ++d) {
    // The coefficient of p_d: the terms with exactly the factor p_d.
    IndexExpr coef;
    for (const loop::Term& t : store.index.terms()) {
      int count = 0;
      for (const loop::Atom& a : t.factors) {
        if (a.kind == loop::Atom::Kind::kVar && a.id == static_cast<int32_t>(d)) ++count;
        if (a.kind != loop::Atom::Kind::kVar && a.kind != loop::Atom::Kind::kSym) return {};
      }
      if (count == 1) {
        IndexExpr term = IndexExpr::Const(t.coef);
        for (const loop::Atom& a : t.factors) {
          if (a.kind == loop::Atom::Kind::kSym) term = term * IndexExpr::Sym(a.id);
          if (a.kind == loop::Atom::Kind::kVar && a.id != static_cast<int32_t>(d)) return {};
        }
        coef = coef + term;
      } else if (count > 1) {
        return {};
      }
    }
    stride[d] = coef;
    rest = rest - coef * IndexExpr::Var(static_cast<int32_t>(d));
  }
  if (!rest.is_zero()) return {};
  // Innermost first: stride 1, then each stride the previous one times its extent.
  std::vector<int32_t> order;
  std::vector<bool> used(n, false);
  IndexExpr expect = IndexExpr::Const(1);
  for (size_t step = 0; step < n; ++step) {
    int32_t found = -1;
    for (size_t d = 0; d < n; ++d) {
      if (!used[d] && stride[d] == expect) {
        found = static_cast<int32_t>(d);
        break;
      }
    }
    if (found < 0) return {};
    used[static_cast<size_t>(found)] = true;
    order.push_back(found);
    expect = expect * k.parallel[static_cast<size_t>(found)];
  }
  std::reverse(order.begin(), order.end());
  return order;
}

// Strides of the dense layout of `parallel` whose dimensions, outermost first, are `order`.
std::vector<IndexExpr> DenseStrides(const std::vector<IndexExpr>& parallel,
                                    const std::vector<int32_t>& order) {
  std::vector<IndexExpr> stride(parallel.size());
  IndexExpr s = IndexExpr::Const(1);
  for (size_t i = order.size(); i-- > 0;) {
    stride[static_cast<size_t>(order[i])] = s;
    s = s * parallel[static_cast<size_t>(order[i])];
  }
  return stride;
}

// Whether e uses variable v.
bool Uses(const IndexExpr& e, int32_t v) {
  std::vector<int32_t> vars;
  e.CollectVars(&vars);
  return std::find(vars.begin(), vars.end(), v) != vars.end();
}

// The coefficient of variable v in e when e is affine in it (e(v + 1) - e(v) does not use
// v: v appears in no division, modulo, Max or Min, nor times itself), else nullopt.
std::optional<IndexExpr> CoefficientOf(const IndexExpr& e, int32_t v) {
  const loop::VarExtents unknown = [](int32_t) -> const IndexExpr* { return nullptr; };
  const IndexExpr next = e.SubstituteVars(
      [&](int32_t u) {
        return u == v ? IndexExpr::Var(u) + IndexExpr::Const(1) : IndexExpr::Var(u);
      },
      unknown);
  IndexExpr step = next - e;
  if (Uses(step, v)) return std::nullopt;
  return step;
}

// For a read of pointwise producer k's buffer with data-dependent terms (a gather's or an
// index_select's load): the producer dimension each term moves along, the one whose stride in
// k's dense layout (`stride`) is the term's stride. Inlined, the read becomes k's loads at the
// point of the read's static index, each with the term added along that dimension: that takes
// the term to stay within its dimension, as gather and index_select require of their indices
// (a masked read masks the loads that replace it). Nullopt when a term matches no dimension,
// or when some instruction of k does not follow such a dimension affinely (an index computed
// from it, a division of it, a data-dependent stride that uses it).
std::optional<std::vector<int32_t>> DynDims(const Kernel& k, const std::vector<IndexExpr>& stride,
                                            const Inst& in) {
  std::vector<int32_t> dims;
  for (const loop::DynIndex& d : in.dyn) {
    // A dimension of extent 1 shares its stride with the one inside it, but cannot move.
    int32_t dim = -1;
    for (size_t i = 0; i < stride.size() && dim < 0; ++i) {
      if (stride[i] == d.stride && k.parallel[i] != IndexExpr::Const(1)) {
        dim = static_cast<int32_t>(i);
      }
    }
    if (dim < 0) return std::nullopt;
    dims.push_back(dim);
  }
  for (const Inst& x : k.insts) {
    for (const int32_t v : dims) {
      if (x.op == Opcode::kIndex && Uses(x.index, v)) return std::nullopt;
      if (x.op != Opcode::kLoad) continue;
      if (!CoefficientOf(x.index, v)) return std::nullopt;
      for (const loop::DynIndex& d : x.dyn) {
        if (Uses(d.stride, v)) return std::nullopt;
      }
    }
  }
  return dims;
}

class Fuser {
 public:
  Fuser(Program p, const FuseOptions& o) : p_(std::move(p)), o_(o) {}

  absl::StatusOr<Program> Run() {
    if (o_.vertical) Inline();
    if (o_.merge) {
      Merge();
      // Then what is left of small independent kernels over different spaces.
      padded_ = true;
      Merge();
      padded_ = false;
      for (Kernel& k : p_.kernels) {
        RecomputeAcrossLoops(k);
        JoinIndependentLoops(k);
        ShareValues(k);
      }
    }
    RemoveDeadStores();
    Compact();
    return std::move(p_);
  }

 private:
  Kernel& K(int32_t k) { return p_.kernels[static_cast<size_t>(k)]; }

  // A pointwise kernel of one stage with its dimensions coalesced into one (CoalesceDims), or
  // nullopt when it is not of that form or they do not all merge.
  static std::optional<Kernel> OneDimensional(const Kernel& k) {
    if (!k.fusible || !k.reduction.empty() || HasLoops(k) || k.stages.size() != 1) {
      return std::nullopt;
    }
    Kernel one = CoalesceDims(k);
    if (one.parallel.size() != 1) return std::nullopt;
    return one;
  }

  // --- Vertical inlining of pointwise producers.
  void Inline() {
    for (size_t si = 0; si < p_.steps.size(); ++si) {
      if (p_.steps[si].kind != Step::Kind::kKernel) continue;
      const int32_t kid = p_.steps[si].kernel;
      if (kid < 0) continue;
      Kernel& k = K(kid);
      if (!k.fusible || HasLoops(k) || !k.reduction.empty() || k.stages.size() != 1) continue;
      int32_t store = -1, stores = 0;
      for (size_t i = 0; i < k.insts.size(); ++i) {
        if (Writes(k.insts[i])) {
          store = static_cast<int32_t>(i);
          ++stores;
        }
      }
      if (stores != 1) continue;
      const Inst& st = k.insts[static_cast<size_t>(store)];
      const int32_t buffer = st.buffer;
      const std::vector<bool> pinned = PinnedBuffers(p_);
      if (pinned[static_cast<size_t>(buffer)]) continue;
      const std::vector<int32_t> order = DenseOrder(k, st);
      if (order.size() != k.parallel.size()) continue;
      const std::vector<IndexExpr> stride = DenseStrides(k.parallel, order);
      // Every reader must be a later kernel reading without data-dependent terms, or with
      // terms that move along one of k's dimensions each (DynDims).
      int sites = 0;
      bool ok = true;
      for (size_t sj = 0; sj < p_.steps.size() && ok; ++sj) {
        if (p_.steps[sj].kind != Step::Kind::kKernel || p_.steps[sj].kernel < 0 || sj == si)
          continue;
        const Kernel& c = K(p_.steps[sj].kernel);
        for (const Inst& in : c.insts) {
          if (Reads(in) && in.buffer == buffer) {
            if (sj < si || (!in.dyn.empty() && !DynDims(k, stride, in))) ok = false;
            ++sites;
          }
          if (Writes(in) && in.buffer == buffer) ok = false;
        }
      }
      if (!ok || sites == 0 || sites > o_.max_inline_sites) continue;
      if (sites > 1 && (k.insts.size() > 200 || ReadSet(k).size() > kMaxRecomputedReads)) continue;
      for (size_t sj = si + 1; sj < p_.steps.size(); ++sj) {
        if (p_.steps[sj].kind != Step::Kind::kKernel || p_.steps[sj].kernel < 0) continue;
        InlineInto(K(p_.steps[sj].kernel), k, store, order);
      }
      p_.steps[si].kernel = -1;  // removed
    }
    std::vector<Step> steps;
    for (Step& s : p_.steps) {
      if (s.kind == Step::Kind::kKernel && s.kernel < 0) continue;
      steps.push_back(std::move(s));
    }
    p_.steps = std::move(steps);
  }

  void InlineInto(Kernel& c, const Kernel& k, int32_t store, const std::vector<int32_t>& order) {
    const int32_t buffer = k.insts[static_cast<size_t>(store)].buffer;
    bool any = false;
    for (const Inst& in : c.insts) any |= Reads(in) && in.buffer == buffer;
    if (!any) return;
    const std::vector<IndexExpr> stride = DenseStrides(k.parallel, order);
    const loop::VarExtents ext = c.Extents();
    std::vector<Inst> out;
    std::vector<int32_t> map(c.insts.size(), -1);
    std::vector<loop::Stage> stages;
    for (const loop::Stage& s : c.stages) {
      loop::Stage ns{s.loops, static_cast<int32_t>(out.size()), 0};
      for (int32_t i = s.begin; i < s.end; ++i) {
        Inst in = c.insts[static_cast<size_t>(i)];
        if (Reads(in) && in.buffer == buffer) {
          const int32_t mask = in.mask >= 0 ? map[static_cast<size_t>(in.mask)] : -1;
          // The producer's point for this element: unravel the index by the dense layout.
          std::vector<IndexExpr> point(k.parallel.size());
          for (size_t j = 0; j < order.size(); ++j) {
            const size_t d = static_cast<size_t>(order[j]);
            IndexExpr q = IndexExpr::FloorDiv(in.index, stride[d], ext);
            point[d] = j == 0 ? q : IndexExpr::Mod(q, k.parallel[d], ext);
          }
          // Data-dependent terms move the point along their dimensions (DynDims).
          const std::vector<int32_t> dyn_dims =
              in.dyn.empty() ? std::vector<int32_t>{} : *DynDims(k, stride, in);
          const auto at_point = [&](int32_t v) { return point[static_cast<size_t>(v)]; };
          std::vector<int32_t> kmap(k.insts.size(), -1);
          for (size_t ki = 0; ki < k.insts.size(); ++ki) {
            if (static_cast<int32_t>(ki) == store) continue;
            Inst x = k.insts[ki];
            loop::RemapOperands(&x, kmap);
            if (x.op == Opcode::kLoad || x.op == Opcode::kIndex) {
              std::vector<loop::DynIndex> moved;
              for (size_t t = 0; t < dyn_dims.size(); ++t) {
                const IndexExpr coef = *CoefficientOf(x.index, dyn_dims[t]);
                if (coef.is_zero()) continue;
                // The term's stride is the dimension's, so it moves the point by its value.
                moved.push_back({map[static_cast<size_t>(in.dyn[t].value)],
                                 coef.SubstituteVars(at_point, ext)});
              }
              x.index = x.index.SubstituteVars(at_point, ext);
              for (loop::DynIndex& d : x.dyn) d.stride = d.stride.SubstituteVars(at_point, ext);
              x.dyn.insert(x.dyn.end(), moved.begin(), moved.end());
            }
            if (x.op == Opcode::kLoad && mask >= 0) {
              if (x.mask >= 0) {
                Inst both;
                both.op = Opcode::kAnd;
                both.type = loop::ScalarType::kBool;
                both.a = x.mask;
                both.b = mask;
                out.push_back(both);
                x.mask = static_cast<int32_t>(out.size() - 1);
              } else {
                x.mask = mask;
              }
            }
            out.push_back(std::move(x));
            kmap[ki] = static_cast<int32_t>(out.size() - 1);
          }
          int32_t value = kmap[static_cast<size_t>(k.insts[static_cast<size_t>(store)].a)];
          // A load yields the buffer's compute type: convert the stored value the same way
          // (half types keep f32 precision, as fused kernels in PyTorch do).
          const loop::ScalarType want =
              loop::ComputeType(loop::ScalarTypeOf(p_.buffers[static_cast<size_t>(buffer)].dtype));
          if (out[static_cast<size_t>(value)].type != want) {
            Inst cast;
            cast.op = Opcode::kCast;
            cast.type = want;
            cast.a = value;
            out.push_back(cast);
            value = static_cast<int32_t>(out.size() - 1);
          }
          if (mask >= 0) {
            Inst zero;
            zero.op = Opcode::kConst;
            zero.type = out[static_cast<size_t>(value)].type;
            out.push_back(zero);
            Inst sel;
            sel.op = Opcode::kSelect;
            sel.type = zero.type;
            sel.a = mask;
            sel.b = value;
            sel.c = static_cast<int32_t>(out.size() - 1);
            out.push_back(sel);
            value = static_cast<int32_t>(out.size() - 1);
          }
          map[static_cast<size_t>(i)] = value;
          continue;
        }
        map[static_cast<size_t>(i)] = loop::AppendRemapped(&out, std::move(in), map);
      }
      ns.end = static_cast<int32_t>(out.size());
      stages.push_back(ns);
    }
    c.insts = std::move(out);
    c.stages = std::move(stages);
    for (const std::string& n : k.nodes) {
      if (std::find(c.nodes.begin(), c.nodes.end(), n) == c.nodes.end()) c.nodes.push_back(n);
    }
  }

  // --- Merging kernels into earlier kernels over the same space.

  // Buffers a kernel reads and writes.
  static std::set<int32_t> ReadSet(const Kernel& k) {
    std::set<int32_t> s;
    for (const Inst& in : k.insts) {
      if (Reads(in)) s.insert(in.buffer);
    }
    return s;
  }
  static std::set<int32_t> WriteSet(const Kernel& k) {
    std::set<int32_t> s;
    for (const Inst& in : k.insts) {
      if (Writes(in)) s.insert(in.buffer);
    }
    return s;
  }

  // Whether `a` stores into any of `buffers`.
  static bool StoresAny(const Kernel& a, const std::set<int32_t>& buffers) {
    for (const Inst& in : a.insts) {
      if (Writes(in) && buffers.count(in.buffer)) return true;
    }
    return false;
  }

  enum class Join {
    kNone,
    kParallelStage,
    kFullStage,
    kStages,
    kHorizontal,
    kPadded,  // kHorizontal over different extents (PaddedJoinable)
    kIntoFirstLoop
  };

  Join Compatible(const Kernel& a, const Kernel& c) const {
    if (!a.fusible || !c.fusible) return Join::kNone;
    const bool a_red = HasLoops(a), c_red = HasLoops(c);
    if (!c_red && c.reduction.empty()) {
      if (a_red && SameExtents(a.parallel, c.parallel)) return Join::kParallelStage;
      if (a_red) {
        std::vector<IndexExpr> full = a.parallel;
        full.insert(full.end(), a.reduction.begin(), a.reduction.end());
        if (SameExtents(full, c.parallel)) return Join::kFullStage;
      }
      if (!a_red && a.reduction.empty() && SameExtents(a.parallel, c.parallel))
        return Join::kHorizontal;
      return Join::kNone;
    }
    if (a_red && c_red && SameExtents(a.parallel, c.parallel) &&
        SameExtents(a.reduction, c.reduction)) {
      return Join::kStages;
    }
    if (!a_red && a.reduction.empty() && c_red && a.stages.size() == 1 && c.stages[0].loops) {
      std::vector<IndexExpr> full = c.parallel;
      full.insert(full.end(), c.reduction.begin(), c.reduction.end());
      if (SameExtents(full, a.parallel)) return Join::kIntoFirstLoop;
    }
    return Join::kNone;
  }

  // Stores of `a`, by buffer: the index and the stored value and whether it is P-scope.
  struct StoreInfo {
    IndexExpr index;
    int32_t value = -1;
    bool parallel_scope = false;  // in a stage that does not loop
    bool simple = true;
  };
  static std::map<int32_t, StoreInfo> Stores(const Kernel& a) {
    std::map<int32_t, StoreInfo> out;
    for (const loop::Stage& s : a.stages) {
      for (int32_t i = s.begin; i < s.end; ++i) {
        const Inst& in = a.insts[static_cast<size_t>(i)];
        if (!Writes(in)) continue;
        StoreInfo info;
        info.index = in.index;
        info.value = in.a;
        info.parallel_scope = !s.loops;
        info.simple = in.dyn.empty() && in.mask < 0;
        if (out.count(in.buffer)) info.simple = false;
        out[in.buffer] = info;
      }
    }
    return out;
  }

  void Merge() {
    // Position of each buffer's producing step.
    bool changed = true;
    while (changed) {
      changed = false;
      std::map<int32_t, size_t> producer;
      for (size_t i = 0; i < p_.steps.size(); ++i) {
        for (int32_t b : StepWrites(p_.steps[i])) producer[b] = i;
      }
      for (size_t j = 0; j < p_.steps.size() && !changed; ++j) {
        if (p_.steps[j].kind != Step::Kind::kKernel) continue;
        const Kernel& whole = K(p_.steps[j].kernel);
        const std::set<int32_t> creads = ReadSet(whole);
        // Its one-dimensional form for padded joins, made once for every candidate i.
        const std::optional<Kernel> c1 = padded_ ? OneDimensional(whole) : std::nullopt;
        for (size_t i = j; i-- > 0;) {
          const Step& s = p_.steps[i];
          if (s.kind == Step::Kind::kExtern && s.call.collective) break;
          if (s.kind != Step::Kind::kKernel) continue;
          const Kernel& a = K(s.kernel);
          // A pointwise kernel over a view of a's space ([B, T, N] of [B*T, N]) is seen over
          // a's space where its indices allow: a pointwise a's, or, when it reads what a
          // reduction stores, the reduction's rows and their elements, or its rows alone (a
          // log-softmax's backward, seen over the rows it sums). A kernel over fewer rows than
          // the reduction's ([B*T, N] beside [B, T] | [N]: a layer norm's normalization
          // written for the next matmul) has its rows split to the reduction's.
          std::optional<Kernel> seen;
          if (!SameExtents(a.parallel, whole.parallel) && whole.reduction.empty()) {
            if (a.reduction.empty()) {
              seen = CoalesceTo(whole, a.parallel);
            } else if (HasLoops(a) && StoresAny(a, creads)) {
              std::vector<IndexExpr> full = a.parallel;
              full.insert(full.end(), a.reduction.begin(), a.reduction.end());
              if (!SameExtents(full, whole.parallel)) seen = CoalesceTo(whole, full);
              if (!seen) seen = CoalesceTo(whole, a.parallel);
              if (!seen) seen = SplitTo(whole, full);
            }
          }
          const Kernel& c = seen ? *seen : whole;
          Join join = Compatible(a, c);
          std::optional<Kernel> a1;  // a's one-dimensional form, for a padded join
          if (join == Join::kNone && c1) {
            a1 = OneDimensional(a);
            if (a1 && PaddedJoinable(a1->parallel, c1->parallel) &&
                a1->insts.size() + c1->insts.size() <= kMaxPaddedJoinInsts) {
              join = Join::kPadded;
            }
          }
          if (join == Join::kNone) continue;
          // Everything c reads exists at i, or comes from a at the same point.
          const std::set<int32_t> awrites = WriteSet(a);
          const std::map<int32_t, StoreInfo> stores = Stores(a);
          bool legal = true;
          for (int32_t b : creads) {
            if (awrites.count(b)) {
              auto it = stores.find(b);
              // c would read what a stored, not what a step in between writes over it (a
              // scatter accumulating into the buffer a zeroed).
              if (it == stores.end() || !it->second.simple || WrittenBetween(b, i, j)) {
                legal = false;
                break;
              }
              for (const Inst& in : c.insts) {
                if (Reads(in) && in.buffer == b &&
                    (in.index != it->second.index || !in.dyn.empty() || in.mask >= 0)) {
                  legal = false;
                }
              }
              continue;
            }
            auto it = producer.find(b);
            if (it != producer.end() && it->second > i) legal = false;
          }
          if (!legal) continue;
          if (join == Join::kIntoFirstLoop) {
            // Only a producer of c joins it, and c must not write what a reads: a's stores
            // and c's run for different points at once.
            bool produces = false, overwrites = false;
            for (int32_t b : creads) produces |= awrites.count(b) > 0;
            const std::set<int32_t> areads = ReadSet(a);
            for (int32_t b : WriteSet(c)) overwrites |= areads.count(b) > 0;
            if (!produces || overwrites) continue;
            std::optional<Kernel> joined = IntoFirstLoop(a, c);
            if (!joined) continue;
            K(s.kernel) = *std::move(joined);
            p_.steps.erase(p_.steps.begin() + static_cast<std::ptrdiff_t>(j));
            changed = true;
            break;
          }
          if (join == Join::kPadded) {
            // Only kernels that share no buffer join padded: neither reads what the other
            // writes, at any point.
            const std::set<int32_t> areads = ReadSet(a), cwrites = WriteSet(c);
            bool apart = true;
            for (int32_t b : creads) apart &= awrites.count(b) == 0;
            for (int32_t b : cwrites) apart &= areads.count(b) == 0 && awrites.count(b) == 0;
            if (!apart) continue;
            const int64_t an = a1->parallel[0].const_value();
            const int64_t cn = c1->parallel[0].const_value();
            const Kernel padded = cn < an ? PadTo(*c1, an) : *c1;
            K(s.kernel) = an < cn ? PadTo(*a1, cn) : *std::move(a1);
            Kernel& joined = K(s.kernel);
            const int32_t start = static_cast<int32_t>(joined.insts.size());
            Append(joined, padded, Join::kHorizontal, {});
            AddSegments(joined, padded, start);
            p_.steps.erase(p_.steps.begin() + static_cast<std::ptrdiff_t>(j));
            changed = true;
            break;
          }
          const bool small = join == Join::kHorizontal && SmallConstantSpace(c.parallel);
          if (join == Join::kHorizontal && !small) {
            // Siblings join when they share data (or one of them reads nothing), or when the
            // space is small enough that a launch is most of their cost.
            const std::set<int32_t> areads = ReadSet(a);
            bool share = areads.empty() || creads.empty();
            for (int32_t b : creads) share = share || areads.count(b) || awrites.count(b);
            if (!share) continue;
          }
          Kernel& joined = K(s.kernel);
          const int32_t start = static_cast<int32_t>(joined.insts.size());
          Append(joined, c, join, stores);
          if (join != Join::kHorizontal || joined.stages.size() != 1) {
            joined.segments.clear();
            joined.segment_points.clear();
          } else if (small) {
            // Over a small space each joined kernel keeps threads of its own where it can.
            PlaceInSegment(joined, start);
          }
          p_.steps.erase(p_.steps.begin() + static_cast<std::ptrdiff_t>(j));
          changed = true;
          break;
        }
      }
    }
  }

  // Whether a step strictly between steps i and j writes buffer b.
  bool WrittenBetween(int32_t b, size_t i, size_t j) const {
    for (size_t k = i + 1; k < j; ++k) {
      for (int32_t w : StepWrites(p_.steps[k])) {
        if (w == b) return true;
      }
    }
    return false;
  }

  std::vector<int32_t> StepWrites(const Step& s) const {
    std::vector<int32_t> out;
    if (s.kind == Step::Kind::kKernel) {
      for (int32_t b : WriteSet(p_.kernels[static_cast<size_t>(s.kernel)])) out.push_back(b);
    } else if (s.kind == Step::Kind::kExtern) {
      for (const loop::TensorRef& r : s.call.outputs) {
        if (r.buffer >= 0) out.push_back(r.buffer);
      }
    }
    return out;
  }

  // Appends c to a; loads of what a stored at the same index read the stored value instead
  // when it is visible (stored in a stage that does not loop, or in the same stage).
  void Append(Kernel& a, const Kernel& c, Join join, const std::map<int32_t, StoreInfo>& stores) {
    const int32_t base = static_cast<int32_t>(a.insts.size());
    std::vector<int32_t> map(c.insts.size(), -1);
    const bool same_stage = join == Join::kHorizontal;
    std::vector<loop::Stage> cstages = c.stages;
    for (const loop::Stage& s : cstages) {
      loop::Stage ns{s.loops, static_cast<int32_t>(a.insts.size()), 0};
      if (join == Join::kFullStage) ns.loops = true;
      for (int32_t i = s.begin; i < s.end; ++i) {
        Inst in = c.insts[static_cast<size_t>(i)];
        if (Reads(in)) {
          auto it = stores.find(in.buffer);
          if (it != stores.end() && in.index == it->second.index && in.dyn.empty() && in.mask < 0 &&
              (it->second.parallel_scope || same_stage)) {
            map[static_cast<size_t>(i)] = it->second.value;
            continue;
          }
        }
        map[static_cast<size_t>(i)] = loop::AppendRemapped(&a.insts, std::move(in), map);
      }
      ns.end = static_cast<int32_t>(a.insts.size());
      if (same_stage && !a.stages.empty()) {
        a.stages.back().end = ns.end;
      } else {
        a.stages.push_back(ns);
      }
    }
    (void)base;
    for (const std::string& n : c.nodes) {
      if (std::find(a.nodes.begin(), a.nodes.end(), n) == a.nodes.end()) a.nodes.push_back(n);
    }
  }

  // A pointwise kernel `a` of one store over the full space (P x R) of reduction kernel `c`,
  // which reads what it stores (a residual add before a layer norm, whose sum the backward
  // needs): c gets a store of that value in its first loop, which visits every point of
  // P x R once, right after its first load of it; then a is inlined into c as a producer
  // would be, every load of its buffer recomputing it. The later loops recompute rather than
  // load back what the first one stored: the inputs a reads are loads that code generation
  // may keep in registers across c's loops, a buffer c stores into is not. Nullopt when a is
  // not of that form (more than one store, not a dense layout of its space, c's first loop
  // not reading it).
  std::optional<Kernel> IntoFirstLoop(const Kernel& a, const Kernel& c) {
    int32_t store = -1;
    for (size_t i = 0; i < a.insts.size(); ++i) {
      if (!Writes(a.insts[i])) continue;
      if (store >= 0) return std::nullopt;
      store = static_cast<int32_t>(i);
    }
    if (store < 0) return std::nullopt;
    const Inst& st = a.insts[static_cast<size_t>(store)];
    const std::vector<int32_t> order = DenseOrder(a, st);
    if (order.size() != a.parallel.size()) return std::nullopt;
    const loop::Stage& first = c.stages[0];
    int32_t load = -1;
    for (int32_t i = first.begin; i < first.end && load < 0; ++i) {
      const Inst& in = c.insts[static_cast<size_t>(i)];
      if (Reads(in) && in.buffer == st.buffer) load = i;
    }
    if (load < 0) return std::nullopt;
    // c with `store buffer[index] <- load` right after the load.
    Kernel m = c;
    m.insts.clear();
    std::vector<int32_t> map(c.insts.size(), -1);
    for (int32_t i = 0; i < static_cast<int32_t>(c.insts.size()); ++i) {
      Inst in = c.insts[static_cast<size_t>(i)];
      map[static_cast<size_t>(i)] = loop::AppendRemapped(&m.insts, std::move(in), map);
      if (i != load) continue;
      Inst keep = st;
      keep.a = map[static_cast<size_t>(i)];
      keep.type = m.insts.back().type;
      m.insts.push_back(std::move(keep));
    }
    for (loop::Stage& s : m.stages) {
      s.begin = s.begin <= load ? s.begin : s.begin + 1;
      s.end = s.end <= load ? s.end : s.end + 1;
    }
    InlineInto(m, a, store, order);
    m.nodes = a.nodes;
    for (const std::string& n : c.nodes) {
      if (std::find(m.nodes.begin(), m.nodes.end(), n) == m.nodes.end()) m.nodes.push_back(n);
    }
    return m;
  }

  // Stores nobody reads any more, into buffers nothing else needs.
  void RemoveDeadStores() {
    const std::vector<bool> pinned = PinnedBuffers(p_);
    std::vector<int> reads(p_.buffers.size(), 0);
    for (const Step& s : p_.steps) {
      if (s.kind != Step::Kind::kKernel) continue;
      for (const Inst& in : K(s.kernel).insts) {
        if (Reads(in)) ++reads[static_cast<size_t>(in.buffer)];
      }
    }
    for (const Step& s : p_.steps) {
      if (s.kind != Step::Kind::kKernel) continue;
      Kernel& k = K(s.kernel);
      std::vector<bool> drop(k.insts.size(), false);
      bool any = false;
      for (size_t i = 0; i < k.insts.size(); ++i) {
        const Inst& in = k.insts[i];
        if (Writes(in) && !pinned[static_cast<size_t>(in.buffer)] &&
            reads[static_cast<size_t>(in.buffer)] == 0 && k.fusible) {
          drop[i] = true;
          any = true;
        }
      }
      if (!any) continue;
      // Also drop instructions no longer used (loads and arithmetic feeding only the stores).
      std::vector<int> uses(k.insts.size(), 0);
      for (size_t i = k.insts.size(); i-- > 0;) {
        const Inst& in = k.insts[i];
        const bool live = !drop[i] && (Writes(in) || in.op == Opcode::kReduce || uses[i] > 0);
        if (!live) {
          drop[i] = true;
          continue;
        }
        loop::ForEachOperand(in, [&](int32_t v) { ++uses[static_cast<size_t>(v)]; });
      }
      Compress(k, drop);
    }
  }

  static void Compress(Kernel& k, const std::vector<bool>& drop) {
    std::vector<int32_t> map(k.insts.size(), -1);
    std::vector<Inst> out;
    std::vector<loop::Stage> stages;
    for (const loop::Stage& s : k.stages) {
      loop::Stage ns{s.loops, static_cast<int32_t>(out.size()), 0};
      for (int32_t i = s.begin; i < s.end; ++i) {
        if (drop[static_cast<size_t>(i)]) continue;
        Inst in = k.insts[static_cast<size_t>(i)];
        map[static_cast<size_t>(i)] = loop::AppendRemapped(&out, std::move(in), map);
      }
      ns.end = static_cast<int32_t>(out.size());
      if (ns.end > ns.begin) stages.push_back(ns);
    }
    // A segment starts where its first kept instruction went; one with none kept is gone.
    std::vector<int32_t> segments;
    std::vector<int64_t> points;
    for (size_t g = 0; g < k.segments.size(); ++g) {
      for (int32_t i = k.segments[g]; i < k.SegmentEnd(g); ++i) {
        if (map[static_cast<size_t>(i)] < 0) continue;
        segments.push_back(map[static_cast<size_t>(i)]);
        if (!k.segment_points.empty()) points.push_back(k.segment_points[g]);
        break;
      }
    }
    if (segments.size() < 2) {
      segments.clear();
      points.clear();
    }
    k.segments = std::move(segments);
    k.segment_points = std::move(points);
    k.insts = std::move(out);
    k.stages = std::move(stages);
  }

  // Drops kernels that no step launches and buffers nothing refers to; renumbers both.
  void Compact() {
    std::vector<Kernel> kernels;
    for (Step& s : p_.steps) {
      if (s.kind != Step::Kind::kKernel) continue;
      kernels.push_back(std::move(p_.kernels[static_cast<size_t>(s.kernel)]));
      s.kernel = static_cast<int32_t>(kernels.size() - 1);
    }
    p_.kernels = std::move(kernels);
    std::vector<bool> used(p_.buffers.size(), false);
    for (size_t b = 0; b < p_.buffers.size(); ++b) {
      if (p_.buffers[b].kind == loop::Buffer::Kind::kInput) used[b] = true;
    }
    const std::vector<bool> pinned = PinnedBuffers(p_);
    for (size_t b = 0; b < pinned.size(); ++b) used[b] = used[b] || pinned[b];
    for (const Kernel& k : p_.kernels) {
      for (const Inst& in : k.insts) {
        if (Reads(in) || Writes(in)) used[static_cast<size_t>(in.buffer)] = true;
      }
    }
    std::vector<int32_t> map(p_.buffers.size(), -1);
    std::vector<loop::Buffer> buffers;
    for (size_t b = 0; b < p_.buffers.size(); ++b) {
      if (!used[b]) continue;
      map[b] = static_cast<int32_t>(buffers.size());
      buffers.push_back(std::move(p_.buffers[b]));
    }
    p_.buffers = std::move(buffers);
    auto m = [&](int32_t& b) {
      if (b >= 0) b = map[static_cast<size_t>(b)];
    };
    for (Kernel& k : p_.kernels) {
      for (Inst& in : k.insts) {
        if (Reads(in) || Writes(in)) m(in.buffer);
      }
    }
    std::function<void(loop::CallArg&)> arg = [&](loop::CallArg& a) {
      if (a.kind == loop::CallArg::Kind::kTensor) m(a.tensor.buffer);
      for (loop::CallArg& x : a.items) arg(x);
    };
    for (Step& s : p_.steps) {
      if (s.kind == Step::Kind::kWriteBack) m(s.src.buffer);
      if (s.kind != Step::Kind::kExtern) continue;
      for (loop::CallArg& a : s.call.args) arg(a);
      for (auto& kv : s.call.kwargs) arg(kv.second);
      for (loop::TensorRef& r : s.call.outputs) m(r.buffer);
    }
    for (loop::Output& o : p_.outputs) {
      if (o.kind == loop::Output::Kind::kTensor) m(o.tensor.buffer);
    }
  }

  Program p_;
  bool padded_ = false;  // Merge also joins kernels padded (Join::kPadded)
  FuseOptions o_;
};

}  // namespace

absl::StatusOr<loop::Program> Fuse(loop::Program program, const FuseOptions& options) {
  return Fuser(std::move(program), options).Run();
}

}  // namespace kiln::fuse
