#include "compiler/interp/sym_eval.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::interp {
namespace {

int64_t FloorDivide(int64_t a, int64_t b) {
  int64_t q = a / b;
  if ((a % b != 0) && ((a < 0) != (b < 0))) --q;
  return q;
}

class Parser {
 public:
  Parser(absl::string_view text, const std::map<std::string, int64_t, std::less<>>& symbols)
      : text_(text), symbols_(symbols) {}

  absl::StatusOr<int64_t> Parse() {
    absl::StatusOr<int64_t> v = Sum();
    if (!v.ok()) return v;
    Skip();
    if (pos_ != text_.size()) return Error("unexpected character");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::InvalidArgumentError(
        absl::StrCat("size expression \"", text_, "\": ", what, " at position ", pos_));
  }

  void Skip() {
    while (pos_ < text_.size() && text_[pos_] == ' ') ++pos_;
  }

  bool Eat(absl::string_view token) {
    Skip();
    if (text_.substr(pos_, token.size()) == token) {
      pos_ += token.size();
      return true;
    }
    return false;
  }

  absl::StatusOr<int64_t> Sum() {
    absl::StatusOr<int64_t> acc = Product();
    while (acc.ok()) {
      if (Eat("+")) {
        absl::StatusOr<int64_t> r = Product();
        if (!r.ok()) return r;
        *acc += *r;
      } else if (Eat("-")) {
        absl::StatusOr<int64_t> r = Product();
        if (!r.ok()) return r;
        *acc -= *r;
      } else {
        break;
      }
    }
    return acc;
  }

  absl::StatusOr<int64_t> Product() {
    absl::StatusOr<int64_t> acc = Unary();
    while (acc.ok()) {
      if (Eat("//")) {
        absl::StatusOr<int64_t> r = Unary();
        if (!r.ok()) return r;
        if (*r == 0) return Error("division by zero");
        *acc = FloorDivide(*acc, *r);
      } else if (Eat("*")) {
        absl::StatusOr<int64_t> r = Unary();
        if (!r.ok()) return r;
        *acc *= *r;
      } else if (Eat("%")) {
        absl::StatusOr<int64_t> r = Unary();
        if (!r.ok()) return r;
        if (*r == 0) return Error("division by zero");
        *acc = *acc - FloorDivide(*acc, *r) * *r;
      } else {
        break;
      }
    }
    return acc;
  }

  absl::StatusOr<int64_t> Unary() {
    if (Eat("-")) {
      absl::StatusOr<int64_t> v = Unary();
      if (!v.ok()) return v;
      return -*v;
    }
    return Power();
  }

  absl::StatusOr<int64_t> Power() {
    absl::StatusOr<int64_t> base = Primary();
    if (!base.ok() || !Eat("**")) return base;
    absl::StatusOr<int64_t> exponent = Unary();
    if (!exponent.ok()) return exponent;
    if (*exponent < 0) return Error("negative exponent");
    int64_t r = 1;
    for (int64_t i = 0; i < *exponent; ++i) r *= *base;
    return r;
  }

  absl::StatusOr<int64_t> Primary() {
    Skip();
    if (pos_ >= text_.size()) return Error("unexpected end");
    const char c = text_[pos_];
    if (c == '(') {
      ++pos_;
      absl::StatusOr<int64_t> v = Sum();
      if (!v.ok()) return v;
      if (!Eat(")")) return Error("expected ')'");
      return v;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      int64_t v = 0;
      while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_]))) {
        v = v * 10 + (text_[pos_] - '0');
        ++pos_;
      }
      return v;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      const size_t start = pos_;
      while (pos_ < text_.size() &&
             (std::isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
        ++pos_;
      }
      const absl::string_view name = text_.substr(start, pos_ - start);
      if (Eat("(")) return Call(name);
      auto it = symbols_.find(name);
      if (it == symbols_.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("size expression \"", text_, "\": symbol ", name, " has no value"));
      }
      return it->second;
    }
    return Error("unexpected character");
  }

  absl::StatusOr<int64_t> Call(absl::string_view name) {
    // CeilToInt/FloorToInt of IntTrueDiv(a, b): the ceiling or floor of the exact quotient.
    if ((name == "CeilToInt" || name == "FloorToInt") && Eat("IntTrueDiv(")) {
      absl::StatusOr<int64_t> a = Sum();
      if (!a.ok()) return a;
      if (!Eat(",")) return Error("expected ','");
      absl::StatusOr<int64_t> b = Sum();
      if (!b.ok()) return b;
      if (!Eat(")") || !Eat(")")) return Error("expected ')'");
      if (*b == 0) return Error("division by zero");
      return name == "FloorToInt" ? FloorDivide(*a, *b) : -FloorDivide(-*a, *b);
    }
    std::vector<int64_t> args;
    if (!Eat(")")) {
      while (true) {
        absl::StatusOr<int64_t> v = Sum();
        if (!v.ok()) return v;
        args.push_back(*v);
        if (Eat(")")) break;
        if (!Eat(",")) return Error("expected ',' or ')'");
      }
    }
    if ((name == "Max" || name == "Min") && !args.empty()) {
      return name == "Max" ? *std::max_element(args.begin(), args.end())
                           : *std::min_element(args.begin(), args.end());
    }
    if (args.size() == 2 && (name == "FloorDiv" || name == "Mod" || name == "CeilDiv")) {
      if (args[1] == 0) return Error("division by zero");
      if (name == "FloorDiv") return FloorDivide(args[0], args[1]);
      if (name == "CeilDiv") return -FloorDivide(-args[0], args[1]);
      return args[0] - FloorDivide(args[0], args[1]) * args[1];
    }
    return Error(absl::StrCat("unsupported function ", name));
  }

  absl::string_view text_;
  const std::map<std::string, int64_t, std::less<>>& symbols_;
  size_t pos_ = 0;
};

}  // namespace

absl::StatusOr<int64_t> EvalSymInt(absl::string_view expr,
                                   const std::map<std::string, int64_t, std::less<>>& symbols) {
  return Parser(expr, symbols).Parse();
}

bool IsBareSymbol(absl::string_view expr) {
  if (expr.empty() || !std::isalpha(static_cast<unsigned char>(expr[0]))) return false;
  return std::all_of(expr.begin(), expr.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_';
  });
}

}  // namespace kiln::interp
