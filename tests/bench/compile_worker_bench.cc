// compile_worker_bench: what compiling in a worker process costs over compiling in kilnd's
// own threads. Two kilnds run side by side, one with --compile-isolation none and one with
// --compile-isolation process (one compile thread each); every request is a miss on a fresh
// key (a backend option that changes the key only), sent to the two in turn so both see the
// same machine. Prints, per graph, the median end-to-end time of a miss on each and the
// difference and ratio (the anchor is the in-process compile, measured in the same run); the
// median time outside the compile's phases on each and its difference (the overhead of the
// worker, free of the compile's own variation); and the first compile after start on each.
//
//   build/release/tests/bench/compile_worker_bench [RUNS] [GRAPH...]
//   (default: 15 runs of nanogpt_fp32.fw.json and nanogpt_fp32.bw.json)

#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/compile_client.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln::bench {
namespace {

// The kilnds started, so that Die does not leave them running.
std::vector<testing::KilndProcess*> g_started;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "compile_worker_bench: %s\n", message.c_str());
  for (testing::KilndProcess* k : g_started) k->process().Signal(SIGKILL);
  std::exit(1);
}

struct Server {
  std::string name;
  testing::TempDir dir;
  std::optional<testing::KilndProcess> kilnd;
  std::unique_ptr<client::CompileClient> client;
  std::vector<double> millis;
  std::vector<double> outside;  // of each: the time outside the compile's phases
};

void Start(Server& s, const std::string& isolation) {
  absl::StatusOr<testing::KilndProcess> k = testing::KilndProcess::Start(
      s.dir.path() + "/data", {"--compile-isolation", isolation, "--compile-workers", "1"});
  if (!k.ok()) Die(k.status().ToString());
  s.kilnd.emplace(*std::move(k));
  g_started.push_back(&*s.kilnd);
  client::ChannelOptions o;
  o.address = s.kilnd->address();
  auto c = client::CompileClient::Connect(o);
  if (!c.ok()) Die(c.status().ToString());
  s.client = *std::move(c);
}

// One miss on a fresh key; its time in milliseconds. Also records the time outside the
// compiler's phases (the end-to-end time less every phase the answer reports): what a worker
// adds shows there, without the compile's own variation.
double Miss(Server& s, const v1::Graph& g, int variant) {
  v1::CompileRequest r;
  *r.mutable_graph() = g;
  r.mutable_options()->set_target("x86_64");
  (*r.mutable_options()->mutable_backend_options())["bench.variant"] = std::to_string(variant);
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::CompileResponse> a = s.client->Compile(r, absl::Seconds(600));
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  if (!a.ok()) Die(absl::StrCat(s.name, ": ", a.status().ToString()));
  if (a->outcome() != v1::CACHE_OUTCOME_MISS) Die(s.name + ": expected a miss");
  double phases = 0;
  for (const v1::PhaseTiming& t : a->timings()) phases += static_cast<double>(t.micros()) / 1000;
  s.outside.push_back(ms - phases);
  return ms;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0
                   : (v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2);
}

int Main(int argc, char** argv) {
  int runs = 15;
  std::vector<std::string> graphs;
  for (int i = 1; i < argc; ++i) {
    if (i == 1 && std::atoi(argv[i]) > 0) {
      runs = std::atoi(argv[i]);
    } else {
      graphs.push_back(argv[i]);
    }
  }
  if (graphs.empty()) graphs = {"nanogpt_fp32.fw.json", "nanogpt_fp32.bw.json"};
  Server in_process, worker;
  in_process.name = "in-process";
  worker.name = "worker";
  Start(in_process, "none");
  Start(worker, "process");
  std::printf("%-24s %4s %13s %10s %9s %6s | %14s %12s %11s | %11s %10s\n", "graph", "runs",
              "in-process ms", "worker ms", "diff ms", "ratio", "in-proc other", "worker other",
              "overhead ms", "1st in-proc", "1st worker");
  int variant = 0;
  for (const std::string& file : graphs) {
    const v1::Graph g = testing::LoadSharedGraph(file);
    if (g.nodes_size() == 0) Die("cannot load " + file);
    const double first_in_process = Miss(in_process, g, variant);
    const double first_worker = Miss(worker, g, variant++);
    for (Server* s : {&in_process, &worker}) {
      s->millis.clear();
      s->outside.clear();
    }
    for (int r = 0; r < runs; ++r, ++variant) {
      // In turn, and each one first half of the time, so drift hits both alike.
      Server* order[2] = {&in_process, &worker};
      if (r % 2) std::swap(order[0], order[1]);
      for (Server* s : order) s->millis.push_back(Miss(*s, g, variant));
    }
    const double a = Median(in_process.millis), b = Median(worker.millis);
    const double oa = Median(in_process.outside), ob = Median(worker.outside);
    std::printf("%-24s %4d %13.2f %10.2f %+9.2f %6.3f | %14.2f %12.2f %+11.2f | %11.2f %10.2f\n",
                file.c_str(), runs, a, b, b - a, a > 0 ? b / a : 0, oa, ob, ob - oa,
                first_in_process, first_worker);
  }
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
