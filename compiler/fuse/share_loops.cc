#include "compiler/fuse/share_loops.h"

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/casts.h"
#include "absl/strings/str_cat.h"

namespace kiln::fuse {
namespace {

using loop::Inst;
using loop::Kernel;
using loop::Opcode;

// Values a recomputed one may take from the stage it was computed in (RecomputeAcrossLoops).
constexpr size_t kMaxRecomputed = 200;

std::vector<int32_t> StageOf(const Kernel& k) {
  std::vector<int32_t> stage_of(k.insts.size(), -1);
  for (size_t s = 0; s < k.stages.size(); ++s) {
    for (int32_t i = k.stages[s].begin; i < k.stages[s].end; ++i) {
      stage_of[static_cast<size_t>(i)] = static_cast<int32_t>(s);
    }
  }
  return stage_of;
}

// The buffers that stages [first, last) store into, and those they read or store.
void Touches(const Kernel& k, size_t first, size_t last, std::set<int32_t>* stores,
             std::set<int32_t>* touches) {
  for (size_t s = first; s < last; ++s) {
    for (int32_t i = k.stages[s].begin; i < k.stages[s].end; ++i) {
      const Inst& in = k.insts[static_cast<size_t>(i)];
      if (in.op == Opcode::kStore) stores->insert(in.buffer);
      if (in.op == Opcode::kStore || in.op == Opcode::kLoad) touches->insert(in.buffer);
    }
  }
}

bool Meets(const std::set<int32_t>& a, const std::set<int32_t>& b) {
  for (int32_t x : a) {
    if (b.count(x)) return true;
  }
  return false;
}

// Whether loop stage `later` may run inside the earlier loop stage `first`
// (JoinIndependentLoops).
bool CanJoin(const Kernel& k, size_t first, size_t later, const std::vector<int32_t>& stage_of) {
  const loop::Stage& s = k.stages[later];
  bool independent = true;
  for (int32_t i = s.begin; i < s.end && independent; ++i) {
    loop::ForEachOperand(k.insts[static_cast<size_t>(i)], [&](int32_t v) {
      const int32_t st = stage_of[static_cast<size_t>(v)];
      independent &= st < static_cast<int32_t>(first) || st == static_cast<int32_t>(later);
    });
  }
  if (!independent) return false;
  std::set<int32_t> between_stores, between_touches, later_stores, later_touches;
  Touches(k, first, later, &between_stores, &between_touches);
  Touches(k, later, later + 1, &later_stores, &later_touches);
  return !Meets(later_stores, between_touches) && !Meets(between_stores, later_touches);
}

// `k` with loop stage `later` appended to loop stage `first`; the stages between follow.
void Join(Kernel& k, size_t first, size_t later) {
  std::vector<int32_t> order;
  std::vector<loop::Stage> stages;
  auto take = [&](const loop::Stage& s) {
    for (int32_t i = s.begin; i < s.end; ++i) order.push_back(i);
  };
  for (size_t s = 0; s < k.stages.size(); ++s) {
    if (s == later) continue;
    const int32_t begin = static_cast<int32_t>(order.size());
    take(k.stages[s]);
    if (s == first) take(k.stages[later]);
    stages.push_back({k.stages[s].loops, begin, static_cast<int32_t>(order.size())});
  }
  std::vector<int32_t> position(k.insts.size(), -1);
  for (size_t at = 0; at < order.size(); ++at) {
    position[static_cast<size_t>(order[at])] = static_cast<int32_t>(at);
  }
  std::vector<Inst> insts;
  insts.reserve(order.size());
  for (int32_t i : order) {
    Inst in = k.insts[static_cast<size_t>(i)];
    loop::RemapOperands(&in, position);
    insts.push_back(std::move(in));
  }
  k.insts = std::move(insts);
  k.stages = std::move(stages);
}

bool JoinOnce(Kernel& k) {
  const std::vector<int32_t> stage_of = StageOf(k);
  for (size_t first = 0; first < k.stages.size(); ++first) {
    if (!k.stages[first].loops) continue;
    for (size_t later = first + 1; later < k.stages.size(); ++later) {
      if (k.stages[later].loops && CanJoin(k, first, later, stage_of)) {
        Join(k, first, later);
        return true;
      }
    }
  }
  return false;
}

// The buffers the kernel stores into.
std::set<int32_t> Stored(const Kernel& k) {
  std::set<int32_t> stored;
  for (const Inst& in : k.insts) {
    if (in.op == Opcode::kStore) stored.insert(in.buffer);
  }
  return stored;
}

// What `in` computes, operands already renumbered: equal keys, equal values. Empty for an
// instruction that is never shared (stores, loads of buffers the kernel stores into).
std::string KeyOf(const Inst& in, const std::set<int32_t>& stored) {
  if (in.op == Opcode::kStore || (in.op == Opcode::kLoad && stored.count(in.buffer))) return "";
  std::string key =
      absl::StrCat(static_cast<int>(in.op), ",", static_cast<int>(in.type), ",", in.a, ",", in.b,
                   ",", in.c, ",", in.mask, ",", absl::bit_cast<uint64_t>(in.fimm), ",", in.iimm,
                   ",", static_cast<int>(in.reduce), ",", in.buffer);
  if (in.op == Opcode::kLoad || in.op == Opcode::kIndex) absl::StrAppend(&key, ",", in.index.key());
  for (const loop::DynIndex& d : in.dyn) absl::StrAppend(&key, ",", d.value, "*", d.stride.key());
  return key;
}

int32_t Find(const std::map<std::string, int32_t>& values, const std::string& key) {
  auto it = values.find(key);
  return it == values.end() ? -1 : it->second;
}

}  // namespace

void JoinIndependentLoops(Kernel& kernel) {
  while (JoinOnce(kernel)) {
  }
}

void ShareValues(Kernel& kernel) {
  if (!kernel.segments.empty()) return;
  const std::set<int32_t> stored = Stored(kernel);
  std::map<std::string, int32_t> visible;  // values every later stage sees
  std::vector<int32_t> map(kernel.insts.size(), -1);
  std::vector<Inst> insts;
  std::vector<loop::Stage> stages;
  for (const loop::Stage& s : kernel.stages) {
    std::map<std::string, int32_t> local;  // values of this looping stage
    const int32_t begin = static_cast<int32_t>(insts.size());
    for (int32_t i = s.begin; i < s.end; ++i) {
      Inst in = kernel.insts[static_cast<size_t>(i)];
      loop::RemapOperands(&in, map);
      const std::string key = KeyOf(in, stored);
      if (!key.empty()) {
        const int32_t seen = Find(visible, key) >= 0 ? Find(visible, key) : Find(local, key);
        if (seen >= 0) {
          map[static_cast<size_t>(i)] = seen;
          continue;
        }
      }
      const int32_t at = static_cast<int32_t>(insts.size());
      map[static_cast<size_t>(i)] = at;
      if (!key.empty()) (s.loops && in.op != Opcode::kReduce ? local : visible)[key] = at;
      insts.push_back(std::move(in));
    }
    stages.push_back({s.loops, begin, static_cast<int32_t>(insts.size())});
  }
  kernel.insts = std::move(insts);
  kernel.stages = std::move(stages);
}

void RecomputeAcrossLoops(Kernel& k) {
  int loops = 0;
  for (const loop::Stage& s : k.stages) loops += s.loops ? 1 : 0;
  if (loops < 2) return;
  const std::set<int32_t> stored = Stored(k);
  const std::vector<int32_t> stage_of = StageOf(k);
  // Whether value v of loop stage `stage` can be computed again in a later stage: the
  // instructions of that stage it takes (what it uses of other stages is visible there)
  // are neither stores, reduces nor loads of a buffer the kernel stores, and at most
  // kMaxRecomputed of them.
  auto recomputable = [&](int32_t v, int32_t stage) {
    std::set<int32_t> seen;
    std::vector<int32_t> todo = {v};
    while (!todo.empty()) {
      const int32_t x = todo.back();
      todo.pop_back();
      if (stage_of[static_cast<size_t>(x)] != stage || !seen.insert(x).second) continue;
      const Inst& in = k.insts[static_cast<size_t>(x)];
      if (seen.size() > kMaxRecomputed || in.op == Opcode::kStore || in.op == Opcode::kReduce ||
          (in.op == Opcode::kLoad && stored.count(in.buffer))) {
        return false;
      }
      loop::ForEachOperand(in, [&](int32_t y) { todo.push_back(y); });
    }
    return true;
  };
  std::vector<Inst> out;
  std::vector<int32_t> map(k.insts.size(), -1);
  std::map<int32_t, int32_t> copies;  // of the current stage: value of an earlier loop -> copy
  std::function<int32_t(int32_t, int32_t)> copy = [&](int32_t v, int32_t stage) -> int32_t {
    if (stage_of[static_cast<size_t>(v)] != stage) return map[static_cast<size_t>(v)];
    if (auto it = copies.find(v); it != copies.end()) return it->second;
    Inst in = k.insts[static_cast<size_t>(v)];
    for (int32_t* x : {&in.a, &in.b, &in.c, &in.mask}) {
      if (*x >= 0) *x = copy(*x, stage);
    }
    for (loop::DynIndex& d : in.dyn) d.value = copy(d.value, stage);
    out.push_back(std::move(in));
    return copies[v] = static_cast<int32_t>(out.size() - 1);
  };
  std::map<int32_t, std::pair<int32_t, int32_t>> stores;  // buffer -> (instruction, stage)
  std::vector<loop::Stage> stages;
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const loop::Stage& st = k.stages[s];
    copies.clear();
    loop::Stage ns{st.loops, static_cast<int32_t>(out.size()), 0};
    for (int32_t i = st.begin; i < st.end; ++i) {
      Inst in = k.insts[static_cast<size_t>(i)];
      if (st.loops && in.op == Opcode::kLoad && in.dyn.empty() && in.mask < 0) {
        auto it = stores.find(in.buffer);
        if (it != stores.end()) {
          const Inst& w = k.insts[static_cast<size_t>(it->second.first)];
          if (w.index == in.index && recomputable(w.a, it->second.second)) {
            int32_t value = copy(w.a, it->second.second);
            if (out[static_cast<size_t>(value)].type != in.type) {
              Inst cast;
              cast.op = Opcode::kCast;
              cast.type = in.type;
              cast.a = value;
              out.push_back(cast);
              value = static_cast<int32_t>(out.size() - 1);
            }
            map[static_cast<size_t>(i)] = value;
            continue;
          }
        }
      }
      if (st.loops && in.op == Opcode::kStore) {
        const bool simple = in.dyn.empty() && in.mask < 0 && !stores.count(in.buffer);
        if (simple) {
          stores[in.buffer] = {i, static_cast<int32_t>(s)};
        } else {
          stores.erase(in.buffer);
        }
      }
      map[static_cast<size_t>(i)] = loop::AppendRemapped(&out, std::move(in), map);
    }
    ns.end = static_cast<int32_t>(out.size());
    stages.push_back(ns);
  }
  k.insts = std::move(out);
  k.stages = std::move(stages);
}

}  // namespace kiln::fuse
