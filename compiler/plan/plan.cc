#include "compiler/plan/plan.h"

#include <algorithm>
#include <map>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "kiln/v1/graph.pb.h"
#include "proto/ops/registry.h"

namespace kiln::plan {
namespace {

// Whether `call` is memory-efficient attention's backward with dropout reading the Philox
// seed and offset (arguments 7 and 8) from the graph's inputs: its forward's saved state,
// which PyTorch returns on the CPU outside CUDA-graph capture and reads through host
// pointers then, but reads through device pointers inside a capture. A captured replay of
// such a plan would hand device code a host address.
bool ReadsSavedPhiloxState(const loop::Program& p, const loop::ExternCall& call) {
  if (call.op != "aten._scaled_dot_product_efficient_attention_backward.default") return false;
  if (call.args.size() < 10) return false;
  const loop::CallArg& dropout = call.args[9];
  if (dropout.kind != loop::CallArg::Kind::kValue) return false;
  const double p_drop = dropout.value.has_float_value() ? dropout.value.float_value()
                        : dropout.value.has_int_value()
                            ? static_cast<double>(dropout.value.int_value())
                            : 0.0;
  if (p_drop <= 0) return false;
  for (size_t i : {size_t{7}, size_t{8}}) {
    const loop::CallArg& a = call.args[i];
    if (a.kind != loop::CallArg::Kind::kTensor || a.tensor.buffer < 0) continue;
    if (p.buffers[static_cast<size_t>(a.tensor.buffer)].kind == loop::Buffer::Kind::kInput) {
      return true;
    }
  }
  return false;
}

using loop::IndexExpr;

constexpr int64_t kAlign = 64;

void CollectKernelSyms(const loop::Kernel& k, std::vector<int32_t>* syms) {
  for (const IndexExpr& e : k.parallel) e.CollectSyms(syms);
  for (const IndexExpr& e : k.reduction) e.CollectSyms(syms);
  for (const loop::Inst& in : k.insts) {
    in.index.CollectSyms(syms);
    for (const loop::DynIndex& d : in.dyn) d.stride.CollectSyms(syms);
  }
}

v1::TensorView View(const loop::TensorRef& r, const std::vector<std::string>& syms) {
  v1::TensorView v;
  v.set_buffer(r.buffer);
  for (const IndexExpr& s : r.sizes) *v.add_sizes() = ToSymInt(s, syms);
  for (const IndexExpr& s : r.strides) *v.add_strides() = ToSymInt(s, syms);
  *v.mutable_offset() = ToSymInt(r.offset, syms);
  v.set_dtype(static_cast<v1::DType>(r.dtype));
  return v;
}

v1::CallArgument Arg(const loop::CallArg& a, const std::vector<std::string>& syms) {
  v1::CallArgument out;
  switch (a.kind) {
    case loop::CallArg::Kind::kTensor:
      *out.mutable_tensor() = View(a.tensor, syms);
      break;
    case loop::CallArg::Kind::kValue:
      *out.mutable_value() = a.value;
      break;
    case loop::CallArg::Kind::kNoneTensor:
      out.mutable_value()->mutable_none();
      break;
    case loop::CallArg::Kind::kList:
      // Set even when empty: an empty list (new_ones(x, [])) is not a missing argument.
      out.mutable_list();
      for (const loop::CallArg& x : a.items) *out.mutable_list()->add_items() = Arg(x, syms);
      break;
  }
  return out;
}

void CollectArgBuffers(const loop::CallArg& a, std::vector<int32_t>* out) {
  if (a.kind == loop::CallArg::Kind::kTensor) out->push_back(a.tensor.buffer);
  for (const loop::CallArg& x : a.items) CollectArgBuffers(x, out);
}

// Every buffer a step touches.
std::vector<int32_t> StepBuffers(const loop::Program& p, const loop::Step& s) {
  std::vector<int32_t> out;
  switch (s.kind) {
    case loop::Step::Kind::kKernel:
      for (const loop::Inst& in : p.kernels[static_cast<size_t>(s.kernel)].insts) {
        if (in.op == loop::Opcode::kLoad || in.op == loop::Opcode::kStore) out.push_back(in.buffer);
      }
      break;
    case loop::Step::Kind::kExtern:
      for (const loop::CallArg& a : s.call.args) CollectArgBuffers(a, &out);
      for (const auto& kv : s.call.kwargs) CollectArgBuffers(kv.second, &out);
      for (const loop::TensorRef& r : s.call.outputs) {
        if (r.buffer >= 0) out.push_back(r.buffer);
      }
      break;
    case loop::Step::Kind::kWriteBack:
      out.push_back(s.src.buffer);
      break;
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

IndexExpr AlignUp(const IndexExpr& bytes) {
  return IndexExpr::FloorDiv(bytes + IndexExpr::Const(kAlign - 1), IndexExpr::Const(kAlign),
                             nullptr) *
         IndexExpr::Const(kAlign);
}

}  // namespace

v1::SymInt ToSymInt(const IndexExpr& e, const std::vector<std::string>& symbols) {
  v1::SymInt s;
  if (e.is_const()) {
    s.set_value(e.const_value());
  } else {
    s.set_expr(e.ToString(symbols));
  }
  return s;
}

KernelParams ParamsOf(const loop::Kernel& k) {
  KernelParams p;
  for (const loop::Inst& in : k.insts) {
    if (in.op == loop::Opcode::kLoad || in.op == loop::Opcode::kStore)
      p.buffers.push_back(in.buffer);
    if (in.op == loop::Opcode::kRandBits) p.rng = true;
  }
  std::sort(p.buffers.begin(), p.buffers.end());
  p.buffers.erase(std::unique(p.buffers.begin(), p.buffers.end()), p.buffers.end());
  CollectKernelSyms(k, &p.symbols);
  std::sort(p.symbols.begin(), p.symbols.end());
  p.symbols.erase(std::unique(p.symbols.begin(), p.symbols.end()), p.symbols.end());
  return p;
}

absl::StatusOr<v1::CompiledGraph> Plan(const loop::Program& p,
                                       const std::vector<codegen::KernelSchedule>& schedules,
                                       const PlanOptions& options) {
  if (schedules.size() != p.kernels.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(schedules.size(), " schedules for ", p.kernels.size(), " kernels"));
  }
  v1::CompiledGraph out;
  out.set_target(options.target);
  const std::vector<std::string>& syms = p.symbols;
  for (const std::string& s : syms) out.add_symbols(s);

  // Kernels.
  for (size_t i = 0; i < p.kernels.size(); ++i) {
    const loop::Kernel& k = p.kernels[i];
    v1::Kernel* pk = out.add_kernels();
    pk->set_name(absl::StrCat("kiln_k", i));
    const KernelParams params = ParamsOf(k);
    for (int32_t b : params.buffers) {
      v1::KernelParam* kp = pk->add_params();
      kp->set_kind(v1::PARAM_KIND_BUFFER);
      kp->set_buffer(b);
    }
    for (int32_t s : params.symbols) {
      v1::KernelParam* kp = pk->add_params();
      kp->set_kind(v1::PARAM_KIND_SYMBOL);
      kp->set_symbol(syms[static_cast<size_t>(s)]);
    }
    if (params.rng) {
      pk->add_params()->set_kind(v1::PARAM_KIND_RNG_SEED);
      pk->add_params()->set_kind(v1::PARAM_KIND_RNG_OFFSET);
    }
    for (const IndexExpr& g : schedules[i].grid) {
      *pk->mutable_launch()->add_grid() = ToSymInt(g, syms);
    }
    for (const IndexExpr& b : schedules[i].block) {
      *pk->mutable_launch()->add_block() = ToSymInt(b, syms);
    }
    for (const std::string& n : k.nodes) pk->add_nodes(n);
  }

  // Which buffers are outputs: those a tensor output lives in (inputs stay inputs).
  std::vector<bool> is_output(p.buffers.size(), false);
  for (const loop::Output& o : p.outputs) {
    if (o.kind == loop::Output::Kind::kTensor &&
        p.buffers[static_cast<size_t>(o.tensor.buffer)].kind != loop::Buffer::Kind::kInput) {
      is_output[static_cast<size_t>(o.tensor.buffer)] = true;
    }
  }

  // Liveness over steps.
  const size_t nb = p.buffers.size();
  std::vector<int32_t> first(nb, -1), last(nb, -1);
  for (size_t i = 0; i < p.steps.size(); ++i) {
    for (int32_t b : StepBuffers(p, p.steps[i])) {
      if (first[static_cast<size_t>(b)] < 0)
        first[static_cast<size_t>(b)] = static_cast<int32_t>(i);
      last[static_cast<size_t>(b)] = static_cast<int32_t>(i);
    }
  }

  // Arena offsets: first fit among freed slots of equal size (or, for constant sizes, of
  // enough size), else at the end.
  struct Slot {
    IndexExpr offset, size;
    int32_t free_after = -1;  // step after which it is free; -1: never used
    bool busy = false;
  };
  std::vector<Slot> slots;
  IndexExpr arena;
  std::vector<IndexExpr> offset_of(nb);
  std::vector<int32_t> slot_of(nb, -1);
  std::vector<int32_t> order;
  for (size_t b = 0; b < nb; ++b) {
    if (p.buffers[b].kind == loop::Buffer::Kind::kIntermediate && !is_output[b] && first[b] >= 0) {
      order.push_back(static_cast<int32_t>(b));
    }
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return first[static_cast<size_t>(a)] < first[static_cast<size_t>(b)];
  });
  for (int32_t b : order) {
    const loop::Buffer& buf = p.buffers[static_cast<size_t>(b)];
    const IndexExpr bytes =
        AlignUp(buf.elements * IndexExpr::Const(loop::ByteSize(loop::ScalarTypeOf(buf.dtype))));
    const int32_t start = first[static_cast<size_t>(b)];
    // Release slots whose buffers died before this one starts.
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].busy && slots[s].free_after < start) slots[s].busy = false;
    }
    int32_t chosen = -1;
    for (size_t s = 0; s < slots.size(); ++s) {
      if (slots[s].busy) continue;
      const bool fits =
          slots[s].size == bytes || (bytes.is_const() && slots[s].size.is_const() &&
                                     slots[s].size.const_value() >= bytes.const_value());
      if (fits) {
        chosen = static_cast<int32_t>(s);
        break;
      }
    }
    if (chosen < 0) {
      slots.push_back({arena, bytes, -1, false});
      arena = arena + bytes;
      chosen = static_cast<int32_t>(slots.size() - 1);
    }
    slots[static_cast<size_t>(chosen)].busy = true;
    slots[static_cast<size_t>(chosen)].free_after = last[static_cast<size_t>(b)];
    offset_of[static_cast<size_t>(b)] = slots[static_cast<size_t>(chosen)].offset;
    slot_of[static_cast<size_t>(b)] = chosen;
  }

  for (size_t b = 0; b < nb; ++b) {
    const loop::Buffer& buf = p.buffers[b];
    v1::Buffer* pb = out.add_buffers();
    pb->set_dtype(static_cast<v1::DType>(buf.dtype));
    pb->set_name(buf.name);
    const int64_t item = loop::ByteSize(loop::ScalarTypeOf(buf.dtype));
    pb->set_alignment(static_cast<int32_t>(kAlign));
    *pb->mutable_size_bytes() = ToSymInt(buf.elements * IndexExpr::Const(item), syms);
    if (buf.kind == loop::Buffer::Kind::kInput) {
      // The caller's tensor is used in place: only its element alignment is promised.
      pb->set_alignment(static_cast<int32_t>(item));
      pb->set_kind(v1::BUFFER_KIND_INPUT);
      pb->set_input_index(buf.input_index);
    } else if (is_output[b]) {
      pb->set_kind(v1::BUFFER_KIND_OUTPUT);
    } else {
      pb->set_kind(v1::BUFFER_KIND_INTERMEDIATE);
      *pb->mutable_arena_offset() = ToSymInt(offset_of[b], syms);
    }
  }

  // Steps, with frees after last uses of arena buffers.
  int32_t externs = 0, fallbacks = 0;
  for (size_t i = 0; i < p.steps.size(); ++i) {
    const loop::Step& s = p.steps[i];
    v1::PlanStep* ps = out.add_steps();
    switch (s.kind) {
      case loop::Step::Kind::kKernel:
        ps->mutable_launch()->set_kernel(s.kernel);
        break;
      case loop::Step::Kind::kWriteBack:
        ps->mutable_write_back()->set_input_index(s.input_index);
        *ps->mutable_write_back()->mutable_src() = View(s.src, syms);
        break;
      case loop::Step::Kind::kExtern: {
        const loop::ExternCall& c = s.call;
        auto fill = [&](auto* e) {
          e->set_op(c.op);
          e->set_node(c.node);
          for (const loop::CallArg& a : c.args) *e->add_args() = Arg(a, syms);
          for (const auto& [name, a] : c.kwargs) {
            auto* kw = e->add_kwargs();
            kw->set_name(name);
            *kw->mutable_value() = Arg(a, syms);
          }
          for (const loop::TensorRef& r : c.outputs) {
            v1::TensorView* v = e->add_outputs();
            if (r.buffer >= 0) {
              *v = View(r, syms);
            } else {
              v->set_buffer(-1);
            }
          }
        };
        if (c.fallback) {
          ++fallbacks;
          v1::FallbackStep* f = ps->mutable_fallback();
          fill(f);
          f->set_reason(c.reason);
          f->set_rng_stream(c.rng_stream);
          v1::FallbackNote* note = out.mutable_summary()->add_fallbacks();
          note->set_node(c.node);
          note->set_op(c.op);
          note->set_reason(c.reason);
        } else {
          ++externs;
          v1::ExternStep* e = ps->mutable_extern_call();
          fill(e);
          e->set_collective(c.collective);
          e->set_rng_stream(c.rng_stream);
        }
        break;
      }
    }
    for (int32_t b : StepBuffers(p, s)) {
      if (slot_of[static_cast<size_t>(b)] >= 0 &&
          last[static_cast<size_t>(b)] == static_cast<int32_t>(i)) {
        out.add_steps()->mutable_free()->set_buffer(b);
      }
    }
  }

  // Outputs: views into buffers; aliasing recorded.
  std::map<int32_t, int32_t> first_output_of_buffer;
  for (size_t i = 0; i < p.outputs.size(); ++i) {
    const loop::Output& o = p.outputs[i];
    v1::OutputBinding* ob = out.add_outputs();
    switch (o.kind) {
      case loop::Output::Kind::kNone:
        ob->set_none(true);
        break;
      case loop::Output::Kind::kSymbol:
        ob->set_symbol(o.symbol.ToString(syms));
        break;
      case loop::Output::Kind::kTensor: {
        *ob->mutable_view() = View(o.tensor, syms);
        const loop::Buffer& buf = p.buffers[static_cast<size_t>(o.tensor.buffer)];
        if (buf.kind == loop::Buffer::Kind::kInput) {
          ob->set_aliases_input(buf.input_index);
        } else {
          auto [it, inserted] =
              first_output_of_buffer.emplace(o.tensor.buffer, static_cast<int32_t>(i));
          if (!inserted) ob->set_aliases_output(it->second);
        }
        break;
      }
    }
  }

  // Symbol sources: the first input, in calling order, that has the symbol as a size or is
  // the symbolic int itself; else the first stride that is exactly the symbol.
  for (size_t s = 0; s < syms.size(); ++s) {
    const IndexExpr sym = IndexExpr::Sym(static_cast<int32_t>(s));
    v1::SymbolSource src;
    src.set_symbol(syms[s]);
    src.set_input_index(-1);
    for (size_t i = 0; i < p.inputs.size() && src.input_index() < 0; ++i) {
      const loop::InputDesc& in = p.inputs[i];
      if (in.kind == loop::InputDesc::Kind::kScalar && in.scalar == sym) {
        src.set_input_index(static_cast<int32_t>(i));
        src.set_dim(-1);
      }
      for (size_t d = 0; d < in.sizes.size() && src.input_index() < 0; ++d) {
        if (in.sizes[d] == sym) {
          src.set_input_index(static_cast<int32_t>(i));
          src.set_dim(static_cast<int32_t>(d));
        }
      }
    }
    for (size_t i = 0; i < p.inputs.size() && src.input_index() < 0; ++i) {
      const loop::InputDesc& in = p.inputs[i];
      for (size_t d = 0; d < in.strides.size() && src.input_index() < 0; ++d) {
        if (in.strides[d] == sym) {
          src.set_input_index(static_cast<int32_t>(i));
          src.set_dim(static_cast<int32_t>(d));
          src.set_from_stride(true);
        }
      }
    }
    if (src.input_index() < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("symbol ", syms[s], " cannot be read from any input"));
    }
    *out.add_symbol_sources() = std::move(src);
  }

  // What each input must look like.
  for (const loop::InputDesc& in : p.inputs) {
    v1::InputSpec* spec = out.add_inputs();
    spec->set_name(in.name);
    if (in.kind == loop::InputDesc::Kind::kScalar) {
      spec->set_symbolic(true);
    } else if (in.kind == loop::InputDesc::Kind::kTensor) {
      spec->set_dtype(static_cast<v1::DType>(in.dtype));
      for (const IndexExpr& e : in.sizes) *spec->add_sizes() = ToSymInt(e, syms);
      for (const IndexExpr& e : in.strides) *spec->add_strides() = ToSymInt(e, syms);
    }
  }

  // CUDA-graph analysis.
  v1::CudaGraphInfo* cg = out.mutable_cudagraph();
  auto reason = [&](v1::CaptureBlocker b, const std::string& node, const std::string& detail,
                    const std::string& trace) {
    v1::CaptureReason* r = cg->add_reasons();
    r->set_blocker(b);
    r->set_node(node);
    r->set_detail(detail);
    r->set_stack_trace(trace);
  };
  if (!syms.empty()) {
    reason(v1::CAPTURE_BLOCKER_DYNAMIC_SHAPE, "",
           absl::StrCat("sizes depend on ", syms.size(), " symbol(s); capture per size"), "");
  }
  for (size_t i = 0; i < p.inputs.size(); ++i) {
    const loop::InputDesc& in = p.inputs[i];
    if (in.kind == loop::InputDesc::Kind::kTensor && in.on_cpu) {
      reason(v1::CAPTURE_BLOCKER_CPU_TENSOR, in.name, absl::StrCat("input ", i, " is on the CPU"),
             "");
    }
    if (in.role == graph::InputRole::kParameter || in.role == graph::InputRole::kBuffer) {
      cg->add_static_inputs(static_cast<int32_t>(i));
    }
  }
  bool only_fallbacks = true;
  for (const loop::Step& s : p.steps) {
    if (s.kind == loop::Step::Kind::kExtern && s.call.fallback) {
      reason(v1::CAPTURE_BLOCKER_FALLBACK_OP, s.call.node,
             absl::StrCat(s.call.op, " runs eagerly: ", s.call.reason), s.call.stack_trace);
    }
    // The op registry says which ops a CUDA graph cannot capture: collectives, which need a
    // capture-safe process group.
    if (s.kind == loop::Step::Kind::kExtern && !ops::IsCaptureSafe(s.call.op)) {
      if (ops::IsCollective(s.call.op)) {
        reason(v1::CAPTURE_BLOCKER_COLLECTIVE, s.call.node,
               absl::StrCat(s.call.op, " needs a capture-safe process group"), s.call.stack_trace);
      } else {
        reason(v1::CAPTURE_BLOCKER_HOST_SYNC, s.call.node,
               absl::StrCat(s.call.op, " cannot be captured"), s.call.stack_trace);
      }
      only_fallbacks = false;
    }
    if (s.kind == loop::Step::Kind::kExtern && ReadsSavedPhiloxState(p, s.call)) {
      reason(v1::CAPTURE_BLOCKER_CPU_TENSOR, s.call.node,
             absl::StrCat(s.call.op,
                          " draws dropout from the Philox seed and offset its forward saved, which "
                          "an uncaptured forward leaves on the CPU and a capture reads on the "
                          "device"),
             s.call.stack_trace);
      only_fallbacks = false;
    }
    if (s.kind == loop::Step::Kind::kWriteBack) {
      cg->add_mutated_inputs(s.input_index);
      const graph::InputRole role = p.inputs[static_cast<size_t>(s.input_index)].role;
      if (role != graph::InputRole::kParameter && role != graph::InputRole::kBuffer) {
        reason(v1::CAPTURE_BLOCKER_MUTATED_INPUT, p.inputs[static_cast<size_t>(s.input_index)].name,
               absl::StrCat("input ", s.input_index, " is mutated and not static"), "");
        only_fallbacks = false;
      }
    }
  }
  cg->set_capturable(cg->reasons_size() == 0);
  if (!syms.empty()) only_fallbacks = false;
  if (!cg->capturable() && only_fallbacks) {
    // Runs of plan steps between fallbacks capture on their own.
    int32_t begin = 0;
    for (int32_t i = 0; i <= out.steps_size(); ++i) {
      const bool cut = i == out.steps_size() || out.steps(i).has_fallback();
      if (cut) {
        if (i > begin) {
          v1::CapturePartition* part = cg->add_partitions();
          part->set_first_step(begin);
          part->set_last_step(i - 1);
        }
        begin = i + 1;
      }
    }
  }
  *cg->mutable_workspace_bytes() = ToSymInt(arena, syms);
  cg->set_rng_offset_increment(p.rng_ops);

  // Summary.
  v1::CompileSummary* sum = out.mutable_summary();
  sum->set_nodes(options.graph_nodes);
  sum->set_kernels(static_cast<int32_t>(p.kernels.size()));
  int32_t fused = 0;
  for (const loop::Kernel& k : p.kernels) {
    if (k.nodes.size() > 1) ++fused;
  }
  sum->set_fused_groups(fused);
  sum->set_extern_steps(externs);
  sum->set_fallback_steps(fallbacks);
  auto at_hints = arena.Evaluate(p.symbol_hints, {});
  sum->set_arena_bytes_at_hints(at_hints.ok() ? *at_hints : -1);
  return out;
}

}  // namespace kiln::plan
