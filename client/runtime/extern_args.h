#pragma once

// Reading an extern call's arguments by schema position or keyword. Internal to the
// runtime's extern ops: the first bad read is remembered, later reads return defaults,
// and the op checks ok() once, so argument handling stays short without exceptions.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/runtime/extern_ops.h"

namespace kiln::runtime {

class ArgReader {
 public:
  explicit ArgReader(const ExternCall& call) : call_(call) {}

  bool ok() const { return status_.ok(); }
  const absl::Status& status() const { return status_; }
  void Fail(absl::string_view message) {
    if (status_.ok()) status_ = absl::InvalidArgumentError(absl::StrCat(call_.op, ": ", message));
  }
  void FailUnimplemented(absl::string_view message) {
    if (status_.ok()) status_ = absl::UnimplementedError(absl::StrCat(call_.op, ": ", message));
  }
  template <typename... Args>
  bool Check(bool condition, const Args&... args) {
    if (!condition) Fail(absl::StrCat(args...));
    return condition;
  }

  // The argument at `pos` (or keyword `name`); nullptr when absent or None.
  const CallValue* Find(int pos, absl::string_view name) const {
    const CallValue* v = nullptr;
    if (pos >= 0 && static_cast<size_t>(pos) < call_.args.size()) {
      v = &call_.args[static_cast<size_t>(pos)];
    } else {
      for (const auto& [key, value] : call_.kwargs) {
        if (key == name) v = &value;
      }
    }
    return v == nullptr || v->is_none() ? nullptr : v;
  }

  Tensor GetTensor(int pos, absl::string_view name) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr || v->tensor() == nullptr) {
      Fail(absl::StrCat("argument ", name, " must be a tensor"));
      return Tensor();
    }
    return *v->tensor();
  }
  Tensor GetOptTensor(int pos, absl::string_view name) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return Tensor();
    if (v->tensor() == nullptr) Fail(absl::StrCat("argument ", name, " must be a tensor or None"));
    return v->tensor() != nullptr ? *v->tensor() : Tensor();
  }
  // A Tensor[] argument.
  std::vector<Tensor> GetTensors(int pos, absl::string_view name) {
    const CallValue* v = Find(pos, name);
    std::vector<Tensor> out;
    if (const auto* list = v == nullptr ? nullptr : std::get_if<CallValue::List>(&v->v)) {
      for (const CallValue& item : *list) {
        if (item.tensor() == nullptr) break;
        out.push_back(*item.tensor());
      }
      if (out.size() == list->size()) return out;
    }
    Fail(absl::StrCat("argument ", name, " must be a list of tensors"));
    return {};
  }
  int64_t GetInt(int pos, absl::string_view name, int64_t fallback) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return fallback;
    if (const auto* i = std::get_if<int64_t>(&v->v)) return *i;
    if (const auto* b = std::get_if<bool>(&v->v)) return *b ? 1 : 0;
    Fail(absl::StrCat("argument ", name, " must be an int"));
    return fallback;
  }
  double GetDouble(int pos, absl::string_view name, double fallback) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return fallback;
    if (const auto* d = std::get_if<double>(&v->v)) return *d;
    if (const auto* i = std::get_if<int64_t>(&v->v)) return static_cast<double>(*i);
    Fail(absl::StrCat("argument ", name, " must be a number"));
    return fallback;
  }
  bool GetBool(int pos, absl::string_view name, bool fallback) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return fallback;
    if (const auto* b = std::get_if<bool>(&v->v)) return *b;
    if (const auto* i = std::get_if<int64_t>(&v->v)) return *i != 0;
    Fail(absl::StrCat("argument ", name, " must be a bool"));
    return fallback;
  }
  std::string GetString(int pos, absl::string_view name, std::string fallback) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return fallback;
    if (const auto* s = std::get_if<std::string>(&v->v)) return *s;
    Fail(absl::StrCat("argument ", name, " must be a string"));
    return fallback;
  }
  // An int[] (a single int reads as a one-element list); absent gives `fallback`.
  std::vector<int64_t> GetInts(int pos, absl::string_view name, std::vector<int64_t> fallback) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return fallback;
    if (const auto* i = std::get_if<int64_t>(&v->v)) return {*i};
    if (std::optional<std::vector<int64_t>> out = ListOf<int64_t>(*v)) return *std::move(out);
    Fail(absl::StrCat("argument ", name, " must be a list of ints"));
    return fallback;
  }
  std::vector<bool> GetBools(int pos, absl::string_view name, std::vector<bool> fallback) {
    const CallValue* v = Find(pos, name);
    if (v == nullptr) return fallback;
    if (std::optional<std::vector<bool>> out = ListOf<bool>(*v)) return *std::move(out);
    Fail(absl::StrCat("argument ", name, " must be a list of bools"));
    return fallback;
  }

  // Result i's destination; undefined when the plan drops it.
  Tensor Output(size_t i) const { return i < call_.outputs.size() ? call_.outputs[i] : Tensor(); }
  // Checks that output i, when present, has `sizes` and `dtype`.
  bool CheckOutput(size_t i, const std::vector<int64_t>& sizes, DType dtype) {
    const Tensor out = Output(i);
    if (!out.defined()) return true;
    return Check(out.sizes() == sizes && out.dtype() == dtype, "output ", i, " is ",
                 out.DebugString(), ", expected ", DTypeName(dtype), "[",
                 absl::StrJoin(sizes, ", "), "]");
  }

 private:
  // `v` as a list whose every item is a T; nullopt when it is not one.
  template <typename T>
  static std::optional<std::vector<T>> ListOf(const CallValue& v) {
    const auto* list = std::get_if<CallValue::List>(&v.v);
    if (list == nullptr) return std::nullopt;
    std::vector<T> out;
    for (const CallValue& item : *list) {
      const auto* x = std::get_if<T>(&item.v);
      if (x == nullptr) return std::nullopt;
      out.push_back(*x);
    }
    return out;
  }

  const ExternCall& call_;
  absl::Status status_;
};

// Dense row-major copies in the compute type and back, for ops that work on packed data.
template <typename T>
std::vector<T> ToDense(const Tensor& t) {
  std::vector<T> out(static_cast<size_t>(t.numel()));
  if (!t.defined() || out.empty()) return out;
  const char* base = static_cast<const char*>(t.data());
  const int64_t es = t.element_size();
  size_t i = 0;
  if (t.dtype() == v1::DTYPE_FLOAT32) {
    ForEachIndexPair(t.sizes(), t.strides(), t.strides(), [&](int64_t a, int64_t) {
      out[i++] = static_cast<T>(reinterpret_cast<const float*>(base)[a]);
    });
  } else {
    ForEachIndexPair(t.sizes(), t.strides(), t.strides(), [&](int64_t a, int64_t) {
      out[i++] = static_cast<T>(LoadAsDouble(base + a * es, t.dtype()));
    });
  }
  return out;
}

template <typename T>
void FromDense(const T* values, const Tensor& t) {
  if (!t.defined()) return;
  char* base = static_cast<char*>(t.data());
  const int64_t es = t.element_size();
  size_t i = 0;
  if (t.dtype() == v1::DTYPE_FLOAT32) {
    ForEachIndexPair(t.sizes(), t.strides(), t.strides(), [&](int64_t a, int64_t) {
      reinterpret_cast<float*>(base)[a] = static_cast<float>(values[i++]);
    });
  } else {
    ForEachIndexPair(t.sizes(), t.strides(), t.strides(), [&](int64_t a, int64_t) {
      StoreFromDouble(base + a * es, t.dtype(), static_cast<double>(values[i++]));
    });
  }
}

}  // namespace kiln::runtime
