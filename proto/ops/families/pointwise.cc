// Pointwise ops: one result element per (broadcast) position of the tensor arguments.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kUnary[] = {
    "aten.abs.default(Tensor self) -> Tensor",
    "aten.neg.default(Tensor self) -> Tensor",
    "aten.exp.default(Tensor self) -> Tensor",
    "aten.exp2.default(Tensor self) -> Tensor",
    "aten.expm1.default(Tensor self) -> Tensor",
    "aten.log.default(Tensor self) -> Tensor",
    "aten.log2.default(Tensor self) -> Tensor",
    "aten.log10.default(Tensor self) -> Tensor",
    "aten.log1p.default(Tensor self) -> Tensor",
    "aten.sqrt.default(Tensor self) -> Tensor",
    "aten.rsqrt.default(Tensor self) -> Tensor",
    "aten.reciprocal.default(Tensor self) -> Tensor",
    "aten.sin.default(Tensor self) -> Tensor",
    "aten.cos.default(Tensor self) -> Tensor",
    "aten.tan.default(Tensor self) -> Tensor",
    "aten.asin.default(Tensor self) -> Tensor",
    "aten.acos.default(Tensor self) -> Tensor",
    "aten.atan.default(Tensor self) -> Tensor",
    "aten.sinh.default(Tensor self) -> Tensor",
    "aten.cosh.default(Tensor self) -> Tensor",
    "aten.tanh.default(Tensor self) -> Tensor",
    "aten.sigmoid.default(Tensor self) -> Tensor",
    "aten.erf.default(Tensor self) -> Tensor",
    "aten.erfc.default(Tensor self) -> Tensor",
    "aten.erfinv.default(Tensor self) -> Tensor",
    "aten.relu.default(Tensor self) -> Tensor",
    "aten.silu.default(Tensor self) -> Tensor",
    "aten.mish.default(Tensor self) -> Tensor",
    "aten.hardswish.default(Tensor self) -> Tensor",
    "aten.hardsigmoid.default(Tensor self) -> Tensor",
    "aten.sign.default(Tensor self) -> Tensor",
    "aten.floor.default(Tensor self) -> Tensor",
    "aten.ceil.default(Tensor self) -> Tensor",
    "aten.round.default(Tensor self) -> Tensor",
    "aten.trunc.default(Tensor self) -> Tensor",
    "aten.frac.default(Tensor self) -> Tensor",
    "aten.lgamma.default(Tensor self) -> Tensor",
    "aten.isnan.default(Tensor self) -> Tensor",
    "aten.isinf.default(Tensor self) -> Tensor",
    "aten.logical_not.default(Tensor self) -> Tensor",
    "aten.bitwise_not.default(Tensor self) -> Tensor",
    "aten.gelu.default(Tensor self, *, str approximate=\"none\") -> Tensor",
    "aten.leaky_relu.default(Tensor self, Scalar negative_slope=0.01) -> Tensor",
    "aten.hardtanh.default(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor",
    "aten.softplus.default(Tensor self, Scalar beta=1, Scalar threshold=20) -> Tensor",
    "aten.elu.default(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor",
    "aten.clamp.default(Tensor self, Scalar? min=None, Scalar? max=None) -> Tensor",
    "aten.clamp.Tensor(Tensor self, Tensor? min=None, Tensor? max=None) -> Tensor",
    "aten.clamp_min.default(Tensor self, Scalar min) -> Tensor",
    "aten.clamp_max.default(Tensor self, Scalar max) -> Tensor",
};

// The backward of unary ops.
constexpr const char* kUnaryBackward[] = {
    "aten.gelu_backward.default(Tensor grad_output, Tensor self, *, str approximate=\"none\") "
    "-> Tensor",
    "aten.silu_backward.default(Tensor grad_output, Tensor self) -> Tensor",
    "aten.tanh_backward.default(Tensor grad_output, Tensor output) -> Tensor",
    "aten.sigmoid_backward.default(Tensor grad_output, Tensor output) -> Tensor",
    "aten.threshold_backward.default(Tensor grad_output, Tensor self, Scalar threshold) -> Tensor",
    "aten.hardtanh_backward.default(Tensor grad_output, Tensor self, Scalar min_val, "
    "Scalar max_val) -> Tensor",
    "aten.leaky_relu_backward.default(Tensor grad_output, Tensor self, Scalar negative_slope, "
    "bool self_is_result) -> Tensor",
    "aten.softplus_backward.default(Tensor grad_output, Tensor self, Scalar beta, "
    "Scalar threshold) -> Tensor",
    "aten.hardswish_backward.default(Tensor grad_output, Tensor self) -> Tensor",
    "aten.hardsigmoid_backward.default(Tensor grad_output, Tensor self) -> Tensor",
};

constexpr const char* kBinaryAndTernary[] = {
    "aten.add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten.add.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
    "aten.sub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten.sub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
    "aten.rsub.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor",
    "aten.rsub.Scalar(Tensor self, Scalar other, Scalar alpha=1) -> Tensor",
    "aten.mul.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.mul.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.div.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.div.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.div.Tensor_mode(Tensor self, Tensor other, *, str? rounding_mode) -> Tensor",
    "aten.div.Scalar_mode(Tensor self, Scalar other, *, str? rounding_mode) -> Tensor",
    "aten.floor_divide.default(Tensor self, Tensor other) -> Tensor",
    "aten.remainder.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.remainder.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.fmod.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.fmod.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.pow.Tensor_Scalar(Tensor self, Scalar exponent) -> Tensor",
    "aten.pow.Tensor_Tensor(Tensor self, Tensor exponent) -> Tensor",
    "aten.pow.Scalar(Scalar self, Tensor exponent) -> Tensor",
    "aten.atan2.default(Tensor self, Tensor other) -> Tensor",
    "aten.maximum.default(Tensor self, Tensor other) -> Tensor",
    "aten.minimum.default(Tensor self, Tensor other) -> Tensor",
    "aten.eq.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.eq.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.ne.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.ne.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.lt.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.lt.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.le.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.le.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.gt.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.gt.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.ge.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.ge.Scalar(Tensor self, Scalar other) -> Tensor",
    "aten.logical_and.default(Tensor self, Tensor other) -> Tensor",
    "aten.logical_or.default(Tensor self, Tensor other) -> Tensor",
    "aten.logical_xor.default(Tensor self, Tensor other) -> Tensor",
    "aten.bitwise_and.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.bitwise_or.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.bitwise_xor.Tensor(Tensor self, Tensor other) -> Tensor",
    "aten.where.self(Tensor condition, Tensor self, Tensor other) -> Tensor",
    "aten.where.ScalarSelf(Tensor condition, Scalar self, Tensor other) -> Tensor",
    "aten.where.ScalarOther(Tensor condition, Tensor self, Scalar other) -> Tensor",
    "aten.masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor",
    "aten.masked_fill.Tensor(Tensor self, Tensor mask, Tensor value) -> Tensor",
    "aten.lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor",
    "aten.lerp.Tensor(Tensor self, Tensor end, Tensor weight) -> Tensor",
    "aten.addcmul.default(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) "
    "-> Tensor",
    "aten.addcdiv.default(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) "
    "-> Tensor",
};

}  // namespace

void AddPointwiseOps(OpTable& t) {
  t.Add(Traits{.pointwise = true}, kUnary);
  t.Add(Traits{.pointwise = true}, kUnaryBackward);
  t.Add(Traits{.pointwise = true}, kBinaryAndTernary);
}

}  // namespace kiln::ops
