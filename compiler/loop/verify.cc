#include "compiler/loop/verify.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::loop {
namespace {

bool IsComparison(Opcode op) { return op >= Opcode::kEq && op <= Opcode::kGe; }

// Why instruction `i` of `k` is ill typed, or "" when it is not.
std::string Fault(const Kernel& k, int32_t i) {
  const Inst& in = k.insts[static_cast<size_t>(i)];
  std::string bad;
  ForEachOperand(in, [&](int32_t v) {
    if (bad.empty() && v >= i) bad = absl::StrCat("uses %", v, ", which is not before it");
  });
  if (!bad.empty()) return bad;
  auto type = [&](int32_t v) { return k.insts[static_cast<size_t>(v)].type; };
  auto name = [](ScalarType t) { return ScalarTypeName(t); };
  if (in.mask >= 0 && type(in.mask) != ScalarType::kBool) {
    return absl::StrCat("its mask %", in.mask, " is ", name(type(in.mask)), ", not bool");
  }
  for (const DynIndex& d : in.dyn) {
    if (type(d.value) != ScalarType::kI64) {
      return absl::StrCat("its index term %", d.value, " is ", name(type(d.value)), ", not i64");
    }
  }
  if (IsBinary(in.op)) {
    if (type(in.a) != type(in.b)) {
      return absl::StrCat("its operands differ: %", in.a, " is ", name(type(in.a)), ", %", in.b,
                          " is ", name(type(in.b)));
    }
    const ScalarType want = IsComparison(in.op) ? ScalarType::kBool : type(in.a);
    if (in.type != want) return absl::StrCat("yields ", name(in.type), ", not ", name(want));
    return "";
  }
  if (IsUnary(in.op)) {
    const ScalarType want =
        in.op == Opcode::kIsNan || in.op == Opcode::kIsInf ? ScalarType::kBool : type(in.a);
    if (in.type != want) return absl::StrCat("yields ", name(in.type), ", not ", name(want));
    return "";
  }
  switch (in.op) {
    case Opcode::kSelect:
      if (type(in.a) != ScalarType::kBool) {
        return absl::StrCat("its condition %", in.a, " is ", name(type(in.a)), ", not bool");
      }
      if (type(in.b) != in.type || type(in.c) != in.type) {
        return absl::StrCat("chooses between ", name(type(in.b)), " and ", name(type(in.c)),
                            " for a ", name(in.type));
      }
      return "";
    case Opcode::kStore:
      if (type(in.a) != in.type) {
        return absl::StrCat("stores %", in.a, ", a ", name(type(in.a)), ", as ", name(in.type));
      }
      return "";
    default:
      return "";
  }
}

}  // namespace

absl::Status VerifyTypes(const Program& program) {
  for (size_t k = 0; k < program.kernels.size(); ++k) {
    const Kernel& kernel = program.kernels[k];
    for (size_t i = 0; i < kernel.insts.size(); ++i) {
      const std::string fault = Fault(kernel, static_cast<int32_t>(i));
      if (fault.empty()) continue;
      const Inst& in = kernel.insts[i];
      return absl::InternalError(
          absl::StrCat("kernel ", k, " (nodes ", absl::StrJoin(kernel.nodes, ","), "): %", i, " = ",
                       ScalarTypeName(in.type), " ", OpcodeName(in.op), " is ill typed: ", fault));
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::loop
