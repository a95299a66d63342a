#include "proto/ops/op_schema.h"

#include <map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::ops {
namespace {

absl::Status Malformed(absl::string_view schema, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("op schema \"", schema, "\": ", why));
}

// Splits on commas outside brackets and quotes.
std::vector<absl::string_view> SplitTopLevel(absl::string_view text) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(absl::StripAsciiWhitespace(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  absl::string_view last = absl::StripAsciiWhitespace(text.substr(start));
  if (!last.empty()) parts.push_back(last);
  return parts;
}

// A type with its alias annotation taken out: "Tensor(a!)" is "Tensor" in set "a", written.
struct Annotated {
  std::string plain;
  std::string alias_set;
  bool mutated = false;
};

absl::StatusOr<Annotated> StripAlias(absl::string_view schema, absl::string_view text) {
  Annotated out;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '(') {
      out.plain.push_back(text[i]);
      continue;
    }
    const size_t close = text.find(')', i);
    if (close == absl::string_view::npos) return Malformed(schema, "unclosed alias annotation");
    // "a", "a!", "a -> *": the set is the leading name.
    absl::string_view annotation = text.substr(i + 1, close - i - 1);
    out.mutated = absl::StrContains(annotation, '!');
    size_t end = 0;
    while (end < annotation.size() && absl::ascii_isalnum(annotation[end])) ++end;
    if (end == 0) return Malformed(schema, "an alias annotation without a set");
    out.alias_set = std::string(annotation.substr(0, end));
    i = close;
  }
  return out;
}

struct ParsedType {
  ArgType type = ArgType::kAny;
  bool optional = false;
  std::string alias_set;
  bool mutated = false;
  int fixed_size = 0;  // N of `int[N]`
};

absl::StatusOr<ParsedType> ParseType(absl::string_view schema, absl::string_view text) {
  absl::StatusOr<Annotated> annotated = StripAlias(schema, text);
  if (!annotated.ok()) return annotated.status();
  ParsedType out;
  out.alias_set = annotated->alias_set;
  out.mutated = annotated->mutated;
  absl::string_view t = annotated->plain;
  if (absl::ConsumeSuffix(&t, "?")) out.optional = true;
  bool list = false;
  bool optional_elements = false;
  if (const size_t open = t.find('['); open != absl::string_view::npos) {
    if (t.back() != ']') return Malformed(schema, "unclosed list type");
    list = true;
    absl::string_view size = t.substr(open + 1, t.size() - open - 2);
    if (!size.empty() && !absl::SimpleAtoi(size, &out.fixed_size)) {
      return Malformed(schema, "bad list size");
    }
    t = t.substr(0, open);
    if (absl::ConsumeSuffix(&t, "?")) optional_elements = true;
  }
  static const auto* kTypes = new std::map<absl::string_view, std::pair<ArgType, ArgType>>{
      {"Tensor", {ArgType::kTensor, ArgType::kTensorList}},
      {"int", {ArgType::kInt, ArgType::kIntList}},
      {"SymInt", {ArgType::kSymInt, ArgType::kSymIntList}},
      {"float", {ArgType::kFloat, ArgType::kFloatList}},
      {"bool", {ArgType::kBool, ArgType::kBoolList}},
      {"Scalar", {ArgType::kScalar, ArgType::kAny}},
      {"str", {ArgType::kString, ArgType::kAny}},
      {"ScalarType", {ArgType::kScalarType, ArgType::kAny}},
      {"Device", {ArgType::kDevice, ArgType::kAny}},
      {"Layout", {ArgType::kLayout, ArgType::kAny}},
      {"MemoryFormat", {ArgType::kMemoryFormat, ArgType::kAny}},
      {"Generator", {ArgType::kGenerator, ArgType::kAny}},
      {"Any", {ArgType::kAny, ArgType::kAny}},
  };
  auto it = kTypes->find(t);
  if (it == kTypes->end()) return Malformed(schema, absl::StrCat("unknown type \"", t, "\""));
  out.type = list ? it->second.second : it->second.first;
  if (list && optional_elements) {
    if (out.type != ArgType::kTensorList) return Malformed(schema, "only Tensor?[] is supported");
    out.type = ArgType::kOptTensorList;
  }
  if (list && out.type == ArgType::kAny) return Malformed(schema, "unsupported list type");
  return out;
}

absl::StatusOr<DefaultValue> ParseDefault(absl::string_view schema, const ParsedType& type,
                                          absl::string_view text) {
  DefaultValue d;
  using Kind = DefaultValue::Kind;
  if (text == "None") return d;
  if (text == "True" || text == "False") {
    d.kind = Kind::kBool;
    d.int_value = text == "True";
    return d;
  }
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    d.kind = Kind::kString;
    d.text = std::string(text.substr(1, text.size() - 2));
    return d;
  }
  if (text == "contiguous_format") {
    d.kind = Kind::kEnum;
    d.int_value = v1::MEMORY_FORMAT_CONTIGUOUS;
    return d;
  }
  const bool is_list = type.type == ArgType::kIntList || type.type == ArgType::kSymIntList ||
                       type.type == ArgType::kBoolList;
  if (is_list) {
    d.kind = type.type == ArgType::kBoolList ? Kind::kBoolList : Kind::kIntList;
    if (!text.empty() && text.front() == '[') {
      if (text.back() != ']') return Malformed(schema, "unclosed list default");
      for (absl::string_view item : SplitTopLevel(text.substr(1, text.size() - 2))) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(item, &v)) return Malformed(schema, "bad list default");
        d.list.push_back(v);
      }
      return d;
    }
    // `int[2] padding=0` means [0, 0].
    int64_t v = 0;
    if (!absl::SimpleAtoi(text, &v) || type.fixed_size == 0) {
      return Malformed(schema, "bad list default");
    }
    d.list.assign(static_cast<size_t>(type.fixed_size), v);
    return d;
  }
  if (int64_t v = 0; absl::SimpleAtoi(text, &v)) {
    d.kind = Kind::kInt;
    d.int_value = v;
    return d;
  }
  if (double v = 0; absl::SimpleAtod(text, &v)) {
    d.kind = Kind::kFloat;
    d.float_value = v;
    return d;
  }
  return Malformed(schema, absl::StrCat("unreadable default \"", text, "\""));
}

absl::Status ParseReturns(absl::string_view schema, absl::string_view returns, OpSchema& op) {
  if (returns == "Tuple") {
    op.returns = ReturnKind::kTuple;
    return absl::OkStatus();
  }
  if (returns == "Scalar" || returns == "SymInt") {
    op.returns = ReturnKind::kScalar;
    return absl::OkStatus();
  }
  if (returns == "()") {
    op.num_returns = 0;
    return absl::OkStatus();
  }
  std::vector<absl::string_view> items = {returns};
  if (returns.front() == '(') {
    if (returns.back() != ')') return Malformed(schema, "unclosed result tuple");
    items = SplitTopLevel(returns.substr(1, returns.size() - 2));
  }
  for (absl::string_view item : items) {
    const size_t space = item.rfind(' ');
    absl::string_view type = space == absl::string_view::npos ? item : item.substr(0, space);
    absl::StatusOr<Annotated> annotated = StripAlias(schema, type);
    if (!annotated.ok()) return annotated.status();
    if (op.return_names.empty()) op.return_alias_set = annotated->alias_set;
    if (absl::EndsWith(annotated->plain, "[]") && items.size() == 1) {
      op.returns = ReturnKind::kTensorList;
    } else if (annotated->plain != "Tensor" && annotated->plain != "SymInt") {
      return Malformed(schema, absl::StrCat("unsupported result type \"", type, "\""));
    } else if (items.size() == 1 && annotated->plain != "Tensor") {
      return Malformed(schema, "a single result must be a Tensor");
    }
    op.return_names.emplace_back(space == absl::string_view::npos ? "" : item.substr(space + 1));
  }
  if (op.returns == ReturnKind::kTensors) op.num_returns = static_cast<int>(items.size());
  return absl::OkStatus();
}

}  // namespace

absl::string_view ArgTypeName(ArgType type) {
  switch (type) {
    case ArgType::kTensor:
      return "Tensor";
    case ArgType::kTensorList:
      return "Tensor[]";
    case ArgType::kOptTensorList:
      return "Tensor?[]";
    case ArgType::kInt:
      return "int";
    case ArgType::kIntList:
      return "int[]";
    case ArgType::kSymInt:
      return "SymInt";
    case ArgType::kSymIntList:
      return "SymInt[]";
    case ArgType::kFloat:
      return "float";
    case ArgType::kFloatList:
      return "float[]";
    case ArgType::kScalar:
      return "Scalar";
    case ArgType::kBool:
      return "bool";
    case ArgType::kBoolList:
      return "bool[]";
    case ArgType::kString:
      return "str";
    case ArgType::kScalarType:
      return "ScalarType";
    case ArgType::kDevice:
      return "Device";
    case ArgType::kLayout:
      return "Layout";
    case ArgType::kMemoryFormat:
      return "MemoryFormat";
    case ArgType::kGenerator:
      return "Generator";
    case ArgType::kAny:
      return "Any";
  }
  return "?";
}

int OpSchema::ParamIndex(absl::string_view name) const {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

int OpSchema::ReturnIndex(absl::string_view name) const {
  for (size_t i = 0; i < return_names.size(); ++i) {
    if (!name.empty() && return_names[i] == name) return static_cast<int>(i);
  }
  return -1;
}

int OpSchema::ReturnAliasParam() const {
  if (return_alias_set.empty()) return -1;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].alias_set == return_alias_set) return static_cast<int>(i);
  }
  return -1;
}

absl::StatusOr<OpSchema> ParseOpSchema(absl::string_view schema) {
  OpSchema op;
  const size_t open = schema.find('(');
  const size_t arrow = schema.rfind("->");
  if (open == absl::string_view::npos || arrow == absl::string_view::npos || arrow < open) {
    return Malformed(schema, "expected NAME(PARAMS) -> RETURNS");
  }
  const size_t close = schema.rfind(')', arrow);
  if (close == absl::string_view::npos || close < open) {
    return Malformed(schema, "expected NAME(PARAMS) -> RETURNS");
  }
  op.target = std::string(absl::StripAsciiWhitespace(schema.substr(0, open)));
  if (op.target.empty()) return Malformed(schema, "an op without a name");
  bool keyword_only = false;
  for (absl::string_view item : SplitTopLevel(schema.substr(open + 1, close - open - 1))) {
    if (item == "*") {
      if (keyword_only) return Malformed(schema, "`*` given twice");
      keyword_only = true;
      continue;
    }
    ParamSchema p;
    absl::string_view decl = item;
    absl::string_view default_text;
    if (const size_t eq = item.find('='); eq != absl::string_view::npos) {
      decl = item.substr(0, eq);
      default_text = item.substr(eq + 1);
      p.has_default = true;
    }
    const size_t space = decl.rfind(' ');
    if (space == absl::string_view::npos) return Malformed(schema, "a parameter without a name");
    absl::StatusOr<ParsedType> type = ParseType(schema, decl.substr(0, space));
    if (!type.ok()) return type.status();
    p.name = std::string(decl.substr(space + 1));
    if (op.ParamIndex(p.name) >= 0) {
      return Malformed(schema, absl::StrCat("parameter \"", p.name, "\" is named twice"));
    }
    p.type = type->type;
    p.optional = type->optional;
    p.alias_set = type->alias_set;
    p.mutated = type->mutated;
    p.keyword_only = keyword_only;
    if (p.has_default) {
      absl::StatusOr<DefaultValue> d = ParseDefault(schema, *type, default_text);
      if (!d.ok()) return d.status();
      p.default_value = *std::move(d);
    }
    op.params.push_back(std::move(p));
  }
  absl::string_view returns = absl::StripAsciiWhitespace(schema.substr(arrow + 2));
  if (returns.empty()) return Malformed(schema, "no result type");
  if (absl::Status s = ParseReturns(schema, returns, op); !s.ok()) return s;
  return op;
}

}  // namespace kiln::ops
