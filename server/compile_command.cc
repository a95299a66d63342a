#include "server/compile_command.h"

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compiler/canon/compile_key.h"
#include "compiler/compile.h"
#include "compiler/exec/check.h"
#include "compiler/interp/interpreter.h"
#include "compiler/interp/random_inputs.h"
#include "compiler/sym/expr.h"
#include "compiler/sym/guards.h"
#include "google/protobuf/util/json_util.h"
#include "proto/fx/capture_import.h"

namespace kiln::server {
namespace {

absl::StatusOr<v1::Graph> ReadGraph(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    if (absl::StrContains(text, "\"nodes\"") && absl::StrContains(text, "\"op\"")) {
      return fx::ImportCapture(text);
    }
    v1::Graph g;
    auto s = google::protobuf::util::JsonStringToMessage(text, &g);
    if (!s.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", s.ToString()));
    return g;
  }
  v1::Graph g;
  if (!g.ParseFromString(text))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a kiln.v1.Graph"));
  return g;
}

// Symbol values to check at: the hints, then int symbols moved off their hints (those whose
// range is a single value stay there, float symbols keep their hints) where the ranges and
// every ShapeEnv guard allow it.
std::vector<std::map<std::string, int64_t, std::less<>>> CheckPoints(const v1::Graph& g) {
  std::vector<std::map<std::string, int64_t, std::less<>>> points = {{}};
  if (g.symbols_size() == 0) return points;
  auto guards = sym::CompiledGuards::Compile(g.guards());
  for (int64_t delta : {-1, 1, 3}) {
    std::map<std::string, int64_t, std::less<>> p;
    sym::Bindings b;
    for (const v1::Symbol& s : g.symbols()) {
      if (s.kind() == v1::SYM_KIND_FLOAT) {
        if (s.hint_case() == v1::Symbol::kFloatHint) b.symbols[s.name()] = s.float_hint();
        if (s.hint_case() == v1::Symbol::kIntHint) b.symbols[s.name()] = s.int_hint();
        continue;
      }
      const bool pinned = s.lower().kind_case() == v1::Bound::kIntValue &&
                          s.upper().kind_case() == v1::Bound::kIntValue &&
                          s.lower().int_value() == s.upper().int_value();
      const int64_t v = pinned ? s.lower().int_value() : std::max<int64_t>(1, s.int_hint() + delta);
      p[s.name()] = v;
      b.symbols[s.name()] = v;
    }
    if (!sym::CheckSymbolRanges(g, b).holds) continue;
    if (guards.ok()) {
      // Only the ShapeEnv guards: the Python form is over inputs derived from the symbols.
      v1::Guards shape_only;
      *shape_only.mutable_shape_env() = g.guards().shape_env();
      auto sg = sym::CompiledGuards::Compile(shape_only);
      if (sg.ok() && !sg->Check(b).holds) continue;
    }
    points.push_back(std::move(p));
  }
  return points;
}

// Whether the graph itself runs on inputs at `point`. A model can have limits its guards do
// not state (nanoGPT's position table has block_size rows); past them the interpreter, like
// eager PyTorch, refuses the inputs as INVALID_ARGUMENT, and the point checks nothing.
absl::Status GraphAccepts(const v1::Graph& g,
                          const std::map<std::string, int64_t, std::less<>>& point,
                          const exec::CheckOptions& co) {
  interp::RandomInputOptions ri;
  ri.seed = co.input_seed;
  ri.symbols = point;
  auto inputs = interp::MakeRandomInputs(g, ri);
  if (!inputs.ok()) return inputs.status();
  interp::RunOptions ro;
  ro.symbols = point;
  ro.rng_seed = co.rng_seed;
  ro.rng_offset = co.rng_offset;
  return interp::Run(g, *inputs, ro).status();
}

}  // namespace

int RunCompileCommand(const CompileCommand& command) {
  auto proto = ReadGraph(command.graph_path);
  if (!proto.ok()) {
    std::fprintf(stderr, "kilnd compile: %s\n", proto.status().ToString().c_str());
    return 1;
  }
  v1::CompileOptions options;
  options.set_target(command.target);
  auto keyed = canon::KeyGraph(*proto, options);
  if (!keyed.ok()) {
    std::fprintf(stderr, "kilnd compile: %s\n", keyed.status().ToString().c_str());
    return 1;
  }
  std::vector<std::pair<std::string, double>> phases;
  compiler::CompileContext context;
  context.on_phase = [&](absl::string_view phase, absl::Time start, absl::Time end) {
    phases.emplace_back(std::string(phase), absl::ToDoubleMilliseconds(end - start));
  };
  const absl::Time start = absl::Now();
  auto artifact = compiler::Compile(*keyed->graph, options, keyed->record.compile_key(), context);
  const double total_ms = absl::ToDoubleMilliseconds(absl::Now() - start);
  std::printf("compile key  %s\n", keyed->record.compile_key().c_str());
  if (!artifact.ok()) {
    std::fprintf(stderr, "kilnd compile: %s\n", artifact.status().ToString().c_str());
    return 1;
  }
  const v1::CompileSummary& s = artifact->summary();
  int64_t output_bytes = 0;
  for (const v1::Buffer& b : artifact->buffers()) {
    if (b.kind() == v1::BUFFER_KIND_OUTPUT && b.size_bytes().kind_case() == v1::SymInt::kValue) {
      output_bytes += b.size_bytes().value();
    }
  }
  std::printf("target       %s\n", artifact->target().c_str());
  std::printf("nodes        %d\n", s.nodes());
  std::printf("kernels      %d (%d fused groups)\n", s.kernels(), s.fused_groups());
  std::printf("extern steps %d\n", s.extern_steps());
  std::printf("fallbacks    %d\n", s.fallback_steps());
  for (const v1::FallbackNote& f : s.fallbacks()) {
    std::printf("  %s %s: %s\n", f.node().c_str(), f.op().c_str(), f.reason().c_str());
  }
  std::printf("buffers      %d (arena %lld bytes at the hints, fixed-size outputs %lld bytes)\n",
              artifact->buffers_size(), static_cast<long long>(s.arena_bytes_at_hints()),
              static_cast<long long>(output_bytes));
  std::printf("module       %zu bytes\n", artifact->modules(0).binary().size());
  std::printf("cudagraph    %s\n",
              artifact->cudagraph().capturable() ? "capturable" : "not capturable");
  for (const v1::CaptureReason& r : artifact->cudagraph().reasons()) {
    std::printf("  %s %s\n", r.node().c_str(), r.detail().c_str());
  }
  std::printf("decision     %s\n", artifact->decision_digest().c_str());
  for (const auto& [phase, ms] : phases) std::printf("phase %-9s %8.2f ms\n", phase.c_str(), ms);
  std::printf("total        %8.2f ms\n", total_ms);
  if (!command.check) return 0;
  int failures = 0;
  for (const auto& point : CheckPoints(*proto)) {
    exec::CheckOptions co;
    co.symbols = point;
    std::string where = point.empty() ? "hints" : "";
    for (const auto& [name, v] : point)
      absl::StrAppend(&where, where.empty() ? "" : " ", name, "=", v);
    if (!point.empty()) {
      if (absl::Status s = GraphAccepts(*proto, point, co); absl::IsInvalidArgument(s)) {
        std::printf("check %-16s skipped: the graph rejects these values: %s\n", where.c_str(),
                    std::string(s.message()).c_str());
        continue;
      }
    }
    auto report = exec::CheckAgainstInterpreter(*proto, *artifact, co);
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
  return failures == 0 ? 0 : 1;
}

}  // namespace kiln::server
