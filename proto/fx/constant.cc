#include "proto/fx/constant.h"

#include <cstdint>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "proto/dtype.h"

namespace kiln::fx {
namespace {

template <typename T>
T Load(const std::string& bytes) {
  T v;
  std::memcpy(&v, bytes.data(), sizeof v);
  return v;
}

// The scalar argument holding a 0-d constant's value.
absl::Status ScalarOf(v1::DType dtype, const std::string& bytes, v1::Argument* out) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      out->set_float_value(Load<float>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_FLOAT64:
      out->set_float_value(Load<double>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_FLOAT16:
      out->set_float_value(Fp16ToFloat(Load<uint16_t>(bytes)));
      return absl::OkStatus();
    case v1::DTYPE_BFLOAT16:
      out->set_float_value(Bf16ToFloat(Load<uint16_t>(bytes)));
      return absl::OkStatus();
    case v1::DTYPE_INT64:
      out->set_int_value(Load<int64_t>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_INT32:
      out->set_int_value(Load<int32_t>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_INT16:
      out->set_int_value(Load<int16_t>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_INT8:
      out->set_int_value(Load<int8_t>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_UINT8:
      out->set_int_value(Load<uint8_t>(bytes));
      return absl::OkStatus();
    case v1::DTYPE_BOOL:
      out->set_bool_value(Load<uint8_t>(bytes) != 0);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("a ", DTypeName(dtype), " constant is not supported"));
  }
}

void AddKwarg(v1::Node* node, const char* name, const v1::Argument& value) {
  v1::NamedArgument* kw = node->add_kwargs();
  kw->set_name(name);
  *kw->mutable_value() = value;
}

}  // namespace

absl::Status ConstantAsCall(const v1::TensorMeta& meta, const std::optional<std::string>& bytes,
                            v1::Node* node) {
  int64_t elements = 1;
  v1::Argument sizes;
  for (const v1::SymInt& size : meta.sizes()) {
    if (size.kind_case() != v1::SymInt::kValue) {
      return absl::InvalidArgumentError("a constant must have concrete sizes");
    }
    elements *= size.value();
    sizes.mutable_list()->add_items()->set_int_value(size.value());
  }
  v1::Argument dtype, device;
  dtype.set_dtype(meta.dtype());
  *device.mutable_device() = meta.device();
  if (elements == 0) {
    node->set_target("aten.empty.memory_format");
    *node->add_args() = sizes;
  } else if (meta.sizes_size() == 0) {
    const int64_t size = ElementSize(meta.dtype());
    if (!bytes.has_value()) return absl::InvalidArgumentError("a 0-d constant needs its value");
    if (size == 0 || static_cast<int64_t>(bytes->size()) != size) {
      return absl::InvalidArgumentError(absl::StrCat("holds ", bytes->size(), " bytes, a ",
                                                     DTypeName(meta.dtype()), " holds ", size));
    }
    node->set_target("aten.scalar_tensor.default");
    if (absl::Status s = ScalarOf(meta.dtype(), *bytes, node->add_args()); !s.ok()) return s;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("a constant tensor of ", elements,
                     " elements (only empty and 0-d constants become calls)"));
  }
  AddKwarg(node, "dtype", dtype);
  AddKwarg(node, "device", device);
  return absl::OkStatus();
}

}  // namespace kiln::fx
