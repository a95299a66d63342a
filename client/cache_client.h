#pragma once

// A CacheClient talks to kilnd's kiln.v1.Cache service: blobs by digest (in one unary call
// each way when they fit one message, else streamed in chunks) and the action cache. Thread-safe:
// calls may run concurrently on one client. Errors are the server's status codes (NOT_FOUND,
// INVALID_ARGUMENT, ...) or UNAVAILABLE / DEADLINE_EXCEEDED from the transport.

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/channel.h"
#include "kiln/v1/cache.grpc.pb.h"

namespace kiln::client {

struct CacheClientOptions {
  // Hash what Get received before returning it (the server has verified it already; this
  // guards the path between them).
  bool verify_reads = true;
  absl::Duration timeout = absl::Seconds(60);  // per call
};

// "HASH" or "HASH/SIZE" (size 0 when absent: any length). INVALID_ARGUMENT when malformed.
absl::StatusOr<v1::Digest> ParseDigest(absl::string_view text);
// "HASH/SIZE".
std::string FormatDigest(const v1::Digest& digest);

class CacheClient {
 public:
  CacheClient(std::shared_ptr<grpc::Channel> channel, ChannelOptions channel_options,
              CacheClientOptions options = {});
  static absl::StatusOr<std::unique_ptr<CacheClient>> Create(const ChannelOptions& channel_options,
                                                             CacheClientOptions options = {});

  struct PutResult {
    v1::Digest digest;
    bool already_present = false;
  };
  // Stores `bytes` under their digest (computed here).
  absl::StatusOr<PutResult> Put(absl::string_view bytes);
  // Stores `bytes` under a digest the caller already has.
  absl::StatusOr<PutResult> Put(const v1::Digest& digest, absl::string_view bytes);
  absl::StatusOr<std::string> Get(const v1::Digest& digest);
  absl::StatusOr<std::vector<v1::Digest>> FindMissing(const std::vector<v1::Digest>& digests);
  absl::StatusOr<v1::CacheStats> Stat();
  absl::StatusOr<v1::ActionEntry> GetAction(const std::string& compile_key);
  absl::Status PutAction(const std::string& compile_key, const v1::ActionVariant& variant);
  // Every entry `request` selects, in key order, following the pages.
  absl::StatusOr<std::vector<v1::ActionEntry>> ListActions(v1::ListActionsRequest request);

 private:
  void Prepare(grpc::ClientContext* context) const;
  absl::StatusOr<PutResult> PutWhole(const v1::Digest& digest, absl::string_view bytes);
  absl::StatusOr<PutResult> PutStream(const v1::Digest& digest, absl::string_view bytes);
  absl::StatusOr<std::string> GetWhole(const v1::Digest& digest);
  absl::StatusOr<std::string> GetStream(const v1::Digest& digest);

  std::unique_ptr<v1::Cache::Stub> stub_;
  // Cleared when the server turns out not to know PutWhole / GetWhole (one older than them).
  std::atomic<bool> put_whole_{true};
  std::atomic<bool> get_whole_{true};
  ChannelOptions channel_options_;
  CacheClientOptions options_;
};

}  // namespace kiln::client
