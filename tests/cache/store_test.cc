// The content-addressed store: round trips, bad input, verification on every read, and
// opening a corrupt database.

#include "cache/store.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "cache/cache.h"
#include "cache/db.h"
#include "proto/base/digest.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::TempDir;

CacheOptions Options(const std::string& path) {
  CacheOptions o;
  o.path = path;
  o.background_maintenance = false;
  o.block_cache_bytes = 8 << 20;
  return o;
}

std::unique_ptr<Cache> OpenOrDie(const CacheOptions& options) {
  absl::StatusOr<std::unique_ptr<Cache>> cache = Cache::Open(options);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? *std::move(cache) : nullptr;
}

using ::kiln::testing::PseudoRandomBytes;

// Stores `blobs` in a cache at `path` and closes it, so that the next Open finds them on disk.
void StoreAndClose(const std::string& path, const std::vector<std::string>& blobs) {
  auto cache = OpenOrDie(Options(path));
  for (const std::string& b : blobs) ASSERT_TRUE(cache->store().Put(DigestOf(b), b).ok());
}

// Rewrites the stored value of `digest` with one byte flipped, straight into RocksDB.
void FlipStoredByte(const std::string& path, const v1::Digest& digest, size_t at) {
  absl::StatusOr<std::unique_ptr<CacheDb>> db = CacheDb::Open(Options(path));
  ASSERT_TRUE(db.ok()) << db.status();
  const std::string key = RawHash(digest.hash());
  std::string value;
  ASSERT_TRUE((*db)->db()->Get(rocksdb::ReadOptions(), (*db)->blobs(), key, &value).ok());
  value[at % value.size()] ^= 0x40;
  ASSERT_TRUE((*db)->db()->Put(rocksdb::WriteOptions(), (*db)->blobs(), key, value).ok());
  ASSERT_TRUE((*db)->Close().ok());
}

TEST(StoreTest, PutThenGetRoundTripsSmallAndLargeBlobs) {
  TempDir dir;
  auto cache = OpenOrDie(Options(dir.path() + "/store"));
  for (size_t size : {size_t{0}, size_t{1}, size_t{1000}, size_t{5000}, size_t{3} << 20}) {
    const std::string bytes = PseudoRandomBytes(size, static_cast<int>(size));
    const v1::Digest d = DigestOf(bytes);
    absl::StatusOr<bool> present = cache->store().Put(d, bytes);
    ASSERT_TRUE(present.ok()) << present.status();
    EXPECT_FALSE(*present);
    absl::StatusOr<std::string> got = cache->store().Get(d);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, bytes) << size;
    present = cache->store().Put(d, bytes);
    ASSERT_TRUE(present.ok());
    EXPECT_TRUE(*present) << "the second Put of the same blob writes nothing";
  }
  const CacheStatistics s = cache->Statistics();
  EXPECT_EQ(s.blobs, 5);
  EXPECT_EQ(s.blob_bytes, 0 + 1 + 1000 + 5000 + (3 << 20));
  EXPECT_EQ(s.blob_puts, 5);
  EXPECT_EQ(s.blob_gets, 5);
}

TEST(StoreTest, SizeZeroInADigestMatchesAnyLength) {
  TempDir dir;
  auto cache = OpenOrDie(Options(dir.path() + "/store"));
  const std::string bytes = "kernel";
  ASSERT_TRUE(cache->store().Put(DigestOf(bytes), bytes).ok());
  v1::Digest any = DigestOf(bytes);
  any.set_size_bytes(0);
  EXPECT_TRUE(cache->store().Get(any).ok());
  v1::Digest wrong = DigestOf(bytes);
  wrong.set_size_bytes(7);
  EXPECT_TRUE(absl::IsNotFound(cache->store().Get(wrong).status()));
  EXPECT_FALSE(*cache->store().Contains(wrong));
}

TEST(StoreTest, GetWithALimitRefusesLongerBlobsWithoutReadingThem) {
  TempDir dir;
  auto cache = OpenOrDie(Options(dir.path() + "/store"));
  const std::string bytes = PseudoRandomBytes(5000, 4);
  const v1::Digest d = DigestOf(bytes);
  ASSERT_TRUE(cache->store().Put(d, bytes).ok());
  v1::Digest any = d;
  any.set_size_bytes(0);

  absl::StatusOr<std::string> got = cache->store().Get(d, 5000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  got = cache->store().Get(any, 5000);
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, bytes);
  // The declared size decides, or the stored one when the digest leaves it open.
  EXPECT_TRUE(absl::IsOutOfRange(cache->store().Get(d, 4999).status()));
  EXPECT_TRUE(absl::IsOutOfRange(cache->store().Get(any, 4999).status()));
  v1::Digest absent = DigestOf("absent");
  absent.set_size_bytes(0);
  EXPECT_TRUE(absl::IsNotFound(cache->store().Get(absent, 4999).status()));

  const CacheStatistics s = cache->Statistics();
  EXPECT_EQ(s.blob_gets, 2) << "refused reads are not answered reads";
  EXPECT_EQ(s.blob_get_misses, 1);
}

TEST(StoreTest, BadInputGetsTheRightCodeAndWritesNothing) {
  TempDir dir;
  CacheOptions o = Options(dir.path() + "/store");
  o.max_blob_bytes = 1 << 20;
  auto cache = OpenOrDie(o);
  const std::string bytes = PseudoRandomBytes(100, 1);
  v1::Digest good = DigestOf(bytes);

  v1::Digest malformed = good;
  malformed.set_hash("ABC");
  EXPECT_TRUE(absl::IsInvalidArgument(cache->store().Put(malformed, bytes).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(cache->store().Get(malformed).status()));
  malformed.set_hash(std::string(64, 'G'));
  EXPECT_TRUE(absl::IsInvalidArgument(cache->store().Put(malformed, bytes).status()));
  v1::Digest negative = good;
  negative.set_size_bytes(-1);
  EXPECT_TRUE(absl::IsInvalidArgument(cache->store().Put(negative, bytes).status()));

  v1::Digest other = DigestOf(PseudoRandomBytes(100, 2));
  absl::Status mismatch = cache->store().Put(other, bytes).status();
  EXPECT_TRUE(absl::IsInvalidArgument(mismatch)) << mismatch;
  EXPECT_NE(mismatch.message().find("hash to"), absl::string_view::npos) << mismatch;
  v1::Digest short_size = good;
  short_size.set_size_bytes(99);
  EXPECT_TRUE(absl::IsInvalidArgument(cache->store().Put(short_size, bytes).status()));

  const std::string big = PseudoRandomBytes((1 << 20) + 1, 3);
  EXPECT_TRUE(absl::IsResourceExhausted(cache->store().Put(DigestOf(big), big).status()));

  EXPECT_EQ(cache->Statistics().blobs, 0);
  EXPECT_TRUE(absl::IsNotFound(cache->store().Get(other).status()));
  EXPECT_TRUE(absl::IsNotFound(cache->store().Get(DigestOf(big)).status()));
  // The store still works.
  ASSERT_TRUE(cache->store().Put(good, bytes).ok());
  EXPECT_EQ(*cache->store().Get(good), bytes);
}

TEST(StoreTest, FindMissingListsAbsentDigestsInOrder) {
  TempDir dir;
  auto cache = OpenOrDie(Options(dir.path() + "/store"));
  std::vector<v1::Digest> all;
  for (int i = 0; i < 6; ++i) {
    const std::string b = PseudoRandomBytes(10 + i, i);
    all.push_back(DigestOf(b));
    if (i % 2 == 0) ASSERT_TRUE(cache->store().Put(all.back(), b).ok());
  }
  absl::StatusOr<std::vector<v1::Digest>> missing = cache->store().FindMissing(all);
  ASSERT_TRUE(missing.ok()) << missing.status();
  ASSERT_EQ(missing->size(), 3u);
  EXPECT_EQ((*missing)[0].hash(), all[1].hash());
  EXPECT_EQ((*missing)[2].hash(), all[5].hash());
  all[3].set_hash("nope");
  absl::Status bad = cache->store().FindMissing(all).status();
  EXPECT_TRUE(absl::IsInvalidArgument(bad));
  EXPECT_NE(bad.message().find("digests[3]"), absl::string_view::npos) << bad;
}

TEST(StoreTest, ContentsAndCountsSurviveReopening) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  std::vector<std::string> blobs;
  for (int i = 0; i < 20; ++i) blobs.push_back(PseudoRandomBytes(i * 1000, i));
  ASSERT_NO_FATAL_FAILURE(StoreAndClose(path, blobs));
  auto cache = OpenOrDie(Options(path));
  EXPECT_EQ(cache->Statistics().blobs, 20);
  int64_t total = 0;
  for (const std::string& b : blobs) {
    total += static_cast<int64_t>(b.size());
    absl::StatusOr<std::string> got = cache->store().Get(DigestOf(b));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(*got, b);
  }
  EXPECT_EQ(cache->Statistics().blob_bytes, total);
}

TEST(StoreTest, CorruptValuesAreDroppedCountedAndNeverServed) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  // One small value (kept in SST files) and one large (in a blob file).
  const std::string small = PseudoRandomBytes(300, 7), large = PseudoRandomBytes(200000, 8),
                    intact = PseudoRandomBytes(5000, 9);
  ASSERT_NO_FATAL_FAILURE(StoreAndClose(path, {small, large, intact}));
  FlipStoredByte(path, DigestOf(small), 17);
  FlipStoredByte(path, DigestOf(large), 123456);
  auto cache = OpenOrDie(Options(path));
  for (const std::string* b : {&small, &large}) {
    absl::StatusOr<std::string> got = cache->store().Get(DigestOf(*b));
    EXPECT_TRUE(absl::IsNotFound(got.status())) << got.status();
    // Dropped: the second read is a plain miss, and the blob is gone from the index.
    EXPECT_TRUE(absl::IsNotFound(cache->store().Get(DigestOf(*b)).status()));
    EXPECT_FALSE(*cache->store().Contains(DigestOf(*b)));
  }
  const CacheStatistics s = cache->Statistics();
  EXPECT_EQ(s.integrity_failures, 2);
  EXPECT_EQ(s.blobs, 1);
  EXPECT_EQ(s.blob_bytes, 5000);
  EXPECT_EQ(*cache->store().Get(DigestOf(intact)), intact);
  // The right bytes can be stored again.
  ASSERT_TRUE(cache->store().Put(DigestOf(small), small).ok());
  EXPECT_EQ(*cache->store().Get(DigestOf(small)), small);
}

TEST(StoreTest, CorruptionDetectedByRocksDbIsDroppedToo) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  const std::string value = PseudoRandomBytes(100000, 4);
  ASSERT_NO_FATAL_FAILURE(StoreAndClose(path, {value}));
  // Damage the blob file itself: whether RocksDB's decoding or Kiln's hash notices first,
  // the blob is dropped.
  int damaged = 0;
  for (const auto& entry : std::filesystem::directory_iterator(path)) {
    if (entry.path().extension() != ".blob") continue;
    std::fstream f(entry.path(), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(entry.file_size() / 2));
    f.put('\x5a');
    f.put('\xa5');
    ++damaged;
  }
  ASSERT_EQ(damaged, 1);
  auto cache = OpenOrDie(Options(path));
  EXPECT_TRUE(absl::IsNotFound(cache->store().Get(DigestOf(value)).status()));
  EXPECT_EQ(cache->Statistics().integrity_failures, 1);
  EXPECT_EQ(cache->Statistics().blobs, 0);
}

TEST(StoreTest, CorruptDatabaseIsMovedAsideUnlessRefused) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  const std::string value = "artifact";
  ASSERT_NO_FATAL_FAILURE(StoreAndClose(path, {value}));
  {
    std::ofstream current(path + "/CURRENT", std::ios::trunc);
    current << "garbage";
  }
  CacheOptions refuse = Options(path);
  refuse.refuse_corrupt_store = true;
  absl::StatusOr<std::unique_ptr<Cache>> refused = Cache::Open(refuse);
  EXPECT_TRUE(absl::IsDataLoss(refused.status())) << refused.status();
  EXPECT_TRUE(std::filesystem::exists(path + "/CURRENT"));

  std::vector<std::string> events;
  CacheOptions o = Options(path);
  o.log = [&](absl::string_view event, absl::string_view detail) {
    events.push_back(absl::StrCat(event, ": ", detail));
  };
  auto cache = OpenOrDie(o);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->Statistics().stores_moved_aside, 1);
  EXPECT_EQ(cache->Statistics().blobs, 0);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("store_moved_aside"), std::string::npos) << events[0];
  int aside = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    if (entry.path().filename().string().rfind("store.corrupt-", 0) == 0) ++aside;
  }
  EXPECT_EQ(aside, 1);
  // The fresh store works.
  ASSERT_TRUE(cache->store().Put(DigestOf(value), value).ok());
  EXPECT_EQ(*cache->store().Get(DigestOf(value)), value);
}

TEST(StoreTest, WrittenBlobsAreReadFromMemoryWithoutACopy) {
  TempDir dir;
  auto cache = OpenOrDie(Options(dir.path() + "/store"));
  const std::string value = PseudoRandomBytes(70000, 11);
  ASSERT_TRUE(cache->store().Put(DigestOf(value), value).ok());
  absl::StatusOr<BlobBytes> first = cache->store().Read(DigestOf(value));
  absl::StatusOr<BlobBytes> second = cache->store().Read(DigestOf(value));
  ASSERT_TRUE(first.ok() && second.ok());
  EXPECT_EQ(first->get(), second->get());
  EXPECT_EQ(**first, value);
  const CacheStatistics s = cache->Statistics();
  EXPECT_EQ(s.blob_gets, 2);
  EXPECT_EQ(s.memory_hits, 2);
  EXPECT_EQ(s.memory_blobs, 1);
  EXPECT_EQ(s.memory_bytes, 70000);
  // Limits and sizes are checked for reads from memory as for reads from disk.
  EXPECT_TRUE(absl::IsOutOfRange(cache->store().Read(DigestOf(value), 69999).status()));
  v1::Digest wrong_size = DigestOf(value);
  wrong_size.set_size_bytes(5);
  EXPECT_TRUE(absl::IsNotFound(cache->store().Read(wrong_size).status()));
}

TEST(StoreTest, ABlobReadFromDiskIsVerifiedThenKeptInMemory) {
  TempDir dir;
  const std::string path = dir.path() + "/store";
  const std::string value = PseudoRandomBytes(300000, 12);
  ASSERT_NO_FATAL_FAILURE(StoreAndClose(path, {value}));
  auto cache = OpenOrDie(Options(path));
  EXPECT_EQ(cache->Statistics().memory_blobs, 0);
  EXPECT_EQ(*cache->store().Get(DigestOf(value)), value);
  EXPECT_EQ(cache->Statistics().memory_hits, 0);
  EXPECT_EQ(*cache->store().Get(DigestOf(value)), value);
  EXPECT_EQ(cache->Statistics().memory_hits, 1);
}

TEST(StoreTest, WithoutAMemoryTierEveryReadGoesToDisk) {
  TempDir dir;
  CacheOptions o = Options(dir.path() + "/store");
  o.memory_bytes = 0;
  auto cache = OpenOrDie(o);
  const std::string value = PseudoRandomBytes(5000, 13);
  ASSERT_TRUE(cache->store().Put(DigestOf(value), value).ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ(*cache->store().Get(DigestOf(value)), value);
  EXPECT_EQ(cache->Statistics().blob_gets, 3);
  EXPECT_EQ(cache->Statistics().memory_hits, 0);
  EXPECT_EQ(cache->Statistics().memory_blobs, 0);
}

TEST(StoreTest, ACopyDamagedInMemoryIsDroppedCountedAndTheStoredBlobServed) {
  TempDir dir;
  std::vector<std::string> events;
  CacheOptions o = Options(dir.path() + "/store");
  o.log = [&](absl::string_view event, absl::string_view detail) {
    events.push_back(absl::StrCat(event, ": ", detail));
  };
  auto cache = OpenOrDie(o);
  const std::string value = PseudoRandomBytes(64 << 10, 14);
  ASSERT_TRUE(cache->store().Put(DigestOf(value), value).ok());
  absl::StatusOr<BlobBytes> kept = cache->store().Read(DigestOf(value));
  ASSERT_TRUE(kept.ok());
  // A bit flips in the kept copy (the store allocated it mutable; a memory fault would not ask).
  const_cast<std::string&>(**kept)[1234] ^= 0x08;
  absl::StatusOr<std::string> got = cache->store().Get(DigestOf(value));
  ASSERT_TRUE(got.ok()) << got.status();
  EXPECT_EQ(*got, value);
  const CacheStatistics s = cache->Statistics();
  EXPECT_EQ(s.integrity_failures, 1);
  EXPECT_EQ(s.memory_hits, 1);  // the first read only
  EXPECT_EQ(s.blobs, 1);        // the stored blob was intact and stays
  ASSERT_EQ(events.size(), 1u);
  EXPECT_NE(events[0].find("copy in memory"), std::string::npos) << events[0];
  // The verified stored bytes replaced the damaged copy.
  EXPECT_EQ(*cache->store().Get(DigestOf(value)), value);
  EXPECT_EQ(cache->Statistics().memory_hits, 2);
}

TEST(StoreTest, ADeletedBlobIsNotServedFromMemory) {
  TempDir dir;
  auto cache = OpenOrDie(Options(dir.path() + "/store"));
  const std::string value = PseudoRandomBytes(4000, 15);
  ASSERT_TRUE(cache->store().Put(DigestOf(value), value).ok());
  ASSERT_TRUE(cache->store().Get(DigestOf(value)).ok());
  ASSERT_EQ(*cache->store().Delete(RawHash(DigestOf(value).hash())), 4000);
  EXPECT_TRUE(absl::IsNotFound(cache->store().Get(DigestOf(value)).status()));
  EXPECT_EQ(cache->Statistics().memory_blobs, 0);
}

}  // namespace
}  // namespace kiln::cache
