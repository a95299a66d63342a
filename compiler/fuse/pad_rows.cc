#include "compiler/fuse/pad_rows.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace kiln::fuse {
namespace {

using loop::Atom;
using loop::CallArg;
using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;
using loop::TensorRef;

// Buffers whose rows of `c` elements lie `cp` apart with the elements between them touched
// by nothing else: the buffers this phase padded or made. A matmul may read or write there.
struct PrivateRows {
  int64_t c = 0, cp = 0;
};
using PrivateBuffers = std::map<int32_t, PrivateRows>;

// Rows shorter than this are left alone: their matmuls are small, and padding would add up
// to an eighth of their memory.
constexpr int64_t kMinRow = 64;

bool IsMatmul(const std::string& op) { return op == "aten.mm.default" || op == "aten.bmm.default"; }

bool IsSixteenBitFloat(graph::DType d) {
  return d == graph::DType::kFloat16 || d == graph::DType::kBFloat16;
}

bool HasDivOrMod(const IndexExpr& e) {
  for (const loop::Term& t : e.terms()) {
    for (const Atom& a : t.factors) {
      if (a.kind != Atom::Kind::kVar && a.kind != Atom::Kind::kSym) return true;
    }
  }
  return false;
}

// The row length of a matmul operand's view: with one dimension of stride 1, the smallest
// other stride among dimensions of more than one element; 0 when there is none or a size or
// stride is not a constant.
int64_t RowLength(const TensorRef& t) {
  bool unit = false;
  int64_t row = 0;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (!t.sizes[d].is_const() || !t.strides[d].is_const()) return 0;
    const int64_t n = t.sizes[d].const_value(), s = t.strides[d].const_value();
    if (n <= 1) continue;
    if (s == 1) {
      unit = true;
    } else if (s > 1 && (row == 0 || s < row)) {
      row = s;
    }
  }
  return unit ? row : 0;
}

// Element index `e` of rows of `c` moved to rows of `cp`; nullopt when the move does not
// simplify to an index without divisions (the index does not walk whole rows).
std::optional<IndexExpr> MoveIndex(const IndexExpr& e, int64_t c, int64_t cp,
                                   const loop::VarExtents& extents) {
  if (HasDivOrMod(e)) return std::nullopt;
  const IndexExpr row = IndexExpr::FloorDiv(e, IndexExpr::Const(c), extents);
  const IndexExpr col = IndexExpr::Mod(e, IndexExpr::Const(c), extents);
  IndexExpr moved = row * IndexExpr::Const(cp) + col;
  if (HasDivOrMod(moved)) return std::nullopt;
  return moved;
}

// A view of rows of `c` as a view of rows of `cp`: each dimension either steps whole rows or
// stays inside one; nullopt for a view that crosses rows or is not constant.
std::optional<TensorRef> MoveView(const TensorRef& t, int64_t c, int64_t cp) {
  if (!t.offset.is_const()) return std::nullopt;
  const int64_t offset = t.offset.const_value();
  if (offset < 0) return std::nullopt;
  TensorRef out = t;
  int64_t reach = offset % c;  // the furthest column any element of the view reaches
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (!t.sizes[d].is_const() || !t.strides[d].is_const()) return std::nullopt;
    const int64_t n = t.sizes[d].const_value(), s = t.strides[d].const_value();
    if (s < 0) return std::nullopt;
    if (s % c == 0) {
      out.strides[d] = IndexExpr::Const(s / c * cp);
    } else if (n > 1) {
      reach += (n - 1) * s;
    }
  }
  if (reach >= c) return std::nullopt;
  out.offset = IndexExpr::Const(offset / c * cp + offset % c);
  return out;
}

// The view [rows, c] of `buffer` with rows `stride` apart from element `offset`.
TensorRef View2(int32_t buffer, int64_t rows, int64_t c, int64_t stride, int64_t offset,
                graph::DType dtype) {
  TensorRef t;
  t.buffer = buffer;
  t.sizes = {IndexExpr::Const(rows), IndexExpr::Const(c)};
  t.strides = {IndexExpr::Const(stride), IndexExpr::Const(1)};
  t.offset = IndexExpr::Const(offset);
  t.dtype = dtype;
  return t;
}

// Every view of a buffer that extern calls and write-backs hold, to rewrite in place.
void ViewsOf(CallArg& a, std::vector<TensorRef*>* views) {
  if (a.kind == CallArg::Kind::kTensor) views->push_back(&a.tensor);
  for (CallArg& item : a.items) ViewsOf(item, views);
}

std::vector<TensorRef*> ProgramViews(loop::Program& p) {
  std::vector<TensorRef*> views;
  for (loop::Step& step : p.steps) {
    if (step.kind == loop::Step::Kind::kExtern) {
      for (CallArg& a : step.call.args) ViewsOf(a, &views);
      for (auto& [name, a] : step.call.kwargs) ViewsOf(a, &views);
      for (TensorRef& o : step.call.outputs) views.push_back(&o);
    } else if (step.kind == loop::Step::Kind::kWriteBack) {
      views.push_back(&step.src);
    }
  }
  return views;
}

// The row length of a matmul view that needs padding (0 when it does not: aligned,
// short, not 16-bit floats, or not constant).
int64_t UnalignedRow(const loop::Program& p, const TensorRef& t, int64_t align) {
  if (t.buffer < 0 || !IsSixteenBitFloat(p.buffers[t.buffer].dtype) ||
      t.dtype != p.buffers[t.buffer].dtype) {
    return 0;
  }
  const int64_t c = RowLength(t);
  const int64_t bytes = loop::ByteSize(loop::ScalarTypeOf(p.buffers[t.buffer].dtype));
  return c >= kMinRow && (c * bytes) % align != 0 && t.offset.is_const() ? c : 0;
}

// The buffers matmuls read or write as unaligned rows of 16-bit floats, with their row
// length; a buffer whose matmuls disagree on it is left out.
std::map<int32_t, int64_t> Candidates(const loop::Program& p, int64_t align) {
  std::map<int32_t, int64_t> rows;
  std::vector<int32_t> conflicting;
  auto consider = [&](const TensorRef& t) {
    if (t.buffer < 0 || p.buffers[t.buffer].kind != loop::Buffer::Kind::kIntermediate) return;
    const int64_t c = UnalignedRow(p, t, align);
    if (c == 0) return;
    auto [it, added] = rows.emplace(t.buffer, c);
    if (!added && it->second != c) conflicting.push_back(t.buffer);
  };
  for (const loop::Step& step : p.steps) {
    if (step.kind != loop::Step::Kind::kExtern || !IsMatmul(step.call.op)) continue;
    for (const CallArg& a : step.call.args) {
      if (a.kind == CallArg::Kind::kTensor) consider(a.tensor);
    }
    for (const TensorRef& o : step.call.outputs) consider(o);
  }
  for (int32_t b : conflicting) rows.erase(b);
  for (const loop::Output& o : p.outputs) {
    if (o.kind == loop::Output::Kind::kTensor) rows.erase(o.tensor.buffer);
  }
  return rows;
}

// Pads buffer `b`'s rows of `c` to `cp` when every access allows it; false (and `p`
// unchanged) when one does not.
bool PadBuffer(loop::Program& p, int32_t b, int64_t c, int64_t cp) {
  loop::Buffer& buffer = p.buffers[b];
  if (!buffer.elements.is_const() || buffer.elements.const_value() % c != 0) return false;
  std::vector<std::pair<IndexExpr*, IndexExpr>> indices;
  for (loop::Kernel& k : p.kernels) {
    for (Inst& in : k.insts) {
      if ((in.op != Opcode::kLoad && in.op != Opcode::kStore) || in.buffer != b) continue;
      if (!in.dyn.empty()) return false;
      std::optional<IndexExpr> moved = MoveIndex(in.index, c, cp, k.Extents());
      if (!moved.has_value()) return false;
      indices.emplace_back(&in.index, *std::move(moved));
    }
  }
  std::vector<std::pair<TensorRef*, TensorRef>> views;
  for (TensorRef* t : ProgramViews(p)) {
    if (t->buffer != b) continue;
    std::optional<TensorRef> moved = MoveView(*t, c, cp);
    if (!moved.has_value()) return false;
    views.emplace_back(t, *std::move(moved));
  }
  for (auto& [at, moved] : indices) *at = std::move(moved);
  for (auto& [at, moved] : views) *at = std::move(moved);
  buffer.elements = IndexExpr::Const(buffer.elements.const_value() / c * cp);
  return true;
}

// An index of the elements of view `t`, its dimensions walked by p0, p1, ...: offset plus
// each stride times its variable.
IndexExpr ViewIndex(const TensorRef& t) {
  IndexExpr index = t.offset;
  for (size_t d = 0; d < t.strides.size(); ++d) {
    index = index + t.strides[d] * IndexExpr::Var(static_cast<int32_t>(d));
  }
  return index;
}

// `views` (of one shape) with their dimensions reordered alike, by the first view's strides
// from the largest to the smallest: a kernel's last parallel variable, the one adjacent
// threads differ in, then walks adjacent elements.
void InnermostLast(std::vector<TensorRef*> views) {
  const TensorRef& first = *views[0];
  std::vector<size_t> order(first.sizes.size());
  for (size_t d = 0; d < order.size(); ++d) order[d] = d;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return first.strides[a].is_const() && first.strides[b].is_const() &&
           first.strides[a].const_value() > first.strides[b].const_value();
  });
  for (TensorRef* t : views) {
    TensorRef moved = *t;
    for (size_t d = 0; d < order.size(); ++d) {
      moved.sizes[d] = t->sizes[order[d]];
      moved.strides[d] = t->strides[order[d]];
    }
    *t = std::move(moved);
  }
}

// A kernel over view `to`'s shape storing `value` (an instruction that may read p0, p1, ...)
// to each of its elements.
loop::Kernel StoreKernel(const std::string& node, Inst value, const TensorRef& to) {
  loop::Kernel k;
  k.nodes = {node};
  k.parallel = to.sizes;
  if (k.parallel.empty()) k.parallel = {IndexExpr::Const(1)};
  Inst store;
  store.op = Opcode::kStore;
  store.type = value.type;
  store.a = 0;
  store.buffer = to.buffer;
  store.index = ViewIndex(to);
  k.insts = {std::move(value), store};
  k.stages = {{false, 0, 2}};
  return k;
}

// A kernel copying each element of `from_view` to `to_view` (of one shape), the
// destination's adjacent elements by adjacent threads.
loop::Kernel CopyKernel(const std::string& node, const TensorRef& from_view,
                        const TensorRef& to_view, graph::DType dtype) {
  TensorRef from = from_view, to = to_view;
  InnermostLast({&to, &from});
  Inst load;
  load.op = Opcode::kLoad;
  load.type = loop::ComputeType(loop::ScalarTypeOf(dtype));
  load.buffer = from.buffer;
  load.index = ViewIndex(from);
  return StoreKernel(node, std::move(load), to);
}

// The buffers a step writes (a kernel's stores, an extern's results, a write-back's input).
std::vector<int32_t> Writes(const loop::Program& p, const loop::Step& step) {
  std::vector<int32_t> out;
  if (step.kind == loop::Step::Kind::kKernel && step.kernel >= 0) {
    for (const Inst& in : p.kernels[step.kernel].insts) {
      if (in.op == Opcode::kStore) out.push_back(in.buffer);
    }
  } else if (step.kind == loop::Step::Kind::kExtern) {
    for (const TensorRef& o : step.call.outputs) out.push_back(o.buffer);
  } else if (step.kind == loop::Step::Kind::kWriteBack) {
    for (size_t b = 0; b < p.buffers.size(); ++b) {
      if (p.buffers[b].kind == loop::Buffer::Kind::kInput &&
          p.buffers[b].input_index == step.input_index) {
        out.push_back(static_cast<int32_t>(b));
      }
    }
  }
  return out;
}

// The largest element index view `t` reaches.
int64_t LastElement(const TensorRef& t) {
  int64_t last = t.offset.const_value();
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    last += (t.sizes[d].const_value() - 1) * t.strides[d].const_value();
  }
  return last;
}

// A step running kernel `k`, which joins the program.
loop::Step KernelStep(loop::Program& p, loop::Kernel k) {
  p.kernels.push_back(std::move(k));
  loop::Step step;
  step.kernel = static_cast<int32_t>(p.kernels.size() - 1);
  return step;
}

// The whole rows of `c` elements a constant view touches: the first and how many.
std::pair<int64_t, int64_t> RowSpan(const TensorRef& t, int64_t c) {
  const int64_t first = t.offset.const_value() / c;
  return {first, LastElement(t) / c + 1 - first};
}

// A new intermediate buffer of `elements` elements, of buffer `like`'s dtype and name.
int32_t AddBufferLike(loop::Program& p, int32_t like, int64_t elements) {
  loop::Buffer buffer;
  buffer.dtype = p.buffers[like].dtype;
  buffer.elements = IndexExpr::Const(elements);
  buffer.name = p.buffers[like].name;
  p.buffers.push_back(buffer);
  return static_cast<int32_t>(p.buffers.size() - 1);
}

// View `t` of rows of `c` starting at row `first_row`, moved to buffer `to` of rows of `cp`
// that starts there.
TensorRef MovedTo(const TensorRef& t, int64_t c, int64_t cp, int64_t first_row, int32_t to) {
  TensorRef shifted = t;
  shifted.offset = IndexExpr::Const(t.offset.const_value() - first_row * c);
  TensorRef moved = *MoveView(shifted, c, cp);
  moved.buffer = to;
  return moved;
}

// The row length of a matmul view to stage through a padded copy: unaligned, and inside
// rows; 0 when it is not.
int64_t StagedRow(const loop::Program& p, const TensorRef& t, int64_t align) {
  const int64_t c = UnalignedRow(p, t, align);
  return c > 0 && MoveView(t, c, c).has_value() ? c : 0;
}

// Matmul views left unaligned (on inputs and outputs of the graph, or buffers whose other
// accesses do not walk whole rows) go through a padded copy: an operand is copied into
// aligned rows before the matmul (once for every matmul that reads the same rows before
// they are written again), a result is written to aligned rows and copied out after it.
void Stage(loop::Program& p, int64_t align, PrivateBuffers& private_rows) {
  struct Staged {
    int32_t buffer;
    int64_t c, first_row, rows;
    int32_t padded;
  };
  std::vector<Staged> staged;
  std::vector<loop::Step> steps;
  for (loop::Step& step : p.steps) {
    // A padded copy serves later matmuls until its buffer is written again.
    for (int32_t b : Writes(p, step)) {
      std::erase_if(staged, [&](const Staged& s) { return s.buffer == b; });
    }
    if (step.kind != loop::Step::Kind::kExtern || !IsMatmul(step.call.op)) {
      steps.push_back(std::move(step));
      continue;
    }
    const std::string node = step.call.node;
    std::vector<loop::Step> after;
    for (CallArg& a : step.call.args) {
      if (a.kind != CallArg::Kind::kTensor) continue;
      TensorRef& t = a.tensor;
      const int64_t c = StagedRow(p, t, align);
      if (c == 0) continue;
      const auto [first_row, rows] = RowSpan(t, c);
      const IndexExpr& elements = p.buffers[t.buffer].elements;
      if (!elements.is_const() || (first_row + rows) * c > elements.const_value()) continue;
      const int64_t cp = PaddedRow(c, loop::ByteSize(loop::ScalarTypeOf(t.dtype)), align);
      int32_t padded = -1;
      for (const Staged& s : staged) {
        if (s.buffer == t.buffer && s.c == c && s.first_row == first_row && s.rows == rows) {
          padded = s.padded;
        }
      }
      if (padded < 0) {
        padded = AddBufferLike(p, t.buffer, rows * cp);
        private_rows[padded] = {c, cp};
        TensorRef from = View2(t.buffer, rows, c, c, first_row * c, t.dtype);
        TensorRef to = View2(padded, rows, c, cp, 0, t.dtype);
        steps.push_back(KernelStep(p, CopyKernel(node, from, to, t.dtype)));
        staged.push_back({t.buffer, c, first_row, rows, padded});
      }
      t = MovedTo(t, c, cp, first_row, padded);
    }
    for (TensorRef& o : step.call.outputs) {
      const int64_t c = StagedRow(p, o, align);
      if (c == 0) continue;
      const int64_t cp = PaddedRow(c, loop::ByteSize(loop::ScalarTypeOf(o.dtype)), align);
      const auto [first_row, rows] = RowSpan(o, c);
      const int32_t padded = AddBufferLike(p, o.buffer, rows * cp);
      private_rows[padded] = {c, cp};
      TensorRef moved = MovedTo(o, c, cp, first_row, padded);
      after.push_back(KernelStep(p, CopyKernel(node, moved, o, o.dtype)));
      o = std::move(moved);
    }
    steps.push_back(std::move(step));
    for (loop::Step& s : after) steps.push_back(std::move(s));
  }
  p.steps = std::move(steps);
}

// --- Padded extents ---------------------------------------------------------------------
//
// Aligned rows are not enough: cuBLAS also wants the extent along each operand's contiguous
// dimension to be a multiple of the alignment (a vocabulary of 50,257 logits in rows 50,264
// apart still runs the slow kernels, 5x slower on an H200). So a matmul whose M, K or N is
// such an extent runs on the extents rounded up. The extra rows and columns of M and N only
// make extra results, which nothing reads; the extra K columns of A and rows of B are zeroed
// before the matmul so that they add nothing. An operand extends in place where its extra
// elements are padding of a buffer this phase padded or made, or lie past the end of an
// intermediate buffer (which grows); any other is copied into a buffer of the padded
// extents first, and a result is copied out after.

enum Dim { kM = 0, kK = 1, kN = 2 };

// The logical dimensions of a matmul operand's last two view dimensions: A is [M, K], B is
// [K, N], the result [M, N].
constexpr Dim kRoles[3][2] = {{kM, kK}, {kK, kN}, {kM, kN}};

// Which of the last two dimensions of `t` (0 or 1) has stride 1 and more than one element;
// -1 when neither does.
int ContiguousDim(const TensorRef& t, size_t off) {
  for (int i = 0; i < 2; ++i) {
    if (t.strides[off + i].const_value() == 1 && t.sizes[off + i].const_value() > 1) return i;
  }
  return -1;
}

bool AllConst(const TensorRef& t) {
  if (!t.offset.is_const()) return false;
  for (size_t d = 0; d < t.sizes.size(); ++d) {
    if (!t.sizes[d].is_const() || !t.strides[d].is_const() || t.strides[d].const_value() < 0) {
      return false;
    }
  }
  return true;
}

bool IsGraphOutput(const loop::Program& p, int32_t buffer) {
  for (const loop::Output& o : p.outputs) {
    if (o.kind == loop::Output::Kind::kTensor && o.tensor.buffer == buffer) return true;
  }
  return false;
}

// Whether `t` may grow into `wide` where it is: each grown dimension's extra elements are
// padding of a private buffer's rows (the contiguous dimension, reaching to the end of the
// row's own elements) or lie past the end of an intermediate buffer (the other dimension of
// a single matrix). Sets `*elements` to what the buffer must then hold.
bool GrowsInPlace(const loop::Program& p, const TensorRef& t, const TensorRef& wide,
                  const PrivateBuffers& private_rows, int64_t* elements) {
  const loop::Buffer& buffer = p.buffers[t.buffer];
  if (!buffer.elements.is_const()) return false;
  const size_t off = t.sizes.size() - 2;
  const int64_t offset = t.offset.const_value();
  *elements = buffer.elements.const_value();
  for (size_t d = off; d < t.sizes.size(); ++d) {
    const int64_t n = t.sizes[d].const_value(), n2 = wide.sizes[d].const_value();
    if (n2 == n) continue;
    const int64_t stride = t.strides[d].const_value();
    if (stride == 1) {
      const auto it = private_rows.find(t.buffer);
      if (it == private_rows.end()) return false;
      const auto [c, cp] = it->second;
      for (size_t e = 0; e < t.sizes.size(); ++e) {
        if (e != d && t.sizes[e].const_value() > 1 && t.strides[e].const_value() % cp != 0) {
          return false;
        }
      }
      if (offset % cp + n != c || offset % cp + n2 > cp) return false;
    } else {
      const bool single = off == 0 || t.sizes[0].const_value() == 1;
      if (!single || buffer.kind != loop::Buffer::Kind::kIntermediate ||
          IsGraphOutput(p, t.buffer) || offset + n * stride < *elements) {
        return false;
      }
    }
  }
  *elements = std::max(*elements, LastElement(wide) + 1);
  return true;
}

// A kernel storing zero to each element of `view`.
loop::Kernel ZeroKernel(const std::string& node, const TensorRef& view) {
  TensorRef t = view;
  InnermostLast({&t});
  Inst zero;
  zero.op = Opcode::kConst;
  zero.type = loop::ComputeType(loop::ScalarTypeOf(t.dtype));
  return StoreKernel(node, zero, t);
}

// The part of `wide` (a matmul operand grown along its dimension `d`) past `n` elements.
TensorRef GrownPart(const TensorRef& wide, size_t d, int64_t n) {
  TensorRef part = wide;
  part.sizes[d] = IndexExpr::Const(wide.sizes[d].const_value() - n);
  part.offset = IndexExpr::Const(wide.offset.const_value() + n * wide.strides[d].const_value());
  return part;
}

// A new buffer holding `wide`'s shape densely, its dimension `inner` (of the last two)
// innermost, viewed whole.
TensorRef DenseCopyOf(loop::Program& p, const TensorRef& wide, int inner) {
  const size_t off = wide.sizes.size() - 2;
  TensorRef dense = wide;
  dense.offset = IndexExpr::Const(0);
  int64_t stride = 1;
  const size_t order[2] = {off + inner, off + 1 - inner};
  for (size_t d : order) {
    dense.strides[d] = IndexExpr::Const(stride);
    stride *= wide.sizes[d].const_value();
  }
  for (size_t d = off; d-- > 0;) {
    dense.strides[d] = IndexExpr::Const(stride);
    stride *= wide.sizes[d].const_value();
  }
  dense.buffer = AddBufferLike(p, wide.buffer, stride);
  return dense;
}

// `wide` cut back to the sizes of `t`.
TensorRef Window(const TensorRef& wide, const TensorRef& t) {
  TensorRef w = wide;
  w.sizes = t.sizes;
  return w;
}

bool SameView(const TensorRef& a, const TensorRef& b) {
  return a.buffer == b.buffer && a.sizes == b.sizes && a.strides == b.strides &&
         a.offset == b.offset && a.dtype == b.dtype;
}

// The matmul's three views (A, B, result) when they are constant 16-bit float matrices of
// one dtype; empty otherwise.
std::vector<TensorRef*> MatmulViews(loop::Program& p, loop::Step& step) {
  if (step.call.args.size() < 2 || step.call.outputs.size() != 1) return {};
  std::vector<TensorRef*> views;
  for (int i = 0; i < 2; ++i) {
    if (step.call.args[i].kind != CallArg::Kind::kTensor) return {};
    views.push_back(&step.call.args[i].tensor);
  }
  views.push_back(&step.call.outputs[0]);
  const size_t rank = views[0]->sizes.size();
  for (TensorRef* t : views) {
    if (t->buffer < 0 || t->sizes.size() != rank || rank < 2 || !AllConst(*t) ||
        !IsSixteenBitFloat(t->dtype) || t->dtype != views[0]->dtype ||
        p.buffers[t->buffer].dtype != t->dtype) {
      return {};
    }
  }
  return views;
}

void PadExtents(loop::Program& p, int64_t align, const PrivateBuffers& private_rows) {
  struct Copied {
    TensorRef from;
    TensorRef wide;  // the dense copy, grown
  };
  std::vector<Copied> copies;
  std::vector<loop::Step> steps;
  for (loop::Step& step : p.steps) {
    for (int32_t b : Writes(p, step)) {
      std::erase_if(copies, [&](const Copied& c) { return c.from.buffer == b; });
    }
    std::vector<TensorRef*> views;
    if (step.kind == loop::Step::Kind::kExtern && IsMatmul(step.call.op)) {
      views = MatmulViews(p, step);
    }
    if (views.empty()) {
      steps.push_back(std::move(step));
      continue;
    }
    const size_t off = views[0]->sizes.size() - 2;
    const int64_t extent[3] = {views[0]->sizes[off].const_value(),
                               views[0]->sizes[off + 1].const_value(),
                               views[1]->sizes[off + 1].const_value()};
    const int64_t bytes = loop::ByteSize(loop::ScalarTypeOf(views[0]->dtype));
    int64_t padded[3] = {extent[0], extent[1], extent[2]};
    bool any = false;
    for (int x = 0; x < 3; ++x) {
      const int inner = ContiguousDim(*views[x], off);
      if (inner < 0) continue;
      const Dim dim = kRoles[x][inner];
      if (extent[dim] >= kMinRow && (extent[dim] * bytes) % align != 0) {
        padded[dim] = PaddedRow(extent[dim], bytes, align);
        any = true;
      }
    }
    if (!any) {
      steps.push_back(std::move(step));
      continue;
    }
    const std::string node = step.call.node;
    std::vector<loop::Step> after;
    for (int x = 0; x < 3; ++x) {
      TensorRef& t = *views[x];
      TensorRef wide = t;
      for (int i = 0; i < 2; ++i) wide.sizes[off + i] = IndexExpr::Const(padded[kRoles[x][i]]);
      if (wide.sizes == t.sizes) continue;
      int64_t elements = 0;
      if (GrowsInPlace(p, t, wide, private_rows, &elements)) {
        p.buffers[t.buffer].elements = IndexExpr::Const(elements);
      } else if (x == 2) {
        wide = DenseCopyOf(p, wide, std::max(ContiguousDim(t, off), 0));
        after.push_back(KernelStep(p, CopyKernel(node, Window(wide, t), t, t.dtype)));
      } else {
        const auto it = std::find_if(copies.begin(), copies.end(), [&](const Copied& c) {
          return SameView(c.from, t) && c.wide.sizes == wide.sizes;
        });
        if (it != copies.end()) {
          wide = it->wide;
        } else {
          const TensorRef from = t;
          wide = DenseCopyOf(p, wide, std::max(ContiguousDim(t, off), 0));
          steps.push_back(KernelStep(p, CopyKernel(node, from, Window(wide, from), t.dtype)));
          copies.push_back({from, wide});
        }
      }
      // K's extra columns of A and rows of B add zeros.
      if (x < 2 && padded[kK] != extent[kK]) {
        const size_t d = off + (x == 0 ? 1 : 0);
        steps.push_back(KernelStep(p, ZeroKernel(node, GrownPart(wide, d, extent[kK]))));
      }
      t = wide;
    }
    steps.push_back(std::move(step));
    for (loop::Step& s : after) steps.push_back(std::move(s));
  }
  p.steps = std::move(steps);
}

}  // namespace

int64_t PaddedRow(int64_t c, int64_t item_bytes, int64_t row_alignment_bytes) {
  const int64_t per_row = row_alignment_bytes / item_bytes;
  return per_row <= 1 ? c : (c + per_row - 1) / per_row * per_row;
}

loop::Program PadMatmulRows(loop::Program program, int64_t row_alignment_bytes) {
  if (row_alignment_bytes <= 0) return program;
  PrivateBuffers private_rows;
  for (const auto& [b, c] : Candidates(program, row_alignment_bytes)) {
    const int64_t bytes = loop::ByteSize(loop::ScalarTypeOf(program.buffers[b].dtype));
    const int64_t cp = PaddedRow(c, bytes, row_alignment_bytes);
    if (PadBuffer(program, b, c, cp)) private_rows[b] = {c, cp};
  }
  Stage(program, row_alignment_bytes, private_rows);
  PadExtents(program, row_alignment_bytes, private_rows);
  return program;
}

}  // namespace kiln::fuse
