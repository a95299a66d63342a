#include "compiler/tools/check/runtime_check.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <variant>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "client/runtime/cpu_runtime.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/random_inputs.h"
#include "compiler/sym/expr.h"
#include "compiler/sym/guards.h"
#include "compiler/tools/check/compare.h"
#include "compiler/tools/check/interp_bridge.h"
#include "proto/ops/registry.h"

namespace kiln::check {
namespace {

// A deep copy with the same layout, so write-backs of one run do not leak into the other.
interp::Value Copy(const interp::Value& v) {
  if (const interp::Tensor* t = std::get_if<interp::Tensor>(&v)) {
    if (!t->defined()) return v;
    interp::Tensor c =
        interp::Tensor::ZerosStrided(t->sizes(), t->strides(), t->storage_offset(), t->dtype());
    c.CopyFrom(*t);
    return c;
  }
  return v;
}

// What a run on the runtime gave: its outputs, and the inputs it wrote back (by index).
struct RuntimeRun {
  std::vector<interp::Value> outputs;
  std::map<int32_t, interp::Value> written_back;
};

// Runs `artifact` on a CpuRuntime: inputs converted with FromInterp (symbolic ints as
// Tensor::Scalar), buffers poisoned, fallback steps through the interpreter; the outputs
// converted back (symbolic-scalar outputs as ints, None as None), and so are the inputs the
// plan writes back, after the run.
absl::StatusOr<RuntimeRun> RunOnRuntime(const v1::CompiledGraph& artifact,
                                        absl::Span<const interp::Value> inputs,
                                        const CheckOptions& options) {
  runtime::CpuRuntime::Options load;
  load.threads = options.threads;
  absl::StatusOr<std::unique_ptr<runtime::CpuRuntime>> loaded =
      runtime::CpuRuntime::Load(artifact, load);
  if (!loaded.ok()) return loaded.status();
  std::vector<runtime::Tensor> args;
  for (const interp::Value& v : inputs) {
    if (const auto* t = std::get_if<interp::Tensor>(&v)) {
      args.push_back(FromInterp(*t));
    } else if (const auto* i = std::get_if<int64_t>(&v)) {
      args.push_back(runtime::Tensor::Scalar(*i));
    } else {
      args.emplace_back();
    }
  }
  runtime::CpuRuntime::RunOptions run;
  run.rng_seed = options.rng_seed;
  run.rng_offset = options.rng_offset;
  run.fallback = InterpFallback();
  run.poison = true;
  absl::StatusOr<std::vector<runtime::Tensor>> outputs = (*loaded)->Run(args, run);
  if (!outputs.ok()) return outputs.status();
  RuntimeRun result;
  for (int i = 0; i < artifact.outputs_size(); ++i) {
    const v1::OutputBinding& binding = artifact.outputs(i);
    const runtime::Tensor& t = (*outputs)[static_cast<size_t>(i)];
    if (binding.none()) {
      result.outputs.emplace_back(interp::None{});
    } else if (!binding.symbol().empty()) {
      result.outputs.emplace_back(t.ItemInt());
    } else {
      result.outputs.emplace_back(ToInterp(t));
    }
  }
  for (const v1::PlanStep& step : artifact.steps()) {
    if (!step.has_write_back()) continue;
    const int32_t index = step.write_back().input_index();
    if (index >= 0 && static_cast<size_t>(index) < args.size() &&
        args[static_cast<size_t>(index)].defined()) {
      result.written_back[index] = ToInterp(args[static_cast<size_t>(index)]);
    }
  }
  return result;
}

// Ops whose result holds some of their first argument's values (views within its elements,
// copies, casts): a softmax's probabilities seen through them are still probabilities.
bool KeepsValues(absl::string_view target) {
  const ops::Op* op = ops::FindOp(target);
  if (op != nullptr && op->view_of == 0 && op->view_within_base) return true;
  return target == "aten.clone.default" || target == "aten._to_copy.default" ||
         target == "aten.contiguous.default";
}

bool IsSoftmax(absl::string_view target) {
  return target == "aten._softmax.default" || target == "aten._safe_softmax.default";
}

// For each output of `graph` as the interpreter flattens them, the logits of the softmax
// whose probabilities it holds, if it holds a softmax's probabilities.
std::vector<std::optional<v1::Argument>> SoftmaxLogits(const v1::Graph& graph) {
  std::map<std::string, const v1::Node*, std::less<>> nodes;
  for (const v1::Node& n : graph.nodes()) nodes[n.name()] = &n;
  auto logits = [&](const v1::Argument& output) -> std::optional<v1::Argument> {
    const v1::Argument* a = &output;
    while (a->has_ref()) {
      auto it = nodes.find(a->ref().node());
      if (it == nodes.end() || it->second->args_size() == 0) return std::nullopt;
      const v1::Node& n = *it->second;
      if (IsSoftmax(n.target())) return n.args(0);
      if (!KeepsValues(n.target())) return std::nullopt;
      a = &n.args(0);
    }
    return std::nullopt;
  };
  std::vector<std::optional<v1::Argument>> out;
  std::function<void(const v1::Argument&)> flatten = [&](const v1::Argument& a) {
    if (a.kind_case() == v1::Argument::kList) {
      for (const v1::Argument& item : a.list().items()) flatten(item);
      return;
    }
    // A reference to a whole multi-output node stands for all its values.
    auto it = a.has_ref() && !a.ref().has_output() ? nodes.find(a.ref().node()) : nodes.end();
    if (it != nodes.end() && it->second->outputs_size() > 1) {
      out.resize(out.size() + static_cast<size_t>(it->second->outputs_size()));
      return;
    }
    out.push_back(logits(a));
  };
  flatten(graph.output());
  return out;
}

// The largest finite magnitude in `v` (0 for anything but a tensor).
double LargestMagnitude(const interp::Value& v) {
  const auto* t = std::get_if<interp::Tensor>(&v);
  if (t == nullptr || !t->defined()) return 0;
  double m = 0;
  for (double x : t->ToDoubles()) {
    if (std::isfinite(x)) m = std::max(m, std::fabs(x));
  }
  return m;
}

// Whether any input or node value of `graph` is bfloat16 or float16.
bool HasLowPrecisionValues(const v1::Graph& graph) {
  auto low = [](const v1::ValueMeta& meta) {
    if (!meta.has_tensor()) return false;
    const v1::DType d = meta.tensor().dtype();
    return d == v1::DTYPE_BFLOAT16 || d == v1::DTYPE_FLOAT16;
  };
  for (const v1::GraphInput& in : graph.inputs()) {
    if (low(in.meta())) return true;
  }
  for (const v1::Node& node : graph.nodes()) {
    for (const v1::ValueMeta& meta : node.outputs()) {
      if (low(meta)) return true;
    }
  }
  return false;
}

}  // namespace

double RelativeTolerance(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return 1e-5;
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16:
      return 1e-2;
    case v1::DTYPE_FLOAT64:
      return 1e-9;
    default:
      return 0;
  }
}

absl::StatusOr<CheckReport> CheckAgainstInterpreter(const v1::Graph& graph,
                                                    const v1::CompiledGraph& artifact,
                                                    const CheckOptions& options) {
  interp::RandomInputOptions ri;
  ri.seed = options.input_seed;
  ri.symbols = options.symbols;
  auto inputs = interp::MakeRandomInputs(graph, ri);
  if (!inputs.ok()) return inputs.status();
  std::vector<interp::Value> a_inputs, b_inputs;
  for (const interp::Value& v : *inputs) {
    a_inputs.push_back(Copy(v));
    b_inputs.push_back(Copy(v));
  }
  interp::RunOptions ro;
  ro.symbols = options.symbols;
  ro.rng_seed = options.rng_seed;
  ro.rng_offset = options.rng_offset;
  // The logits of outputs that are a softmax's probabilities join the outputs, so one run
  // gives their magnitudes (compare.h).
  const std::vector<std::optional<v1::Argument>> logits = SoftmaxLogits(graph);
  v1::Graph with_logits = graph;
  std::vector<size_t> logit_outputs;
  for (size_t i = 0; i < logits.size(); ++i) {
    if (!logits[i].has_value()) continue;
    if (logit_outputs.empty() && !with_logits.output().has_list()) {
      v1::Argument list;
      *list.mutable_list()->add_items() = graph.output();
      *with_logits.mutable_output() = std::move(list);
    }
    *with_logits.mutable_output()->mutable_list()->add_items() = *logits[i];
    logit_outputs.push_back(i);
  }
  auto expected = interp::Run(with_logits, a_inputs, ro);
  if (!expected.ok()) return expected.status();
  std::vector<double> logit_scale(expected->size(), 0);
  for (size_t k = 0; k < logit_outputs.size(); ++k) {
    const size_t extra = expected->size() - logit_outputs.size() + k;
    logit_scale[logit_outputs[k]] = LargestMagnitude((*expected)[extra]);
  }
  expected->resize(expected->size() - logit_outputs.size());
  auto run = RunOnRuntime(artifact, b_inputs, options);
  if (!run.ok()) return run.status();
  const std::vector<interp::Value>* actual = &run->outputs;
  CheckReport report;
  if (expected->size() != actual->size()) {
    report.ok = false;
    report.message = absl::StrCat("output count ", actual->size(), " != ", expected->size());
    return report;
  }
  const bool low_precision = HasLowPrecisionValues(graph);
  // The graph without rounding, run once, when a value needs it (compare.h): its outputs and
  // the inputs its copy_ left.
  std::vector<interp::Value> exact, exact_inputs;
  auto run_exact = [&]() -> absl::Status {
    if (!exact.empty()) return absl::OkStatus();
    for (const interp::Value& v : *inputs) exact_inputs.push_back(Copy(v));
    interp::RunOptions xo = ro;
    xo.round_to_dtype = false;
    auto values = interp::Run(graph, exact_inputs, xo);
    if (!values.ok()) return values.status();
    exact = *std::move(values);
    return absl::OkStatus();
  };
  auto fail = [&](size_t i, const std::string& what) {
    if (report.ok) report.message = absl::StrCat("output ", i, ": ", what);
    report.ok = false;
  };
  for (size_t i = 0; i < expected->size(); ++i) {
    const interp::Value& e = (*expected)[i];
    const interp::Value& a = (*actual)[i];
    ++report.outputs;
    if (std::holds_alternative<interp::None>(e)) continue;
    if (const int64_t* ei = std::get_if<int64_t>(&e)) {
      const int64_t* ai = std::get_if<int64_t>(&a);
      if (ai == nullptr || *ai != *ei) fail(i, absl::StrCat("scalar differs, expected ", *ei));
      continue;
    }
    const interp::Tensor* et = std::get_if<interp::Tensor>(&e);
    const interp::Tensor* at = std::get_if<interp::Tensor>(&a);
    if (et == nullptr || at == nullptr) {
      fail(i, "kind differs");
      continue;
    }
    if (et->sizes() != at->sizes()) {
      fail(i, absl::StrCat("sizes ", at->DebugString(), " != ", et->DebugString()));
      continue;
    }
    Expectation expectation;
    expectation.expected = *et;
    expectation.rtol = RelativeTolerance(et->dtype()) * options.tolerance_scale;
    expectation.logit_scale = logit_scale[i];
    Verdict verdict = CompareTensor(*at, expectation);
    if (!verdict.ok && low_precision) {
      if (absl::Status s = run_exact(); !s.ok()) return s;
      if (const auto* xt = std::get_if<interp::Tensor>(&exact[i])) expectation.exact = *xt;
      verdict = CompareTensor(*at, expectation);
    }
    report.worst = std::max(report.worst, verdict.worst);
    if (!verdict.ok) fail(i, verdict.message);
  }
  // The inputs the plan writes back hold what the interpreter's copy_ left in its inputs.
  for (const auto& [index, value] : run->written_back) {
    const auto* et = std::get_if<interp::Tensor>(&a_inputs[static_cast<size_t>(index)]);
    const auto* at = std::get_if<interp::Tensor>(&value);
    if (et == nullptr || at == nullptr) continue;
    ++report.outputs;
    const std::string where = absl::StrCat("input ", index, " (written back): ");
    if (et->sizes() != at->sizes()) {
      if (report.ok) report.message = where + "sizes differ";
      report.ok = false;
      continue;
    }
    Expectation expectation;
    expectation.expected = *et;
    expectation.rtol = RelativeTolerance(et->dtype()) * options.tolerance_scale;
    Verdict verdict = CompareTensor(*at, expectation);
    if (!verdict.ok && low_precision) {
      // A batch norm's running statistics under autocast: float32, from bf16 activations.
      if (absl::Status s = run_exact(); !s.ok()) return s;
      const auto* xt = std::get_if<interp::Tensor>(&exact_inputs[static_cast<size_t>(index)]);
      if (xt != nullptr) expectation.exact = *xt;
      verdict = CompareTensor(*at, expectation);
    }
    report.worst = std::max(report.worst, verdict.worst);
    if (!verdict.ok) {
      if (report.ok) report.message = where + verdict.message;
      report.ok = false;
    }
  }
  return report;
}

std::vector<SymbolValues> GuardedCheckPoints(const v1::Graph& graph) {
  std::vector<SymbolValues> points = {{}};
  if (graph.symbols_size() == 0) return points;
  // Only the ShapeEnv guards: the Python form is over inputs derived from the symbols.
  v1::Guards shape_only;
  *shape_only.mutable_shape_env() = graph.guards().shape_env();
  absl::StatusOr<sym::CompiledGuards> guards = sym::CompiledGuards::Compile(shape_only);
  if (!guards.ok()) return points;  // no telling which other values they allow
  for (int64_t delta : {-1, 1, 3}) {
    SymbolValues point;
    sym::Bindings bindings;
    for (const v1::Symbol& s : graph.symbols()) {
      // Float symbols keep their hints (guards such as Eq(zf3, 1.0e-5) read them); a symbol
      // whose range is one value stays at it.
      if (s.kind() == v1::SYM_KIND_FLOAT) {
        if (s.hint_case() == v1::Symbol::kFloatHint) bindings.symbols[s.name()] = s.float_hint();
        if (s.hint_case() == v1::Symbol::kIntHint) bindings.symbols[s.name()] = s.int_hint();
        continue;
      }
      const bool pinned = s.lower().kind_case() == v1::Bound::kIntValue &&
                          s.upper().kind_case() == v1::Bound::kIntValue &&
                          s.lower().int_value() == s.upper().int_value();
      const int64_t v = pinned ? s.lower().int_value() : std::max<int64_t>(1, s.int_hint() + delta);
      point[s.name()] = v;
      bindings.symbols[s.name()] = v;
    }
    if (!sym::CheckSymbolRanges(graph, bindings).holds) continue;
    if (!guards->Check(bindings).holds) continue;
    points.push_back(std::move(point));
  }
  return points;
}

absl::Status GraphAccepts(const v1::Graph& graph, const CheckOptions& options) {
  interp::RandomInputOptions ri;
  ri.seed = options.input_seed;
  ri.symbols = options.symbols;
  auto inputs = interp::MakeRandomInputs(graph, ri);
  if (!inputs.ok()) return inputs.status();
  interp::RunOptions ro;
  ro.symbols = options.symbols;
  ro.rng_seed = options.rng_seed;
  ro.rng_offset = options.rng_offset;
  return interp::Run(graph, *inputs, ro).status();
}

}  // namespace kiln::check
