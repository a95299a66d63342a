// Print: the canonical text of an expression, and FormatValue.
//
// Every node prints with the fewest parentheses that make Parse rebuild the same tree.
// Chains parenthesize any operand that is itself a chain of the same level, so
// `(a + b) + c` and `a + b + c` (one chain of three) stay distinct. A negation of a
// non-negative literal prints as `-(5)`, because `-5` parses as the literal -5.

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <variant>

#include "absl/strings/str_cat.h"
#include "compiler/sym/expr.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::sym {
namespace {

// Binding strength, as in Python's grammar.
enum Prec : int {
  kPrecIfElse = 0,
  kPrecOr = 1,
  kPrecAnd = 2,
  kPrecNot = 3,
  kPrecCompare = 4,
  kPrecBitOr = 5,
  kPrecBitAnd = 6,
  kPrecSum = 7,
  kPrecProduct = 8,
  kPrecUnary = 9,
  kPrecPow = 10,
  kPrecAtom = 11,
};

int ChainPrec(ChainKind kind) {
  switch (kind) {
    case ChainKind::kSum:
      return kPrecSum;
    case ChainKind::kProduct:
      return kPrecProduct;
    case ChainKind::kCompare:
      return kPrecCompare;
    case ChainKind::kAnd:
      return kPrecAnd;
    case ChainKind::kOr:
      return kPrecOr;
    case ChainKind::kBitOr:
      return kPrecBitOr;
    case ChainKind::kBitAnd:
      return kPrecBitAnd;
  }
  return kPrecAtom;
}

absl::string_view ChainOpText(ChainOp op) {
  switch (op) {
    case ChainOp::kAdd:
      return " + ";
    case ChainOp::kSub:
      return " - ";
    case ChainOp::kMul:
      return "*";
    case ChainOp::kTrueDiv:
      return "/";
    case ChainOp::kFloorDiv:
      return " // ";
    case ChainOp::kMod:
      return " % ";
    case ChainOp::kEq:
      return " == ";
    case ChainOp::kNe:
      return " != ";
    case ChainOp::kLt:
      return " < ";
    case ChainOp::kLe:
      return " <= ";
    case ChainOp::kGt:
      return " > ";
    case ChainOp::kGe:
      return " >= ";
    case ChainOp::kBitOr:
      return " | ";
    case ChainOp::kBitAnd:
      return " & ";
  }
  return " ? ";
}

int PrecOf(const Expr::Node& n) {
  switch (n.kind) {
    case NodeKind::kInt:
      return n.int_value < 0 ? kPrecUnary : kPrecAtom;
    case NodeKind::kFloat:
      return std::signbit(n.float_value) ? kPrecUnary : kPrecAtom;
    case NodeKind::kNeg:
      return kPrecUnary;
    case NodeKind::kNot:
      return kPrecNot;
    case NodeKind::kPow:
      return kPrecPow;
    case NodeKind::kChain:
      return ChainPrec(static_cast<ChainKind>(n.op));
    case NodeKind::kIfElse:
      return kPrecIfElse;
    default:
      return kPrecAtom;
  }
}

void AppendFloat(double d, std::string* out) {
  if (std::isnan(d)) {
    out->append("nan");
    return;
  }
  if (std::isinf(d)) {
    out->append(d > 0 ? "inf" : "-inf");
    return;
  }
  // The shortest digits that read back to `d`, laid out as Python's repr does: positional
  // for exponents in [-4, 16), scientific otherwise, and always recognisably a float.
  char buf[64];
  auto result = std::to_chars(buf, buf + sizeof(buf), d, std::chars_format::scientific);
  absl::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  size_t e = sci.find('e');
  absl::string_view mantissa = sci.substr(0, e);
  int exponent = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+'), sci.data() + sci.size(), exponent);
  bool negative = !mantissa.empty() && mantissa[0] == '-';
  if (negative) mantissa.remove_prefix(1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits.push_back(c);
  }
  if (negative) out->push_back('-');
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out->append("0.");
      out->append(static_cast<size_t>(-exponent - 1), '0');
      out->append(digits);
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out->append(digits);
      out->append(static_cast<size_t>(exponent) + 1 - digits.size(), '0');
      out->append(".0");
    } else {
      out->append(digits, 0, static_cast<size_t>(exponent) + 1);
      out->push_back('.');
      out->append(digits, static_cast<size_t>(exponent) + 1, std::string::npos);
    }
    return;
  }
  out->push_back(digits[0]);
  if (digits.size() > 1) {
    out->push_back('.');
    out->append(digits, 1, std::string::npos);
  }
  const int magnitude = exponent < 0 ? -exponent : exponent;
  absl::StrAppend(out, exponent < 0 ? "e-" : "e+", magnitude < 10 ? "0" : "", magnitude);
}

class Printer {
 public:
  Printer(const Expr& expr, std::string* out) : expr_(expr), out_(*out) {}

  void Node(uint32_t index, int min_prec) {
    const Expr::Node& n = expr_.node(index);
    const bool parens = PrecOf(n) < min_prec;
    if (parens) out_.push_back('(');
    Body(n);
    if (parens) out_.push_back(')');
  }

 private:
  void Body(const Expr::Node& n) {
    switch (n.kind) {
      case NodeKind::kInt:
        absl::StrAppend(&out_, n.int_value);
        return;
      case NodeKind::kFloat:
        AppendFloat(n.float_value, &out_);
        return;
      case NodeKind::kBool:
        out_.append(n.int_value ? "True" : "False");
        return;
      case NodeKind::kInfinity:
        out_.append(static_cast<InfinityKind>(n.op) == InfinityKind::kIntOo ? "int_oo" : "oo");
        return;
      case NodeKind::kSymbol:
      case NodeKind::kInput:
        out_.append(expr_.name(n).data(), expr_.name(n).size());
        return;
      case NodeKind::kNeg: {
        out_.push_back('-');
        const Expr::Node& operand = expr_.node(expr_.child(n, 0));
        const bool literal = (operand.kind == NodeKind::kInt || operand.kind == NodeKind::kFloat) &&
                             PrecOf(operand) == kPrecAtom;
        Node(expr_.child(n, 0), literal ? kPrecAtom + 1 : kPrecUnary);
        return;
      }
      case NodeKind::kNot:
        out_.append("not ");
        Node(expr_.child(n, 0), kPrecNot);
        return;
      case NodeKind::kPow:
        Node(expr_.child(n, 0), kPrecAtom);
        out_.append("**");
        Node(expr_.child(n, 1), kPrecUnary);
        return;
      case NodeKind::kChain: {
        const auto kind = static_cast<ChainKind>(n.op);
        const int prec = ChainPrec(kind);
        for (uint32_t k = 0; k < n.count; ++k) {
          if (k > 0) {
            if (kind == ChainKind::kAnd) {
              out_.append(" and ");
            } else if (kind == ChainKind::kOr) {
              out_.append(" or ");
            } else {
              absl::string_view op = ChainOpText(expr_.chain_op(n, k - 1));
              out_.append(op.data(), op.size());
            }
          }
          Node(expr_.child(n, k), prec + 1);
        }
        return;
      }
      case NodeKind::kIfElse:
        Node(expr_.child(n, 0), kPrecOr);
        out_.append(" if ");
        Node(expr_.child(n, 1), kPrecOr);
        out_.append(" else ");
        Node(expr_.child(n, 2), kPrecIfElse);
        return;
      case NodeKind::kCall: {
        const auto function = static_cast<Function>(n.op);
        const absl::string_view name = InfoOf(function).name;
        out_.append(name.data(), name.size());
        out_.push_back('(');
        const bool piecewise = function == Function::kPiecewise;
        for (uint32_t k = 0; k < n.count; ++k) {
          if (k > 0) out_.append(", ");
          if (piecewise && k % 2 == 0) out_.push_back('(');
          Node(expr_.child(n, k), kPrecIfElse);
          if (piecewise && k % 2 == 1) out_.push_back(')');
        }
        out_.push_back(')');
        return;
      }
    }
  }

  const Expr& expr_;
  std::string& out_;
};

}  // namespace

std::string Print(const Expr& expr) {
  std::string out;
  out.reserve(expr.nodes().size() * 4);
  Printer(expr, &out).Node(expr.root(), kPrecIfElse);
  return out;
}

std::string FormatValue(const Value& value) {
  std::string out;
  if (const int64_t* i = std::get_if<int64_t>(&value)) {
    absl::StrAppend(&out, *i);
  } else if (const double* d = std::get_if<double>(&value)) {
    AppendFloat(*d, &out);
  } else {
    out = std::get<bool>(value) ? "True" : "False";
  }
  return out;
}

}  // namespace kiln::sym
