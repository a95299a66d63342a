#include "compiler/graph/schema_binding.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/error_detail.h"
#include "proto/ops/registry.h"

namespace kiln::graph {
namespace {

using ops::ArgType;
using ops::DefaultValue;
using ops::OpSchema;
using ops::ParamSchema;

// What a value-producing argument is, for type checks.
ValueKind KindOf(const Graph& graph, const Arg& a) {
  if (a.kind == ArgKind::kSymbolic) return a.sym_kind;
  if (a.kind == ArgKind::kRef) {
    const Value* v = graph.Resolve(a.ref);
    return v == nullptr ? ValueKind::kNone : v->kind;
  }
  return ValueKind::kNone;
}

bool IsTensor(const Graph& graph, const Arg& a) {
  return a.kind == ArgKind::kRef && KindOf(graph, a) == ValueKind::kTensor;
}
bool IsIntLike(const Graph& graph, const Arg& a) {
  return a.kind == ArgKind::kInt || ((a.kind == ArgKind::kSymbolic || a.kind == ArgKind::kRef) &&
                                     KindOf(graph, a) == ValueKind::kSymInt);
}
bool IsFloatLike(const Graph& graph, const Arg& a) {
  if (a.kind == ArgKind::kFloat || IsIntLike(graph, a)) return true;
  return (a.kind == ArgKind::kSymbolic || a.kind == ArgKind::kRef) &&
         KindOf(graph, a) == ValueKind::kSymFloat;
}
bool IsBoolLike(const Graph& graph, const Arg& a) {
  return a.kind == ArgKind::kBool || ((a.kind == ArgKind::kSymbolic || a.kind == ArgKind::kRef) &&
                                      KindOf(graph, a) == ValueKind::kSymBool);
}

template <typename Pred>
bool AllItems(const Graph& graph, const Arg& a, Pred pred) {
  if (a.kind != ArgKind::kList) return false;
  for (const Arg& item : graph.items(a)) {
    if (!pred(item)) return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<std::vector<ParamSource>> BindParams(absl::string_view node, const OpSchema& schema,
                                                    size_t num_positional,
                                                    absl::Span<const std::string> keywords) {
  const size_t num_params = schema.params.size();
  size_t max_positional = 0;
  while (max_positional < num_params && !schema.params[max_positional].keyword_only) {
    ++max_positional;
  }
  if (num_positional > max_positional) {
    return InvalidField(node, absl::StrCat("args[", max_positional, "]"),
                        absl::StrCat(schema.target, " takes at most ", max_positional,
                                     " positional arguments, got ", num_positional));
  }
  std::vector<ParamSource> sources(num_params);
  for (size_t i = 0; i < num_positional; ++i) {
    sources[i].from = ParamSource::From::kPositional;
    sources[i].index = static_cast<int>(i);
    sources[i].field = absl::StrCat("args[", i, "]");
  }
  for (size_t i = 0; i < keywords.size(); ++i) {
    const std::string& kw = keywords[i];
    const int p = schema.ParamIndex(kw);
    const std::string field = absl::StrCat("kwargs.", kw);
    if (p < 0) {
      std::vector<absl::string_view> names;
      for (const ParamSchema& param : schema.params) names.push_back(param.name);
      return InvalidField(node, field,
                          absl::StrCat(schema.target, " has no parameter \"", kw,
                                       "\" (parameters: ", absl::StrJoin(names, ", "), ")"));
    }
    if (sources[p].from != ParamSource::From::kDefault) {
      return InvalidField(node, field,
                          absl::StrCat("parameter \"", kw, "\" is also given positionally"));
    }
    sources[p].from = ParamSource::From::kKeyword;
    sources[p].index = static_cast<int>(i);
    sources[p].field = field;
  }
  return sources;
}

absl::Status CheckArgType(const Graph& graph, absl::string_view node, const std::string& field,
                          const ParamSchema& param, const Arg& a) {
  if (a.kind == ArgKind::kNone && (param.optional || param.type == ArgType::kAny)) {
    return absl::OkStatus();
  }
  bool ok = false;
  switch (param.type) {
    case ArgType::kTensor:
      ok = IsTensor(graph, a);
      break;
    case ArgType::kTensorList:
      ok = AllItems(graph, a, [&](const Arg& i) { return IsTensor(graph, i); });
      break;
    case ArgType::kOptTensorList:
      ok = AllItems(graph, a,
                    [&](const Arg& i) { return i.kind == ArgKind::kNone || IsTensor(graph, i); });
      break;
    case ArgType::kInt:
    case ArgType::kSymInt:
      ok = IsIntLike(graph, a);
      break;
    case ArgType::kIntList:
    case ArgType::kSymIntList:
      // `int[1] dim` also takes a bare int, as in Python.
      ok = IsIntLike(graph, a) ||
           AllItems(graph, a, [&](const Arg& i) { return IsIntLike(graph, i); });
      break;
    case ArgType::kFloat:
      ok = IsFloatLike(graph, a);
      break;
    case ArgType::kFloatList:
      ok = AllItems(graph, a, [&](const Arg& i) { return IsFloatLike(graph, i); });
      break;
    case ArgType::kScalar:
      ok = IsFloatLike(graph, a) || IsBoolLike(graph, a);
      break;
    case ArgType::kBool:
      ok = IsBoolLike(graph, a);
      break;
    case ArgType::kBoolList:
      ok = AllItems(graph, a, [&](const Arg& i) { return i.kind == ArgKind::kBool; });
      break;
    case ArgType::kString:
      ok = a.kind == ArgKind::kString;
      break;
    case ArgType::kScalarType:
      ok = a.kind == ArgKind::kDType;
      break;
    case ArgType::kDevice:
      ok = a.kind == ArgKind::kDevice;
      break;
    case ArgType::kLayout:
      ok = a.kind == ArgKind::kLayout;
      break;
    case ArgType::kMemoryFormat:
      ok = a.kind == ArgKind::kMemoryFormat;
      break;
    case ArgType::kGenerator:
      ok = false;  // only None, handled above
      break;
    case ArgType::kAny:
      ok = true;
      break;
  }
  if (ok) return absl::OkStatus();
  return InvalidField(
      node, field,
      absl::StrCat("parameter \"", param.name, "\" expects ", ops::ArgTypeName(param.type),
                   param.optional ? "?" : "", ", got ", DescribeArg(graph, a)));
}

std::string DescribeArg(const Graph& graph, const Arg& a) {
  switch (a.kind) {
    case ArgKind::kAbsent:
      return "nothing";
    case ArgKind::kNone:
      return "None";
    case ArgKind::kRef: {
      const Value* v = graph.Resolve(a.ref);
      const std::string& producer = graph.name(graph.node(a.ref.node));
      if (v == nullptr) return absl::StrCat("the tuple \"", producer, "\"");
      static constexpr absl::string_view kKinds[] = {"a tensor", "a SymInt", "a SymFloat",
                                                     "a SymBool", "a value without metadata"};
      return absl::StrCat(kKinds[static_cast<int>(v->kind)], " (\"", producer, "\")");
    }
    case ArgKind::kInt:
      return absl::StrCat("int ", a.int_value);
    case ArgKind::kFloat:
      return absl::StrCat("float ", a.float_value);
    case ArgKind::kBool:
      return a.int_value ? "True" : "False";
    case ArgKind::kString:
      return absl::StrCat("str \"", graph.str(a.string_id), "\"");
    case ArgKind::kDType:
      return "a dtype";
    case ArgKind::kDevice:
      return "a device";
    case ArgKind::kLayout:
      return "a layout";
    case ArgKind::kMemoryFormat:
      return "a memory format";
    case ArgKind::kList:
      return absl::StrCat("a list of ", a.list.size);
    case ArgKind::kSymbolic:
      return absl::StrCat("symbolic \"", graph.expr_text(a.sym.expr()), "\"");
  }
  return "?";
}

Arg DefaultArg(const ParamSchema& param, absl::FunctionRef<uint32_t(const std::string&)> intern,
               std::vector<Arg>& pool) {
  const DefaultValue& d = param.default_value;
  Arg a;
  using Kind = DefaultValue::Kind;
  switch (d.kind) {
    case Kind::kNone:
      a.kind = ArgKind::kNone;
      break;
    case Kind::kInt:
      // A Scalar or float parameter with an integral default still takes the int: that
      // is what a caller writing the default out would pass.
      a.kind = ArgKind::kInt;
      a.int_value = d.int_value;
      break;
    case Kind::kFloat:
      a.kind = ArgKind::kFloat;
      a.float_value = d.float_value;
      break;
    case Kind::kBool:
      a.kind = ArgKind::kBool;
      a.int_value = d.int_value;
      break;
    case Kind::kString:
      a.kind = ArgKind::kString;
      a.string_id = intern(d.text);
      break;
    case Kind::kEnum:
      a.kind = param.type == ArgType::kMemoryFormat ? ArgKind::kMemoryFormat : ArgKind::kInt;
      a.int_value = d.int_value;
      break;
    case Kind::kIntList:
    case Kind::kBoolList: {
      a.kind = ArgKind::kList;
      a.list.begin = static_cast<uint32_t>(pool.size());
      a.list.size = static_cast<uint32_t>(d.list.size());
      for (int64_t v : d.list) {
        Arg item;
        item.kind = d.kind == Kind::kBoolList ? ArgKind::kBool : ArgKind::kInt;
        item.int_value = v;
        pool.push_back(item);
      }
      break;
    }
  }
  return a;
}

absl::Status BindToSchema(const Graph& graph, absl::string_view node, const OpSchema& schema,
                          const CallArgs& call,
                          absl::FunctionRef<uint32_t(const std::string&)> intern,
                          std::vector<Arg>& pool) {
  absl::StatusOr<std::vector<ParamSource>> sources =
      BindParams(node, schema, call.positional.size(), call.keyword_names);
  if (!sources.ok()) return sources.status();
  auto bound = [&](size_t p) -> const Arg* {
    const ParamSource& s = (*sources)[p];
    if (s.from == ParamSource::From::kPositional) return &call.positional[s.index];
    if (s.from == ParamSource::From::kKeyword) return &call.keyword[s.index];
    return nullptr;
  };
  // Check every parameter before appending any: list items are already in the pool and
  // the node's own slots must be contiguous.
  const size_t num_params = schema.params.size();
  for (size_t p = 0; p < num_params; ++p) {
    const ParamSchema& param = schema.params[p];
    if (bound(p) == nullptr) {
      if (!param.has_default) {
        return InvalidField(
            node, absl::StrCat("args[", p, "]"),
            absl::StrCat(schema.target, " needs argument \"", param.name, "\" (",
                         ops::ArgTypeName(param.type), param.optional ? "?" : "", ")"));
      }
      continue;
    }
    absl::Status s = CheckArgType(graph, node, (*sources)[p].field, param, *bound(p));
    if (!s.ok()) return s;
  }
  // The slots first, then the items of list defaults after them (DefaultArg appends them
  // to the pool), so the slots start where the node's arguments begin.
  const size_t base = pool.size();
  pool.resize(base + num_params);
  for (size_t p = 0; p < num_params; ++p) {
    Arg slot;
    if (const Arg* a = bound(p); a != nullptr) {
      slot = *a;
      slot.name = 0;
    } else {
      slot = DefaultArg(schema.params[p], intern, pool);
    }
    pool[base + p] = slot;
  }
  return absl::OkStatus();
}

namespace {

bool IsNumber(const Arg& a) {
  return a.kind == ArgKind::kInt || a.kind == ArgKind::kFloat || a.kind == ArgKind::kBool ||
         a.kind == ArgKind::kSymbolic;
}

bool SameDefault(const ops::ParamSchema& a, const ops::ParamSchema& b) {
  if (a.has_default != b.has_default) return false;
  const ops::DefaultValue& x = a.default_value;
  const ops::DefaultValue& y = b.default_value;
  return !a.has_default || (x.kind == y.kind && x.int_value == y.int_value &&
                            x.float_value == y.float_value && x.text == y.text && x.list == y.list);
}

// "aten.mul" of "aten.mul.Tensor".
absl::string_view Packet(absl::string_view target) {
  const size_t dot = target.rfind('.');
  return dot == absl::string_view::npos ? target : target.substr(0, dot);
}

}  // namespace

const ops::Op* ScalarOverload(const ops::Op& op, const CallArgs& call) {
  const ops::OpSchema& schema = op.schema;
  absl::StatusOr<std::vector<ParamSource>> sources =
      BindParams("", schema, call.positional.size(), call.keyword_names);
  if (!sources.ok()) return nullptr;
  std::vector<bool> wrapped(schema.params.size(), false);
  bool any = false;
  for (size_t i = 0; i < schema.params.size(); ++i) {
    const ParamSource& src = (*sources)[i];
    if (schema.params[i].type != ops::ArgType::kTensor || src.from == ParamSource::From::kDefault) {
      continue;
    }
    const Arg& arg = src.from == ParamSource::From::kPositional
                         ? call.positional[static_cast<size_t>(src.index)]
                         : call.keyword[static_cast<size_t>(src.index)];
    wrapped[i] = IsNumber(arg);
    any |= wrapped[i];
  }
  if (!any) return nullptr;
  const absl::string_view packet = Packet(op.target());
  const ops::Op* found = nullptr;
  for (const ops::Op* candidate : ops::AllOps()) {
    const ops::OpSchema& c = candidate->schema;
    if (candidate == &op || Packet(c.target) != packet || c.params.size() != schema.params.size()) {
      continue;
    }
    bool matches = c.returns == schema.returns && c.num_returns == schema.num_returns;
    for (size_t i = 0; matches && i < c.params.size(); ++i) {
      const ops::ParamSchema& want = schema.params[i];
      const ops::ParamSchema& have = c.params[i];
      // Whatever binds to `op` binds alike to the overload: a parameter taken by position
      // stays positional, and one left out has the same default.
      matches = have.name == want.name && (!have.keyword_only || want.keyword_only) &&
                SameDefault(have, want) &&
                (wrapped[i] ? have.type == ops::ArgType::kScalar && !have.optional
                            : have.type == want.type && have.optional == want.optional);
    }
    if (!matches) continue;
    if (found != nullptr) return nullptr;  // ambiguous: let binding report the argument
    found = candidate;
  }
  return found;
}

}  // namespace kiln::graph
