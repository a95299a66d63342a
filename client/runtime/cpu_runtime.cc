#include "client/runtime/cpu_runtime.h"

#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/runtime/extern_ops.h"
#include "client/runtime/int_expr.h"
#include "client/runtime/module.h"
#include "proto/base/sync.h"
#include "proto/base/thread_pool.h"
#include "proto/kernel_abi.h"

namespace kiln::runtime {
namespace {

// Parsed forms of the artifact's messages: every expression parsed and every index checked
// at Load, so Run only evaluates.

struct ViewPlan {
  int buffer = -1;  // -1: a result the plan drops
  DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<IntExpr> sizes, strides;
  IntExpr offset;
};

struct ArgPlan {
  enum class Kind { kConstant, kSymInt, kTensor, kList } kind = Kind::kConstant;
  CallValue constant;
  IntExpr expr;
  ViewPlan view;
  std::vector<ArgPlan> items;
};

struct ParamPlan {
  v1::ParamKind kind = v1::PARAM_KIND_UNSPECIFIED;
  int buffer = -1;
  int symbol = -1;
  // PARAM_KIND_SCALAR: the value the kernel reads, in its Argument's type.
  int64_t int_value = 0;
  double double_value = 0;
  bool is_double = false;
};

struct KernelPlan {
  std::string name;
  CpuKernelFn fn = nullptr;
  std::vector<ParamPlan> params;
  IntExpr extent = IntExpr::Constant(1);
};

struct BufferPlan {
  v1::BufferKind kind = v1::BUFFER_KIND_UNSPECIFIED;
  IntExpr size;
  IntExpr offset;
  int64_t alignment = kBufferAlignment;
  int input_index = -1;
  DType dtype = v1::DTYPE_UNSPECIFIED;
  std::string name;
  bool in_arena() const {
    return kind == v1::BUFFER_KIND_INTERMEDIATE || kind == v1::BUFFER_KIND_WORKSPACE;
  }
};

struct StepPlan {
  v1::PlanStep::KindCase kind = v1::PlanStep::KIND_NOT_SET;
  int index = 0;
  int kernel = -1;
  std::string op, node, reason;
  std::vector<ArgPlan> args;
  std::vector<std::pair<std::string, ArgPlan>> kwargs;
  std::vector<ViewPlan> outputs;
  ViewPlan src, dst;
  int input_index = -1;
  int buffer = -1;
  int64_t rng_stream = -1;  // extern/fallback: the op's RNG number, -1 when it draws nothing
  std::string label;        // "step 3 (extern aten.mm.default, node mm)" for messages
};

struct OutputPlan {
  enum class Kind { kNone, kView, kSymbol } kind = Kind::kNone;
  ViewPlan view;
  IntExpr symbol;
};

struct InputPlan {
  bool has_spec = false;
  std::string name;
  bool symbolic = false;
  DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<IntExpr> sizes, strides;
};

struct SourcePlan {
  int symbol = 0;
  int input = 0;
  int dim = -1;
  bool from_stride = false;
};

struct Arena {
  std::shared_ptr<void> memory;
  int64_t bytes = 0;
};

}  // namespace

struct CpuRuntime::Plan {
  std::vector<std::string> symbols;
  std::vector<SourcePlan> sources;
  std::vector<std::shared_ptr<LoadedModule>> modules;
  std::vector<KernelPlan> kernels;
  std::vector<BufferPlan> buffers;
  std::vector<StepPlan> steps;
  std::vector<OutputPlan> outputs;
  std::vector<InputPlan> inputs;
  std::vector<int> input_buffer;  // input index -> its buffer, or -1
  std::unique_ptr<ThreadPool> pool;

  mutable Mutex arena_mu;
  mutable std::vector<Arena> free_arenas ABSL_GUARDED_BY(arena_mu);
};

namespace {

using Plan = CpuRuntime::Plan;

absl::StatusOr<IntExpr> ParseSymInt(const v1::SymInt& s, const Plan& plan,
                                    absl::string_view where) {
  if (s.kind_case() != v1::SymInt::kExpr) return IntExpr::Constant(s.value());
  absl::StatusOr<IntExpr> e = IntExpr::Parse(s.expr(), plan.symbols);
  if (!e.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": ", e.status().message()));
  }
  return e;
}

absl::Status ParseView(const v1::TensorView& v, const Plan& plan, absl::string_view where,
                       bool allow_none, ViewPlan& out) {
  if (v.buffer() == -1 && allow_none) {
    out.buffer = -1;
    return absl::OkStatus();
  }
  if (v.buffer() < 0 || static_cast<size_t>(v.buffer()) >= plan.buffers.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": buffer ", v.buffer(), " does not exist"));
  }
  if (v.sizes_size() != v.strides_size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": ", v.sizes_size(), " sizes but ", v.strides_size(), " strides"));
  }
  out.buffer = v.buffer();
  out.dtype = v.dtype() != v1::DTYPE_UNSPECIFIED
                  ? v.dtype()
                  : plan.buffers[static_cast<size_t>(v.buffer())].dtype;
  if (ElementSize(out.dtype) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": view of buffer ", v.buffer(), " has no usable dtype"));
  }
  for (const v1::SymInt& s : v.sizes()) {
    absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
    if (!e.ok()) return e.status();
    out.sizes.push_back(*std::move(e));
  }
  for (const v1::SymInt& s : v.strides()) {
    absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
    if (!e.ok()) return e.status();
    out.strides.push_back(*std::move(e));
  }
  absl::StatusOr<IntExpr> off = ParseSymInt(v.offset(), plan, where);
  if (!off.ok()) return off.status();
  out.offset = *std::move(off);
  return absl::OkStatus();
}

absl::Status ParseConstant(const v1::Argument& a, const Plan& plan, absl::string_view where,
                           ArgPlan& out) {
  out.kind = ArgPlan::Kind::kConstant;
  switch (a.kind_case()) {
    case v1::Argument::kIntValue:
      out.constant.v = a.int_value();
      return absl::OkStatus();
    case v1::Argument::kFloatValue:
      out.constant.v = a.float_value();
      return absl::OkStatus();
    case v1::Argument::kBoolValue:
      out.constant.v = a.bool_value();
      return absl::OkStatus();
    case v1::Argument::kStringValue:
      out.constant.v = a.string_value();
      return absl::OkStatus();
    case v1::Argument::kNone:
    case v1::Argument::KIND_NOT_SET:
      out.constant.v = NoneValue{};
      return absl::OkStatus();
    case v1::Argument::kDtype:
      out.constant.v = a.dtype();
      return absl::OkStatus();
    case v1::Argument::kDevice:
      out.constant.v = a.device();
      return absl::OkStatus();
    case v1::Argument::kLayout:
      out.constant.v = a.layout();
      return absl::OkStatus();
    case v1::Argument::kMemoryFormat:
      out.constant.v = a.memory_format();
      return absl::OkStatus();
    case v1::Argument::kList: {
      out.kind = ArgPlan::Kind::kList;
      for (const v1::Argument& item : a.list().items()) {
        ArgPlan p;
        absl::Status s = ParseConstant(item, plan, where, p);
        if (!s.ok()) return s;
        out.items.push_back(std::move(p));
      }
      return absl::OkStatus();
    }
    case v1::Argument::kSymbolic: {
      if (a.symbolic().kind() != v1::SYM_KIND_INT &&
          a.symbolic().kind() != v1::SYM_KIND_UNSPECIFIED) {
        return absl::InvalidArgumentError(absl::StrCat(
            where, ": symbolic ", v1::SymKind_Name(a.symbolic().kind()), " \"", a.symbolic().expr(),
            "\" is not supported by the CPU runtime (integers only)"));
      }
      v1::SymInt s;
      s.set_expr(a.symbolic().expr());
      absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
      if (!e.ok()) return e.status();
      out.kind = ArgPlan::Kind::kSymInt;
      out.expr = *std::move(e);
      return absl::OkStatus();
    }
    case v1::Argument::kRef:
      return absl::InvalidArgumentError(absl::StrCat(where, ": a node reference (", a.ref().node(),
                                                     ") where the plan must give a value"));
  }
  return absl::InvalidArgumentError(absl::StrCat(where, ": unknown argument kind"));
}

absl::Status ParseCallArg(const v1::CallArgument& a, const Plan& plan, absl::string_view where,
                          ArgPlan& out) {
  switch (a.kind_case()) {
    case v1::CallArgument::kTensor:
      out.kind = ArgPlan::Kind::kTensor;
      return ParseView(a.tensor(), plan, where, false, out.view);
    case v1::CallArgument::kValue:
      return ParseConstant(a.value(), plan, where, out);
    case v1::CallArgument::kList:
      out.kind = ArgPlan::Kind::kList;
      for (const v1::CallArgument& item : a.list().items()) {
        ArgPlan p;
        absl::Status s = ParseCallArg(item, plan, where, p);
        if (!s.ok()) return s;
        out.items.push_back(std::move(p));
      }
      return absl::OkStatus();
    case v1::CallArgument::KIND_NOT_SET:
      out.constant.v = NoneValue{};
      return absl::OkStatus();
  }
  return absl::OkStatus();
}

template <typename Step>
absl::Status ParseCall(const Step& step, const Plan& plan, StepPlan& out) {
  out.op = step.op();
  out.rng_stream = step.rng_stream();
  out.node = step.node();
  for (int i = 0; i < step.args_size(); ++i) {
    ArgPlan p;
    absl::Status s = ParseCallArg(step.args(i), plan, absl::StrCat(out.label, " arg ", i), p);
    if (!s.ok()) return s;
    out.args.push_back(std::move(p));
  }
  for (const v1::NamedCallArgument& kw : step.kwargs()) {
    ArgPlan p;
    absl::Status s =
        ParseCallArg(kw.value(), plan, absl::StrCat(out.label, " kwarg ", kw.name()), p);
    if (!s.ok()) return s;
    out.kwargs.emplace_back(kw.name(), std::move(p));
  }
  for (int i = 0; i < step.outputs_size(); ++i) {
    ViewPlan v;
    absl::Status s =
        ParseView(step.outputs(i), plan, absl::StrCat(out.label, " output ", i), true, v);
    if (!s.ok()) return s;
    out.outputs.push_back(std::move(v));
  }
  return absl::OkStatus();
}

absl::Status ParseKernels(const v1::CompiledGraph& g, Plan& plan) {
  for (int m = 0; m < g.modules_size(); ++m) {
    absl::StatusOr<std::shared_ptr<LoadedModule>> mod =
        LoadedModule::Load(g.modules(m), absl::StrCat("module ", m));
    if (!mod.ok()) return mod.status();
    plan.modules.push_back(*std::move(mod));
  }
  for (int k = 0; k < g.kernels_size(); ++k) {
    const v1::Kernel& kernel = g.kernels(k);
    const std::string where = absl::StrCat("kernel ", k, " (", kernel.name(), ")");
    if (kernel.module() < 0 || kernel.module() >= g.modules_size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": module ", kernel.module(), " does not exist"));
    }
    KernelPlan kp;
    kp.name = kernel.name();
    absl::StatusOr<CpuKernelFn> fn =
        plan.modules[static_cast<size_t>(kernel.module())]->FindKernel(kernel.name());
    if (!fn.ok()) return fn.status();
    kp.fn = *fn;
    if (kernel.launch().grid_size() > 0) {
      absl::StatusOr<IntExpr> e = ParseSymInt(kernel.launch().grid(0), plan, where);
      if (!e.ok()) return e.status();
      kp.extent = *std::move(e);
    }
    for (int p = 0; p < kernel.params_size(); ++p) {
      const v1::KernelParam& param = kernel.params(p);
      ParamPlan pp;
      pp.kind = param.kind();
      switch (param.kind()) {
        case v1::PARAM_KIND_BUFFER:
          if (param.buffer() < 0 || param.buffer() >= g.buffers_size()) {
            return absl::InvalidArgumentError(absl::StrCat(
                where, ": param ", p, " names buffer ", param.buffer(), ", which does not exist"));
          }
          pp.buffer = param.buffer();
          break;
        case v1::PARAM_KIND_SYMBOL: {
          const auto it = std::find(plan.symbols.begin(), plan.symbols.end(), param.symbol());
          if (it == plan.symbols.end()) {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": param ", p, " names unknown symbol ", param.symbol()));
          }
          pp.symbol = static_cast<int>(it - plan.symbols.begin());
          break;
        }
        case v1::PARAM_KIND_SCALAR:
          if (param.scalar().kind_case() == v1::Argument::kFloatValue) {
            pp.is_double = true;
            pp.double_value = param.scalar().float_value();
          } else if (param.scalar().kind_case() == v1::Argument::kIntValue) {
            pp.int_value = param.scalar().int_value();
          } else if (param.scalar().kind_case() == v1::Argument::kBoolValue) {
            pp.int_value = param.scalar().bool_value() ? 1 : 0;
          } else {
            return absl::InvalidArgumentError(
                absl::StrCat(where, ": scalar param ", p, " is neither an int nor a float"));
          }
          break;
        case v1::PARAM_KIND_RNG_SEED:
        case v1::PARAM_KIND_RNG_OFFSET:
          break;
        default:
          return absl::InvalidArgumentError(absl::StrCat(where, ": param ", p, " has no kind"));
      }
      kp.params.push_back(pp);
    }
    plan.kernels.push_back(std::move(kp));
  }
  return absl::OkStatus();
}

absl::Status ParseBuffersAndInputs(const v1::CompiledGraph& g, Plan& plan) {
  int num_inputs = g.inputs_size();
  for (int b = 0; b < g.buffers_size(); ++b) {
    const v1::Buffer& buf = g.buffers(b);
    const std::string where = absl::StrCat("buffer ", b, " (", buf.name(), ")");
    BufferPlan bp;
    bp.kind = buf.kind();
    bp.name = buf.name();
    bp.dtype = buf.dtype();
    bp.alignment = buf.alignment() > 0 ? buf.alignment() : 1;
    if ((bp.alignment & (bp.alignment - 1)) != 0 || bp.alignment > kBufferAlignment) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": alignment ", bp.alignment, " is not a power of two up to ", kBufferAlignment));
    }
    absl::StatusOr<IntExpr> size = ParseSymInt(buf.size_bytes(), plan, where);
    if (!size.ok()) return size.status();
    bp.size = *std::move(size);
    switch (buf.kind()) {
      case v1::BUFFER_KIND_INPUT:
        if (buf.input_index() < 0 ||
            (g.inputs_size() > 0 && buf.input_index() >= g.inputs_size())) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, ": input_index ", buf.input_index(), " is out of range"));
        }
        bp.input_index = buf.input_index();
        num_inputs = std::max(num_inputs, buf.input_index() + 1);
        break;
      case v1::BUFFER_KIND_OUTPUT:
        break;
      case v1::BUFFER_KIND_INTERMEDIATE:
      case v1::BUFFER_KIND_WORKSPACE: {
        absl::StatusOr<IntExpr> off = ParseSymInt(buf.arena_offset(), plan, where);
        if (!off.ok()) return off.status();
        bp.offset = *std::move(off);
        break;
      }
      default:
        return absl::InvalidArgumentError(absl::StrCat(where, ": no kind"));
    }
    plan.buffers.push_back(std::move(bp));
  }
  for (const v1::SymbolSource& src : g.symbol_sources()) {
    num_inputs = std::max(num_inputs, src.input_index() + 1);
  }
  for (const v1::PlanStep& step : g.steps()) {
    if (step.has_write_back()) {
      num_inputs = std::max(num_inputs, step.write_back().input_index() + 1);
    }
  }
  for (const v1::OutputBinding& out : g.outputs()) {
    if (out.has_aliases_input()) num_inputs = std::max(num_inputs, out.aliases_input() + 1);
  }
  plan.inputs.resize(static_cast<size_t>(num_inputs));
  plan.input_buffer.assign(static_cast<size_t>(num_inputs), -1);
  for (size_t b = 0; b < plan.buffers.size(); ++b) {
    const BufferPlan& bp = plan.buffers[b];
    if (bp.kind != v1::BUFFER_KIND_INPUT) continue;
    int& slot = plan.input_buffer[static_cast<size_t>(bp.input_index)];
    if (slot >= 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("buffers ", slot, " and ", b, " both hold input ", bp.input_index));
    }
    slot = static_cast<int>(b);
  }
  for (int i = 0; i < g.inputs_size(); ++i) {
    const v1::InputSpec& spec = g.inputs(i);
    InputPlan& ip = plan.inputs[static_cast<size_t>(i)];
    const std::string where = absl::StrCat("input ", i, " (", spec.name(), ")");
    ip.has_spec = true;
    ip.name = spec.name();
    ip.symbolic = spec.symbolic();
    ip.dtype = spec.dtype();
    if (spec.sizes_size() != spec.strides_size()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": sizes and strides differ in rank"));
    }
    for (const v1::SymInt& s : spec.sizes()) {
      absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
      if (!e.ok()) return e.status();
      ip.sizes.push_back(*std::move(e));
    }
    for (const v1::SymInt& s : spec.strides()) {
      absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
      if (!e.ok()) return e.status();
      ip.strides.push_back(*std::move(e));
    }
  }
  // Every symbol needs exactly one place to come from.
  std::vector<bool> sourced(plan.symbols.size(), false);
  for (const v1::SymbolSource& src : g.symbol_sources()) {
    const auto it = std::find(plan.symbols.begin(), plan.symbols.end(), src.symbol());
    if (it == plan.symbols.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("symbol source names unknown symbol ", src.symbol()));
    }
    if (src.input_index() < 0 || src.dim() < -1) {
      return absl::InvalidArgumentError(absl::StrCat("symbol ", src.symbol(),
                                                     " has a bad source (input ", src.input_index(),
                                                     ", dim ", src.dim(), ")"));
    }
    SourcePlan sp;
    sp.symbol = static_cast<int>(it - plan.symbols.begin());
    sp.input = src.input_index();
    sp.dim = src.dim();
    sp.from_stride = src.from_stride();
    sourced[static_cast<size_t>(sp.symbol)] = true;
    plan.sources.push_back(sp);
  }
  for (size_t s = 0; s < sourced.size(); ++s) {
    if (!sourced[s]) {
      return absl::InvalidArgumentError(
          absl::StrCat("symbol ", plan.symbols[s], " has no symbol source"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseSteps(const v1::CompiledGraph& g, Plan& plan) {
  const int num_inputs = static_cast<int>(plan.inputs.size());
  for (int i = 0; i < g.steps_size(); ++i) {
    const v1::PlanStep& step = g.steps(i);
    StepPlan sp;
    sp.kind = step.kind_case();
    sp.index = i;
    absl::Status s;
    switch (step.kind_case()) {
      case v1::PlanStep::kLaunch:
        sp.kernel = step.launch().kernel();
        sp.label = absl::StrCat("step ", i, " (launch kernel ", sp.kernel, ")");
        if (sp.kernel < 0 || sp.kernel >= static_cast<int>(plan.kernels.size())) {
          return absl::InvalidArgumentError(absl::StrCat(sp.label, ": no such kernel"));
        }
        sp.label = absl::StrCat("step ", i, " (launch ",
                                plan.kernels[static_cast<size_t>(sp.kernel)].name, ")");
        break;
      case v1::PlanStep::kExternCall:
        sp.label = absl::StrCat("step ", i, " (extern ", step.extern_call().op(), ", node ",
                                step.extern_call().node(), ")");
        if (!IsExternOpSupported(step.extern_call().op())) {
          return absl::UnimplementedError(absl::StrCat(
              sp.label, ": the CPU runtime does not implement ", step.extern_call().op()));
        }
        s = ParseCall(step.extern_call(), plan, sp);
        break;
      case v1::PlanStep::kFallback:
        sp.label = absl::StrCat("step ", i, " (fallback ", step.fallback().op(), ", node ",
                                step.fallback().node(), ")");
        sp.reason = step.fallback().reason();
        s = ParseCall(step.fallback(), plan, sp);
        break;
      case v1::PlanStep::kCopy:
        sp.label = absl::StrCat("step ", i, " (copy)");
        s = ParseView(step.copy().src(), plan, absl::StrCat(sp.label, " src"), false, sp.src);
        if (s.ok()) {
          s = ParseView(step.copy().dst(), plan, absl::StrCat(sp.label, " dst"), false, sp.dst);
        }
        break;
      case v1::PlanStep::kWriteBack:
        sp.label =
            absl::StrCat("step ", i, " (write back input ", step.write_back().input_index(), ")");
        sp.input_index = step.write_back().input_index();
        if (sp.input_index < 0 || sp.input_index >= num_inputs) {
          return absl::InvalidArgumentError(absl::StrCat(sp.label, ": no such input"));
        }
        s = ParseView(step.write_back().src(), plan, absl::StrCat(sp.label, " src"), false, sp.src);
        break;
      case v1::PlanStep::kFree:
        sp.label = absl::StrCat("step ", i, " (free buffer ", step.free().buffer(), ")");
        sp.buffer = step.free().buffer();
        if (sp.buffer < 0 || sp.buffer >= static_cast<int>(plan.buffers.size())) {
          return absl::InvalidArgumentError(absl::StrCat(sp.label, ": no such buffer"));
        }
        break;
      case v1::PlanStep::KIND_NOT_SET:
        return absl::InvalidArgumentError(absl::StrCat("step ", i, " has no kind"));
    }
    if (!s.ok()) return s;
    plan.steps.push_back(std::move(sp));
  }
  return absl::OkStatus();
}

absl::Status ParseOutputs(const v1::CompiledGraph& g, Plan& plan) {
  for (int i = 0; i < g.outputs_size(); ++i) {
    const v1::OutputBinding& out = g.outputs(i);
    const std::string where = absl::StrCat("output ", i);
    OutputPlan op;
    if (out.none()) {
      op.kind = OutputPlan::Kind::kNone;
    } else if (!out.symbol().empty()) {
      op.kind = OutputPlan::Kind::kSymbol;
      v1::SymInt s;
      s.set_expr(out.symbol());
      absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
      if (!e.ok()) return e.status();
      op.symbol = *std::move(e);
    } else {
      op.kind = OutputPlan::Kind::kView;
      absl::Status s = ParseView(out.view(), plan, where, false, op.view);
      if (!s.ok()) return s;
      const BufferPlan& buf = plan.buffers[static_cast<size_t>(op.view.buffer)];
      if (out.has_aliases_input() &&
          (buf.kind != v1::BUFFER_KIND_INPUT || buf.input_index != out.aliases_input())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " aliases input ", out.aliases_input(), " but views buffer ",
                         op.view.buffer, ", which does not hold that input"));
      }
      if (out.has_aliases_output()) {
        const int j = out.aliases_output();
        if (j < 0 || j >= i ||
            plan.outputs[static_cast<size_t>(j)].kind != OutputPlan::Kind::kView ||
            plan.outputs[static_cast<size_t>(j)].view.buffer != op.view.buffer) {
          return absl::InvalidArgumentError(
              absl::StrCat(where, " aliases output ", j, " but does not view the same buffer"));
        }
      }
    }
    plan.outputs.push_back(std::move(op));
  }
  return absl::OkStatus();
}

// ---- Run ----

// The state of one run: symbol values, buffer addresses and what keeps them alive.
struct RunState {
  std::vector<int64_t> values;
  std::vector<char*> base;
  std::vector<int64_t> bytes;
  std::vector<std::shared_ptr<void>> owner;
  Arena arena;
};

absl::StatusOr<Tensor> MakeView(const ViewPlan& v, const RunState& st, absl::string_view where) {
  std::vector<int64_t> sizes, strides;
  sizes.reserve(v.sizes.size());
  strides.reserve(v.strides.size());
  int64_t last = 0;
  bool empty = false;
  for (size_t d = 0; d < v.sizes.size(); ++d) {
    absl::StatusOr<int64_t> size = v.sizes[d].Evaluate(st.values);
    if (!size.ok()) return size.status();
    absl::StatusOr<int64_t> stride = v.strides[d].Evaluate(st.values);
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
  absl::StatusOr<int64_t> offset = v.offset.Evaluate(st.values);
  if (!offset.ok()) return offset.status();
  const size_t b = static_cast<size_t>(v.buffer);
  const int64_t es = ElementSize(v.dtype);
  // A view reaching past its buffer is a plan bug that would corrupt memory: refuse it.
  if (*offset < 0 || (!empty && (*offset + last + 1) * es > st.bytes[b])) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": view [", absl::StrJoin(sizes, ", "), "] strides [", absl::StrJoin(strides, ", "),
        "] offset ", *offset, " reaches past the ", st.bytes[b], " bytes of buffer ", v.buffer));
  }
  return WithOwner(Tensor(st.base[b], v.dtype, std::move(sizes), std::move(strides), *offset),
                   st.owner[b]);
}

absl::Status Resolve(const ArgPlan& a, const RunState& st, absl::string_view where,
                     CallValue& out) {
  switch (a.kind) {
    case ArgPlan::Kind::kConstant:
      out = a.constant;
      return absl::OkStatus();
    case ArgPlan::Kind::kSymInt: {
      absl::StatusOr<int64_t> v = a.expr.Evaluate(st.values);
      if (!v.ok()) return v.status();
      out.v = *v;
      return absl::OkStatus();
    }
    case ArgPlan::Kind::kTensor: {
      absl::StatusOr<Tensor> t = MakeView(a.view, st, where);
      if (!t.ok()) return t.status();
      out.v = *std::move(t);
      return absl::OkStatus();
    }
    case ArgPlan::Kind::kList: {
      CallValue::List list(a.items.size());
      for (size_t i = 0; i < a.items.size(); ++i) {
        absl::Status s = Resolve(a.items[i], st, where, list[i]);
        if (!s.ok()) return s;
      }
      out.v = std::move(list);
      return absl::OkStatus();
    }
  }
  return absl::OkStatus();
}

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

absl::Status BindSymbols(const Plan& plan, absl::Span<const Tensor> inputs, RunState& st) {
  st.values.assign(plan.symbols.size(), 0);
  std::vector<int> bound_by(plan.symbols.size(), -1);
  for (const SourcePlan& src : plan.sources) {
    const std::string where = InputName(plan, static_cast<size_t>(src.input));
    const Tensor& t = inputs[static_cast<size_t>(src.input)];
    int64_t value;
    if (src.dim == -1) {
      if (!t.defined() || t.numel() != 1 || IsFloating(t.dtype())) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " gives symbol ", plan.symbols[static_cast<size_t>(src.symbol)],
                         " and must be a one-element integer tensor, got ", t.DebugString()));
      }
      value = t.ItemInt();
    } else {
      if (!t.defined() || src.dim >= t.dim()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, " gives symbol ", plan.symbols[static_cast<size_t>(src.symbol)],
                         " from dim ", src.dim, " but is ", t.DebugString()));
      }
      value = src.from_stride ? t.stride(src.dim) : t.size(src.dim);
    }
    const size_t s = static_cast<size_t>(src.symbol);
    if (bound_by[s] >= 0 && st.values[s] != value) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, " gives symbol ", plan.symbols[s], " = ", value, " but ",
                       InputName(plan, static_cast<size_t>(bound_by[s])), " gave ", st.values[s]));
    }
    bound_by[s] = src.input;
    st.values[s] = value;
  }
  return absl::OkStatus();
}

absl::Status CheckInputs(const Plan& plan, absl::Span<const Tensor> inputs, const RunState& st) {
  for (size_t i = 0; i < plan.inputs.size(); ++i) {
    const InputPlan& ip = plan.inputs[i];
    const Tensor& t = inputs[i];
    const std::string where = InputName(plan, i);
    const int buffer = plan.input_buffer[i];
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
        absl::StatusOr<int64_t> size = ip.sizes[d].Evaluate(st.values);
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
        absl::StatusOr<int64_t> stride = ip.strides[d].Evaluate(st.values);
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
    const BufferPlan& bp = plan.buffers[static_cast<size_t>(buffer)];
    if (!t.defined()) return absl::InvalidArgumentError(absl::StrCat(where, " is undefined"));
    if (bp.dtype != v1::DTYPE_UNSPECIFIED && t.dtype() != bp.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(where, " has dtype ", DTypeName(t.dtype()),
                                                     ", the plan expects ", DTypeName(bp.dtype)));
    }
    absl::StatusOr<int64_t> need = bp.size.Evaluate(st.values);
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

}  // namespace

CpuRuntime::CpuRuntime(std::unique_ptr<Plan> plan) : plan_(std::move(plan)) {}
CpuRuntime::~CpuRuntime() = default;

int CpuRuntime::num_inputs() const { return static_cast<int>(plan_->inputs.size()); }
int CpuRuntime::num_outputs() const { return static_cast<int>(plan_->outputs.size()); }

absl::StatusOr<std::unique_ptr<CpuRuntime>> CpuRuntime::Load(const v1::CompiledGraph& g,
                                                             const Options& options) {
  if (g.target() != "x86_64") {
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU runtime runs x86_64 plans, this one targets \"", g.target(), "\""));
  }
  auto plan = std::make_unique<Plan>();
  plan->symbols.assign(g.symbols().begin(), g.symbols().end());
  absl::Status s = ParseBuffersAndInputs(g, *plan);
  if (s.ok()) s = ParseKernels(g, *plan);
  if (s.ok()) s = ParseSteps(g, *plan);
  if (s.ok()) s = ParseOutputs(g, *plan);
  if (!s.ok()) return s;
  plan->pool = std::make_unique<ThreadPool>(ThreadPoolOptions::ForLoops(options.threads));
  return std::unique_ptr<CpuRuntime>(new CpuRuntime(std::move(plan)));
}

absl::StatusOr<std::vector<Tensor>> CpuRuntime::Run(absl::Span<const Tensor> inputs,
                                                    const RunOptions& options) const {
  const Plan& plan = *plan_;
  if (inputs.size() != plan.inputs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the plan takes ", plan.inputs.size(), " inputs, got ", inputs.size()));
  }
  RunState st;
  absl::Status s = BindSymbols(plan, inputs, st);
  if (s.ok()) s = CheckInputs(plan, inputs, st);
  if (!s.ok()) return s;

  // Lay out the buffers.
  const size_t nb = plan.buffers.size();
  st.base.assign(nb, nullptr);
  st.bytes.assign(nb, 0);
  st.owner.assign(nb, nullptr);
  std::vector<int64_t> offsets(nb, 0);
  int64_t arena_bytes = 0;
  for (size_t b = 0; b < nb; ++b) {
    const BufferPlan& bp = plan.buffers[b];
    const std::string where = absl::StrCat("buffer ", b, " (", bp.name, ")");
    absl::StatusOr<int64_t> size = bp.size.Evaluate(st.values);
    if (!size.ok()) return Prefixed(where, size.status());
    if (*size < 0) return absl::InvalidArgumentError(absl::StrCat(where, ": negative size"));
    st.bytes[b] = *size;
    if (!bp.in_arena()) continue;
    absl::StatusOr<int64_t> off = bp.offset.Evaluate(st.values);
    if (!off.ok()) return Prefixed(where, off.status());
    if (*off < 0 || *off % bp.alignment != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": arena offset ", *off, " is not aligned to ", bp.alignment));
    }
    offsets[b] = *off;
    arena_bytes = std::max(arena_bytes, *off + *size);
  }
  st.arena = TakeArena(plan, arena_bytes);
  if (st.arena.memory == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot allocate an arena of ", arena_bytes, " bytes"));
  }
  struct ArenaReturn {
    const Plan& plan;
    Arena& arena;
    ~ArenaReturn() { ReturnArena(plan, std::move(arena)); }
  } arena_return{plan, st.arena};
  if (options.poison) Poison(st.arena.memory.get(), arena_bytes);
  for (size_t b = 0; b < nb; ++b) {
    const BufferPlan& bp = plan.buffers[b];
    switch (bp.kind) {
      case v1::BUFFER_KIND_INPUT: {
        const Tensor& t = inputs[static_cast<size_t>(bp.input_index)];
        st.base[b] = static_cast<char*>(t.data());
        st.owner[b] = t.owner();
        // Views of an input may reach as far as the caller's tensor does.
        st.bytes[b] = std::max(st.bytes[b], t.SpanBytes());
        break;
      }
      case v1::BUFFER_KIND_OUTPUT:
        st.owner[b] = AllocateAligned(st.bytes[b]);
        if (st.owner[b] == nullptr) {
          return absl::ResourceExhaustedError(absl::StrCat("cannot allocate output buffer ", b));
        }
        st.base[b] = static_cast<char*>(st.owner[b].get());
        if (options.poison) Poison(st.base[b], st.bytes[b]);
        break;
      default:
        st.base[b] = static_cast<char*>(st.arena.memory.get()) + offsets[b];
        break;
    }
  }

  ExternContext ctx;
  ctx.pool = plan.pool.get();
  ctx.max_threads = options.threads;
  ctx.rng_seed = options.rng_seed;
  ctx.rng_offset = options.rng_offset;
  ctx.world_size = options.world_size;
  ctx.collective = &options.collective;
  int64_t rng_seed = static_cast<int64_t>(options.rng_seed);
  int64_t rng_offset = static_cast<int64_t>(options.rng_offset);

  for (const StepPlan& step : plan.steps) {
    switch (step.kind) {
      case v1::PlanStep::kLaunch: {
        const KernelPlan& k = plan.kernels[static_cast<size_t>(step.kernel)];
        std::vector<void*> params(k.params.size());
        for (size_t p = 0; p < k.params.size(); ++p) {
          const ParamPlan& pp = k.params[p];
          switch (pp.kind) {
            case v1::PARAM_KIND_BUFFER:
              params[p] = st.base[static_cast<size_t>(pp.buffer)];
              break;
            case v1::PARAM_KIND_SYMBOL:
              params[p] = &st.values[static_cast<size_t>(pp.symbol)];
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
        absl::StatusOr<int64_t> extent = k.extent.Evaluate(st.values);
        if (!extent.ok()) return Prefixed(step.label, extent.status());
        const CpuKernelFn fn = k.fn;
        void* const* argv = params.data();
        plan.pool->ParallelFor(*extent, 1, options.threads,
                               [fn, argv](int64_t begin, int64_t end) { fn(argv, begin, end); });
        break;
      }
      case v1::PlanStep::kExternCall:
      case v1::PlanStep::kFallback: {
        std::vector<CallValue> args(step.args.size());
        for (size_t i = 0; i < step.args.size(); ++i) {
          s = Resolve(step.args[i], st, step.label, args[i]);
          if (!s.ok()) return s;
        }
        std::vector<std::pair<std::string, CallValue>> kwargs(step.kwargs.size());
        for (size_t i = 0; i < step.kwargs.size(); ++i) {
          kwargs[i].first = step.kwargs[i].first;
          s = Resolve(step.kwargs[i].second, st, step.label, kwargs[i].second);
          if (!s.ok()) return s;
        }
        std::vector<Tensor> outs(step.outputs.size());
        for (size_t i = 0; i < step.outputs.size(); ++i) {
          if (step.outputs[i].buffer < 0) continue;
          absl::StatusOr<Tensor> t = MakeView(step.outputs[i], st, step.label);
          if (!t.ok()) return t.status();
          outs[i] = *std::move(t);
        }
        // An op that draws random numbers draws from stream rng_offset + its RNG number.
        const uint64_t rng_stream =
            options.rng_offset + static_cast<uint64_t>(std::max<int64_t>(step.rng_stream, 0));
        if (step.kind == v1::PlanStep::kExternCall) {
          ExternContext step_ctx = ctx;
          step_ctx.rng_offset = rng_stream;
          ExternCall call;
          call.op = step.op;
          call.args = args;
          call.kwargs = kwargs;
          call.outputs = outs;
          call.context = &step_ctx;
          s = RunExternOp(call);
        } else {
          if (!options.fallback) {
            return absl::FailedPreconditionError(absl::StrCat(step.label, " must run eagerly (",
                                                              step.reason,
                                                              ") and no fallback hook was given"));
          }
          FallbackCall call;
          call.op = step.op;
          call.node = step.node;
          call.reason = step.reason;
          call.rng_seed = options.rng_seed;
          call.rng_stream = rng_stream;
          call.args = std::move(args);
          call.kwargs = std::move(kwargs);
          call.outputs = std::move(outs);
          s = options.fallback(call);
        }
        if (!s.ok()) return Prefixed(step.label, s);
        break;
      }
      case v1::PlanStep::kCopy:
      case v1::PlanStep::kWriteBack: {
        absl::StatusOr<Tensor> src = MakeView(step.src, st, step.label);
        if (!src.ok()) return src.status();
        Tensor dst;
        if (step.kind == v1::PlanStep::kCopy) {
          absl::StatusOr<Tensor> d = MakeView(step.dst, st, step.label);
          if (!d.ok()) return d.status();
          dst = *std::move(d);
        } else {
          dst = inputs[static_cast<size_t>(step.input_index)];
        }
        if (src->dtype() != dst.dtype() || src->sizes() != dst.sizes()) {
          return absl::InvalidArgumentError(absl::StrCat(step.label, ": source ",
                                                         src->DebugString(), " and destination ",
                                                         dst.DebugString(), " differ"));
        }
        s = CopyTensor(*src, dst);
        if (!s.ok()) return Prefixed(step.label, s);
        break;
      }
      case v1::PlanStep::kFree: {
        const size_t b = static_cast<size_t>(step.buffer);
        if (options.poison && plan.buffers[b].in_arena()) Poison(st.base[b], st.bytes[b]);
        break;
      }
      default:
        break;
    }
  }

  std::vector<Tensor> outputs;
  outputs.reserve(plan.outputs.size());
  for (size_t i = 0; i < plan.outputs.size(); ++i) {
    const OutputPlan& op = plan.outputs[i];
    const std::string where = absl::StrCat("output ", i);
    switch (op.kind) {
      case OutputPlan::Kind::kNone:
        outputs.emplace_back();
        break;
      case OutputPlan::Kind::kSymbol: {
        absl::StatusOr<int64_t> v = op.symbol.Evaluate(st.values);
        if (!v.ok()) return Prefixed(where, v.status());
        outputs.push_back(Tensor::Scalar(*v));
        break;
      }
      case OutputPlan::Kind::kView: {
        absl::StatusOr<Tensor> t = MakeView(op.view, st, where);
        if (!t.ok()) return t.status();
        if (plan.buffers[static_cast<size_t>(op.view.buffer)].in_arena()) {
          // The arena is reused by the next run: hand out a copy.
          Tensor copy = Tensor::Empty(t->sizes(), t->dtype());
          s = CopyTensor(*t, copy);
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

}  // namespace kiln::runtime
