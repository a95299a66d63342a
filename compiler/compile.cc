#include "compiler/compile.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compiler/canon/canonical_graph.h"
#include "compiler/codegen/x86/codegen.h"
#include "compiler/decompose/decompose.h"
#include "compiler/fuse/fuse.h"
#include "compiler/lower/lower.h"
#include "compiler/plan/plan.h"
#include "proto/base/digest.h"
#include "proto/base/serialize.h"

namespace kiln::compiler {
namespace {

// Runs one phase: checks cancellation first, reports its span, and names the phase in
// internal errors.
template <typename Fn>
auto RunPhase(const CompileContext& context, absl::string_view name, Fn fn) -> decltype(fn()) {
  if (context.cancel != nullptr && context.cancel->load(std::memory_order_relaxed)) {
    return absl::CancelledError(absl::StrCat("compile cancelled before ", name));
  }
  const absl::Time start = absl::Now();
  auto result = fn();
  const absl::Time end = absl::Now();
  if (context.on_phase) context.on_phase(name, start, end);
  if (!result.ok()) {
    const absl::Status& s = result.status();
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
  if (options.target() == "cuda:sm_90") {
    return absl::UnimplementedError(
        "target cuda:sm_90 is not implemented yet: the NVPTX backend comes later; compile for "
        "x86_64");
  }
  if (options.target() != "x86_64") {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown target `", options.target(), "`: expected x86_64 or cuda:sm_90"));
  }

  auto prims = RunPhase(context, "decompose", [&]() -> absl::StatusOr<decompose::PrimGraph> {
    const canon::CanonicalGraph canonical(graph);
    return decompose::Decompose(graph, canonical);
  });
  if (!prims.ok()) return prims.status();
  auto lowered = RunPhase(context, "lower", [&] { return lower::Lower(*prims); });
  if (!lowered.ok()) return lowered.status();
  auto fused = RunPhase(context, "fuse", [&] { return fuse::Fuse(*std::move(lowered)); });
  if (!fused.ok()) return fused.status();
  plan::PlanOptions plan_options;
  plan_options.target = options.target();
  plan_options.graph_nodes = static_cast<int32_t>(graph.num_nodes());
  auto planned = RunPhase(context, "plan", [&] { return plan::Plan(*fused, plan_options); });
  if (!planned.ok()) return planned.status();
  auto code =
      RunPhase(context, "codegen", [&] { return codegen::x86::GenerateSharedObject(*fused); });
  if (!code.ok()) return code.status();

  v1::CompiledGraph out = *std::move(planned);
  out.set_compile_key(compile_key);
  v1::CodeModule* module = out.add_modules();
  module->set_target(options.target());
  module->set_kind(v1::BINARY_KIND_SHARED_OBJECT);
  *module->mutable_digest() = DigestOf(code->shared_object);
  module->set_binary(std::move(code->shared_object));
  for (int i = 0; i < out.kernels_size() && static_cast<size_t>(i) < code->vector_widths.size();
       ++i) {
    out.mutable_kernels(i)->set_vector_width(code->vector_widths[static_cast<size_t>(i)]);
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
