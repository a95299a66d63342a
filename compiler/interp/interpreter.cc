#include "compiler/interp/interpreter.h"

#include <algorithm>
#include <exception>
#include <optional>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/interp/op_registry.h"
#include "proto/base/int_expr.h"
#include "proto/ops/registry.h"

namespace kiln::interp {
namespace {

using SymbolMap = std::map<std::string, int64_t, std::less<>>;

// What a node (or input) produced: one value, or a tuple/list of them.
struct Produced {
  std::vector<Value> values;
  bool tuple = false;
};

// Whether `expr` is a bare symbol name ("s77"): such an input binds the symbol; any other
// expression is only checked against the symbols bound elsewhere.
bool IsBareSymbol(absl::string_view expr) {
  if (expr.empty() || !absl::ascii_isalpha(static_cast<unsigned char>(expr[0]))) return false;
  return std::all_of(expr.begin(), expr.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

absl::StatusOr<int64_t> EvalSize(const v1::SymInt& s, const SymbolMap& symbols) {
  if (s.kind_case() == v1::SymInt::kExpr) return EvaluateIntExpr(s.expr(), symbols);
  return s.value();
}

// A tensor meta's concrete sizes, strides and offset under `symbols`.
struct Layout {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t offset = 0;
};

absl::StatusOr<Layout> EvalLayout(const v1::TensorMeta& meta, const SymbolMap& symbols) {
  Layout l;
  for (const v1::SymInt& s : meta.sizes()) {
    absl::StatusOr<int64_t> v = EvalSize(s, symbols);
    if (!v.ok()) return v.status();
    l.sizes.push_back(*v);
  }
  for (const v1::SymInt& s : meta.strides()) {
    absl::StatusOr<int64_t> v = EvalSize(s, symbols);
    if (!v.ok()) return v.status();
    l.strides.push_back(*v);
  }
  if (meta.has_storage_offset()) {
    absl::StatusOr<int64_t> v = EvalSize(meta.storage_offset(), symbols);
    if (!v.ok()) return v.status();
    l.offset = *v;
  }
  return l;
}

absl::Status BindSymbol(const std::string& name, int64_t value, SymbolMap& symbols,
                        absl::string_view where) {
  auto [it, inserted] = symbols.emplace(name, value);
  if (!inserted && it->second != value) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": symbol ", name, " is ", value,
                                                   " here but ", it->second, " elsewhere"));
  }
  return absl::OkStatus();
}

class GraphRun {
 public:
  GraphRun(const v1::Graph& graph, const RunOptions& options)
      : graph_(graph), options_(options), symbols_(options.symbols) {}

  absl::StatusOr<std::vector<Value>> Run(absl::Span<const Value> inputs) {
    if (inputs.size() != static_cast<size_t>(graph_.inputs_size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("the graph takes ", graph_.inputs_size(), " inputs, got ", inputs.size()));
    }
    if (absl::Status s = BindInputs(inputs); !s.ok()) return s;
    uint64_t rng_ops = 0;
    const OpRegistry& registry = DefaultOpRegistry();
    for (const v1::Node& node : graph_.nodes()) {
      const OpInfo* op = registry.Find(node.target());
      if (op == nullptr) {
        return absl::UnimplementedError(absl::StrCat("node ", node.name(), ": op ", node.target(),
                                                     " is not supported by the interpreter"));
      }
      RunContext ctx;
      ctx.options = &options_;
      if (ops::DrawsRandom(node.target())) ctx.rng_stream = options_.rng_offset + rng_ops++;
      absl::Status s = RunNode(node, *op, ctx);
      if (!s.ok()) return s;
    }
    std::vector<Value> out;
    if (absl::Status s = Flatten(graph_.output(), out); !s.ok()) return s;
    return out;
  }

 private:
  absl::Status BindInputs(absl::Span<const Value> inputs) {
    // Bind symbols first so that every input's metadata can then be checked.
    for (int i = 0; i < graph_.inputs_size(); ++i) {
      const v1::GraphInput& in = graph_.inputs(i);
      const Value& v = inputs[static_cast<size_t>(i)];
      if (in.meta().has_symbolic()) {
        const auto* iv = std::get_if<int64_t>(&v);
        if (iv == nullptr) {
          return absl::InvalidArgumentError(
              absl::StrCat("input ", in.name(), " is a symbolic int; pass an int64 value"));
        }
        if (IsBareSymbol(in.meta().symbolic().expr())) {
          if (absl::Status s = BindSymbol(in.meta().symbolic().expr(), *iv, symbols_, in.name());
              !s.ok()) {
            return s;
          }
        }
      } else if (in.meta().has_tensor()) {
        const auto* t = std::get_if<Tensor>(&v);
        if (t == nullptr || !t->defined()) {
          return absl::InvalidArgumentError(
              absl::StrCat("input ", in.name(), " is a tensor; pass a defined tensor"));
        }
        const v1::TensorMeta& m = in.meta().tensor();
        if (m.sizes_size() != t->dim()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input ", in.name(), " has rank ", t->dim(), ", its metadata ", m.sizes_size()));
        }
        for (int d = 0; d < m.sizes_size(); ++d) {
          if (m.sizes(d).kind_case() == v1::SymInt::kExpr && IsBareSymbol(m.sizes(d).expr())) {
            if (absl::Status s = BindSymbol(m.sizes(d).expr(), t->size(d), symbols_, in.name());
                !s.ok()) {
              return s;
            }
          }
        }
      }
    }
    for (int i = 0; i < graph_.inputs_size(); ++i) {
      const v1::GraphInput& in = graph_.inputs(i);
      const Value& v = inputs[static_cast<size_t>(i)];
      if (in.meta().has_tensor()) {
        const Tensor& t = std::get<Tensor>(v);
        absl::StatusOr<Layout> l = EvalLayout(in.meta().tensor(), symbols_);
        if (!l.ok()) return Annotate(l.status(), absl::StrCat("input ", in.name()));
        if (l->sizes != t.sizes() || in.meta().tensor().dtype() != t.dtype()) {
          return absl::InvalidArgumentError(absl::StrCat(
              "input ", in.name(), " is ", t.DebugString(), ", its metadata says ",
              DTypeName(in.meta().tensor().dtype()), "[", absl::StrJoin(l->sizes, ", "), "]"));
        }
      }
      env_[in.name()] = Produced{{v}, false};
    }
    return absl::OkStatus();
  }

  static absl::Status Annotate(const absl::Status& s, absl::string_view where) {
    return absl::Status(s.code(), absl::StrCat(where, ": ", s.message()));
  }

  absl::StatusOr<Arg> Resolve(const v1::Argument& a) {
    return ArgFromArgument(a, [this](const v1::Argument& x) { return ResolveOther(x); });
  }

  // References and symbolic values; the rest are constants.
  absl::StatusOr<Arg> ResolveOther(const v1::Argument& a) {
    switch (a.kind_case()) {
      case v1::Argument::kRef: {
        auto it = env_.find(a.ref().node());
        if (it == env_.end()) {
          return absl::InvalidArgumentError(
              absl::StrCat("refers to unknown value ", a.ref().node()));
        }
        const Produced& p = it->second;
        if (a.ref().has_output()) {
          const int i = a.ref().output();
          if (i < 0 || static_cast<size_t>(i) >= p.values.size()) {
            return absl::InvalidArgumentError(
                absl::StrCat("output ", i, " of ", a.ref().node(), " does not exist"));
          }
          return Arg::FromValue(p.values[static_cast<size_t>(i)]);
        }
        if (p.tuple) {
          Arg::List l;
          for (const Value& v : p.values) l.push_back(Arg::FromValue(v));
          return Arg(std::move(l));
        }
        return Arg::FromValue(p.values[0]);
      }
      case v1::Argument::kSymbolic: {
        absl::StatusOr<int64_t> v = EvaluateIntExpr(a.symbolic().expr(), symbols_);
        if (!v.ok()) return v.status();
        if (a.symbolic().kind() == v1::SYM_KIND_BOOL) return Arg(*v != 0);
        return Arg(*v);
      }
      default:
        return Arg();
    }
  }

  absl::Status RunNode(const v1::Node& node, const OpInfo& op, const RunContext& ctx) {
    const std::string where = absl::StrCat("node ", node.name(), " (", node.target(), ")");
    std::vector<Arg> args;
    for (int i = 0; i < node.args_size(); ++i) {
      absl::StatusOr<Arg> a = Resolve(node.args(i));
      if (!a.ok()) return Annotate(a.status(), absl::StrCat(where, " args[", i, "]"));
      args.push_back(*std::move(a));
    }
    std::vector<std::pair<std::string, Arg>> kwargs;
    for (const v1::NamedArgument& kw : node.kwargs()) {
      absl::StatusOr<Arg> a = Resolve(kw.value());
      if (!a.ok()) return Annotate(a.status(), absl::StrCat(where, " kwargs.", kw.name()));
      kwargs.emplace_back(kw.name(), *std::move(a));
    }
    std::vector<Value> results;
    try {
      OpCall call(node.target(), std::move(args), std::move(kwargs), ctx);
      results = op.fn(call);
    } catch (const std::exception& e) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.what()));
    }
    if (!node.multi_output() && results.size() != 1) {
      return absl::InternalError(
          absl::StrCat(where, ": the op returned ", results.size(), " values for one output"));
    }
    if (options_.follow_meta) {
      for (size_t i = 0; i < results.size() && i < static_cast<size_t>(node.outputs_size()); ++i) {
        if (absl::Status s = FollowMeta(node.outputs(static_cast<int>(i)), op, results[i]);
            !s.ok()) {
          return Annotate(s, node.multi_output() ? absl::StrCat(where, " output ", i) : where);
        }
      }
    }
    env_[node.name()] = Produced{std::move(results), node.multi_output()};
    return absl::OkStatus();
  }

  // Checks a result against its metadata and gives a fresh result the recorded layout.
  absl::Status FollowMeta(const v1::ValueMeta& meta, const OpInfo& op, Value& result) {
    if (!meta.has_tensor()) return absl::OkStatus();
    auto* t = std::get_if<Tensor>(&result);
    if (t == nullptr || !t->defined()) {
      return absl::InvalidArgumentError("the metadata records a tensor, the op returned none");
    }
    absl::StatusOr<Layout> l = EvalLayout(meta.tensor(), symbols_);
    if (!l.ok()) return l.status();
    if (l->sizes != t->sizes() || meta.tensor().dtype() != t->dtype()) {
      return absl::InvalidArgumentError(
          absl::StrCat("the op produced ", t->DebugString(), ", the metadata says ",
                       DTypeName(meta.tensor().dtype()), "[", absl::StrJoin(l->sizes, ", "), "]"));
    }
    if (op.returns_views || l->strides.size() != l->sizes.size()) return absl::OkStatus();
    if (l->strides == t->strides() && l->offset == t->storage_offset()) return absl::OkStatus();
    for (int64_t s : l->strides) {
      if (s < 0) return absl::OkStatus();
    }
    *t = t->CloneStrided(l->strides, l->offset);
    return absl::OkStatus();
  }

  absl::Status Flatten(const v1::Argument& a, std::vector<Value>& out) {
    if (a.kind_case() == v1::Argument::kList) {
      for (const v1::Argument& item : a.list().items()) {
        if (absl::Status s = Flatten(item, out); !s.ok()) return s;
      }
      return absl::OkStatus();
    }
    if (a.kind_case() == v1::Argument::kRef) {
      auto it = env_.find(a.ref().node());
      if (it == env_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("the output refers to unknown value ", a.ref().node()));
      }
      if (a.ref().has_output()) {
        const size_t i = static_cast<size_t>(a.ref().output());
        if (i >= it->second.values.size()) {
          return absl::InvalidArgumentError("the output refers to a missing element");
        }
        out.push_back(it->second.values[i]);
      } else {
        for (const Value& v : it->second.values) out.push_back(v);
      }
      return absl::OkStatus();
    }
    absl::StatusOr<Arg> r = Resolve(a);
    if (!r.ok()) return r.status();
    if (const auto* i = std::get_if<int64_t>(&r->v)) {
      out.emplace_back(*i);
    } else if (const auto* d = std::get_if<double>(&r->v)) {
      out.emplace_back(*d);
    } else if (const auto* b = std::get_if<bool>(&r->v)) {
      out.emplace_back(*b);
    } else {
      out.emplace_back(None{});
    }
    return absl::OkStatus();
  }

  const v1::Graph& graph_;
  const RunOptions& options_;
  SymbolMap symbols_;
  std::unordered_map<std::string, Produced> env_;
};

}  // namespace

absl::StatusOr<std::vector<Value>> Run(const v1::Graph& graph, absl::Span<const Value> inputs,
                                       const RunOptions& options) {
  std::optional<ExactFloatScope> exact;
  if (!options.round_to_dtype) exact.emplace();
  return GraphRun(graph, options).Run(inputs);
}

absl::StatusOr<Arg> ArgFromArgument(
    const v1::Argument& a, const std::function<absl::StatusOr<Arg>(const v1::Argument&)>& other) {
  switch (a.kind_case()) {
    case v1::Argument::kIntValue:
      return Arg(static_cast<int64_t>(a.int_value()));
    case v1::Argument::kFloatValue:
      return Arg(a.float_value());
    case v1::Argument::kBoolValue:
      return Arg(a.bool_value());
    case v1::Argument::kStringValue:
      return Arg(a.string_value());
    case v1::Argument::kNone:
      return Arg();
    case v1::Argument::kDtype:
      return Arg(a.dtype());
    case v1::Argument::kDevice: {
      Arg r;
      r.v = a.device();
      return r;
    }
    case v1::Argument::kLayout: {
      Arg r;
      r.v = a.layout();
      return r;
    }
    case v1::Argument::kMemoryFormat:
      return Arg(a.memory_format());
    case v1::Argument::kList: {
      Arg::List l;
      for (const v1::Argument& item : a.list().items()) {
        absl::StatusOr<Arg> r = ArgFromArgument(item, other);
        if (!r.ok()) return r.status();
        l.push_back(*std::move(r));
      }
      return Arg(std::move(l));
    }
    default:
      return other(a);
  }
}

absl::StatusOr<std::vector<Value>> RunOp(absl::string_view target, std::vector<Arg> args,
                                         std::vector<std::pair<std::string, Arg>> kwargs,
                                         const RunOptions& options, uint64_t rng_stream_index) {
  const OpInfo* op = DefaultOpRegistry().Find(target);
  if (op == nullptr) {
    return absl::UnimplementedError(
        absl::StrCat("op ", target, " is not supported by the interpreter"));
  }
  std::optional<ExactFloatScope> exact;
  if (!options.round_to_dtype) exact.emplace();
  RunContext ctx;
  ctx.options = &options;
  ctx.rng_stream = options.rng_offset + rng_stream_index;
  try {
    OpCall call(target, std::move(args), std::move(kwargs), ctx);
    return op->fn(call);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(target, ": ", e.what()));
  }
}

bool IsSupportedOp(absl::string_view target) { return DefaultOpRegistry().Find(target) != nullptr; }

std::vector<std::string> SupportedOps() { return DefaultOpRegistry().Names(); }

int64_t RngOpCount(const v1::Graph& graph) {
  int64_t n = 0;
  for (const v1::Node& node : graph.nodes()) n += ops::DrawsRandom(node.target());
  return n;
}

}  // namespace kiln::interp
