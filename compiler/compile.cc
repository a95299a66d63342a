#include "compiler/compile.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/codegen/registry.h"
#include "compiler/decompose/decompose.h"
#include "compiler/fuse/batch_write_backs.h"
#include "compiler/fuse/coalesce_dims.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/narrow_masks.h"
#include "compiler/fuse/order_dims.h"
#include "compiler/fuse/pad_rows.h"
#include "compiler/fuse/split_reductions.h"
#include "compiler/loop/verify.h"
#include "compiler/lower/kernel_names.h"
#include "compiler/lower/lower.h"
#include "compiler/plan/plan.h"
#include "proto/base/digest.h"
#include "proto/base/serialize.h"

namespace kiln::compiler {
namespace {

// Runs one phase: checks cancellation first, reports its span, and names the phase in
// internal errors. A phase reads what the one before made, so its INVALID_ARGUMENT is a bug of
// the compiler (INTERNAL) -- except in a phase that reads the request's graph itself
// (`reads_graph`: decompose), whose INVALID_ARGUMENT says what is wrong with that graph.
template <typename Fn>
auto RunPhase(const CompileContext& context, absl::string_view name, Fn fn,
              bool reads_graph = false) -> decltype(fn()) {
  if (context.cancel != nullptr && context.cancel->load(std::memory_order_relaxed)) {
    return absl::CancelledError(absl::StrCat("compile cancelled before ", name));
  }
  const absl::Time start = absl::Now();
  auto result = fn();
  const absl::Time end = absl::Now();
  if (context.on_phase) context.on_phase(name, start, end);
  if (!result.ok()) {
    const absl::Status& s = result.status();
    if (reads_graph && s.code() == absl::StatusCode::kInvalidArgument) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": ", s.message()));
    }
    if (s.code() == absl::StatusCode::kInternal || s.code() == absl::StatusCode::kUnimplemented ||
        s.code() == absl::StatusCode::kInvalidArgument ||
        s.code() == absl::StatusCode::kOutOfRange) {
      return absl::InternalError(absl::StrCat(name, ": ", s.message()));
    }
  }
  return result;
}

}  // namespace

absl::StatusOr<v1::CompiledGraph> Compile(const graph::Graph& graph,
                                          const v1::CompileOptions& options,
                                          const std::string& compile_key,
                                          const CompileContext& context) {
  const codegen::BackendRegistry& backends =
      context.backends != nullptr ? *context.backends : codegen::BuiltinBackends();
  absl::StatusOr<const codegen::Backend*> backend = backends.For(options.target());
  if (!backend.ok()) return backend.status();

  const canon::CanonicalGraph canonical(graph);
  auto prims = RunPhase(
      context, "decompose",
      [&]() -> absl::StatusOr<decompose::PrimGraph> {
        return decompose::Decompose(graph, canonical);
      },
      /*reads_graph=*/true);
  if (!prims.ok()) return prims.status();
  auto show = [&](absl::string_view phase, const loop::Program& program) {
    if (context.on_program) context.on_program(phase, program);
  };
  auto lowered = RunPhase(context, "lower", [&] { return lower::Lower(*prims); });
  if (!lowered.ok()) return lowered.status();
  show("lower", *lowered);
  lowered = RunPhase(context, "pad", [&]() -> absl::StatusOr<loop::Program> {
    return fuse::PadMatmulRows(*std::move(lowered), (*backend)->MatmulRowAlignment());
  });
  if (!lowered.ok()) return lowered.status();
  show("pad", *lowered);
  auto fused = RunPhase(context, "fuse", [&] { return fuse::Fuse(*std::move(lowered)); });
  if (!fused.ok()) return fused.status();
  show("fuse", *fused);
  fused = RunPhase(context, "split", [&]() -> absl::StatusOr<loop::Program> {
    return fuse::SplitReductions(*std::move(fused),
                                 [&](const loop::Program& p, const loop::Kernel& k) {
                                   return (*backend)->ReductionParts(p, k);
                                 });
  });
  if (!fused.ok()) return fused.status();
  show("split", *fused);
  fused = RunPhase(context, "narrow", [&]() -> absl::StatusOr<loop::Program> {
    return fuse::NarrowMaskedIndices(*std::move(fused));
  });
  if (!fused.ok()) return fused.status();
  show("narrow", *fused);
  fused = RunPhase(context, "order", [&]() -> absl::StatusOr<loop::Program> {
    return fuse::OrderDims(*std::move(fused));
  });
  if (!fused.ok()) return fused.status();
  show("order", *fused);
  fused = RunPhase(context, "coalesce", [&]() -> absl::StatusOr<loop::Program> {
    return fuse::CoalesceDims(*std::move(fused));
  });
  if (!fused.ok()) return fused.status();
  show("coalesce", *fused);
  fused = RunPhase(context, "write_back", [&]() -> absl::StatusOr<loop::Program> {
    return fuse::BatchWriteBacks(*std::move(fused));
  });
  if (!fused.ok()) return fused.status();
  show("write_back", *fused);
  fused = RunPhase(context, "specialize", [&]() -> absl::StatusOr<loop::Program> {
    return (*backend)->Specialize(*std::move(fused));
  });
  if (!fused.ok()) return fused.status();
  lower::NameKernels(canonical, *fused);
  show("specialize", *fused);
  plan::PlanOptions plan_options;
  plan_options.target = options.target();
  plan_options.graph_nodes = static_cast<int32_t>(graph.num_nodes());
  auto planned = RunPhase(context, "plan", [&]() -> absl::StatusOr<v1::CompiledGraph> {
    auto schedules = (*backend)->Schedule(*fused);
    if (!schedules.ok()) return schedules.status();
    return plan::Plan(*fused, *schedules, plan_options);
  });
  if (!planned.ok()) return planned.status();
  auto code = RunPhase(context, "codegen", [&]() -> absl::StatusOr<codegen::GeneratedCode> {
    if (absl::Status s = loop::VerifyTypes(*fused); !s.ok()) return s;
    auto generated = (*backend)->Generate(*fused, {});
    if (generated.ok() && generated->kernels.size() != fused->kernels.size()) {
      return absl::InternalError(absl::StrCat("the ", options.target(), " backend generated ",
                                              generated->kernels.size(), " kernels of ",
                                              fused->kernels.size()));
    }
    return generated;
  });
  if (!code.ok()) return code.status();

  v1::CompiledGraph out = *std::move(planned);
  out.set_compile_key(compile_key);
  for (codegen::CodeModule& m : code->modules) {
    v1::CodeModule* module = out.add_modules();
    module->set_target(options.target());
    module->set_kind(m.kind);
    *module->mutable_digest() = DigestOf(m.binary);
    module->set_binary(std::move(m.binary));
  }
  for (size_t i = 0; i < code->kernels.size(); ++i) {
    const codegen::KernelCode& k = code->kernels[i];
    v1::Kernel* kernel = out.mutable_kernels(static_cast<int>(i));
    kernel->set_name(k.entry);
    kernel->set_module(k.module);
    kernel->set_vector_width(k.vector_width);
    kernel->set_registers(k.registers);
    kernel->set_static_shared_memory_bytes(k.static_shared_memory_bytes);
  }
  for (const std::string& g : graph.shape_env_guards()) out.mutable_guards()->add_shape_env(g);
  out.mutable_guards()->set_python_expr(graph.python_guard());

  if (options.require_cudagraph() && !out.cudagraph().capturable()) {
    std::string why;
    for (const v1::CaptureReason& r : out.cudagraph().reasons()) {
      absl::StrAppend(&why, why.empty() ? "" : "; ", r.node(), r.node().empty() ? "" : ": ",
                      r.detail());
    }
    return absl::FailedPreconditionError(
        absl::StrCat("require_cudagraph: the plan cannot be captured: ", why));
  }
  if (context.cancel != nullptr && context.cancel->load(std::memory_order_relaxed)) {
    return absl::CancelledError("compile cancelled");
  }
  const absl::Time start = absl::Now();
  out.set_decision_digest(Sha256Hex(DeterministicBytes(out)));
  if (context.on_phase) context.on_phase("digest", start, absl::Now());
  return out;
}

}  // namespace kiln::compiler
