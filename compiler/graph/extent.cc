#include "compiler/graph/extent.h"

#include "absl/strings/str_cat.h"
#include "proto/error_detail.h"

namespace kiln::graph {

Extent ExtentOf(absl::Span<const SymInt> sizes, absl::Span<const SymInt> strides,
                const SymInt& storage_offset) {
  Extent e;
  if (storage_offset.is_symbolic()) return e;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i].is_symbolic() || strides[i].is_symbolic()) return e;
    if (sizes[i].value() == 0) e.empty = true;
  }
  e.known = true;
  if (e.empty) return e;
  int64_t last = storage_offset.value();
  for (size_t i = 0; i < sizes.size(); ++i) {
    int64_t step = 0;
    // CheckIndexRange has ruled out overflow.
    __builtin_mul_overflow(sizes[i].value() - 1, strides[i].value(), &step);
    __builtin_add_overflow(last, step, &last);
  }
  e.first = storage_offset.value();
  e.last = last;
  return e;
}

absl::Status CheckIndexRange(absl::string_view node, const std::string& field,
                             absl::Span<const SymInt> sizes, absl::Span<const SymInt> strides,
                             const SymInt& storage_offset, int64_t element_bytes) {
  int64_t numel = 1;
  bool empty = false;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i].is_symbolic()) return absl::OkStatus();
    if (sizes[i].value() == 0) empty = true;
    if (__builtin_mul_overflow(numel, sizes[i].value(), &numel)) {
      return InvalidField(node, absl::StrCat(field, ".sizes[", i, "]"),
                          "the element count overflows int64");
    }
  }
  if (int64_t bytes = 0; !empty && __builtin_mul_overflow(numel, element_bytes, &bytes)) {
    return InvalidField(
        node, absl::StrCat(field, ".sizes"),
        absl::StrCat(numel, " elements of ", element_bytes, " bytes overflow int64 byte sizes"));
  }
  if (empty || storage_offset.is_symbolic()) return absl::OkStatus();
  int64_t last = storage_offset.value();
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (strides[i].is_symbolic()) return absl::OkStatus();
    int64_t step = 0;
    int64_t end_byte = 0;
    // Byte offsets of the elements reached are computed in 64 bits too (plans, runtimes).
    if (__builtin_mul_overflow(sizes[i].value() - 1, strides[i].value(), &step) ||
        __builtin_add_overflow(last, step, &last) ||
        __builtin_mul_overflow(last + 1, element_bytes, &end_byte)) {
      return InvalidField(node, absl::StrCat(field, ".strides[", i, "]"),
                          "the tensor reaches elements beyond the int64 index range");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckViewInBase(const Graph& graph, const Node& node) {
  const Arg& self = graph.args(node)[static_cast<size_t>(node.op->view_of)];
  if (self.kind != ArgKind::kRef) return absl::OkStatus();
  const Value* base = graph.Resolve(self.ref);
  if (base == nullptr || base->kind != ValueKind::kTensor) return absl::OkStatus();
  const Extent b = ExtentOf(graph.sizes(*base), graph.strides(*base), base->storage_offset);
  if (!b.known || b.empty) return absl::OkStatus();
  auto outs = graph.outputs(node);
  for (uint32_t i = 0; i < outs.size(); ++i) {
    if (outs[i].kind != ValueKind::kTensor) continue;
    const Extent e = ExtentOf(graph.sizes(outs[i]), graph.strides(outs[i]), outs[i].storage_offset);
    if (!e.known || e.empty) continue;
    if (e.first < b.first || e.last > b.last) {
      return InvalidField(
          graph.name(node), absl::StrCat("outputs[", i, "]"),
          absl::StrCat("the view reaches elements [", e.first, ", ", e.last,
                       "] of the storage, outside [", b.first, ", ", b.last, "] that its base \"",
                       graph.name(graph.node(self.ref.node)), "\" reaches"));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::graph
