#pragma once

// The reference interpreter's tensor: a strided view of shared storage, as in PyTorch.
// Views (view, transpose, expand, slice, ...) share storage with their base, so writes
// through one are seen by all. Floating dtypes store doubles; integer and bool dtypes
// store exact int64 values, so indices, seeds and counters never lose bits (a double holds
// integers exactly only up to 2^53, which a Philox seed or a hashed index can exceed).
//
// Every value written into a tensor is rounded to its dtype (see dtype.h), except inside
// an ExactFloatScope, where floating dtypes keep full double precision: the mode in which
// finite differences validate backward ops. Not thread-safe for concurrent writes to
// shared storage; distinct tensors may be used from distinct threads.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/interp/dtype.h"

namespace kiln::interp {

// The elements behind one or more tensors. Exactly one of the two vectors is used,
// chosen by the dtype the storage was created for.
struct Storage {
  std::vector<double> floats;
  std::vector<int64_t> ints;
};

class Tensor {
 public:
  // An undefined tensor (an absent optional tensor).
  Tensor() = default;

  // A fresh contiguous tensor of zeros.
  static Tensor Zeros(std::vector<int64_t> sizes, DType dtype);
  // A fresh tensor of zeros laid out with `strides` and `offset`; the storage is just large
  // enough. Strides must be non-negative.
  static Tensor ZerosStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                             int64_t offset, DType dtype);
  // A fresh contiguous tensor holding `values` in row-major order, rounded to `dtype`.
  static Tensor FromDoubles(std::vector<int64_t> sizes, DType dtype,
                            absl::Span<const double> values);
  static Tensor FromInts(std::vector<int64_t> sizes, DType dtype, absl::Span<const int64_t> values);
  // A 0-d tensor.
  static Tensor Scalar(double value, DType dtype);

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t size(int64_t d) const { return sizes_[static_cast<size_t>(d)]; }
  int64_t stride(int64_t d) const { return strides_[static_cast<size_t>(d)]; }
  int64_t storage_offset() const { return offset_; }
  int64_t numel() const;
  bool is_contiguous() const;
  // Every element has its own storage slot and the slots form one dense block.
  bool is_non_overlapping_and_dense() const;

  // A view of the same storage with other metadata (no bounds check beyond the storage).
  Tensor AsStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) const;
  bool SharesStorageWith(const Tensor& other) const { return storage_ == other.storage_; }
  int64_t StorageSize() const;
  // Whether the view's elements all lie inside its storage.
  bool InBounds() const;

  // Element access by storage index (not logical position).
  double ReadDouble(int64_t index) const;
  int64_t ReadInt(int64_t index) const;
  // Writes round to the dtype (floats to nearest even, integers by truncation and wrap).
  void WriteDouble(int64_t index, double value);
  void WriteInt(int64_t index, int64_t value);

  // Storage indices of the elements in row-major logical order.
  std::vector<int64_t> ElementIndices() const;
  // The elements in row-major logical order.
  std::vector<double> ToDoubles() const;
  std::vector<int64_t> ToInts() const;
  // The single element of a one-element tensor.
  double Item() const;
  int64_t ItemInt() const;

  // A fresh contiguous copy, in this dtype or another one.
  Tensor Contiguous() const;
  Tensor To(DType dtype) const;
  // A fresh copy laid out as PyTorch's preserve_format does: same strides when the tensor
  // is non-overlapping and dense, otherwise contiguous.
  Tensor ClonePreserve(DType dtype) const;
  // A fresh copy with the given layout.
  Tensor CloneStrided(std::vector<int64_t> strides, int64_t offset) const;
  // Copies `src` into this tensor's elements, broadcasting and converting.
  // Sizes must broadcast to this tensor's sizes (the caller checks).
  void CopyFrom(const Tensor& src);

  // "float32[2, 3]" for messages.
  std::string DebugString() const;

 private:
  std::shared_ptr<Storage> storage_;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
  DType dtype_ = v1::DTYPE_UNSPECIFIED;
};

// A fresh contiguous tensor from `bytes`: the little-endian elements of `dtype` in row-major
// order, as PyTorch stores a contiguous tensor and capture files record values.
// INVALID_ARGUMENT when the byte count does not fit the sizes or the dtype is not supported.
absl::StatusOr<Tensor> TensorFromBytes(std::vector<int64_t> sizes, DType dtype,
                                       absl::string_view bytes);

// Contiguous strides for `sizes`.
std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> sizes);
int64_t NumElements(absl::Span<const int64_t> sizes);

// While one exists on a thread, floating results on that thread are kept in full double
// precision instead of being rounded to their dtype. Nests.
class ExactFloatScope {
 public:
  ExactFloatScope();
  ~ExactFloatScope();
  ExactFloatScope(const ExactFloatScope&) = delete;
  ExactFloatScope& operator=(const ExactFloatScope&) = delete;
};

// Rounds as tensor writes do on this thread (honouring ExactFloatScope).
double RoundForWrite(double value, DType dtype);

}  // namespace kiln::interp
