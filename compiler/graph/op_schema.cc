#include "compiler/graph/op_schema.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::graph {
namespace {

// The schemas, in the aten schema language with the full target as the name. Where aten
// declares a plain `Tensor` that callers fill with an undefined tensor (printed as None in
// FX graphs), the entry says `Tensor?`: Kiln validates what graphs really carry.
constexpr const char* kSchemas[] = {
    // Python operators on symbolic scalars.
    "operator.getitem(Any a, int b) -> Tuple",
    "operator.add(Scalar a, Scalar b) -> Scalar",
    "operator.sub(Scalar a, Scalar b) -> Scalar",
    "operator.mul(Scalar a, Scalar b) -> Scalar",
    "operator.floordiv(Scalar a, Scalar b) -> Scalar",
    "operator.truediv(Scalar a, Scalar b) -> Scalar",
    "operator.mod(Scalar a, Scalar b) -> Scalar",
    "operator.pow(Scalar a, Scalar b) -> Scalar",
    "operator.neg(Scalar a) -> Scalar",
    "operator.eq(Scalar a, Scalar b) -> Scalar",
    "operator.ne(Scalar a, Scalar b) -> Scalar",
    "operator.lt(Scalar a, Scalar b) -> Scalar",
    "operator.le(Scalar a, Scalar b) -> Scalar",
    "operator.gt(Scalar a, Scalar b) -> Scalar",
    "operator.ge(Scalar a, Scalar b) -> Scalar",
    "aten.sym_size.int(Tensor self, int dim) -> SymInt",
    "aten.sym_stride.int(Tensor self, int dim) -> SymInt",
    "aten.sym_numel.default(Tensor self) -> SymInt",
    "aten.sym_storage_offset.default(Tensor self) -> SymInt",
    "aten._assert_scalar.default(Scalar self, str assert_msg) -> ()",

    // Collectives: ordered among themselves, never reordered.
    "_c10d_functional.all_reduce.default(Tensor input, str reduce_op, str group_name) -> Tensor",
    "_c10d_functional.all_reduce_coalesced.default(Tensor[] inputs, str reduce_op, "
    "str group_name) -> Tensor[]",
    "_c10d_functional.all_gather_into_tensor.default(Tensor input, int group_size, "
    "str group_name) -> Tensor",
    "_c10d_functional.all_gather_into_tensor_coalesced.default(Tensor[] inputs, int group_size, "
    "str group_name) -> Tensor[]",
    "_c10d_functional.reduce_scatter_tensor.default(Tensor input, str reduce_op, int group_size, "
    "str group_name) -> Tensor",
    "_c10d_functional.reduce_scatter_tensor_coalesced.default(Tensor[] inputs, str reduce_op, "
    "int group_size, str group_name) -> Tensor[]",
    "_c10d_functional.all_to_all_single.default(Tensor input, SymInt[] output_split_sizes, "
    "SymInt[] input_split_sizes, str group_name) -> Tensor",
    "_c10d_functional.broadcast.default(Tensor input, int src, str group_name) -> Tensor",
    "_c10d_functional.wait_tensor.default(Tensor tensor) -> Tensor",

    // Pointwise, unary.
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

    // Pointwise backward.
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

    // Pointwise, binary and ternary.
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

    // Reductions.
    "aten.sum.default(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten.sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, "
    "ScalarType? dtype=None) -> Tensor",
    "aten.mean.default(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten.mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) "
    "-> Tensor",
    "aten.prod.default(Tensor self, *, ScalarType? dtype=None) -> Tensor",
    "aten.prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) "
    "-> Tensor",
    "aten.amax.default(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "aten.amin.default(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor",
    "aten.max.default(Tensor self) -> Tensor",
    "aten.min.default(Tensor self) -> Tensor",
    "aten.max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten.min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)",
    "aten.argmax.default(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    "aten.argmin.default(Tensor self, int? dim=None, bool keepdim=False) -> Tensor",
    "aten.any.default(Tensor self) -> Tensor",
    "aten.any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "aten.all.default(Tensor self) -> Tensor",
    "aten.all.dim(Tensor self, int dim, bool keepdim=False) -> Tensor",
    "aten.var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
    "bool keepdim=False) -> Tensor",
    "aten.std.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
    "bool keepdim=False) -> Tensor",
    "aten.var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, "
    "bool keepdim=False) -> (Tensor, Tensor)",
    "aten.logsumexp.default(Tensor self, int[1] dim, bool keepdim=False) -> Tensor",
    "aten.cumsum.default(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor",
    "aten._softmax.default(Tensor self, int dim, bool half_to_float) -> Tensor",
    "aten._softmax_backward_data.default(Tensor grad_output, Tensor output, int dim, "
    "ScalarType input_dtype) -> Tensor",
    "aten._log_softmax.default(Tensor self, int dim, bool half_to_float) -> Tensor",
    "aten._log_softmax_backward_data.default(Tensor grad_output, Tensor output, int dim, "
    "ScalarType input_dtype) -> Tensor",

    // Views.
    "aten.view.default(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    "aten._unsafe_view.default(Tensor self, SymInt[] size) -> Tensor",
    "aten.reshape.default(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
    "aten.t.default(Tensor(a) self) -> Tensor(a)",
    "aten.transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)",
    "aten.permute.default(Tensor(a) self, int[] dims) -> Tensor(a)",
    "aten.expand.default(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)",
    "aten.slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, "
    "SymInt step=1) -> Tensor(a)",
    "aten.select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)",
    "aten.narrow.default(Tensor(a) self, int dim, SymInt start, SymInt length) -> Tensor(a)",
    "aten.squeeze.default(Tensor(a) self) -> Tensor(a)",
    "aten.squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)",
    "aten.squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)",
    "aten.unsqueeze.default(Tensor(a) self, int dim) -> Tensor(a)",
    "aten.split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]",
    "aten.split_with_sizes.default(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) "
    "-> Tensor(a)[]",
    "aten.unbind.int(Tensor(a -> *) self, int dim=0) -> Tensor(a)[]",
    "aten.chunk.default(Tensor(a -> *) self, int chunks, int dim=0) -> Tensor(a)[]",
    "aten.alias.default(Tensor(a) self) -> Tensor(a)",
    "aten.detach.default(Tensor(a) self) -> Tensor(a)",
    "aten.diagonal.default(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)",
    "aten.unfold.default(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)",
    "aten.as_strided.default(Tensor(a) self, SymInt[] size, SymInt[] stride, "
    "SymInt? storage_offset=None) -> Tensor(a)",

    // Copies, casts, layout.
    "aten.clone.default(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
    "aten._to_copy.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, bool non_blocking=False, "
    "MemoryFormat? memory_format=None) -> Tensor",
    "aten.copy.default(Tensor self, Tensor src, bool non_blocking=False) -> Tensor",
    "aten.copy_.default(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
    "aten.lift_fresh_copy.default(Tensor self) -> Tensor",
    "aten.contiguous.default(Tensor(a) self, *, MemoryFormat memory_format=contiguous_format) "
    "-> Tensor(a)",
    "aten.cat.default(Tensor[] tensors, int dim=0) -> Tensor",
    "aten.stack.default(Tensor[] tensors, int dim=0) -> Tensor",
    "aten.constant_pad_nd.default(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor",
    "aten.repeat.default(Tensor self, SymInt[] repeats) -> Tensor",
    "aten.flip.default(Tensor self, int[] dims) -> Tensor",
    "aten.roll.default(Tensor self, SymInt[1] shifts, int[1] dims=[]) -> Tensor",
    "aten.tril.default(Tensor self, int diagonal=0) -> Tensor",
    "aten.triu.default(Tensor self, int diagonal=0) -> Tensor",
    "aten.sort.default(Tensor self, int dim=-1, bool descending=False) "
    "-> (Tensor values, Tensor indices)",
    "aten.topk.default(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) "
    "-> (Tensor values, Tensor indices)",

    // Indexing.
    "aten.index_select.default(Tensor self, int dim, Tensor index) -> Tensor",
    "aten.gather.default(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor",
    "aten.scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    "aten.scatter.value(Tensor self, int dim, Tensor index, Scalar value) -> Tensor",
    "aten.scatter_add.default(Tensor self, int dim, Tensor index, Tensor src) -> Tensor",
    "aten.index.Tensor(Tensor self, Tensor?[] indices) -> Tensor",
    "aten.index_put.default(Tensor self, Tensor?[] indices, Tensor values, "
    "bool accumulate=False) -> Tensor",
    "aten.index_add.default(Tensor self, int dim, Tensor index, Tensor source, *, "
    "Scalar alpha=1) -> Tensor",
    "aten.select_backward.default(Tensor grad_output, SymInt[] input_sizes, int dim, "
    "SymInt index) -> Tensor",
    "aten.slice_backward.default(Tensor grad_output, SymInt[] input_sizes, int dim, "
    "SymInt start, SymInt end, SymInt step) -> Tensor",
    "aten.embedding.default(Tensor weight, Tensor indices, SymInt padding_idx=-1, "
    "bool scale_grad_by_freq=False, bool sparse=False) -> Tensor",
    "aten.embedding_dense_backward.default(Tensor grad_output, Tensor indices, "
    "SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor",

    // Factories.
    "aten.arange.default(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.arange.start_step(Scalar start, Scalar end, Scalar step=1, *, "
    "ScalarType? dtype=None, Layout? layout=None, Device? device=None, "
    "bool? pin_memory=None) -> Tensor",
    "aten.full.default(SymInt[] size, Scalar fill_value, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.zeros.default(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.ones.default(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.empty.memory_format(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten.empty_strided.default(SymInt[] size, SymInt[] stride, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.scalar_tensor.default(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.full_like.default(Tensor self, Scalar fill_value, *, ScalarType? dtype=None, "
    "Layout? layout=None, Device? device=None, bool? pin_memory=None, "
    "MemoryFormat? memory_format=None) -> Tensor",
    "aten.zeros_like.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten.ones_like.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten.empty_like.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",

    // Random numbers: ordered, since each draw advances the generator.
    "aten.native_dropout.default(Tensor input, float p, bool? train) -> (Tensor, Tensor)",
    "aten.native_dropout_backward.default(Tensor grad_output, Tensor mask, float scale) "
    "-> Tensor",
    "aten.rand.default(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.randn.default(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None) -> Tensor",
    "aten.rand_like.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten.randn_like.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor",
    "aten.bernoulli.default(Tensor self, *, Generator? generator=None) -> Tensor",
    "aten.bernoulli.p(Tensor self, float p=0.5, *, Generator? generator=None) -> Tensor",

    // Matrix products and convolution: extern calls.
    "aten.mm.default(Tensor self, Tensor mat2) -> Tensor",
    "aten.bmm.default(Tensor self, Tensor mat2) -> Tensor",
    "aten.addmm.default(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, "
    "Scalar alpha=1) -> Tensor",
    "aten.baddbmm.default(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, "
    "Scalar alpha=1) -> Tensor",
    "aten.convolution.default(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, "
    "SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, "
    "SymInt groups) -> Tensor",
    "aten.convolution_backward.default(Tensor grad_output, Tensor input, Tensor weight, "
    "SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, "
    "bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) "
    "-> (Tensor, Tensor, Tensor)",

    // Pooling.
    "aten.max_pool2d_with_indices.default(Tensor self, int[2] kernel_size, int[2] stride=[], "
    "int[2] padding=0, int[2] dilation=1, bool ceil_mode=False) -> (Tensor, Tensor)",
    "aten.max_pool2d_with_indices_backward.default(Tensor grad_output, Tensor self, "
    "int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, "
    "Tensor indices) -> Tensor",
    "aten.avg_pool2d.default(Tensor self, int[2] kernel_size, int[2] stride=[], "
    "int[2] padding=0, bool ceil_mode=False, bool count_include_pad=True, "
    "int? divisor_override=None) -> Tensor",
    "aten.avg_pool2d_backward.default(Tensor grad_output, Tensor self, int[2] kernel_size, "
    "int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, "
    "int? divisor_override) -> Tensor",
    "aten._adaptive_avg_pool2d.default(Tensor self, SymInt[2] output_size) -> Tensor",
    "aten._adaptive_avg_pool2d_backward.default(Tensor grad_output, Tensor self) -> Tensor",

    // Normalization and losses.
    "aten.native_layer_norm.default(Tensor input, SymInt[] normalized_shape, Tensor? weight, "
    "Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)",
    "aten.native_layer_norm_backward.default(Tensor grad_out, Tensor input, "
    "SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, "
    "bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
    "aten.native_group_norm.default(Tensor input, Tensor? weight, Tensor? bias, SymInt N, "
    "SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)",
    "aten._native_batch_norm_legit_functional.default(Tensor input, Tensor? weight, "
    "Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, "
    "float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor)",
    "aten._native_batch_norm_legit_no_training.default(Tensor input, Tensor? weight, "
    "Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) "
    "-> (Tensor, Tensor, Tensor)",
    "aten.native_batch_norm_backward.default(Tensor grad_out, Tensor input, Tensor? weight, "
    "Tensor? running_mean, Tensor? running_var, Tensor? save_mean, Tensor? save_invstd, "
    "bool train, float eps, bool[3] output_mask) -> (Tensor, Tensor, Tensor)",
    "aten.nll_loss_forward.default(Tensor self, Tensor target, Tensor? weight, int reduction, "
    "SymInt ignore_index) -> (Tensor output, Tensor total_weight)",
    "aten.nll_loss_backward.default(Tensor grad_output, Tensor self, Tensor target, "
    "Tensor? weight, int reduction, SymInt ignore_index, Tensor total_weight) -> Tensor",

    // Attention: extern calls.
    "aten._scaled_dot_product_efficient_attention.default(Tensor query, Tensor key, "
    "Tensor value, Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0.0, "
    "bool is_causal=False, *, float? scale=None) "
    "-> (Tensor output, Tensor log_sumexp, Tensor philox_seed, Tensor philox_offset)",
    "aten._scaled_dot_product_efficient_attention_backward.default(Tensor grad_out_, "
    "Tensor query, Tensor key, Tensor value, Tensor? attn_bias, Tensor out, Tensor logsumexp, "
    "Tensor philox_seed, Tensor philox_offset, float dropout_p, bool[4] grad_input_mask, "
    "bool is_causal=False, *, float? scale=None) -> (Tensor, Tensor, Tensor, Tensor)",
    "aten._scaled_dot_product_cudnn_attention.default(Tensor query, Tensor key, Tensor value, "
    "Tensor? attn_bias, bool compute_log_sumexp, float dropout_p=0.0, bool is_causal=False, "
    "bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, "
    "Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, "
    "Tensor philox_offset, Tensor debug_attn_mask)",
    "aten._scaled_dot_product_cudnn_attention_backward.default(Tensor grad_out, Tensor query, "
    "Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor philox_seed, "
    "Tensor philox_offset, Tensor? attn_bias, Tensor? cum_seq_q, Tensor? cum_seq_k, "
    "SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, *, float? scale=None) "
    "-> (Tensor, Tensor, Tensor)",
    "aten._scaled_dot_product_flash_attention.default(Tensor query, Tensor key, Tensor value, "
    "float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, "
    "float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, "
    "Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor rng_state, Tensor unused, "
    "Tensor debug_attn_mask)",
    "aten._scaled_dot_product_flash_attention_backward.default(Tensor grad_out, Tensor query, "
    "Tensor key, Tensor value, Tensor out, Tensor logsumexp, Tensor cum_seq_q, "
    "Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, "
    "Tensor philox_seed, Tensor philox_offset, *, float? scale=None) "
    "-> (Tensor grad_query, Tensor grad_key, Tensor grad_value)",
};

// Ops whose results are random draws.
constexpr absl::string_view kRandomOps[] = {
    "aten.native_dropout.default",
    "aten.rand.default",
    "aten.randn.default",
    "aten.rand_like.default",
    "aten.randn_like.default",
    "aten.bernoulli.default",
    "aten.bernoulli.p",
};

// Views whose elements are a subset of their first argument's elements (as_strided is a
// view too, but may reach anywhere in the storage).
constexpr absl::string_view kSubsetViews[] = {
    "aten.view.default",      "aten._unsafe_view.default", "aten.t.default",
    "aten.transpose.int",     "aten.permute.default",      "aten.expand.default",
    "aten.slice.Tensor",      "aten.select.int",           "aten.narrow.default",
    "aten.squeeze.default",   "aten.squeeze.dim",          "aten.squeeze.dims",
    "aten.unsqueeze.default", "aten.split.Tensor",         "aten.split_with_sizes.default",
    "aten.unbind.int",        "aten.chunk.default",        "aten.alias.default",
    "aten.detach.default",    "aten.diagonal.default",     "aten.unfold.default",
};

template <size_t N>
bool Contains(const absl::string_view (&list)[N], absl::string_view name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

// The schema strings are Kiln's own source text: a malformed one is a programming error,
// caught by the first test that touches the table.
[[noreturn]] void BadSchema(absl::string_view schema, absl::string_view why) {
  std::fprintf(stderr, "kiln: bad built-in op schema \"%.*s\": %.*s\n",
               static_cast<int>(schema.size()), schema.data(), static_cast<int>(why.size()),
               why.data());
  std::abort();
}

// Splits on commas outside brackets and quotes.
std::vector<absl::string_view> SplitTopLevel(absl::string_view text) {
  std::vector<absl::string_view> parts;
  int depth = 0;
  bool quoted = false;
  size_t start = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '"') quoted = !quoted;
    if (quoted) continue;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(absl::StripAsciiWhitespace(text.substr(start, i - start)));
      start = i + 1;
    }
  }
  absl::string_view last = absl::StripAsciiWhitespace(text.substr(start));
  if (!last.empty()) parts.push_back(last);
  return parts;
}

struct ParsedType {
  ArgType type;
  bool optional = false;
  bool mutated = false;
  int fixed_size = 0;  // N of `int[N]`
};

ParsedType ParseType(absl::string_view schema, absl::string_view text) {
  ParsedType out;
  // Alias annotations: "Tensor(a)", "Tensor(a!)", "Tensor(a -> *)".
  std::string plain;
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '(') {
      const size_t close = text.find(')', i);
      if (close == absl::string_view::npos) BadSchema(schema, "unclosed alias annotation");
      out.mutated = text.substr(i, close - i).find('!') != absl::string_view::npos;
      i = close;
      continue;
    }
    plain.push_back(text[i]);
  }
  absl::string_view t = plain;
  if (absl::ConsumeSuffix(&t, "?")) out.optional = true;
  bool list = false;
  bool optional_elements = false;
  if (const size_t open = t.find('['); open != absl::string_view::npos) {
    list = true;
    absl::string_view size = t.substr(open + 1, t.size() - open - 2);
    if (!size.empty() && !absl::SimpleAtoi(size, &out.fixed_size)) {
      BadSchema(schema, "bad list size");
    }
    t = t.substr(0, open);
    if (absl::ConsumeSuffix(&t, "?")) optional_elements = true;
  }
  static const std::map<absl::string_view, std::pair<ArgType, ArgType>> kTypes = {
      {"Tensor", {ArgType::kTensor, ArgType::kTensorList}},
      {"int", {ArgType::kInt, ArgType::kIntList}},
      {"SymInt", {ArgType::kSymInt, ArgType::kSymIntList}},
      {"float", {ArgType::kFloat, ArgType::kFloatList}},
      {"bool", {ArgType::kBool, ArgType::kBoolList}},
      {"Scalar", {ArgType::kScalar, ArgType::kAny}},
      {"str", {ArgType::kString, ArgType::kAny}},
      {"ScalarType", {ArgType::kScalarType, ArgType::kAny}},
      {"Device", {ArgType::kDevice, ArgType::kAny}},
      {"Layout", {ArgType::kLayout, ArgType::kAny}},
      {"MemoryFormat", {ArgType::kMemoryFormat, ArgType::kAny}},
      {"Generator", {ArgType::kGenerator, ArgType::kAny}},
      {"Any", {ArgType::kAny, ArgType::kAny}},
  };
  auto it = kTypes.find(t);
  if (it == kTypes.end()) BadSchema(schema, "unknown type");
  out.type = list ? it->second.second : it->second.first;
  if (list && optional_elements) {
    if (out.type != ArgType::kTensorList) BadSchema(schema, "only Tensor?[] is supported");
    out.type = ArgType::kOptTensorList;
  }
  if (list && out.type == ArgType::kAny) BadSchema(schema, "unsupported list type");
  return out;
}

DefaultValue ParseDefault(absl::string_view schema, const ParsedType& type,
                          absl::string_view text) {
  DefaultValue d;
  using Kind = DefaultValue::Kind;
  if (text == "None") return d;
  if (text == "True" || text == "False") {
    d.kind = Kind::kBool;
    d.int_value = text == "True";
    return d;
  }
  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') {
    d.kind = Kind::kString;
    d.text = std::string(text.substr(1, text.size() - 2));
    return d;
  }
  if (text == "contiguous_format") {
    d.kind = Kind::kEnum;
    d.int_value = v1::MEMORY_FORMAT_CONTIGUOUS;
    return d;
  }
  const bool is_list = type.type == ArgType::kIntList || type.type == ArgType::kSymIntList ||
                       type.type == ArgType::kBoolList;
  if (is_list) {
    d.kind = type.type == ArgType::kBoolList ? Kind::kBoolList : Kind::kIntList;
    if (text.front() == '[') {
      for (absl::string_view item : SplitTopLevel(text.substr(1, text.size() - 2))) {
        int64_t v = 0;
        if (!absl::SimpleAtoi(item, &v)) BadSchema(schema, "bad list default");
        d.list.push_back(v);
      }
      return d;
    }
    // `int[2] padding=0` means [0, 0].
    int64_t v = 0;
    if (!absl::SimpleAtoi(text, &v) || type.fixed_size == 0) BadSchema(schema, "bad default");
    d.list.assign(type.fixed_size, v);
    return d;
  }
  if (int64_t v = 0; absl::SimpleAtoi(text, &v)) {
    d.kind = Kind::kInt;
    d.int_value = v;
    return d;
  }
  if (double v = 0; absl::SimpleAtod(text, &v)) {
    d.kind = Kind::kFloat;
    d.float_value = v;
    return d;
  }
  BadSchema(schema, "unreadable default");
}

OpSchema ParseSchema(absl::string_view schema) {
  OpSchema op;
  const size_t open = schema.find('(');
  const size_t arrow = schema.rfind("->");
  if (open == absl::string_view::npos || arrow == absl::string_view::npos) {
    BadSchema(schema, "expected NAME(PARAMS) -> RETURNS");
  }
  const size_t close = schema.rfind(')', arrow);
  op.target = std::string(schema.substr(0, open));
  bool keyword_only = false;
  for (absl::string_view item : SplitTopLevel(schema.substr(open + 1, close - open - 1))) {
    if (item == "*") {
      keyword_only = true;
      continue;
    }
    ParamSchema p;
    absl::string_view decl = item;
    absl::string_view default_text;
    if (const size_t eq = item.find('='); eq != absl::string_view::npos) {
      decl = item.substr(0, eq);
      default_text = item.substr(eq + 1);
      p.has_default = true;
    }
    const size_t space = decl.rfind(' ');
    if (space == absl::string_view::npos) BadSchema(schema, "parameter without a name");
    const ParsedType type = ParseType(schema, decl.substr(0, space));
    p.name = std::string(decl.substr(space + 1));
    p.type = type.type;
    p.optional = type.optional;
    p.mutated = type.mutated;
    p.keyword_only = keyword_only;
    if (p.has_default) p.default_value = ParseDefault(schema, type, default_text);
    op.params.push_back(std::move(p));
  }
  absl::string_view returns = absl::StripAsciiWhitespace(schema.substr(arrow + 2));
  if (returns == "Tuple") {
    op.returns = ReturnKind::kTuple;
  } else if (returns == "Scalar" || returns == "SymInt") {
    op.returns = ReturnKind::kScalar;
  } else if (absl::EndsWith(returns, "[]")) {
    op.returns = ReturnKind::kTensorList;
  } else if (returns == "()") {
    op.num_returns = 0;
  } else if (returns.front() == '(') {
    op.num_returns = static_cast<int>(SplitTopLevel(returns.substr(1, returns.size() - 2)).size());
  } else if (!absl::StartsWith(returns, "Tensor")) {
    BadSchema(schema, "unsupported return");
  }
  op.ordered = absl::StartsWith(op.target, "_c10d_functional.") || Contains(kRandomOps, op.target);
  for (const ParamSchema& p : op.params) op.ordered |= p.mutated;
  op.is_view = Contains(kSubsetViews, op.target);
  return op;
}

struct Table {
  std::vector<std::unique_ptr<OpSchema>> owned;
  std::vector<const OpSchema*> sorted;
};

const Table& GetTable() {
  static const Table* table = [] {
    auto* t = new Table;
    for (const char* text : kSchemas) {
      t->owned.push_back(std::make_unique<OpSchema>(ParseSchema(text)));
      t->sorted.push_back(t->owned.back().get());
    }
    std::sort(t->sorted.begin(), t->sorted.end(),
              [](const OpSchema* a, const OpSchema* b) { return a->target < b->target; });
    for (size_t i = 1; i < t->sorted.size(); ++i) {
      if (t->sorted[i - 1]->target == t->sorted[i]->target) {
        BadSchema(t->sorted[i]->target, "listed twice");
      }
    }
    return t;
  }();
  return *table;
}

}  // namespace

absl::string_view ArgTypeName(ArgType type) {
  switch (type) {
    case ArgType::kTensor:
      return "Tensor";
    case ArgType::kTensorList:
      return "Tensor[]";
    case ArgType::kOptTensorList:
      return "Tensor?[]";
    case ArgType::kInt:
      return "int";
    case ArgType::kIntList:
      return "int[]";
    case ArgType::kSymInt:
      return "SymInt";
    case ArgType::kSymIntList:
      return "SymInt[]";
    case ArgType::kFloat:
      return "float";
    case ArgType::kFloatList:
      return "float[]";
    case ArgType::kScalar:
      return "Scalar";
    case ArgType::kBool:
      return "bool";
    case ArgType::kBoolList:
      return "bool[]";
    case ArgType::kString:
      return "str";
    case ArgType::kScalarType:
      return "ScalarType";
    case ArgType::kDevice:
      return "Device";
    case ArgType::kLayout:
      return "Layout";
    case ArgType::kMemoryFormat:
      return "MemoryFormat";
    case ArgType::kGenerator:
      return "Generator";
    case ArgType::kAny:
      return "Any";
  }
  return "?";
}

int OpSchema::ParamIndex(absl::string_view name) const {
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return static_cast<int>(i);
  }
  return -1;
}

const OpSchema* FindOpSchema(absl::string_view target) {
  const std::vector<const OpSchema*>& sorted = GetTable().sorted;
  auto it = std::lower_bound(sorted.begin(), sorted.end(), target,
                             [](const OpSchema* s, absl::string_view t) { return s->target < t; });
  if (it == sorted.end() || (*it)->target != target) return nullptr;
  return *it;
}

const std::vector<const OpSchema*>& AllOpSchemas() { return GetTable().sorted; }

}  // namespace kiln::graph
