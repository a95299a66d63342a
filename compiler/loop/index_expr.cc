#include "compiler/loop/index_expr.h"

#include <algorithm>
#include <limits>
#include <map>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "compiler/sym/expr_tree.h"

namespace kiln::loop {
namespace {

Atom MakeLeaf(Atom::Kind kind, int32_t id) {
  Atom a;
  a.kind = kind;
  a.id = id;
  a.key = absl::StrCat(kind == Atom::Kind::kVar ? "v" : "$", id);
  return a;
}

// The letter that starts the key of an atom with operands.
char KeyLetter(Atom::Kind kind) {
  switch (kind) {
    case Atom::Kind::kDiv:
      return 'D';
    case Atom::Kind::kMod:
      return 'M';
    case Atom::Kind::kCeilDiv:
      return 'C';
    case Atom::Kind::kMax:
      return 'X';
    case Atom::Kind::kMin:
      return 'N';
    default:
      return '?';
  }
}

Atom MakeBinary(Atom::Kind kind, IndexExpr x, IndexExpr d) {
  Atom a;
  a.kind = kind;
  a.key = absl::StrCat(std::string(1, KeyLetter(kind)), "(", x.key(), ";", d.key(), ")");
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

// The greatest common monomial of `a` and `b`: the gcd of their coefficients (positive) times
// the factors both have (as multisets).
Term CommonMonomial(const Term& a, const Term& b) {
  Term g;
  g.coef = std::gcd(a.coef < 0 ? -a.coef : a.coef, b.coef < 0 ? -b.coef : b.coef);
  std::vector<Atom> rest = b.factors;
  for (const Atom& f : a.factors) {
    auto it = std::find_if(rest.begin(), rest.end(), [&](const Atom& x) { return x.key == f.key; });
    if (it == rest.end()) continue;
    g.factors.push_back(f);
    rest.erase(it);
  }
  g.key = TermKey(g.factors);
  return g;
}

bool ExprMax(const IndexExpr& e, const VarExtents& extents, IndexExpr* max);

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
    case Atom::Kind::kDiv: {
      // Floor division by a positive constant does not decrease as its dividend grows.
      const IndexExpr& d = a.operands->second;
      IndexExpr dividend_max;
      if (!d.is_const() || d.const_value() <= 0 ||
          !ExprMax(a.operands->first, extents, &dividend_max)) {
        return false;
      }
      *max = IndexExpr::FloorDiv(dividend_max, d, extents);
      return true;
    }
    case Atom::Kind::kCeilDiv:
    case Atom::Kind::kMax:
    case Atom::Kind::kMin:
    case Atom::Kind::kOpaque:
      return false;
  }
  return false;
}

// The single atom `e` consists of (coefficient 1, one factor), or null.
const Atom* SoleAtom(const IndexExpr& e) {
  if (e.terms().size() != 1 || e.terms()[0].coef != 1 || e.terms()[0].factors.size() != 1) {
    return nullptr;
  }
  return &e.terms()[0].factors[0];
}

// The arguments of a Max or Min chain `e` (of `kind`), appended to `out`; `e` itself when it
// is not one.
void Flatten(Atom::Kind kind, const IndexExpr& e, std::vector<IndexExpr>* out) {
  const Atom* a = SoleAtom(e);
  if (a == nullptr || a->kind != kind) {
    out->push_back(e);
    return;
  }
  Flatten(kind, a->operands->first, out);
  Flatten(kind, a->operands->second, out);
}

// A range of values: bounds that hold for every value of the symbols (>= 0) and variables
// (inside their extents). An absent bound is unknown.
struct Range {
  std::optional<int64_t> lo, hi;
};

std::optional<int64_t> Add(std::optional<int64_t> a, std::optional<int64_t> b) {
  int64_t r;
  if (!a || !b || __builtin_add_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

std::optional<int64_t> Mul(std::optional<int64_t> a, std::optional<int64_t> b) {
  int64_t r;
  if (!a || !b || __builtin_mul_overflow(*a, *b, &r)) return std::nullopt;
  return r;
}

// Floor (or ceiling) of a / d for d > 0.
std::optional<int64_t> DivBound(std::optional<int64_t> a, int64_t d, bool ceil) {
  if (!a) return std::nullopt;
  int64_t q = *a / d;
  const int64_t r = *a % d;
  if (r != 0 && (r < 0) != ceil) q += ceil ? 1 : -1;
  return q;
}

Range RangeOf(const IndexExpr& e, const VarExtents& extents);

Range AtomRange(const Atom& a, const VarExtents& extents) {
  switch (a.kind) {
    case Atom::Kind::kVar: {
      const IndexExpr* e = extents ? extents(a.id) : nullptr;
      if (e == nullptr || !e->is_const()) return {0, std::nullopt};
      return {0, e->const_value() - 1};
    }
    case Atom::Kind::kSym:
      return {0, std::nullopt};
    case Atom::Kind::kDiv:
    case Atom::Kind::kCeilDiv:
    case Atom::Kind::kMod: {
      const Range x = RangeOf(a.operands->first, extents);
      const Range d = RangeOf(a.operands->second, extents);
      if (!d.lo || *d.lo < 1) return {};
      if (a.kind == Atom::Kind::kMod) {
        // Python's x % d lies in [0, d) for any x when d > 0.
        return {0, Add(d.hi, int64_t{-1})};
      }
      const bool ceil = a.kind == Atom::Kind::kCeilDiv;
      if (d.hi && *d.hi == *d.lo) return {DivBound(x.lo, *d.lo, ceil), DivBound(x.hi, *d.lo, ceil)};
      // A divisor known only to be >= 1 leaves a non-negative quotient between 0 and x.
      if (!x.lo || *x.lo < 0) return {};
      return {0, x.hi};
    }
    case Atom::Kind::kMax:
    case Atom::Kind::kMin: {
      const Range x = RangeOf(a.operands->first, extents);
      const Range y = RangeOf(a.operands->second, extents);
      const auto both = [](std::optional<int64_t> u, std::optional<int64_t> v, bool larger) {
        return u && v ? std::optional<int64_t>(larger ? std::max(*u, *v) : std::min(*u, *v))
                      : std::nullopt;
      };
      const auto either = [](std::optional<int64_t> u, std::optional<int64_t> v, bool larger) {
        if (!u) return v;
        if (!v) return u;
        return std::optional<int64_t>(larger ? std::max(*u, *v) : std::min(*u, *v));
      };
      if (a.kind == Atom::Kind::kMax) return {either(x.lo, y.lo, true), both(x.hi, y.hi, true)};
      return {both(x.lo, y.lo, false), either(x.hi, y.hi, false)};
    }
    case Atom::Kind::kOpaque:
      return {};
  }
  return {};
}

Range RangeOf(const IndexExpr& e, const VarExtents& extents) {
  Range sum{0, 0};
  for (const Term& t : e.terms()) {
    // The product of the factors: a single factor's range, or [0, ...] when all are >= 0.
    Range prod{1, 1};
    for (const Atom& a : t.factors) {
      const Range r = AtomRange(a, extents);
      if (t.factors.size() == 1) {
        prod = r;
      } else if (r.lo && *r.lo >= 0 && prod.lo && *prod.lo >= 0) {
        prod = {Mul(prod.lo, r.lo), Mul(prod.hi, r.hi)};
      } else {
        prod = {};
      }
    }
    const Range term = t.coef >= 0 ? Range{Mul(prod.lo, t.coef), Mul(prod.hi, t.coef)}
                                   : Range{Mul(prod.hi, t.coef), Mul(prod.lo, t.coef)};
    sum = {Add(sum.lo, term.lo), Add(sum.hi, term.hi)};
  }
  return sum;
}

// Whether a >= b for every value of the symbols and variables, as far as ranges show.
bool ProvablyAtLeast(const IndexExpr& a, const IndexExpr& b, const VarExtents& extents) {
  const Range r = RangeOf(a - b, extents);
  return r.lo && *r.lo >= 0;
}

// The names opaque atoms give symbol id `id` inside their expression.
std::string OpaqueSymbolName(int32_t id) { return absl::StrCat("s", id); }

int32_t OpaqueSymbolId(absl::string_view name) {
  int32_t id = -1;
  if (name.size() < 2 || !absl::SimpleAtoi(name.substr(1), &id)) return -1;
  return id;
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

IndexExpr IndexExpr::OfAtom(Atom a) {
  IndexExpr e;
  std::string key = a.key;
  e.terms_.push_back(Term{1, {std::move(a)}, std::move(key)});
  e.Normalize();
  return e;
}

absl::StatusOr<IndexExpr> IndexExpr::Opaque(
    const sym::Expr& expr, const std::function<int32_t(absl::string_view)>& sym_id) {
  std::map<std::string, std::string, std::less<>> renaming;
  for (const std::string& name : sym::FreeSymbols(expr)) {
    const int32_t id = absl::StartsWith(name, "L[") ? -1 : sym_id(name);
    if (id < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("`", sym::Print(expr), "` mentions ", name, ", which is not a symbol"));
    }
    renaming[name] = OpaqueSymbolName(id);
  }
  Atom a;
  a.kind = Atom::Kind::kOpaque;
  a.opaque = sym::RenameSymbols(expr, renaming);
  a.key = absl::StrCat("O(", sym::Print(*a.opaque), ")");
  return OfAtom(std::move(a));
}

bool IndexExpr::Computable() const {
  for (const Term& t : terms_) {
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kOpaque) return false;
      if (a.operands && (!a.operands->first.Computable() || !a.operands->second.Computable())) {
        return false;
      }
    }
  }
  return true;
}

IndexExpr IndexExpr::OfTerms(std::vector<Term> terms) {
  IndexExpr e;
  e.terms_ = std::move(terms);
  e.Normalize();
  return e;
}

void IndexExpr::CombineDivMod() {
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t i = 0; !changed && i < terms_.size(); ++i) {
      const Term& t = terms_[i];
      for (size_t f = 0; !changed && f < t.factors.size(); ++f) {
        const Atom& m = t.factors[f];
        if (m.kind != Atom::Kind::kMod) continue;
        const IndexExpr& x = m.operands->first;
        const IndexExpr& d = m.operands->second;
        if (d.terms_.size() != 1 || d.terms_[0].coef <= 0) continue;
        // The partner term: t with Mod(x, d) replaced by d * FloorDiv(x, d).
        Term partner;
        if (MulOverflows(t.coef, d.terms_[0].coef, &partner.coef)) continue;
        partner.factors = t.factors;
        partner.factors.erase(partner.factors.begin() + static_cast<std::ptrdiff_t>(f));
        std::vector<Atom> rest = partner.factors;
        partner.factors.push_back(MakeBinary(Atom::Kind::kDiv, x, d));
        for (const Atom& a : d.terms_[0].factors) partner.factors.push_back(a);
        std::sort(partner.factors.begin(), partner.factors.end(),
                  [](const Atom& a, const Atom& b) { return a.key < b.key; });
        partner.key = TermKey(partner.factors);
        auto it = std::find_if(terms_.begin(), terms_.end(), [&](const Term& u) {
          return u.key == partner.key && u.coef == partner.coef;
        });
        if (it == terms_.end()) continue;
        // c*rest*(d*(x // d) + x % d) = c*rest*x.
        const IndexExpr combined = OfTerms({Term{t.coef, std::move(rest), ""}}) * x;
        const size_t j = static_cast<size_t>(it - terms_.begin());
        std::vector<Term> terms;
        for (size_t k = 0; k < terms_.size(); ++k) {
          if (k != i && k != j) terms.push_back(terms_[k]);
        }
        terms.insert(terms.end(), combined.terms_.begin(), combined.terms_.end());
        terms_ = std::move(terms);
        Normalize();
        changed = true;
      }
    }
  }
}

bool IndexExpr::SplitByCommonFactor(const IndexExpr& a, const IndexExpr& d,
                                    const VarExtents& extents, IndexExpr* g, IndexExpr* rest,
                                    IndexExpr* big, IndexExpr* small) {
  if (d.terms_.size() != 1 || d.terms_[0].coef <= 0) return false;
  for (const Term& t : a.terms_) {
    const Term common = CommonMonomial(t, d.terms_[0]);
    if (common.coef == 1 && common.factors.empty()) continue;
    std::vector<Term> q, r;
    for (const Term& u : a.terms_) {
      Term qu;
      if (DivideTerm(u, common, &qu)) {
        q.push_back(std::move(qu));
      } else {
        r.push_back(u);
      }
    }
    IndexExpr gx = OfTerms({common});
    IndexExpr rx = OfTerms(std::move(r));
    if (!rx.ProvablyBelow(gx, extents)) continue;
    Term dq;
    DivideTerm(d.terms_[0], common, &dq);
    *g = std::move(gx);
    *rest = OfTerms({std::move(dq)});
    *big = OfTerms(std::move(q));
    *small = std::move(rx);
    return true;
  }
  return false;
}

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

namespace {

bool HasModTerm(const std::vector<Term>& terms) {
  for (const Term& t : terms) {
    for (const Atom& a : t.factors) {
      if (a.kind == Atom::Kind::kMod) return true;
    }
  }
  return false;
}

}  // namespace

IndexExpr operator+(const IndexExpr& a, const IndexExpr& b) {
  IndexExpr e;
  e.terms_ = a.terms_;
  e.terms_.insert(e.terms_.end(), b.terms_.begin(), b.terms_.end());
  e.Normalize();
  if (HasModTerm(e.terms_)) e.CombineDivMod();
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
  if (HasModTerm(e.terms_)) e.CombineDivMod();
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

namespace {

// An upper bound (inclusive) of `e` when every term's coefficient is >= 0 and every factor
// has a known maximum (atoms being non-negative, the largest of each product is the product
// of the largest); false otherwise.
bool ExprMax(const IndexExpr& e, const VarExtents& extents, IndexExpr* max) {
  IndexExpr sum;
  for (const Term& t : e.terms()) {
    if (t.coef < 0) return false;
    IndexExpr tm = IndexExpr::Const(t.coef);
    for (const Atom& a : t.factors) {
      IndexExpr am;
      if (!AtomMax(a, extents, &am)) return false;
      tm = tm * am;
    }
    sum = sum + tm;
  }
  *max = std::move(sum);
  return true;
}

}  // namespace

bool IndexExpr::ProvablyBelow(const IndexExpr& bound, const VarExtents& extents) const {
  IndexExpr max;
  return ExprMax(*this, extents, &max) && NonNegativeAtLeast(bound - max, 1);
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
    // (g*big + small) // (g*d') = big // d' when 0 <= small < g.
    IndexExpr g, rest, big, small;
    if (SplitByCommonFactor(r, d, extents, &g, &rest, &big, &small)) {
      return FloorDiv(big, rest, extents);
    }
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
  // (g*big + small) % (g*d') = g*(big % d') + small when 0 <= small < g.
  IndexExpr g, rest, big, small;
  if (SplitByCommonFactor(r, d, extents, &g, &rest, &big, &small)) {
    return g * Mod(big, rest, extents) + small;
  }
  IndexExpr e;
  Atom atom = MakeBinary(Atom::Kind::kMod, r, d);
  std::string key = atom.key;
  e.terms_.push_back(Term{1, {std::move(atom)}, std::move(key)});
  e.Normalize();
  return e;
}

IndexExpr IndexExpr::CeilDiv(const IndexExpr& a, const IndexExpr& d, const VarExtents& extents) {
  if (d.is_const() && d.const_value() == 1) return a;
  if (a.is_zero()) return a;
  if (a.is_const() && d.is_const() && d.const_value() > 0) {
    int64_t x = a.const_value(), y = d.const_value();
    int64_t q = x / y;
    if (x % y != 0 && x > 0) ++q;
    return Const(q);
  }
  IndexExpr r = a;
  if (d.terms_.size() == 1 && d.terms_[0].coef > 0) {
    // ceil((q*d + r) / d) == q + ceil(r / d) for every integer r.
    IndexExpr q;
    r = IndexExpr();
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
    if (r.is_zero()) return q;
    if (!q.is_zero()) return q + CeilDiv(r, d, extents);
  }
  if (d.is_const() && d.const_value() > 0) {
    // A remainder whose range lies within one multiple of d divides to a constant.
    const Range range = RangeOf(r, extents);
    const std::optional<int64_t> lo = DivBound(range.lo, d.const_value(), true);
    const std::optional<int64_t> hi = DivBound(range.hi, d.const_value(), true);
    if (lo && hi && *lo == *hi) return Const(*lo);
  }
  return OfAtom(MakeBinary(Atom::Kind::kCeilDiv, r, d));
}

IndexExpr IndexExpr::MinMax(Atom::Kind kind, absl::Span<const IndexExpr> args,
                            const VarExtents& extents) {
  std::vector<IndexExpr> flat;
  for (const IndexExpr& a : args) Flatten(kind, a, &flat);
  std::sort(flat.begin(), flat.end(),
            [](const IndexExpr& a, const IndexExpr& b) { return a.key() < b.key(); });
  flat.erase(std::unique(flat.begin(), flat.end()), flat.end());
  // An argument never decides when another one is always at least as large (Max) or as
  // small (Min). Among arguments that dominate each other, the last in key order stays.
  std::vector<bool> dropped(flat.size(), false);
  for (size_t i = 0; i < flat.size(); ++i) {
    for (size_t j = 0; j < flat.size() && !dropped[i]; ++j) {
      if (j == i || dropped[j]) continue;
      dropped[i] = kind == Atom::Kind::kMax ? ProvablyAtLeast(flat[j], flat[i], extents)
                                            : ProvablyAtLeast(flat[i], flat[j], extents);
    }
  }
  std::vector<IndexExpr> kept;
  for (size_t i = 0; i < flat.size(); ++i) {
    if (!dropped[i]) kept.push_back(std::move(flat[i]));
  }
  if (kept.empty()) return IndexExpr();  // no arguments at all
  IndexExpr chain = kept.back();
  for (size_t i = kept.size() - 1; i-- > 0;) chain = OfAtom(MakeBinary(kind, kept[i], chain));
  return chain;
}

IndexExpr IndexExpr::Max(absl::Span<const IndexExpr> args, const VarExtents& extents) {
  return MinMax(Atom::Kind::kMax, args, extents);
}

IndexExpr IndexExpr::Min(absl::Span<const IndexExpr> args, const VarExtents& extents) {
  return MinMax(Atom::Kind::kMin, args, extents);
}

namespace {

// An atom with operands rebuilt from operands that `map` rewrites, re-simplified.
IndexExpr Rebuild(const Atom& a, const std::function<IndexExpr(const IndexExpr&)>& map,
                  const VarExtents& extents) {
  switch (a.kind) {
    case Atom::Kind::kDiv:
      return IndexExpr::FloorDiv(map(a.operands->first), map(a.operands->second), extents);
    case Atom::Kind::kMod:
      return IndexExpr::Mod(map(a.operands->first), map(a.operands->second), extents);
    case Atom::Kind::kCeilDiv:
      return IndexExpr::CeilDiv(map(a.operands->first), map(a.operands->second), extents);
    case Atom::Kind::kMax:
    case Atom::Kind::kMin: {
      const IndexExpr args[] = {map(a.operands->first), map(a.operands->second)};
      return a.kind == Atom::Kind::kMax ? IndexExpr::Max(args, extents)
                                        : IndexExpr::Min(args, extents);
    }
    default:
      return IndexExpr();
  }
}

}  // namespace

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
        case Atom::Kind::kOpaque:
          prod = prod * OfAtom(a);
          break;
        default:
          prod = prod * Rebuild(
                            a, [&](const IndexExpr& e) { return e.SubstituteVars(map, extents); },
                            extents);
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
        case Atom::Kind::kOpaque: {
          std::map<std::string, std::string, std::less<>> renaming;
          for (const std::string& name : sym::FreeSymbols(*a.opaque)) {
            renaming[name] = OpaqueSymbolName(map(OpaqueSymbolId(name)));
          }
          Atom renamed;
          renamed.kind = Atom::Kind::kOpaque;
          renamed.opaque = sym::RenameSymbols(*a.opaque, renaming);
          renamed.key = absl::StrCat("O(", sym::Print(*renamed.opaque), ")");
          prod = prod * OfAtom(std::move(renamed));
          break;
        }
        default:
          prod = prod * Rebuild(
                            a, [&](const IndexExpr& e) { return e.RenameSyms(map); }, nullptr);
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
      } else if (a.kind == Atom::Kind::kOpaque) {
        for (const std::string& name : sym::FreeSymbols(*a.opaque)) {
          syms->push_back(OpaqueSymbolId(name));
        }
      } else if (a.operands) {
        a.operands->first.CollectSyms(syms);
        a.operands->second.CollectSyms(syms);
      }
    }
  }
}

namespace {

absl::Status Overflow() { return absl::OutOfRangeError("index expression overflow"); }

// x // d, x % d (Python's floor semantics) or ceil(x / d).
absl::StatusOr<int64_t> Divide(Atom::Kind kind, int64_t x, int64_t d) {
  if (d == 0) return absl::OutOfRangeError("division by zero in an index expression");
  if (d == -1) {
    if (kind == Atom::Kind::kMod) return 0;
    if (x == std::numeric_limits<int64_t>::min()) return Overflow();
    return -x;
  }
  int64_t q = x / d, r = x % d;
  if (kind == Atom::Kind::kCeilDiv) return r != 0 && (r < 0) == (d < 0) ? q + 1 : q;
  if (r != 0 && ((r < 0) != (d < 0))) {
    --q;
    r += d;
  }
  return kind == Atom::Kind::kDiv ? q : r;
}

}  // namespace

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
        case Atom::Kind::kOpaque: {
          sym::Bindings bindings;
          for (const std::string& name : sym::FreeSymbols(*a.opaque)) {
            const int32_t id = OpaqueSymbolId(name);
            if (id < 0 || static_cast<size_t>(id) >= syms.size()) {
              return absl::InvalidArgumentError(absl::StrCat("unbound symbol #", id));
            }
            bindings.symbols[name] = sym::Value(syms[static_cast<size_t>(id)]);
          }
          absl::StatusOr<int64_t> value = sym::EvaluateInt(*a.opaque, bindings);
          if (!value.ok()) return value.status();
          v = *value;
          break;
        }
        default: {
          auto x = a.operands->first.Evaluate(syms, vars);
          if (!x.ok()) return x.status();
          auto y = a.operands->second.Evaluate(syms, vars);
          if (!y.ok()) return y.status();
          if (a.kind == Atom::Kind::kMax || a.kind == Atom::Kind::kMin) {
            v = (a.kind == Atom::Kind::kMax) == (*x >= *y) ? *x : *y;
            break;
          }
          auto r = Divide(a.kind, *x, *y);
          if (!r.ok()) return r.status();
          v = *r;
          break;
        }
      }
      if (MulOverflows(prod, v, &prod)) return Overflow();
    }
    if (__builtin_add_overflow(sum, prod, &sum)) return Overflow();
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
    case Atom::Kind::kMod:
    case Atom::Kind::kCeilDiv:
      return absl::StrCat(a.kind == Atom::Kind::kDiv   ? "FloorDiv("
                          : a.kind == Atom::Kind::kMod ? "Mod("
                                                       : "CeilDiv(",
                          a.operands->first.ToString(names), ", ",
                          a.operands->second.ToString(names), ")");
    case Atom::Kind::kMax:
    case Atom::Kind::kMin: {
      std::vector<IndexExpr> args;
      Flatten(a.kind, a.operands->first, &args);
      Flatten(a.kind, a.operands->second, &args);
      std::string out = a.kind == Atom::Kind::kMax ? "Max(" : "Min(";
      for (size_t i = 0; i < args.size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", args[i].ToString(names));
      }
      return out + ")";
    }
    case Atom::Kind::kOpaque: {
      std::map<std::string, std::string, std::less<>> renaming;
      for (const std::string& name : sym::FreeSymbols(*a.opaque)) {
        const int32_t id = OpaqueSymbolId(name);
        if (id >= 0 && static_cast<size_t>(id) < names.size()) renaming[name] = names[id];
      }
      const sym::ExprPtr named = sym::RenameSymbols(*a.opaque, renaming);
      const std::string text = sym::Print(*named);
      // A factor of a product: anything but a call, a symbol or a non-negative literal
      // needs parentheses.
      const sym::Expr::Node& root = named->node(named->root());
      const bool atomic = root.kind == sym::NodeKind::kCall ||
                          root.kind == sym::NodeKind::kSymbol ||
                          (root.kind == sym::NodeKind::kInt && root.int_value >= 0);
      return atomic ? text : absl::StrCat("(", text, ")");
    }
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

}  // namespace kiln::loop
