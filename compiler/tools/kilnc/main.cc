// kilnc: compiles one graph file offline and prints its compile key and a plan summary;
// with --check, runs the artifact on the client's CPU runtime against the reference
// interpreter at the symbols' hints and at other values inside their ranges that satisfy
// the guards.
//
//   kilnc GRAPH [--target x86_64|cuda:sm_90] [--check] [-o ARTIFACT] [--input-ranges JSON]
//         [--name-map JSON]
//
// -o writes the kiln.v1.CompiledGraph (binary); --input-ranges writes, as a JSON object, the
// [low, high) each tensor input's random values are drawn from (integers: indices below the
// table they index; floats: weights within their initialization bound, variances positive),
// so that tools making inputs of their own (the GPU tests) make valid ones;
// --name-map writes {"%P": "node name"}: the graph's node behind each canonical name the
// artifact uses (buffers, kernels' nodes), for tools that compare a plan's buffers with an
// eager run of the graph.
//
// GRAPH is anything ReadGraphFile reads: a kiln.v1.Graph in binary or JSON, or FX capture
// JSON. Exit codes: 0 compiled (and checked), 1 failed, 2 bad usage.

#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/canon/compile_key.h"
#include "compiler/codegen/target.h"
#include "compiler/compile.h"
#include "compiler/interp/random_inputs.h"
#include "compiler/tools/check/runtime_check.h"
#include "proto/base/serialize.h"
#include "proto/graph_file.h"

namespace {

constexpr int kExitFailed = 1;
constexpr int kExitBadUsage = 2;

// The runtime's threads for --check: each launch's range is split among them, so a kernel
// whose result depends on how its range is split fails the check.
constexpr int kCheckThreads = 3;

struct Command {
  std::string graph_path;
  std::string target{kiln::codegen::kTargetX86_64};
  bool check = false;
  std::string output_path;
  std::string input_ranges_path;
  std::string name_map_path;
  std::string dump_loop_path;
};

bool WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) {
    std::fprintf(stderr, "kilnc: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

// {"input name": [low, high], ...}; names are FX placeholder names (identifiers). Integer
// inputs' bounds are integers, floating inputs' are written with enough digits to round-trip.
bool WriteInputRanges(const kiln::v1::Graph& graph, const std::string& path) {
  auto ints = kiln::interp::IntInputRanges(graph);
  auto floats = kiln::interp::FloatInputRanges(graph);
  for (const absl::Status& status : {ints.status(), floats.status()}) {
    if (!status.ok()) {
      std::fprintf(stderr, "kilnc: %s\n", status.ToString().c_str());
      return false;
    }
  }
  std::map<std::string, std::string> entries;
  for (const auto& [name, range] : *ints) {
    entries[name] = absl::StrCat("[", range.first, ", ", range.second, "]");
  }
  for (const auto& [name, range] : *floats) {
    entries[name] = absl::StrFormat("[%.17g, %.17g]", range.first, range.second);
  }
  std::string json = "{";
  for (const auto& [name, range] : entries) {
    absl::StrAppend(&json, json.size() > 1 ? ", " : "", "\"", absl::CEscape(name), "\": ", range);
  }
  json += "}\n";
  return WriteFile(path, json);
}

void PrintSummary(const kiln::v1::CompiledGraph& artifact) {
  const kiln::v1::CompileSummary& s = artifact.summary();
  int64_t output_bytes = 0;
  for (const kiln::v1::Buffer& b : artifact.buffers()) {
    if (b.kind() == kiln::v1::BUFFER_KIND_OUTPUT &&
        b.size_bytes().kind_case() == kiln::v1::SymInt::kValue) {
      output_bytes += b.size_bytes().value();
    }
  }
  std::printf("target       %s\n", artifact.target().c_str());
  std::printf("nodes        %d\n", s.nodes());
  // Kernels of the same code share its entry (codegen/llvm/kernel_module.h).
  std::set<std::string> codes;
  for (const kiln::v1::Kernel& k : artifact.kernels()) codes.insert(k.name());
  std::printf("kernels      %d (%d fused groups, %zu distinct codes)\n", s.kernels(),
              s.fused_groups(), codes.size());
  std::printf("extern steps %d\n", s.extern_steps());
  std::printf("fallbacks    %d\n", s.fallback_steps());
  for (const kiln::v1::FallbackNote& f : s.fallbacks()) {
    std::printf("  %s %s: %s\n", f.node().c_str(), f.op().c_str(), f.reason().c_str());
  }
  std::printf("buffers      %d (arena %lld bytes at the hints, fixed-size outputs %lld bytes)\n",
              artifact.buffers_size(), static_cast<long long>(s.arena_bytes_at_hints()),
              static_cast<long long>(output_bytes));
  int64_t module_bytes = 0;
  for (const kiln::v1::CodeModule& m : artifact.modules()) module_bytes += m.binary().size();
  std::printf("modules      %d (%lld bytes)\n", artifact.modules_size(),
              static_cast<long long>(module_bytes));
  std::printf("cudagraph    %s\n",
              artifact.cudagraph().capturable() ? "capturable" : "not capturable");
  for (const kiln::v1::CaptureReason& r : artifact.cudagraph().reasons()) {
    std::printf("  %s %s\n", r.node().c_str(), r.detail().c_str());
  }
  std::printf("decision     %s\n", artifact.decision_digest().c_str());
}

// Prints one line per check point; returns how many failed.
int Check(const kiln::v1::Graph& graph, const kiln::v1::CompiledGraph& artifact) {
  int failures = 0;
  for (const kiln::check::SymbolValues& point : kiln::check::GuardedCheckPoints(graph)) {
    kiln::check::CheckOptions options;
    options.symbols = point;
    options.threads = kCheckThreads;
    options.tolerance_scale = kiln::check::kWholeGraphToleranceScale;
    std::string where = point.empty() ? "hints" : "";
    for (const auto& [name, v] : point) {
      absl::StrAppend(&where, where.empty() ? "" : " ", name, "=", v);
    }
    if (!point.empty()) {
      if (absl::Status s = kiln::check::GraphAccepts(graph, options); absl::IsInvalidArgument(s)) {
        std::printf("check %-16s skipped: the graph rejects these values: %s\n", where.c_str(),
                    std::string(s.message()).c_str());
        continue;
      }
    }
    auto report = kiln::check::CheckAgainstInterpreter(graph, artifact, options);
    if (!report.ok()) {
      std::printf("check %-16s ERROR %s\n", where.c_str(), report.status().ToString().c_str());
      ++failures;
    } else if (!report->ok) {
      std::printf("check %-16s MISMATCH %s\n", where.c_str(), report->message.c_str());
      ++failures;
    } else {
      std::printf("check %-16s ok (%d outputs, worst error %.3g of tolerance)\n", where.c_str(),
                  report->outputs, report->worst);
    }
  }
  return failures;
}

bool WriteNameMap(const kiln::canon::CanonicalGraph& canonical, const std::string& path) {
  const kiln::graph::Graph& graph = canonical.graph();
  std::string json = "{";
  for (uint32_t node : canonical.order()) {
    absl::StrAppend(&json, json.size() > 1 ? ", " : "", "\"%", canonical.position(node), "\": \"",
                    absl::CEscape(graph.name(graph.node(node))), "\"");
  }
  json += "}\n";
  return WriteFile(path, json);
}

int Run(const Command& command) {
  auto proto = kiln::ReadGraphFile(command.graph_path);
  if (!proto.ok()) {
    std::fprintf(stderr, "kilnc: %s\n", proto.status().ToString().c_str());
    return kExitFailed;
  }
  // Before compiling: the ranges are of the graph, and tools want them for graphs that do
  // not compile too.
  if (!command.input_ranges_path.empty() && !WriteInputRanges(*proto, command.input_ranges_path)) {
    return kExitFailed;
  }
  kiln::v1::CompileOptions options;
  options.set_target(command.target);
  auto keyed = kiln::canon::KeyGraph(*proto, options);
  if (!keyed.ok()) {
    std::fprintf(stderr, "kilnc: %s\n", keyed.status().ToString().c_str());
    return kExitFailed;
  }
  if (!command.name_map_path.empty() && !WriteNameMap(*keyed->canonical, command.name_map_path)) {
    return kExitFailed;
  }
  std::vector<std::pair<std::string, double>> phases;
  kiln::compiler::CompileContext context;
  context.on_phase = [&](absl::string_view phase, absl::Time start, absl::Time end) {
    phases.emplace_back(std::string(phase), absl::ToDoubleMilliseconds(end - start));
  };
  std::string loop_dump;
  bool dump_written = true;
  if (!command.dump_loop_path.empty()) {
    // Written after each phase, so that a compile that fails, or crashes in code generation,
    // leaves what the phases made up to there.
    context.on_program = [&](absl::string_view phase, const kiln::loop::Program& program) {
      absl::StrAppend(&loop_dump, "=== after ", phase, "\n", kiln::loop::ToString(program), "\n");
      dump_written = dump_written && WriteFile(command.dump_loop_path, loop_dump);
    };
  }
  const absl::Time start = absl::Now();
  auto artifact =
      kiln::compiler::Compile(*keyed->graph, options, keyed->record.compile_key(), context);
  const double total_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  std::printf("compile key  %s\n", keyed->record.compile_key().c_str());
  if (!dump_written) return kExitFailed;
  if (!artifact.ok()) {
    std::fprintf(stderr, "kilnc: %s\n", artifact.status().ToString().c_str());
    return kExitFailed;
  }
  PrintSummary(*artifact);
  for (const auto& [phase, ms] : phases) std::printf("phase %-10s %8.2f ms\n", phase.c_str(), ms);
  std::printf("%-16s %8.2f ms\n", "total", total_ms);
  if (!command.output_path.empty() &&
      !WriteFile(command.output_path, kiln::DeterministicBytes(*artifact))) {
    return kExitFailed;
  }
  if (!command.check) return 0;
  return Check(*proto, *artifact) == 0 ? 0 : kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
  Command command;
  CLI::App app{"kilnc: compile one graph file offline and print the plan"};
  app.add_option("graph", command.graph_path, "kiln.v1.Graph (binary or JSON) or FX capture JSON")
      ->required();
  app.add_option("--target", command.target, "x86_64 or cuda:sm_90")->capture_default_str();
  app.add_flag("--check", command.check, "run the artifact against the reference interpreter");
  app.add_option("-o,--output", command.output_path, "write the CompiledGraph (binary) here");
  app.add_option("--input-ranges", command.input_ranges_path,
                 "write each integer input's [low, high) as JSON here");
  app.add_option("--name-map", command.name_map_path,
                 "write the node name behind each canonical name as JSON here");
  app.add_option("--dump-loop", command.dump_loop_path,
                 "write the loop program after each phase that makes one (lower, pad, fuse, "
                 "split, narrow, order, coalesce, write_back, specialize) here");
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "kilnc: %s\nRun 'kilnc --help' for the flags.\n", e.what());
    return kExitBadUsage;
  }
  return Run(command);
}
