#include "compiler/tools/check/compare.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"

namespace kiln::check {
namespace {

// PyTorch's factor for bfloat16 and float16 results (torch._dynamo.utils.same).
constexpr double kEagerErrorFactor = 3;

// Whether `actual` is within `bound` of `expected`: equal (infinities of one sign included),
// both NaN, or both finite and that close. An infinite expected value makes the bound
// infinite, and no finite value may pass for it.
bool Within(double expected, double actual, double bound) {
  if (expected == actual || (std::isnan(expected) && std::isnan(actual))) return true;
  if (!std::isfinite(expected) || !std::isfinite(actual)) return false;
  return std::fabs(expected - actual) <= bound;
}

// The least the second chance allows beyond eager's error, relative to the output's
// magnitude: PyTorch adds tol / 10 with tol 1e-2 for bfloat16 and float16 training. A float32
// output of such a graph (a loss, a norm's statistics) is made of values rounded to 8 or 11
// bits, and a single number's eager error is one draw: a loss eager happens to get within
// 3e-4 of exact is right at 2.8e-3 too, while a wrong kernel moves it by far more.
constexpr double kLowPrecisionFloor = 1e-3;

// The largest and the root-mean-square difference from `exact` over the elements where
// `exact` and `values` are both finite.
struct Distance {
  double max = 0;
  double rms = 0;
};

Distance DistanceFrom(const std::vector<double>& exact, const std::vector<double>& values) {
  Distance d;
  double squares = 0;
  size_t n = 0;
  for (size_t k = 0; k < exact.size(); ++k) {
    if (!std::isfinite(exact[k]) || !std::isfinite(values[k])) continue;
    const double diff = std::fabs(values[k] - exact[k]);
    d.max = std::max(d.max, diff);
    squares += diff * diff;
    ++n;
  }
  if (n > 0) d.rms = std::sqrt(squares / static_cast<double>(n));
  return d;
}

// The second chance of an output of a graph with bfloat16 or float16 values (see compare.h);
// `bound` holds each element's elementwise bound, `floor` the difference any output may
// have.
Verdict AsAccurateAsEager(const std::vector<double>& expected, const std::vector<double>& actual,
                          const std::vector<double>& exact, const std::vector<double>& bound,
                          double floor) {
  Verdict v;
  for (size_t k = 0; k < exact.size(); ++k) {
    const double x = expected[k], y = actual[k];
    const bool as_eager = (std::isnan(x) && std::isnan(y)) || x == y;
    if (std::isfinite(exact[k])) {
      // Finite where the exact value is, unless eager rounding overflowed there too.
      if (!std::isfinite(y) && !as_eager) {
        v.ok = false;
        v.worst = INFINITY;
        v.message = absl::StrCat("element ", k, " is ", y, " where the exact value is ", exact[k]);
        return v;
      }
      continue;
    }
    if (!Within(x, y, bound[k])) {
      v.ok = false;
      v.worst = INFINITY;
      v.message = absl::StrCat("element ", k, " is ", y, " where the exact value is ", exact[k]);
      return v;
    }
  }
  const Distance eager = DistanceFrom(exact, expected);
  const Distance compiled = DistanceFrom(exact, actual);
  const double max_allowed = kEagerErrorFactor * eager.max + floor;
  const double rms_allowed = kEagerErrorFactor * eager.rms + floor;
  auto ratio = [](double err, double allowed) {
    return allowed > 0 ? err / allowed : (err > 0 ? INFINITY : 0);
  };
  v.worst = std::max(ratio(compiled.max, max_allowed), ratio(compiled.rms, rms_allowed));
  if (compiled.max > max_allowed || compiled.rms > rms_allowed) {
    v.ok = false;
    v.message = absl::StrCat("off by ", compiled.max, " at most, ", compiled.rms,
                             " in rms, where eager rounding is off by ", eager.max, " and ",
                             eager.rms, " (allowed: ", kEagerErrorFactor, "x that + ", floor, ")");
  }
  return v;
}

}  // namespace

Verdict CompareTensor(const interp::Tensor& actual, const Expectation& e) {
  Verdict v;
  const std::vector<double> ev = e.expected.ToDoubles(), av = actual.ToDoubles();
  double scale = 0;
  for (double x : ev) {
    if (std::isfinite(x)) scale = std::max(scale, std::fabs(x));
  }
  std::vector<double> bound(ev.size());
  for (size_t k = 0; k < ev.size(); ++k) {
    const double x = ev[k], y = av[k];
    bound[k] = e.rtol * (std::fabs(x) * std::max(1.0, e.logit_scale) + scale);
    const double err = std::isfinite(x) && std::isfinite(y) ? std::fabs(x - y) : 0;
    if (!Within(x, y, bound[k])) {
      if (v.ok) {
        v.message = absl::StrCat(e.expected.DebugString(), " element ", k, ": got ", y,
                                 ", expected ", x, " (tolerance ", bound[k], ")");
      }
      v.ok = false;
      v.worst = std::max(v.worst, err > 0 && bound[k] > 0 ? err / bound[k] : INFINITY);
      continue;
    }
    if (err > 0) v.worst = std::max(v.worst, err / bound[k]);
  }
  if (v.ok || !e.exact.defined()) return v;
  const std::vector<double> xv = e.exact.ToDoubles();
  Verdict second =
      AsAccurateAsEager(ev, av, xv, bound, std::max(e.rtol, kLowPrecisionFloor) * scale);
  if (!second.ok) {
    second.message = absl::StrCat(v.message, "; from the exact value: ", second.message);
  }
  return second;
}

}  // namespace kiln::check
