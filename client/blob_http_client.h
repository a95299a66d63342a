#pragma once

// A BlobHttpClient reads and writes blobs on kilnd's HTTP/1.1 blob endpoint (--blob-listen):
// GET, HEAD and PUT /cas/<sha256 hex> over one kept-alive connection, reconnecting when the
// server closed it. Not thread-safe: one client per thread (each holds one connection).
// Errors map the HTTP status back to the status codes the gRPC Cache service uses: 404
// NOT_FOUND, 400 INVALID_ARGUMENT, 413 and 507 (disk full) RESOURCE_EXHAUSTED, 401
// UNAUTHENTICATED, 403 PERMISSION_DENIED; UNAVAILABLE when the connection fails. The
// server's one-line reason is the message.

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kiln/v1/artifact.pb.h"

namespace kiln::client {

struct BlobHttpClientOptions {
  std::string address;  // "host:port" of --blob-listen
  std::string token;    // sent as `Authorization: Bearer TOKEN` when not empty
  // Hash what Get received before returning it (the server verified it; this guards the
  // path between them).
  bool verify_reads = true;
};

class BlobHttpClient {
 public:
  explicit BlobHttpClient(BlobHttpClientOptions options);
  ~BlobHttpClient();
  BlobHttpClient(const BlobHttpClient&) = delete;
  BlobHttpClient& operator=(const BlobHttpClient&) = delete;

  absl::StatusOr<std::string> Get(const v1::Digest& digest);
  // The blob's length, without its bytes.
  absl::StatusOr<int64_t> Head(const v1::Digest& digest);
  // Stores `bytes` under `digest`; whether the blob was already present.
  absl::StatusOr<bool> Put(const v1::Digest& digest, absl::string_view bytes);

 private:
  struct Response {
    int status = 0;
    int64_t content_length = -1;
    bool close = false;
  };
  // Sends one request and reads the response head; the body, if any, is read by the caller
  // into `body` (when not null) or discarded. Retries once on a fresh connection when a kept
  // connection turns out closed before any response byte arrived.
  absl::StatusOr<Response> Exchange(absl::string_view method, const v1::Digest& digest,
                                    absl::string_view payload, std::string* body);
  absl::StatusOr<Response> ExchangeOnce(absl::string_view method, const v1::Digest& digest,
                                        absl::string_view payload, std::string* body,
                                        bool* nothing_received);
  absl::Status Connect();
  void Disconnect();
  bool Fill();
  bool ReadExact(char* out, size_t n);

  BlobHttpClientOptions options_;
  int fd_ = -1;
  char buffer_[16384];
  size_t start_ = 0, end_ = 0;
};

}  // namespace kiln::client
