// kilnd killed with SIGKILL under a mixed load: several threads put blobs of varied sizes
// (over gRPC and the HTTP blob endpoint), put action records that reference them, read them
// back, and compile real graphs, while the test records every acknowledged write. kilnd is
// killed at a different point of the load each round and restarted on the same data
// directory; then every acknowledged blob reads back with its bytes, every acknowledged action
// record is whole (all its artifacts readable) and every acknowledged compile's record is
// there. The last round runs under a small byte budget, so eviction runs alongside: an entry
// may then be gone, but what is served is still whole and verified.

#include <signal.h>

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/blob_http_client.h"
#include "client/cache_client.h"
#include "client/compile_client.h"
#include "proto/base/digest.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::PseudoRandomBytes;
using ::kiln::testing::TempDir;

// Inline values, blob-file values and a large one now and then.
size_t SizeOf(uint64_t i) {
  static constexpr size_t kSizes[] = {100, 3000, 5000, 70000, 1000, 300000, 20, 9000};
  return kSizes[i % 8];
}

constexpr const char* kGraphs[] = {"t5_fp32_1.fw.json.gz", "t5_fp32_2.bw.json.gz",
                                   "mlp_fp32.fw.json", "mlp_fp32.bw.json"};

struct BlobAck {
  uint64_t seed;
  size_t size;
  std::string Bytes() const { return PseudoRandomBytes(size, seed); }
};
struct ActionAck {
  std::string key;
  std::string guard;
  std::vector<v1::Digest> artifacts;
};
struct CompileAck {
  std::string key;
  std::string artifact_hash;
};

// Every write kilnd acknowledged, over all rounds.
struct Acknowledged {
  std::mutex mu;
  std::condition_variable changed;
  std::vector<BlobAck> blobs;
  std::vector<ActionAck> actions;
  std::vector<CompileAck> compiles;
  int this_round = 0;  // acknowledged operations of the running round
};

class KilndCrashTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags) {
    kilnd_.reset();
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(data_, flags);
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd_.emplace(*std::move(k));
    client::ChannelOptions o;
    o.address = kilnd_->address();
    absl::StatusOr<std::unique_ptr<client::CacheClient>> c = client::CacheClient::Create(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cache_ = *std::move(c);
  }

  void Count() {
    std::lock_guard<std::mutex> lock(acked_.mu);
    ++acked_.this_round;
    acked_.changed.notify_all();
  }

  // An error from kilnd: expected once it is killed; before, a failure unless `allowed`.
  bool Stop(const absl::Status& s, const char* what, bool allowed = false) {
    if (killed_.load()) return true;
    if (!allowed) ADD_FAILURE() << what << " failed before the kill: " << s;
    return false;
  }

  // One load thread: puts (gRPC and HTTP), action records and reads, until kilnd dies.
  void Load(int round, int thread, bool evicting) {
    client::BlobHttpClientOptions http_options;
    http_options.address = absl::StrCat("127.0.0.1:", kilnd_->blob_port());
    client::BlobHttpClient http(http_options);
    std::vector<v1::Digest> mine;
    for (uint64_t j = 0; !killed_.load(); ++j) {
      const uint64_t seed =
          (static_cast<uint64_t>(round) * 16 + static_cast<uint64_t>(thread)) << 32 | j;
      const int op = static_cast<int>(j % 5);
      if (op <= 2 || mine.size() < 2) {
        const BlobAck blob{seed, SizeOf(j * 3 + thread)};
        const std::string bytes = blob.Bytes();
        const v1::Digest digest = DigestOf(bytes);
        absl::Status s =
            op == 2 ? http.Put(digest, bytes).status() : cache_->Put(digest, bytes).status();
        if (!s.ok()) {
          if (Stop(s, "a blob put")) return;
          continue;
        }
        {
          std::lock_guard<std::mutex> lock(acked_.mu);
          acked_.blobs.push_back(blob);
        }
        mine.push_back(digest);
      } else if (op == 3) {
        ActionAck action{absl::StrCat("crash-key-", seed),
                         absl::StrCat("Eq(s0, ", j, ")"),
                         {mine[mine.size() - 1], mine[mine.size() - 2]}};
        v1::ActionVariant variant;
        for (const v1::Digest& d : action.artifacts) *variant.add_artifacts() = d;
        variant.mutable_guards()->add_shape_env(action.guard);
        // Under a budget, eviction may take a blob before a record references it.
        absl::Status s = cache_->PutAction(action.key, variant);
        if (!s.ok()) {
          if (Stop(s, "an action put", evicting && absl::IsFailedPrecondition(s))) return;
          continue;
        }
        std::lock_guard<std::mutex> lock(acked_.mu);
        acked_.actions.push_back(std::move(action));
      } else {
        const v1::Digest& d = mine[(j * 7919) % mine.size()];
        absl::StatusOr<std::string> got = cache_->Get(d);  // the client verifies the digest
        if (!got.ok()) {
          if (Stop(got.status(), "a read", evicting && absl::IsNotFound(got.status()))) return;
          continue;
        }
      }
      Count();
    }
  }

  // Compiles real graphs, one after another, until kilnd dies.
  void Compiles() {
    client::ChannelOptions o;
    o.address = kilnd_->address();
    absl::StatusOr<std::unique_ptr<client::CompileClient>> client =
        client::CompileClient::Connect(o);
    ASSERT_TRUE(client.ok()) << client.status();
    for (int i = 0; !killed_.load(); ++i) {
      v1::CompileRequest request;
      *request.mutable_graph() = graphs_[i % graphs_.size()];
      request.mutable_options()->set_target("x86_64");
      absl::StatusOr<v1::CompileResponse> r = (*client)->Compile(request, absl::Seconds(120));
      if (!r.ok()) {
        if (Stop(r.status(), "a compile")) return;
        continue;
      }
      {
        std::lock_guard<std::mutex> lock(acked_.mu);
        acked_.compiles.push_back({r->compile_key(), r->artifact_digest().hash()});
      }
      Count();
    }
  }

  // Runs the load until `kill_after` operations were acknowledged, then SIGKILLs kilnd.
  void LoadAndKill(int round, int kill_after, bool evicting, v1::CacheStats* before_kill) {
    killed_.store(false);
    {
      std::lock_guard<std::mutex> lock(acked_.mu);
      acked_.this_round = 0;
    }
    std::vector<std::thread> threads;
    for (int t = 0; t < 3; ++t) {
      threads.emplace_back([this, round, t, evicting] { Load(round, t, evicting); });
    }
    threads.emplace_back([this] { Compiles(); });
    {
      std::unique_lock<std::mutex> lock(acked_.mu);
      const bool reached = acked_.changed.wait_for(lock, std::chrono::seconds(60),
                                                   [&] { return acked_.this_round >= kill_after; });
      EXPECT_TRUE(reached) << "only " << acked_.this_round << " operations in 60 s";
    }
    absl::StatusOr<v1::CacheStats> stats = cache_->Stat();
    EXPECT_TRUE(stats.ok()) << stats.status();
    if (stats.ok()) *before_kill = *stats;
    killed_.store(true);
    kilnd_->process().Signal(SIGKILL);
    std::optional<int> code = kilnd_->process().Wait(absl::Seconds(30));
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, 128 + SIGKILL);
    for (std::thread& t : threads) t.join();
  }

  // What a restarted kilnd must serve. With `evicting`, an entry may be gone (NOT_FOUND), but
  // nothing is served that is not whole.
  void Verify(bool evicting) {
    std::lock_guard<std::mutex> lock(acked_.mu);
    int present = 0;
    for (const BlobAck& blob : acked_.blobs) {
      const std::string bytes = blob.Bytes();
      absl::StatusOr<std::string> got = cache_->Get(DigestOf(bytes));
      if (evicting && absl::IsNotFound(got.status())) continue;
      ASSERT_TRUE(got.ok()) << "acknowledged blob " << blob.seed << " (" << blob.size
                            << " bytes): " << got.status();
      ASSERT_TRUE(*got == bytes) << "blob " << blob.seed << " came back with other bytes";
      ++present;
    }
    for (const ActionAck& action : acked_.actions) {
      absl::StatusOr<v1::ActionEntry> entry = cache_->GetAction(action.key);
      if (evicting && absl::IsNotFound(entry.status())) continue;
      ASSERT_TRUE(entry.ok()) << "acknowledged action " << action.key << ": " << entry.status();
      ASSERT_EQ(entry->variants_size(), 1) << entry->DebugString();
      const v1::ActionVariant& v = entry->variants(0);
      ASSERT_EQ(v.guards().shape_env_size(), 1);
      EXPECT_EQ(v.guards().shape_env(0), action.guard);
      ASSERT_EQ(v.artifacts_size(), static_cast<int>(action.artifacts.size()));
      for (int i = 0; i < v.artifacts_size(); ++i) {
        EXPECT_EQ(v.artifacts(i).hash(), action.artifacts[i].hash());
        absl::StatusOr<std::string> bytes = cache_->Get(v.artifacts(i));
        ASSERT_TRUE(bytes.ok()) << "action " << action.key << " is served but its artifact "
                                << v.artifacts(i).hash() << " is not: " << bytes.status();
      }
    }
    for (const CompileAck& compile : acked_.compiles) {
      absl::StatusOr<v1::ActionEntry> entry = cache_->GetAction(compile.key);
      if (evicting && absl::IsNotFound(entry.status())) continue;
      ASSERT_TRUE(entry.ok()) << "acknowledged compile " << compile.key << ": " << entry.status();
      ASSERT_GE(entry->variants_size(), 1);
      bool found = false;
      for (const v1::ActionVariant& v : entry->variants()) {
        ASSERT_GE(v.artifacts_size(), 2);
        found = found || v.artifacts(0).hash() == compile.artifact_hash;
        for (const v1::Digest& d : v.artifacts()) {
          absl::StatusOr<std::string> bytes = cache_->Get(d);
          ASSERT_TRUE(bytes.ok()) << "compile record " << compile.key << " is served but "
                                  << d.hash() << " is not: " << bytes.status();
        }
      }
      EXPECT_TRUE(found) << "no variant of " << compile.key << " holds artifact "
                         << compile.artifact_hash;
    }
    if (!evicting) EXPECT_EQ(present, static_cast<int>(acked_.blobs.size()));
    absl::StatusOr<v1::CacheStats> stats = cache_->Stat();
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->integrity_failures(), 0);
  }

  TempDir dir_;
  const std::string data_ = dir_.path() + "/data";
  std::vector<v1::Graph> graphs_;
  std::optional<KilndProcess> kilnd_;
  std::unique_ptr<client::CacheClient> cache_;
  std::atomic<bool> killed_{false};
  Acknowledged acked_;
};

TEST_F(KilndCrashTest, AcknowledgedWritesSurviveSigkillUnderMixedLoad) {
  for (const char* name : kGraphs) graphs_.push_back(testing::LoadSharedGraph(name));
  const std::vector<std::string> flags = {"--blob-listen", "127.0.0.1:0"};
  // Kill at a different point of the load each round (the first right after it starts); the
  // last runs under a 2 MiB budget.
  const int kill_after[] = {5, 250, 900, 600};
  for (int round = 0; round < 4; ++round) {
    SCOPED_TRACE(absl::StrCat("round ", round));
    const bool evicting = round == 3;
    std::vector<std::string> round_flags = flags;
    if (evicting) round_flags.insert(round_flags.end(), {"--cache-max-bytes", "2m"});
    ASSERT_NO_FATAL_FAILURE(Start(round_flags));
    v1::CacheStats before_kill;
    ASSERT_NO_FATAL_FAILURE(LoadAndKill(round, kill_after[round], evicting, &before_kill));
    if (evicting) {
      EXPECT_GT(before_kill.evicted_bytes(), 0) << "the budget never made eviction run";
    }
    ASSERT_NO_FATAL_FAILURE(Start(round_flags));
    ASSERT_NO_FATAL_FAILURE(Verify(evicting));
    std::lock_guard<std::mutex> lock(acked_.mu);
    std::printf(
        "round %d: killed after %d operations; %zu blobs, %zu actions, %zu compiles "
        "acknowledged so far; %lld bytes evicted before the kill\n",
        round, acked_.this_round, acked_.blobs.size(), acked_.actions.size(),
        acked_.compiles.size(), static_cast<long long>(before_kill.evicted_bytes()));
  }
  std::lock_guard<std::mutex> lock(acked_.mu);
  EXPECT_GT(acked_.actions.size(), 10u);
  EXPECT_GT(acked_.compiles.size(), 0u);
}

}  // namespace
}  // namespace kiln
