#pragma once

// The CPU runtime's plan: a CompiledGraph turned into what Run executes, and LoadPlan, which
// validates the artifact and builds it. Every expression is parsed and every index checked
// at load, so running only evaluates expressions and never meets a dangling reference.
// Internal to client/runtime (cpu_runtime.cc runs it); not part of the runtime's API.

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "client/runtime/call.h"
#include "client/runtime/cpu_runtime.h"
#include "client/runtime/dtype.h"
#include "client/runtime/module.h"
#include "kiln/v1/artifact.pb.h"
#include "proto/base/int_expr.h"
#include "proto/base/sync.h"
#include "proto/base/thread_pool.h"
#include "proto/kernel_abi.h"

namespace kiln::runtime {

// A TensorView: a strided view of one buffer, its geometry over the symbols.
struct ViewPlan {
  int buffer = -1;  // -1: a result the plan drops
  DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<IntExpr> sizes, strides;
  IntExpr offset;
};

// An extern or fallback call's argument: a constant, a symbolic int, a view, or a list.
struct ArgPlan {
  enum class Kind { kConstant, kSymInt, kTensor, kList } kind = Kind::kConstant;
  CallValue constant;
  IntExpr expr;
  ViewPlan view;
  std::vector<ArgPlan> items;
};

// One kernel parameter, as the kernel ABI passes it (a pointer to the value).
struct ParamPlan {
  v1::ParamKind kind = v1::PARAM_KIND_UNSPECIFIED;
  int buffer = -1;
  int symbol = -1;
  // PARAM_KIND_SCALAR: the value the kernel reads, in its Argument's type.
  int64_t int_value = 0;
  double double_value = 0;
  bool is_double = false;
};

// A kernel with its entry point resolved in a loaded module.
struct KernelPlan {
  std::string name;
  CpuKernelFn fn = nullptr;
  std::vector<ParamPlan> params;
  IntExpr extent = IntExpr::Constant(1);  // the launch's range [0, extent)
};

struct BufferPlan {
  v1::BufferKind kind = v1::BUFFER_KIND_UNSPECIFIED;
  IntExpr size;
  IntExpr offset;  // in the arena, for intermediates and workspaces
  int64_t alignment = kBufferAlignment;
  int input_index = -1;
  DType dtype = v1::DTYPE_UNSPECIFIED;
  std::string name;
  bool in_arena() const {
    return kind == v1::BUFFER_KIND_INTERMEDIATE || kind == v1::BUFFER_KIND_WORKSPACE;
  }
};

// One PlanStep; which fields are set follows `kind`.
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

// What an input must look like (CompiledGraph.inputs); has_spec is false for artifacts
// without input specs.
struct InputPlan {
  bool has_spec = false;
  std::string name;
  bool symbolic = false;
  DType dtype = v1::DTYPE_UNSPECIFIED;
  std::vector<IntExpr> sizes, strides;
};

// Where a symbol's value comes from: an input's size or stride in `dim`, or (dim -1) the
// value of a symbolic-int input.
struct SourcePlan {
  int symbol = 0;
  int input = 0;
  int dim = -1;
  bool from_stride = false;
};

// A run's arena (intermediates and workspaces); the plan keeps a few between runs.
struct Arena {
  std::shared_ptr<void> memory;
  int64_t bytes = 0;
};

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

// Validates `graph` (an x86_64 CompiledGraph) and builds its plan: code modules loaded
// (digest-checked), kernel entries resolved, expressions parsed, indices checked. The pool
// is left to the caller. Errors are those cpu_runtime.h lists for Load.
absl::StatusOr<std::unique_ptr<CpuRuntime::Plan>> LoadPlan(const v1::CompiledGraph& graph);

}  // namespace kiln::runtime
