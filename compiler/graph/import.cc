#include "compiler/graph/import.h"

#include <optional>

#include "compiler/graph/expand_foreach.h"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/graph/expand_foreach.h"
#include "compiler/graph/extent.h"
#include "compiler/graph/schema_binding.h"
#include "proto/dtype.h"
#include "proto/error_detail.h"

namespace kiln::graph {

using ops::OpSchema;
using ops::ReturnKind;

namespace {
constexpr absl::string_view kDeviceTypeNames[] = {"cpu", "cuda", "meta", "mps", "xpu", "hip"};
constexpr absl::string_view kDTypeNames[] = {
    "",           "float32",       "float64",     "float16", "bfloat16", "int64",
    "int32",      "int16",         "int8",        "uint8",   "bool",     "complex64",
    "complex128", "float8_e4m3fn", "float8_e5m2", "uint16",  "uint32",   "uint64"};
// Whether Kiln computes with tensors of `dtype`: the floating types of 16 bits and more, the
// signed integers, uint8 and bool.
bool HasElementType(DType dtype) {
  switch (dtype) {
    case DType::kComplex64:
    case DType::kComplex128:
    case DType::kFloat8E4M3FN:
    case DType::kFloat8E5M2:
    case DType::kUInt16:
    case DType::kUInt32:
    case DType::kUInt64:
      return false;
    default:
      return true;
  }
}
// Deeper argument lists than this do not occur in real graphs; the limit keeps hostile
// input from exhausting the stack.
constexpr int kMaxListDepth = 16;
}  // namespace

absl::string_view DeviceTypeName(DeviceType type) {
  return kDeviceTypeNames[static_cast<int>(type)];
}

bool ParseDeviceType(absl::string_view name, DeviceType* type) {
  for (size_t i = 0; i < std::size(kDeviceTypeNames); ++i) {
    if (kDeviceTypeNames[i] == name) {
      *type = static_cast<DeviceType>(i);
      return true;
    }
  }
  return false;
}

absl::string_view DTypeName(DType dtype) { return kDTypeNames[static_cast<int>(dtype)]; }

const Value* Graph::Resolve(const Ref& ref) const {
  const Node& n = nodes_[ref.node];
  if (ref.output == Ref::kWhole) {
    return n.multi_output ? nullptr : &values_[n.outputs_begin];
  }
  return &values_[n.outputs_begin + ref.output];
}

// Builds a Graph from a kiln.v1.Graph; one instance per import.
class GraphBuilder {
 public:
  explicit GraphBuilder(const v1::Graph& proto) : proto_(proto) {}

  absl::StatusOr<Graph> Run() {
    if (absl::Status s = IndexNames(); !s.ok()) return s;
    if (absl::Status s = ReadSymbols(); !s.ok()) return s;
    g_.nodes_.reserve(proto_.inputs_size() + proto_.nodes_size());
    g_.values_.reserve(proto_.inputs_size() + proto_.nodes_size() * 2);
    for (int i = 0; i < proto_.inputs_size(); ++i) {
      if (absl::Status s = ReadInput(proto_.inputs(i)); !s.ok()) return s;
    }
    g_.num_inputs_ = static_cast<uint32_t>(proto_.inputs_size());
    for (int i = 0; i < proto_.nodes_size(); ++i) {
      if (absl::Status s = ReadNode(proto_.nodes(i)); !s.ok()) return s;
    }
    if (absl::Status s = ReadOutput(); !s.ok()) return s;
    if (absl::Status s = ReadGuards(); !s.ok()) return s;
    return std::move(g_);
  }

 private:
  // ---- names and symbols ----

  absl::Status IndexNames() {
    const int total = proto_.inputs_size() + proto_.nodes_size();
    index_.reserve(total);
    for (int i = 0; i < total; ++i) {
      const bool is_input = i < proto_.inputs_size();
      const std::string& name =
          is_input ? proto_.inputs(i).name() : proto_.nodes(i - proto_.inputs_size()).name();
      const std::string label = is_input ? absl::StrCat("inputs[", i, "]")
                                         : absl::StrCat("nodes[", i - proto_.inputs_size(), "]");
      if (name.empty()) return InvalidField(label, "name", "a name must not be empty");
      if (!index_.emplace(name, i).second) {
        return InvalidField(name, "name", "the name is defined twice (names must be unique)");
      }
    }
    return absl::OkStatus();
  }

  absl::Status ReadSymbols() {
    for (int i = 0; i < proto_.symbols_size(); ++i) {
      const v1::Symbol& s = proto_.symbols(i);
      const std::string field = absl::StrCat("symbols[", i, "]");
      if (s.name().empty()) return InvalidField("", field + ".name", "a symbol needs a name");
      if (!symbol_index_.emplace(s.name(), i).second) {
        return InvalidField("", field + ".name",
                            absl::StrCat("symbol \"", s.name(), "\" is declared twice"));
      }
      Symbol out;
      out.name = s.name();
      switch (s.kind()) {
        case v1::SYM_KIND_UNSPECIFIED:
        case v1::SYM_KIND_INT:
          out.kind = ValueKind::kSymInt;
          break;
        case v1::SYM_KIND_FLOAT:
          out.kind = ValueKind::kSymFloat;
          break;
        case v1::SYM_KIND_BOOL:
          out.kind = ValueKind::kSymBool;
          break;
        default:
          return InvalidField("", field + ".kind", absl::StrCat("unknown symbol kind ", s.kind()));
      }
      if (s.hint_case() == v1::Symbol::kIntHint) {
        out.has_hint = true;
        out.int_hint = s.int_hint();
      } else if (s.hint_case() == v1::Symbol::kFloatHint) {
        if (!std::isfinite(s.float_hint())) {
          return InvalidField("", field + ".float_hint", "a hint must be finite");
        }
        out.has_hint = true;
        out.float_hint = s.float_hint();
      }
      for (const auto& [bound, name] : {std::pair{&s.lower(), "lower"}, {&s.upper(), "upper"}}) {
        if (bound->kind_case() == v1::Bound::kFloatValue && !std::isfinite(bound->float_value())) {
          return InvalidField("", absl::StrCat(field, ".", name),
                              "a float bound must be finite (use `infinite` for oo)");
        }
      }
      g_.symbols_.push_back(std::move(out));
    }
    return absl::OkStatus();
  }

  // ---- strings and expressions ----

  uint32_t Intern(const std::string& s) {
    if (s.empty()) return 0;
    auto [it, inserted] = strings_.emplace(s, static_cast<uint32_t>(g_.strings_.size()));
    if (inserted) g_.strings_.push_back(s);
    return it->second;
  }

  // Parses (once per distinct text) a symbolic expression in a size, stride, offset or
  // argument; every symbol it mentions must be declared.
  absl::StatusOr<uint32_t> InternExpr(absl::string_view node, const std::string& field,
                                      const std::string& text) {
    if (auto it = exprs_.find(text); it != exprs_.end()) return it->second;
    if (text.empty()) return InvalidField(node, field, "an empty symbolic expression");
    absl::StatusOr<sym::ExprPtr> parsed = sym::Parse(text);
    if (!parsed.ok()) {
      return InvalidField(node, field,
                          absl::StrCat("cannot parse symbolic expression \"", text,
                                       "\": ", parsed.status().message()));
    }
    for (const std::string& s : sym::FreeSymbols(**parsed)) {
      if (!symbol_index_.contains(s)) {
        return InvalidField(node, field,
                            absl::StrCat("expression \"", text, "\" mentions symbol \"", s,
                                         "\", which Graph.symbols does not declare"));
      }
    }
    const uint32_t id = static_cast<uint32_t>(g_.exprs_.size());
    g_.exprs_.push_back(*std::move(parsed));
    g_.expr_texts_.push_back(text);
    exprs_.emplace(text, id);
    return id;
  }

  absl::StatusOr<SymInt> ReadSymInt(absl::string_view node, const std::string& field,
                                    const v1::SymInt& v, absl::string_view what) {
    switch (v.kind_case()) {
      case v1::SymInt::kValue:
        if (v.value() < 0) {
          return InvalidField(node, field,
                              absl::StrCat("a ", what, " must not be negative, got ", v.value()));
        }
        return SymInt::Constant(v.value());
      case v1::SymInt::kExpr: {
        absl::StatusOr<uint32_t> id = InternExpr(node, field, v.expr());
        if (!id.ok()) return id.status();
        return SymInt::Symbolic(*id);
      }
      default:
        return InvalidField(node, field,
                            absl::StrCat("missing ", what, " (expected a value or an expression)"));
    }
  }

  // ---- value metadata ----

  absl::Status ReadDevice(absl::string_view node, const std::string& field, const v1::Device& d,
                          Device* out) {
    if (!ParseDeviceType(d.type(), &out->type)) {
      return InvalidField(node, field,
                          absl::StrCat("unknown device type \"", d.type(), "\" (expected one of ",
                                       absl::StrJoin(kDeviceTypeNames, ", "), ")"));
    }
    out->index = -1;
    if (d.has_index()) {
      if (d.index() < 0 || d.index() > std::numeric_limits<int16_t>::max()) {
        return InvalidField(node, field + ".index",
                            absl::StrCat("device index ", d.index(), " is out of range"));
      }
      out->index = static_cast<int16_t>(d.index());
    }
    return absl::OkStatus();
  }

  // Appends one value for `meta`, produced by node `node_index`'s output `output`.
  absl::Status ReadValue(absl::string_view node, const std::string& field,
                         const v1::ValueMeta& meta, uint32_t node_index, uint32_t output) {
    Value v;
    v.node = node_index;
    v.output = output;
    switch (meta.kind_case()) {
      case v1::ValueMeta::kTensor: {
        if (absl::Status s = ReadTensor(node, field, meta.tensor(), &v); !s.ok()) return s;
        break;
      }
      case v1::ValueMeta::kSymbolic: {
        const v1::SymScalar& s = meta.symbolic();
        switch (s.kind()) {
          case v1::SYM_KIND_UNSPECIFIED:
          case v1::SYM_KIND_INT:
            v.kind = ValueKind::kSymInt;
            break;
          case v1::SYM_KIND_FLOAT:
            v.kind = ValueKind::kSymFloat;
            break;
          case v1::SYM_KIND_BOOL:
            v.kind = ValueKind::kSymBool;
            break;
          default:
            return InvalidField(node, field + ".symbolic.kind",
                                absl::StrCat("unknown symbolic kind ", s.kind()));
        }
        absl::StatusOr<uint32_t> id = InternExpr(node, field + ".symbolic.expr", s.expr());
        if (!id.ok()) return id.status();
        v.scalar = SymInt::Symbolic(*id);
        break;
      }
      case v1::ValueMeta::kIntValue:
        v.kind = ValueKind::kSymInt;
        v.scalar = SymInt::Constant(meta.int_value());
        break;
      case v1::ValueMeta::kNone:
      case v1::ValueMeta::KIND_NOT_SET:
        v.kind = ValueKind::kNone;
        break;
    }
    g_.values_.push_back(v);
    return absl::OkStatus();
  }

  absl::Status ReadTensor(absl::string_view node, const std::string& field, const v1::TensorMeta& t,
                          Value* v) {
    v->kind = ValueKind::kTensor;
    if (t.dtype() == v1::DTYPE_UNSPECIFIED) {
      return InvalidField(node, field + ".dtype", "a tensor needs a dtype");
    }
    if (t.dtype() < 0 || t.dtype() > kMaxDType) {
      return InvalidField(node, field + ".dtype", absl::StrCat("unknown dtype ", t.dtype()));
    }
    v->dtype = static_cast<DType>(t.dtype());
    if (!HasElementType(v->dtype)) {
      // The loop IR, the plan's buffer sizes and the runtimes know these dtypes only: a
      // complex or float8 tensor would be computed, and sized, as something else.
      return InvalidField(node, field + ".dtype",
                          absl::StrCat(DTypeName(v->dtype),
                                       " tensors are not supported (Kiln compiles graphs of "
                                       "float, bfloat16, integer and bool tensors)"));
    }
    if (t.layout() < 0 || t.layout() > v1::LAYOUT_JAGGED) {
      return InvalidField(node, field + ".layout", absl::StrCat("unknown layout ", t.layout()));
    }
    v->layout =
        t.layout() == v1::LAYOUT_UNSPECIFIED ? Layout::kStrided : static_cast<Layout>(t.layout());
    if (!t.has_device()) return InvalidField(node, field + ".device", "a tensor needs a device");
    if (absl::Status s = ReadDevice(node, field + ".device", t.device(), &v->device); !s.ok()) {
      return s;
    }
    v->requires_grad = t.requires_grad();
    if (t.strides_size() != t.sizes_size()) {
      return InvalidField(node, field + ".strides",
                          absl::StrCat("has ", t.strides_size(), " entries but sizes has ",
                                       t.sizes_size(), " (one stride per dimension)"));
    }
    v->rank = static_cast<uint32_t>(t.sizes_size());
    v->dims = static_cast<uint32_t>(g_.dims_.size());
    for (int i = 0; i < t.sizes_size(); ++i) {
      absl::StatusOr<SymInt> s =
          ReadSymInt(node, absl::StrCat(field, ".sizes[", i, "]"), t.sizes(i), "size");
      if (!s.ok()) return s.status();
      g_.dims_.push_back(*s);
    }
    for (int i = 0; i < t.strides_size(); ++i) {
      absl::StatusOr<SymInt> s =
          ReadSymInt(node, absl::StrCat(field, ".strides[", i, "]"), t.strides(i), "stride");
      if (!s.ok()) return s.status();
      g_.dims_.push_back(*s);
    }
    if (!t.has_storage_offset()) {
      v->storage_offset = SymInt::Constant(0);
    } else {
      absl::StatusOr<SymInt> s =
          ReadSymInt(node, field + ".storage_offset", t.storage_offset(), "storage offset");
      if (!s.ok()) return s.status();
      v->storage_offset = *s;
    }
    return CheckIndexRange(node, field, g_.sizes(*v), g_.strides(*v), v->storage_offset,
                           ElementSize(t.dtype()));
  }

  // ---- inputs ----

  absl::Status ReadInput(const v1::GraphInput& in) {
    const uint32_t index = g_.num_nodes();
    Node n;
    n.kind = NodeKind::kInput;
    n.name = Intern(in.name());
    if (in.role() < 0 || in.role() > v1::INPUT_ROLE_RNG_STATE) {
      return InvalidField(in.name(), "role", absl::StrCat("unknown input role ", in.role()));
    }
    n.role = static_cast<InputRole>(in.role());
    n.stack_trace = Intern(in.debug().stack_trace());
    if (in.meta().kind_case() != v1::ValueMeta::kTensor &&
        in.meta().kind_case() != v1::ValueMeta::kSymbolic) {
      return InvalidField(in.name(), "meta",
                          "a graph input needs tensor or symbolic-scalar metadata");
    }
    n.outputs_begin = static_cast<uint32_t>(g_.values_.size());
    n.num_outputs = 1;
    if (absl::Status s = ReadValue(in.name(), "meta", in.meta(), index, 0); !s.ok()) return s;
    if (g_.values_.back().kind != ValueKind::kTensor) ++num_symbolic_inputs_;
    g_.nodes_.push_back(n);
    return absl::OkStatus();
  }

  // ---- nodes ----

  absl::Status ReadNode(const v1::Node& pn) {
    const uint32_t index = g_.num_nodes();
    const std::string& name = pn.name();
    Node n;
    n.kind = NodeKind::kCall;
    n.name = Intern(name);
    n.stack_trace = Intern(pn.debug().stack_trace());
    if (pn.target().empty()) return InvalidField(name, "target", "a node needs an op target");
    n.target = Intern(pn.target());
    n.op = ops::FindOp(pn.target());
    n.schema = n.op != nullptr ? &n.op->schema : nullptr;
    n.multi_output = pn.multi_output();

    // Outputs first: arguments are checked against what this node's operands produce,
    // and getitem against its tuple, never against this node's own outputs.
    if (absl::Status s = CheckOutputCount(pn, n.schema); !s.ok()) return s;
    n.outputs_begin = static_cast<uint32_t>(g_.values_.size());
    n.num_outputs = static_cast<uint32_t>(pn.outputs_size());
    for (int i = 0; i < pn.outputs_size(); ++i) {
      const v1::ValueMeta& m = pn.outputs(i);
      const std::string field = absl::StrCat("outputs[", i, "]");
      if (n.schema == nullptr && m.kind_case() != v1::ValueMeta::kTensor &&
          m.kind_case() != v1::ValueMeta::kSymbolic) {
        return InvalidField(name, field,
                            absl::StrCat("\"", pn.target(),
                                         "\" is not an op Kiln knows, so every output needs "
                                         "tensor or symbolic metadata (it runs as a fallback)"));
      }
      if (absl::Status s = ReadValue(name, field, m, index, i); !s.ok()) return s;
    }
    if (absl::Status s = CheckOutputKinds(pn, n); !s.ok()) return s;

    // Arguments.
    std::vector<Arg> positional(pn.args_size());
    for (int i = 0; i < pn.args_size(); ++i) {
      absl::StatusOr<Arg> a = ConvertArg(name, absl::StrCat("args[", i, "]"), pn.args(i), index, 0);
      if (!a.ok()) return a.status();
      positional[i] = *a;
    }
    std::vector<Arg> keyword(pn.kwargs_size());
    std::vector<std::string> keyword_names(pn.kwargs_size());
    for (int i = 0; i < pn.kwargs_size(); ++i) {
      const v1::NamedArgument& kw = pn.kwargs(i);
      const std::string field = absl::StrCat("kwargs.", kw.name());
      if (kw.name().empty()) {
        return InvalidField(name, absl::StrCat("kwargs[", i, "]"), "a keyword needs a name");
      }
      for (int j = 0; j < i; ++j) {
        if (pn.kwargs(j).name() == kw.name()) {
          return InvalidField(name, field, "the keyword argument is given twice");
        }
      }
      absl::StatusOr<Arg> a = ConvertArg(name, field, kw.value(), index, 0);
      if (!a.ok()) return a.status();
      keyword[i] = *a;
      keyword[i].name = Intern(kw.name());
      keyword_names[i] = kw.name();
    }

    n.args_begin = static_cast<uint32_t>(g_.args_.size());
    if (n.schema == nullptr) {
      g_.args_.insert(g_.args_.end(), positional.begin(), positional.end());
      g_.args_.insert(g_.args_.end(), keyword.begin(), keyword.end());
      n.num_args = static_cast<uint32_t>(positional.size() + keyword.size());
    } else {
      const CallArgs call{positional, keyword, keyword_names};
      if (const ops::Op* scalar = ScalarOverload(*n.op, call); scalar != nullptr) {
        n.op = scalar;
        n.schema = &scalar->schema;
        n.target = Intern(scalar->target());
      }
      absl::Status s = BindToSchema(
          g_, name, *n.schema, call, [this](const std::string& text) { return Intern(text); },
          g_.args_);
      if (!s.ok()) return s;
      n.num_args = static_cast<uint32_t>(n.schema->params.size());
    }
    g_.nodes_.push_back(n);
    if (n.schema != nullptr) {
      if (n.schema->returns == ReturnKind::kTuple) return CheckGetItem(pn, g_.nodes_.back());
      if (n.op->view_within_base) return CheckViewInBase(g_, g_.nodes_.back());
    }
    return absl::OkStatus();
  }

  absl::Status CheckOutputCount(const v1::Node& pn, const OpSchema* schema) {
    const std::string& name = pn.name();
    if (!pn.multi_output() && pn.outputs_size() != 1) {
      return InvalidField(name, "outputs",
                          absl::StrCat("a single-output node needs exactly one output entry, got ",
                                       pn.outputs_size()));
    }
    if (schema == nullptr) {
      if (pn.outputs_size() == 0) {
        return InvalidField(name, "outputs",
                            absl::StrCat("\"", pn.target(),
                                         "\" is not an op Kiln knows, so it needs output "
                                         "metadata (it runs as a fallback)"));
      }
      return absl::OkStatus();
    }
    switch (schema->returns) {
      case ReturnKind::kTensors:
        if (schema->num_returns == 0) {
          if (pn.multi_output() ? pn.outputs_size() != 0
                                : pn.outputs(0).kind_case() == v1::ValueMeta::kTensor) {
            return InvalidField(name, "outputs", "the op returns nothing");
          }
        } else if (schema->num_returns == 1 && pn.multi_output()) {
          return InvalidField(name, "multi_output",
                              absl::StrCat(pn.target(), " returns one tensor, not a tuple"));
        } else if (schema->num_returns > 1 &&
                   (!pn.multi_output() || pn.outputs_size() != schema->num_returns)) {
          return InvalidField(
              name, "outputs",
              absl::StrCat(pn.target(), " returns a tuple of ", schema->num_returns,
                           " values, got ", pn.multi_output() ? "" : "a single value of ",
                           pn.outputs_size(), pn.multi_output() ? " entries" : ""));
        }
        break;
      case ReturnKind::kTensorList:
        if (!pn.multi_output()) {
          return InvalidField(name, "multi_output",
                              absl::StrCat(pn.target(), " returns a list of tensors"));
        }
        break;
      case ReturnKind::kScalar:
      case ReturnKind::kTuple:
        if (pn.multi_output()) {
          return InvalidField(name, "multi_output",
                              absl::StrCat(pn.target(), " returns a single value"));
        }
        break;
    }
    return absl::OkStatus();
  }

  absl::Status CheckOutputKinds(const v1::Node& pn, const Node& n) {
    if (n.schema == nullptr) return absl::OkStatus();
    auto outs = g_.outputs(n);
    const ReturnKind returns = n.schema->returns;
    for (uint32_t i = 0; i < outs.size(); ++i) {
      const ValueKind k = outs[i].kind;
      const bool single_tensor = returns == ReturnKind::kTensors && n.schema->num_returns == 1;
      if ((single_tensor || returns == ReturnKind::kTensorList) && k != ValueKind::kTensor) {
        return InvalidField(pn.name(), absl::StrCat("outputs[", i, "]"),
                            absl::StrCat(pn.target(),
                                         " returns a tensor; expected tensor "
                                         "metadata"));
      }
      if (returns == ReturnKind::kScalar && k == ValueKind::kTensor) {
        return InvalidField(pn.name(), absl::StrCat("outputs[", i, "]"),
                            absl::StrCat(pn.target(), " returns a scalar, not a tensor"));
      }
    }
    return absl::OkStatus();
  }

  // getitem(tuple, i): `tuple` is a whole multi-output value, 0 <= i < its length, and the
  // result's metadata agrees with the element's.
  absl::Status CheckGetItem(const v1::Node& pn, const Node& n) {
    auto args = g_.args(n);
    const Arg& tuple = args[0];
    const Arg& index = args[1];
    if (tuple.kind != ArgKind::kRef || tuple.ref.output != Ref::kWhole ||
        !g_.node(tuple.ref.node).multi_output) {
      return InvalidField(pn.name(), "args[0]",
                          "operator.getitem needs the whole result of a multi-output node");
    }
    if (index.kind != ArgKind::kInt) {
      return InvalidField(pn.name(), "args[1]", "operator.getitem needs a constant int index");
    }
    const Node& producer = g_.node(tuple.ref.node);
    if (index.int_value < 0 || index.int_value >= producer.num_outputs) {
      return InvalidField(
          pn.name(), "args[1]",
          absl::StrCat("index ", index.int_value, " is out of range: \"", g_.name(producer),
                       "\" has ", producer.num_outputs, " outputs"));
    }
    const Value& element = g_.value(producer.outputs_begin + index.int_value);
    const Value& result = g_.value(n.outputs_begin);
    if (element.kind == ValueKind::kNone || result.kind == ValueKind::kNone) {
      return absl::OkStatus();
    }
    if (element.kind != result.kind ||
        (element.kind == ValueKind::kTensor &&
         (element.dtype != result.dtype || element.rank != result.rank))) {
      return InvalidField(pn.name(), "outputs[0]",
                          absl::StrCat("disagrees with element ", index.int_value, " of \"",
                                       g_.name(producer), "\" (kind, dtype or rank)"));
    }
    return absl::OkStatus();
  }

  // ---- arguments ----

  absl::StatusOr<Ref> ResolveRef(absl::string_view node, const std::string& field,
                                 const v1::ValueRef& r, uint32_t current) {
    auto it = index_.find(r.node());
    if (it == index_.end()) {
      return InvalidField(node, field, absl::StrCat("refers to unknown node \"", r.node(), "\""));
    }
    const uint32_t target = it->second;
    if (target == current) {
      return InvalidField(node, field, "refers to the node itself (a cycle)");
    }
    if (target > current) {
      std::vector<std::string> cycle = FindCycle(target, current);
      if (!cycle.empty()) {
        return InvalidField(node, field,
                            absl::StrCat("forms a cycle: ", absl::StrJoin(cycle, " -> ")));
      }
      return InvalidField(node, field,
                          absl::StrCat("refers to \"", r.node(),
                                       "\", which comes later (nodes must be in a topological "
                                       "order)"));
    }
    const Node& producer = g_.node(target);
    Ref ref;
    ref.node = target;
    if (r.has_output()) {
      if (r.output() < 0 || static_cast<uint32_t>(r.output()) >= producer.num_outputs) {
        return InvalidField(node, field + ".output",
                            absl::StrCat("output ", r.output(), " of \"", r.node(),
                                         "\" does not exist (it has ", producer.num_outputs, ")"));
      }
      ref.output = r.output();
    }
    return ref;
  }

  // The chain of references from node `from` back to node `to`, if one exists: a reference
  // to a later node is either out of order or a cycle, and a cycle deserves its name.
  std::vector<std::string> FindCycle(uint32_t from, uint32_t to) const {
    const int num_inputs = proto_.inputs_size();
    std::vector<int> parent(proto_.inputs_size() + proto_.nodes_size(), -1);
    std::vector<uint32_t> stack = {from};
    parent[from] = static_cast<int>(from);
    while (!stack.empty()) {
      const uint32_t n = stack.back();
      stack.pop_back();
      if (n == to) {
        std::vector<std::string> path;
        for (uint32_t at = to;; at = parent[at]) {
          path.push_back(NameAt(at));
          if (at == from) break;
        }
        std::vector<std::string> cycle = {NameAt(to)};
        cycle.insert(cycle.end(), path.rbegin(), path.rend());
        return cycle;
      }
      if (static_cast<int>(n) < num_inputs) continue;
      std::vector<const v1::Argument*> work;
      const v1::Node& pn = proto_.nodes(n - num_inputs);
      for (const v1::Argument& a : pn.args()) work.push_back(&a);
      for (const v1::NamedArgument& a : pn.kwargs()) work.push_back(&a.value());
      while (!work.empty()) {
        const v1::Argument* a = work.back();
        work.pop_back();
        if (a->kind_case() == v1::Argument::kList) {
          for (const v1::Argument& item : a->list().items()) work.push_back(&item);
        } else if (a->kind_case() == v1::Argument::kRef) {
          auto it = index_.find(a->ref().node());
          if (it != index_.end() && parent[it->second] < 0) {
            parent[it->second] = static_cast<int>(n);
            stack.push_back(it->second);
          }
        }
      }
    }
    return {};
  }

  std::string NameAt(uint32_t i) const {
    const int num_inputs = proto_.inputs_size();
    return static_cast<int>(i) < num_inputs ? proto_.inputs(i).name()
                                            : proto_.nodes(i - num_inputs).name();
  }

  // Converts one argument, resolving references and parsing expressions; nested lists go
  // into the pool after their parent is placed (the parent's span is patched).
  absl::StatusOr<Arg> ConvertArg(absl::string_view node, const std::string& field,
                                 const v1::Argument& a, uint32_t current, int depth) {
    Arg out;
    switch (a.kind_case()) {
      case v1::Argument::kRef: {
        absl::StatusOr<Ref> r = ResolveRef(node, field, a.ref(), current);
        if (!r.ok()) return r.status();
        out.kind = ArgKind::kRef;
        out.ref = *r;
        return out;
      }
      case v1::Argument::kIntValue:
        out.kind = ArgKind::kInt;
        out.int_value = a.int_value();
        return out;
      case v1::Argument::kFloatValue:
        // Infinities and NaN are meaningful arguments (masked_fill with -inf, scalar_tensor
        // of nan); the canonical form keys every NaN alike.
        out.kind = ArgKind::kFloat;
        out.float_value = a.float_value();
        return out;
      case v1::Argument::kBoolValue:
        out.kind = ArgKind::kBool;
        out.int_value = a.bool_value() ? 1 : 0;
        return out;
      case v1::Argument::kStringValue:
        out.kind = ArgKind::kString;
        out.string_id = Intern(a.string_value());
        return out;
      case v1::Argument::kNone:
        out.kind = ArgKind::kNone;
        return out;
      case v1::Argument::kDtype:
        if (a.dtype() <= 0 || a.dtype() > kMaxDType) {
          return InvalidField(node, field, absl::StrCat("unknown dtype ", a.dtype()));
        }
        out.kind = ArgKind::kDType;
        out.int_value = a.dtype();
        return out;
      case v1::Argument::kDevice: {
        out.kind = ArgKind::kDevice;
        out.device = Device();
        if (absl::Status s = ReadDevice(node, field, a.device(), &out.device); !s.ok()) return s;
        return out;
      }
      case v1::Argument::kLayout:
        if (a.layout() <= 0 || a.layout() > v1::LAYOUT_JAGGED) {
          return InvalidField(node, field, absl::StrCat("unknown layout ", a.layout()));
        }
        out.kind = ArgKind::kLayout;
        out.int_value = a.layout();
        return out;
      case v1::Argument::kMemoryFormat:
        if (a.memory_format() <= 0 || a.memory_format() > v1::MEMORY_FORMAT_PRESERVE) {
          return InvalidField(node, field,
                              absl::StrCat("unknown memory format ", a.memory_format()));
        }
        out.kind = ArgKind::kMemoryFormat;
        out.int_value = a.memory_format();
        return out;
      case v1::Argument::kList: {
        if (depth >= kMaxListDepth) {
          return InvalidField(node, field,
                              absl::StrCat("lists nest deeper than ", kMaxListDepth, " levels"));
        }
        const auto& items = a.list().items();
        std::vector<Arg> converted(items.size());
        for (int i = 0; i < items.size(); ++i) {
          absl::StatusOr<Arg> item =
              ConvertArg(node, absl::StrCat(field, "[", i, "]"), items[i], current, depth + 1);
          if (!item.ok()) return item.status();
          converted[i] = *item;
        }
        out.kind = ArgKind::kList;
        out.list.begin = static_cast<uint32_t>(g_.args_.size());
        out.list.size = static_cast<uint32_t>(converted.size());
        g_.args_.insert(g_.args_.end(), converted.begin(), converted.end());
        return out;
      }
      case v1::Argument::kSymbolic: {
        absl::StatusOr<uint32_t> id = InternExpr(node, field, a.symbolic().expr());
        if (!id.ok()) return id.status();
        out.kind = ArgKind::kSymbolic;
        switch (a.symbolic().kind()) {
          case v1::SYM_KIND_UNSPECIFIED:
          case v1::SYM_KIND_INT:
            out.sym_kind = ValueKind::kSymInt;
            break;
          case v1::SYM_KIND_FLOAT:
            out.sym_kind = ValueKind::kSymFloat;
            break;
          case v1::SYM_KIND_BOOL:
            out.sym_kind = ValueKind::kSymBool;
            break;
          default:
            return InvalidField(node, field + ".kind",
                                absl::StrCat("unknown symbolic kind ", a.symbolic().kind()));
        }
        out.sym = SymInt::Symbolic(*id);
        return out;
      }
      case v1::Argument::KIND_NOT_SET:
        break;
    }
    return InvalidField(node, field, "an argument with no value");
  }

  // ---- output and guards ----

  absl::Status ReadOutput() {
    if (proto_.output().kind_case() == v1::Argument::KIND_NOT_SET) {
      return InvalidField("", "output", "the graph has no output");
    }
    absl::StatusOr<Arg> out = ConvertArg("", "output", proto_.output(), g_.num_nodes(), 0);
    if (!out.ok()) return out.status();
    g_.output_ = *out;
    return absl::OkStatus();
  }

  absl::Status ReadGuards() {
    const v1::Guards& guards = proto_.guards();
    for (int i = 0; i < guards.shape_env_size(); ++i) {
      const std::string field = absl::StrCat("guards.shape_env[", i, "]");
      absl::Status s = CheckGuard(field, guards.shape_env(i), /*python_form=*/false);
      if (!s.ok()) return s;
      g_.shape_env_guards_.push_back(guards.shape_env(i));
    }
    if (!guards.python_expr().empty()) {
      absl::Status s = CheckGuard("guards.python_expr", guards.python_expr(), true);
      if (!s.ok()) return s;
      g_.python_guard_ = guards.python_expr();
    }
    return absl::OkStatus();
  }

  // A guard parses and mentions only declared symbols (sympy form) or L['tN'] for an
  // existing symbolic input N (Python form).
  absl::Status CheckGuard(const std::string& field, const std::string& text, bool python_form) {
    absl::StatusOr<sym::ExprPtr> parsed = sym::Parse(text);
    if (!parsed.ok()) {
      return InvalidField(
          "", field,
          absl::StrCat("cannot parse guard \"", text, "\": ", parsed.status().message()));
    }
    for (const std::string& s : sym::FreeSymbols(**parsed)) {
      if (absl::StartsWith(s, "L['t") && absl::EndsWith(s, "']")) {
        int n = -1;
        if (!python_form || !absl::SimpleAtoi(absl::string_view(s).substr(4, s.size() - 6), &n) ||
            n < 0 || n >= num_symbolic_inputs_) {
          return InvalidField("", field,
                              absl::StrCat("guard refers to ", s, ", but the graph has ",
                                           num_symbolic_inputs_, " symbolic inputs"));
        }
      } else if (!symbol_index_.contains(s)) {
        return InvalidField("", field,
                            absl::StrCat("guard mentions symbol \"", s,
                                         "\", which Graph.symbols does not declare"));
      }
    }
    return absl::OkStatus();
  }

  const v1::Graph& proto_;
  Graph g_;
  absl::flat_hash_map<absl::string_view, uint32_t> index_;  // name -> input/node position
  absl::flat_hash_map<std::string, uint32_t> symbol_index_;
  absl::flat_hash_map<std::string, uint32_t> strings_;
  absl::flat_hash_map<std::string, uint32_t> exprs_;
  int num_symbolic_inputs_ = 0;
};

absl::StatusOr<Graph> Import(const v1::Graph& proto) {
  absl::StatusOr<Graph> g = GraphBuilder(proto).Run();
  if (!g.ok()) return g;
  // Foreach calls written out per element; where an element call does not import as its op
  // (an argument its schema refuses), the graph keeps its foreach calls, which fall back.
  if (std::optional<v1::Graph> expanded = ExpandForeach(proto)) {
    absl::StatusOr<Graph> e = GraphBuilder(*expanded).Run();
    if (e.ok()) return e;
  }
  return g;
}

}  // namespace kiln::graph
