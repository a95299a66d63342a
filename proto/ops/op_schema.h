#pragma once

// The schema of one op: for an OpOverload target ("aten.addmm.default"), its parameters
// (name, type, optional, default, keyword-only, alias annotations) and what it returns, as
// the aten schema language writes them. ParseOpSchema reads that language; the registry
// (registry.h) holds the schemas Kiln knows.
//
// Pure data: no state, thread-safe.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace kiln::ops {

// The type of one parameter, as the aten schema language spells it.
enum class ArgType : uint8_t {
  kTensor,         // Tensor
  kTensorList,     // Tensor[]
  kOptTensorList,  // Tensor?[] (elements may be None)
  kInt,            // int
  kIntList,        // int[] / int[N]
  kSymInt,         // SymInt
  kSymIntList,     // SymInt[] / SymInt[N]
  kFloat,          // float
  kFloatList,      // float[]
  kScalar,         // Scalar (int, float, bool or a symbolic scalar)
  kBool,           // bool
  kBoolList,       // bool[N]
  kString,         // str
  kScalarType,     // ScalarType (a dtype)
  kDevice,         // Device
  kLayout,         // Layout
  kMemoryFormat,   // MemoryFormat
  kGenerator,      // Generator (Kiln accepts only None for it)
  kAny,            // anything (the tuple operand of operator.getitem)
};

// The printed name of `type` ("Tensor", "int[]", ...), for error messages.
absl::string_view ArgTypeName(ArgType type);

// A default value of a parameter, as the schema writes it, already classified.
struct DefaultValue {
  enum class Kind : uint8_t { kNone, kInt, kFloat, kBool, kString, kIntList, kBoolList, kEnum };
  Kind kind = Kind::kNone;
  int64_t int_value = 0;      // kInt, kBool (0/1), kEnum (the kiln.v1 enum number)
  double float_value = 0;     // kFloat
  std::string text;           // kString
  std::vector<int64_t> list;  // kIntList, kBoolList
};

struct ParamSchema {
  std::string name;
  ArgType type = ArgType::kAny;
  bool optional = false;      // `T?`: None is accepted
  bool keyword_only = false;  // after `*`
  // The alias set of `Tensor(a)`, `Tensor(a!)` or `Tensor(a -> *)`: "a"; empty when the
  // parameter carries no annotation. A result in the same set shares its storage.
  std::string alias_set;
  bool mutated = false;  // `Tensor(a!)`: the op writes this argument
  bool has_default = false;
  DefaultValue default_value;  // when has_default
};

// What a call returns.
enum class ReturnKind : uint8_t {
  kTensors,     // `num_returns` values (a tuple when num_returns != 1)
  kTensorList,  // Tensor[]: a list whose length depends on the arguments
  kScalar,      // a Python scalar (SymInt/Scalar/bool)
  kTuple,       // operator.getitem: whatever the selected element is
};

struct OpSchema {
  std::string target;  // "aten.add.Tensor"
  std::vector<ParamSchema> params;
  ReturnKind returns = ReturnKind::kTensors;
  int num_returns = 1;  // kTensors only
  // The names of the results where the schema gives them ("output", "logsumexp", ...), one
  // entry per result of a kTensors schema (empty strings where unnamed).
  std::vector<std::string> return_names;
  // The alias set of the (first) result, `Tensor(a)` or `Tensor(a)[]`: "a"; empty when the
  // results are fresh tensors.
  std::string return_alias_set;

  // The index of the parameter named `name`, or -1.
  int ParamIndex(absl::string_view name) const;
  // The index of the result named `name`, or -1.
  int ReturnIndex(absl::string_view name) const;
  // The parameter whose alias set the result shares (the tensor a view or an in-place op
  // returns), or -1 when the result is a fresh tensor.
  int ReturnAliasParam() const;
};

// Parses one schema in the aten schema language with the full target as its name:
// "aten.add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor".
// INVALID_ARGUMENT naming what is malformed.
absl::StatusOr<OpSchema> ParseOpSchema(absl::string_view text);

}  // namespace kiln::ops
