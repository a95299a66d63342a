#include "tests/client/runtime/interp_bridge.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "client/runtime/cpu_runtime.h"

namespace kiln::runtime::testing {

interp::Tensor ToInterp(const Tensor& t) {
  if (!t.defined()) return interp::Tensor();
  if (IsFloating(t.dtype()))
    return interp::Tensor::FromDoubles(t.sizes(), t.dtype(), t.ToDoubles());
  std::vector<int64_t> ints;
  if (t.dtype() == v1::DTYPE_INT64) {
    const int64_t* base = static_cast<const int64_t*>(t.data());
    ForEachIndexPair(t.sizes(), t.strides(), t.strides(),
                     [&](int64_t a, int64_t) { ints.push_back(base[a]); });
  } else {
    for (double d : t.ToDoubles()) ints.push_back(static_cast<int64_t>(d));
  }
  return interp::Tensor::FromInts(t.sizes(), t.dtype(), ints);
}

interp::Arg ToInterp(const CallValue& v) {
  interp::Arg a;
  std::visit(
      [&](const auto& x) {
        using X = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<X, NoneValue>) {
          a = interp::Arg(interp::None{});
        } else if constexpr (std::is_same_v<X, Tensor>) {
          a = interp::Arg(ToInterp(x));
        } else if constexpr (std::is_same_v<X, CallValue::List>) {
          interp::Arg::List list;
          for (const CallValue& item : x) list.push_back(ToInterp(item));
          a = interp::Arg(std::move(list));
        } else {
          a.v = x;
        }
      },
      v.v);
  return a;
}

Tensor FromInterp(const interp::Tensor& t) {
  if (!t.defined()) return Tensor();
  Tensor out = Tensor::EmptyStrided(t.sizes(), t.strides(), t.storage_offset(), t.dtype());
  const absl::Status written = WriteResult(interp::Value(t), out);
  if (!written.ok()) ADD_FAILURE() << written;
  return out;
}

exec::Runner RuntimeRunner() {
  return [](const v1::CompiledGraph& artifact, absl::Span<const interp::Value> inputs,
            const exec::ExecOptions& options) -> absl::StatusOr<std::vector<interp::Value>> {
    CpuRuntime::Options load;
    load.threads = options.threads;
    absl::StatusOr<std::unique_ptr<CpuRuntime>> runtime = CpuRuntime::Load(artifact, load);
    if (!runtime.ok()) return runtime.status();
    std::vector<Tensor> args;
    for (const interp::Value& v : inputs) {
      if (const auto* t = std::get_if<interp::Tensor>(&v)) {
        args.push_back(FromInterp(*t));
      } else if (const auto* i = std::get_if<int64_t>(&v)) {
        args.push_back(Tensor::Scalar(*i));
      } else {
        args.emplace_back();
      }
    }
    CpuRuntime::RunOptions run;
    run.rng_seed = options.rng_seed;
    run.rng_offset = options.rng_offset;
    run.fallback = InterpFallback();
    run.poison = true;
    absl::StatusOr<std::vector<Tensor>> outputs = (*runtime)->Run(args, run);
    if (!outputs.ok()) return outputs.status();
    std::vector<interp::Value> values;
    for (int i = 0; i < artifact.outputs_size(); ++i) {
      const v1::OutputBinding& binding = artifact.outputs(i);
      const Tensor& t = (*outputs)[static_cast<size_t>(i)];
      if (binding.none()) {
        values.emplace_back(interp::None{});
      } else if (!binding.symbol().empty()) {
        values.emplace_back(t.ItemInt());
      } else {
        values.emplace_back(ToInterp(t));
      }
    }
    return values;
  };
}

absl::Status WriteResult(const interp::Value& value, const Tensor& out) {
  if (!out.defined()) return absl::OkStatus();
  if (const auto* t = std::get_if<interp::Tensor>(&value)) {
    if (t->sizes() != out.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("interpreter result ", t->DebugString(),
                                                     " does not fit ", out.DebugString()));
    }
    if (out.dtype() == v1::DTYPE_INT64) {
      const std::vector<int64_t> ints = t->ToInts();
      int64_t* base = static_cast<int64_t*>(out.data());
      size_t i = 0;
      ForEachIndexPair(out.sizes(), out.strides(), out.strides(),
                       [&](int64_t a, int64_t) { base[a] = ints[i++]; });
    } else {
      out.FromDoubles(t->ToDoubles());
    }
    return absl::OkStatus();
  }
  if (const auto* i = std::get_if<int64_t>(&value)) {
    out.FromDoubles({static_cast<double>(*i)});
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError("interpreter result is not a tensor");
}

absl::StatusOr<std::vector<interp::Value>> RunInterp(
    const std::string& op, const std::vector<CallValue>& args,
    const std::vector<std::pair<std::string, CallValue>>& kwargs, interp::RunOptions options) {
  std::vector<interp::Arg> iargs;
  for (const CallValue& v : args) iargs.push_back(ToInterp(v));
  std::vector<std::pair<std::string, interp::Arg>> ikwargs;
  for (const auto& [k, v] : kwargs) ikwargs.emplace_back(k, ToInterp(v));
  options.follow_meta = false;
  return interp::RunOp(op, std::move(iargs), std::move(ikwargs), options);
}

FallbackHook InterpFallback() {
  return [](const FallbackCall& call) -> absl::Status {
    interp::RunOptions options;
    options.rng_seed = call.rng_seed;
    options.rng_offset = call.rng_stream;
    absl::StatusOr<std::vector<interp::Value>> r =
        RunInterp(std::string(call.op), call.args, call.kwargs, options);
    if (!r.ok()) return r.status();
    for (size_t i = 0; i < call.outputs.size() && i < r->size(); ++i) {
      absl::Status s = WriteResult((*r)[i], call.outputs[i]);
      if (!s.ok()) return s;
    }
    return absl::OkStatus();
  };
}

Tensor RandomTensor(const std::vector<int64_t>& sizes, DType dtype, Layout layout,
                    std::mt19937_64& rng, double lo, double hi) {
  Tensor t;
  const size_t rank = sizes.size();
  if (layout == Layout::kTransposed && rank >= 2) {
    std::vector<int64_t> mem = sizes;
    std::swap(mem[rank - 1], mem[rank - 2]);
    std::vector<int64_t> strides = ContiguousStrides(mem);
    std::swap(strides[rank - 1], strides[rank - 2]);
    t = Tensor::EmptyStrided(sizes, strides, 0, dtype);
  } else if (layout == Layout::kStrided) {
    std::vector<int64_t> doubled = sizes;
    for (int64_t& s : doubled) s = 2 * s;
    std::vector<int64_t> strides = ContiguousStrides(doubled);
    for (int64_t& s : strides) s *= 2;
    t = Tensor::EmptyStrided(sizes, strides, 3, dtype);
  } else {
    t = Tensor::Empty(sizes, dtype);
  }
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (double& x : v) x = dist(rng);
  t.FromDoubles(v);
  return t;
}

::testing::AssertionResult AllClose(const std::vector<double>& got, const std::vector<double>& want,
                                    double rtol, double atol) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "size " << got.size() << " vs " << want.size();
  }
  int bad = 0;
  ::testing::AssertionResult fail = ::testing::AssertionFailure();
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(got[i]) && std::isnan(want[i])) continue;
    if (got[i] == want[i]) continue;  // infinities of one sign too
    if (std::fabs(got[i] - want[i]) <= atol + rtol * std::fabs(want[i])) continue;
    if (++bad <= 5) fail << "element " << i << ": got " << got[i] << ", want " << want[i] << "; ";
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return fail << bad << " of " << got.size() << " elements differ";
}

Tolerance ToleranceFor(DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64:
      return {1e-10, 1e-12};
    case v1::DTYPE_FLOAT32:
      return {2e-5, 2e-5};
    case v1::DTYPE_FLOAT16:
      return {4e-3, 4e-3};
    default:
      return {2e-2, 2e-2};
  }
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.sizes() != b.sizes() || a.dtype() != b.dtype()) return false;
  const int64_t es = a.element_size();
  const char* pa = static_cast<const char*>(a.data());
  const char* pb = static_cast<const char*>(b.data());
  bool same = true;
  ForEachIndexPair(a.sizes(), a.strides(), b.strides(), [&](int64_t x, int64_t y) {
    if (std::memcmp(pa + x * es, pb + y * es, static_cast<size_t>(es)) != 0) same = false;
  });
  return same;
}

}  // namespace kiln::runtime::testing
