#pragma once

// Graphs for compiler tests: the shared real graphs as kiln.v1.Graph (and as fused loop
// programs), a small hand-written graph to mutate, and compiling a graph for the CPU.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "compiler/loop/ir.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/graph.pb.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {

struct NamedGraph {
  std::string name;  // file name without directory, e.g. "nanogpt_fp32.bw.json"
  v1::Graph graph;
};

// Every graph in GraphsDir(), converted with kiln::fx::ImportCapture (fails the test on
// error).
std::vector<NamedGraph> LoadSharedGraphs();

using ::kiln::testing::LoadSharedGraph;

// Imports `graph` and compiles it for x86_64.
absl::StatusOr<v1::CompiledGraph> CompileForCpu(const v1::Graph& graph);

// CompileForCpu with every reduction that can be cut (fuse/split_reductions.h) cut into up to
// `parts` parts: the x86-64 backend as it is, but for ReductionParts.
absl::StatusOr<v1::CompiledGraph> CompileForCpuCut(const v1::Graph& graph, int64_t parts);

// CompileForCpuCut, and the rows of 16-bit float matrices that matmuls read or write padded
// to multiples of `row_alignment` bytes (fuse/pad_rows.h), as sm_90's backend asks.
absl::StatusOr<v1::CompiledGraph> CompileForCpuTuned(const v1::Graph& graph, int64_t parts,
                                                     int64_t row_alignment);

// `graph` imported, decomposed, lowered (matmul rows padded to `row_alignment` bytes, as the
// target's backend asks: fuse/pad_rows.h) and fused: what backends get.
absl::StatusOr<loop::Program> FuseGraph(const v1::Graph& graph, int64_t row_alignment = 0);

// The shared graph `name` imported, decomposed, lowered and fused.
absl::StatusOr<loop::Program> FuseSharedGraph(const std::string& name);

// x[4,8] f32 cuda:0 -> t = aten.t(x) -> mm = aten.mm(x, t) -> s = aten.sum.dim_IntList(mm,
// [1], true); returns [mm, s].
v1::Graph SmallGraph();

// SmallGraph plus two all_reduces of its mm on process groups `group_a` and `group_b`, each
// waited on; the graph returns both.
v1::Graph CollectiveGraph(const std::string& group_a, const std::string& group_b);

// Pieces of hand-built loop programs over one dimension p0, for fusion and codegen tests.
// Loop variable v and constant c as index expressions.
inline loop::IndexExpr V(int32_t v) { return loop::IndexExpr::Var(v); }
inline loop::IndexExpr C(int64_t c) { return loop::IndexExpr::Const(c); }
// A graph input of `size` elements `stride` apart (its buffer holds size * stride); returns
// its buffer.
int32_t AddInput(loop::Program& p, int64_t size, int64_t stride = 1);
// A buffer of `size` elements that the plan allocates; returns it.
int32_t AddBuffer(loop::Program& p, int64_t size);
// AddBuffer, and the graph outputs the buffer whole.
int32_t AddOutput(loop::Program& p, int64_t size);
// A load of `buffer` at p0 * stride; a store of SSA value `value` into `buffer` at p0.
loop::Inst LoadAt(int32_t buffer, int64_t stride = 1);
loop::Inst StoreAt(int32_t buffer, int32_t value);
// An f32 constant; `op` (a binary opcode) of SSA values a and b, of type f32.
loop::Inst ConstF32(double value);
loop::Inst Binary(loop::Opcode op, int32_t a, int32_t b);
// A kernel over [size] computing `insts` in one stage, launched as the program's next step.
void AddKernel(loop::Program& p, const std::string& node, int64_t size,
               std::vector<loop::Inst> insts, bool fusible = true);
// Expects every instruction index of `before` at the variable values `vars` to equal the same
// instruction's of `after` at `after_vars` (a rewrite of the kernel's variables keeps every
// index's value); `flat` names the point in failures.
void ExpectSameIndicesAt(const loop::Kernel& before, const std::vector<int64_t>& vars,
                         const loop::Kernel& after, const std::vector<int64_t>& after_vars,
                         int64_t flat);

}  // namespace kiln::testing
