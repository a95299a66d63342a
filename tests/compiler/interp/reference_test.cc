// The interpreter against PyTorch. For each graph of the corpus that recorded its real
// inputs and the outputs eager PyTorch computed from them on an H100
// (tests/data/graphs/ref/*.ref.json.gz, written by kiln.capture), the interpreter runs the
// graph on those inputs and every output must agree with PyTorch's within
// interp::PyTorchTolerance; outputs recorded as samples are compared at the samples and
// through their sums. This is what makes the oracle an oracle: everything else is checked
// against it.
//
// Graphs that cannot pass yet are listed in ExpectedFailures() with the reason (a piece of
// the error they give); a listed graph must still fail for that reason, so the list only
// shrinks.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/tolerance.h"
#include "nlohmann/json.hpp"
#include "proto/base/int_expr.h"
#include "proto/dtype.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace kiln::interp {
namespace {

using Json = nlohmann::json;
using SymbolMap = std::map<std::string, int64_t, std::less<>>;

// Whether `expr` is a bare symbol name ("s77"), which a recorded input binds.
bool IsBareSymbol(absl::string_view expr) {
  return !expr.empty() && absl::ascii_isalpha(static_cast<unsigned char>(expr[0])) &&
         std::all_of(expr.begin(), expr.end(), [](char c) {
           return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_';
         });
}

// Graphs whose check cannot pass yet, and why (a piece of the error they give).
const std::map<std::string, std::string>& ExpectedFailures() {
  // Every recorded graph matches PyTorch today; a graph that cannot yet is listed here.
  static const auto* failures = new std::map<std::string, std::string>{};
  return *failures;
}

std::string RefDir() { return kiln::testing::GraphsDir() + "/ref"; }

// The reference files, by the name of the graph they belong to ("ref_mlp.fw.json.gz").
std::vector<std::string> ReferencedGraphs() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(RefDir())) {
    const std::string file = entry.path().filename().string();
    if (absl::EndsWith(file, ".ref.json.gz")) {
      names.push_back(absl::StrReplaceAll(file, {{".ref.json.gz", ".json.gz"}}));
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

absl::StatusOr<Json> ReadJson(const std::string& path) {
  absl::StatusOr<std::string> text = kiln::testing::ReadDataFile(path);
  if (!text.ok()) return text.status();
  Json j = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return absl::InvalidArgumentError(absl::StrCat(path, ": not JSON"));
  return j;
}

// A recorded tensor's values in row-major order ("b64", "dtype", "shape"; a sampled output
// holds only the samples, so its byte count gives its length).
absl::StatusOr<Tensor> RecordedValues(const Json& record, bool sampled) {
  const DType dtype = fx::DTypeFromTorchName(record.at("dtype").get<std::string>());
  std::string bytes;
  if (!absl::Base64Unescape(record.at("b64").get<std::string>(), &bytes)) {
    return absl::InvalidArgumentError("a tensor's b64 is not base64");
  }
  std::vector<int64_t> sizes = record.at("shape").get<std::vector<int64_t>>();
  if (sampled) {
    const int64_t width = ElementSize(dtype);
    if (width == 0) return absl::InvalidArgumentError("a sampled tensor of unknown dtype");
    sizes = {static_cast<int64_t>(bytes.size()) / width};
  }
  return TensorFromBytes(std::move(sizes), dtype, bytes);
}

absl::StatusOr<int64_t> EvalSize(const v1::SymInt& s, const SymbolMap& symbols) {
  if (s.kind_case() == v1::SymInt::kExpr) return EvaluateIntExpr(s.expr(), symbols);
  return s.value();
}

// The graph's inputs from the recorded ones: tensors laid out as the graph input's
// metadata says (strides and offset, evaluated at the symbols the inputs bind), symbolic
// ints as their values.
absl::StatusOr<std::vector<Value>> BindInputs(const v1::Graph& g, const Json& recorded) {
  if (!recorded.is_array() || recorded.size() != static_cast<size_t>(g.inputs_size())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the graph takes ", g.inputs_size(), " inputs, the reference records ", recorded.size()));
  }
  SymbolMap symbols;
  for (int i = 0; i < g.inputs_size(); ++i) {
    const v1::ValueMeta& meta = g.inputs(i).meta();
    const Json& r = recorded[static_cast<size_t>(i)];
    if (meta.has_symbolic() && IsBareSymbol(meta.symbolic().expr()) && r.is_number_integer()) {
      symbols[meta.symbolic().expr()] = r.get<int64_t>();
    } else if (meta.has_tensor() && r.is_object()) {
      const std::vector<int64_t> shape = r.at("shape").get<std::vector<int64_t>>();
      for (int d = 0; d < meta.tensor().sizes_size() && d < static_cast<int>(shape.size()); ++d) {
        const v1::SymInt& s = meta.tensor().sizes(d);
        if (s.kind_case() == v1::SymInt::kExpr && IsBareSymbol(s.expr())) {
          symbols[s.expr()] = shape[static_cast<size_t>(d)];
        }
      }
    }
  }
  std::vector<Value> inputs;
  for (int i = 0; i < g.inputs_size(); ++i) {
    const v1::GraphInput& in = g.inputs(i);
    const Json& r = recorded[static_cast<size_t>(i)];
    if (in.meta().has_tensor()) {
      if (!r.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", in.name(), " is a tensor, the reference records ", r.dump()));
      }
      absl::StatusOr<Tensor> values = RecordedValues(r, /*sampled=*/false);
      if (!values.ok()) return values.status();
      const v1::TensorMeta& m = in.meta().tensor();
      std::vector<int64_t> strides;
      for (const v1::SymInt& s : m.strides()) {
        absl::StatusOr<int64_t> v = EvalSize(s, symbols);
        if (!v.ok()) return v.status();
        strides.push_back(*v);
      }
      absl::StatusOr<int64_t> offset = EvalSize(m.storage_offset(), symbols);
      if (!offset.ok()) return offset.status();
      if (strides.size() != values->sizes().size()) strides = ContiguousStrides(values->sizes());
      Tensor t = Tensor::ZerosStrided(values->sizes(), strides, *offset, values->dtype());
      t.CopyFrom(*values);
      inputs.emplace_back(std::move(t));
    } else if (r.is_number_integer()) {
      inputs.emplace_back(r.get<int64_t>());
    } else if (r.is_number_float()) {
      inputs.emplace_back(r.get<double>());
    } else if (r.is_boolean()) {
      inputs.emplace_back(r.get<bool>());
    } else {
      inputs.emplace_back(None{});
    }
  }
  return inputs;
}

// The tolerance for a graph's outputs of `dtype`: the dtype's, loosened by the least precise
// arithmetic in the graph (reduced-precision dtypes anywhere, convolutions that cuDNN runs
// in TF32); see tolerance.h.
Tolerance GraphTolerance(const v1::Graph& g, DType dtype) {
  Tolerance tol = PyTorchTolerance(dtype);
  if (!IsFloating(dtype)) return tol;
  auto loosen = [&](const v1::ValueMeta& meta) {
    const DType d = meta.has_tensor() ? meta.tensor().dtype() : v1::DTYPE_UNSPECIFIED;
    if (d == v1::DTYPE_BFLOAT16 || d == v1::DTYPE_FLOAT16) tol = tol.Or(PyTorchTolerance(d));
  };
  for (const v1::GraphInput& in : g.inputs()) loosen(in.meta());
  for (const v1::Node& node : g.nodes()) {
    for (const v1::ValueMeta& meta : node.outputs()) loosen(meta);
    if (absl::StartsWith(node.target(), "aten.convolution")) {
      tol = tol.Or(PyTorchTolerance(v1::DTYPE_FLOAT32, /*tf32=*/true));
    }
  }
  return tol;
}

// Ops whose result has their first argument's values (a view, a copy, a cast), which the
// search for a value's terms looks through.
bool KeepsValues(absl::string_view op) {
  static const auto* ops = new std::set<std::string, std::less<>>{
      "aten.view.default",      "aten._unsafe_view.default", "aten.reshape.default",
      "aten.t.default",         "aten.transpose.int",        "aten.permute.default",
      "aten.squeeze.dim",       "aten.squeeze.dims",         "aten.squeeze.default",
      "aten.unsqueeze.default", "aten.alias.default",        "aten.detach.default",
      "aten.clone.default",     "aten._to_copy.default",     "aten.contiguous.default"};
  return ops->contains(op);
}

// The arguments whose elements output `output` of `op` adds up, so that it can cancel to far
// below them (see tolerance.h): reductions, additions, and the parameter gradients of
// convolution and normalization backwards (the bias gradient sums grad_out; the weight
// gradient sums grad_out times the normalized input, whose magnitude is about 1).
std::vector<int> SummedArguments(absl::string_view op, int output) {
  struct Sum {
    std::vector<int> outputs;
    std::vector<int> arguments;
  };
  static const auto* sums = new std::map<std::string, Sum, std::less<>>{
      {"aten.sum.default", {{0}, {0}}},
      {"aten.sum.dim_IntList", {{0}, {0}}},
      {"aten.mean.default", {{0}, {0}}},
      {"aten.mean.dim", {{0}, {0}}},
      {"aten.add.Tensor", {{0}, {0, 1}}},
      {"aten.sub.Tensor", {{0}, {0, 1}}},
      {"aten.convolution_backward.default", {{2}, {0}}},
      {"aten.native_layer_norm_backward.default", {{1, 2}, {0}}},
      {"aten.native_batch_norm_backward.default", {{1, 2}, {0}}},
      {"aten.native_group_norm_backward.default", {{1, 2}, {0}}},
  };
  auto it = sums->find(op);
  if (it == sums->end()) return {};
  const std::vector<int>& outputs = it->second.outputs;
  if (std::find(outputs.begin(), outputs.end(), output) == outputs.end()) return {};
  return it->second.arguments;
}

// Outputs that hold the state of a random number generator (the Philox seed and offset
// attention saves for its backward): PyTorch's generator's, which the interpreter does not
// replay, or whatever memory at::empty gave when dropout is off.
bool IsRngState(absl::string_view op, int output) {
  if (op == "aten._scaled_dot_product_efficient_attention.default") {
    return output == 2 || output == 3;
  }
  if (op == "aten._scaled_dot_product_flash_attention.default" ||
      op == "aten._scaled_dot_product_cudnn_attention.default") {
    return output == 6 || output == 7;
  }
  return false;
}

// What a graph output is, for comparing it: the graph values whose elements it sums, and
// whether it is a generator's state.
struct OutputOrigin {
  std::vector<v1::Argument> summed;
  bool rng_state = false;
};

// The origins of the graph's outputs (flattened), found by following each back through ops
// that keep values to the op that computed them.
std::vector<OutputOrigin> OriginsOfOutputs(const v1::Graph& g) {
  std::map<std::string, const v1::Node*, std::less<>> nodes;
  for (const v1::Node& n : g.nodes()) nodes[n.name()] = &n;
  std::vector<v1::Argument> outputs;
  std::function<void(const v1::Argument&)> flatten = [&](const v1::Argument& a) {
    if (a.kind_case() == v1::Argument::kList) {
      for (const v1::Argument& item : a.list().items()) flatten(item);
    } else {
      outputs.push_back(a);
    }
  };
  flatten(g.output());
  std::vector<OutputOrigin> origins;
  for (const v1::Argument& a : outputs) {
    OutputOrigin& origin = origins.emplace_back();
    if (a.kind_case() != v1::Argument::kRef) continue;
    auto it = nodes.find(a.ref().node());
    int output = a.ref().has_output() ? a.ref().output() : 0;
    while (it != nodes.end()) {
      const v1::Node& n = *it->second;
      const bool getitem = n.target() == "operator.getitem";
      if (!(getitem || (KeepsValues(n.target()) && output == 0)) || n.args_size() == 0 ||
          n.args(0).kind_case() != v1::Argument::kRef) {
        break;
      }
      output = getitem ? static_cast<int>(n.args(1).int_value())
                       : (n.args(0).ref().has_output() ? n.args(0).ref().output() : 0);
      it = nodes.find(n.args(0).ref().node());
    }
    if (it == nodes.end()) continue;
    const v1::Node& producer = *it->second;
    origin.rng_state = IsRngState(producer.target(), output);
    for (int pos : SummedArguments(producer.target(), output)) {
      if (pos < producer.args_size() && producer.args(pos).kind_case() == v1::Argument::kRef) {
        origin.summed.push_back(producer.args(pos));
      }
    }
  }
  return origins;
}

double LargestMagnitude(const Value& v) {
  const auto* t = std::get_if<Tensor>(&v);
  if (t == nullptr || !t->defined() || !IsFloating(t->dtype())) return 0;
  double m = 0;
  for (double x : t->ToDoubles()) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// PyTorch's outputs flattened as the interpreter returns them.
void Flatten(const Json& j, std::vector<Json>& out) {
  if (j.is_array()) {
    for (const Json& e : j) Flatten(e, out);
  } else {
    out.push_back(j);
  }
}

// How one graph's outputs compare: the first disagreement, and the worst error relative to
// its bound over everything compared.
struct Comparison {
  std::string mismatch;
  double worst = 0;
  void Fail(std::string message) {
    if (mismatch.empty()) mismatch = std::move(message);
  }
};

// What an output is compared with: its tolerance and the magnitude of its terms, when
// another tensor's (see tolerance.h).
struct Expectation {
  Tolerance tol;
  double term_scale = 0;
};

void CompareTensor(size_t index, const Tensor& got, const Json& want, const Expectation& e,
                   Comparison& c) {
  const std::string where = absl::StrCat("output ", index, " (", got.DebugString(), ")");
  const DType dtype = fx::DTypeFromTorchName(want.at("dtype").get<std::string>());
  if (dtype != got.dtype() || want.at("shape").get<std::vector<int64_t>>() != got.sizes()) {
    return c.Fail(absl::StrCat(where, ": PyTorch's is ", want.at("dtype").get<std::string>(),
                               want.at("shape").dump()));
  }
  const bool sampled = want.contains("index");
  absl::StatusOr<Tensor> reference = RecordedValues(want, sampled);
  if (!reference.ok()) return c.Fail(absl::StrCat(where, ": ", reference.status().message()));
  const std::vector<double> ref = reference->ToDoubles();
  const std::vector<double> all = got.ToDoubles();
  int64_t first = 0;
  int64_t step = 1;
  if (sampled) {
    const std::vector<int64_t> index = want.at("index").get<std::vector<int64_t>>();
    first = index.at(0);
    step = index.at(1);
  }
  const Tolerance& tol = e.tol;
  double scale = e.term_scale;
  for (double x : ref) {
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  }
  for (size_t k = 0; k < ref.size(); ++k) {
    const size_t at = static_cast<size_t>(first + static_cast<int64_t>(k) * step);
    if (at >= all.size()) return c.Fail(absl::StrCat(where, ": sample ", k, " is out of range"));
    const double bound = tol.Bound(ref[k], scale);
    if (!tol.Allows(ref[k], all[at], scale)) {
      c.worst = std::max(c.worst, bound > 0 ? std::fabs(all[at] - ref[k]) / bound : INFINITY);
      c.Fail(absl::StrCat(where, " element ", at, ": interpreter ", all[at], ", PyTorch ", ref[k],
                          " (bound ", bound, ")"));
    } else if (bound > 0 && std::isfinite(ref[k])) {
      c.worst = std::max(c.worst, std::fabs(all[at] - ref[k]) / bound);
    }
  }
  if (!sampled) return;
  double sum = 0;
  double abs_sum = 0;
  for (double x : all) {
    sum += x;
    abs_sum += std::fabs(x);
  }
  const double bound =
      tol.SumBound(want.at("abs_sum").get<double>(), scale, static_cast<int64_t>(all.size()));
  for (const auto& [name, mine] : {std::pair{"sum", sum}, std::pair{"abs_sum", abs_sum}}) {
    const double theirs = want.at(name).get<double>();
    const double err = std::fabs(mine - theirs);
    c.worst = std::max(c.worst, bound > 0 ? err / bound : (err > 0 ? INFINITY : 0));
    if (!(err <= bound)) {
      c.Fail(absl::StrCat(where, " ", name, ": interpreter ", mine, ", PyTorch ", theirs,
                          " (bound ", bound, ")"));
    }
  }
}

void CompareValue(size_t index, const Value& got, const Json& want, const Expectation& e,
                  Comparison& c) {
  if (want.is_null()) {
    if (!std::holds_alternative<None>(got)) c.Fail(absl::StrCat("output ", index, " is not None"));
    return;
  }
  if (want.is_object()) {
    const auto* t = std::get_if<Tensor>(&got);
    if (t == nullptr || !t->defined()) {
      return c.Fail(absl::StrCat("output ", index, ": PyTorch's is a tensor"));
    }
    return CompareTensor(index, *t, want, e, c);
  }
  if (want.is_number_integer() || want.is_boolean()) {
    const int64_t w = want.is_boolean() ? int64_t{want.get<bool>()} : want.get<int64_t>();
    const int64_t* i = std::get_if<int64_t>(&got);
    const bool* b = std::get_if<bool>(&got);
    if ((i == nullptr || *i != w) && (b == nullptr || int64_t{*b} != w)) {
      c.Fail(absl::StrCat("output ", index, ": PyTorch's is ", want.dump()));
    }
    return;
  }
  const double* d = std::get_if<double>(&got);
  const Tolerance tol = PyTorchTolerance(v1::DTYPE_FLOAT64);
  if (d == nullptr || !tol.Allows(want.get<double>(), *d, std::fabs(want.get<double>()))) {
    c.Fail(absl::StrCat("output ", index, ": PyTorch's is ", want.dump()));
  }
}

// Runs `graph` on the recorded inputs of `ref` and compares its outputs with the recorded
// ones.
absl::StatusOr<Comparison> Compare(const v1::Graph& graph, const Json& ref) {
  absl::StatusOr<std::vector<Value>> inputs = BindInputs(graph, ref.at("inputs"));
  if (!inputs.ok()) return inputs.status();
  // The values outputs sum up join the outputs, so one run gives their magnitudes.
  const std::vector<OutputOrigin> origins = OriginsOfOutputs(graph);
  v1::Graph run = graph;
  for (const OutputOrigin& o : origins) {
    for (const v1::Argument& a : o.summed) *run.mutable_output()->mutable_list()->add_items() = a;
  }
  absl::StatusOr<std::vector<Value>> outputs = Run(run, *inputs);
  if (!outputs.ok()) return outputs.status();
  std::vector<Json> want;
  Flatten(ref.at("outputs"), want);
  Comparison c;
  if (want.size() != origins.size() || outputs->size() < want.size()) {
    c.Fail(absl::StrCat("the interpreter returns ", origins.size(), " outputs, PyTorch ",
                        want.size()));
    return c;
  }
  size_t extra = want.size();
  for (size_t i = 0; i < want.size(); ++i) {
    const auto* t = std::get_if<Tensor>(&(*outputs)[i]);
    Expectation e;
    e.tol = GraphTolerance(graph, t != nullptr && t->defined() ? t->dtype() : v1::DTYPE_FLOAT64);
    for (size_t k = 0; k < origins[i].summed.size(); ++k) {
      e.term_scale = std::max(e.term_scale, LargestMagnitude((*outputs)[extra++]));
    }
    if (origins[i].rng_state) continue;
    CompareValue(i, (*outputs)[i], want[i], e, c);
  }
  return c;
}

absl::StatusOr<v1::Graph> ImportGraph(const std::string& graph_file) {
  absl::StatusOr<std::string> text =
      kiln::testing::ReadDataFile(kiln::testing::GraphsDir() + "/" + graph_file);
  if (!text.ok()) return text.status();
  return fx::ImportCapture(*text);
}

absl::StatusOr<Json> ReadReference(const std::string& graph_file) {
  return ReadJson(RefDir() + "/" + absl::StrReplaceAll(graph_file, {{".json.gz", ".ref.json.gz"}}));
}

// Checks `graph_file` against its reference; an error or a mismatch says where it first
// disagrees.
absl::StatusOr<Comparison> CheckAgainstPyTorch(const std::string& graph_file) {
  absl::StatusOr<v1::Graph> graph = ImportGraph(graph_file);
  if (!graph.ok()) return graph.status();
  absl::StatusOr<Json> ref = ReadReference(graph_file);
  if (!ref.ok()) return ref.status();
  return Compare(*graph, *ref);
}

class Reference : public ::testing::TestWithParam<std::string> {};

TEST_P(Reference, InterpreterMatchesPyTorch) {
  const std::string& name = GetParam();
  absl::StatusOr<Comparison> c = CheckAgainstPyTorch(name);
  const std::string error = !c.ok() ? std::string(c.status().message()) : c->mismatch;
  if (c.ok()) {
    std::printf("%s: worst error %.3g of the bound\n", name.c_str(), c->worst);
  }
  auto expected = ExpectedFailures().find(name);
  if (expected == ExpectedFailures().end()) {
    EXPECT_TRUE(error.empty()) << error;
    return;
  }
  EXPECT_FALSE(error.empty()) << name << " matches PyTorch now: remove it from ExpectedFailures()";
  EXPECT_TRUE(absl::StrContains(error, expected->second))
      << name << " fails differently than listed (" << expected->second << "): " << error;
}

INSTANTIATE_TEST_SUITE_P(Corpus, Reference, ::testing::ValuesIn(ReferencedGraphs()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = absl::StrReplaceAll(info.param, {{".json.gz", ""}});
                           std::replace(n.begin(), n.end(), '.', '_');
                           return n;
                         });

// The comparison finds a difference the size of a plausible interpreter bug: one element
// of an output off by 0.1%, or a sampled output's sum off.
TEST(ReferenceCheck, CatchesASmallDifference) {
  absl::StatusOr<v1::Graph> graph = ImportGraph("ref_mlp.fw.json.gz");
  ASSERT_TRUE(graph.ok()) << graph.status();
  absl::StatusOr<Json> ref = ReadReference("ref_mlp.fw.json.gz");
  ASSERT_TRUE(ref.ok()) << ref.status();
  absl::StatusOr<Comparison> same = Compare(*graph, *ref);
  ASSERT_TRUE(same.ok()) << same.status();
  EXPECT_EQ(same->mismatch, "");

  std::string bytes;
  ASSERT_TRUE(absl::Base64Unescape((*ref)["outputs"][0]["b64"].get<std::string>(), &bytes));
  std::string changed = bytes;
  float x;
  std::memcpy(&x, changed.data() + 4 * 7, 4);
  x *= 1.001f;
  std::memcpy(changed.data() + 4 * 7, &x, 4);
  Json off = *ref;
  off["outputs"][0]["b64"] = absl::Base64Escape(changed);
  absl::StatusOr<Comparison> c = Compare(*graph, off);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_TRUE(absl::StrContains(c->mismatch, "output 0 (float32[2, 16, 32]) element 7"))
      << c->mismatch;

  // The same output recorded as samples (every second element) with its sums.
  Json sampled = *ref;
  std::string every_other;
  for (size_t i = 0; i < bytes.size() / 4; i += 2) every_other.append(bytes, 4 * i, 4);
  Json& s = sampled["outputs"][0];
  s["b64"] = absl::Base64Escape(every_other);
  s["index"] = {0, 2};
  double sum = 0;
  double abs_sum = 0;
  for (size_t i = 0; i < bytes.size() / 4; ++i) {
    float v;
    std::memcpy(&v, bytes.data() + 4 * i, 4);
    sum += v;
    abs_sum += std::fabs(v);
  }
  s["sum"] = sum;
  s["abs_sum"] = abs_sum;
  absl::StatusOr<Comparison> samples = Compare(*graph, sampled);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_EQ(samples->mismatch, "");
  s["sum"] = sum + 0.01 * abs_sum;
  samples = Compare(*graph, sampled);
  ASSERT_TRUE(samples.ok()) << samples.status();
  EXPECT_TRUE(absl::StrContains(samples->mismatch, "output 0 (float32[2, 16, 32]) sum"))
      << samples->mismatch;
}

TEST(ReferenceList, NamesOnlyGraphsWithReferences) {
  const std::vector<std::string> graphs = ReferencedGraphs();
  EXPECT_FALSE(graphs.empty());
  for (const auto& [name, reason] : ExpectedFailures()) {
    EXPECT_TRUE(std::find(graphs.begin(), graphs.end(), name) != graphs.end()) << name;
    EXPECT_FALSE(reason.empty()) << name;
  }
}

}  // namespace
}  // namespace kiln::interp
