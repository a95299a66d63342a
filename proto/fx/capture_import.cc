#include "proto/fx/capture_import.h"

#include <cctype>
#include <cmath>
#include <optional>
#include <string>
#include <unordered_set>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "proto/fx/constant.h"
#include "proto/fx/nonfinite.h"

namespace kiln::fx {
namespace {

struct RoleName {
  v1::InputRole role;
  absl::string_view name;
};

constexpr RoleName kRoleNames[] = {
    {v1::INPUT_ROLE_PARAMETER, "parameter"},   {v1::INPUT_ROLE_BUFFER, "buffer"},
    {v1::INPUT_ROLE_USER_INPUT, "user_input"}, {v1::INPUT_ROLE_TANGENT, "tangent"},
    {v1::INPUT_ROLE_SAVED, "saved"},           {v1::INPUT_ROLE_RNG_STATE, "rng_state"},
};

// Key order matters (kwargs keep the order FX recorded), so the ordered variant.
using Json = nlohmann::ordered_json;

struct DTypeName {
  v1::DType dtype;
  absl::string_view name;
};

constexpr DTypeName kDTypeNames[] = {
    {v1::DTYPE_FLOAT32, "torch.float32"},
    {v1::DTYPE_FLOAT64, "torch.float64"},
    {v1::DTYPE_FLOAT16, "torch.float16"},
    {v1::DTYPE_BFLOAT16, "torch.bfloat16"},
    {v1::DTYPE_INT64, "torch.int64"},
    {v1::DTYPE_INT32, "torch.int32"},
    {v1::DTYPE_INT16, "torch.int16"},
    {v1::DTYPE_INT8, "torch.int8"},
    {v1::DTYPE_UINT8, "torch.uint8"},
    {v1::DTYPE_BOOL, "torch.bool"},
    {v1::DTYPE_COMPLEX64, "torch.complex64"},
    {v1::DTYPE_COMPLEX128, "torch.complex128"},
    {v1::DTYPE_FLOAT8_E4M3FN, "torch.float8_e4m3fn"},
    {v1::DTYPE_FLOAT8_E5M2, "torch.float8_e5m2"},
    {v1::DTYPE_UINT16, "torch.uint16"},
    {v1::DTYPE_UINT32, "torch.uint32"},
    {v1::DTYPE_UINT64, "torch.uint64"},
};

struct EnumName {
  int value;
  absl::string_view name;
};

constexpr EnumName kLayoutNames[] = {
    {v1::LAYOUT_STRIDED, "torch.strided"},
    {v1::LAYOUT_SPARSE_COO, "torch.sparse_coo"},
    {v1::LAYOUT_SPARSE_CSR, "torch.sparse_csr"},
    {v1::LAYOUT_JAGGED, "torch.jagged"},
};

constexpr EnumName kMemoryFormatNames[] = {
    {v1::MEMORY_FORMAT_CONTIGUOUS, "torch.contiguous_format"},
    {v1::MEMORY_FORMAT_CHANNELS_LAST, "torch.channels_last"},
    {v1::MEMORY_FORMAT_CHANNELS_LAST_3D, "torch.channels_last_3d"},
    {v1::MEMORY_FORMAT_PRESERVE, "torch.preserve_format"},
};

int LookUp(const EnumName* begin, const EnumName* end, absl::string_view name) {
  for (const EnumName* e = begin; e != end; ++e) {
    if (e->name == name) return e->value;
  }
  return 0;
}

// "cuda:3" -> {cuda, 3}; "cpu" -> {cpu}. Returns false for anything else.
bool ParseDevice(absl::string_view text, v1::Device* device) {
  static constexpr absl::string_view kTypes[] = {"cpu", "cuda", "meta", "mps", "xpu", "hip"};
  absl::string_view type = text;
  absl::string_view index;
  if (size_t colon = text.find(':'); colon != absl::string_view::npos) {
    type = text.substr(0, colon);
    index = text.substr(colon + 1);
  }
  bool known = false;
  for (absl::string_view t : kTypes) known |= (t == type);
  if (!known) return false;
  device->set_type(std::string(type));
  if (!index.empty() || text.find(':') != absl::string_view::npos) {
    int value = 0;
    if (!absl::SimpleAtoi(index, &value) || value < 0) return false;
    device->set_index(value);
  }
  return true;
}

// Whether `token` names a ShapeEnv symbol: a lowercase prefix then digits ("s77", "zf3").
bool IsSymbolName(absl::string_view token) {
  size_t i = 0;
  while (i < token.size() && std::islower(static_cast<unsigned char>(token[i]))) ++i;
  if (i == 0 || i == token.size()) return false;
  for (size_t j = i; j < token.size(); ++j) {
    if (!std::isdigit(static_cast<unsigned char>(token[j]))) return false;
  }
  return true;
}

v1::SymKind KindOfSymbol(absl::string_view name) {
  return absl::StartsWith(name, "zf") ? v1::SYM_KIND_FLOAT : v1::SYM_KIND_INT;
}

class Importer {
 public:
  absl::StatusOr<v1::Graph> Run(absl::string_view text) {
    const std::string tagged = TagNonFiniteNumbers(text);
    Json doc = Json::parse(tagged.begin(), tagged.end(), nullptr, /*allow_exceptions=*/false);
    if (doc.is_discarded()) {
      return Error("", "", "not valid JSON (truncated or malformed)");
    }
    if (!doc.is_object()) return Error("", "", "the top level must be a JSON object");
    if (absl::Status s = ReadInfo(doc); !s.ok()) return s;
    auto nodes = doc.find("nodes");
    if (nodes == doc.end() || !nodes->is_array()) {
      return Error("", "nodes", "missing or not a list");
    }
    bool saw_output = false;
    for (size_t i = 0; i < nodes->size(); ++i) {
      const Json& n = (*nodes)[i];
      if (saw_output) {
        return Error(NameOr(n, i), "op", "a node follows the output node");
      }
      absl::StatusOr<bool> is_output = ReadNode(n, i);
      if (!is_output.ok()) return is_output.status();
      saw_output = *is_output;
    }
    if (!saw_output) return Error("", "nodes", "the graph has no output node");
    if (auto guards = doc.find("guards"); guards != doc.end() && !guards->is_null()) {
      if (absl::Status s = ReadGuards(*guards); !s.ok()) return s;
    }
    AddUnlistedSymbols();
    return std::move(graph_);
  }

 private:
  static absl::Status Error(absl::string_view node, absl::string_view field,
                            absl::string_view what) {
    std::string where;
    if (!node.empty()) absl::StrAppend(&where, "node \"", node, "\"");
    if (!field.empty()) absl::StrAppend(&where, where.empty() ? "" : " ", field);
    return absl::InvalidArgumentError(where.empty() ? std::string(what)
                                                    : absl::StrCat(where, ": ", what));
  }

  static std::string NameOr(const Json& n, size_t i) {
    if (n.is_object()) {
      auto it = n.find("name");
      if (it != n.end() && it->is_string()) return it->get<std::string>();
    }
    return absl::StrCat("#", i);
  }

  absl::Status ReadInfo(const Json& doc) {
    v1::GraphInfo* info = graph_.mutable_info();
    for (auto [key, field] :
         {std::pair{"model", info->mutable_model()}, std::pair{"kind", info->mutable_kind()},
          std::pair{"code", info->mutable_source()}}) {
      auto it = doc.find(key);
      if (it == doc.end() || it->is_null()) continue;
      if (!it->is_string()) return Error("", key, "must be a string");
      *field = it->get<std::string>();
    }
    return absl::OkStatus();
  }

  // Reads one node; returns whether it was the output node.
  absl::StatusOr<bool> ReadNode(const Json& n, size_t index) {
    const std::string label = NameOr(n, index);
    if (!n.is_object()) return Error(label, "", "a node must be a JSON object");
    auto name_it = n.find("name");
    if (name_it == n.end() || !name_it->is_string() || name_it->get<std::string>().empty()) {
      return Error(label, "name", "missing or not a non-empty string");
    }
    const std::string name = name_it->get<std::string>();
    auto op_it = n.find("op");
    if (op_it == n.end() || !op_it->is_string()) {
      return Error(name, "op", "missing or not a string");
    }
    const std::string op = op_it->get<std::string>();
    if (op != "output" && names_.contains(name)) {
      return Error(name, "name", "defined twice");
    }

    if (op == "placeholder") {
      v1::GraphInput* input = graph_.add_inputs();
      input->set_name(name);
      if (absl::Status s = ReadMeta(name, n, input->mutable_meta()); !s.ok()) return s;
      if (absl::Status s = ReadDebug(name, n, input->mutable_debug()); !s.ok()) return s;
      if (absl::Status s = ReadRole(name, n, input); !s.ok()) return s;
      names_.insert(name);
      return false;
    }
    if (op == "output") {
      auto args = n.find("args");
      if (args == n.end() || !args->is_array() || args->size() != 1) {
        return Error(name, "args", "the output node must have exactly one argument");
      }
      if (absl::Status s = ReadArgument(name, "args[0]", (*args)[0], graph_.mutable_output());
          !s.ok()) {
        return s;
      }
      return true;
    }
    if (op == "get_attr") return ReadConstant(n, name);
    if (op != "call_function") {
      return Error(name, "op",
                   absl::StrCat("unsupported op \"", op,
                                "\" (expected placeholder, call_function, get_attr or output)"));
    }

    v1::Node* node = graph_.add_nodes();
    node->set_name(name);
    auto target = n.find("target");
    if (target == n.end() || !target->is_string() || target->get<std::string>().empty()) {
      return Error(name, "target", "missing or not a non-empty string");
    }
    node->set_target(CanonicalTarget(target->get<std::string>()));

    if (auto args = n.find("args"); args != n.end()) {
      if (!args->is_array()) return Error(name, "args", "must be a list");
      for (size_t i = 0; i < args->size(); ++i) {
        if (absl::Status s =
                ReadArgument(name, absl::StrCat("args[", i, "]"), (*args)[i], node->add_args());
            !s.ok()) {
          return s;
        }
      }
    }
    if (auto kwargs = n.find("kwargs"); kwargs != n.end()) {
      if (!kwargs->is_object()) return Error(name, "kwargs", "must be an object");
      for (const auto& [key, value] : kwargs->items()) {
        v1::NamedArgument* named = node->add_kwargs();
        named->set_name(key);
        if (absl::Status s =
                ReadArgument(name, absl::StrCat("kwargs.", key), value, named->mutable_value());
            !s.ok()) {
          return s;
        }
      }
    }

    auto meta = n.find("meta");
    if (meta != n.end() && meta->is_array()) {
      node->set_multi_output(true);
      for (size_t i = 0; i < meta->size(); ++i) {
        if (absl::Status s =
                ReadValueMeta(name, absl::StrCat("meta[", i, "]"), (*meta)[i], node->add_outputs());
            !s.ok()) {
          return s;
        }
      }
    } else if (absl::Status s = ReadMeta(name, n, node->add_outputs()); !s.ok()) {
      return s;
    }
    if (absl::Status s = ReadDebug(name, n, node->mutable_debug()); !s.ok()) return s;
    // Defined only now, so a node that refers to itself is reported as an unknown reference.
    names_.insert(name);
    return false;
  }

  // A constant tensor lifted into the graph becomes the factory call that makes it (see
  // proto/fx/constant.h), so the rest of Kiln sees only calls and keys hold constants by value.
  absl::StatusOr<bool> ReadConstant(const Json& n, const std::string& name) {
    v1::Node* node = graph_.add_nodes();
    node->set_name(name);
    if (absl::Status s = ReadMeta(name, n, node->add_outputs()); !s.ok()) return s;
    if (!node->outputs(0).has_tensor()) {
      return Error(name, "meta", "a get_attr constant must have tensor metadata");
    }
    std::optional<std::string> bytes;
    if (auto value = n.find("value"); value != n.end() && !value->is_null()) {
      auto b64 = value->is_object() ? value->find("b64") : value->end();
      if (b64 == value->end() || !b64->is_string()) {
        return Error(name, "value", "must be {\"b64\": base64 of the tensor's bytes}");
      }
      bytes.emplace();
      if (!absl::Base64Unescape(b64->get<std::string>(), &*bytes)) {
        return Error(name, "value.b64", "not valid base64");
      }
    }
    if (absl::Status s = ConstantAsCall(node->outputs(0).tensor(), bytes, node); !s.ok()) {
      return Error(name, "value", s.message());
    }
    if (absl::Status s = ReadDebug(name, n, node->mutable_debug()); !s.ok()) return s;
    names_.insert(name);
    return false;
  }

  // FX prints Python builtins as "<built-in function getitem>"; Kiln names them as
  // OpOverload-style strings ("operator.getitem").
  static std::string CanonicalTarget(const std::string& target) {
    constexpr absl::string_view kBuiltin = "<built-in function ";
    if (absl::StartsWith(target, kBuiltin) && absl::EndsWith(target, ">")) {
      return absl::StrCat("operator.",
                          target.substr(kBuiltin.size(), target.size() - kBuiltin.size() - 1));
    }
    return target;
  }

  // A placeholder's optional "role": what the input stands for (parameters and buffers keep
  // their addresses across CUDA-graph replays).
  absl::Status ReadRole(const std::string& name, const Json& n, v1::GraphInput* input) {
    auto it = n.find("role");
    if (it == n.end() || it->is_null()) return absl::OkStatus();
    std::string expected;
    for (const RoleName& r : kRoleNames) {
      if (it->is_string() && it->get<std::string>() == r.name) {
        input->set_role(r.role);
        return absl::OkStatus();
      }
      absl::StrAppend(&expected, expected.empty() ? "" : ", ", r.name);
    }
    return Error(name, "role",
                 absl::StrCat("unknown input role ", it->dump(), " (expected ", expected, ")"));
  }

  absl::Status ReadDebug(const std::string& name, const Json& n, v1::DebugInfo* debug) {
    debug->set_original_name(name);
    auto it = n.find("stack_trace");
    if (it == n.end() || it->is_null()) return absl::OkStatus();
    if (!it->is_string()) return Error(name, "stack_trace", "must be a string");
    debug->set_stack_trace(it->get<std::string>());
    return absl::OkStatus();
  }

  absl::Status ReadMeta(const std::string& name, const Json& n, v1::ValueMeta* out) {
    auto meta = n.find("meta");
    if (meta == n.end()) {
      out->mutable_none();
      return absl::OkStatus();
    }
    return ReadValueMeta(name, "meta", *meta, out);
  }

  absl::Status ReadValueMeta(const std::string& name, const std::string& field, const Json& m,
                             v1::ValueMeta* out) {
    if (m.is_null()) {
      out->mutable_none();
      return absl::OkStatus();
    }
    // A plain int among a node's outputs (an attention op's max_seqlen).
    if (m.is_number_integer()) {
      out->set_int_value(m.get<int64_t>());
      return absl::OkStatus();
    }
    if (!m.is_object()) return Error(name, field, "must be an object, a list, an int or null");
    if (auto sym = m.find("sym"); sym != m.end()) {
      return ReadSymScalar(name, field + ".sym", *sym, out->mutable_symbolic());
    }
    v1::TensorMeta* t = out->mutable_tensor();
    auto shape = m.find("shape");
    if (shape == m.end() || !shape->is_array()) {
      return Error(name, field + ".shape", "missing or not a list");
    }
    auto stride = m.find("stride");
    if (stride == m.end() || !stride->is_array()) {
      return Error(name, field + ".stride", "missing or not a list");
    }
    if (stride->size() != shape->size()) {
      return Error(name, field + ".stride",
                   absl::StrCat("has ", stride->size(), " entries but shape has ", shape->size()));
    }
    for (size_t i = 0; i < shape->size(); ++i) {
      if (absl::Status s =
              ReadSymInt(name, absl::StrCat(field, ".shape[", i, "]"), (*shape)[i], t->add_sizes());
          !s.ok()) {
        return s;
      }
    }
    for (size_t i = 0; i < stride->size(); ++i) {
      if (absl::Status s = ReadSymInt(name, absl::StrCat(field, ".stride[", i, "]"), (*stride)[i],
                                      t->add_strides());
          !s.ok()) {
        return s;
      }
    }
    if (auto offset = m.find("storage_offset"); offset != m.end()) {
      if (absl::Status s =
              ReadSymInt(name, field + ".storage_offset", *offset, t->mutable_storage_offset());
          !s.ok()) {
        return s;
      }
    } else {
      t->mutable_storage_offset()->set_value(0);
    }
    auto dtype = m.find("dtype");
    if (dtype == m.end() || !dtype->is_string()) {
      return Error(name, field + ".dtype", "missing or not a string");
    }
    v1::DType d = DTypeFromTorchName(dtype->get<std::string>());
    if (d == v1::DTYPE_UNSPECIFIED) {
      return Error(name, field + ".dtype",
                   absl::StrCat("unknown dtype \"", dtype->get<std::string>(), "\""));
    }
    t->set_dtype(d);
    auto device = m.find("device");
    if (device == m.end() || !device->is_string() ||
        !ParseDevice(device->get<std::string>(), t->mutable_device())) {
      return Error(name, field + ".device",
                   absl::StrCat("missing or not a device string such as \"cuda:0\" or \"cpu\"",
                                device != m.end() ? absl::StrCat(", got ", device->dump()) : ""));
    }
    if (auto rg = m.find("requires_grad"); rg != m.end()) {
      if (!rg->is_boolean()) return Error(name, field + ".requires_grad", "must be a bool");
      t->set_requires_grad(rg->get<bool>());
    }
    return absl::OkStatus();
  }

  absl::Status ReadSymInt(const std::string& name, const std::string& field, const Json& v,
                          v1::SymInt* out) {
    if (v.is_number_integer()) {
      out->set_value(v.get<int64_t>());
      return absl::OkStatus();
    }
    if (v.is_object() && v.size() == 1 && v.contains("sym") && v["sym"].is_string() &&
        !v["sym"].get<std::string>().empty()) {
      out->set_expr(v["sym"].get<std::string>());
      NoteSymbols(out->expr());
      return absl::OkStatus();
    }
    return Error(
        name, field,
        absl::StrCat("expected an integer or {\"sym\": EXPR}, got ", v.dump().substr(0, 80)));
  }

  absl::Status ReadSymScalar(const std::string& name, const std::string& field, const Json& v,
                             v1::SymScalar* out) {
    if (!v.is_string() || v.get<std::string>().empty()) {
      return Error(name, field, "a symbolic value must be a non-empty expression string");
    }
    out->set_expr(v.get<std::string>());
    out->set_kind(IsSymbolName(out->expr()) ? KindOfSymbol(out->expr()) : v1::SYM_KIND_INT);
    NoteSymbols(out->expr());
    return absl::OkStatus();
  }

  absl::Status ReadArgument(const std::string& name, const std::string& field, const Json& v,
                            v1::Argument* out) {
    switch (v.type()) {
      case Json::value_t::null:
        out->mutable_none();
        return absl::OkStatus();
      case Json::value_t::boolean:
        out->set_bool_value(v.get<bool>());
        return absl::OkStatus();
      case Json::value_t::number_integer:
      case Json::value_t::number_unsigned:
        if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}) {
          return Error(name, field, "integer out of the int64 range");
        }
        out->set_int_value(v.get<int64_t>());
        return absl::OkStatus();
      case Json::value_t::number_float:
        out->set_float_value(v.get<double>());
        return absl::OkStatus();
      case Json::value_t::string:
        out->set_string_value(v.get<std::string>());
        return absl::OkStatus();
      case Json::value_t::array: {
        v1::ArgumentList* list = out->mutable_list();
        for (size_t i = 0; i < v.size(); ++i) {
          if (absl::Status s =
                  ReadArgument(name, absl::StrCat(field, "[", i, "]"), v[i], list->add_items());
              !s.ok()) {
            return s;
          }
        }
        return absl::OkStatus();
      }
      case Json::value_t::object:
        return ReadTaggedArgument(name, field, v, out);
      default:
        return Error(name, field, absl::StrCat("unsupported value ", v.dump().substr(0, 80)));
    }
  }

  absl::Status ReadTaggedArgument(const std::string& name, const std::string& field, const Json& v,
                                  v1::Argument* out) {
    if (v.size() != 1) {
      return Error(
          name, field,
          absl::StrCat("expected {\"node\"|\"const\"|\"sym\": ...}, got ", v.dump().substr(0, 80)));
    }
    const auto entry = v.begin();
    const std::string& tag = entry.key();
    const Json& value = entry.value();
    if (tag == "node") {
      if (!value.is_string()) return Error(name, field, "a node reference must be a string");
      const std::string ref = value.get<std::string>();
      if (!names_.contains(ref)) {
        return Error(name, field, absl::StrCat("refers to unknown node \"", ref, "\""));
      }
      out->mutable_ref()->set_node(ref);
      return absl::OkStatus();
    }
    if (tag == "sym") return ReadSymScalar(name, field, value, out->mutable_symbolic());
    if (tag == kNonFiniteTag) {
      std::optional<double> d =
          value.is_string() ? NonFiniteFromTag(value.get<std::string>()) : std::nullopt;
      if (!d.has_value()) return Error(name, field, "unknown non-finite number");
      out->set_float_value(*d);
      return absl::OkStatus();
    }
    if (tag == "const") {
      if (!value.is_string()) return Error(name, field, "a constant must be a string");
      const std::string text = value.get<std::string>();
      if (v1::DType d = DTypeFromTorchName(text); d != v1::DTYPE_UNSPECIFIED) {
        out->set_dtype(d);
      } else if (int l = LookUp(std::begin(kLayoutNames), std::end(kLayoutNames), text)) {
        out->set_layout(static_cast<v1::Layout>(l));
      } else if (int f =
                     LookUp(std::begin(kMemoryFormatNames), std::end(kMemoryFormatNames), text)) {
        out->set_memory_format(static_cast<v1::MemoryFormat>(f));
      } else if (!ParseDevice(text, out->mutable_device())) {
        return Error(name, field,
                     absl::StrCat("unknown constant \"", text,
                                  "\" (expected a dtype, device, layout or memory format)"));
      }
      return absl::OkStatus();
    }
    return Error(name, field, absl::StrCat("unknown tagged value \"", tag, "\""));
  }

  absl::Status ReadGuards(const Json& g) {
    if (!g.is_object()) return Error("", "guards", "must be an object");
    if (auto all = g.find("all_guards"); all != g.end() && !all->is_null()) {
      if (!all->is_array()) return Error("", "guards.all_guards", "must be a list");
      for (size_t i = 0; i < all->size(); ++i) {
        if (!(*all)[i].is_string()) {
          return Error("", absl::StrCat("guards.all_guards[", i, "]"), "must be a string");
        }
        graph_.mutable_guards()->add_shape_env((*all)[i].get<std::string>());
      }
    }
    if (auto expr = g.find("guards_expr"); expr != g.end() && !expr->is_null()) {
      if (!expr->is_string()) return Error("", "guards.guards_expr", "must be a string or null");
      graph_.mutable_guards()->set_python_expr(expr->get<std::string>());
    }
    if (auto vals = g.find("var_to_val"); vals != g.end() && !vals->is_null()) {
      if (!vals->is_object()) return Error("", "guards.var_to_val", "must be an object");
      for (const auto& [sym, val] : vals->items()) {
        v1::Symbol* s = SymbolNamed(sym);
        const std::string field = absl::StrCat("guards.var_to_val.", sym);
        if (val.is_number_integer()) {
          s->set_int_hint(val.get<int64_t>());
        } else if (val.is_number_float()) {
          s->set_float_hint(val.get<double>());
        } else if (val.is_boolean()) {
          s->set_int_hint(val.get<bool>() ? 1 : 0);
        } else {
          return Error("", field, "a hint must be a number");
        }
      }
    }
    if (auto ranges = g.find("var_to_range"); ranges != g.end() && !ranges->is_null()) {
      if (!ranges->is_object()) return Error("", "guards.var_to_range", "must be an object");
      for (const auto& [sym, range] : ranges->items()) {
        const std::string field = absl::StrCat("guards.var_to_range.", sym);
        if (!range.is_array() || range.size() != 2) {
          return Error("", field, "must be a [lower, upper] pair");
        }
        v1::Symbol* s = SymbolNamed(sym);
        if (absl::Status st = ReadBound(field + "[0]", range[0], s->mutable_lower()); !st.ok()) {
          return st;
        }
        if (absl::Status st = ReadBound(field + "[1]", range[1], s->mutable_upper()); !st.ok()) {
          return st;
        }
      }
    }
    return absl::OkStatus();
  }

  // Bounds print as sympy values: "2", "-int_oo", "oo", "1.5", "-9223372036854775808".
  absl::Status ReadBound(const std::string& field, const Json& v, v1::Bound* out) {
    if (v.is_number_integer()) {
      out->set_int_value(v.get<int64_t>());
      return absl::OkStatus();
    }
    if (v.is_number_float()) {
      out->set_float_value(v.get<double>());
      return absl::OkStatus();
    }
    if (!v.is_string()) return Error("", field, "a bound must be a number or a string");
    std::string text = v.get<std::string>();
    absl::string_view body = text;
    if (absl::StartsWith(body, "-")) body.remove_prefix(1);
    if (body == "int_oo" || body == "oo") {
      out->set_infinite(true);
      return absl::OkStatus();
    }
    int64_t i = 0;
    double d = 0;
    if (absl::SimpleAtoi(text, &i)) {
      out->set_int_value(i);
    } else if (absl::SimpleAtod(text, &d) && std::isfinite(d)) {
      out->set_float_value(d);
    } else {
      return Error("", field, absl::StrCat("cannot read bound \"", text, "\""));
    }
    return absl::OkStatus();
  }

  v1::Symbol* SymbolNamed(const std::string& name) {
    for (v1::Symbol& s : *graph_.mutable_symbols()) {
      if (s.name() == name) return &s;
    }
    v1::Symbol* s = graph_.add_symbols();
    s->set_name(name);
    s->set_kind(KindOfSymbol(name));
    return s;
  }

  // Records every symbol an expression mentions, in order of first appearance.
  void NoteSymbols(absl::string_view expr) {
    size_t i = 0;
    while (i < expr.size()) {
      if (std::isalpha(static_cast<unsigned char>(expr[i])) || expr[i] == '_') {
        size_t j = i;
        while (j < expr.size() &&
               (std::isalnum(static_cast<unsigned char>(expr[j])) || expr[j] == '_')) {
          ++j;
        }
        std::string token(expr.substr(i, j - i));
        if (IsSymbolName(token) && seen_symbols_.insert(token).second) {
          mentioned_symbols_.push_back(token);
        }
        i = j;
      } else {
        ++i;
      }
    }
  }

  void AddUnlistedSymbols() {
    for (const std::string& name : mentioned_symbols_) SymbolNamed(name);
  }

  v1::Graph graph_;
  std::unordered_set<std::string> names_;
  std::unordered_set<std::string> seen_symbols_;
  std::vector<std::string> mentioned_symbols_;
};

}  // namespace

v1::DType DTypeFromTorchName(absl::string_view name) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.name == name) return d.dtype;
  }
  return v1::DTYPE_UNSPECIFIED;
}

absl::string_view TorchNameOfDType(v1::DType dtype) {
  for (const DTypeName& d : kDTypeNames) {
    if (d.dtype == dtype) return d.name;
  }
  return {};
}

absl::StatusOr<v1::Graph> ImportCapture(absl::string_view json_text) {
  return Importer().Run(json_text);
}

}  // namespace kiln::fx
