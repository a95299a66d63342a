// Views: results that share the storage of their first argument.

#include "proto/ops/op_table.h"

namespace kiln::ops {
namespace {

// Views of elements of `self`.
constexpr const char* kWithinSelf[] = {
    "aten.view.default(Tensor(a) self, SymInt[] size) -> Tensor(a)",
    // aten declares no alias here (autograd must not treat the result as a view), but the
    // result does share the storage of `self`.
    "aten._unsafe_view.default(Tensor(a) self, SymInt[] size) -> Tensor(a)",
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
};

// A view that may reach anywhere in the storage of `self`.
constexpr const char* kAnywhereInStorage[] = {
    "aten.as_strided.default(Tensor(a) self, SymInt[] size, SymInt[] stride, "
    "SymInt? storage_offset=None) -> Tensor(a)",
};

// A view where the layout allows, a copy otherwise.
constexpr const char* kViewOrCopy[] = {
    "aten.reshape.default(Tensor(a) self, SymInt[] shape) -> Tensor(a)",
};

}  // namespace

void AddViewOps(OpTable& t) {
  t.Add(Traits{.view_of = 0}, kWithinSelf);
  t.Add(Traits{.view_of = 0, .view_within_base = false}, kAnywhereInStorage);
  t.Add(Traits{}, kViewOrCopy);
}

}  // namespace kiln::ops
