// Random numbers: each call draws from the next Philox stream of the graph (see
// compiler/interp/philox.h), so calls keep their order.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kDraws[] = {
    "aten.native_dropout.default(Tensor input, float p, bool? train) -> (Tensor, Tensor)",
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
};

// Applies the mask the forward drew.
constexpr const char* kReplays[] = {
    "aten.native_dropout_backward.default(Tensor grad_output, Tensor mask, float scale) "
    "-> Tensor",
};

}  // namespace

void AddRandomOps(OpTable& t) {
  t.Add(Traits{.random = true}, kDraws);
  t.Add(Traits{.pointwise = true}, kReplays);
}

}  // namespace kiln::ops
