// Fuzzes the symbolic expression parser: arbitrary bytes must parse or fail cleanly; what
// parses must print canonically (print, parse, print is a fixed point giving an equal
// tree) and evaluate without crashing, whatever the values.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/strings/string_view.h"
#include "compiler/sym/expr.h"

namespace {

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "sym_expr_fuzz: %s does not hold\n", what);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kiln::sym;
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<ExprPtr> first = Parse(text);
  if (!first.ok()) return 0;
  const std::string printed = Print(**first);
  absl::StatusOr<ExprPtr> second = Parse(printed);
  Check(second.ok(), "the canonical print parses");
  Check(Print(**second) == printed, "print, parse, print is a fixed point");
  Check(Equal(**first, **second), "the reparsed tree is equal");

  Bindings bindings;
  bindings.python_inputs = {"s0", ""};
  for (const int64_t v : {int64_t{0}, int64_t{-7}, int64_t{3}, INT64_MIN, INT64_MAX}) {
    for (const std::string& name : FreeSymbols(**first)) {
      if (name.rfind("zf", 0) == 0 || name.rfind("zuf", 0) == 0) {
        bindings.symbols[name] = Value(static_cast<double>(v) / 3);
      } else {
        bindings.symbols[name] = Value(v);
      }
    }
    bindings.symbols["s0"] = Value(v);
    (void)Evaluate(**first, bindings);
    (void)EvaluateInt(**second, bindings);
  }
  return 0;
}
