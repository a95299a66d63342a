// Running a loaded plan (cpu_plan.h): binding the symbols from the inputs, checking the
// inputs, laying out the buffers, running the steps in order, and collecting the outputs.

#include "client/runtime/cpu_runtime.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/runtime/cpu_plan.h"
#include "client/runtime/extern_ops.h"
#include "client/runtime/module.h"
#include "proto/base/int_expr.h"
#include "proto/base/sync.h"
#include "proto/base/thread_pool.h"
#include "proto/kernel_abi.h"

namespace kiln::runtime {
namespace {

using Plan = CpuRuntime::Plan;

absl::Status Prefixed(absl::string_view prefix, const absl::Status& s) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat(prefix, ": ", s.message()));
}

void Poison(void* p, int64_t bytes) {
  if (p != nullptr && bytes > 0) std::memset(p, 0xff, static_cast<size_t>(bytes));
}

std::string InputName(const Plan& plan, size_t i) {
  const std::string& name = plan.inputs[i].name;
  return name.empty() ? absl::StrCat("input ", i) : absl::StrCat("input ", i, " (", name, ")");
}

Arena TakeArena(const Plan& plan, int64_t bytes) {
  {
    MutexLock lock(&plan.arena_mu);
    for (size_t i = 0; i < plan.free_arenas.size(); ++i) {
      if (plan.free_arenas[i].bytes >= bytes) {
        Arena a = std::move(plan.free_arenas[i]);
        plan.free_arenas.erase(plan.free_arenas.begin() + static_cast<ptrdiff_t>(i));
        return a;
      }
    }
  }
  Arena a;
  a.memory = AllocateAligned(bytes);
  a.bytes = bytes;
  return a;
}

void ReturnArena(const Plan& plan, Arena arena) {
  if (arena.memory == nullptr) return;
  MutexLock lock(&plan.arena_mu);
  // Keep a few: enough for the runs in flight at once, without hoarding memory.
  if (plan.free_arenas.size() < 4) plan.free_arenas.push_back(std::move(arena));
}

// One call of Run: the symbols' values, where each buffer lives and what keeps it alive,
// and the steps of a run in the order Run calls them.
class PlanRun {
 public:
  PlanRun(const Plan& plan, absl::Span<const Tensor> inputs, const CpuRuntime::RunOptions& options)
      : plan_(plan), inputs_(inputs), options_(options) {}
  ~PlanRun() { ReturnArena(plan_, std::move(arena_)); }
  PlanRun(const PlanRun&) = delete;
  PlanRun& operator=(const PlanRun&) = delete;

  // Gives every symbol its value from the input that is its source.
  absl::Status BindSymbols();
  // Checks the inputs against the plan's input specs and input buffers.
  absl::Status CheckInputs() const;
  // Sizes every buffer and places it: inputs in the caller's memory, outputs in fresh
  // memory, intermediates and workspaces in one arena.
  absl::Status LayOutBuffers();
  absl::Status RunSteps();
  absl::StatusOr<std::vector<Tensor>> CollectOutputs() const;

 private:
  absl::Status Launch(const StepPlan& step);
  absl::Status Call(const StepPlan& step) const;  // extern and fallback steps
  absl::Status Copy(const StepPlan& step) const;  // copy and write-back steps
  void Free(const StepPlan& step) const;

  absl::StatusOr<Tensor> MakeView(const ViewPlan& v, absl::string_view where) const;
  absl::Status Resolve(const ArgPlan& a, absl::string_view where, CallValue& out) const;

  const Plan& plan_;
  const absl::Span<const Tensor> inputs_;
  const CpuRuntime::RunOptions& options_;
  std::vector<int64_t> values_;  // symbol i's value
  std::vector<char*> base_;      // buffer b's first byte
  std::vector<int64_t> bytes_;   // how far views of buffer b may reach
  std::vector<std::shared_ptr<void>> owner_;
  Arena arena_;
};

absl::Status PlanRun::BindSymbols() {
  values_.assign(plan_.symbols.size(), 0);
  std::vector<int> bound_by(plan_.symbols.size(), -1);
  for (const SourcePlan& src : plan_.sources) {
    const std::string where = InputName(plan_, static_cast<size_t>(src.input));
    const Tensor& t = inputs_[static_cast<size_t>(src.input)];
    int64_t value;
    if (src.dim == -1) {
      if (!t.defined() || t.numel() != 1 || IsFloating(t.dtype())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " gives symbol ", plan_.symbols[static_cast<size_t>(src.symbol)],
                         " and must be a one-element integer tensor, got ", t.DebugString()));
      }
      value = t.ItemInt();
    } else {
      if (!t.defined() || src.dim >= t.dim()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " gives symbol ", plan_.symbols[static_cast<size_t>(src.symbol)],
                         " from dim ", src.dim, " but is ", t.DebugString()));
      }
      value = src.from_stride ? t.stride(src.dim) : t.size(src.dim);
    }
    const size_t s = static_cast<size_t>(src.symbol);
    if (bound_by[s] >= 0 && values_[s] != value) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " gives symbol ", plan_.symbols[s], " = ", value, " but ",
                       InputName(plan_, static_cast<size_t>(bound_by[s])), " gave ", values_[s]));
    }
    bound_by[s] = src.input;
    values_[s] = value;
  }
  return absl::OkStatus();
}

absl::Status PlanRun::CheckInputs() const {
  for (size_t i = 0; i < plan_.inputs.size(); ++i) {
    const InputPlan& ip = plan_.inputs[i];
    const Tensor& t = inputs_[i];
    const std::string where = InputName(plan_, i);
    const int buffer = plan_.input_buffer[i];
    if (ip.has_spec && ip.symbolic) {
      if (!t.defined() || t.numel() != 1 || IsFloating(t.dtype())) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, " is a symbolic integer and must be a one-element integer tensor, got ",
            t.DebugString()));
      }
      continue;
    }
    if (ip.has_spec && ip.dtype != v1::DTYPE_UNSPECIFIED) {
      if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(where, " is undefined"));
      if (t.dtype() != ip.dtype) {
        return absl::InvalidArgumentError(absl::StrCat(where, " has dtype ", DTypeName(t.dtype()),
                                                       ", the plan expects ", DTypeName(ip.dtype)));
      }
      if (t.dim() != static_cast<int64_t>(ip.sizes.size())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " has rank ", t.dim(), ", the plan expects ", ip.sizes.size()));
      }
      std::vector<int64_t> sizes(ip.sizes.size());
      for (size_t d = 0; d < ip.sizes.size(); ++d) {
        absl::StatusOr<int64_t> size = ip.sizes[d].Evaluate(values_);
        if (!size.ok()) return Prefixed(where, size.status());
        sizes[d] = *size;
        if (t.size(static_cast<int64_t>(d)) != *size) {
          return absl::InvalidArgumentError(absl::StrCat(
              where, " has size ", t.size(static_cast<int64_t>(d)), " in dim ", d,
              ", the plan expects ", *size,
              ip.sizes[d].is_constant() ? "" : absl::StrCat(" (", ip.sizes[d].text(), ")")));
        }
      }
      for (size_t d = 0; d < ip.strides.size(); ++d) {
        absl::StatusOr<int64_t> stride = ip.strides[d].Evaluate(values_);
        if (!stride.ok()) return Prefixed(where, stride.status());
        // A dim of size 1 is never stepped over, so its stride does not matter.
        if (sizes[d] > 1 && t.stride(static_cast<int64_t>(d)) != *stride) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, " has stride ", t.stride(static_cast<int64_t>(d)), " in dim ", d,
                           ", the plan's views assume ", *stride, " (", t.DebugString(), ")"));
        }
      }
    }
    if (buffer < 0) continue;
    const BufferPlan& bp = plan_.buffers[static_cast<size_t>(buffer)];
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(where, " is undefined"));
    if (bp.dtype != v1::DTYPE_UNSPECIFIED && t.dtype() != bp.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has dtype ", DTypeName(t.dtype()),
                                                     ", the plan expects ", DTypeName(bp.dtype)));
    }
    absl::StatusOr<int64_t> need = bp.size.Evaluate(values_);
    if (!need.ok()) return Prefixed(where, need.status());
    if (t.numel() > 0 && t.SpanBytes() < *need) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " spans ", t.SpanBytes(), " bytes, the plan reads ", *need));
    }
    if (reinterpret_cast<uintptr_t>(t.data()) % static_cast<uintptr_t>(bp.alignment) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " is not aligned to the ", bp.alignment, " bytes the plan needs"));
    }
  }
  return absl::OkStatus();
}

absl::Status PlanRun::LayOutBuffers() {
  const size_t nb = plan_.buffers.size();
  base_.assign(nb, nullptr);
  bytes_.assign(nb, 0);
  owner_.assign(nb, nullptr);
  std::vector<int64_t> offsets(nb, 0);
  int64_t arena_bytes = 0;
  for (size_t b = 0; b < nb; ++b) {
    const BufferPlan& bp = plan_.buffers[b];
    const std::string where = absl::StrCat("buffer ", b, " (", bp.name, ")");
    absl::StatusOr<int64_t> size = bp.size.Evaluate(values_);
    if (!size.ok()) return Prefixed(where, size.status());
    if (*size < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": negative size"));
    bytes_[b] = *size;
    if (!bp.in_arena()) continue;
    absl::StatusOr<int64_t> off = bp.offset.Evaluate(values_);
    if (!off.ok()) return Prefixed(where, off.status());
    if (*off < 0 || *off % bp.alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": arena offset ", *off, " is not aligned to ", bp.alignment));
    }
    offsets[b] = *off;
    arena_bytes = std::max(arena_bytes, *off + *size);
  }
  arena_ = TakeArena(plan_, arena_bytes);
  if (arena_.memory == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate an arena of ", arena_bytes, " bytes"));
  }
  if (options_.poison) Poison(arena_.memory.get(), arena_bytes);
  for (size_t b = 0; b < nb; ++b) {
    const BufferPlan& bp = plan_.buffers[b];
    switch (bp.kind) {
      case v1::BUFFER_KIND_INPUT: {
        const Tensor& t = inputs_[static_cast<size_t>(bp.input_index)];
        base_[b] = static_cast<char*>(t.data());
        owner_[b] = t.owner();
        // Views of an input may reach as far as the caller's tensor does.
        bytes_[b] = std::max(bytes_[b], t.SpanBytes());
        break;
      }
      case v1::BUFFER_KIND_OUTPUT:
        owner_[b] = AllocateAligned(bytes_[b]);
        if (owner_[b] == nullptr) {
          return absl::ResourceExhaustedError(absl::StrCat("cannot allocate output buffer ", b));
        }
        base_[b] = static_cast<char*>(owner_[b].get());
        if (options_.poison) Poison(base_[b], bytes_[b]);
        break;
      default:
        base_[b] = static_cast<char*>(arena_.memory.get()) + offsets[b];
        break;
    }
  }
  return absl::OkStatus();
}

absl::Status PlanRun::RunSteps() {
  for (const StepPlan& step : plan_.steps) {
    absl::Status s;
    switch (step.kind) {
      case v1::PlanStep::kLaunch:
        s = Launch(step);
        break;
      case v1::PlanStep::kExternCall:
      case v1::PlanStep::kFallback:
        s = Call(step);
        break;
      case v1::PlanStep::kCopy:
      case v1::PlanStep::kWriteBack:
        s = Copy(step);
        break;
      case v1::PlanStep::kFree:
        Free(step);
        break;
      default:
        break;
    }
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status PlanRun::Launch(const StepPlan& step) {
  const KernelPlan& k = plan_.kernels[static_cast<size_t>(step.kernel)];
  int64_t rng_seed = static_cast<int64_t>(options_.rng_seed);
  int64_t rng_offset = static_cast<int64_t>(options_.rng_offset);
  std::vector<void*> params(k.params.size());
  for (size_t p = 0; p < k.params.size(); ++p) {
    const ParamPlan& pp = k.params[p];
    switch (pp.kind) {
      case v1::PARAM_KIND_BUFFER:
        params[p] = base_[static_cast<size_t>(pp.buffer)];
        break;
      case v1::PARAM_KIND_SYMBOL:
        params[p] = &values_[static_cast<size_t>(pp.symbol)];
        break;
      case v1::PARAM_KIND_SCALAR:
        // Kernels only read their parameters.
        params[p] = pp.is_double ? const_cast<double*>(&pp.double_value)
                                 : static_cast<void*>(const_cast<int64_t*>(&pp.int_value));
        break;
      case v1::PARAM_KIND_RNG_SEED:
        params[p] = &rng_seed;
        break;
      case v1::PARAM_KIND_RNG_OFFSET:
        params[p] = &rng_offset;
        break;
      default:
        break;
    }
  }
  absl::StatusOr<int64_t> extent = k.extent.Evaluate(values_);
  if (!extent.ok()) return Prefixed(step.label, extent.status());
  const CpuKernelFn fn = k.fn;
  void* const* argv = params.data();
  plan_.pool->ParallelFor(*extent, 1, options_.threads,
                          [fn, argv](int64_t begin, int64_t end) { fn(argv, begin, end); });
  return absl::OkStatus();
}

absl::Status PlanRun::Call(const StepPlan& step) const {
  std::vector<CallValue> args(step.args.size());
  for (size_t i = 0; i < step.args.size(); ++i) {
    absl::Status s = Resolve(step.args[i], step.label, args[i]);
    if (!s.ok()) return s;
  }
  std::vector<std::pair<std::string, CallValue>> kwargs(step.kwargs.size());
  for (size_t i = 0; i < step.kwargs.size(); ++i) {
    kwargs[i].first = step.kwargs[i].first;
    absl::Status s = Resolve(step.kwargs[i].second, step.label, kwargs[i].second);
    if (!s.ok()) return s;
  }
  std::vector<Tensor> outs(step.outputs.size());
  for (size_t i = 0; i < step.outputs.size(); ++i) {
    if (step.outputs[i].buffer < 0) continue;
    absl::StatusOr<Tensor> t = MakeView(step.outputs[i], step.label);
    if (!t.ok()) return t.status();
    outs[i] = *std::move(t);
  }
  // An op that draws random numbers draws from stream rng_offset + its RNG number.
  const uint64_t rng_stream =
      options_.rng_offset + static_cast<uint64_t>(std::max<int64_t>(step.rng_stream, 0));
  absl::Status s;
  if (step.kind == v1::PlanStep::kExternCall) {
    ExternContext context;
    context.pool = plan_.pool.get();
    context.max_threads = options_.threads;
    context.rng_seed = options_.rng_seed;
    context.rng_offset = rng_stream;
    context.world_size = options_.world_size;
    context.collective = &options_.collective;
    s = RunExternOp(
        {.op = step.op, .args = args, .kwargs = kwargs, .outputs = outs, .context = &context});
  } else {
    if (!options_.fallback) {
      return absl::FailedPreconditionError(absl::StrCat(
          step.label, " must run eagerly (", step.reason, ") and no fallback hook was given"));
    }
    FallbackCall call;
    call.op = step.op;
    call.node = step.node;
    call.reason = step.reason;
    call.rng_seed = options_.rng_seed;
    call.rng_stream = rng_stream;
    call.args = std::move(args);
    call.kwargs = std::move(kwargs);
    call.outputs = std::move(outs);
    s = options_.fallback(call);
  }
  return Prefixed(step.label, s);
}

absl::Status PlanRun::Copy(const StepPlan& step) const {
  if (step.kind == v1::PlanStep::kWriteBack &&
      plan_.input_buffer[static_cast<size_t>(step.input_index)] == step.src.buffer) {
    return absl::OkStatus();  // an earlier step wrote the new value into the input itself
  }
  absl::StatusOr<Tensor> src = MakeView(step.src, step.label);
  if (!src.ok()) return src.status();
  Tensor dst;
  if (step.kind == v1::PlanStep::kCopy) {
    absl::StatusOr<Tensor> d = MakeView(step.dst, step.label);
    if (!d.ok()) return d.status();
    dst = *std::move(d);
  } else {
    dst = inputs_[static_cast<size_t>(step.input_index)];
  }
  if (src->dtype() != dst.dtype() || src->sizes() != dst.sizes()) {
    return absl::InvalidArgumentError(absl::StrCat(step.label, ": source ", src->DebugString(),
                                                   " and destination ", dst.DebugString(),
                                                   " differ"));
  }
  return Prefixed(step.label, CopyTensor(*src, dst));
}

void PlanRun::Free(const StepPlan& step) const {
  const size_t b = static_cast<size_t>(step.buffer);
  if (options_.poison && plan_.buffers[b].in_arena()) Poison(base_[b], bytes_[b]);
}

absl::StatusOr<std::vector<Tensor>> PlanRun::CollectOutputs() const {
  std::vector<Tensor> outputs;
  outputs.reserve(plan_.outputs.size());
  for (size_t i = 0; i < plan_.outputs.size(); ++i) {
    const OutputPlan& op = plan_.outputs[i];
    const std::string where = absl::StrCat("output ", i);
    switch (op.kind) {
      case OutputPlan::Kind::kNone:
        outputs.emplace_back();
        break;
      case OutputPlan::Kind::kSymbol: {
        absl::StatusOr<int64_t> v = op.symbol.Evaluate(values_);
        if (!v.ok()) return Prefixed(where, v.status());
        outputs.push_back(Tensor::Scalar(*v));
        break;
      }
      case OutputPlan::Kind::kView: {
        absl::StatusOr<Tensor> t = MakeView(op.view, where);
        if (!t.ok()) return t.status();
        if (plan_.buffers[static_cast<size_t>(op.view.buffer)].in_arena()) {
          // The arena is reused by the next run: hand out a copy.
          Tensor copy = Tensor::Empty(t->sizes(), t->dtype());
          absl::Status s = CopyTensor(*t, copy);
          if (!s.ok()) return s;
          outputs.push_back(std::move(copy));
        } else {
          outputs.push_back(*std::move(t));
        }
        break;
      }
    }
  }
  return outputs;
}

absl::StatusOr<Tensor> PlanRun::MakeView(const ViewPlan& v, absl::string_view where) const {
  std::vector<int64_t> sizes, strides;
  sizes.reserve(v.sizes.size());
  strides.reserve(v.strides.size());
  int64_t last = 0;
  bool empty = false;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    absl::StatusOr<int64_t> size = v.sizes[d].Evaluate(values_);
    if (!size.ok()) return size.status();
    absl::StatusOr<int64_t> stride = v.strides[d].Evaluate(values_);
    if (!stride.ok()) return stride.status();
    if (*size < 0 || *stride < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": negative size or stride in dim ", d));
    }
    if (*size == 0) empty = true;
    last += (*size > 0 ? *size - 1 : 0) * *stride;
    sizes.push_back(*size);
    strides.push_back(*stride);
  }
  absl::StatusOr<int64_t> offset = v.offset.Evaluate(values_);
  if (!offset.ok()) return offset.status();
  const size_t b = static_cast<size_t>(v.buffer);
  const int64_t es = ElementSize(v.dtype);
  // A view reaching past its buffer is a plan bug that would corrupt memory: refuse it.
  if (*offset < 0 || (!empty && (*offset + last + 1) * es > bytes_[b])) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": view [", absl::StrJoin(sizes, ", "), "] strides [", absl::StrJoin(strides, ", "),
        "] offset ", *offset, " reaches past the ", bytes_[b], " bytes of buffer ", v.buffer));
  }
  return WithOwner(Tensor(base_[b], v.dtype, std::move(sizes), std::move(strides), *offset),
                   owner_[b]);
}

absl::Status PlanRun::Resolve(const ArgPlan& a, absl::string_view where, CallValue& out) const {
  switch (a.kind) {
    case ArgPlan::Kind::kConstant:
      out = a.constant;
      return absl::OkStatus();
    case ArgPlan::Kind::kSymInt: {
      absl::StatusOr<int64_t> v = a.expr.Evaluate(values_);
      if (!v.ok()) return v.status();
      out.v = *v;
      return absl::OkStatus();
    }
    case ArgPlan::Kind::kTensor: {
      absl::StatusOr<Tensor> t = MakeView(a.view, where);
      if (!t.ok()) return t.status();
      out.v = *std::move(t);
      return absl::OkStatus();
    }
    case ArgPlan::Kind::kList: {
      CallValue::List list(a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i) {
        absl::Status s = Resolve(a.items[i], where, list[i]);
        if (!s.ok()) return s;
      }
      out.v = std::move(list);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

}  // namespace

CpuRuntime::CpuRuntime(std::unique_ptr<Plan> plan) : plan_(std::move(plan)) {}
CpuRuntime::~CpuRuntime() = default;

int CpuRuntime::num_inputs() const { return static_cast<int>(plan_->inputs.size()); }
int CpuRuntime::num_outputs() const { return static_cast<int>(plan_->outputs.size()); }

absl::StatusOr<std::unique_ptr<CpuRuntime>> CpuRuntime::Load(const v1::CompiledGraph& g,
                                                             const Options& options) {
  absl::StatusOr<std::unique_ptr<Plan>> plan = LoadPlan(g);
  if (!plan.ok()) return plan.status();
  (*plan)->pool = std::make_unique<ThreadPool>(ThreadPoolOptions::ForLoops(options.threads));
  return std::unique_ptr<CpuRuntime>(new CpuRuntime(*std::move(plan)));
}

absl::StatusOr<std::vector<Tensor>> CpuRuntime::Run(absl::Span<const Tensor> inputs,
                                                    const RunOptions& options) const {
  if (inputs.size() != plan_->inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan takes ", plan_->inputs.size(), " inputs, got ", inputs.size()));
  }
  PlanRun run(*plan_, inputs, options);
  absl::Status s = run.BindSymbols();
  if (s.ok()) s = run.CheckInputs();
  if (s.ok()) s = run.LayOutBuffers();
  if (s.ok()) s = run.RunSteps();
  if (!s.ok()) return s;
  return run.CollectOutputs();
}

}  // namespace kiln::runtime
