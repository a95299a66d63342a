#pragma once

// The interpreter's op table and what op implementations share: reading arguments by
// schema position or keyword, and the small tensor utilities every family needs.
//
// Op implementations report bad arguments by throwing OpError; the interpreter catches it
// at its boundary and returns a Status naming the node, so nothing throws out of Run or
// RunOp. This keeps hundreds of argument reads readable.

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/tensor.h"

namespace kiln::interp {

class OpError : public std::runtime_error {
 public:
  explicit OpError(const std::string& message) : std::runtime_error(message) {}
};

template <typename... Args>
[[noreturn]] void Fail(const Args&... args) {
  throw OpError(absl::StrCat(args...));
}

template <typename... Args>
void Check(bool condition, const Args&... args) {
  if (!condition) Fail(args...);
}

// A Python number argument (a Scalar in a schema) with its kind: bool, int64 or float64.
struct ScalarArg {
  double value = 0;
  int64_t int_value = 0;
  DType kind = v1::DTYPE_INT64;  // DTYPE_BOOL, DTYPE_INT64 or DTYPE_FLOAT64
  bool is_int() const { return kind != v1::DTYPE_FLOAT64; }
};

// What a run provides to ops besides their arguments.
struct RunContext {
  const RunOptions* options = nullptr;
  uint64_t rng_stream = 0;  // the stream of the op being run (see philox.h)
};

// One call of an op: its arguments, read by schema position or keyword name.
class OpCall {
 public:
  OpCall(absl::string_view target, std::vector<Arg> args,
         std::vector<std::pair<std::string, Arg>> kwargs, const RunContext& context)
      : target_(target), args_(std::move(args)), kwargs_(std::move(kwargs)), ctx_(context) {}

  absl::string_view target() const { return target_; }
  const RunContext& context() const { return ctx_; }
  const RunOptions& options() const { return *ctx_.options; }

  // The argument at `pos` or keyword `name`; nullptr when absent or None.
  const Arg* Find(int pos, absl::string_view name) const;

  Tensor GetTensor(int pos, absl::string_view name) const;
  // Undefined when absent or None.
  Tensor GetOptTensor(int pos, absl::string_view name) const;
  int64_t GetInt(int pos, absl::string_view name) const;
  int64_t GetInt(int pos, absl::string_view name, int64_t fallback) const;
  std::optional<int64_t> GetOptInt(int pos, absl::string_view name) const;
  double GetDouble(int pos, absl::string_view name) const;
  double GetDouble(int pos, absl::string_view name, double fallback) const;
  std::optional<double> GetOptDouble(int pos, absl::string_view name) const;
  bool GetBool(int pos, absl::string_view name, bool fallback) const;
  std::optional<bool> GetOptBool(int pos, absl::string_view name) const;
  // int[] arguments; a single int is read as a one-element list, as the schema allows.
  std::vector<int64_t> GetInts(int pos, absl::string_view name) const;
  std::vector<int64_t> GetInts(int pos, absl::string_view name,
                               std::vector<int64_t> fallback) const;
  std::optional<std::vector<int64_t>> GetOptInts(int pos, absl::string_view name) const;
  std::vector<bool> GetBools(int pos, absl::string_view name, std::vector<bool> fallback) const;
  // Tensor[] / Tensor?[]; None elements are undefined tensors.
  std::vector<Tensor> GetTensors(int pos, absl::string_view name) const;
  ScalarArg GetScalar(int pos, absl::string_view name) const;
  std::optional<ScalarArg> GetOptScalar(int pos, absl::string_view name) const;
  std::optional<DType> GetOptDType(int pos, absl::string_view name) const;
  std::string GetString(int pos, absl::string_view name, std::string fallback) const;

  // The arguments as given, for ops that hand them on to other ops.
  const std::vector<Arg>& args() const { return args_; }
  const std::vector<std::pair<std::string, Arg>>& kwargs() const { return kwargs_; }

 private:
  std::string target_;
  std::vector<Arg> args_;
  std::vector<std::pair<std::string, Arg>> kwargs_;
  const RunContext& ctx_;
};

using OpFn = std::function<std::vector<Value>(OpCall&)>;

struct OpInfo {
  OpFn fn;
  // Results are views of the inputs (they keep their computed layout rather than taking
  // the metadata's).
  bool returns_views = false;
};

class OpRegistry {
 public:
  void Add(const std::string& name, OpFn fn);
  void AddView(const std::string& name, OpFn fn);
  const OpInfo* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;

 private:
  std::map<std::string, OpInfo, std::less<>> ops_;
};

// The table of every implemented op, built once.
const OpRegistry& DefaultOpRegistry();

// Each family file registers its ops.
void RegisterPointwiseOps(OpRegistry& registry);
void RegisterReductionOps(OpRegistry& registry);
void RegisterViewOps(OpRegistry& registry);
void RegisterFactoryOps(OpRegistry& registry);
void RegisterIndexingOps(OpRegistry& registry);
void RegisterNnOps(OpRegistry& registry);  // also registers the three below
void RegisterConvOps(OpRegistry& registry);
void RegisterPoolOps(OpRegistry& registry);
void RegisterAttentionOps(OpRegistry& registry);
void RegisterLinalgOps(OpRegistry& registry);
void RegisterRngOps(OpRegistry& registry);
void RegisterMiscOps(OpRegistry& registry);
// Runs ops of the families above per list element, so it registers last.
void RegisterForeachOps(OpRegistry& registry);

// ---- Utilities shared by op families ----

// A dim in [-rank, rank) made non-negative (rank 0 accepts -1 and 0, as PyTorch does).
int64_t WrapDim(int64_t dim, int64_t rank);
// Dims of a reduction: empty (or absent) means all dims; duplicates are an error.
std::vector<bool> ReductionMask(const std::optional<std::vector<int64_t>>& dims, int64_t rank);
// The broadcast of several shapes.
std::vector<int64_t> BroadcastShapes(absl::Span<const std::vector<int64_t>> shapes);
// `t` broadcast to `sizes` as a view with zero strides.
Tensor ExpandTo(const Tensor& t, const std::vector<int64_t>& sizes);
// The default dtype for float results (torch.get_default_dtype()).
constexpr DType kDefaultFloat = v1::DTYPE_FLOAT32;
// Value helpers.
inline std::vector<Value> One(Tensor t) { return {Value(std::move(t))}; }
// The dtype a float-only op computes in for an input of `dtype`: itself if floating,
// otherwise the default float dtype.
DType FloatResultType(DType dtype);
// A fresh tensor of `sizes` and `dtype` filled from a row-major vector.
Tensor MakeTensor(const std::vector<int64_t>& sizes, DType dtype, const std::vector<double>& v);

}  // namespace kiln::interp

namespace kiln::interp {

// Elementwise maps over inputs broadcast together; results are fresh contiguous tensors
// of `out_dtype`. `f` receives the inputs' values at one position: doubles for MapDoubles,
// exact int64 for MapInts.
// Reads each input at one broadcast position as a `T` (double or int64_t), calls `f` on them
// and writes the result; MapDoubles and MapInts are its two forms.
template <typename T, typename F>
Tensor MapValues(absl::Span<const Tensor> ins, DType out_dtype, F f) {
  std::vector<std::vector<int64_t>> shapes;
  for (const Tensor& t : ins) shapes.push_back(t.sizes());
  const std::vector<int64_t> sizes = BroadcastShapes(shapes);
  std::vector<std::vector<int64_t>> idx;
  for (const Tensor& t : ins) idx.push_back(ExpandTo(t, sizes).ElementIndices());
  Tensor out = Tensor::Zeros(sizes, out_dtype);
  const int64_t n = out.numel();
  std::vector<T> vals(ins.size());
  for (int64_t i = 0; i < n; ++i) {
    for (size_t k = 0; k < ins.size(); ++k) {
      const int64_t at = idx[k][static_cast<size_t>(i)];
      if constexpr (std::is_same_v<T, double>) {
        vals[k] = ins[k].ReadDouble(at);
      } else {
        vals[k] = ins[k].ReadInt(at);
      }
    }
    if constexpr (std::is_same_v<T, double>) {
      out.WriteDouble(i, f(vals.data()));
    } else {
      out.WriteInt(i, f(vals.data()));
    }
  }
  return out;
}

template <typename F>
Tensor MapDoubles(absl::Span<const Tensor> ins, DType out_dtype, F f) {
  return MapValues<double>(ins, out_dtype, std::move(f));
}

template <typename F>
Tensor MapInts(absl::Span<const Tensor> ins, DType out_dtype, F f) {
  return MapValues<int64_t>(ins, out_dtype, std::move(f));
}

// An operand of a binary op: a tensor or a Python number.
struct Operand {
  Tensor tensor;
  std::optional<ScalarArg> scalar;
  // The operand as a tensor: a number becomes a 0-d float64/int64 tensor holding it exactly.
  Tensor AsTensor() const;
};
Operand GetOperand(const OpCall& call, int pos, absl::string_view name);
// torch.result_type over operands.
DType ResultType(absl::Span<const Operand> operands);

// Strides PyTorch gives a fresh tensor of `sizes` for a memory format (contiguous for
// MEMORY_FORMAT_CONTIGUOUS / unspecified, NHWC order for channels_last on rank 4, NDHWC
// for channels_last_3d on rank 5).
std::vector<int64_t> StridesForFormat(const std::vector<int64_t>& sizes, v1::MemoryFormat format);

}  // namespace kiln::interp

namespace kiln::interp {

// Views other families build on (ops_views.cc).
Tensor SliceView(const Tensor& self, int64_t dim, std::optional<int64_t> start,
                 std::optional<int64_t> end, int64_t step);
Tensor SelectView(const Tensor& self, int64_t dim, int64_t index);
Tensor ReshapeTensor(const Tensor& self, const std::vector<int64_t>& size);
std::vector<Tensor> SplitWithSizes(const Tensor& self, const std::vector<int64_t>& sizes,
                                   int64_t dim);

// A row-major buffer seen as lanes along one dim: element k of lane (o, i) sits at
// (o * n + k) * inner + i.
struct Lanes {
  int64_t outer = 1;
  int64_t n = 1;
  int64_t inner = 1;
  Lanes(const std::vector<int64_t>& sizes, int64_t dim);
  int64_t count() const { return outer * inner; }
  // Position of element k of lane `lane` (lanes numbered o * inner + i).
  int64_t At(int64_t lane, int64_t k) const {
    return ((lane / inner) * n + k) * inner + lane % inner;
  }
};

}  // namespace kiln::interp
