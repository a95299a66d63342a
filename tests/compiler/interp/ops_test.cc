// Ops on small hand-computed cases: values, broadcasting, type promotion, non-contiguous
// and offset inputs, sizes 0 and 1, default and keyword arguments.

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "absl/strings/match.h"
#include "compiler/interp/op_registry.h"
#include "proto/ops/registry.h"
#include "tests/compiler/interp/test_util.h"
#include "tests/compiler/training_ops.h"

namespace kiln::interp {
namespace {

using testing::I;
using testing::Is;
using testing::Near;
using testing::Run1;
using testing::RunAll;
using testing::T;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Pointwise, ArithmeticBroadcastsAndPromotes) {
  const Tensor a = T({2, 1}, {1, 2}, v1::DTYPE_FLOAT32);
  const Tensor b = T({3}, {10, 20, 30}, v1::DTYPE_FLOAT32);
  const Tensor s = Run1("aten.add.Tensor", {a, b}, {{"alpha", 2}});
  EXPECT_EQ(s.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(s, {2, 3}, {21, 41, 61, 22, 42, 62}));
  EXPECT_TRUE(Is(Run1("aten.sub.Tensor", {b, 1.5}), {3}, {8.5, 18.5, 28.5}));
  // int tensor + float scalar -> float32; int tensor * int scalar stays int64.
  const Tensor ints = I({3}, {1, 2, 3});
  EXPECT_EQ(Run1("aten.mul.Tensor", {ints, 0.5}).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(Run1("aten.mul.Scalar", {ints, 3}).ToInts(), (std::vector<int64_t>{3, 6, 9}));
  // A zero-dim float64 tensor does not widen float32.
  EXPECT_EQ(Run1("aten.mul.Tensor", {b, T({}, {2.0})}).dtype(), v1::DTYPE_FLOAT32);
  // Results are rounded to float32.
  EXPECT_EQ(Run1("aten.div.Tensor", {T({1}, {1}, v1::DTYPE_FLOAT32), 3.0}).Item(),
            static_cast<double>(1.0f / 3.0f));
  EXPECT_FALSE(RunOp("aten.add.Tensor", {T({2}, {1, 2}), T({3}, {1, 2, 3})}).ok());
  EXPECT_FALSE(
      RunOp("aten.sub.Tensor", {I({1}, {1}, v1::DTYPE_BOOL), I({1}, {1}, v1::DTYPE_BOOL)}).ok());
}

TEST(Pointwise, DivisionModesAndRemainder) {
  const Tensor a = T({4}, {7, -7, 7, -7});
  const Tensor b = T({4}, {2, 2, -2, -2});
  EXPECT_TRUE(Is(Run1("aten.div.Tensor", {a, b}), {4}, {3.5, -3.5, -3.5, 3.5}));
  EXPECT_TRUE(
      Is(Run1("aten.div.Tensor_mode", {a, b}, {{"rounding_mode", "trunc"}}), {4}, {3, -3, -3, 3}));
  EXPECT_TRUE(
      Is(Run1("aten.div.Tensor_mode", {a, b}, {{"rounding_mode", "floor"}}), {4}, {3, -4, -4, 3}));
  EXPECT_TRUE(Is(Run1("aten.remainder.Tensor", {a, b}), {4}, {1, 1, -1, -1}));
  const Tensor ia = I({4}, {7, -7, 7, -7});
  const Tensor ib = I({4}, {2, 2, -2, -2});
  EXPECT_EQ(Run1("aten.div.Tensor", {ia, ib}).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(Run1("aten.div.Tensor_mode", {ia, ib}, {{"rounding_mode", "floor"}}).ToInts(),
            (std::vector<int64_t>{3, -4, -4, 3}));
  EXPECT_EQ(Run1("aten.remainder.Scalar", {ia, 3}).ToInts(), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_FALSE(RunOp("aten.div.Tensor_mode", {ia, I({1}, {0})}, {{"rounding_mode", "trunc"}}).ok());
  EXPECT_TRUE(Is(Run1("aten.div.Scalar", {T({2}, {1, -1}), 0.0}), {2}, {kInf, -kInf}));
}

TEST(Pointwise, UnaryMath) {
  const Tensor x = T({4}, {-2, -0.5, 0.5, 4});
  EXPECT_TRUE(Is(Run1("aten.abs.default", {x}), {4}, {2, 0.5, 0.5, 4}));
  EXPECT_TRUE(Is(Run1("aten.neg.default", {x}), {4}, {2, 0.5, -0.5, -4}));
  EXPECT_TRUE(Is(Run1("aten.relu.default", {x}), {4}, {0, 0, 0.5, 4}));
  EXPECT_TRUE(Is(Run1("aten.sign.default", {x}), {4}, {-1, -1, 1, 1}));
  EXPECT_TRUE(Is(Run1("aten.floor.default", {x}), {4}, {-2, -1, 0, 4}));
  EXPECT_TRUE(Is(Run1("aten.ceil.default", {x}), {4}, {-2, -0, 1, 4}));
  EXPECT_TRUE(Is(Run1("aten.round.default", {T({4}, {0.5, 1.5, 2.5, -0.5})}), {4}, {0, 2, 2, -0}));
  EXPECT_TRUE(Is(Run1("aten.reciprocal.default", {x}), {4}, {-0.5, -2, 2, 0.25}));
  EXPECT_TRUE(Is(Run1("aten.sqrt.default", {T({2}, {4, 2})}), {2}, {2, std::sqrt(2.0)}));
  EXPECT_TRUE(Is(Run1("aten.rsqrt.default", {T({1}, {4})}), {1}, {0.5}));
  EXPECT_TRUE(Is(Run1("aten.exp.default", {T({1}, {1})}), {1}, {std::exp(1.0)}));
  EXPECT_TRUE(Is(Run1("aten.log.default", {T({2}, {1, 0})}), {2}, {0, -kInf}));
  EXPECT_TRUE(Is(Run1("aten.sin.default", {T({1}, {1})}), {1}, {std::sin(1.0)}));
  EXPECT_TRUE(Is(Run1("aten.cos.default", {T({1}, {1})}), {1}, {std::cos(1.0)}));
  EXPECT_TRUE(Is(Run1("aten.tanh.default", {T({1}, {1})}), {1}, {std::tanh(1.0)}));
  EXPECT_TRUE(Is(Run1("aten.sigmoid.default", {T({1}, {0})}), {1}, {0.5}));
  EXPECT_TRUE(Is(Run1("aten.erf.default", {T({1}, {0.5})}), {1}, {std::erf(0.5)}));
  EXPECT_TRUE(Is(Run1("aten.silu.default", {T({1}, {1})}), {1}, {1 / (1 + std::exp(-1.0))}));
  EXPECT_TRUE(Is(Run1("aten.gelu.default", {T({1}, {1})}), {1},
                 {0.5 * (1 + std::erf(1 / std::sqrt(2.0)))}));
  const double k = std::sqrt(2 / M_PI);
  EXPECT_TRUE(Is(Run1("aten.gelu.default", {T({1}, {1})}, {{"approximate", "tanh"}}), {1},
                 {0.5 * (1 + std::tanh(k * 1.044715))}));
  // Integer inputs of float-only ops promote to float32.
  EXPECT_EQ(Run1("aten.sin.default", {I({1}, {0})}).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(Run1("aten.abs.default", {I({1}, {-3})}).ToInts(), (std::vector<int64_t>{3}));
  EXPECT_EQ(Run1("aten.bitwise_not.default", {I({2}, {0, 5})}).ToInts(),
            (std::vector<int64_t>{-1, -6}));
  EXPECT_EQ(Run1("aten.logical_not.default", {T({2}, {0, 2})}).ToInts(),
            (std::vector<int64_t>{1, 0}));
}

TEST(Pointwise, ComparisonsLogicalAndSelection) {
  const Tensor a = T({3}, {1, 2, kNaN});
  const Tensor b = T({3}, {2, 2, 2});
  EXPECT_EQ(Run1("aten.lt.Tensor", {a, b}).ToInts(), (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(Run1("aten.le.Tensor", {a, b}).ToInts(), (std::vector<int64_t>{1, 1, 0}));
  EXPECT_EQ(Run1("aten.ge.Scalar", {a, 2}).ToInts(), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(Run1("aten.gt.Scalar", {a, 1.5}).ToInts(), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(Run1("aten.eq.Tensor", {a, b}).ToInts(), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(Run1("aten.ne.Scalar", {a, 1}).ToInts(), (std::vector<int64_t>{0, 1, 1}));
  EXPECT_EQ(Run1("aten.eq.Tensor", {a, b}).dtype(), v1::DTYPE_BOOL);
  // float32 operands compare after rounding: 0.1f != 0.1 as doubles, but the scalar is
  // rounded to float32 too.
  EXPECT_EQ(Run1("aten.eq.Scalar", {T({1}, {0.1}, v1::DTYPE_FLOAT32), 0.1}).ToInts(),
            (std::vector<int64_t>{1}));
  const Tensor m = I({3}, {1, 0, 1}, v1::DTYPE_BOOL);
  EXPECT_EQ(Run1("aten.logical_and.default", {m, T({3}, {1, 1, 0})}).ToInts(),
            (std::vector<int64_t>{1, 0, 0}));
  EXPECT_EQ(Run1("aten.logical_or.default", {m, T({3}, {0, 0, 0})}).ToInts(),
            (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(Run1("aten.bitwise_and.Tensor", {I({2}, {6, 3}), I({2}, {3, 5})}).ToInts(),
            (std::vector<int64_t>{2, 1}));
  EXPECT_TRUE(Is(Run1("aten.where.self", {m, T({3}, {1, 2, 3}), T({1}, {-1})}), {3}, {1, -1, 3}));
  EXPECT_TRUE(Is(Run1("aten.where.ScalarOther", {m, T({3}, {1, 2, 3}), 0.5}), {3}, {1, 0.5, 3}));
  EXPECT_TRUE(Is(Run1("aten.maximum.default", {a, b}), {3}, {2, 2, kNaN}));
  EXPECT_TRUE(Is(Run1("aten.minimum.default", {a, b}), {3}, {1, 2, kNaN}));
  EXPECT_TRUE(Is(Run1("aten.clamp.default", {a, 1.5, 1.8}), {3}, {1.5, 1.8, kNaN}));
  EXPECT_TRUE(Is(Run1("aten.clamp.default", {a}, {{"max", 1.5}}), {3}, {1, 1.5, kNaN}));
  EXPECT_TRUE(Is(Run1("aten.clamp_min.default", {a, 1.5}), {3}, {1.5, 2, kNaN}));
  EXPECT_TRUE(Is(Run1("aten.masked_fill.Scalar", {T({3}, {1, 2, 3}), m, -5}), {3}, {-5, 2, -5}));
}

TEST(Pointwise, PowAndCasts) {
  EXPECT_TRUE(Is(Run1("aten.pow.Tensor_Scalar", {T({3}, {2, -3, 0.5}), 2}), {3}, {4, 9, 0.25}));
  EXPECT_TRUE(Is(Run1("aten.pow.Tensor_Scalar", {T({1}, {4}), 0.5}), {1}, {2}));
  EXPECT_TRUE(Is(Run1("aten.pow.Tensor_Tensor", {T({2}, {2, 3}), T({2}, {3, 2})}), {2}, {8, 9}));
  EXPECT_EQ(Run1("aten.pow.Tensor_Scalar", {I({2}, {3, -2}), 3}).ToInts(),
            (std::vector<int64_t>{27, -8}));
  EXPECT_FALSE(RunOp("aten.pow.Tensor_Scalar", {I({1}, {2}), -1}).ok());
  const Tensor bf = Run1("aten._to_copy.default", {T({2}, {1.00390625, 3.14159})},
                         {{"dtype", v1::DTYPE_BFLOAT16}});
  EXPECT_EQ(bf.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_TRUE(Is(bf, {2}, {1.0, 3.140625}));
  EXPECT_EQ(Run1("aten._to_copy.default", {T({3}, {-1.7, 2.9, 0.0})}, {{"dtype", v1::DTYPE_INT32}})
                .ToInts(),
            (std::vector<int64_t>{-1, 2, 0}));
  EXPECT_EQ(
      Run1("aten._to_copy.default", {T({2}, {0.0, -0.2})}, {{"dtype", v1::DTYPE_BOOL}}).ToInts(),
      (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(Is(Run1("aten.fill.Scalar", {T({2}, {1, 2}), 7}), {2}, {7, 7}));
}

TEST(Pointwise, LerpBroadcastsAndTakesScalarOrTensorWeights) {
  const Tensor self = T({3}, {0, 10, -2});
  const Tensor end = T({3}, {10, 20, 2});
  EXPECT_TRUE(Is(Run1("aten.lerp.Scalar", {self, end, 0.25}), {3}, {2.5, 12.5, -1}));
  EXPECT_TRUE(Is(Run1("aten.lerp.Scalar", {self, end, 0.75}), {3}, {7.5, 17.5, 1}));
  EXPECT_TRUE(Is(Run1("aten.lerp.Scalar", {self, end, 1}), {3}, {10, 20, 2}));
  // All three broadcast: [2, 1], [1, 3] and [3] give [2, 3].
  EXPECT_TRUE(Is(
      Run1("aten.lerp.Tensor", {T({2, 1}, {0, 10}), T({1, 3}, {4, 8, 12}), T({3}, {0.5, 0.25, 1})}),
      {2, 3}, {2, 2, 12, 7, 9.5, 12}));
  const Tensor f = T({2}, {0, 1}, v1::DTYPE_FLOAT32);
  EXPECT_EQ(Run1("aten.lerp.Scalar", {f, f, 0.5}).dtype(), v1::DTYPE_FLOAT32);
  // A 0-d weight may have another dtype; a weight with dims may not, nor may end.
  EXPECT_TRUE(Is(Run1("aten.lerp.Tensor", {f, T({2}, {2, 3}, v1::DTYPE_FLOAT32), T({}, {0.5})}),
                 {2}, {1, 2}));
  EXPECT_FALSE(RunOp("aten.lerp.Tensor", {f, f, T({2}, {0.5, 0.5})}).ok());
  EXPECT_FALSE(RunOp("aten.lerp.Scalar", {f, T({2}, {0, 1}), 0.5}).ok());
  EXPECT_FALSE(RunOp("aten.lerp.Scalar", {I({2}, {0, 1}), I({2}, {2, 3}), 0.5}).ok());
}

TEST(Pointwise, AddcmulAndAddcdivPromoteAndBroadcast) {
  EXPECT_TRUE(Is(Run1("aten.addcmul.default", {T({2}, {1, 2}), T({2, 1}, {3, 4}), T({2}, {5, 6})},
                      {{"value", 0.5}}),
                 {2, 2}, {8.5, 11, 11, 14}));
  EXPECT_TRUE(Is(Run1("aten.addcmul.default", {T({1}, {1}), T({1}, {2}), T({1}, {3})}), {1}, {7}));
  const Tensor mixed =
      Run1("aten.addcmul.default",
           {I({2}, {1, 2}), T({2}, {0.5, 1.5}, v1::DTYPE_FLOAT32), I({2}, {2, 2})});
  EXPECT_EQ(mixed.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(mixed, {2}, {2, 5}));
  const Tensor ints = Run1("aten.addcmul.default", {I({2}, {1, 2}), I({2}, {3, 4}), I({2}, {5, 6})},
                           {{"value", 2}});
  EXPECT_EQ(ints.dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(ints.ToInts(), (std::vector<int64_t>{31, 50}));
  const Tensor b = I({1}, {1}, v1::DTYPE_BOOL);
  EXPECT_FALSE(RunOp("aten.addcmul.default", {b, b, b}).ok());
  EXPECT_TRUE(Is(Run1("aten.addcdiv.default", {T({2}, {1, 2}), T({2}, {3, 4}), T({2, 1}, {2, 4})},
                      {{"value", -1}}),
                 {2, 2}, {-0.5, 0, 0.25, 1}));
  EXPECT_EQ(Run1("aten.addcdiv.default", {I({1}, {1}), T({1}, {1}, v1::DTYPE_FLOAT32), I({1}, {2})})
                .dtype(),
            v1::DTYPE_FLOAT32);
  EXPECT_FALSE(RunOp("aten.addcdiv.default", {T({1}, {1}), I({1}, {1}), I({1}, {2})}).ok());
}

TEST(Pointwise, FloatActivations) {
  const Tensor x = T({4}, {-4, -1.5, 0, 4});
  EXPECT_TRUE(Is(Run1("aten.hardsigmoid.default", {x}), {4}, {0, 0.25, 0.5, 1}));
  EXPECT_TRUE(Is(Run1("aten.hardswish.default", {x}), {4}, {0, -0.375, 0, 4}));
  EXPECT_TRUE(
      Is(Run1("aten.frac.default", {T({4}, {1.5, -1.5, 2, -0.25})}), {4}, {0.5, -0.5, 0, -0.25}));
  EXPECT_TRUE(Is(Run1("aten.mish.default", {T({2}, {0, 1})}), {2},
                 {0, std::tanh(std::log(1 + std::exp(1.0)))}));
  EXPECT_TRUE(Is(Run1("aten.lgamma.default", {T({3}, {1, 3, 0.5})}), {3},
                 {0, std::log(2.0), 0.5 * std::log(M_PI)}));
  EXPECT_TRUE(Is(Run1("aten.elu.default", {T({3}, {-1, 0, 2})}), {3}, {std::exp(-1.0) - 1, 0, 2}));
  EXPECT_TRUE(Is(Run1("aten.elu.default", {T({3}, {-1, 0, 2}), 2, 3, 0.5}), {3},
                 {6 * (std::exp(-0.5) - 1), 0, 6}));
  EXPECT_TRUE(Is(Run1("aten.softplus.default", {T({3}, {0, 1, 30})}), {3},
                 {std::log(2.0), std::log(1 + std::exp(1.0)), 30}));
  // beta 2, threshold 1: 2 * 1 > 1 is linear, 2 * 0.25 is not.
  EXPECT_TRUE(Is(Run1("aten.softplus.default", {T({3}, {0, 0.25, 1}), 2, 1}), {3},
                 {std::log(2.0) / 2, std::log(1 + std::exp(0.5)) / 2, 1}));
  const double e = std::exp(1.0);
  EXPECT_TRUE(
      Is(Run1("aten.softplus_backward.default", {T({3}, {1, 2, 3}), T({3}, {0, 1, 30}), 1, 20}),
         {3}, {0.5, 2 * e / (e + 1), 3}));
  // lgamma promotes integers like other float math; the others are not defined for them.
  EXPECT_EQ(Run1("aten.lgamma.default", {I({1}, {3})}).dtype(), v1::DTYPE_FLOAT32);
  for (const char* op : {"aten.frac.default", "aten.hardsigmoid.default", "aten.hardswish.default",
                         "aten.mish.default", "aten.elu.default", "aten.softplus.default"}) {
    EXPECT_FALSE(RunOp(op, {I({1}, {1})}).ok()) << op;
  }
}

TEST(Pointwise, HardActivationBackwards) {
  // PyTorch's CUDA kernels: hardswish' is 0 up to -3, x / 3 + 1/2 below 3, then 1;
  // hardsigmoid' is 1/6 strictly between -3 and 3.
  const Tensor x = T({7}, {-4, -3, -1.5, 0, 2.9, 3, 4}, v1::DTYPE_FLOAT32);
  const Tensor g = T({7}, {6, 6, 6, 6, 6, 6, 6}, v1::DTYPE_FLOAT32);
  const Tensor hs = Run1("aten.hardswish_backward.default", {g, x});
  EXPECT_EQ(hs.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(hs, {7}, {0, 0, 0, 3, 6 * static_cast<double>(2.9f / 3 + 0.5f), 6, 6}, 1e-6));
  EXPECT_TRUE(Is(Run1("aten.hardsigmoid_backward.default", {g, x}), {7}, {0, 0, 1, 1, 1, 0, 0}));
  // A grad of another dtype promotes; the grad broadcasts.
  EXPECT_EQ(Run1("aten.hardswish_backward.default", {T({1}, {1}), x}).dtype(), v1::DTYPE_FLOAT64);
}

TEST(Pointwise, ConvertElementTypeCastsAndKeepsTheLayout) {
  const Tensor t = Run1("aten.t.default", {T({2, 2}, {1.00390625, 2.5, -3.7, 4})});
  const Tensor bf = Run1("prims.convert_element_type.default", {t, v1::DTYPE_BFLOAT16});
  EXPECT_EQ(bf.dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(bf.strides(), t.strides());
  EXPECT_TRUE(Is(bf, {2, 2}, {1, -3.703125, 2.5, 4}));
  EXPECT_EQ(Run1("prims.convert_element_type.default", {t, v1::DTYPE_INT32}).ToInts(),
            (std::vector<int64_t>{1, -3, 2, 4}));
  EXPECT_FALSE(RunOp("prims.convert_element_type.default", {t}).ok());
}

TEST(Pointwise, NonContiguousOffsetAndEmptyInputs) {
  // A transposed, offset view of a larger storage.
  const Tensor base = T({13}, {99, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  const Tensor v = base.AsStrided({3, 4}, {1, 3}, 1);  // column-major 4x3 starting at 1
  EXPECT_TRUE(
      Is(Run1("aten.mul.Tensor", {v, 2}), {3, 4}, {0, 6, 12, 18, 2, 8, 14, 20, 4, 10, 16, 22}));
  const Tensor e = Tensor::Zeros({0, 3}, v1::DTYPE_FLOAT32);
  EXPECT_EQ(Run1("aten.add.Tensor", {e, T({3}, {1, 2, 3})}).sizes(), (std::vector<int64_t>{0, 3}));
  EXPECT_TRUE(Is(Run1("aten.sum.default", {e}), {}, {0}));
  EXPECT_TRUE(Is(Run1("aten.add.Tensor", {T({}, {1}), T({1, 1}, {2})}), {1, 1}, {3}));
}

// Results of a foreach op as tensors.
std::vector<Tensor> Foreach(const std::string& op, std::vector<Arg> args,
                            std::vector<std::pair<std::string, Arg>> kwargs = {}) {
  std::vector<Tensor> out;
  for (const Value& v : RunAll(op, std::move(args), std::move(kwargs))) {
    out.push_back(std::get<Tensor>(v));
  }
  return out;
}

TEST(Foreach, BinaryOpsTakeAScalarAListScalarsOrATensor) {
  const Tensor a = T({2}, {1, 2}, v1::DTYPE_FLOAT32);
  const Tensor b = T({}, {4}, v1::DTYPE_FLOAT32);
  const Arg self = Arg::Tensors({a, b});
  std::vector<Tensor> r = Foreach("aten._foreach_add.Scalar", {self, 1});
  ASSERT_EQ(r.size(), 2u);
  EXPECT_TRUE(Is(r[0], {2}, {2, 3}));
  EXPECT_TRUE(Is(r[1], {}, {5}));
  EXPECT_FALSE(r[0].SharesStorageWith(a));
  r = Foreach("aten._foreach_add.List", {self, Arg::Tensors({T({2}, {10, 20}), T({}, {1})})},
              {{"alpha", -0.5}});
  EXPECT_TRUE(Is(r[0], {2}, {-4, -8}));
  EXPECT_TRUE(Is(r[1], {}, {3.5}));
  r = Foreach("aten._foreach_add.ScalarList", {self, Arg(Arg::List{Arg(1), Arg(2.5)})});
  EXPECT_TRUE(Is(r[0], {2}, {2, 3}));
  EXPECT_TRUE(Is(r[1], {}, {6.5}));
  r = Foreach("aten._foreach_sub.Scalar", {self, 1});
  EXPECT_TRUE(Is(r[1], {}, {3}));
  r = Foreach("aten._foreach_sub.List", {self, self});
  EXPECT_TRUE(Is(r[0], {2}, {0, 0}));
  r = Foreach("aten._foreach_mul.Scalar", {self, 0.5});
  EXPECT_TRUE(Is(r[0], {2}, {0.5, 1}));
  EXPECT_EQ(r[0].dtype(), v1::DTYPE_FLOAT32);
  // A 0-d tensor multiplies every element, with the dtype rules of mul.
  r = Foreach("aten._foreach_mul.Tensor", {self, T({}, {3})});
  EXPECT_TRUE(Is(r[0], {2}, {3, 6}));
  EXPECT_EQ(r[0].dtype(), v1::DTYPE_FLOAT32);
  r = Foreach("aten._foreach_div.Scalar", {self, 0.001});
  EXPECT_TRUE(Is(r[1], {}, {4000}));
  r = Foreach("aten._foreach_div.List", {self, Arg::Tensors({T({2}, {2, 8}), T({}, {-8})})});
  EXPECT_TRUE(Is(r[0], {2}, {0.5, 0.25}));
  EXPECT_TRUE(Is(r[1], {}, {-0.5}));
  // Integer tensors with a float scalar promote, as the plain op does.
  r = Foreach("aten._foreach_mul.Scalar", {Arg::Tensors({I({2}, {1, 3})}), 0.5});
  EXPECT_EQ(r[0].dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(r[0], {2}, {0.5, 1.5}));
  // maximum and minimum are clamp_min and clamp_max; NaN propagates.
  r = Foreach("aten._foreach_maximum.List",
              {Arg::Tensors({T({3}, {1, 5, kNaN})}), Arg::Tensors({T({3}, {2, 2, 2})})});
  EXPECT_TRUE(Is(r[0], {3}, {2, 5, kNaN}));
  r = Foreach("aten._foreach_minimum.Scalar", {Arg::Tensors({T({3}, {1, 5, kNaN})}), 2});
  EXPECT_TRUE(Is(r[0], {3}, {1, 2, kNaN}));
  r = Foreach("aten._foreach_clamp_min.ScalarList", {self, Arg(Arg::List{Arg(1.5), Arg(5)})});
  EXPECT_TRUE(Is(r[0], {2}, {1.5, 2}));
  EXPECT_TRUE(Is(r[1], {}, {5}));
  // Lists must have one element per tensor.
  EXPECT_FALSE(RunOp("aten._foreach_add.List", {self, Arg::Tensors({a})}).ok());
  EXPECT_FALSE(RunOp("aten._foreach_add.ScalarList", {self, Arg(Arg::List{Arg(1)})}).ok());
}

TEST(Foreach, UnaryPowTernaryAndCopyOps) {
  const Tensor a = T({2}, {4, 0.25}, v1::DTYPE_FLOAT32);
  const Tensor b = T({1}, {-2}, v1::DTYPE_FLOAT32);
  const Arg self = Arg::Tensors({a, b});
  std::vector<Tensor> r = Foreach("aten._foreach_sqrt.default", {Arg::Tensors({a})});
  EXPECT_TRUE(Is(r[0], {2}, {2, 0.5}));
  r = Foreach("aten._foreach_neg.default", {self});
  EXPECT_TRUE(Is(r[1], {1}, {2}));
  r = Foreach("aten._foreach_reciprocal.default", {self});
  EXPECT_TRUE(Is(r[0], {2}, {0.25, 4}));
  EXPECT_TRUE(Is(r[1], {1}, {-0.5}));
  // beta ** step, as Adam's bias correction computes it.
  r = Foreach("aten._foreach_pow.ScalarAndTensor",
              {0.5, Arg::Tensors({T({}, {3}, v1::DTYPE_FLOAT32), T({}, {0}, v1::DTYPE_FLOAT32)})});
  EXPECT_TRUE(Is(r[0], {}, {0.125}));
  EXPECT_TRUE(Is(r[1], {}, {1}));
  EXPECT_EQ(r[0].dtype(), v1::DTYPE_FLOAT32);
  r = Foreach("aten._foreach_pow.Scalar", {self, 2});
  EXPECT_TRUE(Is(r[0], {2}, {16, 0.0625}));
  r = Foreach("aten._foreach_pow.List", {self, Arg::Tensors({T({2}, {0.5, 1}), T({1}, {3})})});
  EXPECT_TRUE(Is(r[0], {2}, {2, 0.25}));
  EXPECT_TRUE(Is(r[1], {1}, {-8}));
  // addcmul / addcdiv: value shared, one per tensor, or from a 1-d tensor of scalars.
  const Arg t1 = Arg::Tensors({T({2}, {1, 2}), T({1}, {3})});
  const Arg t2 = Arg::Tensors({T({2}, {2, 4}), T({1}, {6})});
  r = Foreach("aten._foreach_addcmul.Scalar", {self, t1, t2, 0.5});
  EXPECT_TRUE(Is(r[0], {2}, {5, 4.25}));
  EXPECT_TRUE(Is(r[1], {1}, {7}));
  r = Foreach("aten._foreach_addcdiv.Scalar", {self, t1, t2});
  EXPECT_TRUE(Is(r[0], {2}, {4.5, 0.75}));
  EXPECT_TRUE(Is(r[1], {1}, {-1.5}));
  r = Foreach("aten._foreach_addcdiv.ScalarList", {self, t1, t2, Arg(Arg::List{Arg(2), Arg(-2)})});
  EXPECT_TRUE(Is(r[0], {2}, {5, 1.25}));
  EXPECT_TRUE(Is(r[1], {1}, {-3}));
  r = Foreach("aten._foreach_addcmul.Tensor", {self, t1, t2, T({2}, {1, 0})});
  EXPECT_TRUE(Is(r[0], {2}, {6, 8.25}));
  EXPECT_TRUE(Is(r[1], {1}, {-2}));
  EXPECT_FALSE(RunOp("aten._foreach_addcmul.Tensor", {self, t1, t2, T({3}, {1, 0, 0})}).ok());
  // lerp with a shared weight, one weight per tensor, or weight tensors.
  const Arg ends =
      Arg::Tensors({T({2}, {8, 1.25}, v1::DTYPE_FLOAT32), T({1}, {2}, v1::DTYPE_FLOAT32)});
  r = Foreach("aten._foreach_lerp.Scalar", {self, ends, 0.25});
  EXPECT_TRUE(Is(r[0], {2}, {5, 0.5}));
  EXPECT_TRUE(Is(r[1], {1}, {-1}));
  r = Foreach("aten._foreach_lerp.ScalarList", {self, ends, Arg(Arg::List{Arg(0.5), Arg(1)})});
  EXPECT_TRUE(Is(r[0], {2}, {6, 0.75}));
  EXPECT_TRUE(Is(r[1], {1}, {2}));
  r = Foreach(
      "aten._foreach_lerp.List",
      {self, ends,
       Arg::Tensors({T({2}, {0, 1}, v1::DTYPE_FLOAT32), T({1}, {0.5}, v1::DTYPE_FLOAT32)})});
  EXPECT_TRUE(Is(r[0], {2}, {4, 1.25}));
  EXPECT_TRUE(Is(r[1], {1}, {0}));
  // copy: fresh tensors of self's dtype holding src's values.
  r = Foreach("aten._foreach_copy.default", {self, Arg::Tensors({I({2}, {7, 8}), T({1}, {9})})});
  EXPECT_EQ(r[0].dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(r[0], {2}, {7, 8}));
  EXPECT_FALSE(r[1].SharesStorageWith(b));
  r = Foreach("aten._foreach_norm.Scalar", {Arg::Tensors({T({2}, {3, 4}), T({1}, {-2})}), 1});
  EXPECT_TRUE(Is(r[0], {}, {7}));
  EXPECT_TRUE(Is(r[1], {}, {2}));
}

// One element of each list through the foreach op is the plain op on that element.
TEST(Foreach, AgreesWithThePlainOpPerElement) {
  const std::vector<Tensor> x = {T({2, 3}, {1, -2, 3, 0.5, 4, -1}, v1::DTYPE_FLOAT32),
                                 T({}, {7}, v1::DTYPE_FLOAT32),
                                 T({4}, {2, 3, 5, 7}, v1::DTYPE_BFLOAT16)};
  const std::vector<Tensor> y = {T({2, 3}, {2, 2, 2, 3, 3, 3}, v1::DTYPE_FLOAT32),
                                 T({}, {0.5}, v1::DTYPE_FLOAT32),
                                 T({4}, {1, 0.5, 0.25, 4}, v1::DTYPE_BFLOAT16)};
  struct Case {
    std::string foreach_op;
    std::string op;
    bool two_lists;
  };
  for (const Case& c :
       std::vector<Case>{{"aten._foreach_add.List", "aten.add.Tensor", true},
                         {"aten._foreach_mul.List", "aten.mul.Tensor", true},
                         {"aten._foreach_div.List", "aten.div.Tensor", true},
                         {"aten._foreach_maximum.List", "aten.maximum.default", true},
                         {"aten._foreach_pow.List", "aten.pow.Tensor_Tensor", true},
                         {"aten._foreach_exp.default", "aten.exp.default", false},
                         {"aten._foreach_sqrt.default", "aten.sqrt.default", false},
                         {"aten._foreach_abs.default", "aten.abs.default", false}}) {
    SCOPED_TRACE(c.foreach_op);
    std::vector<Arg> args = {Arg::Tensors(x)};
    if (c.two_lists) args.push_back(Arg::Tensors(y));
    const std::vector<Tensor> r = Foreach(c.foreach_op, args);
    ASSERT_EQ(r.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<Arg> one = {x[i]};
      if (c.two_lists) one.push_back(y[i]);
      const Tensor want = Run1(c.op, one);
      EXPECT_EQ(r[i].dtype(), want.dtype());
      EXPECT_TRUE(Is(r[i], want.sizes(), want.ToDoubles(), 0));
    }
  }
}

TEST(Reductions, SumMeanExtremesAndArg) {
  const Tensor x = T({2, 3}, {1, 5, 3, 4, 2, 6});
  EXPECT_TRUE(Is(Run1("aten.sum.default", {x}), {}, {21}));
  EXPECT_TRUE(Is(Run1("aten.sum.dim_IntList", {x, Arg::Ints({0}), true}), {1, 3}, {5, 7, 9}));
  EXPECT_TRUE(Is(Run1("aten.sum.dim_IntList", {x, Arg::Ints({-1})}), {2}, {9, 12}));
  EXPECT_TRUE(Is(Run1("aten.sum.dim_IntList", {x, Arg()}), {}, {21}));
  EXPECT_EQ(Run1("aten.sum.default", {I({3}, {1, 1, 0}, v1::DTYPE_BOOL)}).dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(Run1("aten.sum.default", {x}, {{"dtype", v1::DTYPE_FLOAT32}}).dtype(),
            v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(Run1("aten.mean.dim", {x, Arg::Ints({1}), false}), {2}, {3, 4}));
  EXPECT_TRUE(Is(Run1("aten.mean.dim", {x, Arg::Ints({0, 1}), true}), {1, 1}, {3.5}));
  EXPECT_FALSE(RunOp("aten.mean.dim", {I({2}, {1, 2}), Arg::Ints({0})}).ok());
  EXPECT_TRUE(Is(Run1("aten.amax.default", {x, Arg::Ints({1})}), {2}, {5, 6}));
  EXPECT_TRUE(Is(Run1("aten.amin.default", {x, Arg::Ints({0}), true}), {1, 3}, {1, 2, 3}));
  EXPECT_TRUE(Is(Run1("aten.amax.default", {T({3}, {1, kNaN, 2}), Arg::Ints({0})}), {}, {kNaN}));
  EXPECT_EQ(Run1("aten.argmax.default", {x, 1}).ToInts(), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(Run1("aten.argmin.default", {x}).ToInts(), (std::vector<int64_t>{0}));
  EXPECT_EQ(Run1("aten.argmax.default", {T({4}, {1, 3, 3, 0})}).ToInts(),
            (std::vector<int64_t>{1}));
  EXPECT_EQ(Run1("aten.argmax.default", {x, Arg(), true}).sizes(), (std::vector<int64_t>{1, 1}));
  const std::vector<Value> mx = RunAll("aten.max.dim", {x, 0, true});
  EXPECT_TRUE(Is(std::get<Tensor>(mx[0]), {1, 3}, {4, 5, 6}));
  EXPECT_EQ(std::get<Tensor>(mx[1]).ToInts(), (std::vector<int64_t>{1, 0, 1}));
  const std::vector<Value> vm =
      RunAll("aten.var_mean.correction", {x, Arg::Ints({1})}, {{"correction", 1}});
  EXPECT_TRUE(Is(std::get<Tensor>(vm[0]), {2}, {4, 4}));
  EXPECT_TRUE(Is(std::get<Tensor>(vm[1]), {2}, {3, 4}));
  const std::vector<Value> vm0 =
      RunAll("aten.var_mean.correction", {x}, {{"correction", 0}, {"keepdim", true}});
  EXPECT_TRUE(Is(std::get<Tensor>(vm0[0]), {1, 1}, {35.0 / 12.0}));
  EXPECT_EQ(Run1("aten.any.dim", {T({2, 2}, {0, 0, 0, 1}), 1}).ToInts(),
            (std::vector<int64_t>{0, 1}));
  EXPECT_TRUE(
      Is(Run1("aten.logsumexp.default", {T({2}, {0, 0}), Arg::Ints({0})}), {}, {std::log(2.0)}));
  EXPECT_TRUE(Is(Run1("aten.cumsum.default", {x, 1}), {2, 3}, {1, 6, 9, 4, 6, 12}));
  EXPECT_TRUE(Is(Run1("aten.linalg_vector_norm.default", {T({2}, {3, 4})}), {}, {5}));
}

TEST(Reductions, Prod) {
  const Tensor x = T({2, 3}, {1, 5, 3, 4, 2, 6});
  EXPECT_TRUE(Is(Run1("aten.prod.default", {x}), {}, {720}));
  EXPECT_TRUE(Is(Run1("aten.prod.dim_int", {x, -1}), {2}, {15, 48}));
  EXPECT_TRUE(Is(Run1("aten.prod.dim_int", {x, 0, true}), {1, 3}, {4, 10, 18}));
  EXPECT_TRUE(
      Is(Run1("aten.prod.dim_int", {Tensor::Zeros({2, 0}, v1::DTYPE_FLOAT32), 1}), {2}, {1, 1}));
  const Tensor b = Run1("aten.prod.dim_int", {I({2, 2}, {1, 0, 1, 1}, v1::DTYPE_BOOL), 1});
  EXPECT_EQ(b.dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(b.ToInts(), (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(Run1("aten.prod.dim_int", {x, 1}, {{"dtype", v1::DTYPE_FLOAT32}}).dtype(),
            v1::DTYPE_FLOAT32);
  // int64 products wrap: 2^32 * 2^32 = 2^64 = 0.
  const int64_t big = int64_t{1} << 32;
  EXPECT_EQ(Run1("aten.prod.dim_int", {I({2}, {big, big}), 0}).ToInts(), (std::vector<int64_t>{0}));
  EXPECT_FALSE(RunOp("aten.prod.dim_int", {x, 2}).ok());
}

TEST(Factory, CreationOps) {
  const Tensor a = Run1("aten.arange.default", {5});
  EXPECT_EQ(a.dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(a.ToInts(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  const Tensor af = Run1("aten.arange.start_step", {0, 1, 0.25});
  EXPECT_EQ(af.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(af, {4}, {0, 0.25, 0.5, 0.75}));
  EXPECT_TRUE(Is(Run1("aten.arange.start_step", {5, 0, -2}), {3}, {5, 3, 1}));
  EXPECT_EQ(Run1("aten.arange.default", {3}, {{"dtype", v1::DTYPE_FLOAT32}}).dtype(),
            v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(Run1("aten.full.default", {Arg::Ints({2}), 1.5}), {2}, {1.5, 1.5}));
  EXPECT_EQ(Run1("aten.full.default", {Arg::Ints({2}), 3}).dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(Run1("aten.full.default", {Arg::Ints({1}), true}).dtype(), v1::DTYPE_BOOL);
  EXPECT_EQ(Run1("aten.zeros.default", {Arg::Ints({2, 0})}).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(Run1("aten.ones.default", {Arg::Ints({2})}, {{"dtype", v1::DTYPE_BFLOAT16}}), {2},
                 {1, 1}));
  const Tensor t = Run1("aten.t.default", {T({2, 3}, {1, 2, 3, 4, 5, 6})});
  EXPECT_EQ(Run1("aten.zeros_like.default", {t}).strides(), t.strides());
  EXPECT_EQ(Run1("aten.empty_strided.default", {Arg::Ints({2, 3}), Arg::Ints({1, 2})}).strides(),
            (std::vector<int64_t>{1, 2}));
  const Tensor st = Run1("aten.scalar_tensor.default", {3});
  EXPECT_EQ(st.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(st.dim(), 0);
  EXPECT_TRUE(Is(Run1("aten.new_full.default", {t, Arg::Ints({1}), 2.5}), {1}, {2.5}));
}

TEST(Indexing, CatGatherScatterIndex) {
  const Tensor a = T({2, 2}, {1, 2, 3, 4});
  const Tensor b = T({2, 1}, {5, 6});
  EXPECT_TRUE(Is(Run1("aten.cat.default", {Arg::Tensors({a, b}), 1}), {2, 3}, {1, 2, 5, 3, 4, 6}));
  EXPECT_TRUE(
      Is(Run1("aten.cat.default", {Arg::Tensors({a, Tensor::Zeros({0}, v1::DTYPE_FLOAT64)})}),
         {2, 2}, {1, 2, 3, 4}));
  EXPECT_TRUE(Is(Run1("aten.stack.default", {Arg::Tensors({a, a}), 2}), {2, 2, 2},
                 {1, 1, 2, 2, 3, 3, 4, 4}));
  EXPECT_TRUE(
      Is(Run1("aten.index_select.default", {a, 1, I({3}, {1, 1, 0})}), {2, 3}, {2, 2, 1, 4, 4, 3}));
  EXPECT_TRUE(
      Is(Run1("aten.gather.default", {a, 1, I({2, 2}, {1, 0, 0, 0})}), {2, 2}, {2, 1, 3, 3}));
  EXPECT_TRUE(Is(Run1("aten.scatter_add.default",
                      {Tensor::Zeros({2, 3}, v1::DTYPE_FLOAT64), 1, I({2, 2}, {0, 0, 2, 1}), a}),
                 {2, 3}, {3, 0, 0, 0, 4, 3}));
  EXPECT_FALSE(RunOp("aten.gather.default", {a, 1, I({2, 1}, {2, 0})}).ok());
  // A 0-d self has one element along dim 0.
  EXPECT_TRUE(Is(Run1("aten.gather.default", {T({}, {7}), 0, I({}, {0})}), {}, {7}));
  EXPECT_FALSE(RunOp("aten.gather.default", {T({}, {7}), 0, I({}, {1})}).ok());
  EXPECT_TRUE(Is(Run1("aten.index_select.default", {T({}, {7}), -1, I({1}, {0})}), {}, {7}));
  EXPECT_TRUE(Is(Run1("aten.index.Tensor", {a, Arg::Tensors({I({3}, {1, 0, 1})})}), {3, 2},
                 {3, 4, 1, 2, 3, 4}));
  EXPECT_TRUE(Is(Run1("aten.index.Tensor", {a, Arg::Tensors({Tensor(), I({2}, {1, 1})})}), {2, 2},
                 {2, 2, 4, 4}));
  EXPECT_TRUE(Is(
      Run1("aten.index_put.default", {a, Arg::Tensors({I({2}, {0, 0})}), T({2}, {10, 20}), true}),
      {2, 2}, {21, 42, 3, 4}));
}

TEST(Indexing, UnsafeIndexAndIndexPutAreIndexAndIndexPut) {
  const Tensor a = T({2, 2}, {1, 2, 3, 4});
  const Arg idx = Arg::Tensors({Tensor(), I({3}, {1, 0, 1})});
  EXPECT_EQ(Run1("aten._unsafe_index.Tensor", {a, idx}).ToDoubles(),
            Run1("aten.index.Tensor", {a, idx}).ToDoubles());
  EXPECT_TRUE(Is(Run1("aten._unsafe_index.Tensor", {a, idx}), {2, 3}, {2, 1, 2, 4, 3, 4}));
  EXPECT_TRUE(Is(Run1("aten._unsafe_index_put.default",
                      {a, Arg::Tensors({I({2}, {1, 1})}), T({2}, {10, 20}), true}),
                 {2, 2}, {1, 2, 23, 44}));
  // The interpreter still checks bounds, so a bad index is an error, not a stray read.
  EXPECT_FALSE(RunOp("aten._unsafe_index.Tensor", {a, Arg::Tensors({I({1}, {2})})}).ok());
}

TEST(Indexing, Flip) {
  const Tensor x = T({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_TRUE(Is(Run1("aten.flip.default", {x, Arg::Ints({0, -1})}), {2, 3}, {6, 5, 4, 3, 2, 1}));
  EXPECT_TRUE(Is(Run1("aten.flip.default", {x, Arg::Ints({1})}), {2, 3}, {3, 2, 1, 6, 5, 4}));
  EXPECT_TRUE(Is(Run1("aten.flip.default", {x, Arg::Ints({})}), {2, 3}, {1, 2, 3, 4, 5, 6}));
  // A transposed input: [[1, 4], [2, 5], [3, 6]] upside down.
  const Tensor t = Run1("aten.t.default", {x});
  const Tensor ft = Run1("aten.flip.default", {t, Arg::Ints({0})});
  EXPECT_TRUE(Is(ft, {3, 2}, {3, 6, 2, 5, 1, 4}));
  EXPECT_FALSE(ft.SharesStorageWith(x));
  EXPECT_EQ(Run1("aten.flip.default", {I({3}, {1, 2, 3}), Arg::Ints({0})}).ToInts(),
            (std::vector<int64_t>{3, 2, 1}));
  EXPECT_TRUE(Is(Run1("aten.flip.default", {T({}, {5}), Arg::Ints({0})}), {}, {5}));
  EXPECT_TRUE(
      Is(Run1("aten.flip.default", {Tensor::Zeros({0, 2}, v1::DTYPE_FLOAT64), Arg::Ints({0, 1})}),
         {0, 2}, {}));
  EXPECT_FALSE(RunOp("aten.flip.default", {x, Arg::Ints({0, -2})}).ok());
  EXPECT_FALSE(RunOp("aten.flip.default", {x, Arg::Ints({2})}).ok());
}

TEST(Indexing, ConstantPadWidensAndCrops) {
  const Tensor x = T({2, 2}, {1, 2, 3, 4});
  EXPECT_TRUE(Is(Run1("aten.constant_pad_nd.default", {x, Arg::Ints({1, 0}), 9}), {2, 3},
                 {9, 1, 2, 9, 3, 4}));
  // The second pair pads the second dim from the last; the value defaults to 0.
  EXPECT_TRUE(Is(Run1("aten.constant_pad_nd.default", {x, Arg::Ints({0, 1, 1, 0})}), {3, 3},
                 {0, 0, 0, 1, 2, 0, 3, 4, 0}));
  // Negative widths crop.
  EXPECT_TRUE(Is(Run1("aten.constant_pad_nd.default", {x, Arg::Ints({-1, 1}), -1}), {2, 2},
                 {2, -1, 4, -1}));
  EXPECT_TRUE(
      Is(Run1("aten.constant_pad_nd.default", {x, Arg::Ints({0, 0, -1, 0})}), {1, 2}, {3, 4}));
  EXPECT_TRUE(Is(Run1("aten.constant_pad_nd.default", {x, Arg::Ints({-2, 0})}), {2, 0}, {}));
  // A transposed input: [[1, 3], [2, 4]].
  EXPECT_TRUE(
      Is(Run1("aten.constant_pad_nd.default", {Run1("aten.t.default", {x}), Arg::Ints({0, 1}), 7}),
         {2, 3}, {1, 3, 7, 2, 4, 7}));
  // The value is converted to the tensor's dtype.
  const Tensor ints = Run1("aten.constant_pad_nd.default", {I({1}, {5}), Arg::Ints({1, 1}), 2.7});
  EXPECT_EQ(ints.dtype(), v1::DTYPE_INT64);
  EXPECT_EQ(ints.ToInts(), (std::vector<int64_t>{2, 5, 2}));
  EXPECT_FALSE(RunOp("aten.constant_pad_nd.default", {x, Arg::Ints({1})}).ok());
  EXPECT_FALSE(RunOp("aten.constant_pad_nd.default", {x, Arg::Ints({1, 1, 1, 1, 1, 1})}).ok());
  EXPECT_FALSE(RunOp("aten.constant_pad_nd.default", {x, Arg::Ints({-3, 1})}).ok());
}

TEST(Indexing, TrilTriu) {
  const Tensor x = T({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  EXPECT_TRUE(Is(Run1("aten.tril.default", {x}), {3, 3}, {1, 0, 0, 4, 5, 0, 7, 8, 9}));
  EXPECT_TRUE(Is(Run1("aten.tril.default", {x, -1}), {3, 3}, {0, 0, 0, 4, 0, 0, 7, 8, 0}));
  EXPECT_TRUE(Is(Run1("aten.triu.default", {x, 1}), {3, 3}, {0, 2, 3, 0, 0, 6, 0, 0, 0}));
  EXPECT_TRUE(
      Is(Run1("aten.triu.default", {x}, {{"diagonal", -1}}), {3, 3}, {1, 2, 3, 4, 5, 6, 0, 8, 9}));
  // Leading dims are batches; the matrices need not be square.
  EXPECT_TRUE(Is(Run1("aten.tril.default", {T({2, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})}),
                 {2, 2, 3}, {1, 0, 0, 4, 5, 0, 7, 0, 0, 10, 11, 0}));
  // A transposed input: [[1, 4, 7], [2, 5, 8], [3, 6, 9]].
  EXPECT_TRUE(Is(Run1("aten.triu.default", {Run1("aten.t.default", {x})}), {3, 3},
                 {1, 4, 7, 0, 5, 8, 0, 0, 9}));
  const Tensor b = Run1("aten.triu.default", {I({2, 2}, {1, 1, 1, 1}, v1::DTYPE_BOOL)});
  EXPECT_EQ(b.dtype(), v1::DTYPE_BOOL);
  EXPECT_EQ(b.ToInts(), (std::vector<int64_t>{1, 1, 0, 1}));
  EXPECT_FALSE(RunOp("aten.tril.default", {T({3}, {1, 2, 3})}).ok());
}

TEST(Linalg, MatrixProducts) {
  const Tensor a = T({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor b = T({3, 2}, {7, 8, 9, 10, 11, 12});
  EXPECT_TRUE(Is(Run1("aten.mm.default", {a, b}), {2, 2}, {58, 64, 139, 154}));
  // A transposed operand reads through its strides.
  const Tensor bt = Run1("aten.t.default", {T({2, 3}, {7, 9, 11, 8, 10, 12})});
  EXPECT_TRUE(Is(Run1("aten.mm.default", {a, bt}), {2, 2}, {58, 64, 139, 154}));
  EXPECT_TRUE(Is(Run1("aten.addmm.default", {T({2}, {1, -1}), a, b}, {{"beta", 2}, {"alpha", 0.5}}),
                 {2, 2}, {31, 30, 71.5, 75}));
  // beta = 0 ignores NaN in self.
  EXPECT_TRUE(Is(Run1("aten.addmm.default", {T({1}, {kNaN}), a, b}, {{"beta", 0}}), {2, 2},
                 {58, 64, 139, 154}));
  EXPECT_TRUE(Is(Run1("aten.bmm.default", {T({2, 1, 2}, {1, 2, 3, 4}), T({2, 2, 1}, {1, 1, 2, 0})}),
                 {2, 1, 1}, {3, 6}));
  EXPECT_FALSE(RunOp("aten.mm.default", {a, a}).ok());
  EXPECT_FALSE(
      RunOp("aten.mm.default", {a, T({3, 2}, {1, 2, 3, 4, 5, 6}, v1::DTYPE_FLOAT32)}).ok());
  EXPECT_TRUE(Is(Run1("aten.mm.default", {Tensor::Zeros({2, 0}, v1::DTYPE_FLOAT64),
                                          Tensor::Zeros({0, 3}, v1::DTYPE_FLOAT64)}),
                 {2, 3}, {0, 0, 0, 0, 0, 0}));
}

TEST(Nn, SoftmaxLayerNormNllEmbedding) {
  EXPECT_TRUE(
      Is(Run1("aten._softmax.default", {T({2}, {0, std::log(3.0)}), 0, false}), {2}, {0.25, 0.75}));
  EXPECT_TRUE(Is(Run1("aten._log_softmax.default", {T({2}, {0, 0}), -1, false}), {2},
                 {-std::log(2.0), -std::log(2.0)}));
  EXPECT_TRUE(Is(Run1("aten._softmax.default", {T({2}, {-kInf, 0}), 0, false}), {2}, {0, 1}));
  const std::vector<Value> ln =
      RunAll("aten.native_layer_norm.default",
             {T({1, 2}, {1, 3}), Arg::Ints({2}), T({2}, {2, 1}), T({2}, {0, 1}), 0.0});
  EXPECT_TRUE(Is(std::get<Tensor>(ln[0]), {1, 2}, {-2, 2}));
  EXPECT_TRUE(Is(std::get<Tensor>(ln[1]), {1, 1}, {2}));
  EXPECT_TRUE(Is(std::get<Tensor>(ln[2]), {1, 1}, {1}));
  const Tensor lp = T({2, 3}, {-1, -2, -3, -4, -5, -6});
  const std::vector<Value> nll =
      RunAll("aten.nll_loss_forward.default", {lp, I({2}, {2, 0}), Arg(), 1, -100});
  EXPECT_TRUE(Is(std::get<Tensor>(nll[0]), {}, {3.5}));
  EXPECT_TRUE(Is(std::get<Tensor>(nll[1]), {}, {2}));
  const std::vector<Value> ign =
      RunAll("aten.nll_loss_forward.default", {lp, I({2}, {2, 7}), Arg(), 1, 7});
  EXPECT_TRUE(Is(std::get<Tensor>(ign[0]), {}, {3}));
  EXPECT_TRUE(
      Is(Run1("aten.nll_loss_forward.default", {lp, I({2}, {1, 1}), T({3}, {1, 2, 3}), 0, -100}),
         {2}, {4, 10}));
  EXPECT_FALSE(RunOp("aten.nll_loss_forward.default", {lp, I({2}, {3, 0}), Arg(), 1, -100}).ok());
  EXPECT_TRUE(Is(Run1("aten.embedding.default", {T({3, 2}, {0, 1, 2, 3, 4, 5}), I({2, 1}, {2, 0})}),
                 {2, 1, 2}, {4, 5, 0, 1}));
  EXPECT_FALSE(RunOp("aten.embedding.default", {T({3, 2}, {0, 1, 2, 3, 4, 5}), I({1}, {3})}).ok());
}

TEST(Nn, SafeSoftmaxGivesZerosForFullyMaskedRows) {
  const Tensor x = T({2, 2}, {0, std::log(3.0), -kInf, -kInf}, v1::DTYPE_FLOAT32);
  const Tensor y = Run1("aten._safe_softmax.default", {x, -1});
  EXPECT_EQ(y.dtype(), v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(y, {2, 2}, {0.25, 0.75, 0, 0}, 1e-7));
  // Softmax itself gives NaN for the masked row; a partly masked row is a plain softmax.
  EXPECT_TRUE(std::isnan(Run1("aten._softmax.default", {x, -1, false}).ToDoubles()[2]));
  EXPECT_TRUE(Is(Run1("aten._safe_softmax.default", {T({2}, {-kInf, 0}), 0}), {2}, {0, 1}));
  EXPECT_EQ(Run1("aten._safe_softmax.default", {x, 0}, {{"dtype", v1::DTYPE_FLOAT64}}).dtype(),
            v1::DTYPE_FLOAT64);
}

TEST(Nn, GroupNorm) {
  // N 1, C 2, HxW 2 in one group: mean 2.5, variance 1.25.
  const Tensor x = T({1, 2, 2}, {1, 2, 3, 4});
  const double r = 1 / std::sqrt(1.25 + 1e-5);
  const std::vector<Value> one = RunAll("aten.native_group_norm.default",
                                        {x, T({2}, {1, 2}), T({2}, {0, 1}), 1, 2, 2, 1, 1e-5});
  ASSERT_EQ(one.size(), 3u);
  EXPECT_TRUE(Is(std::get<Tensor>(one[0]), {1, 2, 2},
                 {-1.5 * r, -0.5 * r, 0.5 * r * 2 + 1, 1.5 * r * 2 + 1}));
  EXPECT_TRUE(Is(std::get<Tensor>(one[1]), {1, 1}, {2.5}));
  EXPECT_TRUE(Is(std::get<Tensor>(one[2]), {1, 1}, {r}));
  // Two groups of one channel, no weight or bias: each channel normalized alone.
  const double r2 = 1 / std::sqrt(0.25 + 1e-5);
  const std::vector<Value> two =
      RunAll("aten.native_group_norm.default", {x, Arg(), Arg(), 1, 2, 2, 2, 1e-5});
  EXPECT_TRUE(Is(std::get<Tensor>(two[0]), {1, 2, 2}, {-0.5 * r2, 0.5 * r2, -0.5 * r2, 0.5 * r2}));
  EXPECT_TRUE(Is(std::get<Tensor>(two[1]), {1, 2}, {1.5, 3.5}));
  // bfloat16 inputs with float32 parameters keep float32 statistics, as ATen does.
  const std::vector<Value> mixed =
      RunAll("aten.native_group_norm.default",
             {T({1, 2, 2}, {1, 2, 3, 4}, v1::DTYPE_BFLOAT16), T({2}, {1, 1}, v1::DTYPE_FLOAT32),
              Arg(), 1, 2, 2, 1, 0.0});
  EXPECT_EQ(std::get<Tensor>(mixed[0]).dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_EQ(std::get<Tensor>(mixed[1]).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_FALSE(RunOp("aten.native_group_norm.default", {x, Arg(), Arg(), 1, 2, 2, 3, 1e-5}).ok());
  EXPECT_FALSE(RunOp("aten.native_group_norm.default", {x, Arg(), Arg(), 1, 2, 3, 1, 1e-5}).ok());
}

TEST(Nn, MseLossAndItsBackward) {
  const Tensor self = T({3}, {1, 2, 3}, v1::DTYPE_FLOAT32);
  const Tensor target = T({3}, {0, 2, 5}, v1::DTYPE_FLOAT32);
  EXPECT_TRUE(Is(Run1("aten.mse_loss.default", {self, target}), {}, {5.0 / 3}, 1e-7));
  EXPECT_TRUE(Is(Run1("aten.mse_loss.default", {self, target, 2}), {}, {5}));
  EXPECT_TRUE(Is(Run1("aten.mse_loss.default", {self, target, 0}), {3}, {1, 0, 4}));
  // The gradient is 2 (self - target) grad, over the element count for a mean.
  EXPECT_TRUE(
      Is(Run1("aten.mse_loss_backward.default", {T({}, {1}, v1::DTYPE_FLOAT32), self, target, 1}),
         {3}, {2.0 / 3, 0, -4.0 / 3}, 1e-7));
  EXPECT_TRUE(
      Is(Run1("aten.mse_loss_backward.default", {T({}, {0.5}, v1::DTYPE_FLOAT32), self, target, 2}),
         {3}, {1, 0, -2}));
  EXPECT_TRUE(Is(Run1("aten.mse_loss_backward.default",
                      {T({3}, {1, 2, 3}, v1::DTYPE_FLOAT32), self, target, 0}),
                 {3}, {2, 0, -12}));
  EXPECT_FALSE(RunOp("aten.mse_loss.default", {I({1}, {1}), I({1}, {2})}).ok());
}

TEST(Nn, BatchNormInEvaluationReturnsTheRunningStatistics) {
  // As CUDA's kernel (and PyTorch's decomposition for every device but the CPU): the saved
  // mean is the running mean, the saved invstd 1 / sqrt(running_var + eps), both [C].
  const Tensor x = T({2, 2, 1}, {1, 2, 3, 4}, v1::DTYPE_FLOAT32);
  const Tensor rm = T({2}, {1, -1}, v1::DTYPE_FLOAT32);
  const Tensor rv = T({2}, {4, 0.25}, v1::DTYPE_FLOAT32);
  const std::vector<Value> bn = RunAll("aten._native_batch_norm_legit_no_training.default",
                                       {x, Arg(), Arg(), rm, rv, 0.1, 0.0});
  ASSERT_EQ(bn.size(), 3u);
  EXPECT_TRUE(Is(std::get<Tensor>(bn[0]), {2, 2, 1}, {0, 6, 1, 10}));
  EXPECT_TRUE(Is(std::get<Tensor>(bn[1]), {2}, {1, -1}));
  EXPECT_TRUE(Is(std::get<Tensor>(bn[2]), {2}, {0.5, 2}));
  EXPECT_EQ(std::get<Tensor>(bn[2]).dtype(), v1::DTYPE_FLOAT32);
  // The running statistics are not updated in evaluation.
  EXPECT_TRUE(Is(rm, {2}, {1, -1}));
  // bfloat16 inputs keep float32 statistics.
  const std::vector<Value> half =
      RunAll("aten._native_batch_norm_legit_no_training.default",
             {T({2, 2, 1}, {1, 2, 3, 4}, v1::DTYPE_BFLOAT16), Arg(), Arg(), rm, rv, 0.1, 0.0});
  EXPECT_EQ(std::get<Tensor>(half[1]).dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(std::get<Tensor>(half[1]).sizes(), (std::vector<int64_t>{2}));
}

TEST(Nn, ConvolutionAndPooling) {
  // 1x1x3x3 input, 2x2 kernel of ones, stride 1: sums of 2x2 windows.
  const Tensor x = T({1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
  const Tensor w = T({1, 1, 2, 2}, {1, 1, 1, 1});
  EXPECT_TRUE(
      Is(Run1("aten.convolution.default", {x, w, T({1}, {1}), Arg::Ints({1, 1}), Arg::Ints({0, 0}),
                                           Arg::Ints({1, 1}), false, Arg::Ints({0, 0}), 1}),
         {1, 1, 2, 2}, {13, 17, 25, 29}));
  // Padding 1, stride 2.
  EXPECT_TRUE(
      Is(Run1("aten.convolution.default", {x, w, Arg(), Arg::Ints({2, 2}), Arg::Ints({1, 1}),
                                           Arg::Ints({1, 1}), false, Arg::Ints({0, 0}), 1}),
         {1, 1, 2, 2}, {1, 5, 11, 28}));
  // A transposed convolution scatters each input through the kernel.
  EXPECT_TRUE(Is(Run1("aten.convolution.default",
                      {T({1, 1, 1, 2}, {1, 2}), T({1, 1, 1, 2}, {1, 10}), Arg(), Arg::Ints({1, 1}),
                       Arg::Ints({0, 0}), Arg::Ints({1, 1}), true, Arg::Ints({0, 0}), 1}),
                 {1, 1, 1, 3}, {1, 12, 20}));
  const std::vector<Value> mp =
      RunAll("aten.max_pool2d_with_indices.default", {x, Arg::Ints({2, 2}), Arg::Ints({1, 1})});
  EXPECT_TRUE(Is(std::get<Tensor>(mp[0]), {1, 1, 2, 2}, {5, 6, 8, 9}));
  EXPECT_EQ(std::get<Tensor>(mp[1]).ToInts(), (std::vector<int64_t>{4, 5, 7, 8}));
  // ceil_mode adds a partial window; stride defaults to the kernel.
  const std::vector<Value> mc =
      RunAll("aten.max_pool2d_with_indices.default",
             {x, Arg::Ints({2}), Arg::Ints({}), Arg::Ints({0}), Arg::Ints({1}), true});
  EXPECT_TRUE(Is(std::get<Tensor>(mc[0]), {1, 1, 2, 2}, {5, 6, 8, 9}));
}

TEST(Nn, AttentionMatchesNaiveMath) {
  // One head, two queries, two keys, causal: query 0 sees only key 0.
  const Tensor q = T({1, 1, 2, 1}, {1, 2});
  const Tensor k = T({1, 1, 2, 1}, {1, -1});
  const Tensor v = T({1, 1, 2, 2}, {1, 0, 0, 1});
  const std::vector<Value> r = RunAll("aten._scaled_dot_product_efficient_attention.default",
                                      {q, k, v, Arg(), true, 0.0, true});
  const double p0 = std::exp(2.0) / (std::exp(2.0) + std::exp(-2.0));
  EXPECT_TRUE(Is(std::get<Tensor>(r[0]), {1, 1, 2, 2}, {1, 0, p0, 1 - p0}, 1e-7));
  const Tensor lse = std::get<Tensor>(r[1]);
  EXPECT_EQ(lse.sizes(), (std::vector<int64_t>{1, 1, 32}));
  EXPECT_NEAR(lse.ToDoubles()[1], std::log(std::exp(2.0) + std::exp(-2.0)), 1e-6);
  // Rows past the queries are +inf, as the kernel pads them.
  EXPECT_EQ(lse.ToDoubles()[2], kInf);
  EXPECT_EQ(lse.ToDoubles()[31], kInf);
  EXPECT_EQ(std::get<Tensor>(r[2]).dtype(), v1::DTYPE_INT64);
  const std::vector<Value> c = RunAll("aten._scaled_dot_product_cudnn_attention.default",
                                      {q, k, v, Arg(), true, 0.0, true, false});
  ASSERT_EQ(c.size(), 9u);
  EXPECT_EQ(std::get<Tensor>(c[1]).sizes(), (std::vector<int64_t>{1, 1, 2, 1}));
  EXPECT_EQ(std::get<int64_t>(c[4]), 2);
  EXPECT_TRUE(std::holds_alternative<None>(c[8]));
}

TEST(Nn, ViewBackwardsAndScatters) {
  EXPECT_TRUE(Is(Run1("aten.slice_backward.default", {T({2}, {1, 2}), Arg::Ints({5}), 0, 1, 5, 2}),
                 {5}, {0, 1, 0, 2, 0}));
  EXPECT_TRUE(Is(Run1("aten.select_backward.default", {T({2}, {1, 2}), Arg::Ints({2, 2}), 1, 0}),
                 {2, 2}, {1, 0, 2, 0}));
  EXPECT_TRUE(Is(Run1("aten.slice_scatter.default", {T({4}, {1, 1, 1, 1}), T({2}, {5, 6}), 0, 2}),
                 {4}, {1, 1, 5, 6}));
  // as_strided_scatter addresses the storage of self's clone (dense inputs keep their
  // strides): positions 1 and 5 of a contiguous [2, 3].
  EXPECT_TRUE(Is(
      Run1("aten.as_strided_scatter.default", {Tensor::Zeros({2, 3}, v1::DTYPE_FLOAT64),
                                               T({2}, {7, 8}), Arg::Ints({2}), Arg::Ints({4}), 1}),
      {2, 3}, {0, 7, 0, 0, 0, 8}));
  // In a transposed self, storage position 1 is element [1, 0].
  const Tensor tr = Run1("aten.t.default", {Tensor::Zeros({3, 2}, v1::DTYPE_FLOAT64)});
  const Tensor sc =
      Run1("aten.as_strided_scatter.default", {tr, T({1}, {9}), Arg::Ints({1}), Arg::Ints({1}), 1});
  EXPECT_TRUE(Is(sc, {2, 3}, {0, 0, 0, 9, 0, 0}));
  EXPECT_FALSE(sc.SharesStorageWith(tr));
  // storage_offset defaults to the clone's (0); src must have the view's sizes; the view
  // must stay inside self.
  EXPECT_TRUE(Is(Run1("aten.as_strided_scatter.default", {T({4}, {1, 2, 3, 4}), T({2, 1}, {5, 6}),
                                                          Arg::Ints({2, 1}), Arg::Ints({2, 1})}),
                 {4}, {5, 2, 6, 4}));
  EXPECT_FALSE(RunOp("aten.as_strided_scatter.default",
                     {T({4}, {1, 2, 3, 4}), T({3}, {5, 6, 7}), Arg::Ints({2}), Arg::Ints({1})})
                   .ok());
  EXPECT_FALSE(RunOp("aten.as_strided_scatter.default",
                     {T({4}, {1, 2, 3, 4}), T({2}, {5, 6}), Arg::Ints({2}), Arg::Ints({3}), 1})
                   .ok());
  EXPECT_TRUE(Is(Run1("aten.native_dropout_backward.default",
                      {T({3}, {1, 2, 3}), I({3}, {1, 0, 1}, v1::DTYPE_BOOL), 2.0}),
                 {3}, {2, 0, 6}));
}

TEST(Misc, PythonOpsSizesAndCollectives) {
  EXPECT_EQ(std::get<int64_t>(RunAll("operator.mul", {16, 128})[0]), 2048);
  EXPECT_EQ(std::get<double>(RunAll("operator.mul", {2, 0.5})[0]), 1.0);
  EXPECT_EQ(std::get<int64_t>(RunAll("operator.floordiv", {-7, 2})[0]), -4);
  EXPECT_EQ(std::get<int64_t>(RunAll("operator.getitem", {Arg::Ints({4, 5, 6}), -1})[0]), 6);
  const Tensor x = T({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(std::get<int64_t>(RunAll("aten.sym_size.int", {x, 1})[0]), 3);
  const Tensor ar = Run1("_c10d_functional.all_reduce.default", {x, "sum", "0"});
  EXPECT_EQ(ar.ToDoubles(), x.ToDoubles());
  EXPECT_FALSE(ar.SharesStorageWith(x));
  EXPECT_TRUE(Run1("_c10d_functional.wait_tensor.default", {ar}).SharesStorageWith(ar));
  const Tensor a2a =
      Run1("_c10d_functional.all_to_all_single.default", {x, Arg::Ints({2}), Arg::Ints({2}), "0"});
  EXPECT_EQ(a2a.ToDoubles(), x.ToDoubles());
  EXPECT_FALSE(a2a.SharesStorageWith(x));
  const Tensor y = T({1}, {7});
  const std::vector<Value> ag = RunAll("_c10d_functional.all_gather_into_tensor_coalesced.default",
                                       {Arg::Tensors({x, y}), 1, "0"});
  ASSERT_EQ(ag.size(), 2u);
  EXPECT_EQ(std::get<Tensor>(ag[1]).ToDoubles(), y.ToDoubles());
  const std::vector<Value> rs = RunAll("_c10d_functional.reduce_scatter_tensor_coalesced.default",
                                       {Arg::Tensors({x, y}), "sum", 1, "0"});
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(std::get<Tensor>(rs[0]).ToDoubles(), x.ToDoubles());
  RunOptions two;
  two.world_size = 2;
  EXPECT_FALSE(RunOp("_c10d_functional.all_reduce.default", {x, "sum", "0"}, {}, two).ok());
  absl::StatusOr<std::vector<Value>> bad = RunOp("aten.nonexistent.default", {});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(IsSupportedOp("aten.convolution_backward.default"));
}

// Every op of real training graphs is implemented.
TEST(Coverage, IssueOpList) {
  for (const char* op : ::kiln::testing::kTrainingOps) {
    EXPECT_TRUE(IsSupportedOp(op)) << op;
  }
}

// The op registry's traits hold in the interpreter: its views keep the layout they compute,
// and every pointwise and reduction op of the registry runs here, but for the known gap
// named here. A new op the interpreter lacks fails this test; so does filling the gap
// without updating it.
TEST(Coverage, RegistryTraitsHoldInTheInterpreter) {
  std::vector<std::string> missing;
  for (const ops::Op* op : ops::AllOps()) {
    const OpInfo* info = DefaultOpRegistry().Find(op->target());
    if (op->is_view()) {
      ASSERT_NE(info, nullptr) << op->target();
      EXPECT_TRUE(info->returns_views) << op->target();
    }
    if ((op->pointwise || op->reduction) && info == nullptr) missing.push_back(op->target());
  }
  EXPECT_EQ(missing, std::vector<std::string>{"aten.erfinv.default"});
}

// The ops of the real-graph corpus (tests/data/graphs) that the list above does not name:
// optimizer steps (torch.optim with foreach=True), MobileNet's hard activations, UNet's
// group norm, mse loss and upsampling, T5's masked softmax.
TEST(Coverage, CorpusOps) {
  for (const char* op : {"aten._foreach_add.List",
                         "aten._foreach_add.Scalar",
                         "aten._foreach_addcdiv.Scalar",
                         "aten._foreach_addcmul.Scalar",
                         "aten._foreach_div.List",
                         "aten._foreach_div.Scalar",
                         "aten._foreach_mul.Scalar",
                         "aten._foreach_neg.default",
                         "aten._foreach_pow.ScalarAndTensor",
                         "aten._foreach_reciprocal.default",
                         "aten._foreach_sqrt.default",
                         "aten._foreach_sub.List",
                         "aten._foreach_sub.Scalar",
                         "aten._safe_softmax.default",
                         "aten._unsafe_index.Tensor",
                         "aten._unsafe_index_put.default",
                         "aten.as_strided_scatter.default",
                         "aten.hardsigmoid_backward.default",
                         "aten.hardswish_backward.default",
                         "aten.mse_loss.default",
                         "aten.mse_loss_backward.default",
                         "aten.native_group_norm.default",
                         "aten.native_group_norm_backward.default",
                         "prims.convert_element_type.default"}) {
    EXPECT_TRUE(IsSupportedOp(op)) << op;
  }
}

}  // namespace
}  // namespace kiln::interp
