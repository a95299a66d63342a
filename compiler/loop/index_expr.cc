#include "compiler/loop/index_expr.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::loop {
namespace {

Atom MakeLeaf(Atom::Kind kind, int32_t id) {
  Atom a;
  a.kind = kind;
  a.id = id;
  a.key = absl::StrCat(kind == Atom::Kind::kVar ? "v" : "$", id);
  return a;
}

Atom MakeBinary(Atom::Kind kind, IndexExpr x, IndexExpr d) {
  Atom a;
  a.kind = kind;
  a.key = absl::StrCat(kind == Atom::Kind::kDiv ? "D(" : "M(", x.key(), ";", d.key(), ")");
  a.operands = std::make_shared<const std::pair<IndexExpr, IndexExpr>>(std::move(x), std::move(d));
  return a;
}

std::string TermKey(const std::vector<Atom>& factors) {
  std::string key;
  for (const Atom& a : factors) {
    if (!key.empty()) key += '*';
    key += a.key;
  }
  return key;
}

bool MulOverflows(int64_t a, int64_t b, int64_t* out) { return __builtin_mul_overflow(a, b, out); }

// Whether monomial `t` is divisible by monomial `d`: the coefficient divides and d's
// factors are a sub-multiset of t's. On success *q is t / d.
bool DivideTerm(const Term& t, const Term& d, Term* q) {
  if (d.coef == 0 || t.coef % d.coef != 0) return false;
  std::vector<Atom> rest = t.factors;
  for (const Atom& f : d.factors) {
    auto it = std::find_if(rest.begin(), rest.end(), [&](const Atom& a) { return a.key == f.key; });
    if (it == rest.end()) return false;
    rest.erase(it);
  }
  q->coef = t.coef / d.coef;
  q->factors = std::move(rest);
  q->key = TermKey(q->factors);
  return true;
}

// An upper bound (inclusive) of a non-negative atom, or false when none is known.
bool AtomMax(const Atom& a, const VarExtents& extents, IndexExpr* max) {
  switch (a.kind) {
    case Atom::Kind::kVar: {
      const IndexExpr* e = extents ? extents(a.id) : nullptr;
      if (e == nullptr) return false;
      *max = *e - IndexExpr::Const(1);
      return true;
    }
    case Atom::Kind::kSym:
      *max = IndexExpr::Sym(a.id);
      return true;
    case Atom::Kind::kMod:
      *max = a.operands->second - IndexExpr::Const(1);
      return true;
    case Atom::Kind::kDiv:
      return false;
  }
  return false;
}

// Whether every coefficient of a polynomial is >= 0 and its constant term >= `min_const`:
// then it is >= min_const for all non-negative symbols.
bool NonNegativeAtLeast(const IndexExpr& e, int64_t min_const) {
  int64_t c = 0;
  for (const Term& t : e.terms()) {
    if (t.key.empty()) {
      c = t.coef;
    } else if (t.coef < 0) {
      return false;
    } else {
      for (const Atom& a : t.factors) {
        if (a.kind != Atom::Kind::kSym) return false;
      }
    }
  }
  return c >= min_const;
}

}  // namespace

IndexExpr IndexExpr::Const(int64_t value) {
  IndexExpr e;
  if (value != 0) e.terms_.push_back(Term{value, {}, ""});
  e.Normalize();
  return e;
}

IndexExpr IndexExpr::Leaf(Atom::Kind kind, int32_t id) {
  IndexExpr e;
  Atom a = MakeLeaf(kind, id);
  std::string key = a.key;
  e.terms_.push_back(Term{1, {std::move(a)}, std::move(key)});
  e.Normalize();
  return e;
}

IndexExpr IndexExpr::Var(int32_t id) { return Leaf(Atom::Kind::kVar, id); }

IndexExpr IndexExpr::Sym(int32_t id) { return Leaf(Atom::Kind::kSym, id); }

void IndexExpr::Normalize() {
  for (Term& t : terms_) {
    std::sort(t.factors.begin(), t.factors.end(),
              [](const Atom& a, const Atom& b) { return a.key < b.key; });
    t.key = TermKey(t.factors);
  }
  std::sort(terms_.begin(), terms_.end(), [](const Term& a, const Term& b) {
    if (a.key.size() != b.key.size()) return a.key.size() > b.key.size();
    return a.key < b.key;
  });
  std::vector<Term> merged;
  for (Term& t : terms_) {
    if (!merged.empty() && merged.back().key == t.key) {
      merged.back().coef += t.coef;
    } else {
      merged.push_back(std::move(t));
    }
  }
  terms_.clear();
  for (Term& t : merged) {
    if (t.coef != 0) terms_.push_back(std::move(t));
  }
  if (terms_.empty()) {
    key_ = "0";
    return;
  }
  key_.clear();
  for (const Term& t : terms_) {
    if (!key_.empty()) key_ += '+';
    absl::StrAppend(&key_, t.coef);
    if (!t.key.empty()) absl::StrAppend(&key_, "*", t.key);
  }
}

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr e;
  e.terms_ = a.terms_;
  e.terms_.insert(e.terms_.end(), b.terms_.begin(), b.terms_.end());
  e.Normalize();
  return e;
}

IndexExpr operator-(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr e;
  e.terms_ = a.terms_;
  for (Term t : b.terms_) {
    t.coef = -t.coef;
    e.terms_.push_back(std::move(t));
  }
  e.Normalize();
  return e;
}

IndexExpr operator*(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr e;
  for (const Term& x : a.terms_) {
    for (const Term& y : b.terms_) {
      Term t;
      t.coef = x.coef * y.coef;
      t.factors = x.factors;
      t.factors.insert(t.factors.end(), y.factors.begin(), y.factors.end());
      e.terms_.push_back(std::move(t));
    }
  }
  e.Normalize();
  return e;
}

bool IndexExpr::ProvablyBelow(const IndexExpr& bound, const VarExtents& extents) const {
  // Upper bound of this: every term's coefficient >= 0 and factors with a known maximum.
  IndexExpr max;
  for (const Term& t : terms_) {
    if (t.coef < 0) return false;
    IndexExpr tm = Const(t.coef);
    for (const Atom& a : t.factors) {
      IndexExpr am;
      if (!AtomMax(a, extents, &am)) return false;
      tm = tm * am;
    }
    max = max + tm;
  }
  return NonNegativeAtLeast(bound - max, 1);
}

IndexExpr IndexExpr::FloorDiv(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents) {
  if (d.is_const() && d.const_value() == 1) return a;
  if (a.is_const() && d.is_const() && d.const_value() > 0) {
    int64_t x = a.const_value(), y = d.const_value();
    int64_t q = x / y;
    if ((x % y != 0) && ((x < 0) != (y < 0))) --q;
    return Const(q);
  }
  if (d.terms_.size() == 1 && d.terms_[0].coef > 0) {
    IndexExpr q, r;
    for (const Term& t : a.terms_) {
      Term qt;
      if (DivideTerm(t, d.terms_[0], &qt)) {
        q.terms_.push_back(std::move(qt));
      } else {
        r.terms_.push_back(t);
      }
    }
    q.Normalize();
    r.Normalize();
    if (r.is_zero() || r.ProvablyBelow(d, extents)) return q;
    if (!q.is_zero()) return q + FloorDiv(r, d, extents);
  }
  IndexExpr e;
  Atom atom = MakeBinary(Atom::Kind::kDiv, a, d);
  std::string key = atom.key;
  e.terms_.push_back(Term{1, {std::move(atom)}, std::move(key)});
  e.Normalize();
  return e;
}

IndexExpr IndexExpr::Mod(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents) {
  if (d.is_const() && d.const_value() == 1) return IndexExpr();
  if (a.is_const() && d.is_const() && d.const_value() > 0) {
    int64_t x = a.const_value(), y = d.const_value();
    int64_t r = x % y;
    if (r < 0) r += y;
    return Const(r);
  }
  IndexExpr r = a;
  if (d.terms_.size() == 1 && d.terms_[0].coef > 0) {
    r = IndexExpr();
    for (const Term& t : a.terms_) {
      Term qt;
      if (!DivideTerm(t, d.terms_[0], &qt)) r.terms_.push_back(t);
    }
    r.Normalize();
    if (r.is_zero()) return r;
  }
  if (r.ProvablyBelow(d, extents)) return r;
  IndexExpr e;
  Atom atom = MakeBinary(Atom::Kind::kMod, r, d);
  std::string key = atom.key;
  e.terms_.push_back(Term{1, {std::move(atom)}, std::move(key)});
  e.Normalize();
  return e;
}

IndexExpr IndexExpr::SubstituteVars(const std::function<IndexExpr(int32_t)>& map,
                                    const VarExtents& extents) const {
  IndexExpr out;
  for (const Term& t : terms_) {
    IndexExpr prod = Const(t.coef);
    for (const Atom& a : t.factors) {
      switch (a.kind) {
        case Atom::Kind::kVar:
          prod = prod * map(a.id);
          break;
        case Atom::Kind::kSym:
          prod = prod * Sym(a.id);
          break;
        case Atom::Kind::kDiv:
          prod = prod * FloorDiv(a.operands->first.SubstituteVars(map, extents),
                                 a.operands->second.SubstituteVars(map, extents), extents);
          break;
        case Atom::Kind::kMod:
          prod = prod * Mod(a.operands->first.SubstituteVars(map, extents),
                            a.operands->second.SubstituteVars(map, extents), extents);
          break;
      }
    }
    out = out + prod;
  }
  return out;
}

IndexExpr IndexExpr::RenameSyms(const std::function<int32_t(int32_t)>& map) const {
  IndexExpr out;
  for (const Term& t : terms_) {
    IndexExpr prod = Const(t.coef);
    for (const Atom& a : t.factors) {
      switch (a.kind) {
        case Atom::Kind::kVar:
          prod = prod * Var(a.id);
          break;
        case Atom::Kind::kSym:
          prod = prod * Sym(map(a.id));
          break;
        case Atom::Kind::kDiv:
          prod = prod * FloorDiv(a.operands->first.RenameSyms(map),
                                 a.operands->second.RenameSyms(map), nullptr);
          break;
        case Atom::Kind::kMod:
          prod = prod * Mod(a.operands->first.RenameSyms(map), a.operands->second.RenameSyms(map),
                            nullptr);
          break;
      }
    }
    out = out + prod;
  }
  return out;
}

bool IndexExpr::UsesVars() const {
  std::vector<int32_t> v;
  CollectVars(&v);
  return !v.empty();
}

void IndexExpr::CollectVars(std::vector<int32_t>* vars) const {
  for (const Term& t : terms_) {
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kVar) {
        vars->push_back(a.id);
      } else if (a.operands) {
        a.operands->first.CollectVars(vars);
        a.operands->second.CollectVars(vars);
      }
    }
  }
}

void IndexExpr::CollectSyms(std::vector<int32_t>* syms) const {
  for (const Term& t : terms_) {
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kSym) {
        syms->push_back(a.id);
      } else if (a.operands) {
        a.operands->first.CollectSyms(syms);
        a.operands->second.CollectSyms(syms);
      }
    }
  }
}

absl::StatusOr<int64_t> IndexExpr::Evaluate(absl::Span<const int64_t> syms,
                                            absl::Span<const int64_t> vars) const {
  int64_t sum = 0;
  for (const Term& t : terms_) {
    int64_t prod = t.coef;
    for (const Atom& a : t.factors) {
      int64_t v = 0;
      switch (a.kind) {
        case Atom::Kind::kVar:
          if (a.id < 0 || static_cast<size_t>(a.id) >= vars.size()) {
            return absl::InvalidArgumentError(absl::StrCat("unbound loop variable p", a.id));
          }
          v = vars[static_cast<size_t>(a.id)];
          break;
        case Atom::Kind::kSym:
          if (a.id < 0 || static_cast<size_t>(a.id) >= syms.size()) {
            return absl::InvalidArgumentError(absl::StrCat("unbound symbol #", a.id));
          }
          v = syms[static_cast<size_t>(a.id)];
          break;
        case Atom::Kind::kDiv:
        case Atom::Kind::kMod: {
          auto x = a.operands->first.Evaluate(syms, vars);
          if (!x.ok()) return x.status();
          auto d = a.operands->second.Evaluate(syms, vars);
          if (!d.ok()) return d.status();
          if (*d == 0) return absl::OutOfRangeError("division by zero in an index expression");
          int64_t q = *x / *d, r = *x % *d;
          if (r != 0 && ((r < 0) != (*d < 0))) {
            --q;
            r += *d;
          }
          v = a.kind == Atom::Kind::kDiv ? q : r;
          break;
        }
      }
      if (MulOverflows(prod, v, &prod)) return absl::OutOfRangeError("index expression overflow");
    }
    if (__builtin_add_overflow(sum, prod, &sum)) {
      return absl::OutOfRangeError("index expression overflow");
    }
  }
  return sum;
}

namespace {
std::string AtomText(const Atom& a, absl::Span<const std::string> names) {
  switch (a.kind) {
    case Atom::Kind::kVar:
      return absl::StrCat("p", a.id);
    case Atom::Kind::kSym:
      return a.id >= 0 && static_cast<size_t>(a.id) < names.size() ? names[a.id]
                                                                   : absl::StrCat("sym", a.id);
    case Atom::Kind::kDiv:
      return absl::StrCat("FloorDiv(", a.operands->first.ToString(names), ", ",
                          a.operands->second.ToString(names), ")");
    case Atom::Kind::kMod:
      return absl::StrCat("Mod(", a.operands->first.ToString(names), ", ",
                          a.operands->second.ToString(names), ")");
  }
  return "?";
}
}  // namespace

std::string IndexExpr::ToString(absl::Span<const std::string> sym_names) const {
  if (terms_.empty()) return "0";
  std::string out;
  // Terms with larger products first, the constant last, as sympy prints "128*s0 + 4".
  for (size_t i = 0; i < terms_.size(); ++i) {
    const Term& t = terms_[i];
    int64_t c = t.coef;
    if (i > 0) {
      out += c < 0 ? " - " : " + ";
      if (c < 0) c = -c;
    } else if (c < 0 && !t.factors.empty()) {
      out += "-";
      c = -c;
    }
    std::string factors;
    for (const Atom& a : t.factors) {
      if (!factors.empty()) factors += "*";
      factors += AtomText(a, sym_names);
    }
    if (factors.empty()) {
      absl::StrAppend(&out, c);
    } else if (c == 1) {
      out += factors;
    } else {
      absl::StrAppend(&out, c, "*", factors);
    }
  }
  return out;
}

// A small recursive-descent parser for the forms sizes and strides take.
namespace {
class Parser {
 public:
  Parser(absl::string_view text, const std::function<int32_t(absl::string_view)>& sym_id)
      : text_(text), sym_id_(sym_id) {}

  absl::StatusOr<IndexExpr> Parse() {
    auto e = Sum();
    if (!e.ok()) return e;
    Skip();
    if (pos_ != text_.size()) return Unsupported();
    return e;
  }

 private:
  absl::Status Unsupported() const {
    return absl::UnimplementedError(
        absl::StrCat("symbolic expression `", text_, "` is outside what the loop IR represents"));
  }
  void Skip() {
    while (pos_ < text_.size() && (text_[pos_] == ' ' || text_[pos_] == '\t')) ++pos_;
  }
  bool Eat(absl::string_view s) {
    Skip();
    if (text_.substr(pos_, s.size()) == s) {
      pos_ += s.size();
      return true;
    }
    return false;
  }
  absl::StatusOr<IndexExpr> Sum() {
    auto lhs = Product();
    if (!lhs.ok()) return lhs;
    IndexExpr e = *lhs;
    while (true) {
      if (Eat("+")) {
        auto r = Product();
        if (!r.ok()) return r;
        e = e + *r;
      } else if (Eat("-")) {
        auto r = Product();
        if (!r.ok()) return r;
        e = e - *r;
      } else {
        return e;
      }
    }
  }
  absl::StatusOr<IndexExpr> Product() {
    auto lhs = Unary();
    if (!lhs.ok()) return lhs;
    IndexExpr e = *lhs;
    while (true) {
      if (Eat("//")) {
        auto r = Unary();
        if (!r.ok()) return r;
        e = IndexExpr::FloorDiv(e, *r, nullptr);
      } else if (Eat("*")) {
        if (text_.substr(pos_, 1) == "*") return Unsupported();
        auto r = Unary();
        if (!r.ok()) return r;
        e = e * *r;
      } else if (Eat("%")) {
        auto r = Unary();
        if (!r.ok()) return r;
        e = IndexExpr::Mod(e, *r, nullptr);
      } else {
        return e;
      }
    }
  }
  absl::StatusOr<IndexExpr> Unary() {
    if (Eat("-")) {
      auto e = Unary();
      if (!e.ok()) return e;
      return IndexExpr() - *e;
    }
    return Primary();
  }
  absl::StatusOr<IndexExpr> Primary() {
    Skip();
    if (Eat("(")) {
      auto e = Sum();
      if (!e.ok()) return e;
      if (!Eat(")")) return Unsupported();
      return e;
    }
    for (absl::string_view fn : {"FloorDiv(", "Mod(", "PythonMod("}) {
      if (Eat(fn)) {
        auto a = Sum();
        if (!a.ok()) return a;
        if (!Eat(",")) return Unsupported();
        auto b = Sum();
        if (!b.ok()) return b;
        if (!Eat(")")) return Unsupported();
        return fn == "FloorDiv(" ? IndexExpr::FloorDiv(*a, *b, nullptr)
                                 : IndexExpr::Mod(*a, *b, nullptr);
      }
    }
    size_t start = pos_;
    if (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
      int64_t v = 0;
      while (pos_ < text_.size() && absl::ascii_isdigit(static_cast<unsigned char>(text_[pos_]))) {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, text_[pos_] - '0', &v)) {
          return Unsupported();
        }
        ++pos_;
      }
      return IndexExpr::Const(v);
    }
    while (pos_ < text_.size() &&
           (absl::ascii_isalnum(static_cast<unsigned char>(text_[pos_])) || text_[pos_] == '_')) {
      ++pos_;
    }
    if (pos_ == start) return Unsupported();
    int32_t id = sym_id_(text_.substr(start, pos_ - start));
    if (id < 0) return Unsupported();
    return IndexExpr::Sym(id);
  }

  absl::string_view text_;
  const std::function<int32_t(absl::string_view)>& sym_id_;
  size_t pos_ = 0;
};
}  // namespace

absl::StatusOr<IndexExpr> ParseIndexExpr(absl::string_view text,
                                         const std::function<int32_t(absl::string_view)>& sym_id) {
  return Parser(text, sym_id).Parse();
}

}  // namespace kiln::loop
