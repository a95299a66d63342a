// Compile-key speed on the 217-node nanoGPT backward graph, against an anchor measured in
// the same run: deterministic protobuf serialization plus SHA-256 of the same graph, the
// least any content hash of the request must do. Prints each key benchmark's time as a
// ratio to the anchor. The goal is a key in under 1 ms.

#include <benchmark/benchmark.h>

#include <cstdio>
#include <map>
#include <string>

#include "compiler/canon/compile_key.h"
#include "compiler/graph/import.h"
#include "proto/base/digest.h"
#include "proto/base/serialize.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace {

const kiln::v1::Graph& NanoGptBackward() {
  static const kiln::v1::Graph* graph = [] {
    const std::string path = kiln::testing::GraphsDir() + "/nanogpt_fp32.bw.json";
    absl::StatusOr<std::string> text = kiln::testing::ReadFile(path);
    if (!text.ok()) {
      std::fprintf(stderr, "cannot read %s\n", path.c_str());
      std::exit(1);
    }
    absl::StatusOr<kiln::v1::Graph> g = kiln::fx::ImportCapture(*text);
    if (!g.ok()) std::exit(1);
    return new kiln::v1::Graph(*std::move(g));
  }();
  return *graph;
}

kiln::v1::CompileOptions Options() {
  kiln::v1::CompileOptions o;
  o.set_target("cuda:sm_90");
  return o;
}

void BM_Anchor_SerializeSha256(benchmark::State& state) {
  const kiln::v1::Graph& g = NanoGptBackward();
  for (auto _ : state) {
    benchmark::DoNotOptimize(kiln::Sha256(kiln::DeterministicBytes(g)));
  }
}
BENCHMARK(BM_Anchor_SerializeSha256);

// What the server does per request: validate, import, canonicalize, key.
void BM_CompileKey_FromProto(benchmark::State& state) {
  const kiln::v1::Graph& g = NanoGptBackward();
  const kiln::v1::CompileOptions options = Options();
  for (auto _ : state) {
    auto keyed = kiln::canon::KeyGraph(g, options);
    if (!keyed.ok()) state.SkipWithError("KeyGraph failed");
    benchmark::DoNotOptimize(keyed);
  }
}
BENCHMARK(BM_CompileKey_FromProto);

// Canonicalize and key an already imported graph.
void BM_CompileKey_FromIR(benchmark::State& state) {
  auto graph = kiln::graph::Import(NanoGptBackward());
  if (!graph.ok()) std::exit(1);
  const kiln::v1::CompileOptions options = Options();
  for (auto _ : state) {
    kiln::canon::CanonicalGraph canonical(*graph);
    auto record = kiln::canon::ComputeKeyRecord(canonical, options);
    benchmark::DoNotOptimize(record);
  }
}
BENCHMARK(BM_CompileKey_FromIR);

void BM_Import(benchmark::State& state) {
  const kiln::v1::Graph& g = NanoGptBackward();
  for (auto _ : state) {
    auto graph = kiln::graph::Import(g);
    benchmark::DoNotOptimize(graph);
  }
}
BENCHMARK(BM_Import);

// Keeps each benchmark's mean time per iteration, for the ratios.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      if (r.run_type == Run::RT_Iteration && r.iterations > 0) {
        times_[r.benchmark_name()] = r.GetAdjustedRealTime();  // in ns (default unit)
      }
    }
  }
  const std::map<std::string, double>& times() const { return times_; }

 private:
  std::map<std::string, double> times_;
};

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& t = reporter.times();
  auto anchor = t.find("BM_Anchor_SerializeSha256");
  if (anchor == t.end() || anchor->second <= 0) return 0;
  std::printf("\nnanogpt_fp32.bw (217 nodes), anchor = protobuf serialize + SHA-256: %.1f us\n",
              anchor->second / 1000);
  for (const auto& [name, ns] : t) {
    if (name == anchor->first) continue;
    std::printf("  %-28s %8.1f us  = %5.2fx anchor%s\n", name.c_str(), ns / 1000,
                ns / anchor->second,
                name.rfind("BM_CompileKey", 0) == 0
                    ? (ns < 1e6 ? "  (goal < 1 ms: met)" : "  (goal < 1 ms: MISSED)")
                    : "");
  }
  return 0;
}
