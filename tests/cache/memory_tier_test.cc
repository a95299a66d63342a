// The memory tier: least recently used out first within its capacity, blobs too large for
// a shard left out, and a copy damaged in memory detected by its checksum and dropped.

#include "cache/memory_tier.h"

#include <gtest/gtest.h>

#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::PseudoRandomBytes;

// Raw hashes that land in one shard (same second byte), so capacity is easy to reason about.
std::string Key(int i) { return absl::StrCat(std::string(1, static_cast<char>(i)), "S", i); }

std::shared_ptr<std::string> Blob(size_t size, int seed) {
  return std::make_shared<std::string>(PseudoRandomBytes(size, seed));
}

TEST(MemoryTierTest, FindsWhatWasInsertedAndCountsIt) {
  MemoryTier tier(16 << 20);
  auto blob = Blob(5000, 1);
  tier.Insert(Key(1), blob);
  MemoryTier::Lookup got = tier.Find(Key(1));
  ASSERT_EQ(got.found, MemoryTier::Found::kHit);
  EXPECT_EQ(got.bytes.get(), blob.get());  // shared, not copied
  EXPECT_EQ(tier.Find(Key(2)).found, MemoryTier::Found::kAbsent);
  EXPECT_EQ(tier.blobs(), 1);
  EXPECT_EQ(tier.bytes(), 5000);
  tier.Insert(Key(1), Blob(5000, 1));  // replacing counts once
  EXPECT_EQ(tier.blobs(), 1);
  EXPECT_EQ(tier.bytes(), 5000);
  tier.Erase(Key(1));
  EXPECT_EQ(tier.Find(Key(1)).found, MemoryTier::Found::kAbsent);
  EXPECT_EQ(tier.bytes(), 0);
  // A reader's copy outlives the tier's.
  EXPECT_EQ(*got.bytes, PseudoRandomBytes(5000, 1));
}

TEST(MemoryTierTest, LeastRecentlyUsedLeavesFirst) {
  // 16 shards of 10,000 bytes: four 2,500-byte blobs fill one.
  MemoryTier tier(16 * 10000);
  for (int i = 0; i < 4; ++i) tier.Insert(Key(i), Blob(2500, i));
  ASSERT_EQ(tier.blobs(), 4);
  ASSERT_EQ(tier.Find(Key(0)).found, MemoryTier::Found::kHit);  // 1 is now the oldest
  tier.Insert(Key(4), Blob(2500, 4));
  EXPECT_EQ(tier.Find(Key(1)).found, MemoryTier::Found::kAbsent);
  for (int i : {0, 2, 3, 4}) EXPECT_EQ(tier.Find(Key(i)).found, MemoryTier::Found::kHit) << i;
  EXPECT_EQ(tier.bytes(), 10000);
  // A blob larger than a shard is not kept, and displaces nothing.
  tier.Insert(Key(9), Blob(10001, 9));
  EXPECT_EQ(tier.Find(Key(9)).found, MemoryTier::Found::kAbsent);
  EXPECT_EQ(tier.blobs(), 4);
}

TEST(MemoryTierTest, ZeroCapacityKeepsNothing) {
  MemoryTier tier(0);
  tier.Insert(Key(1), Blob(0, 1));
  tier.Insert(Key(2), Blob(10, 2));
  EXPECT_EQ(tier.Find(Key(1)).found, MemoryTier::Found::kAbsent);
  EXPECT_EQ(tier.blobs(), 0);
}

TEST(MemoryTierTest, ADamagedCopyIsReportedAndDropped) {
  MemoryTier tier(16 << 20);
  for (size_t size : {size_t{1}, size_t{4096}, size_t{1} << 20}) {
    auto blob = Blob(size, static_cast<int>(size));
    tier.Insert(Key(3), blob);
    (*blob)[size / 2] ^= 0x01;  // what a memory fault would do
    MemoryTier::Lookup got = tier.Find(Key(3));
    EXPECT_EQ(got.found, MemoryTier::Found::kCorrupt) << size;
    EXPECT_EQ(got.bytes, nullptr);
    EXPECT_EQ(tier.Find(Key(3)).found, MemoryTier::Found::kAbsent) << size;
    EXPECT_EQ(tier.blobs(), 0);
  }
}

TEST(MemoryTierTest, ConcurrentReadersAndWritersAgree) {
  MemoryTier tier(16 * 64 * 1024);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&tier, t] {
      for (int i = 0; i < 2000; ++i) {
        const int k = (i * 7 + t) % 64;
        const std::string key = absl::StrCat("k", std::string(1, static_cast<char>(k)), k);
        if (i % 3 == 0) {
          tier.Insert(key, Blob(1000 + k, k));
        } else if (i % 17 == 0) {
          tier.Erase(key);
        } else {
          MemoryTier::Lookup got = tier.Find(key);
          ASSERT_NE(got.found, MemoryTier::Found::kCorrupt);
          if (got.found == MemoryTier::Found::kHit)
            ASSERT_EQ(*got.bytes, PseudoRandomBytes(1000 + k, k));
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  EXPECT_LE(tier.bytes(), tier.capacity_bytes());
}

}  // namespace
}  // namespace kiln::cache
