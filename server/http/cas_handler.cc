#include "server/http/cas_handler.h"

#include <optional>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "cache/errors.h"
#include "proto/base/digest.h"

namespace kiln::server {
namespace {

constexpr absl::string_view kPrefix = "/cas/";

// The digest a `/cas/<sha256 hex>` target names (its size unknown).
v1::Digest TargetDigest(const HttpRequestHead& head) {
  absl::string_view hash = head.target;
  absl::ConsumePrefix(&hash, kPrefix);
  v1::Digest digest;
  digest.set_hash(std::string(hash));
  return digest;
}

HttpReply BlobReply(absl::StatusOr<cache::BlobBytes> blob, bool head) {
  if (!blob.ok()) return HttpErrorFromStatus(blob.status());
  HttpReply reply;
  reply.bytes = *std::move(blob);
  reply.head_only = head;
  return reply;
}

}  // namespace

CasHandler::CasHandler(cache::Store* store, const Authorizer* authorizer, int64_t max_blob_bytes,
                       SharedCache* shared)
    : store_(store), authorizer_(authorizer), max_blob_bytes_(max_blob_bytes), shared_(shared) {}

HttpAction CasHandler::OnHead(const HttpRequestHead& head) {
  // An answer before the body is read closes the connection when a body was announced.
  const bool has_body = head.content_length > 0;
  const bool put = head.method == "PUT";
  if (!put && head.method != "GET" && head.method != "HEAD") {
    HttpReply reply = HttpError(
        405, absl::StrCat("method ", head.method, " is not one of GET, HEAD, PUT"), has_body);
    reply.extra_headers = "Allow: GET, HEAD, PUT\r\n";
    return HttpAction::Reply(std::move(reply));
  }
  if (!absl::StartsWith(head.target, kPrefix)) {
    return HttpAction::Reply(HttpError(
        404, absl::StrCat("no resource ", head.target, "; blobs are at /cas/<sha256 hex>"),
        has_body));
  }
  if (!put && has_body) {
    return HttpAction::Reply(HttpError(400, absl::StrCat(head.method, " carries no body"), true));
  }
  const v1::Digest digest = TargetDigest(head);
  if (absl::Status s = ValidateDigest(digest, "path"); !s.ok()) {
    return HttpAction::Reply(HttpError(400, std::string(s.message()), has_body));
  }
  if (absl::Status allowed = Allowed(head, put ? Role::kCompile : Role::kRead); !allowed.ok()) {
    HttpReply reply = HttpErrorFromStatus(allowed);
    reply.close = has_body;  // the body is not read
    return HttpAction::Reply(std::move(reply));
  }
  if (put) {
    if (head.content_length < 0) {
      return HttpAction::Reply(HttpError(411, "PUT needs a Content-Length", true));
    }
    if (head.content_length > max_blob_bytes_) {
      return HttpAction::Reply(HttpError(
          413,
          absl::StrCat("blob of ", head.content_length, " bytes exceeds the maximum blob size of ",
                       max_blob_bytes_, " bytes (--max-blob-bytes)"),
          true));
    }
    return HttpAction::ReadBody();
  }
  const bool head_only = head.method == "HEAD";
  absl::StatusOr<cache::BlobBytes> kept = store_->ReadKept(digest);
  if (!kept.ok() || *kept != nullptr) {
    return HttpAction::Reply(BlobReply(std::move(kept), head_only));
  }
  // Not in memory: the disk read (and a read through from the shared tier) runs on the pool.
  return HttpAction::Offload(
      [this, digest, head_only] { return BlobReply(Read(digest), head_only); });
}

HttpAction CasHandler::OnBody(const HttpRequestHead& head, std::string body) {
  return HttpAction::Offload([this, digest = TargetDigest(head), body = std::move(body)]() mutable {
    digest.set_size_bytes(static_cast<int64_t>(body.size()));
    absl::StatusOr<bool> present = store_->Put(digest, body);
    if (cache::IsDiskFull(present.status())) {
      // The server's condition, not the request's: the same PUT succeeds once space is freed.
      return HttpError(507, std::string(present.status().message()));
    }
    if (!present.ok()) return HttpErrorFromStatus(present.status());
    if (!*present && shared_ != nullptr) shared_->WriteBlob(digest);
    HttpReply reply;
    reply.status = *present ? 200 : 201;
    reply.text = *present ? "already present" : "stored";
    return reply;
  });
}

absl::StatusOr<cache::BlobBytes> CasHandler::Read(const v1::Digest& digest) {
  absl::StatusOr<cache::BlobBytes> blob = store_->Read(digest);
  if (absl::IsNotFound(blob.status()) && shared_ != nullptr && shared_->up() &&
      shared_->FetchBlob(digest)) {
    blob = store_->Read(digest);
  }
  return blob;
}

absl::Status CasHandler::Allowed(const HttpRequestHead& head, Role needed) const {
  if (!authorizer_->enabled()) return absl::OkStatus();
  const std::optional<std::string>& header = head.authorization;
  const absl::string_view value = header.has_value() ? absl::string_view(*header) : "";
  return authorizer_->CheckHeader(header.has_value() ? &value : nullptr, needed).status();
}

}  // namespace kiln::server
