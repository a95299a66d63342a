// Copies, casts, concatenation, padding, reordering: fresh results (or, for copy_, the
// argument written in place).

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

constexpr const char* kCopies[] = {
    "aten.clone.default(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor",
    "aten._to_copy.default(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, "
    "Device? device=None, bool? pin_memory=None, bool non_blocking=False, "
    "MemoryFormat? memory_format=None) -> Tensor",
    "aten.copy.default(Tensor self, Tensor src, bool non_blocking=False) -> Tensor",
    "aten.copy_.default(Tensor(a!) self, Tensor src, bool non_blocking=False) -> Tensor(a!)",
    "aten.lift_fresh_copy.default(Tensor self) -> Tensor",
    "prims.convert_element_type.default(Tensor a, ScalarType dtype) -> Tensor",
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
};

}  // namespace

void AddCopyOps(OpTable& t) { t.Add(Traits{}, kCopies); }

}  // namespace kiln::ops
