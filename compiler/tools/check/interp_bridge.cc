#include "compiler/tools/check/interp_bridge.h"

#include <type_traits>
#include <variant>

#include "absl/strings/str_cat.h"

namespace kiln::check {
namespace {

using runtime::CallValue;
using runtime::Tensor;

// Writes t's values into `out`, which has t's sizes.
void WriteTensor(const interp::Tensor& t, const Tensor& out) {
  if (out.dtype() == v1::DTYPE_INT64) {
    // Through doubles, int64 would lose its low bits beyond 2^53.
    const std::vector<int64_t> ints = t.ToInts();
    int64_t* base = static_cast<int64_t*>(out.data());
    size_t i = 0;
    runtime::ForEachIndexPair(out.sizes(), out.strides(), out.strides(),
                              [&](int64_t a, int64_t) { base[a] = ints[i++]; });
  } else {
    out.FromDoubles(t.ToDoubles());
  }
}

}  // namespace

interp::Tensor ToInterp(const Tensor& t) {
  if (!t.defined()) return interp::Tensor();
  if (runtime::IsFloating(t.dtype())) {
    return interp::Tensor::FromDoubles(t.sizes(), t.dtype(), t.ToDoubles());
  }
  std::vector<int64_t> ints;
  if (t.dtype() == v1::DTYPE_INT64) {
    const int64_t* base = static_cast<const int64_t*>(t.data());
    runtime::ForEachIndexPair(t.sizes(), t.strides(), t.strides(),
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
        if constexpr (std::is_same_v<X, runtime::NoneValue>) {
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
  WriteTensor(t, out);
  return out;
}

absl::Status WriteResult(const interp::Value& value, const Tensor& out) {
  if (!out.defined()) return absl::OkStatus();
  if (const auto* t = std::get_if<interp::Tensor>(&value)) {
    if (t->sizes() != out.sizes()) {
      return absl::InvalidArgumentError(absl::StrCat("interpreter result ", t->DebugString(),
                                                     " does not fit ", out.DebugString()));
    }
    WriteTensor(*t, out);
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

runtime::FallbackHook InterpFallback() {
  return [](const runtime::FallbackCall& call) -> absl::Status {
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

}  // namespace kiln::check
