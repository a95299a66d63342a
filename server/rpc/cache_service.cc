#include "server/rpc/cache_service.h"

#include <algorithm>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "grpcpp/impl/rpc_service_method.h"
#include "grpcpp/support/method_handler.h"
#include "grpcpp/support/slice.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"
#include "server/observe/json_log.h"

namespace kiln::server {
namespace {

// INVALID_ARGUMENT errors leave with the field at fault, as every Kiln error does.
grpc::Status Reply(const absl::Status& status, absl::string_view field) {
  if (absl::IsInvalidArgument(status) && !ErrorDetailOf(status).has_value()) {
    return ToGrpcStatus(InvalidField("", field, status.message()));
  }
  return ToGrpcStatus(status);
}

// Blobs up to this length are copied into the message; longer ones are lent to gRPC.
constexpr size_t kLendAbove = 16 << 10;

void ReleaseLent(void* blob) { delete static_cast<cache::BlobBytes*>(blob); }

// kiln.v1.GetResponse{digest: {hash, size_bytes}, data: blob} as protobuf's wire format: the
// fields before `data` serialized by protobuf, then data's tag and length, then the blob, lent
// to the transport (it holds a reference until the bytes are written) when long.
grpc::ByteBuffer EncodeGetResponse(const std::string& hash, cache::BlobBytes blob) {
  v1::GetResponse head;
  head.mutable_digest()->set_hash(hash);
  head.mutable_digest()->set_size_bytes(static_cast<int64_t>(blob->size()));
  std::string prefix = head.SerializeAsString();
  prefix.push_back(static_cast<char>((v1::GetResponse::kDataFieldNumber << 3) | 2));
  for (uint64_t n = blob->size(); true; n >>= 7) {
    if (n < 0x80) {
      prefix.push_back(static_cast<char>(n));
      break;
    }
    prefix.push_back(static_cast<char>((n & 0x7f) | 0x80));
  }
  if (blob->size() <= kLendAbove) {
    prefix.append(*blob);
    grpc::Slice whole(prefix);
    return grpc::ByteBuffer(&whole, 1);
  }
  char* data = const_cast<char*>(blob->data());  // gRPC only reads it
  const size_t size = blob->size();
  grpc::Slice slices[] = {
      grpc::Slice(prefix),
      grpc::Slice(data, size, ReleaseLent, new cache::BlobBytes(std::move(blob))),
  };
  return grpc::ByteBuffer(slices, 2);
}

}  // namespace

absl::StatusOr<std::unique_ptr<cache::Cache>> OpenServerCache(const ServerConfig& config,
                                                              const std::string& path) {
  cache::CacheOptions options;
  options.path = path;
  options.budget_bytes = config.cache_max_bytes;
  options.max_blob_bytes = config.max_blob_bytes;
  options.sync_writes = config.cache_sync_writes;
  options.memory_bytes = config.cache_memory_bytes;
  options.block_cache_bytes = config.cache_block_cache_bytes;
  options.refuse_corrupt_store = config.refuse_corrupt_store;
  options.log = [](absl::string_view event, absl::string_view detail) {
    LogWarning(std::string(event), {{"detail", std::string(detail)}});
  };
  absl::StatusOr<std::unique_ptr<cache::Cache>> cache = cache::Cache::Open(options);
  if (!cache.ok()) return cache.status();
  const cache::CacheStatistics s = (*cache)->Statistics();
  LogInfo("cache_opened", {{"path", path},
                           {"blobs", s.blobs},
                           {"blob_bytes", s.blob_bytes},
                           {"actions", s.actions},
                           {"budget_bytes", s.budget_bytes},
                           {"moved_aside", s.stores_moved_aside}});
  return cache;
}

std::string ToolchainScopedKey(absl::string_view fingerprint, absl::string_view key) {
  return absl::StrCat("toolchain:", Sha256Hex(absl::StrCat(fingerprint, "\n", key)));
}

CacheService::CacheService(cache::Cache* cache, const Authorizer* authorizer,
                           int64_t max_blob_bytes, int64_t chunk_bytes, SharedCache* shared,
                           ToolchainOf toolchain_of)
    : cache_(cache),
      shared_(shared),
      authorizer_(authorizer),
      max_blob_bytes_(max_blob_bytes),
      chunk_bytes_(chunk_bytes),
      toolchain_of_(std::move(toolchain_of)) {
  // GetWhole answers with a byte buffer: gRPC's sync API allows another response type only
  // for a handler that reads the request itself ("streamed unary"); on the wire it is the
  // same unary call.
  const int get_whole = v1::GetRequest::descriptor()
                            ->file()
                            ->FindServiceByName("Cache")
                            ->FindMethodByName("GetWhole")
                            ->index();
  MarkMethodStreamed(
      get_whole, new grpc::internal::StreamedUnaryHandler<v1::GetRequest, grpc::ByteBuffer>(
                     [this](grpc::ServerContext* context,
                            grpc::ServerUnaryStreamer<v1::GetRequest, grpc::ByteBuffer>* stream) {
                       v1::GetRequest request;
                       if (!stream->Read(&request)) {
                         return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                             "no kiln.v1.GetRequest could be read from the call");
                       }
                       grpc::ByteBuffer response;
                       grpc::Status status = GetWholeEncoded(context, &request, &response);
                       // Sent together with the status, in one batch.
                       if (status.ok())
                         stream->Write(response, grpc::WriteOptions().set_last_message());
                       return status;
                     }));
}

grpc::Status CacheService::Get(grpc::ServerContext* context, const v1::GetRequest* request,
                               grpc::ServerWriter<v1::GetResponse>* writer) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kRead); !denied.ok()) return denied;
  absl::StatusOr<cache::BlobBytes> blob =
      ReadBlob(request->digest(), std::numeric_limits<int64_t>::max());
  if (!blob.ok()) return Reply(blob.status(), "digest");
  const std::string& bytes = **blob;
  const auto size = static_cast<int64_t>(bytes.size());
  v1::GetResponse response;
  v1::Digest* digest = response.mutable_digest();
  digest->set_hash(request->digest().hash());
  digest->set_size_bytes(size);
  // The last message goes out with the status, in one write.
  if (size <= chunk_bytes_) {
    response.set_data(bytes);
    writer->WriteLast(response, grpc::WriteOptions());
    return grpc::Status::OK;
  }
  for (int64_t offset = 0; offset < size; offset += chunk_bytes_) {
    if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    response.set_offset(offset);
    response.mutable_data()->assign(bytes, offset, chunk_bytes_);
    if (offset + chunk_bytes_ >= size) {
      writer->WriteLast(response, grpc::WriteOptions());
    } else if (!writer->Write(response)) {
      return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
    }
    response.clear_digest();
  }
  return grpc::Status::OK;
}

grpc::Status CacheService::GetWholeEncoded(grpc::ServerContext* context,
                                           const v1::GetRequest* request,
                                           grpc::ByteBuffer* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kRead); !denied.ok()) return denied;
  absl::StatusOr<cache::BlobBytes> blob = ReadBlob(request->digest(), chunk_bytes_);
  if (!blob.ok()) return Reply(blob.status(), "digest");
  *response = EncodeGetResponse(request->digest().hash(), *std::move(blob));
  return grpc::Status::OK;
}

absl::StatusOr<cache::BlobBytes> CacheService::ReadBlob(const v1::Digest& digest,
                                                        int64_t max_bytes) {
  absl::StatusOr<cache::BlobBytes> blob = cache_->store().Read(digest, max_bytes);
  if (absl::IsNotFound(blob.status()) && shared_ != nullptr && shared_->FetchBlob(digest)) {
    blob = cache_->store().Read(digest, max_bytes);
  }
  return blob;
}

grpc::Status CacheService::CheckDeclared(const v1::PutRequest& first) const {
  if (!first.has_digest()) {
    return Reply(absl::InvalidArgumentError("the first message must carry the digest"), "digest");
  }
  if (absl::Status s = ValidateDigest(first.digest()); !s.ok()) return Reply(s, "digest");
  if (first.digest().size_bytes() > max_blob_bytes_) {
    return ToGrpcStatus(absl::ResourceExhaustedError(absl::StrCat(
        "blob of ", first.digest().size_bytes(), " bytes exceeds the maximum blob size of ",
        max_blob_bytes_, " bytes (--max-blob-bytes)")));
  }
  return grpc::Status::OK;
}

grpc::Status CacheService::Store(const v1::Digest& digest, absl::string_view bytes,
                                 v1::PutResponse* response) {
  if (static_cast<int64_t>(bytes.size()) != digest.size_bytes()) {
    return Reply(
        absl::InvalidArgumentError(absl::StrCat(
            "digest.size_bytes is ", digest.size_bytes(), " but ",
            static_cast<int64_t>(bytes.size()) > digest.size_bytes() ? "more"
                                                                     : absl::StrCat(bytes.size()),
            " bytes were sent")),
        "data");
  }
  absl::StatusOr<bool> present = cache_->store().Put(digest, bytes);
  if (!present.ok()) return Reply(present.status(), "data");
  if (!*present && shared_ != nullptr) shared_->WriteBlob(digest);
  *response->mutable_digest() = digest;
  response->set_already_present(*present);
  return grpc::Status::OK;
}

grpc::Status CacheService::Put(grpc::ServerContext* context,
                               grpc::ServerReader<v1::PutRequest>* reader,
                               v1::PutResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kCompile); !denied.ok())
    return denied;
  v1::PutRequest request;
  if (!reader->Read(&request)) {
    return Reply(absl::InvalidArgumentError("the stream carried no message"), "digest");
  }
  if (grpc::Status s = CheckDeclared(request); !s.ok()) return s;
  const v1::Digest digest = request.digest();
  std::string bytes = std::move(*request.mutable_data());
  // Reserve what the digest declares, but not more than a few chunks up front: a declared
  // size alone must not pin memory.
  bytes.reserve(static_cast<size_t>(std::min(digest.size_bytes(), 4 * chunk_bytes_)));
  // Stop reading as soon as the sender exceeds what it declared: memory stays bounded by
  // the declared size, itself bounded by the maximum blob size.
  while (static_cast<int64_t>(bytes.size()) <= digest.size_bytes() && reader->Read(&request)) {
    if (request.has_digest() && (request.digest().hash() != digest.hash() ||
                                 request.digest().size_bytes() != digest.size_bytes())) {
      return Reply(absl::InvalidArgumentError("a later message names a different digest"),
                   "digest");
    }
    bytes.append(request.data());
  }
  if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
  return Store(digest, bytes, response);
}

grpc::Status CacheService::PutWhole(grpc::ServerContext* context, const v1::PutRequest* request,
                                    v1::PutResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kCompile); !denied.ok())
    return denied;
  if (grpc::Status s = CheckDeclared(*request); !s.ok()) return s;
  if (static_cast<int64_t>(request->data().size()) > chunk_bytes_) {
    return ToGrpcStatus(absl::OutOfRangeError(
        absl::StrCat("a blob of ", request->data().size(), " bytes is more than one message of ",
                     chunk_bytes_, "; send it in chunks with Put")));
  }
  return Store(request->digest(), request->data(), response);
}

grpc::Status CacheService::FindMissing(grpc::ServerContext* context,
                                       const v1::FindMissingRequest* request,
                                       v1::FindMissingResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kRead); !denied.ok()) return denied;
  std::vector<v1::Digest> digests(request->digests().begin(), request->digests().end());
  absl::StatusOr<std::vector<v1::Digest>> missing = cache_->store().FindMissing(digests);
  if (!missing.ok()) return Reply(missing.status(), "digests");
  for (v1::Digest& d : *missing) *response->add_missing() = std::move(d);
  return grpc::Status::OK;
}

grpc::Status CacheService::Stat(grpc::ServerContext* context, const v1::StatRequest* request,
                                v1::CacheStats* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kRead); !denied.ok()) return denied;
  *response = cache::ToProto(cache_->Statistics());
  return grpc::Status::OK;
}

grpc::Status CacheService::GetAction(grpc::ServerContext* context,
                                     const v1::GetActionRequest* request,
                                     v1::ActionEntry* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kRead); !denied.ok()) return denied;
  absl::StatusOr<std::string> key = ActionKey(request->compile_key(), request->toolchain_target());
  if (!key.ok()) return ToGrpcStatus(key.status());
  // The caller evaluates the guards; for the cache, a key with a complete variant is a hit.
  absl::StatusOr<v1::ActionEntry> entry = cache_->actions().Get(*key);
  if (absl::IsNotFound(entry.status()) && shared_ != nullptr && shared_->FetchAction(*key)) {
    entry = cache_->actions().Get(*key);
  }
  if (absl::IsNotFound(entry.status())) cache_->actions().RecordMiss();
  if (!entry.ok()) return Reply(entry.status(), "compile_key");
  cache_->actions().RecordHit(*key);
  *response = *std::move(entry);
  return grpc::Status::OK;
}

grpc::Status CacheService::PutAction(grpc::ServerContext* context,
                                     const v1::PutActionRequest* request,
                                     v1::PutActionResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kCompile); !denied.ok())
    return denied;
  absl::StatusOr<std::string> key = ActionKey(request->compile_key(), request->toolchain_target());
  if (!key.ok()) return ToGrpcStatus(key.status());
  absl::Status stored = cache_->actions().Put(*key, request->variant());
  if (stored.ok() && shared_ != nullptr) shared_->WriteAction(*key);
  return Reply(stored, "variant");
}

absl::StatusOr<std::string> CacheService::ActionKey(const std::string& compile_key,
                                                    const std::string& toolchain_target) const {
  if (compile_key.empty()) return InvalidField("", "compile_key", "must not be empty");
  if (toolchain_target.empty()) return compile_key;
  if (!toolchain_of_) {
    return InvalidField("", "toolchain_target", "this server scopes no keys to a toolchain");
  }
  absl::StatusOr<std::string> fingerprint = toolchain_of_(toolchain_target);
  if (!fingerprint.ok()) {
    return InvalidField("", "toolchain_target", fingerprint.status().message());
  }
  return ToolchainScopedKey(*fingerprint, compile_key);
}

grpc::Status CacheService::ListActions(grpc::ServerContext* context,
                                       const v1::ListActionsRequest* request,
                                       v1::ListActionsResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kRead); !denied.ok()) return denied;
  // A page also ends at about 4 MiB (cache::ActionQuery::max_bytes): one message holds it.
  constexpr int kDefaultMaxActions = 1000;
  constexpr int kMaxActions = 10000;
  if (request->max_actions() < 0 || request->max_actions() > kMaxActions) {
    return ToGrpcStatus(
        InvalidField("", "max_actions", absl::StrCat("must be within [0, ", kMaxActions, "]")));
  }
  cache::ActionQuery query;
  query.job_id = request->job_id();
  query.since_unix_ms = request->since_unix_ms();
  query.compile_keys.assign(request->compile_keys().begin(), request->compile_keys().end());
  query.start_after = request->start_after();
  query.max_actions = request->max_actions() == 0 ? kDefaultMaxActions : request->max_actions();
  absl::StatusOr<cache::ActionPage> page = cache_->actions().List(query);
  if (!page.ok()) return Reply(page.status(), "compile_keys");
  for (v1::ActionEntry& e : page->actions) *response->add_actions() = std::move(e);
  response->set_next_start_after(page->next_start_after);
  return grpc::Status::OK;
}

}  // namespace kiln::server
