#pragma once

// The `/cas/` convention over kilnd's content-addressed store, as an HttpHandler:
//   GET  /cas/<sha256 hex>   200 and the blob; 404 when absent (or dropped as corrupt)
//   HEAD /cas/<sha256 hex>   200 and its Content-Length; 404
//   PUT  /cas/<sha256 hex>   the body is the blob: 201 stored, 200 already present, 400 when
//                            the bytes do not hash to the name, 411 without a Content-Length,
//                            413 beyond the largest blob, 507 while the store's disk is full
//                            (the same PUT succeeds once space is freed)
// Other methods get 405, other paths 404, a malformed hash 400. Tokens work as for gRPC:
// `Authorization: Bearer TOKEN`, role `read` for GET and HEAD, `compile` for PUT (401, 403).
// A blob the store keeps in memory is answered at once; a read that misses memory and every
// PUT go to the pool, since they touch the disk.
// With a shared tier (kilnd --shared-cache), a GET or HEAD that misses the store reads the blob
// through from the tier on the pool (verified by digest, stored locally, then answered; a
// corrupt copy is a 404), unless the tier is down; a PUT that stores a new blob queues its
// write-through, as gRPC Cache.Put does. Thread-safe.

#include <cstdint>
#include <string>

#include "cache/store.h"
#include "server/http/http_parser.h"
#include "server/http/http_protocol.h"
#include "server/rpc/auth.h"
#include "server/shared_cache.h"

namespace kiln::server {

class CasHandler final : public HttpHandler {
 public:
  // `store`, `authorizer` and `shared` (null: no shared tier) must outlive the handler.
  CasHandler(cache::Store* store, const Authorizer* authorizer, int64_t max_blob_bytes,
             SharedCache* shared = nullptr);

  HttpAction OnHead(const HttpRequestHead& head) override;
  HttpAction OnBody(const HttpRequestHead& head, std::string body) override;

 private:
  // Whether the request's token holds `needed` (always, without a token file).
  absl::Status Allowed(const HttpRequestHead& head, Role needed) const;
  // The blob from the store, or read through from the shared tier when the store lacks it.
  // Blocks: on the pool only.
  absl::StatusOr<cache::BlobBytes> Read(const v1::Digest& digest);

  cache::Store* const store_;
  const Authorizer* const authorizer_;
  const int64_t max_blob_bytes_;
  SharedCache* const shared_;
};

}  // namespace kiln::server
