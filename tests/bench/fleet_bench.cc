// fleet_bench: three kilnd on loopback sharing a Redis Cluster (tests/testing/redis_cluster.h)
// and one --fleet, as the Helm chart runs them.
//  1. Hit latency through the shared tier: graphs compiled on instance A, then asked of
//     instance B for the first time (a local miss read through from the cluster, verified and
//     stored locally), against a local hit on A, as a ratio; B's second read is a local hit.
//  2. Hit throughput: the same number of clients, all on A, then spread over A, B and C; the
//     spread throughput over the one-instance throughput. On a machine with fewer cores than
//     three kilnd and their clients can use, the instances share those cores, and the ratio
//     says so.
// Usage: fleet_bench [--graphs N] [--clients N] [--seconds S] [--graph FILE]

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "client/compile_client.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/loopback.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::bench {
namespace {

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "fleet_bench: %s\n", message.c_str());
  std::exit(1);
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

double Percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[std::min(v.size() - 1, static_cast<size_t>(p * v.size()))];
}

struct Instance {
  std::unique_ptr<testing::KilndProcess> process;
  std::unique_ptr<client::CompileClient> client;
  double Metric(const std::string& series) const {
    absl::StatusOr<double> v = testing::ScrapeMetric(process->http_port(), series);
    return v.ok() ? *v : -1;
  }
};

// The `i`-th variant of the benchmark's graph: a distinct compile key (backend options are
// part of it) for the same graph.
v1::CompileRequest Variant(const v1::Graph& graph, int i) {
  v1::CompileRequest r;
  *r.mutable_graph() = graph;
  r.mutable_options()->set_target("x86_64");
  (*r.mutable_options()->mutable_backend_options())["fleet_bench_variant"] = absl::StrCat(i);
  return r;
}

double TimedHit(const Instance& at, const v1::CompileRequest& request) {
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::CompileResponse> r = at.client->Compile(request, absl::Seconds(60));
  const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
  if (!r.ok()) Die("compile: " + r.status().ToString());
  if (r->outcome() != v1::CACHE_OUTCOME_HIT) Die("expected a hit, got a miss");
  return ms;
}

// Hits from `clients` threads for `seconds`, thread t on instances[t % size]; hits per second.
double HitThroughput(const std::vector<const Instance*>& instances, int clients, double seconds,
                     const std::vector<v1::CompileRequest>& requests) {
  std::atomic<bool> stop{false};
  std::atomic<int64_t> hits{0};
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      const Instance& at = *instances[c % instances.size()];
      size_t n = c;
      while (!stop.load(std::memory_order_relaxed)) {
        absl::StatusOr<v1::CompileResponse> r =
            at.client->Compile(requests[n++ % requests.size()], absl::Seconds(60));
        if (!r.ok() || r->outcome() != v1::CACHE_OUTCOME_HIT) Die("throughput: not a hit");
        hits.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  absl::SleepFor(absl::Seconds(seconds));
  stop = true;
  for (std::thread& t : threads) t.join();
  return hits.load() / absl::ToDoubleSeconds(absl::Now() - start);
}

int Main(int argc, char** argv) {
  int graphs = 24;
  int clients = 12;
  double seconds = 5;
  std::string graph_file = "mlp_fp32.fw.json";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    const char* value = argv[i + 1];
    bool ok = true;
    if (flag == "--graphs") {
      ok = absl::SimpleAtoi(value, &graphs) && graphs > 0;
    } else if (flag == "--clients") {
      ok = absl::SimpleAtoi(value, &clients) && clients > 0;
    } else if (flag == "--seconds") {
      ok = absl::SimpleAtod(value, &seconds) && seconds > 0;
    } else if (flag == "--graph") {
      graph_file = value;
    } else {
      Die("unknown flag " + flag + " (--graphs N --clients N --seconds S --graph FILE)");
    }
    if (!ok) Die("bad value for " + flag + ": " + value);
  }

  absl::StatusOr<std::unique_ptr<testing::LocalRedisCluster>> cluster =
      testing::LocalRedisCluster::Start();
  if (!cluster.ok()) Die("redis cluster: " + cluster.status().ToString());
  testing::TempDir dir;
  std::vector<std::string> addresses;
  for (int i = 0; i < 3; ++i) {
    addresses.push_back(absl::StrCat("127.0.0.1:", testing::FreeLoopbackPort()));
  }
  const std::string fleet = absl::StrJoin(addresses, ",");
  std::vector<Instance> instances(3);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<testing::KilndProcess> k =
        testing::KilndProcess::Start(absl::StrCat(dir.path(), "/", i),
                                     {"--shared-cache", (*cluster)->url(), "--fleet", fleet,
                                      "--advertise", addresses[i], "--compile-workers", "1"},
                                     addresses[i]);
    if (!k.ok()) Die("kilnd: " + k.status().ToString());
    instances[i].process = std::make_unique<testing::KilndProcess>(*std::move(k));
    client::ChannelOptions o;
    o.address = addresses[i];
    instances[i].client = *client::CompileClient::Connect(o);
  }
  const Instance& a = instances[0];
  const Instance& b = instances[1];

  const v1::Graph graph = testing::LoadSharedGraph(graph_file);
  std::vector<v1::CompileRequest> requests;
  for (int i = 0; i < graphs; ++i) requests.push_back(Variant(graph, i));
  std::printf("fleet_bench: 3 kilnd, a 3-master Redis Cluster, %d variants of %s, %u cores\n",
              graphs, graph_file.c_str(), std::thread::hardware_concurrency());
  for (const v1::CompileRequest& r : requests) {
    absl::StatusOr<v1::CompileResponse> compiled = a.client->Compile(r, absl::Seconds(300));
    if (!compiled.ok()) Die("compile on A: " + compiled.status().ToString());
  }
  // Everything written through to the cluster before B asks.
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (a.Metric("kiln_shared_cache_write_queue_depth") != 0 ||
         a.Metric("kiln_shared_cache_writes_total") < graphs) {
    if (absl::Now() > deadline) Die("write-through did not finish");
    absl::SleepFor(absl::Milliseconds(20));
  }

  // 1. Latency: local hits on A (a few rounds), then B's first and second reads.
  std::vector<double> local_a, first_b, second_b;
  for (int round = 0; round < 5; ++round) {
    for (const v1::CompileRequest& r : requests) local_a.push_back(TimedHit(a, r));
  }
  for (const v1::CompileRequest& r : requests) first_b.push_back(TimedHit(b, r));
  for (const v1::CompileRequest& r : requests) second_b.push_back(TimedHit(b, r));
  if (b.Metric("kiln_compiles_total{result=\"ok\"}") > 0) Die("B compiled; expected none");
  const double shared_hits = b.Metric("kiln_shared_cache_hits_total");
  std::printf("\nhit latency (ms)                       p50      p90   (n)\n");
  std::printf("  local hit on A                    %8.3f %8.3f   (%zu)\n", Median(local_a),
              Percentile(local_a, 0.9), local_a.size());
  std::printf(
      "  B, first read (shared tier)       %8.3f %8.3f   (%zu; kiln_shared_cache_hits_total "
      "%.0f)\n",
      Median(first_b), Percentile(first_b, 0.9), first_b.size(), shared_hits);
  std::printf("  B, second read (local)            %8.3f %8.3f   (%zu)\n", Median(second_b),
              Percentile(second_b, 0.9), second_b.size());
  std::printf("  shared-tier read-through / local hit on A: %.2fx (p50)\n",
              Median(first_b) / Median(local_a));

  // 2. Throughput: every instance holds every variant locally now (C reads them once).
  for (const v1::CompileRequest& r : requests) TimedHit(instances[2], r);
  const double warm = HitThroughput({&a}, clients, 1, requests);  // warm-up, not reported
  (void)warm;
  const double one = HitThroughput({&a}, clients, seconds, requests);
  const double three =
      HitThroughput({&instances[0], &instances[1], &instances[2]}, clients, seconds, requests);
  std::printf("\nhit throughput, %d clients, %.0f s each\n", clients, seconds);
  std::printf("  all on A                %10.0f hits/s\n", one);
  std::printf("  spread over A, B, C     %10.0f hits/s\n", three);
  std::printf("  three instances / one: %.2fx\n", three / one);
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) { return kiln::bench::Main(argc, argv); }
