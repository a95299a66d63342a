#include "compiler/fuse/segments.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

namespace kiln::fuse {

using loop::Inst;
using loop::Kernel;
using loop::Opcode;

void PlaceInSegment(Kernel& k, int32_t start) {
  const int32_t n = static_cast<int32_t>(k.insts.size());
  if (k.segments.empty()) k.segments.push_back(0);
  // The new instructions cover the kernel's points, as does a segment they join.
  const int64_t all = k.parallel.empty() ? 1 : k.parallel[0].const_value();
  const bool narrowed = !k.segment_points.empty();
  const size_t count = k.segments.size();
  auto end_of = [&](size_t g) { return g + 1 < count ? k.segments[g + 1] : start; };
  std::vector<int32_t> segment_of(static_cast<size_t>(start), 0);
  for (size_t g = 0; g < count; ++g) {
    for (int32_t i = k.segments[g]; i < end_of(g); ++i) {
      segment_of[static_cast<size_t>(i)] = static_cast<int32_t>(g);
    }
  }
  std::vector<bool> used(count, false);
  for (int32_t i = start; i < n; ++i) {
    loop::ForEachOperand(k.insts[static_cast<size_t>(i)], [&](int32_t v) {
      if (v < start) used[static_cast<size_t>(segment_of[static_cast<size_t>(v)])] = true;
    });
  }
  const auto first_used = std::find(used.begin(), used.end(), true);
  if (first_used == used.end()) {
    k.segments.push_back(start);
    if (narrowed) k.segment_points.push_back(all);
    return;
  }
  const size_t lo = static_cast<size_t>(first_used - used.begin());
  // What the moved instructions (used segments and the new ones) and those they move past
  // store and touch.
  std::set<int32_t> moved_stores, moved_touches, passed_stores, passed_touches;
  auto note = [&](const Inst& in, std::set<int32_t>& stores, std::set<int32_t>& touches) {
    if (in.op == Opcode::kStore) stores.insert(in.buffer);
    if (in.op == Opcode::kLoad || in.op == Opcode::kStore) touches.insert(in.buffer);
  };
  for (int32_t i = k.segments[lo]; i < n; ++i) {
    const bool moved = i >= start || used[static_cast<size_t>(segment_of[static_cast<size_t>(i)])];
    note(k.insts[static_cast<size_t>(i)], moved ? moved_stores : passed_stores,
         moved ? moved_touches : passed_touches);
  }
  auto meets = [](const std::set<int32_t>& x, const std::set<int32_t>& y) {
    for (int32_t b : x) {
      if (y.count(b)) return true;
    }
    return false;
  };
  if (meets(moved_stores, passed_touches) || meets(passed_stores, moved_touches)) {
    k.segments.resize(lo + 1);
    if (narrowed) {
      k.segment_points.resize(lo + 1);
      k.segment_points[lo] = all;
    }
    if (k.segments.size() < 2) {
      k.segments.clear();
      k.segment_points.clear();
    }
    return;
  }
  // New order: the unused segments, then the used ones, then [start, n).
  std::vector<int32_t> order;
  std::vector<int32_t> segments;
  std::vector<int64_t> points;
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t g = 0; g < count; ++g) {
      if (used[g] != (pass == 1)) continue;
      if (pass == 0 || g == lo) {
        segments.push_back(static_cast<int32_t>(order.size()));
        if (narrowed) points.push_back(pass == 0 ? k.segment_points[g] : all);
      }
      for (int32_t i = k.segments[g]; i < end_of(g); ++i) order.push_back(i);
    }
  }
  for (int32_t i = start; i < n; ++i) order.push_back(i);
  std::vector<int32_t> position(static_cast<size_t>(n));
  for (size_t at = 0; at < order.size(); ++at) {
    position[static_cast<size_t>(order[at])] = static_cast<int32_t>(at);
  }
  std::vector<Inst> insts;
  insts.reserve(static_cast<size_t>(n));
  for (int32_t i : order) {
    Inst in = k.insts[static_cast<size_t>(i)];
    loop::RemapOperands(&in, position);
    insts.push_back(std::move(in));
  }
  k.insts = std::move(insts);
  k.segments = segments.size() < 2 ? std::vector<int32_t>{} : std::move(segments);
  k.segment_points = k.segments.empty() ? std::vector<int64_t>{} : std::move(points);
}

void AddSegments(Kernel& k, const Kernel& c, int32_t start) {
  const int64_t all = k.parallel[0].const_value();
  if (k.segments.empty()) k.segments.push_back(0);
  std::vector<int64_t> points = k.segment_points;
  points.resize(k.segments.size(), all);
  const std::vector<int32_t> own = c.segments.empty() ? std::vector<int32_t>{0} : c.segments;
  for (size_t g = 0; g < own.size(); ++g) {
    k.segments.push_back(start + own[g]);
    points.push_back(g < c.segment_points.size() ? c.segment_points[g] : all);
  }
  const bool narrowed =
      std::any_of(points.begin(), points.end(), [&](int64_t p) { return p != all; });
  k.segment_points = narrowed ? std::move(points) : std::vector<int64_t>{};
}

}  // namespace kiln::fuse
