// compile_service_bench: kiln.v1.Compiler over loopback against a real kilnd.
//  1. The hit path: p50/p99 latency and throughput with 1, 16 and 64 concurrent clients
//     asking for an already compiled graph, next to a Health.Check round trip measured the
//     same way (the anchor: what a minimal RPC costs on this machine).
//  2. Single-flight: the same uncached graph requested by 256 clients at once; the time to
//     the last answer against one compile of an equal graph alone, as a ratio.
// Usage: compile_service_bench [--seconds S] [--graph FILE]

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/compile_client.h"
#include "client/health.h"
#include "proto/graph_file.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln::bench {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "compile_service_bench: %s\n", message.c_str());
  std::exit(1);
}

struct Result {
  double ops_per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
};

// Runs `op` from `clients` threads for `seconds`; latency percentiles and throughput.
template <typename Op>
Result Measure(int clients, double seconds, Op op) {
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (!stop.load(std::memory_order_relaxed)) {
        const absl::Time t0 = absl::Now();
        op();
        latencies[c].push_back(absl::ToDoubleMilliseconds(absl::Now() - t0));
      }
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = absl::ToDoubleSeconds(absl::Now() - start);
  std::vector<double> all;
  for (auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Result r;
  if (all.empty()) return r;
  r.ops_per_second = static_cast<double>(all.size()) / elapsed;
  r.p50_ms = all[all.size() / 2];
  r.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  return r;
}

v1::CompileRequest RequestFor(const v1::Graph& g, int variant) {
  v1::CompileRequest r;
  *r.mutable_graph() = g;
  r.mutable_options()->set_target("x86_64");
  // A distinct key per variant, with the same work: a backend option changes the key only.
  (*r.mutable_options()->mutable_backend_options())["bench.variant"] = std::to_string(variant);
  return r;
}

int Main(int argc, char** argv) {
  double seconds = 3;
  std::string graph_file = testing::GraphsDir() + "/nanogpt_fp32.bw.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds") {
      if (!absl::SimpleAtod(argv[i + 1], &seconds)) Die("bad --seconds");
    } else if (flag == "--graph") {
      graph_file = argv[i + 1];
    } else {
      Die("unknown flag " + flag);
    }
  }
  absl::StatusOr<v1::Graph> graph = ReadGraphFile(graph_file);
  if (!graph.ok()) Die(graph.status().ToString());
  testing::TempDir dir;
  absl::StatusOr<testing::KilndProcess> kilnd =
      testing::KilndProcess::Start(dir.path() + "/data", {"--compile-queue", "512"});
  if (!kilnd.ok()) Die(kilnd.status().ToString());
  client::ChannelOptions options;
  options.address = kilnd->address();
  auto client = client::CompileClient::Connect(options);
  if (!client.ok()) Die(client.status().ToString());

  // Warm the cache for the hit path.
  const v1::CompileRequest hit = RequestFor(*graph, 0);
  if (auto r = (*client)->Compile(hit, absl::Seconds(300)); !r.ok()) Die(r.status().ToString());

  std::printf("hit path: %s (%d nodes)\n", graph_file.c_str(), graph->nodes_size());
  std::printf("%8s %12s %9s %9s %14s %9s %9s %10s\n", "clients", "hits/s", "p50 ms", "p99 ms",
              "health/s", "p50 ms", "p99 ms", "hit/health");
  for (int clients : {1, 16, 64}) {
    Result k = Measure(clients, seconds, [&] {
      if (!(*client)->Compile(hit, absl::Seconds(60)).ok()) Die("a hit failed");
    });
    Result anchor = Measure(clients, seconds, [&] {
      if (!client::CheckHealth(options, "", absl::Seconds(10)).ok()) Die("health failed");
    });
    std::printf("%8d %12.0f %9.3f %9.3f %14.0f %9.3f %9.3f %9.2fx\n", clients, k.ops_per_second,
                k.p50_ms, k.p99_ms, anchor.ops_per_second, anchor.p50_ms, anchor.p99_ms,
                k.ops_per_second / anchor.ops_per_second);
  }

  // One compile alone, then 256 clients asking for another (equally costly) one at once.
  const absl::Time t0 = absl::Now();
  if (auto r = (*client)->Compile(RequestFor(*graph, 1), absl::Seconds(300)); !r.ok()) {
    Die(r.status().ToString());
  }
  const absl::Duration alone = absl::Now() - t0;
  constexpr int kClients = 256;
  const v1::CompileRequest shared = RequestFor(*graph, 2);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  const absl::Time t1 = absl::Now();
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&] {
      if (!(*client)->Compile(shared, absl::Seconds(300)).ok()) ++failures;
    });
  }
  for (auto& t : threads) t.join();
  const absl::Duration together = absl::Now() - t1;
  if (failures > 0) Die("some of the 256 requests failed");
  std::printf(
      "\nsingle-flight: one compile alone %.1f ms; 256 clients at once, last answer "
      "after %.1f ms: %.2fx\n",
      absl::ToDoubleMilliseconds(alone), absl::ToDoubleMilliseconds(together),
      absl::ToDoubleSeconds(together) / absl::ToDoubleSeconds(alone));
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
