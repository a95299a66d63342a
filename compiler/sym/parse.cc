// Parse: a recursive-descent parser for the grammar documented in compiler/sym/expr.h.
//
// The lexer runs on demand (one token of lookahead, two where a minus sign may belong to a
// number literal), so parsing allocates only the tree's own arrays. Parse functions return
// a node index, or kFail after recording the first error; nesting is counted so that hostile
// input gets an error instead of exhausting the stack.

#include <charconv>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <utility>

#include "absl/container/inlined_vector.h"
#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "compiler/sym/expr.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::sym {
namespace {

constexpr uint32_t kFail = std::numeric_limits<uint32_t>::max();

enum class Tok : uint8_t {
  kEnd,
  kInt,
  kFloat,
  kName,   // identifiers and keywords, including dotted names such as math.floor
  kInput,  // L['tN']
  kLParen,
  kRParen,
  kComma,
  kPlus,
  kMinus,
  kStar,
  kStarStar,
  kSlash,
  kSlashSlash,
  kPercent,
  kEqEq,
  kNotEq,
  kLt,
  kLe,
  kGt,
  kGe,
  kAmp,    // &
  kPipe,   // |
  kTilde,  // ~
  kError,  // a character or literal that starts no valid token; `error` says why
};

struct Token {
  Tok kind = Tok::kEnd;
  uint32_t begin = 0;
  uint32_t end = 0;
  const char* error = nullptr;
};

bool IsIdentStart(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsIdentChar(char c) { return IsIdentStart(c) || IsDigit(c); }

struct NamedFunction {
  absl::string_view name;
  Function function;
};

// Sympy names first, then the names PyTorch's Python printer gives some of them.
constexpr NamedFunction kFunctionNames[] = {
    {"Eq", Function::kEq},
    {"Ne", Function::kNe},
    {"Lt", Function::kLt},
    {"Le", Function::kLe},
    {"Gt", Function::kGt},
    {"Ge", Function::kGe},
    {"And", Function::kAnd},
    {"Or", Function::kOr},
    {"Not", Function::kNot},
    {"Max", Function::kMax},
    {"Min", Function::kMin},
    {"Abs", Function::kAbs},
    {"FloorDiv", Function::kFloorDiv},
    {"CeilDiv", Function::kCeilDiv},
    {"Mod", Function::kMod},
    {"PythonMod", Function::kPythonMod},
    {"CleanDiv", Function::kCleanDiv},
    {"IntTrueDiv", Function::kIntTrueDiv},
    {"FloatTrueDiv", Function::kFloatTrueDiv},
    {"CeilToInt", Function::kCeilToInt},
    {"FloorToInt", Function::kFloorToInt},
    {"TruncToInt", Function::kTruncToInt},
    {"ToFloat", Function::kToFloat},
    {"PowByNatural", Function::kPowByNatural},
    {"FloatPow", Function::kFloatPow},
    {"Piecewise", Function::kPiecewise},
    {"RoundToInt", Function::kRoundToInt},
    {"RoundDecimal", Function::kRoundDecimal},
    {"TruncToFloat", Function::kTruncToFloat},
    {"Identity", Function::kIdentity},
    {"LShift", Function::kLShift},
    {"RShift", Function::kRShift},
    {"BitwiseFn_bitwise_and", Function::kBitwiseAnd},
    {"BitwiseFn_bitwise_or", Function::kBitwiseOr},
    {"IsNonOverlappingAndDenseIndicator", Function::kIsNonOverlappingAndDenseIndicator},
    {"OpaqueUnaryFn_sqrt", Function::kSqrt},
    {"OpaqueUnaryFn_cos", Function::kCos},
    {"OpaqueUnaryFn_cosh", Function::kCosh},
    {"OpaqueUnaryFn_sin", Function::kSin},
    {"OpaqueUnaryFn_sinh", Function::kSinh},
    {"OpaqueUnaryFn_tan", Function::kTan},
    {"OpaqueUnaryFn_tanh", Function::kTanh},
    {"OpaqueUnaryFn_asin", Function::kAsin},
    {"OpaqueUnaryFn_acos", Function::kAcos},
    {"OpaqueUnaryFn_atan", Function::kAtan},
    {"OpaqueUnaryFn_exp", Function::kExp},
    {"OpaqueUnaryFn_log", Function::kLog},
    {"OpaqueUnaryFn_asinh", Function::kAsinh},
    {"OpaqueUnaryFn_log2", Function::kLog2},
    // sympy's own floor and ceiling, which sympy's simplification can leave behind.
    {"floor", Function::kFloorToInt},
    {"ceiling", Function::kCeilToInt},
    {"max", Function::kMax},
    {"min", Function::kMin},
    {"abs", Function::kAbs},
    {"math.floor", Function::kFloorToInt},
    {"math.ceil", Function::kCeilToInt},
    {"math.trunc", Function::kTruncToInt},
    {"torch.sym_float", Function::kToFloat},
    {"round", Function::kRoundToInt},  // RoundDecimal with two arguments
    {"math.sqrt", Function::kSqrt},
    {"math.cos", Function::kCos},
    {"math.cosh", Function::kCosh},
    {"math.sin", Function::kSin},
    {"math.sinh", Function::kSinh},
    {"math.tan", Function::kTan},
    {"math.tanh", Function::kTanh},
    {"math.asin", Function::kAsin},
    {"math.acos", Function::kAcos},
    {"math.atan", Function::kAtan},
    {"math.exp", Function::kExp},
    {"math.log", Function::kLog},
    {"math.asinh", Function::kAsinh},
    {"math.log2", Function::kLog2},
};

// ShapeEnv's symbol prefixes (torch.utils._sympy.symbol): size, unbacked int, float and
// unbacked float symbols. Inductor's own prefixes never reach guards or graph metadata.
bool IsSymbolName(absl::string_view name) {
  size_t digits = 0;
  if (name.size() > 3 && name.substr(0, 3) == "zuf") {
    digits = 3;
  } else if (name.size() > 2 && name.substr(0, 2) == "zf") {
    digits = 2;
  } else if (name.size() > 1 && (name[0] == 's' || name[0] == 'u')) {
    digits = 1;
  } else {
    return false;
  }
  if (name[digits] == '0' && name.size() > digits + 1) return false;
  for (size_t i = digits; i < name.size(); ++i) {
    if (!IsDigit(name[i])) return false;
  }
  return true;
}

class Parser {
 public:
  explicit Parser(absl::string_view text) : text_(text) {}

  absl::StatusOr<ExprPtr> Run() {
    if (text_.size() > std::numeric_limits<uint32_t>::max() / 2) {
      return absl::InvalidArgumentError("expression text is too long");
    }
    auto expr = std::make_shared<Expr>();
    expr_ = expr.get();
    expr_->Reserve(text_.size());
    cur_ = Lex(0);
    uint32_t root = Expression();
    if (root != kFail && cur_.kind != Tok::kEnd) Fail(cur_, "expected end of input");
    if (!error_.ok()) return error_;
    return ExprPtr(std::move(expr));
  }

 private:
  // ---- Lexing ----

  Token Lex(uint32_t pos) const {
    while (pos < text_.size() && (text_[pos] == ' ' || text_[pos] == '\t')) ++pos;
    Token t;
    t.begin = pos;
    if (pos >= text_.size()) {
      t.kind = Tok::kEnd;
      t.end = pos;
      return t;
    }
    const char c = text_[pos];
    auto at = [&](uint32_t i) { return i < text_.size() ? text_[i] : '\0'; };
    auto op = [&](Tok kind, uint32_t len) {
      t.kind = kind;
      t.end = pos + len;
      return t;
    };
    if (IsDigit(c) || (c == '.' && IsDigit(at(pos + 1)))) return LexNumber(pos);
    if (IsIdentStart(c)) {
      uint32_t end = pos + 1;
      while (IsIdentChar(at(end))) ++end;
      if (end == pos + 1 && c == 'L' && at(end) == '[') return LexInput(pos);
      // Dotted names (math.floor, torch.sym_float) are one token.
      while (at(end) == '.' && IsIdentStart(at(end + 1))) {
        end += 2;
        while (IsIdentChar(at(end))) ++end;
      }
      return op(Tok::kName, end - pos);
    }
    switch (c) {
      case '(':
        return op(Tok::kLParen, 1);
      case ')':
        return op(Tok::kRParen, 1);
      case ',':
        return op(Tok::kComma, 1);
      case '+':
        return op(Tok::kPlus, 1);
      case '-':
        return op(Tok::kMinus, 1);
      case '*':
        return at(pos + 1) == '*' ? op(Tok::kStarStar, 2) : op(Tok::kStar, 1);
      case '/':
        return at(pos + 1) == '/' ? op(Tok::kSlashSlash, 2) : op(Tok::kSlash, 1);
      case '%':
        return op(Tok::kPercent, 1);
      case '&':
        return op(Tok::kAmp, 1);
      case '|':
        return op(Tok::kPipe, 1);
      case '~':
        return op(Tok::kTilde, 1);
      case '=':
        if (at(pos + 1) == '=') return op(Tok::kEqEq, 2);
        break;
      case '!':
        if (at(pos + 1) == '=') return op(Tok::kNotEq, 2);
        break;
      case '<':
        return at(pos + 1) == '=' ? op(Tok::kLe, 2) : op(Tok::kLt, 1);
      case '>':
        return at(pos + 1) == '=' ? op(Tok::kGe, 2) : op(Tok::kGt, 1);
      default:
        break;
    }
    t.kind = Tok::kError;
    t.end = pos + 1;
    t.error = "no token starts with this character";
    return t;
  }

  Token LexNumber(uint32_t pos) const {
    auto at = [&](uint32_t i) { return i < text_.size() ? text_[i] : '\0'; };
    Token t;
    t.begin = pos;
    t.kind = Tok::kInt;
    uint32_t end = pos;
    while (IsDigit(at(end))) ++end;
    if (at(end) == '.') {
      t.kind = Tok::kFloat;
      ++end;
      while (IsDigit(at(end))) ++end;
    }
    if (at(end) == 'e' || at(end) == 'E') {
      uint32_t exp = end + 1;
      if (at(exp) == '+' || at(exp) == '-') ++exp;
      if (IsDigit(at(exp))) {
        t.kind = Tok::kFloat;
        end = exp;
        while (IsDigit(at(end))) ++end;
      }
    }
    t.end = end;
    // "2s0", "1e", "1.5.2": a literal running into more letters, digits or dots.
    if (IsIdentChar(at(end)) || at(end) == '.') {
      while (IsIdentChar(at(t.end)) || at(t.end) == '.') ++t.end;
      t.kind = Tok::kError;
      t.error = "malformed number";
    } else if (t.kind == Tok::kInt && text_[pos] == '0' && end - pos > 1) {
      t.kind = Tok::kError;
      t.error = "integer literals have no leading zeros";
    }
    return t;
  }

  // Exactly L['tN'] with N a decimal without leading zeros.
  Token LexInput(uint32_t pos) const {
    Token t;
    t.begin = pos;
    absl::string_view rest = text_.substr(pos);
    uint32_t digits_begin = 4;  // after "L['t"
    uint32_t end = digits_begin;
    bool ok = rest.substr(0, 4) == "L['t";
    while (ok && end < rest.size() && IsDigit(rest[end])) ++end;
    ok = ok && end > digits_begin && rest.substr(end, 2) == "']" &&
         !(rest[digits_begin] == '0' && end > digits_begin + 1) && end - digits_begin <= 9;
    if (!ok) {
      const size_t close = rest.find(']');
      t.kind = Tok::kError;
      t.end = close == absl::string_view::npos ? static_cast<uint32_t>(text_.size())
                                               : pos + static_cast<uint32_t>(close) + 1;
      t.error = "malformed input reference; expected L['tN']";
      return t;
    }
    t.kind = Tok::kInput;
    t.end = pos + end + 2;
    return t;
  }

  absl::string_view TextOf(const Token& t) const { return text_.substr(t.begin, t.end - t.begin); }

  // ---- Errors ----

  uint32_t Fail(const Token& t, absl::string_view what) {
    if (!error_.ok()) return kFail;
    std::string token =
        t.kind == Tok::kEnd ? "end of input" : absl::StrCat("'", absl::CHexEscape(TextOf(t)), "'");
    if (t.kind == Tok::kError) {
      error_ = absl::InvalidArgumentError(
          absl::StrCat("position ", t.begin, ": ", t.error, ": ", token));
    } else {
      error_ = absl::InvalidArgumentError(
          absl::StrCat("position ", t.begin, ": unexpected ", token, "; ", what));
    }
    return kFail;
  }

  uint32_t FailAt(const Token& t, absl::string_view message) {
    if (!error_.ok()) return kFail;
    error_ = absl::InvalidArgumentError(absl::StrCat("position ", t.begin, ": ", message, " at '",
                                                     absl::CHexEscape(TextOf(t)), "'"));
    return kFail;
  }

  void Advance() { cur_ = Lex(cur_.end); }

  bool IsKeyword(absl::string_view word) const {
    return cur_.kind == Tok::kName && TextOf(cur_) == word;
  }

  // Counts one level of nesting; false (with the error recorded) past kMaxDepth.
  bool Enter() {
    if (++depth_ <= kMaxDepth) return true;
    FailAt(cur_, absl::StrCat("expression nests deeper than ", kMaxDepth, " levels"));
    return false;
  }
  void Leave() { --depth_; }

  // ---- Grammar ----

  uint32_t Expression() {
    if (!Enter()) return kFail;
    uint32_t result = Conditional();
    Leave();
    return result;
  }

  uint32_t Conditional() {
    uint32_t value = Disjunction();
    if (value == kFail || !IsKeyword("if")) return value;
    Advance();
    uint32_t cond = Disjunction();
    if (cond == kFail) return kFail;
    if (!IsKeyword("else")) return Fail(cur_, "expected 'else'");
    Advance();
    uint32_t otherwise = Expression();
    if (otherwise == kFail) return kFail;
    const uint32_t children[] = {value, cond, otherwise};
    return expr_->AddInner(NodeKind::kIfElse, 0, children, 3);
  }

  uint32_t Disjunction() { return LogicChain("or", ChainKind::kOr, &Parser::Conjunction); }
  uint32_t Conjunction() { return LogicChain("and", ChainKind::kAnd, &Parser::Inversion); }

  uint32_t LogicChain(absl::string_view word, ChainKind kind, uint32_t (Parser::*operand)()) {
    uint32_t first = (this->*operand)();
    if (first == kFail || !IsKeyword(word)) return first;
    absl::InlinedVector<uint32_t, 8> children = {first};
    while (IsKeyword(word)) {
      Advance();
      uint32_t next = (this->*operand)();
      if (next == kFail) return kFail;
      children.push_back(next);
    }
    return expr_->AddInner(NodeKind::kChain, static_cast<uint8_t>(kind), children.data(),
                           static_cast<uint32_t>(children.size()));
  }

  uint32_t Inversion() {
    if (!IsKeyword("not")) return Comparison();
    Advance();
    if (!Enter()) return kFail;
    uint32_t operand = Inversion();
    Leave();
    if (operand == kFail) return kFail;
    return expr_->AddInner(NodeKind::kNot, 0, &operand, 1);
  }

  // The operator `t` continues a chain of `kind` with, or false.
  static bool ChainOpOf(ChainKind kind, Tok t, ChainOp* op) {
    switch (kind) {
      case ChainKind::kSum:
        if (t == Tok::kPlus) return *op = ChainOp::kAdd, true;
        if (t == Tok::kMinus) return *op = ChainOp::kSub, true;
        return false;
      case ChainKind::kProduct:
        if (t == Tok::kStar) return *op = ChainOp::kMul, true;
        if (t == Tok::kSlash) return *op = ChainOp::kTrueDiv, true;
        if (t == Tok::kSlashSlash) return *op = ChainOp::kFloorDiv, true;
        if (t == Tok::kPercent) return *op = ChainOp::kMod, true;
        return false;
      case ChainKind::kCompare:
        if (t == Tok::kEqEq) return *op = ChainOp::kEq, true;
        if (t == Tok::kNotEq) return *op = ChainOp::kNe, true;
        if (t == Tok::kLt) return *op = ChainOp::kLt, true;
        if (t == Tok::kLe) return *op = ChainOp::kLe, true;
        if (t == Tok::kGt) return *op = ChainOp::kGt, true;
        if (t == Tok::kGe) return *op = ChainOp::kGe, true;
        return false;
      case ChainKind::kBitOr:
        if (t == Tok::kPipe) return *op = ChainOp::kBitOr, true;
        return false;
      case ChainKind::kBitAnd:
        if (t == Tok::kAmp) return *op = ChainOp::kBitAnd, true;
        return false;
      default:
        return false;
    }
  }

  uint32_t OperatorChain(ChainKind kind, uint32_t (Parser::*operand)()) {
    uint32_t first = (this->*operand)();
    ChainOp op;
    if (first == kFail || !ChainOpOf(kind, cur_.kind, &op)) return first;
    absl::InlinedVector<uint32_t, 8> children = {first};
    absl::InlinedVector<uint8_t, 8> ops;
    while (ChainOpOf(kind, cur_.kind, &op)) {
      Advance();
      uint32_t next = (this->*operand)();
      if (next == kFail) return kFail;
      children.push_back(next);
      ops.push_back(static_cast<uint8_t>(op));
    }
    return expr_->AddInner(NodeKind::kChain, static_cast<uint8_t>(kind), children.data(),
                           static_cast<uint32_t>(children.size()), ops.data(),
                           static_cast<uint32_t>(ops.size()));
  }

  uint32_t Comparison() { return OperatorChain(ChainKind::kCompare, &Parser::BitOr); }
  uint32_t BitOr() { return OperatorChain(ChainKind::kBitOr, &Parser::BitAnd); }
  uint32_t BitAnd() { return OperatorChain(ChainKind::kBitAnd, &Parser::Sum); }
  uint32_t Sum() { return OperatorChain(ChainKind::kSum, &Parser::Term); }
  uint32_t Term() { return OperatorChain(ChainKind::kProduct, &Parser::Factor); }

  uint32_t Factor() {
    if (cur_.kind == Tok::kTilde) {
      // sympy prints Not(x) as ~x; it never applies ~ to integers.
      Advance();
      if (!Enter()) return kFail;
      uint32_t operand = Factor();
      Leave();
      if (operand == kFail) return kFail;
      return expr_->AddInner(NodeKind::kCall, static_cast<uint8_t>(Function::kNot), &operand, 1);
    }
    if (cur_.kind != Tok::kMinus) return Power();
    Token number = Lex(cur_.end);
    if ((number.kind == Tok::kInt || number.kind == Tok::kFloat) &&
        Lex(number.end).kind != Tok::kStarStar) {
      Advance();
      return Number(/*negative=*/true);
    }
    Advance();
    if (!Enter()) return kFail;
    uint32_t operand = Factor();
    Leave();
    if (operand == kFail) return kFail;
    return expr_->AddInner(NodeKind::kNeg, 0, &operand, 1);
  }

  uint32_t Power() {
    uint32_t base = Primary();
    if (base == kFail || cur_.kind != Tok::kStarStar) return base;
    Advance();
    if (!Enter()) return kFail;
    uint32_t exponent = Factor();
    Leave();
    if (exponent == kFail) return kFail;
    const uint32_t children[] = {base, exponent};
    return expr_->AddInner(NodeKind::kPow, 0, children, 2);
  }

  // The number literal at cur_, negated when a minus sign preceded it.
  uint32_t Number(bool negative) {
    const Token t = cur_;
    absl::string_view digits = TextOf(t);
    Expr::Node n(NodeKind::kInt);
    if (t.kind == Tok::kInt) {
      uint64_t magnitude = 0;
      constexpr uint64_t kLimit = uint64_t{1} << 63;
      for (char c : digits) {
        uint64_t d = static_cast<uint64_t>(c - '0');
        if (magnitude > (kLimit - d) / 10) return FailAt(t, "integer literal out of range");
        magnitude = magnitude * 10 + d;
      }
      if (magnitude == kLimit && !negative) return FailAt(t, "integer literal out of range");
      n.int_value =
          negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    } else {
      double value = 0;
      auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
      if (ec != std::errc() || ptr != digits.data() + digits.size()) {
        return FailAt(t, "float literal out of range");
      }
      n.kind = NodeKind::kFloat;
      n.float_value = negative ? -value : value;
    }
    Advance();
    return expr_->AddLeaf(n);
  }

  uint32_t Primary() {
    switch (cur_.kind) {
      case Tok::kInt:
      case Tok::kFloat:
        return Number(/*negative=*/false);
      case Tok::kInput: {
        absl::string_view text = TextOf(cur_);
        int64_t index = 0;
        for (char c : text.substr(4, text.size() - 6)) index = index * 10 + (c - '0');
        Advance();
        return expr_->AddNamed(NodeKind::kInput, index, text);
      }
      case Tok::kLParen: {
        Advance();
        uint32_t inner = Expression();
        if (inner == kFail) return kFail;
        if (cur_.kind != Tok::kRParen) return Fail(cur_, "expected ')'");
        Advance();
        return inner;
      }
      case Tok::kName:
        return Name();
      default:
        return Fail(cur_, "expected an expression");
    }
  }

  uint32_t Name() {
    const Token t = cur_;
    absl::string_view name = TextOf(t);
    Expr::Node n(NodeKind::kBool);
    if (name == "True" || name == "False") {
      n.int_value = name == "True";
      Advance();
      return expr_->AddLeaf(n);
    }
    if (name == "oo" || name == "int_oo" || name == "math.inf") {
      n.kind = NodeKind::kInfinity;
      n.op = static_cast<uint8_t>(name == "int_oo" ? InfinityKind::kIntOo : InfinityKind::kOo);
      Advance();
      return expr_->AddLeaf(n);
    }
    if (IsSymbolName(name)) {
      Advance();
      return expr_->AddNamed(NodeKind::kSymbol, 0, name);
    }
    for (const NamedFunction& f : kFunctionNames) {
      if (f.name == name) {
        Advance();
        return Call(t, f.function);
      }
    }
    if (name == "and" || name == "or" || name == "not" || name == "if" || name == "else") {
      return Fail(t, "expected an expression");
    }
    return FailAt(t, "unknown name");
  }

  uint32_t Call(const Token& name, Function function) {
    if (cur_.kind != Tok::kLParen)
      return Fail(cur_, absl::StrCat("expected '(' after ", TextOf(name)));
    Advance();
    if (!Enter()) return kFail;
    absl::InlinedVector<uint32_t, 8> args;
    const bool piecewise = function == Function::kPiecewise;
    while (true) {
      if (piecewise) {
        if (cur_.kind != Tok::kLParen)
          return Fail(cur_, "expected '(' starting a (value, condition) pair");
        Advance();
        uint32_t value = Expression();
        if (value == kFail) return kFail;
        if (cur_.kind != Tok::kComma)
          return Fail(cur_, "expected ',' in a (value, condition) pair");
        Advance();
        uint32_t cond = Expression();
        if (cond == kFail) return kFail;
        if (cur_.kind != Tok::kRParen)
          return Fail(cur_, "expected ')' closing a (value, condition) pair");
        Advance();
        args.push_back(value);
        args.push_back(cond);
      } else {
        uint32_t arg = Expression();
        if (arg == kFail) return kFail;
        args.push_back(arg);
      }
      if (cur_.kind == Tok::kRParen) break;
      if (cur_.kind != Tok::kComma) return Fail(cur_, "expected ',' or ')'");
      Advance();
    }
    Leave();
    const int count = static_cast<int>(piecewise ? args.size() / 2 : args.size());
    if (TextOf(name) == "round" && count == 2) function = Function::kRoundDecimal;
    const FunctionInfo& info = InfoOf(function);
    if (count < info.min_args || (info.max_args != 0 && count > info.max_args)) {
      std::string expected = info.max_args == 0 ? absl::StrCat("at least ", info.min_args)
                             : info.min_args == info.max_args
                                 ? absl::StrCat(info.min_args)
                                 : absl::StrCat(info.min_args, " to ", info.max_args);
      return FailAt(name, absl::StrCat(info.name, " takes ", expected, " argument",
                                       expected == "1" ? "" : "s", ", got ", count));
    }
    if (function == Function::kIsNonOverlappingAndDenseIndicator && count % 2 != 0) {
      return FailAt(name, absl::StrCat(info.name,
                                       " takes sizes then strides, an even number of "
                                       "arguments, got ",
                                       count));
    }
    Advance();
    return expr_->AddInner(NodeKind::kCall, static_cast<uint8_t>(function), args.data(),
                           static_cast<uint32_t>(args.size()));
  }

  absl::string_view text_;
  Expr* expr_ = nullptr;
  Token cur_;
  int depth_ = 0;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<ExprPtr> Parse(absl::string_view text) { return Parser(text).Run(); }

}  // namespace kiln::sym
