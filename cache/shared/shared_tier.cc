#include "cache/shared/shared_tier.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "proto/base/digest.h"

namespace kiln::cache {
namespace {

constexpr absl::string_view kHeaderMagic = "kiln-blob-1";
constexpr size_t kHashHexLength = 64;

// "kiln-blob-1 <size> <chunks>"
std::string EncodeHeader(int64_t size, int64_t chunks) {
  return absl::StrCat(kHeaderMagic, " ", size, " ", chunks);
}

bool DecodeHeader(absl::string_view header, int64_t* size, int64_t* chunks) {
  std::vector<absl::string_view> parts = absl::StrSplit(header, ' ');
  return parts.size() == 3 && parts[0] == kHeaderMagic && absl::SimpleAtoi(parts[1], size) &&
         absl::SimpleAtoi(parts[2], chunks) && *size >= 0 && *chunks >= 0 && *chunks <= *size + 1;
}

SharedTier::Options WithValidChunks(SharedTier::Options options) {
  if (options.chunk_bytes < 1) options.chunk_bytes = SharedTier::Options{}.chunk_bytes;
  return options;
}

}  // namespace

SharedTier::SharedTier(std::unique_ptr<RedisCluster> redis, Options options)
    : redis_(std::move(redis)), options_(WithValidChunks(std::move(options))) {}

std::string SharedTier::BlobHeaderKey(absl::string_view hash) const {
  return absl::StrCat(options_.key_prefix, "b:{", hash, "}");
}

std::string SharedTier::BlobChunkKey(absl::string_view hash, int64_t chunk) const {
  return absl::StrCat(options_.key_prefix, "b:{", hash, "}:", chunk);
}

std::string SharedTier::ActionKey(absl::string_view compile_key) const {
  return absl::StrCat(options_.key_prefix, "a:", compile_key);
}

absl::Status SharedTier::Record(absl::Time start, absl::Status status) {
  operations_.fetch_add(1, std::memory_order_relaxed);
  latency_ns_.fetch_add(absl::ToInt64Nanoseconds(absl::Now() - start), std::memory_order_relaxed);
  const bool reached = status.ok() || absl::IsNotFound(status) || absl::IsInvalidArgument(status);
  if (!reached) errors_.fetch_add(1, std::memory_order_relaxed);
  MutexLock lock(&mu_);
  healthy_ = reached;
  if (!reached) last_error_ = std::string(status.message());
  return status;
}

void SharedTier::DropBlob(absl::string_view hash, int64_t chunks) {
  const std::string header = BlobHeaderKey(hash);
  std::vector<std::string> keys = {header};
  for (int64_t i = 0; i < chunks; ++i) keys.push_back(BlobChunkKey(hash, i));
  std::vector<absl::string_view> argv = {"DEL"};
  argv.insert(argv.end(), keys.begin(), keys.end());
  // Best effort: a failure leaves the bad copy for the next reader to find and drop.
  redis_->Command(header, argv).IgnoreError();
}

absl::StatusOr<std::string> SharedTier::GetBlob(const v1::Digest& digest) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  const absl::Time start = absl::Now();
  const std::string& hash = digest.hash();
  const std::string header_key = BlobHeaderKey(hash);
  absl::StatusOr<std::optional<std::string>> header = redis_->Get(header_key);
  if (!header.ok()) return Record(start, header.status());
  auto miss = [&](absl::string_view why) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Record(
        start, absl::NotFoundError(absl::StrCat("blob ", hash, " is not in the shared tier", why)));
  };
  auto corrupt = [&](int64_t chunks, absl::string_view why) {
    corrupt_.fetch_add(1, std::memory_order_relaxed);
    DropBlob(hash, chunks);
    return miss(absl::StrCat(" (dropped as corrupt: ", why, ")"));
  };
  if (!header->has_value()) return miss("");
  int64_t size = 0, chunks = 0;
  if (!DecodeHeader(**header, &size, &chunks)) return corrupt(0, "malformed header");
  std::string bytes;
  if (chunks > 0) {
    std::vector<std::string> keys;
    for (int64_t i = 0; i < chunks; ++i) keys.push_back(BlobChunkKey(hash, i));
    std::vector<absl::string_view> argv = {"MGET"};
    argv.insert(argv.end(), keys.begin(), keys.end());
    absl::StatusOr<RedisReply> r = redis_->Command(header_key, argv);
    if (!r.ok()) return Record(start, r.status());
    if (r->type != RedisReply::Type::kArray || static_cast<int64_t>(r->elements.size()) != chunks) {
      return corrupt(chunks, "MGET answered the wrong shape");
    }
    bytes.reserve(static_cast<size_t>(size));
    for (const RedisReply& chunk : r->elements) {
      // A chunk evicted by the cluster's memory policy: a miss, and the rest is useless.
      if (chunk.type == RedisReply::Type::kNil) {
        DropBlob(hash, chunks);
        return miss(" (partly evicted)");
      }
      bytes += chunk.str;
    }
  }
  if (static_cast<int64_t>(bytes.size()) != size) {
    return corrupt(chunks, absl::StrCat(bytes.size(), " bytes where the header says ", size));
  }
  if ((digest.size_bytes() != 0 && digest.size_bytes() != size) || Sha256Hex(bytes) != hash) {
    return corrupt(chunks, "bytes do not match the digest");
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(size, std::memory_order_relaxed);
  if (absl::Status s = Record(start, absl::OkStatus()); !s.ok()) return s;
  return bytes;
}

absl::Status SharedTier::PutBlob(const v1::Digest& digest, absl::string_view bytes) {
  if (absl::Status s = ValidateDigest(digest); !s.ok()) return s;
  if (digest.size_bytes() != 0 && digest.size_bytes() != static_cast<int64_t>(bytes.size())) {
    return absl::InvalidArgumentError(absl::StrCat("blob ", digest.hash(), ": digest says ",
                                                   digest.size_bytes(), " bytes, got ",
                                                   bytes.size()));
  }
  if (Sha256Hex(bytes) != digest.hash()) {
    return absl::InvalidArgumentError(
        absl::StrCat("blob ", digest.hash(), ": bytes do not hash to the digest"));
  }
  const absl::Time start = absl::Now();
  const std::string& hash = digest.hash();
  const int64_t size = static_cast<int64_t>(bytes.size());
  const int64_t chunks = (size + options_.chunk_bytes - 1) / options_.chunk_bytes;
  std::vector<std::string> keys;
  for (int64_t i = 0; i < chunks; ++i) keys.push_back(BlobChunkKey(hash, i));
  const std::string header_key = BlobHeaderKey(hash);
  const std::string header = EncodeHeader(size, chunks);
  // One MSET: chunks and header land together or not at all.
  std::vector<absl::string_view> argv = {"MSET"};
  for (int64_t i = 0; i < chunks; ++i) {
    argv.push_back(keys[i]);
    argv.push_back(bytes.substr(static_cast<size_t>(i * options_.chunk_bytes),
                                static_cast<size_t>(options_.chunk_bytes)));
  }
  argv.push_back(header_key);
  argv.push_back(header);
  absl::StatusOr<RedisReply> r = redis_->Command(header_key, argv);
  if (!r.ok()) return Record(start, r.status());
  puts_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(size, std::memory_order_relaxed);
  return Record(start, absl::OkStatus());
}

absl::StatusOr<std::string> SharedTier::GetAction(absl::string_view compile_key) {
  const absl::Time start = absl::Now();
  const std::string key = ActionKey(compile_key);
  absl::StatusOr<std::optional<std::string>> value = redis_->Get(key);
  if (!value.ok()) return Record(start, value.status());
  if (!value->has_value()) {
    misses_.fetch_add(1, std::memory_order_relaxed);
    return Record(start, absl::NotFoundError(
                             absl::StrCat("action ", compile_key, " is not in the shared tier")));
  }
  const std::string& record = **value;
  // The record is the SHA-256 (hex) of the entry's bytes, then the bytes.
  if (record.size() < kHashHexLength ||
      Sha256Hex(absl::string_view(record).substr(kHashHexLength)) !=
          absl::string_view(record).substr(0, kHashHexLength)) {
    corrupt_.fetch_add(1, std::memory_order_relaxed);
    misses_.fetch_add(1, std::memory_order_relaxed);
    redis_->Del(key).IgnoreError();
    return Record(start,
                  absl::NotFoundError(absl::StrCat(
                      "action ", compile_key, " is not in the shared tier (dropped as corrupt)")));
  }
  hits_.fetch_add(1, std::memory_order_relaxed);
  bytes_read_.fetch_add(static_cast<int64_t>(record.size() - kHashHexLength),
                        std::memory_order_relaxed);
  if (absl::Status s = Record(start, absl::OkStatus()); !s.ok()) return s;
  return record.substr(kHashHexLength);
}

absl::Status SharedTier::PutAction(absl::string_view compile_key, absl::string_view bytes) {
  const absl::Time start = absl::Now();
  absl::StatusOr<bool> r =
      redis_->Set(ActionKey(compile_key), absl::StrCat(Sha256Hex(bytes), bytes));
  if (!r.ok()) return Record(start, r.status());
  puts_.fetch_add(1, std::memory_order_relaxed);
  bytes_written_.fetch_add(static_cast<int64_t>(bytes.size()), std::memory_order_relaxed);
  return Record(start, absl::OkStatus());
}

SharedTier::Stats SharedTier::stats() const {
  Stats s;
  s.hits = hits_.load(std::memory_order_relaxed);
  s.misses = misses_.load(std::memory_order_relaxed);
  s.corrupt = corrupt_.load(std::memory_order_relaxed);
  s.errors = errors_.load(std::memory_order_relaxed);
  s.puts = puts_.load(std::memory_order_relaxed);
  s.bytes_read = bytes_read_.load(std::memory_order_relaxed);
  s.bytes_written = bytes_written_.load(std::memory_order_relaxed);
  s.operations = operations_.load(std::memory_order_relaxed);
  s.latency_total = absl::Nanoseconds(latency_ns_.load(std::memory_order_relaxed));
  MutexLock lock(&mu_);
  s.healthy = healthy_;
  s.last_error = last_error_;
  return s;
}

}  // namespace kiln::cache
