// Single flight across a fleet: real kilnd processes sharing one loopback 3-master Redis
// Cluster (--shared-cache), taking compile leases in it. 64 clients spread over three servers
// asking for one uncached graph get one compile fleet-wide and identical bytes; the server
// holding the lease killed with SIGKILL mid-compile (its compile worker hung by the test fault
// hook) is taken over once its lease expires, and every client gets an answer; a holder whose
// compile fails releases its waiters, which take over or get the error; with the cluster
// down, servers compile locally and count the lease errors.

#include <signal.h>
#include <stdlib.h>

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/compile_client.h"
#include "kiln/v1/compile.pb.h"
#include "tests/server/kilnd_client_fixture.h"
#include "tests/server/shared_cluster_fixture.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::LoadSharedGraph;
using ::kiln::testing::LocalRedisCluster;
using ::kiln::testing::TempDir;

constexpr char kGraph[] = "mlp_fp32.fw.json";
// Symbolic sizes and guards: the lease is per key and guard set, and the result a waiter
// serves must pass its guards.
constexpr char kGuardedGraph[] = "mlp_automatic_dynamic2.fw.json";

v1::CompileRequest Request(const std::string& graph = kGraph) {
  v1::CompileRequest r;
  *r.mutable_graph() = LoadSharedGraph(graph);
  r.mutable_options()->set_target("x86_64");
  return r;
}

struct Server : testing::ClusterKilnd {
  std::unique_ptr<client::CompileClient> compiler;

  double Lease(const std::string& what) const {
    return Metric(absl::StrCat("kiln_shared_cache_lease_", what));
  }
};

class KilndLeaseTest : public testing::SharedClusterTest {
 protected:
  void TearDown() override { ::unsetenv("KILN_TEST_WORKER_FAULT"); }

  // A kilnd with a fresh data directory on the shared cluster; `fault` goes to its compile
  // workers (KILN_TEST_WORKER_FAULT, see server/compile/worker_main.h), "" for none.
  Server StartServer(const std::string& name, const std::string& fault = "", int lease_ms = 10000) {
    if (fault.empty()) {
      ::unsetenv("KILN_TEST_WORKER_FAULT");
    } else {
      ::setenv("KILN_TEST_WORKER_FAULT", fault.c_str(), 1);
    }
    Server s;
    s.process = StartKilnd(
        name, {"--compile-workers", "1", "--shared-cache-lease-ms", absl::StrCat(lease_ms)});
    ::unsetenv("KILN_TEST_WORKER_FAULT");
    if (s.process == nullptr) return s;
    client::ChannelOptions o;
    o.address = s.process->address();
    s.compiler = *client::CompileClient::Connect(o);
    return s;
  }

  // `n` clients, client i asking servers[i % size] at once; their answers, in client order.
  static std::vector<absl::StatusOr<v1::CompileResponse>> AskAtOnce(
      const std::vector<Server*>& servers, int n, absl::Duration timeout = absl::Seconds(120),
      const std::string& graph = kGraph) {
    const v1::CompileRequest request = Request(graph);
    std::vector<absl::StatusOr<v1::CompileResponse>> answers(n, absl::UnknownError("not run"));
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> clients;
    for (int i = 0; i < n; ++i) {
      clients.emplace_back([&, i] {
        ++ready;
        while (!go.load()) std::this_thread::yield();
        answers[i] = servers[i % servers.size()]->compiler->Compile(request, timeout);
      });
    }
    while (ready.load() < n) std::this_thread::yield();
    go = true;
    for (std::thread& t : clients) t.join();
    return answers;
  }
};

TEST_F(KilndLeaseTest, SixtyFourClientsOnThreeServersCompileOnceFleetWide) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  Server c = StartServer("c");
  ASSERT_TRUE(a.process && b.process && c.process);
  const std::vector<Server*> servers = {&a, &b, &c};

  const std::vector<absl::StatusOr<v1::CompileResponse>> answers =
      AskAtOnce(servers, 64, absl::Seconds(120), kGuardedGraph);
  ASSERT_TRUE(answers[0].ok()) << answers[0].status();
  int misses = 0;
  for (const absl::StatusOr<v1::CompileResponse>& r : answers) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->compiled_graph(), answers[0]->compiled_graph());
    EXPECT_EQ(r->artifact_digest().hash(), answers[0]->artifact_digest().hash());
    misses += r->outcome() != v1::CACHE_OUTCOME_HIT;
  }
  EXPECT_GE(misses, 1);

  double compiles = 0, acquired = 0, waited = 0, errors = 0, taken_over = 0;
  for (Server* s : servers) {
    compiles += s->Compiles();
    acquired += s->Lease("acquired_total");
    waited += s->Lease("waited_total");
    errors += s->Lease("errors_total");
    taken_over += s->Lease("taken_over_total");
    EXPECT_TRUE(s->AwaitMetricAtMost("kiln_shared_cache_leases_held", 0));
  }
  EXPECT_EQ(compiles, 1);
  EXPECT_EQ(acquired, 1);
  EXPECT_EQ(errors, 0);
  EXPECT_EQ(taken_over, 0);
  std::printf("servers that waited on another server's lease: %.0f\n", waited);

  // Every server now answers from its own store.
  for (Server* s : servers) {
    absl::StatusOr<v1::CompileResponse> again =
        s->compiler->Compile(Request(kGuardedGraph), absl::Seconds(60));
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->outcome(), v1::CACHE_OUTCOME_HIT);
    EXPECT_EQ(again->compiled_graph(), answers[0]->compiled_graph());
  }
  absl::StatusOr<std::string> page = testing::FetchPage(b.process->http_port(), "/");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find("compile leases</th><td>instance <code>"), std::string::npos) << *page;
}

TEST_F(KilndLeaseTest, HolderKilledMidCompileIsTakenOverAfterItsLeaseExpires) {
  constexpr int kLeaseMs = 1500;
  // A's compile worker hangs as the compile starts: A holds the lease, compiling forever.
  Server a = StartServer("a", "hang@start", kLeaseMs);
  Server b = StartServer("b", "", kLeaseMs);
  Server c = StartServer("c", "", kLeaseMs);
  ASSERT_TRUE(a.process && b.process && c.process);

  absl::StatusOr<v1::CompileResponse> on_a = absl::UnknownError("not run");
  std::thread a_client([&] { on_a = a.compiler->Compile(Request(), absl::Seconds(120)); });
  ASSERT_TRUE(a.AwaitMetric("kiln_shared_cache_leases_held", 1));
  ASSERT_TRUE(a.AwaitMetric("kiln_compiles_in_flight", 1));

  // Ten clients on each of B and C: each server waits on A's lease.
  std::vector<absl::StatusOr<v1::CompileResponse>> answers;
  std::thread others([&] { answers = AskAtOnce({&b, &c}, 20); });
  ASSERT_TRUE(b.AwaitMetric("kiln_shared_cache_lease_waiting", 1));
  ASSERT_TRUE(c.AwaitMetric("kiln_shared_cache_lease_waiting", 1));
  absl::SleepFor(absl::Milliseconds(2 * kLeaseMs));  // A renews: nobody takes over
  EXPECT_EQ(b.Lease("taken_over_total") + c.Lease("taken_over_total"), 0);
  EXPECT_EQ(b.Compiles() + c.Compiles(), 0);

  const absl::Time killed = absl::Now();
  a.process->process().Signal(SIGKILL);
  EXPECT_EQ(a.process->process().Wait(absl::Seconds(10)), 128 + SIGKILL);
  others.join();
  const absl::Duration took = absl::Now() - killed;
  a_client.join();

  ASSERT_EQ(answers.size(), 20u);
  ASSERT_TRUE(answers[0].ok()) << answers[0].status();
  for (const absl::StatusOr<v1::CompileResponse>& r : answers) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->compiled_graph(), answers[0]->compiled_graph());
  }
  // The lease expired, one of B and C took it over and compiled; the other served its result.
  EXPECT_GE(took, absl::Milliseconds(kLeaseMs / 2));
  EXPECT_LT(took, absl::Seconds(30));
  EXPECT_EQ(b.Compiles() + c.Compiles(), 1);
  EXPECT_EQ(b.Lease("taken_over_total") + c.Lease("taken_over_total"), 1);
  EXPECT_EQ(b.Lease("errors_total") + c.Lease("errors_total"), 0);

  // A's own client lost its server; asking another one, as a client fails over, answers.
  EXPECT_FALSE(on_a.ok());
  absl::StatusOr<v1::CompileResponse> retried = b.compiler->Compile(Request(), absl::Seconds(60));
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(retried->compiled_graph(), answers[0]->compiled_graph());
}

TEST_F(KilndLeaseTest, HolderWhoseCompileFailsReleasesItsWaiters) {
  // A's compile hangs until its request's deadline, then fails and lets go of the lease; the
  // ttl is long, so a take-over before it proves the lease was released, not left to expire.
  Server a = StartServer("a", "hang@start");
  Server b = StartServer("b");
  Server c = StartServer("c");
  ASSERT_TRUE(a.process && b.process && c.process);
  absl::StatusOr<v1::CompileResponse> on_a = absl::UnknownError("not run");
  std::thread a_client([&] { on_a = a.compiler->Compile(Request(), absl::Seconds(4)); });
  ASSERT_TRUE(a.AwaitMetric("kiln_shared_cache_leases_held", 1));
  std::vector<absl::StatusOr<v1::CompileResponse>> answers;
  std::thread others([&] { answers = AskAtOnce({&b, &c}, 8); });
  ASSERT_TRUE(b.AwaitMetric("kiln_shared_cache_lease_waiting", 1));
  ASSERT_TRUE(c.AwaitMetric("kiln_shared_cache_lease_waiting", 1));
  const absl::Time t0 = absl::Now();
  a_client.join();
  others.join();
  ASSERT_FALSE(on_a.ok());
  EXPECT_EQ(on_a.status().code(), absl::StatusCode::kDeadlineExceeded) << on_a.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(9));  // well before the 10 s ttl
  for (const absl::StatusOr<v1::CompileResponse>& r : answers) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->compiled_graph(), answers[0]->compiled_graph());
  }
  EXPECT_EQ(b.Compiles() + c.Compiles(), 1);
  EXPECT_EQ(b.Lease("taken_over_total") + c.Lease("taken_over_total"), 1);
  EXPECT_TRUE(a.AwaitMetricAtMost("kiln_shared_cache_leases_held", 0));
}

TEST_F(KilndLeaseTest, EveryServersCompileFailingAnswersEveryWaiterWithTheError) {
  // Every server's compile of the graph crashes its worker: each waiter in turn takes the
  // lease, fails and lets go; nobody hangs.
  Server a = StartServer("a", "crash@start");
  Server b = StartServer("b", "crash@start");
  Server c = StartServer("c", "crash@start");
  ASSERT_TRUE(a.process && b.process && c.process);
  const absl::Time t0 = absl::Now();
  const std::vector<absl::StatusOr<v1::CompileResponse>> answers =
      AskAtOnce({&a, &b, &c}, 12, absl::Seconds(60));
  EXPECT_LT(absl::Now() - t0, absl::Seconds(30));
  for (const absl::StatusOr<v1::CompileResponse>& r : answers) {
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInternal) << r.status();
  }
  for (Server* s : {&a, &b, &c}) {
    EXPECT_TRUE(s->AwaitMetricAtMost("kiln_shared_cache_leases_held", 0));
    EXPECT_LE(s->Lease("acquired_total"), 1);
  }
}

TEST_F(KilndLeaseTest, ClusterDownServersCompileLocallyAndCountLeaseErrors) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  ASSERT_TRUE(a.process && b.process);
  for (int node = 0; node < cluster_->size(); ++node) ASSERT_TRUE(cluster_->Kill(node).ok());

  const std::vector<absl::StatusOr<v1::CompileResponse>> answers =
      AskAtOnce({&a, &b}, 8, absl::Seconds(60));
  ASSERT_TRUE(answers[0].ok()) << answers[0].status();
  for (const absl::StatusOr<v1::CompileResponse>& r : answers) {
    ASSERT_TRUE(r.ok()) << r.status();
    EXPECT_EQ(r->compiled_graph(), answers[0]->compiled_graph());
  }
  for (Server* s : {&a, &b}) {
    EXPECT_EQ(s->Compiles(), 1);  // local single flight still holds within each server
    EXPECT_GE(s->Lease("errors_total"), 1);
    EXPECT_EQ(s->Lease("acquired_total"), 0);
    EXPECT_EQ(s->Metric("kiln_shared_cache_up"), 0);
  }
  EXPECT_NE(a.process->process().Stderr().find("\"compile_lease_unavailable\""), std::string::npos);
}

}  // namespace
}  // namespace kiln
