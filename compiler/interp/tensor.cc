#include "compiler/interp/tensor.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "proto/dtype.h"

namespace kiln::interp {
namespace {

thread_local int exact_float_depth = 0;

std::shared_ptr<Storage> NewStorage(int64_t n, DType dtype) {
  auto s = std::make_shared<Storage>();
  if (StoresInts(dtype)) {
    s->ints.assign(static_cast<size_t>(n), 0);
  } else {
    s->floats.assign(static_cast<size_t>(n), 0.0);
  }
  return s;
}

// Storage slots a layout needs: one past its farthest element.
int64_t Extent(absl::Span<const int64_t> sizes, absl::Span<const int64_t> strides, int64_t offset) {
  int64_t last = offset;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 0) return offset;
    last += (sizes[d] - 1) * strides[d];
  }
  return last + 1;
}

template <typename T>
T LoadLittleEndian(const char* p) {
  static_assert(std::endian::native == std::endian::little);
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// IEEE binary16: 1 sign, 5 exponent (bias 15) and 10 significand bits.
double HalfBitsToDouble(uint16_t h) {
  const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1F;
  const int significand = h & 0x3FF;
  if (exponent == 0x1F) {
    return significand != 0 ? std::numeric_limits<double>::quiet_NaN()
                            : sign * std::numeric_limits<double>::infinity();
  }
  if (exponent == 0) return sign * std::ldexp(significand, -24);
  return sign * std::ldexp(significand | 0x400, exponent - 25);
}

// bfloat16 is the upper half of a float32.
double BFloat16BitsToDouble(uint16_t b) {
  const uint32_t wide = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &wide, sizeof f);
  return f;
}

}  // namespace

absl::StatusOr<Tensor> TensorFromBytes(std::vector<int64_t> sizes, DType dtype,
                                       absl::string_view bytes) {
  const int64_t width = ElementSize(dtype);
  if (!IsSupported(dtype) || width == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(dtype), " is not supported"));
  }
  const int64_t n = NumElements(sizes);
  if (static_cast<int64_t>(bytes.size()) != n * width) {
    return absl::InvalidArgumentError(
        absl::StrCat(bytes.size(), " bytes do not hold ", n, " elements of ", DTypeName(dtype)));
  }
  Tensor t = Tensor::Zeros(std::move(sizes), dtype);
  for (int64_t i = 0; i < n; ++i) {
    const char* p = bytes.data() + i * width;
    switch (dtype) {
      case v1::DTYPE_FLOAT64:
        t.WriteDouble(i, LoadLittleEndian<double>(p));
        break;
      case v1::DTYPE_FLOAT32:
        t.WriteDouble(i, LoadLittleEndian<float>(p));
        break;
      case v1::DTYPE_FLOAT16:
        t.WriteDouble(i, HalfBitsToDouble(LoadLittleEndian<uint16_t>(p)));
        break;
      case v1::DTYPE_BFLOAT16:
        t.WriteDouble(i, BFloat16BitsToDouble(LoadLittleEndian<uint16_t>(p)));
        break;
      case v1::DTYPE_INT64:
        t.WriteInt(i, LoadLittleEndian<int64_t>(p));
        break;
      case v1::DTYPE_INT32:
        t.WriteInt(i, LoadLittleEndian<int32_t>(p));
        break;
      case v1::DTYPE_INT16:
        t.WriteInt(i, LoadLittleEndian<int16_t>(p));
        break;
      case v1::DTYPE_INT8:
        t.WriteInt(i, LoadLittleEndian<int8_t>(p));
        break;
      case v1::DTYPE_UINT32:
        t.WriteInt(i, LoadLittleEndian<uint32_t>(p));
        break;
      case v1::DTYPE_UINT16:
        t.WriteInt(i, LoadLittleEndian<uint16_t>(p));
        break;
      default:  // uint8 and bool: one byte
        t.WriteInt(i, LoadLittleEndian<uint8_t>(p));
        break;
    }
  }
  return t;
}

ExactFloatScope::ExactFloatScope() { ++exact_float_depth; }
ExactFloatScope::~ExactFloatScope() { --exact_float_depth; }

double RoundForWrite(double value, DType dtype) {
  if (exact_float_depth > 0 && IsFloating(dtype)) return value;
  return RoundToDType(value, dtype);
}

std::vector<int64_t> ContiguousStrides(absl::Span<const int64_t> sizes) {
  std::vector<int64_t> strides(sizes.size());
  int64_t s = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    strides[i] = s;
    s *= std::max<int64_t>(sizes[i], 1);
  }
  return strides;
}

int64_t NumElements(absl::Span<const int64_t> sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

Tensor Tensor::Zeros(std::vector<int64_t> sizes, DType dtype) {
  std::vector<int64_t> strides = ContiguousStrides(sizes);
  return ZerosStrided(std::move(sizes), std::move(strides), 0, dtype);
}

Tensor Tensor::ZerosStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                            int64_t offset, DType dtype) {
  Tensor t;
  t.storage_ = NewStorage(Extent(sizes, strides, offset), dtype);
  t.sizes_ = std::move(sizes);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::FromDoubles(std::vector<int64_t> sizes, DType dtype,
                           absl::Span<const double> values) {
  Tensor t = Zeros(std::move(sizes), dtype);
  for (size_t i = 0; i < values.size(); ++i) t.WriteDouble(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::FromInts(std::vector<int64_t> sizes, DType dtype, absl::Span<const int64_t> values) {
  Tensor t = Zeros(std::move(sizes), dtype);
  for (size_t i = 0; i < values.size(); ++i) t.WriteInt(static_cast<int64_t>(i), values[i]);
  return t;
}

Tensor Tensor::Scalar(double value, DType dtype) {
  Tensor t = Zeros({}, dtype);
  t.WriteDouble(0, value);
  return t;
}

int64_t Tensor::numel() const { return NumElements(sizes_); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes_.size(); i-- > 0;) {
    if (sizes_[i] == 1) continue;
    if (sizes_[i] == 0) return true;
    if (strides_[i] != expected) return false;
    expected *= sizes_[i];
  }
  return true;
}

bool Tensor::is_non_overlapping_and_dense() const {
  if (numel() == 0) return true;
  std::vector<size_t> perm(sizes_.size());
  std::iota(perm.begin(), perm.end(), 0);
  std::stable_sort(perm.begin(), perm.end(), [&](size_t a, size_t b) {
    if (sizes_[a] == 1 || sizes_[b] == 1) return false;
    return strides_[a] < strides_[b];
  });
  int64_t expected = 1;
  for (size_t p : perm) {
    if (sizes_[p] == 1) continue;
    if (strides_[p] != expected) return false;
    expected *= sizes_[p];
  }
  return true;
}

Tensor Tensor::AsStrided(std::vector<int64_t> sizes, std::vector<int64_t> strides,
                         int64_t offset) const {
  Tensor t = *this;
  t.sizes_ = std::move(sizes);
  t.strides_ = std::move(strides);
  t.offset_ = offset;
  return t;
}

int64_t Tensor::StorageSize() const {
  if (!storage_) return 0;
  return static_cast<int64_t>(StoresInts(dtype_) ? storage_->ints.size() : storage_->floats.size());
}

bool Tensor::InBounds() const {
  if (numel() == 0) return true;
  int64_t lo = offset_;
  int64_t hi = offset_;
  for (size_t d = 0; d < sizes_.size(); ++d) {
    const int64_t span = (sizes_[d] - 1) * strides_[d];
    if (span < 0) {
      lo += span;
    } else {
      hi += span;
    }
  }
  return lo >= 0 && hi < StorageSize();
}

double Tensor::ReadDouble(int64_t index) const {
  if (StoresInts(dtype_)) return static_cast<double>(storage_->ints[static_cast<size_t>(index)]);
  return storage_->floats[static_cast<size_t>(index)];
}

int64_t Tensor::ReadInt(int64_t index) const {
  if (StoresInts(dtype_)) return storage_->ints[static_cast<size_t>(index)];
  return DoubleToInt(storage_->floats[static_cast<size_t>(index)], v1::DTYPE_INT64);
}

void Tensor::WriteDouble(int64_t index, double value) {
  if (StoresInts(dtype_)) {
    storage_->ints[static_cast<size_t>(index)] = DoubleToInt(value, dtype_);
  } else {
    storage_->floats[static_cast<size_t>(index)] = RoundForWrite(value, dtype_);
  }
}

void Tensor::WriteInt(int64_t index, int64_t value) {
  if (StoresInts(dtype_)) {
    storage_->ints[static_cast<size_t>(index)] = WrapToDType(value, dtype_);
  } else {
    storage_->floats[static_cast<size_t>(index)] =
        RoundForWrite(static_cast<double>(value), dtype_);
  }
}

std::vector<int64_t> Tensor::ElementIndices() const {
  const int64_t n = numel();
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(n));
  if (n == 0) return out;
  const size_t nd = sizes_.size();
  std::vector<int64_t> idx(nd, 0);
  int64_t pos = offset_;
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(pos);
    for (size_t d = nd; d-- > 0;) {
      if (++idx[d] < sizes_[d]) {
        pos += strides_[d];
        break;
      }
      pos -= (sizes_[d] - 1) * strides_[d];
      idx[d] = 0;
    }
  }
  return out;
}

std::vector<double> Tensor::ToDoubles() const {
  std::vector<double> out;
  const std::vector<int64_t> idx = ElementIndices();
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(ReadDouble(i));
  return out;
}

std::vector<int64_t> Tensor::ToInts() const {
  std::vector<int64_t> out;
  const std::vector<int64_t> idx = ElementIndices();
  out.reserve(idx.size());
  for (int64_t i : idx) out.push_back(ReadInt(i));
  return out;
}

double Tensor::Item() const { return ReadDouble(offset_); }
int64_t Tensor::ItemInt() const { return ReadInt(offset_); }

Tensor Tensor::Contiguous() const { return To(dtype_); }

Tensor Tensor::To(DType dtype) const {
  Tensor out = Zeros(sizes_, dtype);
  out.CopyFrom(*this);
  return out;
}

Tensor Tensor::ClonePreserve(DType dtype) const {
  Tensor out = is_non_overlapping_and_dense() ? ZerosStrided(sizes_, strides_, 0, dtype)
                                              : Zeros(sizes_, dtype);
  out.CopyFrom(*this);
  return out;
}

Tensor Tensor::CloneStrided(std::vector<int64_t> strides, int64_t offset) const {
  Tensor out = ZerosStrided(sizes_, std::move(strides), offset, dtype_);
  out.CopyFrom(*this);
  return out;
}

void Tensor::CopyFrom(const Tensor& src) {
  // Broadcast src to this tensor's sizes with zero strides, aligned at the trailing dims.
  std::vector<int64_t> strides(sizes_.size(), 0);
  const size_t lead = sizes_.size() - src.sizes_.size();
  for (size_t d = 0; d < src.sizes_.size(); ++d) {
    strides[lead + d] = src.sizes_[d] == 1 ? 0 : src.strides_[d];
  }
  const Tensor from = src.AsStrided(sizes_, std::move(strides), src.offset_);
  const std::vector<int64_t> from_idx = from.ElementIndices();
  const std::vector<int64_t> to_idx = ElementIndices();
  // Read everything first: source and destination may share storage.
  if (StoresInts(src.dtype_) && StoresInts(dtype_)) {
    std::vector<int64_t> vals;
    vals.reserve(from_idx.size());
    for (int64_t i : from_idx) vals.push_back(src.ReadInt(i));
    for (size_t i = 0; i < to_idx.size(); ++i) WriteInt(to_idx[i], vals[i]);
  } else {
    std::vector<double> vals;
    vals.reserve(from_idx.size());
    for (int64_t i : from_idx) vals.push_back(src.ReadDouble(i));
    for (size_t i = 0; i < to_idx.size(); ++i) WriteDouble(to_idx[i], vals[i]);
  }
}

std::string Tensor::DebugString() const {
  if (!defined()) return "undefined";
  return absl::StrCat(DTypeName(dtype_), "[", absl::StrJoin(sizes_, ", "), "]");
}

}  // namespace kiln::interp
