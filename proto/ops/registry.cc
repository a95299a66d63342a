#include "proto/ops/registry.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/strip.h"
#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr absl::string_view kCollectiveNamespace = "_c10d_functional.";

[[noreturn]] void BadEntry(absl::string_view what, absl::string_view why) {
  std::fprintf(stderr, "kiln: bad built-in op \"%.*s\": %.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(why.size()), why.data());
  std::abort();
}

// The first of `names` the schema has, or -1.
int FirstParam(const OpSchema& s, std::initializer_list<absl::string_view> names) {
  for (absl::string_view name : names) {
    if (const int i = s.ParamIndex(name); i >= 0) return i;
  }
  return -1;
}

int FirstReturn(const OpSchema& s, std::initializer_list<absl::string_view> names) {
  for (absl::string_view name : names) {
    if (const int i = s.ReturnIndex(name); i >= 0) return i;
  }
  return -1;
}

CollectiveLayout CollectiveLayoutOf(const OpSchema& s) {
  CollectiveLayout c;
  absl::string_view kind = s.target;
  absl::ConsumePrefix(&kind, kCollectiveNamespace);
  kind = kind.substr(0, kind.find('.'));
  c.coalesced = absl::ConsumeSuffix(&kind, "_coalesced");
  c.kind = std::string(kind);
  c.input = FirstParam(s, {"input", "inputs", "tensor"});
  c.reduce_op = s.ParamIndex("reduce_op");
  c.group_size = s.ParamIndex("group_size");
  c.group_name = s.ParamIndex("group_name");
  c.src = s.ParamIndex("src");
  c.output_split_sizes = s.ParamIndex("output_split_sizes");
  c.input_split_sizes = s.ParamIndex("input_split_sizes");
  return c;
}

AttentionLayout AttentionLayoutOf(const OpSchema& s) {
  AttentionLayout a;
  a.query = s.ParamIndex("query");
  a.key = s.ParamIndex("key");
  a.value = s.ParamIndex("value");
  a.attn_bias = s.ParamIndex("attn_bias");
  a.dropout_p = s.ParamIndex("dropout_p");
  a.is_causal = s.ParamIndex("is_causal");
  a.scale = s.ParamIndex("scale");
  a.compute_log_sumexp = s.ParamIndex("compute_log_sumexp");
  a.grad_out = FirstParam(s, {"grad_out", "grad_out_"});
  a.backward = a.grad_out >= 0;
  a.out = s.ParamIndex("out");
  a.logsumexp = s.ParamIndex("logsumexp");
  a.philox_seed = s.ParamIndex("philox_seed");
  a.philox_offset = s.ParamIndex("philox_offset");
  a.grad_input_mask = s.ParamIndex("grad_input_mask");
  if (!a.backward) {
    a.result_logsumexp = FirstReturn(s, {"logsumexp", "log_sumexp"});
    a.result_philox_seed = s.ReturnIndex("philox_seed");
    a.result_philox_offset = s.ReturnIndex("philox_offset");
    a.result_max_q = s.ReturnIndex("max_q");
    a.result_max_k = s.ReturnIndex("max_k");
  }
  return a;
}

struct Table {
  std::vector<Op> owned;
  std::vector<const Op*> sorted;
};

const Table& GetTable() {
  static const Table* table = [] {
    OpTable t;
    AddScalarOps(t);
    AddCollectiveOps(t);
    AddPointwiseOps(t);
    AddReductionOps(t);
    AddViewOps(t);
    AddCopyOps(t);
    AddIndexingOps(t);
    AddFactoryOps(t);
    AddRandomOps(t);
    AddLinalgOps(t);
    AddNnOps(t);
    AddAttentionOps(t);
    auto* out = new Table;
    out->owned = std::move(t.ops());
    for (const Op& op : out->owned) out->sorted.push_back(&op);
    std::sort(out->sorted.begin(), out->sorted.end(),
              [](const Op* a, const Op* b) { return a->target() < b->target(); });
    for (size_t i = 1; i < out->sorted.size(); ++i) {
      if (out->sorted[i - 1]->target() == out->sorted[i]->target()) {
        BadEntry(out->sorted[i]->target(), "listed twice");
      }
    }
    return out;
  }();
  return *table;
}

}  // namespace

void OpTable::Add(const Traits& traits, absl::Span<const char* const> schemas) {
  for (const char* text : schemas) {
    absl::StatusOr<OpSchema> schema = ParseOpSchema(text);
    if (!schema.ok()) BadEntry(text, schema.status().message());
    Op op;
    op.schema = *std::move(schema);
    op.pointwise = traits.pointwise;
    op.reduction = traits.reduction;
    op.view_of = traits.view_of;
    op.view_within_base = traits.view_of >= 0 && traits.view_within_base;
    op.extern_call = traits.extern_call;
    op.extern_when_stored = traits.extern_when_stored;
    if (traits.collective) op.collective = CollectiveLayoutOf(op.schema);
    if (traits.attention) op.attention = AttentionLayoutOf(op.schema);
    op.random = traits.random;
    for (size_t i = 0; i < op.schema.params.size(); ++i) {
      if (op.schema.params[i].mutated) op.mutated.push_back(static_cast<int>(i));
    }
    op.capture_safe = traits.capture_safe;
    op.ordered = op.random || op.collective.has_value() || !op.mutated.empty();
    ops_.push_back(std::move(op));
  }
}

const Op* FindOp(absl::string_view target) {
  const std::vector<const Op*>& sorted = GetTable().sorted;
  auto it = std::lower_bound(sorted.begin(), sorted.end(), target,
                             [](const Op* op, absl::string_view t) { return op->target() < t; });
  if (it == sorted.end() || (*it)->target() != target) return nullptr;
  return *it;
}

absl::Span<const Op* const> AllOps() { return GetTable().sorted; }

std::vector<std::string> TargetsWhere(absl::FunctionRef<bool(const Op&)> pred) {
  std::vector<std::string> out;
  for (const Op* op : AllOps()) {
    if (pred(*op)) out.push_back(op->target());
  }
  return out;
}

bool IsView(absl::string_view target) {
  const Op* op = FindOp(target);
  return op != nullptr && op->is_view();
}

bool IsExtern(absl::string_view target) {
  const Op* op = FindOp(target);
  return op != nullptr && op->extern_call;
}

bool MayRunAsExtern(absl::string_view target) {
  const Op* op = FindOp(target);
  return op != nullptr && (op->extern_call || op->extern_when_stored);
}

bool DrawsRandom(absl::string_view target) {
  const Op* op = FindOp(target);
  return op != nullptr && op->random;
}

bool IsCollective(absl::string_view target) {
  const Op* op = FindOp(target);
  if (op == nullptr) return absl::StartsWith(target, kCollectiveNamespace);
  return op->collective.has_value();
}

bool IsOrdered(absl::string_view target) {
  const Op* op = FindOp(target);
  return op == nullptr || op->ordered;
}

bool IsCaptureSafe(absl::string_view target) {
  const Op* op = FindOp(target);
  if (op == nullptr) return !IsCollective(target);
  return op->capture_safe;
}

}  // namespace kiln::ops
