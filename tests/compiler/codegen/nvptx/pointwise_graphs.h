#pragma once

// Small pointwise graphs for the tests of the sm_90 backend's runs (launch.h VectorLanes,
// kernel_abi.h): what the GPU bandwidth cases compute (an fp32 add, GELU over bf16, bf16
// widened to fp32 and scaled), a broadcast along the innermost dimension, odd sizes, a
// transposed input and symbolic sizes. Every input and output lives on cuda:0.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kiln/v1/graph.pb.h"

namespace kiln::testing {

// One dimension's size or stride: a constant, or an expression over the graph's symbols.
struct Dim {
  Dim(int64_t v) : value(v) {}     // NOLINT(google-explicit-constructor)
  Dim(const char* e) : expr(e) {}  // NOLINT(google-explicit-constructor)
  int64_t value = 0;
  std::string expr;
};

// A tensor's metadata: contiguous unless strides are given.
struct TensorDesc {
  TensorDesc(std::vector<Dim> sizes_in, v1::DType dtype_in = v1::DTYPE_FLOAT32,
             std::vector<Dim> strides_in = {})
      : sizes(std::move(sizes_in)), dtype(dtype_in), strides(std::move(strides_in)) {}
  std::vector<Dim> sizes;
  v1::DType dtype;
  std::vector<Dim> strides;
};

// Builds a graph node by node; names are returned for later references.
class GraphBuilder {
 public:
  // A symbol with its hint.
  void Symbol(const std::string& name, int64_t hint);
  std::string Input(const TensorDesc& t);
  // A node of `target` over `args` (refs by name through Ref) returning `out`.
  std::string Node(const std::string& target, std::vector<v1::Argument> args, const TensorDesc& out,
                   std::vector<v1::NamedArgument> kwargs = {});
  // The graph returning `outputs`.
  v1::Graph Finish(const std::vector<std::string>& outputs);

 private:
  v1::Graph graph_;
  int names_ = 0;
};

v1::Argument Ref(const std::string& name);
v1::Argument Float(double value);

// x0 + x1, both of `sizes` and fp32.
v1::Graph AddGraph(const std::vector<Dim>& sizes);
// GELU (erf) of a bf16 tensor of `n` elements.
v1::Graph GeluBf16Graph(int64_t n);
// A bf16 tensor of `n` elements widened to fp32 and multiplied by 2 (a.float() * 2.0).
v1::Graph ScaleBf16ToF32Graph(int64_t n);
// x[rows, cols] + b[rows, 1], fp32: b broadcast along the innermost dimension.
v1::Graph RowBroadcastAddGraph(int64_t rows, int64_t cols);
// x + y over [rows, cols] fp32, x laid out transposed (strides [1, rows]).
v1::Graph TransposedAddGraph(int64_t rows, int64_t cols);

}  // namespace kiln::testing
