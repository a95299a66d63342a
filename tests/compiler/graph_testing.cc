#include "tests/compiler/graph_testing.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>
#include <memory>

#include "compiler/canon/canonical_graph.h"
#include "compiler/codegen/registry.h"
#include "compiler/codegen/target.h"
#include "compiler/codegen/x86/backend.h"
#include "compiler/compile.h"
#include "compiler/decompose/decompose.h"
#include "compiler/fuse/fuse.h"
#include "compiler/fuse/pad_rows.h"
#include "compiler/graph/import.h"
#include "compiler/lower/lower.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {

std::vector<NamedGraph> LoadSharedGraphs() {
  std::vector<NamedGraph> out;
  for (const std::string& path : GraphFiles()) {
    NamedGraph g;
    g.name = path.substr(path.rfind('/') + 1);
    g.graph = LoadSharedGraph(g.name);
    out.push_back(std::move(g));
  }
  EXPECT_FALSE(out.empty()) << "no graphs under " << GraphsDir();
  return out;
}

absl::StatusOr<v1::CompiledGraph> CompileForCpu(const v1::Graph& graph) {
  auto g = graph::Import(graph);
  if (!g.ok()) return g.status();
  v1::CompileOptions options;
  options.set_target(std::string(codegen::kTargetX86_64));
  return compiler::Compile(*g, options, "test-key");
}

namespace {

// The x86-64 backend, asking for `parts` parts of every reduction and matmul rows at
// multiples of `row_alignment` bytes.
class TunedBackend final : public codegen::Backend {
 public:
  TunedBackend(int64_t parts, int64_t row_alignment)
      : parts_(parts), row_alignment_(row_alignment), x86_(codegen::x86::NewBackend()) {}
  absl::string_view target() const override { return x86_->target(); }
  std::string KeyFacts() const override { return x86_->KeyFacts(); }
  int64_t ReductionParts(const loop::Program&, const loop::Kernel&) const override {
    return parts_;
  }
  int64_t MatmulRowAlignment() const override { return row_alignment_; }
  absl::StatusOr<std::vector<codegen::KernelSchedule>> Schedule(
      const loop::Program& program) const override {
    return x86_->Schedule(program);
  }
  absl::StatusOr<codegen::GeneratedCode> Generate(
      const loop::Program& program, const codegen::GenerateOptions& options) const override {
    return x86_->Generate(program, options);
  }

 private:
  int64_t parts_;
  int64_t row_alignment_;
  std::unique_ptr<codegen::Backend> x86_;
};

}  // namespace

absl::StatusOr<v1::CompiledGraph> CompileForCpuCut(const v1::Graph& graph, int64_t parts) {
  return CompileForCpuTuned(graph, parts, 0);
}

absl::StatusOr<v1::CompiledGraph> CompileForCpuTuned(const v1::Graph& graph, int64_t parts,
                                                     int64_t row_alignment) {
  auto g = graph::Import(graph);
  if (!g.ok()) return g.status();
  codegen::BackendRegistry backends;
  if (absl::Status s = backends.Register(std::make_unique<TunedBackend>(parts, row_alignment));
      !s.ok()) {
    return s;
  }
  v1::CompileOptions options;
  options.set_target(std::string(codegen::kTargetX86_64));
  return compiler::Compile(*g, options, "test-key", {.backends = &backends});
}

absl::StatusOr<loop::Program> FuseSharedGraph(const std::string& name) {
  return FuseGraph(LoadSharedGraph(name));
}

absl::StatusOr<loop::Program> FuseGraph(const v1::Graph& graph, int64_t row_alignment) {
  auto g = graph::Import(graph);
  if (!g.ok()) return g.status();
  const canon::CanonicalGraph canonical(*g);
  auto prims = decompose::Decompose(*g, canonical);
  if (!prims.ok()) return prims.status();
  auto lowered = lower::Lower(*prims);
  if (!lowered.ok()) return lowered.status();
  return fuse::Fuse(fuse::PadMatmulRows(*std::move(lowered), row_alignment));
}

v1::Graph SmallGraph() {
  constexpr char kText[] = R"pb(
    inputs {
      name: "x"
      role: INPUT_ROLE_USER_INPUT
      meta {
        tensor {
          sizes { value: 4 }
          sizes { value: 8 }
          strides { value: 8 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    nodes {
      name: "t"
      target: "aten.t.default"
      args { ref { node: "x" } }
      outputs {
        tensor {
          sizes { value: 8 }
          sizes { value: 4 }
          strides { value: 1 }
          strides { value: 8 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    nodes {
      name: "mm"
      target: "aten.mm.default"
      args { ref { node: "x" } }
      args { ref { node: "t" } }
      outputs {
        tensor {
          sizes { value: 4 }
          sizes { value: 4 }
          strides { value: 4 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    nodes {
      name: "s"
      target: "aten.sum.dim_IntList"
      args { ref { node: "mm" } }
      args { list { items { int_value: 1 } } }
      args { bool_value: true }
      outputs {
        tensor {
          sizes { value: 4 }
          sizes { value: 1 }
          strides { value: 1 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    output {
      list {
        items { ref { node: "mm" } }
        items { ref { node: "s" } }
      }
    }
  )pb";
  v1::Graph g;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kText, &g));
  return g;
}

// Two collectives on two process groups.
v1::Graph CollectiveGraph(const std::string& group_a, const std::string& group_b) {
  v1::Graph g = SmallGraph();
  const v1::ValueMeta meta = g.nodes(1).outputs(0);  // mm: [4, 4]
  auto add = [&](const std::string& name, const std::string& target,
                 std::vector<v1::Argument> args) {
    v1::Node* n = g.add_nodes();
    n->set_name(name);
    n->set_target(target);
    for (auto& a : args) *n->add_args() = a;
    *n->add_outputs() = meta;
  };
  auto ref = [](const std::string& node) {
    v1::Argument a;
    a.mutable_ref()->set_node(node);
    return a;
  };
  auto str = [](const std::string& s) {
    v1::Argument a;
    a.set_string_value(s);
    return a;
  };
  add("ar0", "_c10d_functional.all_reduce.default", {ref("mm"), str("sum"), str(group_a)});
  add("ar1", "_c10d_functional.all_reduce.default", {ref("mm"), str("sum"), str(group_b)});
  add("w0", "_c10d_functional.wait_tensor.default", {ref("ar0")});
  add("w1", "_c10d_functional.wait_tensor.default", {ref("ar1")});
  g.mutable_output()->mutable_list()->mutable_items(0)->mutable_ref()->set_node("w0");
  *g.mutable_output()->mutable_list()->add_items() = ref("w1");
  return g;
}

int32_t AddInput(loop::Program& p, int64_t size, int64_t stride) {
  const int32_t buffer = AddBuffer(p, size * stride);
  loop::Buffer& b = p.buffers[static_cast<size_t>(buffer)];
  b.kind = loop::Buffer::Kind::kInput;
  b.input_index = static_cast<int32_t>(p.inputs.size());
  loop::InputDesc in;
  in.kind = loop::InputDesc::Kind::kTensor;
  in.sizes = {loop::IndexExpr::Const(size)};
  in.strides = {loop::IndexExpr::Const(stride)};
  p.inputs.push_back(in);
  return buffer;
}

int32_t AddBuffer(loop::Program& p, int64_t size) {
  loop::Buffer b;
  b.elements = loop::IndexExpr::Const(size);
  p.buffers.push_back(b);
  return static_cast<int32_t>(p.buffers.size() - 1);
}

int32_t AddOutput(loop::Program& p, int64_t size) {
  const int32_t buffer = AddBuffer(p, size);
  loop::Output out;
  out.kind = loop::Output::Kind::kTensor;
  out.tensor.buffer = buffer;
  out.tensor.sizes = {loop::IndexExpr::Const(size)};
  out.tensor.strides = {loop::IndexExpr::Const(1)};
  p.outputs.push_back(out);
  return buffer;
}

loop::Inst LoadAt(int32_t buffer, int64_t stride) {
  loop::Inst in;
  in.op = loop::Opcode::kLoad;
  in.buffer = buffer;
  in.index = stride == 1 ? loop::IndexExpr::Var(0)
                         : loop::IndexExpr::Var(0) * loop::IndexExpr::Const(stride);
  return in;
}

loop::Inst StoreAt(int32_t buffer, int32_t value) {
  loop::Inst in;
  in.op = loop::Opcode::kStore;
  in.buffer = buffer;
  in.index = loop::IndexExpr::Var(0);
  in.a = value;
  return in;
}

loop::Inst ConstF32(double value) {
  loop::Inst in;
  in.op = loop::Opcode::kConst;
  in.type = loop::ScalarType::kF32;
  in.fimm = value;
  return in;
}

loop::Inst Binary(loop::Opcode op, int32_t a, int32_t b) {
  loop::Inst in;
  in.op = op;
  in.type = loop::ScalarType::kF32;
  in.a = a;
  in.b = b;
  return in;
}

void AddKernel(loop::Program& p, const std::string& node, int64_t size,
               std::vector<loop::Inst> insts, bool fusible) {
  loop::Kernel k;
  k.parallel = {loop::IndexExpr::Const(size)};
  k.nodes = {node};
  k.fusible = fusible;
  k.stages = {{false, 0, static_cast<int32_t>(insts.size())}};
  k.insts = std::move(insts);
  p.kernels.push_back(std::move(k));
  loop::Step step;
  step.kernel = static_cast<int32_t>(p.kernels.size() - 1);
  p.steps.push_back(step);
}

void ExpectSameIndicesAt(const loop::Kernel& before, const std::vector<int64_t>& vars,
                         const loop::Kernel& after, const std::vector<int64_t>& after_vars,
                         int64_t flat) {
  ASSERT_EQ(before.insts.size(), after.insts.size());
  for (size_t i = 0; i < before.insts.size(); ++i) {
    absl::StatusOr<int64_t> want = before.insts[i].index.Evaluate({}, vars);
    absl::StatusOr<int64_t> got = after.insts[i].index.Evaluate({}, after_vars);
    ASSERT_TRUE(want.ok() && got.ok());
    ASSERT_EQ(*got, *want) << "instruction " << i << " at flat " << flat;
  }
}

}  // namespace kiln::testing
