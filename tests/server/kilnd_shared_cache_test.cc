// kilnd with --shared-cache end to end: real kilnd processes sharing one loopback Redis
// Cluster (tests/testing/redis_cluster.h). A second server answers what a first one compiled
// without compiling; a master killed leaves every server answering from its local tier or by
// compiling, and the tier comes back with the cluster; a blob corrupted inside Redis is
// detected, dropped, counted and never served; a malformed URL keeps kilnd from starting.

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/cache_client.h"
#include "client/compile_client.h"
#include "kiln/v1/compile.pb.h"
#include "proto/base/digest.h"
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

v1::CompileRequest Request(const std::string& graph) {
  v1::CompileRequest r;
  *r.mutable_graph() = LoadSharedGraph(graph);
  r.mutable_options()->set_target("x86_64");
  return r;
}

// One kilnd on the shared cluster, with its own data directory, and clients of it.
struct Server : testing::ClusterKilnd {
  std::unique_ptr<client::CompileClient> compiler;
  std::unique_ptr<client::CacheClient> cache;

  absl::StatusOr<v1::CompileResponse> Compile(const std::string& graph) {
    return compiler->Compile(Request(graph), absl::Seconds(120));
  }
  int CountInLog(const std::string& needle) {
    const std::string log = process->process().Stderr();
    int n = 0;
    for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
    return n;
  }
};

class KilndSharedCacheTest : public testing::SharedClusterTest {
 protected:
  // A kilnd with a fresh data directory on the shared cluster.
  Server StartServer(const std::string& name) {
    Server s;
    s.process = StartKilnd(name, {"--compile-workers", "1"});
    if (s.process == nullptr) return s;
    client::ChannelOptions o;
    o.address = s.process->address();
    s.compiler = *client::CompileClient::Connect(o);
    s.cache = *client::CacheClient::Create(o);
    return s;
  }
};

TEST_F(KilndSharedCacheTest, SecondAndThirdServersHitWithoutCompiling) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  Server c = StartServer("c");
  ASSERT_TRUE(a.process && b.process && c.process);

  absl::StatusOr<v1::CompileResponse> first = a.Compile("mlp_fp32.fw.json");
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome(), v1::CACHE_OUTCOME_MISS);
  a.WaitForWrites(1);

  for (Server* s : {&b, &c}) {
    absl::StatusOr<v1::CompileResponse> hit = s->Compile("mlp_fp32.fw.json");
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(hit->outcome(), v1::CACHE_OUTCOME_HIT);
    EXPECT_EQ(hit->compiled_graph(), first->compiled_graph());
    EXPECT_EQ(hit->artifact_digest().hash(), first->artifact_digest().hash());
    EXPECT_EQ(s->Compiles(), 0);
    EXPECT_GE(s->Metric("kiln_shared_cache_hits_total"), 1);
    EXPECT_EQ(s->Metric("kiln_shared_cache_up"), 1);
    // Now held locally: the next request does not need the shared tier.
    const double hits = s->Metric("kiln_shared_cache_hits_total");
    absl::StatusOr<v1::CompileResponse> again = s->Compile("mlp_fp32.fw.json");
    ASSERT_TRUE(again.ok()) << again.status();
    EXPECT_EQ(again->outcome(), v1::CACHE_OUTCOME_HIT);
    EXPECT_EQ(s->Metric("kiln_shared_cache_hits_total"), hits);
  }
  EXPECT_EQ(a.Compiles(), 1);

  // Cache.Put on one server, Cache.Get on another; GetAction reads through too.
  absl::StatusOr<client::CacheClient::PutResult> put = b.cache->Put("a blob from b");
  ASSERT_TRUE(put.ok()) << put.status();
  b.WaitForWrites(1);
  absl::StatusOr<std::string> got = c.cache->Get(put->digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, "a blob from b");
  absl::StatusOr<v1::ActionEntry> entry = c.cache->GetAction(first->compile_key());
  ASSERT_TRUE(entry.ok()) << entry.status();
  EXPECT_EQ(entry->variants(0).artifacts(0).hash(), first->artifact_digest().hash());

  // The status page shows the tier.
  absl::StatusOr<std::string> page = testing::FetchPage(b.process->http_port(), "/");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find("shared cache</th><td>up; hit rate"), std::string::npos) << *page;
}

TEST_F(KilndSharedCacheTest, MasterKilledServersKeepAnsweringAndTierRecovers) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  ASSERT_TRUE(a.process && b.process);
  absl::StatusOr<v1::CompileResponse> g1 = a.Compile("mlp_fp32.fw.json");
  ASSERT_TRUE(g1.ok()) << g1.status();
  a.WaitForWrites(1);
  absl::StatusOr<v1::CompileResponse> g1_b = b.Compile("mlp_fp32.fw.json");
  ASSERT_TRUE(g1_b.ok()) << g1_b.status();
  ASSERT_EQ(g1_b->outcome(), v1::CACHE_OUTCOME_HIT);

  ASSERT_TRUE(cluster_->Kill(0).ok());
  // Until the others judge it failed, keys on the live nodes still answer.
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    absl::StatusOr<std::string> info = cluster_->Cli(1, {"CLUSTER", "INFO"});
    if (info.ok() && info->find("cluster_state:fail") != std::string::npos) break;
    absl::SleepFor(absl::Milliseconds(100));
  }

  // Local hits and local compiles, correct bytes, no errors for the callers.
  for (Server* s : {&a, &b}) {
    absl::StatusOr<v1::CompileResponse> hit = s->Compile("mlp_fp32.fw.json");
    ASSERT_TRUE(hit.ok()) << hit.status();
    EXPECT_EQ(hit->outcome(), v1::CACHE_OUTCOME_HIT);
    EXPECT_EQ(hit->compiled_graph(), g1->compiled_graph());
  }
  const double a_compiles = a.Compiles();
  absl::StatusOr<v1::CompileResponse> g2 = a.Compile("mlp_d64_fp32.fw.json.gz");
  ASSERT_TRUE(g2.ok()) << g2.status();
  EXPECT_EQ(g2->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_EQ(a.Compiles(), a_compiles + 1);
  absl::StatusOr<v1::CompileResponse> g2_b = b.Compile("mlp_d64_fp32.fw.json.gz");
  ASSERT_TRUE(g2_b.ok()) << g2_b.status();
  EXPECT_EQ(g2_b->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_EQ(g2_b->compiled_graph(), g2->compiled_graph());
  for (Server* s : {&a, &b}) {
    EXPECT_EQ(s->Metric("kiln_shared_cache_up"), 0);
    EXPECT_GE(s->Metric("kiln_shared_cache_errors_total"), 1);
  }
  // Several failed operations, one log line for the outage.
  a.WaitForWrites(1);
  EXPECT_EQ(a.CountInLog("\"shared_cache_down\""), 1);
  absl::StatusOr<std::string> page = testing::FetchPage(a.process->http_port(), "/");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_NE(page->find("shared cache</th><td><b>down</b>"), std::string::npos) << *page;

  ASSERT_TRUE(cluster_->Restart(0).ok());
  ASSERT_TRUE(cluster_->WaitHealthy(absl::Seconds(30)).ok());
  // Health comes back without traffic: an idle server probes a tier it saw down. (The gauge
  // follows the last operation: seeing 1 is what counts.)
  EXPECT_TRUE(a.AwaitMetric("kiln_shared_cache_up", 1));
  EXPECT_TRUE(b.AwaitMetric("kiln_shared_cache_up", 1));
  // The servers' clients may still leave node 0 alone for a backoff of at most 5 s.
  absl::SleepFor(absl::Seconds(6));

  const double written = a.Metric("kiln_shared_cache_writes_total");
  absl::StatusOr<v1::CompileResponse> g3 = a.Compile("mlp_bf16.fw.json.gz");
  ASSERT_TRUE(g3.ok()) << g3.status();
  EXPECT_EQ(g3->outcome(), v1::CACHE_OUTCOME_MISS)
      << g3->compile_key() << " " << g1->compile_key() << " " << g2->compile_key();
  a.WaitForWrites(written + 1);
  EXPECT_EQ(a.Metric("kiln_shared_cache_up"), 1)
      << *testing::FetchPage(a.process->http_port(), "/");
  const double b_compiles = b.Compiles();
  absl::StatusOr<v1::CompileResponse> g3_b = b.Compile("mlp_bf16.fw.json.gz");
  ASSERT_TRUE(g3_b.ok()) << g3_b.status();
  EXPECT_EQ(g3_b->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(g3_b->compiled_graph(), g3->compiled_graph());
  EXPECT_EQ(b.Compiles(), b_compiles);
  EXPECT_EQ(b.Metric("kiln_shared_cache_up"), 1);
  EXPECT_EQ(a.CountInLog("\"shared_cache_up\""), 1);
}

TEST_F(KilndSharedCacheTest, BlobCorruptedInRedisIsDroppedCountedAndNotServed) {
  Server a = StartServer("a");
  Server b = StartServer("b");
  Server c = StartServer("c");
  ASSERT_TRUE(a.process && b.process && c.process);
  absl::StatusOr<v1::CompileResponse> first = a.Compile("mlp_fp32.fw.json");
  ASSERT_TRUE(first.ok()) << first.status();
  a.WaitForWrites(1);
  CorruptBlob(first->artifact_digest().hash());

  absl::StatusOr<v1::CompileResponse> on_b = b.Compile("mlp_fp32.fw.json");
  ASSERT_TRUE(on_b.ok()) << on_b.status();
  EXPECT_EQ(on_b->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_EQ(on_b->compiled_graph(), first->compiled_graph());
  EXPECT_EQ(on_b->artifact_digest().hash(), Sha256Hex(on_b->compiled_graph()));
  EXPECT_EQ(b.Metric("kiln_shared_cache_corrupt_total"), 1);
  EXPECT_EQ(b.Compiles(), 1);

  // B wrote its good copy through: a third server hits without compiling.
  b.WaitForWrites(1);
  absl::StatusOr<v1::CompileResponse> on_c = c.Compile("mlp_fp32.fw.json");
  ASSERT_TRUE(on_c.ok()) << on_c.status();
  EXPECT_EQ(on_c->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(on_c->compiled_graph(), first->compiled_graph());
  EXPECT_EQ(c.Metric("kiln_shared_cache_corrupt_total"), 0);
  EXPECT_EQ(c.Compiles(), 0);
}

TEST(KilndSharedCacheUrlTest, MalformedUrlKeepsKilndFromStarting) {
  TempDir dir;
  for (const std::string url : {"http://127.0.0.1:7000", "redis://127.0.0.1", "redis://"}) {
    absl::StatusOr<KilndProcess> k =
        KilndProcess::Start(dir.path() + "/d", {"--shared-cache", url});
    ASSERT_FALSE(k.ok()) << url;
    EXPECT_NE(k.status().message().find("--shared-cache"), std::string::npos) << k.status();
    EXPECT_NE(k.status().message().find(url), std::string::npos) << k.status();
  }
}

}  // namespace
}  // namespace kiln
