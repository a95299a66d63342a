#include "compiler/lower/lower.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace kiln::lower {
namespace {

using decompose::PrimGraph;
using loop::IndexExpr;
using loop::Inst;
using loop::Opcode;

class Lowerer {
 public:
  explicit Lowerer(const PrimGraph& g) : g_(g) {}

  absl::StatusOr<loop::Program> Run() {
    p_.inputs = g_.inputs;
    p_.symbols = g_.symbols;
    p_.symbol_hints = g_.symbol_hints;
    p_.rng_ops = g_.rng_ops;
    buffer_of_.assign(g_.tensors.size(), -1);
    for (const decompose::Node& n : g_.nodes) {
      absl::Status s;
      switch (n.kind) {
        case decompose::Node::Kind::kInput:
          s = Input(n);
          break;
        case decompose::Node::Kind::kView:
          break;
        case decompose::Node::Kind::kCompute:
          s = Compute(n);
          break;
        case decompose::Node::Kind::kExtern:
          s = Extern(n);
          break;
      }
      if (!s.ok()) return s;
    }
    for (const decompose::Output& o : g_.outputs) {
      loop::Output out;
      switch (o.kind) {
        case decompose::Output::Kind::kTensor: {
          out.kind = loop::Output::Kind::kTensor;
          auto ref = Ref(o.tensor);
          if (!ref.ok()) return ref.status();
          out.tensor = *std::move(ref);
          break;
        }
        case decompose::Output::Kind::kSymbol:
          out.kind = loop::Output::Kind::kSymbol;
          out.symbol = o.symbol;
          break;
        case decompose::Output::Kind::kNone:
          break;
      }
      p_.outputs.push_back(std::move(out));
    }
    for (const decompose::WriteBack& w : g_.write_backs) {
      loop::Step s;
      s.kind = loop::Step::Kind::kWriteBack;
      s.input_index = w.input_index;
      auto ref = Ref(w.tensor);
      if (!ref.ok()) return ref.status();
      s.src = *std::move(ref);
      p_.steps.push_back(std::move(s));
    }
    return std::move(p_);
  }

 private:
  const decompose::Tensor& T(int32_t t) const { return g_.tensors[static_cast<size_t>(t)]; }

  // Elements a layout spans: offset + sum((size - 1) * stride) + 1.
  static IndexExpr Extent(const decompose::Tensor& t) {
    IndexExpr e = t.offset + IndexExpr::Const(1);
    for (size_t i = 0; i < t.sizes.size(); ++i) {
      if (t.sizes[i].is_zero()) return IndexExpr();
      e = e + (t.sizes[i] - IndexExpr::Const(1)) * t.strides[i];
    }
    return e;
  }

  int32_t NewBuffer(int32_t tensor, loop::Buffer::Kind kind, int32_t input_index) {
    const decompose::Tensor& t = T(tensor);
    loop::Buffer b;
    b.kind = kind;
    b.dtype = t.dtype;
    b.elements = Extent(t);
    b.input_index = input_index;
    b.name = t.name;
    p_.buffers.push_back(std::move(b));
    const int32_t id = static_cast<int32_t>(p_.buffers.size() - 1);
    buffer_of_[static_cast<size_t>(tensor)] = id;
    return id;
  }

  absl::StatusOr<int32_t> BufferOf(int32_t tensor) {
    if (tensor < 0) return absl::InternalError("lower: a missing tensor");
    const int32_t root = T(tensor).storage;
    int32_t b = buffer_of_[static_cast<size_t>(root)];
    if (b < 0)
      return absl::InternalError(absl::StrCat("lower: ", T(tensor).name, " has no buffer"));
    return b;
  }

  absl::StatusOr<loop::TensorRef> Ref(int32_t tensor) {
    auto b = BufferOf(tensor);
    if (!b.ok()) return b.status();
    const decompose::Tensor& t = T(tensor);
    loop::TensorRef r;
    r.buffer = *b;
    r.sizes = t.sizes;
    r.strides = t.strides;
    r.offset = t.offset;
    r.dtype = t.dtype;
    return r;
  }

  absl::Status Input(const decompose::Node& n) {
    NewBuffer(n.outputs[0], loop::Buffer::Kind::kInput, n.input_index);
    return absl::OkStatus();
  }

  absl::StatusOr<loop::CallArg> Arg(const decompose::CallArg& a) {
    loop::CallArg out;
    switch (a.kind) {
      case decompose::CallArg::Kind::kTensor: {
        out.kind = loop::CallArg::Kind::kTensor;
        auto r = Ref(a.tensor);
        if (!r.ok()) return r.status();
        out.tensor = *std::move(r);
        break;
      }
      case decompose::CallArg::Kind::kValue:
        out.kind = loop::CallArg::Kind::kValue;
        out.value = a.value;
        break;
      case decompose::CallArg::Kind::kNoneTensor:
        out.kind = loop::CallArg::Kind::kNoneTensor;
        break;
      case decompose::CallArg::Kind::kList:
        out.kind = loop::CallArg::Kind::kList;
        for (const decompose::CallArg& x : a.items) {
          auto item = Arg(x);
          if (!item.ok()) return item.status();
          out.items.push_back(*std::move(item));
        }
        break;
    }
    return out;
  }

  absl::Status Extern(const decompose::Node& n) {
    loop::Step s;
    s.kind = loop::Step::Kind::kExtern;
    loop::ExternCall& c = s.call;
    c.op = n.op;
    c.node = n.name;
    c.collective = n.collective;
    c.fallback = n.fallback;
    c.reason = n.reason;
    c.rng_stream = n.rng_stream;
    c.stack_trace = n.stack_trace;
    for (const decompose::CallArg& a : n.args) {
      auto ca = Arg(a);
      if (!ca.ok()) return ca.status();
      c.args.push_back(*std::move(ca));
    }
    for (const auto& [name, a] : n.kwargs) {
      auto ca = Arg(a);
      if (!ca.ok()) return ca.status();
      c.kwargs.emplace_back(name, *std::move(ca));
    }
    for (int32_t t : n.outputs) {
      if (t < 0) {
        c.outputs.push_back(loop::TensorRef{});
        continue;
      }
      NewBuffer(t, loop::Buffer::Kind::kIntermediate, -1);
      auto r = Ref(t);
      if (!r.ok()) return r.status();
      c.outputs.push_back(*std::move(r));
    }
    p_.steps.push_back(std::move(s));
    return absl::OkStatus();
  }

  // The storage index of `coords` in tensor t (static part).
  static IndexExpr StorageIndex(const decompose::Tensor& t, const std::vector<IndexExpr>& coords) {
    IndexExpr e = t.offset;
    for (size_t d = 0; d < coords.size() && d < t.strides.size(); ++d) {
      e = e + coords[d] * t.strides[d];
    }
    return e;
  }

  absl::Status Compute(const decompose::Node& n) {
    const decompose::Compute& c = n.compute;
    loop::Kernel k;
    k.nodes = {n.name};
    // Kernel variables: parallel dims first, then reduced; size-1 dims vanish.
    std::vector<IndexExpr> var_of(c.dims.size());
    std::vector<size_t> par, red;
    for (size_t i = 0; i < c.dims.size(); ++i) {
      const bool one = c.dims[i].is_const() && c.dims[i].const_value() == 1;
      if (one) continue;
      (c.reduced[i] ? red : par).push_back(i);
    }
    int32_t next = 0;
    for (size_t i : par) {
      var_of[i] = IndexExpr::Var(next++);
      k.parallel.push_back(c.dims[i]);
    }
    for (size_t i : red) {
      var_of[i] = IndexExpr::Var(next++);
      k.reduction.push_back(c.dims[i]);
    }
    const loop::VarExtents extents = k.Extents();
    auto map = [&](const IndexExpr& e) {
      return e.SubstituteVars([&](int32_t v) { return var_of[static_cast<size_t>(v)]; }, extents);
    };
    for (const Inst& src : c.body) {
      Inst in = src;
      if (in.op == Opcode::kIndex) in.index = map(in.index);
      if (in.op == Opcode::kLoad) {
        const decompose::LoadSite& site = c.loads[static_cast<size_t>(in.iimm)];
        auto b = BufferOf(site.tensor);
        if (!b.ok()) return b.status();
        const decompose::Tensor& t = T(site.tensor);
        std::vector<IndexExpr> coords;
        for (const IndexExpr& e : site.coords) coords.push_back(map(e));
        in.buffer = *b;
        in.index = StorageIndex(t, coords);
        in.iimm = 0;
        for (size_t d = 0; d < site.dyn.size(); ++d) {
          if (site.dyn[d] >= 0) in.dyn.push_back({site.dyn[d], t.strides[d]});
        }
      }
      k.insts.push_back(std::move(in));
    }
    const decompose::Tensor& out = T(n.outputs[0]);
    const int32_t out_buffer = NewBuffer(n.outputs[0], loop::Buffer::Kind::kIntermediate, -1);
    std::vector<IndexExpr> out_coords;
    for (int32_t d : c.out_dims) {
      out_coords.push_back(d < 0 ? IndexExpr() : var_of[static_cast<size_t>(d)]);
    }
    int32_t value = c.result;
    const bool reduces =
        !red.empty() || std::any_of(c.reduced.begin(), c.reduced.end(), [](bool r) { return r; });
    if (reduces) {
      Inst r;
      r.op = Opcode::kReduce;
      r.reduce = c.reduce;
      r.a = c.result;
      r.b = c.reduce_index;
      r.iimm = c.store_index ? 1 : 0;
      r.type = c.store_index ? loop::ScalarType::kI64 : k.insts[static_cast<size_t>(c.result)].type;
      k.insts.push_back(std::move(r));
      value = static_cast<int32_t>(k.insts.size() - 1);
      k.stages.push_back({true, 0, value + 1});
    }
    Inst st;
    st.op = Opcode::kStore;
    st.type = k.insts[static_cast<size_t>(value)].type;
    st.a = value;
    st.buffer = out_buffer;
    st.index = StorageIndex(out, out_coords);
    k.insts.push_back(std::move(st));
    const int32_t end = static_cast<int32_t>(k.insts.size());
    k.stages.push_back({false, reduces ? end - 1 : 0, end});
    AddKernel(std::move(k));
    return absl::OkStatus();
  }

  void AddKernel(loop::Kernel k) {
    p_.kernels.push_back(std::move(k));
    loop::Step s;
    s.kind = loop::Step::Kind::kKernel;
    s.kernel = static_cast<int32_t>(p_.kernels.size() - 1);
    p_.steps.push_back(std::move(s));
  }

  const PrimGraph& g_;
  loop::Program p_;
  std::vector<int32_t> buffer_of_;
};

}  // namespace

absl::StatusOr<loop::Program> Lower(const decompose::PrimGraph& graph) {
  return Lowerer(graph).Run();
}

}  // namespace kiln::lower
