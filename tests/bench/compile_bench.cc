// Compile benchmark over the shared graphs: compile time per phase and in total, kernels,
// bytes the kernels move per run at the symbols' hints, and CPU run time of the compiled
// artifact on the client CPU runtime (one thread, extern steps native) against the reference
// interpreter on the same inputs, printed as a ratio measured in the same run.
//
//   build/release/tests/bench/compile_bench [RUNS]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "client/runtime/cpu_runtime.h"
#include "compiler/compile.h"
#include "compiler/graph/import.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/random_inputs.h"
#include "compiler/sym/expr.h"
#include "compiler/tools/check/interp_bridge.h"
#include "tests/compiler/graph_testing.h"

namespace {

int64_t Eval(const kiln::v1::SymInt& s, const kiln::sym::Bindings& b) {
  if (s.kind_case() != kiln::v1::SymInt::kExpr) return s.value();
  auto e = kiln::sym::Parse(s.expr());
  if (!e.ok()) return 0;
  auto v = kiln::sym::EvaluateInt(**e, b);
  return v.ok() ? *v : 0;
}

}  // namespace

int main(int argc, char** argv) {
  const int runs = argc > 1 ? std::max(1, std::atoi(argv[1])) : 5;
  std::printf("%-32s %6s %7s %6s %9s %9s %9s %9s %9s %10s %12s %9s %9s %7s\n", "graph", "nodes",
              "kernels", "extern", "decomp", "lower", "fuse", "plan", "codegen", "total ms",
              "bytes moved", "run ms", "interp ms", "speedup");
  double worst_total = 0;
  std::string worst_graph;
  for (const kiln::testing::NamedGraph& ng : kiln::testing::LoadSharedGraphs()) {
    auto g = kiln::graph::Import(ng.graph);
    if (!g.ok()) {
      std::fprintf(stderr, "%s: %s\n", ng.name.c_str(), g.status().ToString().c_str());
      return 1;
    }
    kiln::v1::CompileOptions options;
    options.set_target("x86_64");
    std::map<std::string, double> phase_ms;
    double total = 0;
    kiln::v1::CompiledGraph artifact;
    for (int r = 0; r < runs; ++r) {
      kiln::compiler::CompileContext ctx;
      ctx.on_phase = [&](absl::string_view p, absl::Time s, absl::Time e) {
        phase_ms[std::string(p)] += absl::ToDoubleMilliseconds(e - s) / runs;
      };
      const absl::Time start = absl::Now();
      auto a = kiln::compiler::Compile(*g, options, "bench", ctx);
      total += absl::ToDoubleMilliseconds(absl::Now() - start) / runs;
      if (!a.ok()) {
        std::fprintf(stderr, "%s: %s\n", ng.name.c_str(), a.status().ToString().c_str());
        return 1;
      }
      artifact = *std::move(a);
    }
    if (total > worst_total) {
      worst_total = total;
      worst_graph = ng.name;
    }
    // Bytes the kernels touch per run at the hints: every buffer a launch reads or writes.
    kiln::sym::Bindings hints;
    for (const kiln::v1::Symbol& s : ng.graph.symbols()) {
      // Artifact symbols are canonical; the graphs here have at most one symbol each.
      if (artifact.symbols_size() > 0) hints.symbols[artifact.symbols(0)] = s.int_hint();
    }
    int64_t bytes = 0;
    for (const kiln::v1::PlanStep& st : artifact.steps()) {
      if (!st.has_launch()) continue;
      for (const kiln::v1::KernelParam& p : artifact.kernels(st.launch().kernel()).params()) {
        if (p.kind() == kiln::v1::PARAM_KIND_BUFFER)
          bytes += Eval(artifact.buffers(p.buffer()).size_bytes(), hints);
      }
    }
    // Run time: the artifact on the CPU runtime against the interpreter, same inputs.
    auto inputs = kiln::interp::MakeRandomInputs(ng.graph);
    if (!inputs.ok()) return 1;
    std::vector<kiln::runtime::Tensor> tensors;
    for (const kiln::interp::Value& v : *inputs) {
      if (const auto* t = std::get_if<kiln::interp::Tensor>(&v)) {
        tensors.push_back(kiln::check::FromInterp(*t));
      } else if (const auto* i = std::get_if<int64_t>(&v)) {
        tensors.push_back(kiln::runtime::Tensor::Scalar(*i));
      } else {
        tensors.emplace_back();
      }
    }
    kiln::runtime::CpuRuntime::Options load;
    load.threads = 1;
    auto runtime = kiln::runtime::CpuRuntime::Load(artifact, load);
    if (!runtime.ok()) {
      std::fprintf(stderr, "%s: %s\n", ng.name.c_str(), runtime.status().ToString().c_str());
      return 1;
    }
    kiln::runtime::CpuRuntime::RunOptions ro;
    ro.fallback = kiln::check::InterpFallback();
    const int exec_runs = 3;
    absl::Time t0 = absl::Now();
    for (int r = 0; r < exec_runs; ++r) {
      auto out = (*runtime)->Run(tensors, ro);
      if (!out.ok()) {
        std::fprintf(stderr, "%s: %s\n", ng.name.c_str(), out.status().ToString().c_str());
        return 1;
      }
    }
    const double run_ms = absl::ToDoubleMilliseconds(absl::Now() - t0) / exec_runs;
    t0 = absl::Now();
    auto expected = kiln::interp::Run(ng.graph, *inputs);
    const double interp_ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
    if (!expected.ok()) return 1;
    std::printf(
        "%-32s %6d %7d %6d %9.2f %9.2f %9.2f %9.2f %9.2f %10.2f %12lld %9.1f %9.1f %6.1fx\n",
        ng.name.c_str(), artifact.summary().nodes(), artifact.summary().kernels(),
        artifact.summary().extern_steps(), phase_ms["decompose"], phase_ms["lower"],
        phase_ms["fuse"], phase_ms["plan"], phase_ms["codegen"], total,
        static_cast<long long>(bytes), run_ms, interp_ms, interp_ms / run_ms);
  }
  std::printf("slowest compile: %s, %.1f ms (goal: well under 1000 ms), ratio to goal %.2f\n",
              worst_graph.c_str(), worst_total, worst_total / 1000.0);
  return 0;
}
