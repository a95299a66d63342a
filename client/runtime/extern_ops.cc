#include "client/runtime/extern_ops.h"

#include <algorithm>
#include <cstring>
#include <functional>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/runtime/extern_args.h"
#include "client/runtime/gemm.h"

namespace kiln::runtime {

// Defined in conv.cc and attention.cc.
absl::Status RunConvolution(const ExternCall& call);
absl::Status RunConvolutionBackward(const ExternCall& call);
absl::Status RunEfficientAttention(const ExternCall& call);
absl::Status RunEfficientAttentionBackward(const ExternCall& call);
absl::Status RunCudnnAttention(const ExternCall& call);
absl::Status RunCudnnAttentionBackward(const ExternCall& call);

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

absl::Status Matmul(const ExternCall& call, bool batched, bool with_addend) {
  ArgReader r(call);
  const int first = with_addend ? 1 : 0;
  const Tensor self = with_addend ? r.GetTensor(0, "self") : Tensor();
  const Tensor a = r.GetTensor(first, with_addend ? "mat1" : "self");
  const Tensor b = r.GetTensor(first + 1, with_addend ? "mat2" : "mat2");
  const double beta = with_addend ? r.GetDouble(-1, "beta", 1.0) : 0.0;
  const double alpha = with_addend ? r.GetDouble(-1, "alpha", 1.0) : 1.0;
  if (!r.ok() || !CheckFloating(r, a, b)) return r.status();
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
  r.CheckOutput(0, out_sizes, a.dtype());
  const Tensor out = r.Output(0);
  if (!r.ok() || !out.defined()) return r.status();
  g.a = MatOf(a, off, off + 1, batched ? 0 : -1);
  g.b = MatOf(b, off, off + 1, batched ? 0 : -1);
  g.c = MatOf(out, off, off + 1, batched ? 0 : -1);
  g.alpha = alpha;
  g.beta = beta;
  MatRef addend;
  if (with_addend) {
    // self broadcasts to [m, n]: pad to two dims and read size-1 dims with stride 0.
    if (!r.Check(self.dim() <= 2, "self ", self.DebugString(), " does not broadcast")) {
      return r.status();
    }
    const int64_t lead = 2 - self.dim();
    int64_t strides[2] = {0, 0};
    const int64_t want[2] = {g.m, g.n};
    for (int64_t d = 0; d < self.dim(); ++d) {
      if (self.size(d) == want[d + lead]) {
        strides[d + lead] = self.stride(d);
      } else if (!r.Check(self.size(d) == 1, "self ", self.DebugString(),
                          " does not broadcast to [", g.m, ", ", g.n, "]")) {
        return r.status();
      }
    }
    if (!r.Check(IsFloating(self.dtype()), "self must be floating")) return r.status();
    addend.data = self.data();
    addend.dtype = self.dtype();
    addend.rs = strides[0];
    addend.cs = strides[1];
    g.addend = &addend;
  }
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
  c.input_split_sizes = a.input_split_sizes;
  c.output_split_sizes = a.output_split_sizes;
  c.input = input;
  c.output = out;
  return (*call.context->collective)(c);
}

// `_c10d_functional.<name>`: the argument layout of each collective's schema.
absl::Status Collective(const ExternCall& call, absl::string_view name) {
  ArgReader r(call);
  CollectiveArgs a;
  a.op = std::string(name);
  a.group_size = call.context->world_size;
  const bool coalesced = absl::EndsWith(name, "_coalesced");
  if (coalesced) a.op = std::string(name.substr(0, name.size() - strlen("_coalesced")));
  if (a.op == "all_reduce") {
    a.reduce_op = r.GetString(1, "reduce_op", "sum");
    a.group_name = r.GetString(2, "group_name", "");
  } else if (a.op == "all_gather_into_tensor") {
    a.group_size = r.GetInt(1, "group_size", 1);
    a.group_name = r.GetString(2, "group_name", "");
  } else if (a.op == "reduce_scatter_tensor") {
    a.reduce_op = r.GetString(1, "reduce_op", "sum");
    a.group_size = r.GetInt(2, "group_size", 1);
    a.group_name = r.GetString(3, "group_name", "");
  } else if (a.op == "all_to_all_single") {
    a.output_split_sizes = r.GetInts(1, "output_split_sizes", {});
    a.input_split_sizes = r.GetInts(2, "input_split_sizes", {});
    a.group_name = r.GetString(3, "group_name", "");
  }
  // Coalesced forms run their tensors one after the other, in order.
  const std::vector<Tensor> inputs =
      coalesced ? r.GetTensors(0, "inputs")
                : std::vector<Tensor>{r.GetTensor(0, name == "wait_tensor" ? "tensor" : "input")};
  if (!r.ok()) return r.status();
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (absl::Status s = RunCollective(call, a, inputs[i], r.Output(i)); !s.ok()) return s;
  }
  return absl::OkStatus();
}

using OpFn = std::function<absl::Status(const ExternCall&)>;

const std::map<std::string, OpFn, std::less<>>& Ops() {
  static const auto* ops = [] {
    auto* m = new std::map<std::string, OpFn, std::less<>>{
        {"aten.mm.default", [](const ExternCall& c) { return Matmul(c, false, false); }},
        {"aten.addmm.default", [](const ExternCall& c) { return Matmul(c, false, true); }},
        {"aten.bmm.default", [](const ExternCall& c) { return Matmul(c, true, false); }},
        {"aten.convolution.default", RunConvolution},
        {"aten.convolution_backward.default", RunConvolutionBackward},
        {"aten._scaled_dot_product_efficient_attention.default", RunEfficientAttention},
        {"aten._scaled_dot_product_efficient_attention_backward.default",
         RunEfficientAttentionBackward},
        {"aten._scaled_dot_product_cudnn_attention.default", RunCudnnAttention},
        {"aten._scaled_dot_product_cudnn_attention_backward.default", RunCudnnAttentionBackward},
    };
    for (const char* name :
         {"all_reduce", "wait_tensor", "all_gather_into_tensor", "reduce_scatter_tensor",
          "all_to_all_single", "all_reduce_coalesced", "all_gather_into_tensor_coalesced",
          "reduce_scatter_tensor_coalesced"}) {
      m->emplace(absl::StrCat("_c10d_functional.", name, ".default"),
                 [name](const ExternCall& c) { return Collective(c, name); });
    }
    return m;
  }();
  return *ops;
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
