#include "client/runtime/tensor.h"

#include <cstdlib>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/kernel_abi.h"

namespace kiln::runtime {

Tensor::Tensor(void* data, DType dtype, std::vector<int64_t> sizes, std::vector<int64_t> strides,
               int64_t offset)
    : data_(data),
      dtype_(dtype),
      sizes_(std::move(sizes)),
      strides_(std::move(strides)),
      offset_(offset) {}

Tensor Tensor::Wrap(void* data, DType dtype, std::vector<int64_t> sizes) {
  std::vector<int64_t> strides = ContiguousStrides(sizes);
  return Tensor(data, dtype, std::move(sizes), std::move(strides));
}

Tensor Tensor::Empty(std::vector<int64_t> sizes, DType dtype) {
  std::vector<int64_t> strides = ContiguousStrides(sizes);
  return EmptyStrided(std::move(sizes), std::move(strides), 0, dtype);
}

Tensor Tensor::EmptyStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int64_t offset, DType dtype) {
  int64_t extent = offset;
  bool empty = false;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) empty = true;
    extent += (sizes[d] - 1) * strides[d];
  }
  const int64_t elements = empty ? offset : extent + 1;
  std::shared_ptr<void> owner = AllocateAligned(elements * ElementSize(dtype));
  Tensor t(owner.get(), dtype, std::move(sizes), std::move(strides), offset);
  t.owner_ = std::move(owner);
  return t;
}

Tensor Tensor::Scalar(int64_t value) {
  Tensor t = Empty({}, v1::DTYPE_INT64);
  *t.data_as<int64_t>() = value;
  return t;
}

int64_t Tensor::numel() const { return NumElements(sizes_); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t d = sizes_.size(); d-- > 0;) {
    if (sizes_[d] == 1) continue;
    if (strides_[d] != expected) return false;
    expected *= sizes_[d];
  }
  return true;
}

Tensor Tensor::AsStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                         int64_t offset) const {
  Tensor t(data_, dtype_, std::move(sizes), std::move(strides), offset);
  t.owner_ = owner_;
  return t;
}

int64_t Tensor::SpanBytes() const {
  int64_t last = 0;
  for (size_t d = 0; d < sizes_.size(); ++d) {
    if (sizes_[d] == 0) return 0;
    if (strides_[d] > 0) last += (sizes_[d] - 1) * strides_[d];
  }
  return (last + 1) * ElementSize(dtype_);
}

int64_t Tensor::ItemInt() const {
  if (dtype_ == v1::DTYPE_INT64) return *data_as<int64_t>();
  return static_cast<int64_t>(LoadAsDouble(data(), dtype_));
}

double Tensor::ItemDouble() const { return LoadAsDouble(data(), dtype_); }

std::vector<double> Tensor::ToDoubles() const {
  std::vector<double> out;
  out.reserve(static_cast<size_t>(numel()));
  const char* base = static_cast<const char*>(data());
  const int64_t es = ElementSize(dtype_);
  ForEachIndexPair(sizes_, strides_, strides_,
                   [&](int64_t a, int64_t) { out.push_back(LoadAsDouble(base + a * es, dtype_)); });
  return out;
}

void Tensor::FromDoubles(absl::Span<const double> values) const {
  char* base = static_cast<char*>(data());
  const int64_t es = ElementSize(dtype_);
  size_t i = 0;
  ForEachIndexPair(sizes_, strides_, strides_, [&](int64_t a, int64_t) {
    if (i < values.size()) StoreFromDouble(base + a * es, dtype_, values[i++]);
  });
}

std::string Tensor::DebugString() const {
  if (!defined()) return "undefined";
  return absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(sizes_, ", "), "] strides [",
                      absl::StrJoin(strides_, ", "), "]");
}

Tensor WithOwner(Tensor t, std::shared_ptr<void> owner) {
  t.owner_ = std::move(owner);
  return t;
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    strides[d] = s;
    s *= std::max<int64_t>(sizes[d], 1);
  }
  return strides;
}

int64_t NumElements(absl::Span<const int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

std::shared_ptr<void> AllocateAligned(int64_t bytes) {
  // Round up so the size is a multiple of the alignment, as aligned_alloc requires.
  const size_t size = (static_cast<size_t>(std::max<int64_t>(bytes, 1)) + kBufferAlignment - 1) /
                      kBufferAlignment * kBufferAlignment;
  void* p = std::aligned_alloc(kBufferAlignment, size);
  if (p == nullptr) return nullptr;
  std::memset(p, 0, size);
  return std::shared_ptr<void>(p, [](void* q) { std::free(q); });
}

absl::Status CopyTensor(const Tensor& src, const Tensor& dst) {
  if (src.sizes() != dst.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat("copy: source ", src.DebugString(),
                                                   " and destination ", dst.DebugString(),
                                                   " differ in sizes"));
  }
  const char* s = static_cast<const char*>(src.data());
  char* d = static_cast<char*>(dst.data());
  const int64_t ses = src.element_size();
  const int64_t des = dst.element_size();
  if (src.dtype() == dst.dtype()) {
    if (src.is_contiguous() && dst.is_contiguous()) {
      std::memmove(d, s, static_cast<size_t>(src.numel() * ses));
      return absl::OkStatus();
    }
    ForEachIndexPair(src.sizes(), src.strides(), dst.strides(),
                     [&](int64_t a, int64_t b) { std::memcpy(d + b * des, s + a * ses, ses); });
    return absl::OkStatus();
  }
  ForEachIndexPair(src.sizes(), src.strides(), dst.strides(), [&](int64_t a, int64_t b) {
    StoreFromDouble(d + b * des, dst.dtype(), LoadAsDouble(s + a * ses, src.dtype()));
  });
  return absl::OkStatus();
}

}  // namespace kiln::runtime
