#include "cache/shared/shared_tier.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "proto/base/digest.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::LocalRedisCluster;

constexpr int64_t kChunk = 64 << 10;

std::unique_ptr<SharedTier> Tier(const LocalRedisCluster& cluster) {
  RedisClusterOptions o;
  o.seeds = cluster.addresses();
  o.connect_timeout = absl::Milliseconds(300);
  o.command_timeout = absl::Seconds(1);
  o.min_backoff = absl::Milliseconds(20);
  o.max_backoff = absl::Milliseconds(200);
  absl::StatusOr<std::unique_ptr<RedisCluster>> redis = RedisCluster::Create(o);
  EXPECT_TRUE(redis.ok()) << redis.status();
  SharedTier::Options options;
  options.chunk_bytes = kChunk;
  return std::make_unique<SharedTier>(std::move(*redis), options);
}

// The index of the node holding `key`.
int NodeOf(SharedTier& tier, const LocalRedisCluster& cluster, const std::string& key) {
  EXPECT_TRUE(tier.redis().Refresh().ok());
  return cluster.IndexOf(tier.redis().MasterForSlot(RedisKeySlot(key)));
}

class SharedTierTest : public ::kiln::testing::RedisClusterTest {};

TEST_F(SharedTierTest, BlobsRoundTripBetweenServers) {
  std::unique_ptr<SharedTier> writer = Tier(*cluster_);
  std::unique_ptr<SharedTier> reader = Tier(*cluster_);  // another kilnd on the same cluster
  for (size_t size :
       {size_t{0}, size_t{1}, size_t(kChunk), size_t(kChunk) + 1, size_t(kChunk) * 7 + 123}) {
    const std::string bytes = testing::PseudoRandomBytes(size, size);
    const v1::Digest digest = DigestOf(bytes);
    EXPECT_TRUE(absl::IsNotFound(reader->GetBlob(digest).status()));
    ASSERT_TRUE(writer->PutBlob(digest, bytes).ok()) << size;
    absl::StatusOr<std::string> got = reader->GetBlob(digest);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == bytes) << size;
  }
  // A blob's header and chunks share one slot, so one node holds the whole blob.
  const std::string bytes = testing::PseudoRandomBytes(kChunk * 3, 99);
  const v1::Digest digest = DigestOf(bytes);
  ASSERT_TRUE(writer->PutBlob(digest, bytes).ok());
  const std::string header = writer->BlobHeaderKey(digest.hash());
  const int node = NodeOf(*writer, *cluster_, header);
  ASSERT_GE(node, 0);
  EXPECT_EQ(
      *cluster_->Cli(node, {"CLUSTER", "COUNTKEYSINSLOT", absl::StrCat(RedisKeySlot(header))}),
      "4");
  EXPECT_EQ(*cluster_->Cli(node, {"STRLEN", writer->BlobChunkKey(digest.hash(), 2)}),
            absl::StrCat(kChunk));

  SharedTier::Stats s = reader->stats();
  EXPECT_EQ(s.hits, 5);
  EXPECT_EQ(s.misses, 5);
  EXPECT_EQ(s.corrupt, 0);
  EXPECT_EQ(s.errors, 0);
  EXPECT_TRUE(s.healthy);
  EXPECT_EQ(writer->stats().puts, 6);
}

TEST_F(SharedTierTest, BadPutsAreRefused) {
  std::unique_ptr<SharedTier> tier = Tier(*cluster_);
  v1::Digest digest = DigestOf("right bytes");
  absl::Status s = tier->PutBlob(digest, "wrong bytes");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(s.message(), "do not hash")) << s;
  digest.set_size_bytes(3);
  EXPECT_EQ(tier->PutBlob(digest, "right bytes").code(), absl::StatusCode::kInvalidArgument);
  v1::Digest malformed;
  malformed.set_hash("xyz");
  EXPECT_EQ(tier->PutBlob(malformed, "x").code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(tier->GetBlob(malformed).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::IsNotFound(tier->GetBlob(DigestOf("right bytes")).status()));
}

TEST_F(SharedTierTest, CorruptBlobIsDroppedCountedAndNotServed) {
  std::unique_ptr<SharedTier> tier = Tier(*cluster_);
  const std::string bytes = testing::PseudoRandomBytes(kChunk * 2 + 10, 5);
  const v1::Digest digest = DigestOf(bytes);
  ASSERT_TRUE(tier->PutBlob(digest, bytes).ok());
  const std::string header = tier->BlobHeaderKey(digest.hash());
  const int node = NodeOf(*tier, *cluster_, header);
  const std::string slot = absl::StrCat(RedisKeySlot(header));

  // One byte flipped inside Redis, in the middle chunk.
  ASSERT_TRUE(
      cluster_->Cli(node, {"SETRANGE", tier->BlobChunkKey(digest.hash(), 1), "100", "?"}).ok());
  absl::StatusOr<std::string> got = tier->GetBlob(digest);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_TRUE(absl::StrContains(got.status().message(), "corrupt")) << got.status();
  EXPECT_EQ(tier->stats().corrupt, 1);
  EXPECT_EQ(*cluster_->Cli(node, {"CLUSTER", "COUNTKEYSINSLOT", slot}), "0");

  // A chunk cut short, and a mangled header: dropped the same way.
  ASSERT_TRUE(tier->PutBlob(digest, bytes).ok());
  ASSERT_TRUE(cluster_->Cli(node, {"SET", tier->BlobChunkKey(digest.hash(), 2), "x"}).ok());
  EXPECT_TRUE(absl::IsNotFound(tier->GetBlob(digest).status()));
  ASSERT_TRUE(tier->PutBlob(digest, bytes).ok());
  ASSERT_TRUE(cluster_->Cli(node, {"SET", header, "kiln-blob-1 nonsense"}).ok());
  EXPECT_TRUE(absl::IsNotFound(tier->GetBlob(digest).status()));
  EXPECT_EQ(tier->stats().corrupt, 3);

  // A chunk evicted (gone): a plain miss, not corruption; the rest is cleared.
  ASSERT_TRUE(tier->PutBlob(digest, bytes).ok());
  ASSERT_TRUE(cluster_->Cli(node, {"DEL", tier->BlobChunkKey(digest.hash(), 0)}).ok());
  got = tier->GetBlob(digest);
  EXPECT_TRUE(absl::IsNotFound(got.status()));
  EXPECT_TRUE(absl::StrContains(got.status().message(), "evicted")) << got.status();
  EXPECT_EQ(tier->stats().corrupt, 3);
  EXPECT_EQ(*cluster_->Cli(node, {"CLUSTER", "COUNTKEYSINSLOT", slot}), "0");

  // Written again, it is served again.
  ASSERT_TRUE(tier->PutBlob(digest, bytes).ok());
  got = tier->GetBlob(digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes);
}

TEST_F(SharedTierTest, ActionRecordsRoundTripAndCorruptionIsDropped) {
  std::unique_ptr<SharedTier> tier = Tier(*cluster_);
  const std::string key = Sha256Hex("compile key");
  EXPECT_TRUE(absl::IsNotFound(tier->GetAction(key).status()));
  const std::string entry("serialized\0entry", 16);
  ASSERT_TRUE(tier->PutAction(key, entry).ok());
  EXPECT_EQ(*Tier(*cluster_)->GetAction(key), entry);

  const std::string redis_key = tier->ActionKey(key);
  const int node = NodeOf(*tier, *cluster_, redis_key);
  ASSERT_TRUE(cluster_->Cli(node, {"SETRANGE", redis_key, "70", "X"}).ok());
  absl::StatusOr<std::string> got = tier->GetAction(key);
  EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
  EXPECT_EQ(tier->stats().corrupt, 1);
  EXPECT_EQ(*cluster_->Cli(node, {"EXISTS", redis_key}), "0");
}

TEST_F(SharedTierTest, ClusterDownIsUnavailableAndHealthRecovers) {
  std::unique_ptr<SharedTier> tier = Tier(*cluster_);
  const std::string bytes = testing::PseudoRandomBytes(1000, 1);
  const v1::Digest digest = DigestOf(bytes);
  ASSERT_TRUE(tier->PutBlob(digest, bytes).ok());
  const int node = NodeOf(*tier, *cluster_, tier->BlobHeaderKey(digest.hash()));

  ASSERT_TRUE(cluster_->Kill(node).ok());
  const absl::Time start = absl::Now();
  absl::StatusOr<std::string> got = tier->GetBlob(digest);
  EXPECT_EQ(got.status().code(), absl::StatusCode::kUnavailable) << got.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(2));
  EXPECT_EQ(tier->PutBlob(digest, bytes).code(), absl::StatusCode::kUnavailable);
  SharedTier::Stats s = tier->stats();
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.errors, 2);
  EXPECT_TRUE(absl::StrContains(s.last_error, cluster_->address(node))) << s.last_error;

  ASSERT_TRUE(cluster_->Restart(node).ok());
  ASSERT_TRUE(cluster_->WaitHealthy(absl::Seconds(20)).ok());
  // The node came back empty: a miss, then a write and a hit.
  absl::Status last;
  for (int i = 0; i < 500; ++i) {
    last = tier->PutBlob(digest, bytes);
    if (last.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE(last.ok()) << last;
  got = tier->GetBlob(digest);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_TRUE(*got == bytes);
  EXPECT_TRUE(tier->stats().healthy);
}

}  // namespace
}  // namespace kiln::cache
