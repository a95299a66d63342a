#pragma once

// The op schemas Kiln knows: for each OpOverload target ("aten.addmm.default"), its
// parameters (name, type, optional, default, keyword-only) and what it returns. Import
// checks every call of a known op against its schema and binds keyword arguments to
// parameter slots; later phases look up ops here instead of comparing strings.
//
// The table is built once, on first use, from aten-style schema strings and is immutable
// afterwards: lookups are thread-safe and return pointers that live for the process.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace kiln::graph {

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
  bool mutated = false;       // `Tensor(a!)`: the op writes this argument
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
  // The op has effects beyond its outputs (collectives, random numbers, mutation): its
  // position relative to other such ops is part of its meaning.
  bool ordered = false;
  // The output views the storage of the first tensor argument (view, t, slice, ...).
  bool is_view = false;

  // The index of the parameter named `name`, or -1.
  int ParamIndex(absl::string_view name) const;
};

// The schema of `target`, or nullptr when Kiln does not know the op.
const OpSchema* FindOpSchema(absl::string_view target);

// Every known schema, sorted by target.
const std::vector<const OpSchema*>& AllOpSchemas();

}  // namespace kiln::graph
