#include "proto/base/int_expr.h"

#include <algorithm>
#include <cctype>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln {

// A recursive-descent parser emitting postfix code. Every construct that nests goes one
// level deeper, and depth is bounded (IntExpr::kMaxNesting) so hostile input cannot exhaust
// the stack.
class IntExprParser {
 public:
  IntExprParser(absl::string_view text, absl::Span<const std::string> symbols)
      : text_(text), symbols_(symbols) {}

  absl::Status Run(std::vector<IntExpr::Instr>& code) {
    code_ = &code;
    absl::Status s = Sum(0);
    if (!s.ok()) return s;
    SkipSpace();
    if (pos_ != text_.size()) return Error("unexpected text");
    return absl::OkStatus();
  }

 private:
  using Op = IntExpr::Op;
  static constexpr int kMaxDepth = IntExpr::kMaxNesting;

  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("symbolic expression \"", text_, "\": ", what, " at position ", pos_));
  }
  void SkipSpace() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool Accept(absl::string_view token) {
    SkipSpace();
    if (text_.substr(pos_, token.size()) == token) {
      pos_ += token.size();
      return true;
    }
    return false;
  }
  bool PeekIs(absl::string_view token) {
    SkipSpace();
    return text_.substr(pos_, token.size()) == token;
  }
  void Emit(Op op, int64_t arg = 0) { code_->push_back({op, arg}); }

  absl::Status Sum(int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    absl::Status s = Term(depth);
    if (!s.ok()) return s;
    while (true) {
      Op op;
      if (Accept("+")) {
        op = Op::kAdd;
      } else if (Accept("-")) {
        op = Op::kSub;
      } else {
        return absl::OkStatus();
      }
      s = Term(depth);
      if (!s.ok()) return s;
      Emit(op);
    }
  }

  absl::Status Term(int depth) {
    absl::Status s = Unary(depth);
    if (!s.ok()) return s;
    while (true) {
      Op op;
      if (PeekIs("**")) return absl::OkStatus();  // handled in Power
      if (Accept("*")) {
        op = Op::kMul;
      } else if (Accept("//")) {
        op = Op::kFloorDiv;
      } else if (Accept("%")) {
        op = Op::kMod;
      } else if (PeekIs("/")) {
        return Error("true division is not an integer operation");
      } else {
        return absl::OkStatus();
      }
      s = Unary(depth);
      if (!s.ok()) return s;
      Emit(op);
    }
  }

  absl::Status Unary(int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    if (Accept("-")) {
      absl::Status s = Unary(depth + 1);
      if (!s.ok()) return s;
      Emit(Op::kNeg);
      return absl::OkStatus();
    }
    return Power(depth);
  }

  absl::Status Power(int depth) {
    absl::Status s = Primary(depth);
    if (!s.ok()) return s;
    if (Accept("**")) {
      s = Unary(depth + 1);
      if (!s.ok()) return s;
      Emit(Op::kPow);
    }
    return absl::OkStatus();
  }

  // Parses "(" sum { "," sum } ")" after a function name; returns the argument count.
  absl::StatusOr<int> Arguments(int depth) {
    if (!Accept("(")) return Error("expected '('");
    int count = 0;
    do {
      absl::Status s = Sum(depth + 1);
      if (!s.ok()) return s;
      ++count;
    } while (Accept(","));
    if (!Accept(")")) return Error("expected ')'");
    return count;
  }

  absl::Status Function(absl::string_view name, int depth) {
    struct Fixed {
      absl::string_view name;
      Op op;
      int arity;
    };
    static constexpr Fixed kFixed[] = {
        {"FloorDiv", Op::kFloorDiv, 2}, {"CleanDiv", Op::kFloorDiv, 2},
        {"CeilDiv", Op::kCeilDiv, 2},   {"Mod", Op::kMod, 2},
        {"PythonMod", Op::kMod, 2},     {"PowByNatural", Op::kPow, 2},
        {"Abs", Op::kAbs, 1},           {"abs", Op::kAbs, 1},
    };
    for (const Fixed& f : kFixed) {
      if (name != f.name) continue;
      absl::StatusOr<int> n = Arguments(depth);
      if (!n.ok()) return n.status();
      if (*n != f.arity) return Error(absl::StrCat(name, " takes ", f.arity, " arguments"));
      Emit(f.op);
      return absl::OkStatus();
    }
    if (name == "Max" || name == "max" || name == "Min" || name == "min") {
      absl::StatusOr<int> n = Arguments(depth);
      if (!n.ok()) return n.status();
      Emit(name[1] == 'a' ? Op::kMax : Op::kMin, *n);
      return absl::OkStatus();
    }
    if (name == "CeilToInt" || name == "FloorToInt") {
      // Only the integer quotient form is in the subset: CeilToInt(IntTrueDiv(a, b)).
      if (!Accept("(") || !Accept("IntTrueDiv")) {
        return Error(absl::StrCat(name, " is supported only around IntTrueDiv"));
      }
      absl::StatusOr<int> n = Arguments(depth);
      if (!n.ok()) return n.status();
      if (*n != 2) return Error("IntTrueDiv takes 2 arguments");
      if (!Accept(")")) return Error("expected ')'");
      Emit(name == "CeilToInt" ? Op::kCeilDiv : Op::kFloorDiv);
      return absl::OkStatus();
    }
    return Error(absl::StrCat("unsupported function ", name));
  }

  absl::Status Primary(int depth) {
    if (depth > kMaxDepth) return Error("nesting too deep");
    SkipSpace();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      absl::Status s = Sum(depth + 1);
      if (!s.ok()) return s;
      if (!Accept(")")) return Error("expected ')'");
      return absl::OkStatus();
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      const size_t start = pos_;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) ++pos_;
      if (pos_ < text_.size() && (text_[pos_] == '.' || text_[pos_] == 'e' || text_[pos_] == 'E')) {
        return Error("floats are not integer expressions");
      }
      int64_t v;
      if (!absl::SimpleAtoi(text_.substr(start, pos_ - start), &v)) {
        return Error("integer literal out of range");
      }
      Emit(Op::kConst, v);
      return absl::OkStatus();
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        ++pos_;
      }
      const absl::string_view name = text_.substr(start, pos_ - start);
      if (PeekIs("(")) return Function(name, depth);
      for (size_t i = 0; i < symbols_.size(); ++i) {
        if (symbols_[i] == name) {
          Emit(Op::kSymbol, static_cast<int64_t>(i));
          return absl::OkStatus();
        }
      }
      pos_ = start;
      return Error(absl::StrCat("unknown symbol ", name));
    }
    return Error(absl::StrCat("unexpected character '", absl::string_view(&c, 1), "'"));
  }

  absl::string_view text_;
  absl::Span<const std::string> symbols_;
  std::vector<IntExpr::Instr>* code_ = nullptr;
  size_t pos_ = 0;
};

IntExpr IntExpr::Constant(int64_t value) {
  IntExpr e;
  e.code_ = {{Op::kConst, value}};
  return e;
}

absl::StatusOr<IntExpr> IntExpr::Parse(absl::string_view text,
                                       absl::Span<const std::string> symbols) {
  IntExpr e;
  e.code_.clear();
  e.text_ = std::string(text);
  IntExprParser parser(e.text_, symbols);
  absl::Status s = parser.Run(e.code_);
  if (!s.ok()) return s;
  return e;
}

namespace {

// Both round the truncated quotient, which never overflows once b != 0 and
// (a, b) != (INT64_MIN, -1).
int64_t FloorDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

int64_t CeilDiv(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) == (b < 0))) ? q + 1 : q;
}

}  // namespace

absl::StatusOr<int64_t> IntExpr::Evaluate(absl::Span<const int64_t> values) const {
  absl::InlinedVector<int64_t, 16> stack;
  auto overflow = [&](absl::string_view what) {
    return absl::OutOfRangeError(absl::StrCat("symbolic expression \"", text_, "\": ", what));
  };
  for (const Instr& in : code_) {
    if (in.op == Op::kConst) {
      stack.push_back(in.arg);
      continue;
    }
    if (in.op == Op::kSymbol) {
      if (static_cast<size_t>(in.arg) >= values.size()) {
        return absl::InvalidArgumentError(
            absl::StrCat("symbolic expression \"", text_, "\": symbol ", in.arg, " unbound"));
      }
      stack.push_back(values[static_cast<size_t>(in.arg)]);
      continue;
    }
    if (in.op == Op::kNeg || in.op == Op::kAbs) {
      int64_t& a = stack.back();
      if (in.op == Op::kAbs && a >= 0) continue;
      if (a == INT64_MIN) return overflow("integer overflow");
      a = -a;
      continue;
    }
    if (in.op == Op::kMax || in.op == Op::kMin) {
      const size_t n = static_cast<size_t>(in.arg);
      int64_t r = stack[stack.size() - n];
      for (size_t i = stack.size() - n + 1; i < stack.size(); ++i) {
        r = in.op == Op::kMax ? std::max(r, stack[i]) : std::min(r, stack[i]);
      }
      stack.resize(stack.size() - n);
      stack.push_back(r);
      continue;
    }
    const int64_t b = stack.back();
    stack.pop_back();
    int64_t& a = stack.back();
    int64_t r = 0;
    switch (in.op) {
      case Op::kAdd:
        if (__builtin_add_overflow(a, b, &r)) return overflow("integer overflow");
        break;
      case Op::kSub:
        if (__builtin_sub_overflow(a, b, &r)) return overflow("integer overflow");
        break;
      case Op::kMul:
        if (__builtin_mul_overflow(a, b, &r)) return overflow("integer overflow");
        break;
      case Op::kFloorDiv:
      case Op::kCeilDiv:
      case Op::kMod:
        if (b == 0) return overflow("division by zero");
        if (a == INT64_MIN && b == -1) return overflow("integer overflow");
        if (in.op == Op::kFloorDiv) {
          r = FloorDiv(a, b);
        } else if (in.op == Op::kCeilDiv) {
          r = CeilDiv(a, b);
        } else {
          r = a - FloorDiv(a, b) * b;
        }
        break;
      case Op::kPow: {
        if (b < 0) return overflow("negative exponent");
        r = 1;
        for (int64_t i = 0; i < b; ++i) {
          if (__builtin_mul_overflow(r, a, &r)) return overflow("integer overflow");
          if (r == 0 || r == 1) break;  // further powers do not change 0 or 1
        }
        if (r == 1 && a == -1 && (b % 2) == 1) r = -1;
        break;
      }
      default:
        return absl::InternalError("bad instruction");
    }
    a = r;
  }
  return stack.back();
}

absl::StatusOr<int64_t> EvaluateIntExpr(
    absl::string_view text, const std::map<std::string, int64_t, std::less<>>& symbols) {
  std::vector<std::string> names;
  std::vector<int64_t> values;
  names.reserve(symbols.size());
  values.reserve(symbols.size());
  for (const auto& [name, value] : symbols) {
    names.push_back(name);
    values.push_back(value);
  }
  absl::StatusOr<IntExpr> e = IntExpr::Parse(text, names);
  if (!e.ok()) return e.status();
  return e->Evaluate(values);
}

}  // namespace kiln
