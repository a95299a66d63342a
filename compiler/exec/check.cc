#include "compiler/exec/check.h"

#include <cmath>
#include <variant>

#include "absl/strings/str_cat.h"
#include "compiler/exec/executor.h"
#include "compiler/interp/dtype.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/random_inputs.h"

namespace kiln::exec {
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
  auto expected = interp::Run(graph, a_inputs, ro);
  if (!expected.ok()) return expected.status();
  ExecOptions eo;
  eo.rng_seed = options.rng_seed;
  eo.rng_offset = options.rng_offset;
  eo.threads = options.threads;
  auto actual =
      options.runner ? options.runner(artifact, b_inputs, eo) : Execute(artifact, b_inputs, eo);
  if (!actual.ok()) return actual.status();
  CheckReport report;
  if (expected->size() != actual->size()) {
    report.ok = false;
    report.message = absl::StrCat("output count ", actual->size(), " != ", expected->size());
    return report;
  }
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
    const v1::DType dt = et->dtype();
    const std::vector<double> ev = et->ToDoubles(), av = at->ToDoubles();
    const double rtol = RelativeTolerance(dt) * options.tolerance_scale;
    double scale = 0;
    for (double x : ev) {
      if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
    }
    for (size_t k = 0; k < ev.size(); ++k) {
      const double x = ev[k], y = av[k];
      if (std::isnan(x) && std::isnan(y)) continue;
      if (x == y) continue;
      const double tol = rtol * (std::fabs(x) + scale);
      const double err = std::fabs(x - y);
      if (!(err <= tol)) {
        fail(i, absl::StrCat(et->DebugString(), " element ", k, ": got ", y, ", expected ", x,
                             " (tolerance ", tol, ")"));
        report.worst = std::max(report.worst, tol > 0 ? err / tol : INFINITY);
        break;
      }
      if (tol > 0) report.worst = std::max(report.worst, err / tol);
    }
  }
  return report;
}

}  // namespace kiln::exec
