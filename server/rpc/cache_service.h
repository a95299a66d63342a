#pragma once

// kiln.v1.Cache over gRPC: blobs (one message each way up to 4 MiB, unary or streamed; in chunks
// above), FindMissing, Stat and the action cache, with the status codes cache.proto documents.
// A synchronous service: every call runs on a thread of gRPC's sync-server pool, which exists
// for blocking handlers and grows with the load, so disk work never runs on gRPC's polling or
// callback threads. GetWhole answers with a hand-encoded kiln.v1.GetResponse whose data is
// the store's own buffer, lent to gRPC's transport: a blob served from memory is not copied
// before the kernel's socket write.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "cache/cache.h"
#include "grpcpp/support/byte_buffer.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "server/config.h"
#include "server/rpc/auth.h"
#include "server/shared_cache.h"

namespace kiln::server {

// Opens the cache under `path` as `config` says, logging what the cache reports (a corrupt
// store moved aside, integrity failures).
absl::StatusOr<std::unique_ptr<cache::Cache>> OpenServerCache(const ServerConfig& config,
                                                              const std::string& path);

// The toolchain fingerprint of the server's code generator for a target (canon's
// ToolchainFingerprint), or INVALID_ARGUMENT for a target it has no backend for.
using ToolchainOf = std::function<absl::StatusOr<std::string>(absl::string_view target)>;

// The key a client's action key is stored under when the request names a toolchain target:
// "toolchain:" and the SHA-256 of the fingerprint and the key, so the same client key under
// another toolchain is another entry.
std::string ToolchainScopedKey(absl::string_view fingerprint, absl::string_view key);

class CacheService final : public v1::Cache::Service {
 public:
  // `cache` must outlive the service, and `shared` (the shared cache tier, null when none is
  // configured) too. Blobs larger than `chunk_bytes` are streamed in chunks. Reads need the
  // `read` role, writes `compile` (see auth.h). A read the local cache misses asks the shared
  // tier; writes go through to it in the background. `toolchain_of` scopes the action keys of
  // requests that name a toolchain target; without it, such requests are refused.
  CacheService(cache::Cache* cache, const Authorizer* authorizer, int64_t max_blob_bytes,
               int64_t chunk_bytes, SharedCache* shared = nullptr, ToolchainOf toolchain_of = {});

  grpc::Status Get(grpc::ServerContext* context, const v1::GetRequest* request,
                   grpc::ServerWriter<v1::GetResponse>* writer) override;
  // Cache.GetWhole; `response` is a serialized kiln.v1.GetResponse.
  grpc::Status GetWholeEncoded(grpc::ServerContext* context, const v1::GetRequest* request,
                               grpc::ByteBuffer* response);
  grpc::Status Put(grpc::ServerContext* context, grpc::ServerReader<v1::PutRequest>* reader,
                   v1::PutResponse* response) override;
  grpc::Status PutWhole(grpc::ServerContext* context, const v1::PutRequest* request,
                        v1::PutResponse* response) override;
  grpc::Status FindMissing(grpc::ServerContext* context, const v1::FindMissingRequest* request,
                           v1::FindMissingResponse* response) override;
  grpc::Status Stat(grpc::ServerContext* context, const v1::StatRequest* request,
                    v1::CacheStats* response) override;
  grpc::Status GetAction(grpc::ServerContext* context, const v1::GetActionRequest* request,
                         v1::ActionEntry* response) override;
  grpc::Status PutAction(grpc::ServerContext* context, const v1::PutActionRequest* request,
                         v1::PutActionResponse* response) override;
  grpc::Status ListActions(grpc::ServerContext* context, const v1::ListActionsRequest* request,
                           v1::ListActionsResponse* response) override;

 private:
  // A blob from the local store, or, on a local miss, from the shared tier.
  absl::StatusOr<cache::BlobBytes> ReadBlob(const v1::Digest& digest, int64_t max_bytes);
  // The checks a Put's first (or only) message passes before anything is read or stored.
  grpc::Status CheckDeclared(const v1::PutRequest& first) const;
  // Stores what a Put received, once the sizes agree.
  grpc::Status Store(const v1::Digest& digest, absl::string_view bytes, v1::PutResponse* response);
  // The key an action request names: its compile key, scoped to the toolchain of its target
  // when it names one.
  absl::StatusOr<std::string> ActionKey(const std::string& compile_key,
                                        const std::string& toolchain_target) const;

  cache::Cache* const cache_;
  SharedCache* const shared_;
  const Authorizer* const authorizer_;
  const int64_t max_blob_bytes_;
  const int64_t chunk_bytes_;
  const ToolchainOf toolchain_of_;
};

}  // namespace kiln::server
