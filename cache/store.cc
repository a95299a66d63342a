#include "cache/store.h"

#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/db.h"
#include "proto/base/digest.h"
#include "rocksdb/write_batch.h"

namespace kiln::cache {
namespace {

std::string ShortHash(absl::string_view raw_hash) { return ToHex(raw_hash).substr(0, 16); }

// A read of `digest` found a blob of `size` bytes that its size_bytes does not name.
absl::Status WrongSize(const v1::Digest& digest, int64_t size) {
  return absl::NotFoundError(
      absl::StrCat("blob ", digest.hash(), " has ", size, " bytes, not ", digest.size_bytes()));
}

// A read of `digest` limited to `max_bytes` met a blob of `size` bytes.
absl::Status TooLong(const v1::Digest& digest, int64_t size, int64_t max_bytes) {
  return absl::OutOfRangeError(
      absl::StrCat("blob ", digest.hash(), " has ", size, " bytes, more than ", max_bytes));
}

}  // namespace

Store::Store(CacheDb* db, std::function<void()> after_write)
    : db_(db), after_write_(std::move(after_write)), memory_(db->options().memory_bytes) {}

Store::Stripe& Store::StripeOf(absl::string_view raw_hash) {
  return stripes_[static_cast<uint8_t>(raw_hash[0]) % kStripes];
}

void Store::Touch(absl::string_view raw_hash, int64_t now_ms) {
  Stripe& stripe = StripeOf(raw_hash);
  MutexLock lock(&stripe.pending_mu);
  int64_t& t = stripe.pending[raw_hash];
  if (now_ms > t) t = now_ms;
}

absl::StatusOr<bool> Store::Put(const v1::Digest& digest, absl::string_view bytes) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  const int64_t size = static_cast<int64_t>(bytes.size());
  const int64_t max = db_->options().max_blob_bytes;
  if (digest.size_bytes() > max || size > max) {
    return absl::ResourceExhaustedError(
        absl::StrCat("blob of ", std::max(size, digest.size_bytes()),
                     " bytes exceeds the maximum blob size of ", max, " bytes"));
  }
  if (digest.size_bytes() != size) {
    return absl::InvalidArgumentError(absl::StrCat("digest.size_bytes is ", digest.size_bytes(),
                                                   " but ", size, " bytes were sent"));
  }
  const std::string raw = RawHash(digest.hash());
  const Sha256Bytes actual = Sha256(bytes);
  if (std::memcmp(actual.data(), raw.data(), actual.size()) != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the bytes hash to ",
        ToHex(absl::string_view(reinterpret_cast<const char*>(actual.data()), actual.size())),
        ", not to digest.hash ", digest.hash()));
  }
  const int64_t now = db_->NowMs();
  const std::string index_key = IndexKey(raw, EntryKind::kBlob);
  {
    Stripe& stripe = StripeOf(raw);
    MutexLock lock(&stripe.mu);
    std::string record;
    rocksdb::Status found =
        db_->db()->Get(rocksdb::ReadOptions(), db_->index(), index_key, &record);
    if (found.ok()) {
      Touch(raw, now);
      return true;
    }
    if (!found.IsNotFound()) return FromRocks(found, "reading the blob index");
    rocksdb::WriteBatch batch;
    batch.Put(db_->blobs(), raw, rocksdb::Slice(bytes.data(), bytes.size()));
    IndexRecord index;
    index.atime_ms = now;
    index.size = size;
    batch.Put(db_->index(), index_key, EncodeIndexRecord(index));
    if (absl::Status s = db_->Write(db_->write_options(), &batch, "writing a blob"); !s.ok()) {
      return s;
    }
    Counters& c = db_->counters();
    c.blobs.fetch_add(1);
    c.blob_bytes.fetch_add(size);
    c.blob_puts.fetch_add(1);
    // Under the stripe, so that a delete of this blob cannot slip in before it is kept.
    memory_.Insert(raw, std::make_shared<std::string>(bytes));
  }
  if (after_write_) after_write_();
  return false;
}

absl::StatusOr<std::string> Store::Get(const v1::Digest& digest, int64_t max_bytes) {
  absl::StatusOr<BlobBytes> blob = Read(digest, max_bytes);
  if (!blob.ok()) return blob.status();
  return **blob;
}

absl::StatusOr<BlobBytes> Store::ReadKept(const v1::Digest& digest, int64_t max_bytes) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  return ReadFromMemory(digest, RawHash(digest.hash()), max_bytes);
}

absl::StatusOr<BlobBytes> Store::ReadFromMemory(const v1::Digest& digest, const std::string& raw,
                                                int64_t max_bytes) {
  Counters& c = db_->counters();
  MemoryTier::Lookup kept = memory_.Find(raw);
  if (kept.found == MemoryTier::Found::kCorrupt) {
    // The stored blob may be intact: Read verifies it again from disk.
    c.integrity_failures.fetch_add(1);
    db_->Log("blob_integrity_failure",
             absl::StrCat("blob ", digest.hash(),
                          ": the copy in memory no longer matches its checksum; dropped from "
                          "memory, reading the stored blob"));
  }
  if (kept.found != MemoryTier::Found::kHit) return BlobBytes();
  const auto size = static_cast<int64_t>(kept.bytes->size());
  if (digest.size_bytes() != 0 && digest.size_bytes() != size) {
    c.blob_get_misses.fetch_add(1);
    return WrongSize(digest, size);
  }
  if (size > max_bytes) return TooLong(digest, size, max_bytes);
  Touch(raw, db_->NowMs());
  c.blob_gets.fetch_add(1);
  c.memory_hits.fetch_add(1);
  return std::move(kept.bytes);
}

absl::StatusOr<BlobBytes> Store::Read(const v1::Digest& digest, int64_t max_bytes) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  const std::string raw = RawHash(digest.hash());
  absl::StatusOr<BlobBytes> kept = ReadFromMemory(digest, raw, max_bytes);
  if (!kept.ok() || *kept != nullptr) return kept;
  if (max_bytes < std::numeric_limits<int64_t>::max()) {
    int64_t size = digest.size_bytes();
    if (size == 0) {
      absl::StatusOr<int64_t> stored = StoredSize(raw);
      if (!stored.ok()) return stored.status();
      size = *stored;
    }
    if (size > max_bytes) return TooLong(digest, size, max_bytes);
  }
  return ReadFromDisk(digest, raw);
}

absl::StatusOr<BlobBytes> Store::ReadFromDisk(const v1::Digest& digest, const std::string& raw) {
  Counters& c = db_->counters();
  Stripe& stripe = StripeOf(raw);
  const uint64_t deletes_before = stripe.deletes.load();
  std::string value;
  rocksdb::Status s = db_->db()->Get(db_->blob_read_options(), db_->blobs(), raw, &value);
  if (s.IsNotFound()) {
    c.blob_get_misses.fetch_add(1);
    return absl::NotFoundError(absl::StrCat("no blob ", digest.hash()));
  }
  if (s.IsCorruption()) {
    DropCorrupt(raw, s.ToString());
    return absl::NotFoundError(absl::StrCat("no blob ", digest.hash(), " (dropped as corrupt)"));
  }
  if (!s.ok()) return FromRocks(s, "reading a blob");
  const Sha256Bytes actual = Sha256(value);
  if (std::memcmp(actual.data(), raw.data(), actual.size()) != 0) {
    DropCorrupt(raw, "stored bytes do not match the digest");
    return absl::NotFoundError(absl::StrCat("no blob ", digest.hash(), " (dropped as corrupt)"));
  }
  if (digest.size_bytes() != 0 && digest.size_bytes() != static_cast<int64_t>(value.size())) {
    c.blob_get_misses.fetch_add(1);
    return WrongSize(digest, static_cast<int64_t>(value.size()));
  }
  BlobBytes blob = std::make_shared<std::string>(std::move(value));
  {
    MutexLock lock(&stripe.mu);
    if (stripe.deletes.load() == deletes_before) memory_.Insert(raw, blob);
  }
  Touch(raw, db_->NowMs());
  c.blob_gets.fetch_add(1);
  return blob;
}

void Store::DropCorrupt(absl::string_view raw_hash, absl::string_view why) {
  Counters& c = db_->counters();
  c.integrity_failures.fetch_add(1);
  c.blob_get_misses.fetch_add(1);
  absl::StatusOr<int64_t> freed = Delete(raw_hash);
  db_->Log(
      "blob_integrity_failure",
      absl::StrCat(
          "blob ", ToHex(raw_hash), ": ", why, "; dropped",
          freed.ok() ? "" : absl::StrCat(" (deleting failed: ", freed.status().message(), ")")));
}

absl::StatusOr<int64_t> Store::Delete(absl::string_view raw_hash) {
  const std::string index_key = IndexKey(raw_hash, EntryKind::kBlob);
  Stripe& stripe = StripeOf(raw_hash);
  MutexLock lock(&stripe.mu);
  stripe.deletes.fetch_add(1);
  memory_.Erase(raw_hash);
  std::string bytes;
  rocksdb::Status found = db_->db()->Get(rocksdb::ReadOptions(), db_->index(), index_key, &bytes);
  IndexRecord record;
  const bool indexed = found.ok() && DecodeIndexRecord(bytes, &record);
  if (!found.ok() && !found.IsNotFound()) return FromRocks(found, "reading the blob index");
  rocksdb::WriteBatch batch;
  batch.Delete(db_->blobs(), rocksdb::Slice(raw_hash.data(), raw_hash.size()));
  batch.Delete(db_->index(), index_key);
  if (absl::Status s = db_->Write(db_->write_options(), &batch,
                                  absl::StrCat("deleting blob ", ShortHash(raw_hash)));
      !s.ok()) {
    return s;
  }
  if (!indexed) return 0;
  Counters& c = db_->counters();
  c.blobs.fetch_sub(1);
  c.blob_bytes.fetch_sub(record.size);
  return record.size;
}

absl::StatusOr<int64_t> Store::StoredSize(absl::string_view raw_hash) {
  std::string bytes;
  rocksdb::Status s = db_->db()->Get(rocksdb::ReadOptions(), db_->index(),
                                     IndexKey(raw_hash, EntryKind::kBlob), &bytes);
  if (s.IsNotFound()) return -1;
  if (!s.ok()) return FromRocks(s, "reading the blob index");
  IndexRecord record;
  if (!DecodeIndexRecord(bytes, &record)) return -1;
  return record.size;
}

absl::StatusOr<bool> Store::Contains(const v1::Digest& digest) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  absl::StatusOr<int64_t> size = StoredSize(RawHash(digest.hash()));
  if (!size.ok()) return size.status();
  return *size >= 0 && (digest.size_bytes() == 0 || digest.size_bytes() == *size);
}

absl::StatusOr<std::vector<v1::Digest>> Store::FindMissing(const std::vector<v1::Digest>& digests) {
  for (size_t i = 0; i < digests.size(); ++i) {
    if (absl::Status s = ValidateDigest(digests[i], absl::StrCat("digests[", i, "]")); !s.ok()) {
      return s;
    }
  }
  std::vector<v1::Digest> missing;
  for (const v1::Digest& d : digests) {
    absl::StatusOr<bool> held = Contains(d);
    if (!held.ok()) return held.status();
    if (!*held) missing.push_back(d);
  }
  return missing;
}

absl::Status Store::FlushAccessTimes() {
  for (Stripe& stripe : stripes_) {
    MutexLock lock(&stripe.mu);
    absl::flat_hash_map<std::string, int64_t> pending;
    {
      MutexLock pending_lock(&stripe.pending_mu);
      pending.swap(stripe.pending);
    }
    if (pending.empty()) continue;
    rocksdb::WriteBatch batch;
    for (const auto& [raw, atime] : pending) {
      const std::string key = IndexKey(raw, EntryKind::kBlob);
      std::string bytes;
      IndexRecord record;
      // A blob deleted since it was read gets no record back: holding the stripe excludes
      // deletes between this check and the write.
      if (!db_->db()->Get(rocksdb::ReadOptions(), db_->index(), key, &bytes).ok() ||
          !DecodeIndexRecord(bytes, &record) || record.atime_ms >= atime) {
        continue;
      }
      record.atime_ms = atime;
      batch.Put(db_->index(), key, EncodeIndexRecord(record));
    }
    if (batch.Count() == 0) continue;
    if (absl::Status s =
            db_->Write(db_->bookkeeping_write_options(), &batch, "writing access times");
        !s.ok()) {
      return s;
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::cache
