#include "client/runtime/cpu_plan.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "client/runtime/extern_ops.h"

namespace kiln::runtime {
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

// Appends the parsed `syms` (a view's or an input's sizes or strides) to `out`.
absl::Status ParseSymInts(const google::protobuf::RepeatedPtrField<v1::SymInt>& syms,
                          const Plan& plan, absl::string_view where, std::vector<IntExpr>& out) {
  for (const v1::SymInt& s : syms) {
    absl::StatusOr<IntExpr> e = ParseSymInt(s, plan, where);
    if (!e.ok()) return e.status();
    out.push_back(*std::move(e));
  }
  return absl::OkStatus();
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
  if (absl::Status s = ParseSymInts(v.sizes(), plan, where, out.sizes); !s.ok()) return s;
  if (absl::Status s = ParseSymInts(v.strides(), plan, where, out.strides); !s.ok()) return s;
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

absl::Status ParseBuffers(const v1::CompiledGraph& g, Plan& plan) {
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
  return absl::OkStatus();
}

// The plan's inputs: as many as anything in the artifact refers to (older artifacts list no
// InputSpecs), each with its spec and the buffer that holds it.
absl::Status ParseInputs(const v1::CompiledGraph& g, Plan& plan) {
  int num_inputs = g.inputs_size();
  for (const BufferPlan& bp : plan.buffers) num_inputs = std::max(num_inputs, bp.input_index + 1);
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
    if (absl::Status s = ParseSymInts(spec.sizes(), plan, where, ip.sizes); !s.ok()) return s;
    if (absl::Status s = ParseSymInts(spec.strides(), plan, where, ip.strides); !s.ok()) return s;
  }
  return absl::OkStatus();
}

// Every symbol needs a place to come from.
absl::Status ParseSymbolSources(const v1::CompiledGraph& g, Plan& plan) {
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

}  // namespace

absl::StatusOr<std::unique_ptr<CpuRuntime::Plan>> LoadPlan(const v1::CompiledGraph& g) {
  if (g.target() != "x86_64") {
    return absl::InvalidArgumentError(
        absl::StrCat("the CPU runtime runs x86_64 plans, this one targets \"", g.target(), "\""));
  }
  auto plan = std::make_unique<Plan>();
  plan->symbols.assign(g.symbols().begin(), g.symbols().end());
  absl::Status s = ParseBuffers(g, *plan);
  if (s.ok()) s = ParseInputs(g, *plan);
  if (s.ok()) s = ParseSymbolSources(g, *plan);
  if (s.ok()) s = ParseKernels(g, *plan);
  if (s.ok()) s = ParseSteps(g, *plan);
  if (s.ok()) s = ParseOutputs(g, *plan);
  if (!s.ok()) return s;
  return plan;
}

}  // namespace kiln::runtime
