#pragma once

// A Store maps SHA-256 digests to immutable blobs (the content-addressed store). Safe for
// concurrent use. Put stores bytes only when they hash to the digest; a read never returns
// bytes whose digest differs from the one asked for. A read from disk hashes what it read:
// a blob that no longer matches is deleted, counted as an integrity failure and reported as
// NOT_FOUND. Verified blobs (written, or read from disk) are kept in a MemoryTier; a read
// served from there checks the bytes against the fast checksum taken when they entered it,
// and a damaged copy is dropped and counted before the blob is read again from disk.
// A digest names a blob by its hash; a size_bytes of 0 matches any length, any other value
// must equal the blob's length.

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/memory_tier.h"
#include "kiln/v1/artifact.pb.h"
#include "proto/base/sync.h"

namespace kiln::cache {

class CacheDb;

class Store {
 public:
  // `after_write` runs after every write that stored something new (the cache's budget).
  Store(CacheDb* db, std::function<void()> after_write);
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  // Stores `bytes` under `digest`. Returns whether the blob was already present (then nothing
  // is written). INVALID_ARGUMENT for a malformed digest, a size that disagrees with the
  // bytes, or bytes that do not hash to the digest; RESOURCE_EXHAUSTED beyond the maximum
  // blob size, or as a DiskFullError (cache/errors.h) when the disk has no room. Nothing is
  // written on any error.
  absl::StatusOr<bool> Put(const v1::Digest& digest, absl::string_view bytes);

  // The verified bytes of a blob, shared with the memory tier (no copy). NOT_FOUND when
  // absent or dropped as corrupt; INVALID_ARGUMENT for a malformed digest; OUT_OF_RANGE,
  // without reading it, for a blob longer than `max_bytes`.
  absl::StatusOr<BlobBytes> Read(const v1::Digest& digest,
                                 int64_t max_bytes = std::numeric_limits<int64_t>::max());
  // Read, but only from memory: null (not an error) when the blob is not kept there, and
  // never any disk work, so an event loop may call it. A damaged copy is dropped and counted.
  absl::StatusOr<BlobBytes> ReadKept(const v1::Digest& digest,
                                     int64_t max_bytes = std::numeric_limits<int64_t>::max());
  // Read, as a string of one's own.
  absl::StatusOr<std::string> Get(const v1::Digest& digest,
                                  int64_t max_bytes = std::numeric_limits<int64_t>::max());

  const MemoryTier& memory() const { return memory_; }

  // Whether the store holds the blob, without reading (or verifying) it.
  absl::StatusOr<bool> Contains(const v1::Digest& digest);
  // The length of the blob with this raw 32-byte hash, or -1 when absent.
  absl::StatusOr<int64_t> StoredSize(absl::string_view raw_hash);

  // The digests of `digests` the store lacks, in order. INVALID_ARGUMENT (naming the index)
  // for a malformed one.
  absl::StatusOr<std::vector<v1::Digest>> FindMissing(const std::vector<v1::Digest>& digests);

  // Writes the access times gathered since the last call (Gets and repeated Puts record them
  // in memory, for eviction).
  absl::Status FlushAccessTimes();

  // Removes a blob by raw hash; the bytes freed (0 when it was absent). For eviction and
  // integrity failures; callers decide about references.
  absl::StatusOr<int64_t> Delete(absl::string_view raw_hash);

 private:
  // Writes and deletes of one blob are serialized by its stripe, so that the counters stay
  // exact when the same blob is written twice at once.
  struct Stripe {
    Mutex mu;
    // Deletes so far (counted under mu): a read from disk keeps its blob in memory only if no
    // delete of its stripe came between its read and its insert.
    std::atomic<uint64_t> deletes{0};
    Mutex pending_mu;
    absl::flat_hash_map<std::string, int64_t> pending ABSL_GUARDED_BY(pending_mu);
  };
  static constexpr int kStripes = 64;
  Stripe& StripeOf(absl::string_view raw_hash);
  void Touch(absl::string_view raw_hash, int64_t now_ms);
  void DropCorrupt(absl::string_view raw_hash, absl::string_view why);
  // The blob from the memory tier (null when not kept there); `raw` is the digest's hash.
  absl::StatusOr<BlobBytes> ReadFromMemory(const v1::Digest& digest, const std::string& raw,
                                           int64_t max_bytes);
  // Reads and verifies a blob from RocksDB; keeps it in memory unless a delete intervened.
  absl::StatusOr<BlobBytes> ReadFromDisk(const v1::Digest& digest, const std::string& raw);

  CacheDb* const db_;
  const std::function<void()> after_write_;
  std::array<Stripe, kStripes> stripes_;
  MemoryTier memory_;
};

}  // namespace kiln::cache
