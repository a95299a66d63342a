#include "client/runtime/extern_ops.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/runtime/extern_args.h"
#include "client/runtime/gemm.h"
#include "proto/ops/registry.h"

namespace kiln::runtime {

// Defined in conv.cc, attention.cc and embedding.cc.
absl::Status RunConvolution(const ExternCall& call);
absl::Status RunConvolutionBackward(const ExternCall& call);
// Any scaled-dot-product attention op, forward or backward, as its registry layout says.
absl::Status RunAttention(const ExternCall& call);
absl::Status RunEmbeddingBackward(const ExternCall& call);

namespace {

MatRef MatOf(const Tensor& t, int64_t row_dim, int64_t col_dim, int64_t batch_dim) {
  MatRef m;
  m.data = t.data();
  m.dtype = t.dtype();
  m.rs = t.stride(row_dim);
  m.cs = t.stride(col_dim);
  m.bs = batch_dim >= 0 ? t.stride(batch_dim) : 0;
  return m;
}

bool CheckFloating(ArgReader& r, const Tensor& a, const Tensor& b) {
  if (!IsFloating(a.dtype())) {
    r.FailUnimplemented(absl::StrCat("dtype ", DTypeName(a.dtype())));
    return false;
  }
  return r.Check(a.dtype() == b.dtype(), "operands have different dtypes ", DTypeName(a.dtype()),
                 " and ", DTypeName(b.dtype()));
}

// `t` broadcast to a matrix (a batch of them) of `sizes` ([m, n] or [b, m, n]): its trailing
// dims against those, a dim of one element or one it lacks read with stride 0; false when it
// does not broadcast.
bool BroadcastMat(const Tensor& t, const std::vector<int64_t>& sizes, MatRef* m) {
  const int64_t rank = static_cast<int64_t>(sizes.size());
  if (t.dim() > rank) return false;
  int64_t strides[3] = {0, 0, 0};
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t at = rank - t.dim() + d;
    if (t.size(d) != 1 && t.size(d) != sizes[static_cast<size_t>(at)]) return false;
    strides[at] = t.size(d) == 1 ? 0 : t.stride(d);
  }
  m->data = t.data();
  m->dtype = t.dtype();
  m->bs = rank == 3 ? strides[0] : 0;
  m->rs = strides[rank - 2];
  m->cs = strides[rank - 1];
  return true;
}

// mm and bmm, and with an addend (`addmm`: addmm and baddbmm, whose `self` is the addend,
// broadcast, scaled by beta, the product by alpha).
absl::Status Matmul(const ExternCall& call, bool batched, bool addmm = false) {
  ArgReader r(call);
  const int first = addmm ? 1 : 0;
  const Tensor a = r.GetTensor(first, addmm ? (batched ? "batch1" : "mat1") : "self");
  const Tensor b = r.GetTensor(first + 1, addmm ? (batched ? "batch2" : "mat2") : "mat2");
  const Tensor addend = addmm ? r.GetTensor(0, "self") : Tensor();
  if (!r.ok() || !CheckFloating(r, a, b)) return r.status();
  if (addmm && !CheckFloating(r, a, addend)) return r.status();
  const int64_t rank = batched ? 3 : 2;
  const int64_t off = batched ? 1 : 0;
  if (!r.Check(a.dim() == rank && b.dim() == rank && a.size(off + 1) == b.size(off) &&
                   (!batched || a.size(0) == b.size(0)),
               "shapes ", a.DebugString(), " and ", b.DebugString(), " cannot be multiplied")) {
    return r.status();
  }
  GemmArgs g;
  g.batch = batched ? a.size(0) : 1;
  g.m = a.size(off);
  g.k = a.size(off + 1);
  g.n = b.size(off + 1);
  std::vector<int64_t> out_sizes = {g.m, g.n};
  if (batched) out_sizes.insert(out_sizes.begin(), g.batch);
  MatRef added;
  if (addmm) {
    if (!r.Check(BroadcastMat(addend, out_sizes, &added), "self ", addend.DebugString(),
                 " does not broadcast to [", absl::StrJoin(out_sizes, ", "), "]")) {
      return r.status();
    }
    g.beta = r.GetDouble(-1, "beta", 1.0);
    g.alpha = r.GetDouble(-1, "alpha", 1.0);
    g.addend = &added;
  }
  r.CheckOutput(0, out_sizes, a.dtype());
  const Tensor out = r.Output(0);
  if (!r.ok() || !out.defined()) return r.status();
  g.a = MatOf(a, off, off + 1, batched ? 0 : -1);
  g.b = MatOf(b, off, off + 1, batched ? 0 : -1);
  g.c = MatOf(out, off, off + 1, batched ? 0 : -1);
  Gemm(g, call.context->pool, call.context->max_threads);
  return absl::OkStatus();
}

bool SameView(const Tensor& a, const Tensor& b) {
  return a.data() == b.data() && a.sizes() == b.sizes() && a.strides() == b.strides() &&
         a.dtype() == b.dtype();
}

// The result of a collective over one rank is its input.
absl::Status CopyUnlessSame(const Tensor& in, const Tensor& out) {
  if (!out.defined() || SameView(in, out)) return absl::OkStatus();
  return CopyTensor(in, out);
}

// One collective's parameters, as the trainer's process group needs them.
struct CollectiveArgs {
  std::string op;  // "all_reduce", "all_gather_into_tensor", ...
  std::string reduce_op;
  std::string group_name;
  int64_t group_size = 1;
  int64_t src = 0;                                             // broadcast
  std::vector<int64_t> input_split_sizes, output_split_sizes;  // all_to_all_single
};

// Runs one collective of `a` from `input` into `out`: a copy for one rank (or a wait), the
// trainer's hook otherwise.
absl::Status RunCollective(const ExternCall& call, const CollectiveArgs& a, const Tensor& input,
                           const Tensor& out) {
  // The hook performs collectives synchronously, so waiting is a no-op.
  if (a.op == "wait_tensor" || a.group_size == 1) {
    if (out.defined() && out.sizes() != input.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat(call.op, ": output ", out.DebugString(),
                                                     " differs from the input ",
                                                     input.DebugString(), " for one rank"));
    }
    return CopyUnlessSame(input, out);
  }
  if (call.context->collective == nullptr || !*call.context->collective) {
    return absl::FailedPreconditionError(
        absl::StrCat(call.op, " over ", a.group_size, " ranks (group \"", a.group_name,
                     "\") needs a collective hook from the trainer; none was given"));
  }
  CollectiveCall c;
  c.op = a.op;
  c.reduce_op = a.reduce_op;
  c.group_name = a.group_name;
  c.group_size = a.group_size;
  c.src = a.src;
  c.input_split_sizes = a.input_split_sizes;
  c.output_split_sizes = a.output_split_sizes;
  c.input = input;
  c.output = out;
  return (*call.context->collective)(c);
}

// A functional collective, its arguments where the op registry's layout of its schema puts
// them. Without a group_size argument the collective spans the world.
absl::Status Collective(const ExternCall& call, const ops::Op& op) {
  const ops::CollectiveLayout& layout = *op.collective;
  auto name = [&](int param) { return absl::string_view(op.schema.params[param].name); };
  ArgReader r(call);
  CollectiveArgs a;
  a.op = layout.kind;
  a.group_size = call.context->world_size;
  if (layout.reduce_op >= 0) {
    a.reduce_op = r.GetString(layout.reduce_op, name(layout.reduce_op), "sum");
  }
  if (layout.group_size >= 0) {
    a.group_size = r.GetInt(layout.group_size, name(layout.group_size), 1);
  }
  if (layout.group_name >= 0) {
    a.group_name = r.GetString(layout.group_name, name(layout.group_name), "");
  }
  if (layout.src >= 0) a.src = r.GetInt(layout.src, name(layout.src), 0);
  if (layout.output_split_sizes >= 0) {
    a.output_split_sizes =
        r.GetInts(layout.output_split_sizes, name(layout.output_split_sizes), {});
  }
  if (layout.input_split_sizes >= 0) {
    a.input_split_sizes = r.GetInts(layout.input_split_sizes, name(layout.input_split_sizes), {});
  }
  // Coalesced forms run their tensors one after the other, in order.
  const std::vector<Tensor> inputs =
      layout.coalesced ? r.GetTensors(layout.input, name(layout.input))
                       : std::vector<Tensor>{r.GetTensor(layout.input, name(layout.input))};
  if (!r.ok()) return r.status();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (absl::Status s = RunCollective(call, a, inputs[i], r.Output(i)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

using OpFn = std::function<absl::Status(const ExternCall&)>;

// The implementations, each registered against the op registry's entry: an op the registry
// does not list as one that may run as an extern call is a programming error, caught by the
// first test that runs an extern op. Every registry collective is implemented from its layout.
const std::map<std::string, OpFn, std::less<>>& Ops() {
  static const auto* table = [] {
    auto* m = new std::map<std::string, OpFn, std::less<>>;
    auto add = [m](absl::string_view target, OpFn fn) {
      if (!ops::MayRunAsExtern(target)) {
        std::fprintf(stderr, "kiln: the runtime implements %.*s, which is no extern op\n",
                     static_cast<int>(target.size()), target.data());
        std::abort();
      }
      m->emplace(std::string(target), std::move(fn));
    };
    add("aten.mm.default", [](const ExternCall& c) { return Matmul(c, false); });
    add("aten.bmm.default", [](const ExternCall& c) { return Matmul(c, true); });
    add("aten.addmm.default", [](const ExternCall& c) { return Matmul(c, false, true); });
    add("aten.baddbmm.default", [](const ExternCall& c) { return Matmul(c, true, true); });
    add("aten.convolution.default", RunConvolution);
    add("aten.convolution_backward.default", RunConvolutionBackward);
    add("aten._scaled_dot_product_efficient_attention.default", RunAttention);
    add("aten._scaled_dot_product_efficient_attention_backward.default", RunAttention);
    add("aten._scaled_dot_product_cudnn_attention.default", RunAttention);
    add("aten._scaled_dot_product_cudnn_attention_backward.default", RunAttention);
    add("aten.embedding_dense_backward.default", RunEmbeddingBackward);
    for (const ops::Op* op : ops::AllOps()) {
      if (!op->collective.has_value()) continue;
      add(op->target(), [op](const ExternCall& c) { return Collective(c, *op); });
    }
    return m;
  }();
  return *table;
}

}  // namespace

absl::Status RunExternOp(const ExternCall& call) {
  const auto it = Ops().find(call.op);
  if (it == Ops().end()) {
    return absl::UnimplementedError(
        absl::StrCat("extern op ", call.op, " is not implemented by the CPU runtime"));
  }
  return it->second(call);
}

bool IsExternOpSupported(absl::string_view op) { return Ops().count(op) > 0; }

std::vector<std::string> SupportedExternOps() {
  std::vector<std::string> names;
  for (const auto& [name, fn] : Ops()) names.push_back(name);
  return names;
}

}  // namespace kiln::runtime
