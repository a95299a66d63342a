#pragma once

// The CPU runtime's tensor: a strided view of memory, as a torch.Tensor on the CPU is. It
// names a base address, a dtype, sizes, strides and an offset (both in elements), and
// optionally shares ownership of the memory it views; a view without an owner borrows
// memory the caller keeps alive. Copying a Tensor copies the view, never the elements.
//
// A Tensor is a value type without internal synchronization: concurrent reads are safe,
// concurrent writes to overlapping elements are the caller's business.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "client/runtime/dtype.h"

namespace kiln::runtime {

class Tensor {
 public:
  // An undefined tensor: an absent optional tensor, or a None output.
  Tensor() = default;

  // A borrowed view of `data` (the address of storage element 0).
  Tensor(void* data, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
         int64_t offset = 0);
  // A borrowed contiguous view.
  static Tensor Wrap(void* data, DType dtype, std::vector<int64_t> sizes);

  // A fresh contiguous tensor of zeroed memory, 64-byte aligned, owning its storage.
  static Tensor Empty(std::vector<int64_t> sizes, DType dtype);
  // A fresh tensor laid out with `strides` (non-negative) and `offset`, zeroed, with just
  // enough storage.
  static Tensor EmptyStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                             int64_t offset, DType dtype);
  // A 0-d int64 tensor holding `value`: how a symbolic-int input or output travels.
  static Tensor Scalar(int64_t value);

  bool defined() const { return data_ != nullptr || dtype_ != v1::DTYPE_UNSPECIFIED; }
  DType dtype() const { return dtype_; }
  int64_t dim() const { return static_cast<int64_t>(sizes_.size()); }
  const std::vector<int64_t>& sizes() const { return sizes_; }
  const std::vector<int64_t>& strides() const { return strides_; }
  int64_t size(int64_t d) const { return sizes_[static_cast<size_t>(d)]; }
  int64_t stride(int64_t d) const { return strides_[static_cast<size_t>(d)]; }
  int64_t offset() const { return offset_; }
  int64_t numel() const;
  int64_t element_size() const { return ElementSize(dtype_); }
  bool is_contiguous() const;

  // The address of storage element 0 (not of the first element of the view).
  void* storage() const { return data_; }
  // The address of the view's first element: storage() + offset() elements.
  void* data() const { return static_cast<char*>(data_) + offset_ * ElementSize(dtype_); }
  template <typename T>
  T* data_as() const {
    return static_cast<T*>(data());
  }
  // Whether this view owns (shares ownership of) its memory.
  bool owns_memory() const { return owner_ != nullptr; }
  const std::shared_ptr<void>& owner() const { return owner_; }

  // A view of the same memory with other geometry; it shares this view's owner.
  Tensor AsStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides, int64_t offset) const;
  // Bytes from data() to one past the farthest element the view reaches (0 when empty).
  // Negative strides are not supported and count as 0.
  int64_t SpanBytes() const;
  // The single element of a one-element tensor as int64 (integers) or double (floats).
  int64_t ItemInt() const;
  double ItemDouble() const;

  // The elements in row-major logical order as doubles, and written from them (rounding
  // to the dtype). For tests and slow paths.
  std::vector<double> ToDoubles() const;
  void FromDoubles(absl::Span<const double> values) const;

  // "float32[2, 3] strides [3, 1]" for messages.
  std::string DebugString() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = v1::DTYPE_UNSPECIFIED;
  std::vector<int64_t> sizes_;
  std::vector<int64_t> strides_;
  int64_t offset_ = 0;
  std::shared_ptr<void> owner_;
  friend Tensor WithOwner(Tensor t, std::shared_ptr<void> owner);
};

// `t` sharing ownership of `owner` (which keeps t's memory alive).
Tensor WithOwner(Tensor t, std::shared_ptr<void> owner);

// Contiguous (row-major) strides for `sizes`.
std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> sizes);
int64_t NumElements(absl::Span<const int64_t> sizes);

// 64-byte aligned, zeroed memory of `bytes` bytes (at least 1), freed when the last
// reference goes.
std::shared_ptr<void> AllocateAligned(int64_t bytes);

// Copies `src` into `dst` element by element; both must have the same sizes. Converts
// between dtypes through double unless they are equal (then bytes are copied).
absl::Status CopyTensor(const Tensor& src, const Tensor& dst);

// Calls f(src_offset, dst_offset) for each element position of `sizes` in row-major order,
// with offsets in elements computed from the two stride vectors.
template <typename F>
void ForEachIndexPair(absl::Span<const int64_t> sizes, absl::Span<const int64_t> a_strides,
                      absl::Span<const int64_t> b_strides, F f) {
  const size_t rank = sizes.size();
  for (int64_t s : sizes) {
    if (s == 0) return;
  }
  std::vector<int64_t> idx(rank, 0);
  int64_t a = 0, b = 0;
  while (true) {
    f(a, b);
    size_t d = rank;
    while (d > 0) {
      --d;
      if (++idx[d] < sizes[d]) {
        a += a_strides[d];
        b += b_strides[d];
        break;
      }
      a -= a_strides[d] * (sizes[d] - 1);
      b -= b_strides[d] * (sizes[d] - 1);
      idx[d] = 0;
      if (d == 0) return;
    }
    if (rank == 0) return;
  }
}

}  // namespace kiln::runtime
