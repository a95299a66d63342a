#include "compiler/fuse/batch_write_backs.h"

#include <algorithm>
#include <cstddef>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

namespace kiln::fuse {
namespace {

using loop::IndexExpr;
using loop::Inst;
using loop::Kernel;
using loop::Opcode;
using loop::Program;
using loop::ScalarType;
using loop::Step;

// The element count of constant `sizes` laid out densely in row-major order by `strides`
// (a dimension of size 1 may have any stride), or nullopt.
std::optional<int64_t> DenseElements(const std::vector<IndexExpr>& sizes,
                                     const std::vector<IndexExpr>& strides) {
  if (sizes.size() != strides.size()) return std::nullopt;
  int64_t elements = 1;
  for (size_t d = sizes.size(); d-- > 0;) {
    if (!sizes[d].is_const()) return std::nullopt;
    const int64_t size = sizes[d].const_value();
    if (size != 1 && !(strides[d].is_const() && strides[d].const_value() == elements)) {
      return std::nullopt;
    }
    elements *= size;
  }
  return elements;
}

// The input buffer of each input index.
std::map<int32_t, int32_t> InputBuffers(const Program& p) {
  std::map<int32_t, int32_t> out;
  for (size_t b = 0; b < p.buffers.size(); ++b) {
    if (p.buffers[b].kind == loop::Buffer::Kind::kInput) {
      out[p.buffers[b].input_index] = static_cast<int32_t>(b);
    }
  }
  return out;
}

struct Copy {
  size_t step = 0;
  int32_t input_buffer = -1;
  int64_t elements = 0;
};

// The copy write-back step `s` makes, when it can be batched on its own terms (the run's
// other steps are looked at by the caller).
std::optional<Copy> CopyOf(const Program& p, const std::map<int32_t, int32_t>& input_buffers,
                           const Step& s) {
  const auto it = input_buffers.find(s.input_index);
  if (it == input_buffers.end() || s.src.buffer < 0 || s.src.buffer == it->second) {
    return std::nullopt;
  }
  const loop::InputDesc& input = p.inputs[static_cast<size_t>(s.input_index)];
  const graph::DType dtype = p.buffers[static_cast<size_t>(it->second)].dtype;
  if (input.kind != loop::InputDesc::Kind::kTensor || input.dtype != dtype ||
      s.src.dtype != dtype || p.buffers[static_cast<size_t>(s.src.buffer)].dtype != dtype) {
    return std::nullopt;
  }
  const std::optional<int64_t> elements = DenseElements(s.src.sizes, s.src.strides);
  if (!elements || *elements < 1 || *elements > kMaxBatchedElements ||
      DenseElements(input.sizes, input.strides) != elements ||
      input.sizes.size() != s.src.sizes.size()) {
    return std::nullopt;
  }
  for (size_t d = 0; d < input.sizes.size(); ++d) {
    if (!input.sizes[d].is_const() ||
        input.sizes[d].const_value() != s.src.sizes[d].const_value()) {
      return std::nullopt;
    }
  }
  return Copy{0, it->second, *elements};
}

// The copies of steps [begin, end), all write-backs, that may run at once in one kernel: none
// reads an input another of the steps writes, or writes one another reads.
std::vector<Copy> Batchable(const Program& p, const std::map<int32_t, int32_t>& input_buffers,
                            size_t begin, size_t end) {
  std::multiset<int32_t> written, read;
  for (size_t i = begin; i < end; ++i) {
    const Step& s = p.steps[i];
    const auto it = input_buffers.find(s.input_index);
    if (it != input_buffers.end()) written.insert(it->second);
    read.insert(s.src.buffer);
  }
  std::vector<Copy> copies;
  for (size_t i = begin; i < end; ++i) {
    std::optional<Copy> c = CopyOf(p, input_buffers, p.steps[i]);
    if (!c || written.count(c->input_buffer) != 1 || read.count(c->input_buffer) != 0 ||
        written.count(p.steps[i].src.buffer) != 0) {
      continue;
    }
    c->step = i;
    copies.push_back(*c);
  }
  return copies;
}

int32_t Push(Kernel& k, Inst in) {
  k.insts.push_back(std::move(in));
  return static_cast<int32_t>(k.insts.size() - 1);
}

// One kernel over max(elements) points, a segment per copy.
Kernel CopyKernel(const Program& p, const std::vector<Copy>& copies) {
  int64_t points = 0;
  for (const Copy& c : copies) points = std::max(points, c.elements);
  Kernel k;
  k.parallel = {IndexExpr::Const(points)};
  bool narrowed = false;
  for (const Copy& c : copies) {
    const Step& s = p.steps[c.step];
    k.segments.push_back(static_cast<int32_t>(k.insts.size()));
    k.segment_points.push_back(c.elements);
    narrowed |= c.elements < points;
    int32_t mask = -1;
    if (c.elements < points) {
      Inst point;
      point.op = Opcode::kIndex;
      point.type = ScalarType::kI64;
      point.index = IndexExpr::Var(0);
      Inst bound;
      bound.op = Opcode::kConst;
      bound.type = ScalarType::kI64;
      bound.iimm = c.elements;
      Inst below;
      below.op = Opcode::kLt;
      below.type = ScalarType::kBool;
      below.a = Push(k, std::move(point));
      below.b = Push(k, std::move(bound));
      mask = Push(k, std::move(below));
    }
    const ScalarType storage = loop::ScalarTypeOf(s.src.dtype);
    Inst load;
    load.op = Opcode::kLoad;
    load.type = loop::ComputeType(storage);
    load.buffer = s.src.buffer;
    load.index = s.src.offset + IndexExpr::Var(0);
    load.mask = mask;
    Inst store;
    store.op = Opcode::kStore;
    store.type = load.type;
    store.a = Push(k, std::move(load));
    store.buffer = c.input_buffer;
    store.index = IndexExpr::Var(0);
    store.mask = mask;
    Push(k, std::move(store));
  }
  if (!narrowed) k.segment_points.clear();
  k.stages.push_back({/*loops=*/false, 0, static_cast<int32_t>(k.insts.size())});
  return k;
}

}  // namespace

loop::Program BatchWriteBacks(loop::Program program) {
  const std::map<int32_t, int32_t> input_buffers = InputBuffers(program);
  std::vector<Step> steps;
  const size_t n = program.steps.size();
  for (size_t i = 0; i < n;) {
    if (program.steps[i].kind != Step::Kind::kWriteBack) {
      steps.push_back(std::move(program.steps[i++]));
      continue;
    }
    size_t end = i;
    while (end < n && program.steps[end].kind == Step::Kind::kWriteBack) ++end;
    const std::vector<Copy> copies = Batchable(program, input_buffers, i, end);
    if (copies.size() >= 2) {
      Step launch;
      launch.kind = Step::Kind::kKernel;
      launch.kernel = static_cast<int32_t>(program.kernels.size());
      program.kernels.push_back(CopyKernel(program, copies));
      steps.push_back(std::move(launch));
      for (const Copy& c : copies) {
        Step& s = program.steps[c.step];
        const loop::InputDesc& input = program.inputs[static_cast<size_t>(s.input_index)];
        s.src.buffer = c.input_buffer;
        s.src.sizes = input.sizes;
        s.src.strides = input.strides;
        s.src.offset = IndexExpr::Const(0);
      }
    }
    for (; i < end; ++i) steps.push_back(std::move(program.steps[i]));
  }
  program.steps = std::move(steps);
  return program;
}

}  // namespace kiln::fuse
