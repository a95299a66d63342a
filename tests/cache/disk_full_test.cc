// A store whose disk fills up: writes that find no room fail with a DiskFullError
// (RESOURCE_EXHAUSTED), reads of what is stored go on, nothing acknowledged is lost, and
// writes resume in the same process once space returns, whether the filesystem grows or
// files on it are deleted. The disk is a small tmpfs; where mounting is not permitted the
// tests skip.

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "cache/cache.h"
#include "cache/errors.h"
#include "proto/base/digest.h"
#include "tests/testing/test_env.h"
#include "tests/testing/tmpfs.h"

namespace kiln::cache {
namespace {

using ::kiln::testing::PseudoRandomBytes;
using ::kiln::testing::Tmpfs;

constexpr size_t kBlobBytes = 200 << 10;
constexpr int64_t kMiB = 1 << 20;

CacheOptions Options(const std::string& path) {
  CacheOptions o;
  o.path = path;
  o.background_maintenance = false;
  o.block_cache_bytes = 4 << 20;
  o.memory_bytes = 0;  // every read goes to RocksDB
  return o;
}

// Blob `i` of a test, of `size` bytes.
struct BlobId {
  int i;
  size_t size = kBlobBytes;
};
std::string Blob(BlobId id) { return PseudoRandomBytes(id.size, 1000 + id.i); }
std::string Blob(int i) { return Blob(BlobId{i}); }

void ExpectDiskFull(const absl::Status& s) {
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_TRUE(IsDiskFull(s)) << s;
  EXPECT_NE(s.message().find("disk is full"), std::string::npos) << s;
}

// Every blob in `acked` reads back whole.
void ExpectAllReadable(Cache& cache, const std::vector<BlobId>& acked) {
  for (BlobId id : acked) {
    const std::string bytes = Blob(id);
    absl::StatusOr<std::string> got = cache.store().Get(DigestOf(bytes));
    ASSERT_TRUE(got.ok()) << "blob " << id.i << ": " << got.status();
    ASSERT_TRUE(*got == bytes) << "blob " << id.i << " came back with other bytes";
  }
}

// Fills the store on `fs` until a Put fails, checks what a full disk looks like, lets
// `free_space` make room, and checks that writes resume and nothing acknowledged was lost.
void FillThenRecover(Tmpfs& fs, const std::function<void()>& free_space) {
  const std::string path = fs.path() + "/store";
  absl::StatusOr<std::unique_ptr<Cache>> opened = Cache::Open(Options(path));
  ASSERT_TRUE(opened.ok()) << opened.status();
  std::unique_ptr<Cache> cache = *std::move(opened);

  // Large blobs until one is refused, then smaller ones until they are too: a write is
  // refused once it would leave less than a small reserve, so small writes fit for a while
  // after large ones no longer do.
  std::vector<BlobId> acked;
  int next = 0;
  for (size_t size : {kBlobBytes, size_t{4096}, size_t{16}}) {
    absl::Status failed;
    for (int n = 0; n < 1000 && failed.ok(); ++n) {
      const BlobId id{next++, size};
      const std::string bytes = Blob(id);
      absl::StatusOr<bool> put = cache->store().Put(DigestOf(bytes), bytes);
      if (put.ok()) {
        acked.push_back(id);
      } else {
        failed = put.status();
      }
    }
    ASSERT_FALSE(failed.ok()) << "the tmpfs never filled up with blobs of " << size << " bytes";
    ExpectDiskFull(failed);
  }
  ASSERT_GT(acked.size(), 3u);

  // Writes stay refused while the disk is full: blobs and action records alike.
  const std::string more = Blob(next++);
  ExpectDiskFull(cache->store().Put(DigestOf(more), more).status());
  v1::ActionVariant variant;
  *variant.add_artifacts() = DigestOf(Blob(acked.front()));
  variant.mutable_guards()->add_shape_env("Eq(s0, 1)");
  ExpectDiskFull(cache->actions().Put("key-while-full", variant));
  EXPECT_TRUE(absl::IsNotFound(cache->actions().Get("key-while-full").status()));
  ExpectAllReadable(*cache, acked);

  // Writers keep trying while the disk stays full, so resuming is attempted again and again
  // (each attempt may succeed when there is nothing to flush, and the next write fail anew).
  // Small blobs may still fit now and then; those acknowledged must last like the rest.
  std::vector<int> small_acked;
  for (int k = 0; k < 40; ++k) {
    const std::string small = PseudoRandomBytes(100, 5000 + k);
    absl::Status s = cache->store().Put(DigestOf(small), small).status();
    if (s.ok()) {
      small_acked.push_back(k);
    } else {
      ExpectDiskFull(s);
    }
    absl::SleepFor(absl::Milliseconds(25));
  }
  auto expect_small_readable = [&](Cache& c) {
    for (int k : small_acked) {
      const std::string small = PseudoRandomBytes(100, 5000 + k);
      absl::StatusOr<std::string> got = c.store().Get(DigestOf(small));
      ASSERT_TRUE(got.ok()) << "small blob " << k << ": " << got.status();
      EXPECT_TRUE(*got == small);
    }
  };
  expect_small_readable(*cache);

  free_space();

  // Writes come back without reopening. Resuming is retried at most every 100 ms, so the
  // first Put after space returns may still meet the last attempt's answer.
  const std::string after = Blob(next++);
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  absl::StatusOr<bool> put = cache->store().Put(DigestOf(after), after);
  while (!put.ok() && absl::Now() < deadline) {
    ExpectDiskFull(put.status());
    absl::SleepFor(absl::Milliseconds(20));
    put = cache->store().Put(DigestOf(after), after);
  }
  ASSERT_TRUE(put.ok()) << "writes did not resume: " << put.status();
  ASSERT_TRUE(cache->actions().Put("key-after", variant).ok());
  ASSERT_TRUE(cache->RunMaintenance().ok());
  ExpectAllReadable(*cache, acked);

  // And all of it survives a reopen.
  ASSERT_TRUE(cache->Close().ok());
  cache.reset();
  opened = Cache::Open(Options(path));
  ASSERT_TRUE(opened.ok()) << opened.status();
  cache = *std::move(opened);
  acked.push_back(BlobId{next - 1});
  ExpectAllReadable(*cache, acked);
  expect_small_readable(*cache);
  absl::StatusOr<v1::ActionEntry> entry = cache->actions().Get("key-after");
  ASSERT_TRUE(entry.ok()) << entry.status();
  ASSERT_EQ(entry->variants_size(), 1);
  EXPECT_EQ(entry->variants(0).artifacts(0).hash(), variant.artifacts(0).hash());
  EXPECT_TRUE(absl::IsNotFound(cache->actions().Get("key-while-full").status()));
}

TEST(DiskFullTest, WritesResumeWhenTheFilesystemGrows) {
  absl::StatusOr<Tmpfs> fs = Tmpfs::Mount(12 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  FillThenRecover(*fs, [&] { ASSERT_TRUE(fs->Resize(96 * kMiB).ok()); });
}

TEST(DiskFullTest, WritesResumeWhenFilesAreDeleted) {
  absl::StatusOr<Tmpfs> fs = Tmpfs::Mount(28 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  // Ballast larger than what the store will hold: deleting it leaves room to flush the
  // store's memtables, which resuming needs.
  const std::string ballast = fs->path() + "/ballast";
  {
    std::FILE* f = std::fopen(ballast.c_str(), "wb");
    ASSERT_NE(f, nullptr);
    const std::string chunk(kMiB, 'x');
    for (int i = 0; i < 16; ++i)
      ASSERT_EQ(std::fwrite(chunk.data(), 1, chunk.size(), f), chunk.size());
    ASSERT_EQ(std::fclose(f), 0);
  }
  FillThenRecover(*fs, [&] { ASSERT_EQ(std::remove(ballast.c_str()), 0); });
}

// The first write of a fresh store is larger than the disk, and later ones fit. Had the
// write reached RocksDB, its write-ahead log would have failed with nothing in the memtables
// to flush; resuming then opens no new log, and the next write aborted the process on an
// assertion of Debian's RocksDB. It is refused before, and the writes after it succeed.
TEST(DiskFullTest, AWriteLargerThanTheWholeDiskFailsAndLaterWritesSucceed) {
  absl::StatusOr<Tmpfs> fs = Tmpfs::Mount(4 * kMiB);
  if (!fs.ok()) GTEST_SKIP() << fs.status();
  const std::string path = fs->path() + "/store";
  absl::StatusOr<std::unique_ptr<Cache>> cache = Cache::Open(Options(path));
  ASSERT_TRUE(cache.ok()) << cache.status();
  const std::string huge = PseudoRandomBytes(6 * kMiB, 1);
  for (int i = 0; i < 5; ++i) {
    ExpectDiskFull((*cache)->store().Put(DigestOf(huge), huge).status());
    absl::SleepFor(absl::Milliseconds(120));  // past the spacing of attempts to resume
  }
  std::vector<BlobId> acked;
  for (int i = 0; i < 3; ++i) {
    const std::string bytes = Blob(i);
    absl::StatusOr<bool> put = (*cache)->store().Put(DigestOf(bytes), bytes);
    for (int tries = 0; !put.ok() && tries < 50; ++tries) {
      ExpectDiskFull(put.status());
      absl::SleepFor(absl::Milliseconds(20));
      put = (*cache)->store().Put(DigestOf(bytes), bytes);
    }
    ASSERT_TRUE(put.ok()) << put.status();
    acked.push_back(BlobId{i});
  }
  ExpectAllReadable(**cache, acked);
  ASSERT_TRUE((*cache)->Close().ok());
  cache = Cache::Open(Options(path));
  ASSERT_TRUE(cache.ok()) << cache.status();
  ExpectAllReadable(**cache, acked);
  EXPECT_TRUE(absl::IsNotFound((*cache)->store().Get(DigestOf(huge)).status()));
}

}  // namespace
}  // namespace kiln::cache
