#pragma once

// The loop IR's typing, checked before code generation: an instruction whose operands do not
// have the types its opcode needs would reach LLVM ill-typed, where it can crash the compile
// worker (LLVM asserts nothing in release builds) instead of failing with an error that names
// it. The rules are those code generation relies on:
//  - operands are earlier instructions of the kernel;
//  - a binary op's operands have one type, which is its result's, except that comparisons
//    yield bool;
//  - a unary op's result has its operand's type, except that kIsNan and kIsInf yield bool;
//  - a select's condition is bool and both choices have its result's type;
//  - a store stores a value of its instruction's type; masks are bool; data-dependent index
//    terms are i64.

#include "absl/status/status.h"
#include "compiler/loop/ir.h"

namespace kiln::loop {

// OK when every kernel of `program` is well typed, else an INTERNAL error naming the kernel,
// the graph nodes it computes and the first instruction at fault.
absl::Status VerifyTypes(const Program& program);

}  // namespace kiln::loop
