#include "compiler/canon/canonical_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <queue>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/fx/capture_import.h"
#include "proto/ops/registry.h"

namespace kiln::canon {
namespace {

using graph::Arg;
using graph::ArgKind;
using graph::Node;
using graph::NodeKind;
using graph::SymInt;
using graph::Value;
using graph::ValueKind;

// The encoding is a flat byte string of fixed-width little-endian fields, each group led by
// a tag byte, so two encodings are equal exactly when their fields are.
void PutU8(std::string* out, uint8_t v) { out->push_back(static_cast<char>(v)); }
void PutU32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = static_cast<char>(v >> (8 * i));
  out->append(b, 4);
}
void PutI64(std::string* out, int64_t v) {
  char b[8];
  const auto u = static_cast<uint64_t>(v);
  for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(u >> (8 * i));
  out->append(b, 8);
}
void PutF64(std::string* out, double v) {
  // NaNs differ only in bits no op reads: one key for all of them.
  if (std::isnan(v)) v = std::numeric_limits<double>::quiet_NaN();
  uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  PutI64(out, static_cast<int64_t>(bits));
}
void PutStr(std::string* out, absl::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}
void PutDigest(std::string* out, const Sha256Bytes& d) {
  out->append(reinterpret_cast<const char*>(d.data()), d.size());
}

absl::string_view DigestView(const Sha256Bytes& d) {
  return absl::string_view(reinterpret_cast<const char*>(d.data()), d.size());
}

// "s77" -> "s", "zf3" -> "zf": the kind prefix that canonical names keep.
absl::string_view SymbolPrefix(absl::string_view name) {
  size_t i = 0;
  while (i < name.size() && absl::ascii_isalpha(static_cast<unsigned char>(name[i]))) ++i;
  return name.substr(0, i);
}

bool IsOrdered(const Node& n) {
  if (n.kind != NodeKind::kCall) return false;
  return n.op == nullptr || n.op->ordered;
}

template <typename F>
void ForEachRef(const graph::Graph& g, const Arg& a, F&& f) {
  if (a.kind == ArgKind::kRef) {
    f(a.ref);
  } else if (a.kind == ArgKind::kList) {
    for (const Arg& item : g.items(a)) ForEachRef(g, item, f);
  }
}

template <typename F>
void ForEachExpr(const graph::Graph& g, const Arg& a, F&& f) {
  if (a.kind == ArgKind::kSymbolic) {
    f(a.sym.expr());
  } else if (a.kind == ArgKind::kList) {
    for (const Arg& item : g.items(a)) ForEachExpr(g, item, f);
  }
}

template <typename F>
void ForEachValueExpr(const graph::Graph& g, const Value& v, F&& f) {
  if (v.kind == ValueKind::kTensor) {
    for (const SymInt& s : g.sizes(v)) {
      if (s.is_symbolic()) f(s.expr());
    }
    for (const SymInt& s : g.strides(v)) {
      if (s.is_symbolic()) f(s.expr());
    }
    if (v.storage_offset.is_symbolic()) f(v.storage_offset.expr());
  } else if (v.kind != ValueKind::kNone && v.scalar.is_symbolic()) {
    f(v.scalar.expr());
  }
}

constexpr absl::string_view kValueKindNames[] = {"tensor", "SymInt", "SymFloat", "SymBool", "none"};
constexpr absl::string_view kLayoutNames[] = {"", "torch.strided", "torch.sparse_coo",
                                              "torch.sparse_csr", "torch.jagged"};
constexpr absl::string_view kMemoryFormatNames[] = {"", "torch.contiguous_format",
                                                    "torch.channels_last", "torch.channels_last_3d",
                                                    "torch.preserve_format"};
constexpr absl::string_view kRoleNames[] = {"unspecified", "parameter", "buffer",   "user_input",
                                            "tangent",     "saved",     "rng_state"};

}  // namespace

CanonicalGraph::CanonicalGraph(const graph::Graph& graph) : graph_(graph) {
  const uint32_t n = graph_.num_nodes();
  position_.assign(n, 0);
  identity_.resize(n);
  digest_.resize(n);
  effect_pred_.assign(n, -1);
  int32_t last_ordered = -1;
  for (uint32_t i = graph_.num_inputs(); i < n; ++i) {
    if (!IsOrdered(graph_.node(i))) continue;
    effect_pred_[i] = last_ordered;
    last_ordered = static_cast<int32_t>(i);
  }
  free_symbols_.resize(graph_.num_exprs());
  for (uint32_t e = 0; e < graph_.num_exprs(); ++e) {
    free_symbols_[e] = sym::FreeSymbols(graph_.expr(e));
  }
  NameProcessGroups();
  // Symbols that inputs mention get their final names now: inputs come first in any
  // canonical order. Others are named once the order is known.
  for (uint32_t i = 0; i < graph_.num_inputs(); ++i) NameSymbols(i);
  RenderExprs();
  ComputeIdentities();
  ComputeOrder();
  for (uint32_t p = graph_.num_inputs(); p < n; ++p) NameSymbols(order_[p]);
  RenderExprs();
  ComputeDigests();
}

void CanonicalGraph::NameProcessGroups() {
  for (uint32_t i = graph_.num_inputs(); i < graph_.num_nodes(); ++i) {
    const Node& n = graph_.node(i);
    if (!IsOrdered(n)) continue;
    auto args = graph_.args(n);
    for (uint32_t a = 0; a < args.size(); ++a) {
      if (args[a].kind != ArgKind::kString || !IsGroupName(n, a)) continue;
      group_index_.emplace(args[a].string_id, static_cast<uint32_t>(group_index_.size()));
    }
  }
}

std::string CanonicalGraph::ProcessGroupName(uint32_t node, uint32_t arg_index) const {
  const Node& n = graph_.node(node);
  const auto args = graph_.args(n);
  if (arg_index >= args.size() || args[arg_index].kind != ArgKind::kString) return "";
  const auto it = group_index_.find(args[arg_index].string_id);
  if (it == group_index_.end() || !IsGroupName(n, arg_index)) return "";
  return absl::StrCat("pg", it->second);
}

// A collective's `group_name` argument names a process group; only its position matters.
bool CanonicalGraph::IsGroupName(const Node& n, uint32_t arg_index) const {
  if (!ops::IsCollective(graph_.target(n))) return false;
  if (n.op != nullptr) return n.op->collective->group_name == static_cast<int>(arg_index);
  // An unknown collective: its keyword arguments carry their names.
  return graph_.str(graph_.args(n)[arg_index].name) == "group_name";
}

void CanonicalGraph::NameSymbols(uint32_t node) {
  auto note = [&](uint32_t expr) {
    for (const std::string& s : free_symbols_[expr]) {
      if (symbol_names_.contains(s)) continue;
      symbol_names_.emplace(s, absl::StrCat(SymbolPrefix(s), symbol_names_.size()));
    }
  };
  const Node& n = graph_.node(node);
  for (const Arg& a : graph_.args(n)) ForEachExpr(graph_, a, note);
  for (const Value& v : graph_.outputs(n)) ForEachValueExpr(graph_, v, note);
}

void CanonicalGraph::RenderExprs() {
  std::map<std::string, std::string, std::less<>> renaming;
  for (const auto& [from, to] : symbol_names_) renaming.emplace(from, to);
  expr_text_.assign(graph_.num_exprs(), std::string());
  for (uint32_t e = 0; e < graph_.num_exprs(); ++e) {
    std::map<std::string, std::string, std::less<>> local;
    for (const std::string& s : free_symbols_[e]) {
      auto it = renaming.find(s);
      // Before the order is known, a symbol no input mentions (an unbacked one) cannot be
      // named canonically; identities see it by kind only.
      local.emplace(s,
                    it != renaming.end() ? it->second : absl::StrCat(SymbolPrefix(s), "999999999"));
    }
    expr_text_[e] = sym::Print(*sym::RenameSymbols(graph_.expr(e), local));
  }
}

void CanonicalGraph::ComputeIdentities() {
  std::string buf;
  for (uint32_t i = 0; i < graph_.num_nodes(); ++i) {
    buf.clear();
    Encode(i, Mode::kIdentity, &buf);
    identity_[i] = Sha256(buf);
  }
}

void CanonicalGraph::ComputeOrder() {
  const uint32_t n = graph_.num_nodes();
  const uint32_t num_inputs = graph_.num_inputs();
  std::vector<uint32_t> pending(n, 0);
  std::vector<std::vector<uint32_t>> users(n);
  for (uint32_t i = num_inputs; i < n; ++i) {
    const Node& node = graph_.node(i);
    auto add_edge = [&](uint32_t from) {
      if (from < num_inputs) return;
      users[from].push_back(i);
      ++pending[i];
    };
    for (const Arg& a : graph_.args(node)) {
      ForEachRef(graph_, a, [&](const graph::Ref& r) { add_edge(r.node); });
    }
    if (effect_pred_[i] >= 0) add_edge(static_cast<uint32_t>(effect_pred_[i]));
  }
  auto later = [this](uint32_t a, uint32_t b) {
    const int c = std::memcmp(identity_[a].data(), identity_[b].data(), identity_[a].size());
    return c != 0 ? c > 0 : a > b;
  };
  std::priority_queue<uint32_t, std::vector<uint32_t>, decltype(later)> ready(later);
  order_.reserve(n);
  for (uint32_t i = 0; i < num_inputs; ++i) order_.push_back(i);
  for (uint32_t i = num_inputs; i < n; ++i) {
    if (pending[i] == 0) ready.push(i);
  }
  while (!ready.empty()) {
    const uint32_t next = ready.top();
    ready.pop();
    order_.push_back(next);
    for (uint32_t u : users[next]) {
      if (--pending[u] == 0) ready.push(u);
    }
  }
  for (uint32_t p = 0; p < order_.size(); ++p) position_[order_[p]] = p;
}

void CanonicalGraph::ComputeDigests() {
  std::string buf;
  for (uint32_t i = 0; i < graph_.num_nodes(); ++i) {
    buf.clear();
    Encode(i, Mode::kFinal, &buf);
    digest_[i] = Sha256(buf);
  }
  EncodeArg(graph_.output(), Mode::kFinal, false, &output_encoding_);
  for (uint32_t node : order_) {
    const Node& n = graph_.node(node);
    PutU8(&structure_encoding_, 'N');
    for (const Arg& a : graph_.args(n)) {
      ForEachRef(graph_, a, [&](const graph::Ref& r) {
        PutU32(&structure_encoding_, position_[r.node]);
        PutU32(&structure_encoding_, static_cast<uint32_t>(r.output));
      });
    }
    if (effect_pred_[node] >= 0) {
      PutU8(&structure_encoding_, 'E');
      PutU32(&structure_encoding_, position_[effect_pred_[node]]);
    }
  }
}

void CanonicalGraph::Encode(uint32_t node, Mode mode, std::string* out) const {
  const Node& n = graph_.node(node);
  if (n.kind == NodeKind::kInput) {
    PutU8(out, 'I');
    PutU32(out, node);  // inputs keep their calling position
    PutU8(out, static_cast<uint8_t>(n.role));
  } else {
    PutU8(out, 'C');
    PutStr(out, graph_.target(n));
    auto args = graph_.args(n);
    PutU32(out, static_cast<uint32_t>(args.size()));
    for (uint32_t a = 0; a < args.size(); ++a) {
      if (args[a].name != 0) {
        PutU8(out, 'K');
        PutStr(out, graph_.str(args[a].name));
      }
      EncodeArg(args[a], mode, args[a].kind == ArgKind::kString && IsGroupName(n, a), out);
    }
  }
  PutU8(out, n.multi_output ? 'T' : 'V');
  PutU32(out, n.num_outputs);
  for (const Value& v : graph_.outputs(n)) EncodeValue(v, mode, out);
}

void CanonicalGraph::EncodeArg(const Arg& a, Mode mode, bool group_name, std::string* out) const {
  PutU8(out, static_cast<uint8_t>(a.kind));
  switch (a.kind) {
    case ArgKind::kAbsent:
    case ArgKind::kNone:
      return;
    case ArgKind::kRef:
      if (mode == Mode::kIdentity) {
        PutDigest(out, identity_[a.ref.node]);
      } else {
        PutU32(out, position_[a.ref.node]);
      }
      PutU32(out, static_cast<uint32_t>(a.ref.output));
      return;
    case ArgKind::kInt:
    case ArgKind::kBool:
    case ArgKind::kDType:
    case ArgKind::kLayout:
    case ArgKind::kMemoryFormat:
      PutI64(out, a.int_value);
      return;
    case ArgKind::kFloat:
      PutF64(out, a.float_value);
      return;
    case ArgKind::kString:
      if (group_name) {
        PutU8(out, 'G');
        PutU32(out, group_index_.at(a.string_id));
      } else {
        PutU8(out, 'S');
        PutStr(out, graph_.str(a.string_id));
      }
      return;
    case ArgKind::kDevice:
      PutU8(out, static_cast<uint8_t>(a.device.type));  // the index is left out
      return;
    case ArgKind::kList:
      PutU32(out, a.list.size);
      for (const Arg& item : graph_.items(a)) EncodeArg(item, mode, false, out);
      return;
    case ArgKind::kSymbolic:
      PutU8(out, static_cast<uint8_t>(a.sym_kind));
      PutStr(out, expr_text_[a.sym.expr()]);
      return;
  }
}

void CanonicalGraph::EncodeSymInt(const SymInt& s, Mode mode, std::string* out) const {
  if (s.is_symbolic()) {
    PutU8(out, 'e');
    PutStr(out, expr_text_[s.expr()]);
  } else {
    PutU8(out, 'c');
    PutI64(out, s.value());
  }
}

void CanonicalGraph::EncodeValue(const Value& v, Mode mode, std::string* out) const {
  PutU8(out, static_cast<uint8_t>(v.kind));
  if (v.kind == ValueKind::kNone) return;
  if (v.kind != ValueKind::kTensor) {
    EncodeSymInt(v.scalar, mode, out);
    return;
  }
  PutU8(out, static_cast<uint8_t>(v.dtype));
  PutU8(out, static_cast<uint8_t>(v.layout));
  PutU8(out, static_cast<uint8_t>(v.device.type));  // the index is left out
  PutU8(out, v.requires_grad ? 1 : 0);
  PutU32(out, v.rank);
  for (const SymInt& s : graph_.sizes(v)) EncodeSymInt(s, mode, out);
  for (const SymInt& s : graph_.strides(v)) EncodeSymInt(s, mode, out);
  EncodeSymInt(v.storage_offset, mode, out);
}

// ---- fields, for explanations ----

std::string CanonicalGraph::SymIntText(const SymInt& s) const {
  return s.is_symbolic() ? expr_text_[s.expr()] : absl::StrCat(s.value());
}

std::string CanonicalGraph::ArgText(const Arg& a, bool group_name, bool for_compare) const {
  switch (a.kind) {
    case ArgKind::kAbsent:
      return "(absent)";
    case ArgKind::kNone:
      return "None";
    case ArgKind::kRef: {
      const uint32_t p = position_[a.ref.node];
      const std::string out = a.ref.output >= 0 ? absl::StrCat("[", a.ref.output, "]") : "";
      if (for_compare) return absl::StrCat("@", ToHex(DigestView(identity_[a.ref.node])), out);
      return absl::StrCat("%", p, out, " (", graph_.name(graph_.node(a.ref.node)), ")");
    }
    case ArgKind::kInt:
      return absl::StrCat(a.int_value);
    case ArgKind::kBool:
      return a.int_value ? "True" : "False";
    case ArgKind::kFloat:
      return sym::FormatValue(sym::Value(a.float_value));
    case ArgKind::kString:
      if (group_name) return absl::StrCat("process group #", group_index_.at(a.string_id));
      return absl::StrCat("'", graph_.str(a.string_id), "'");
    case ArgKind::kDType:
      return std::string(fx::TorchNameOfDType(static_cast<v1::DType>(a.int_value)));
    case ArgKind::kDevice:
      return std::string(graph::DeviceTypeName(a.device.type));
    case ArgKind::kLayout:
      return std::string(kLayoutNames[a.int_value]);
    case ArgKind::kMemoryFormat:
      return std::string(kMemoryFormatNames[a.int_value]);
    case ArgKind::kList: {
      std::vector<std::string> items;
      for (const Arg& item : graph_.items(a)) items.push_back(ArgText(item, false, for_compare));
      return absl::StrCat("[", absl::StrJoin(items, ", "), "]");
    }
    case ArgKind::kSymbolic:
      return expr_text_[a.sym.expr()];
  }
  return "?";
}

void CanonicalGraph::ValueFields(const Value& v, const std::string& prefix,
                                 std::vector<NodeField>* out) const {
  auto add = [&](const std::string& field, const std::string& text) {
    const std::string path = absl::StrCat(prefix, ".", field);
    out->push_back({path, path, text, text});
  };
  add("kind", std::string(kValueKindNames[static_cast<int>(v.kind)]));
  if (v.kind == ValueKind::kNone) return;
  if (v.kind != ValueKind::kTensor) {
    add("expr", SymIntText(v.scalar));
    return;
  }
  add("dtype", std::string(fx::TorchNameOfDType(static_cast<v1::DType>(v.dtype))));
  add("layout", std::string(kLayoutNames[static_cast<int>(v.layout)]));
  add("device", std::string(graph::DeviceTypeName(v.device.type)));
  add("requires_grad", v.requires_grad ? "True" : "False");
  add("rank", absl::StrCat(v.rank));
  auto sizes = graph_.sizes(v);
  auto strides = graph_.strides(v);
  for (uint32_t d = 0; d < v.rank; ++d) add(absl::StrCat("sizes[", d, "]"), SymIntText(sizes[d]));
  for (uint32_t d = 0; d < v.rank; ++d) {
    add(absl::StrCat("strides[", d, "]"), SymIntText(strides[d]));
  }
  add("storage_offset", SymIntText(v.storage_offset));
}

std::vector<NodeField> CanonicalGraph::Fields(uint32_t node) const {
  std::vector<NodeField> out;
  const Node& n = graph_.node(node);
  if (n.kind == NodeKind::kInput) {
    const std::string role(kRoleNames[static_cast<int>(n.role)]);
    out.push_back({"role", "role", role, role});
    ValueFields(graph_.value(n.outputs_begin), "meta", &out);
    return out;
  }
  const std::string& target = graph_.target(n);
  out.push_back({"target", "target", target, target});
  auto args = graph_.args(n);
  const std::string count = absl::StrCat(args.size());
  out.push_back({"args", "argument count", count, count});
  for (uint32_t a = 0; a < args.size(); ++a) {
    const bool group = args[a].kind == ArgKind::kString && IsGroupName(n, a);
    NodeField f;
    if (args[a].name != 0) {
      f.path = absl::StrCat("kwargs.", graph_.str(args[a].name));
      f.label = absl::StrCat("kwarg ", graph_.str(args[a].name));
    } else {
      f.path = absl::StrCat("args[", a, "]");
      f.label = n.schema != nullptr ? absl::StrCat("arg ", a, " (", n.schema->params[a].name, ")")
                                    : absl::StrCat("arg ", a);
    }
    f.compare = ArgText(args[a], group, true);
    f.display = ArgText(args[a], group, false);
    out.push_back(std::move(f));
  }
  if (effect_pred_[node] >= 0) {
    const uint32_t pred = static_cast<uint32_t>(effect_pred_[node]);
    out.push_back({"order", "order after", ToHex(DigestView(identity_[pred])),
                   absl::StrCat("%", position_[pred], " (", graph_.name(graph_.node(pred)), ")")});
  }
  const std::string outputs = absl::StrCat(n.multi_output ? "tuple of " : "", n.num_outputs);
  out.push_back({"outputs", "outputs", outputs, outputs});
  auto values = graph_.outputs(n);
  for (uint32_t i = 0; i < values.size(); ++i) {
    ValueFields(values[i], absl::StrCat("outputs[", i, "]"), &out);
  }
  return out;
}

std::vector<NodeField> CanonicalGraph::OutputFields() const {
  std::vector<NodeField> out;
  const Arg& o = graph_.output();
  if (o.kind != ArgKind::kList) {
    out.push_back({"output", "output", ArgText(o, false, true), ArgText(o, false, false)});
    return out;
  }
  auto items = graph_.items(o);
  const std::string count = absl::StrCat(items.size());
  out.push_back({"output", "output count", count, count});
  for (uint32_t i = 0; i < items.size(); ++i) {
    const std::string path = absl::StrCat("output[", i, "]");
    out.push_back({path, path, ArgText(items[i], false, true), ArgText(items[i], false, false)});
  }
  return out;
}

}  // namespace kiln::canon
