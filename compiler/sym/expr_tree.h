#pragma once

// The representation behind kiln::sym::Expr, shared by the parser, the evaluator and the
// printer. Not part of the public interface: callers use compiler/sym/expr.h. The one reader
// outside compiler/sym is the loop IR's index expressions (compiler/loop/index_expr*.cc),
// which convert trees into their own form and never build one.
//
// A tree is stored flat, in post-order: every node's children come before it and the root
// is the last node. Parse builds nodes in that order, so the layout is a function of the
// tree alone; equality is a walk over the arrays, and evaluation runs over them bottom-up
// without recursion.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "compiler/sym/expr.h"

namespace kiln::sym {

enum class NodeKind : uint8_t {
  kInt,       // int_value
  kFloat,     // float_value, always finite
  kBool,      // int_value is 0 or 1
  kInfinity,  // +infinity; op is an InfinityKind
  kSymbol,    // a ShapeEnv symbol; name in names_[first, first+count)
  kInput,     // L['tN']: int_value = N; text "L['tN']" in names_
  kNeg,       // unary minus; one child
  kNot,       // Python `not`; one child
  kPow,       // a**b; two children
  kChain,     // a left-to-right chain of one operator family; op is a ChainKind
  kIfElse,    // Python `a if c else b`; children (a, c, b)
  kCall,      // a sympy function; op is a Function; Piecewise children alternate expr, cond
};

enum class InfinityKind : uint8_t { kOo, kIntOo };

// A chain `x0 op1 x1 op2 x2 ...` of operators of one precedence level. Sum, product,
// comparison and bitwise chains keep one operator per link in Expr::ops_; `and`/`or` chains
// do not.
enum class ChainKind : uint8_t { kSum, kProduct, kCompare, kAnd, kOr, kBitOr, kBitAnd };

// Whether chains of `kind` keep their operators in Expr::ops_.
inline bool HasChainOps(ChainKind kind) {
  return kind != ChainKind::kAnd && kind != ChainKind::kOr;
}

// The operators of chains, as stored in Expr::ops_.
enum class ChainOp : uint8_t {
  kAdd,
  kSub,
  kMul,
  kTrueDiv,   // /
  kFloorDiv,  // //
  kMod,       // %
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kBitOr,   // |
  kBitAnd,  // &
};

enum class Function : uint8_t {
  kEq,
  kNe,
  kLt,
  kLe,
  kGt,
  kGe,
  kAnd,
  kOr,
  kNot,
  kMax,
  kMin,
  kAbs,
  kFloorDiv,
  kCeilDiv,
  kMod,
  kPythonMod,
  kCleanDiv,
  kIntTrueDiv,
  kFloatTrueDiv,
  kCeilToInt,
  kFloorToInt,
  kTruncToInt,
  kToFloat,
  kPowByNatural,
  kFloatPow,
  kPiecewise,
  kRoundToInt,
  kRoundDecimal,
  kTruncToFloat,
  kIdentity,
  kLShift,
  kRShift,
  kBitwiseAnd,
  kBitwiseOr,
  kIsNonOverlappingAndDenseIndicator,
  // OpaqueUnaryFn_<name>: Python's math.<name> on a float.
  kSqrt,
  kCos,
  kCosh,
  kSin,
  kSinh,
  kTan,
  kTanh,
  kAsin,
  kAcos,
  kAtan,
  kExp,
  kLog,
  kAsinh,
  kLog2,
};
inline constexpr size_t kNumFunctions = static_cast<size_t>(Function::kLog2) + 1;

// The name Print uses for a function, and the argument counts it takes (max_args 0: any
// number from min_args up).
struct FunctionInfo {
  absl::string_view name;
  int min_args;
  int max_args;
};
const FunctionInfo& InfoOf(Function f);

// How two values compare as Python compares numbers: ints and floats exactly, bools as 0
// and 1; anything against nan is unordered.
enum class Order { kLess, kEqual, kGreater, kUnordered };
Order CompareValues(const Value& a, const Value& b);

class Expr {
 public:
  struct Node {
    explicit Node(NodeKind k, uint8_t o = 0) : kind(k), op(o) {}
    NodeKind kind;
    uint8_t op = 0;      // InfinityKind, ChainKind or Function
    uint32_t first = 0;  // children: operands_[first, first+count); names: names_ offset
    uint32_t count = 0;
    union {
      int64_t int_value = 0;  // kInt, kBool, kInput; kChain: offset of its ops in ops_
      double float_value;     // kFloat
    };
  };

  const std::vector<Node>& nodes() const { return nodes_; }
  uint32_t root() const { return static_cast<uint32_t>(nodes_.size() - 1); }
  const Node& node(uint32_t i) const { return nodes_[i]; }
  uint32_t child(const Node& n, uint32_t k) const { return operands_[n.first + k]; }
  ChainOp chain_op(const Node& n, uint32_t link) const {
    return static_cast<ChainOp>(ops_[static_cast<size_t>(n.int_value) + link]);
  }
  absl::string_view name(const Node& n) const {
    return absl::string_view(names_).substr(n.first, n.count);
  }

  // Building, in post-order. Each returns the new node's index.
  uint32_t AddLeaf(const Node& n) {
    nodes_.push_back(n);
    return root();
  }
  uint32_t AddNamed(NodeKind kind, int64_t int_value, absl::string_view text) {
    Node n(kind);
    n.first = static_cast<uint32_t>(names_.size());
    n.count = static_cast<uint32_t>(text.size());
    n.int_value = int_value;
    names_.append(text.data(), text.size());
    return AddLeaf(n);
  }
  // `children` and `ops` are copied; chains pass one op per link (none for and/or).
  uint32_t AddInner(NodeKind kind, uint8_t op, const uint32_t* children, uint32_t count,
                    const uint8_t* ops = nullptr, uint32_t op_count = 0) {
    Node n(kind, op);
    n.first = static_cast<uint32_t>(operands_.size());
    n.count = count;
    operands_.insert(operands_.end(), children, children + count);
    if (kind == NodeKind::kChain) {
      n.int_value = static_cast<int64_t>(ops_.size());
      ops_.insert(ops_.end(), ops, ops + op_count);
    }
    nodes_.push_back(n);
    return root();
  }
  void Reserve(size_t text_size) {
    nodes_.reserve(text_size / 2 + 1);
    operands_.reserve(text_size / 2 + 1);
  }

  // A copy with symbol names replaced through `rename` (called with each symbol's name;
  // returns the new name, or the name itself to keep it).
  template <typename Rename>
  Expr WithNames(Rename rename) const {
    Expr out = *this;
    out.names_.clear();
    for (Node& n : out.nodes_) {
      if (n.kind != NodeKind::kSymbol && n.kind != NodeKind::kInput) continue;
      absl::string_view old_name = name(n);
      absl::string_view new_name = n.kind == NodeKind::kSymbol ? rename(old_name) : old_name;
      n.first = static_cast<uint32_t>(out.names_.size());
      n.count = static_cast<uint32_t>(new_name.size());
      out.names_.append(new_name.data(), new_name.size());
    }
    return out;
  }

  bool Equals(const Expr& other) const;

 private:
  std::vector<Node> nodes_;
  std::vector<uint32_t> operands_;
  std::vector<uint8_t> ops_;
  std::string names_;
};

}  // namespace kiln::sym
