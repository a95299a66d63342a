#include "client/cache_client.h"

#include <algorithm>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"

namespace kiln::client {
namespace {

// The contract's chunk size: blobs up to 4 MiB travel in one message.
constexpr size_t kChunkBytes = size_t{4} << 20;

}  // namespace

absl::StatusOr<v1::Digest> ParseDigest(absl::string_view text) {
  v1::Digest d;
  const size_t slash = text.find('/');
  d.set_hash(std::string(text.substr(0, slash)));
  if (slash != absl::string_view::npos) {
    int64_t size = 0;
    if (!absl::SimpleAtoi(text.substr(slash + 1), &size)) {
      return absl::InvalidArgumentError(
          absl::StrCat("digest \"", text, "\": expected HASH or HASH/SIZE"));
    }
    d.set_size_bytes(size);
  }
  if (absl::Status s = ValidateDigest(d); !s.ok()) return s;
  return d;
}

std::string FormatDigest(const v1::Digest& digest) {
  return absl::StrCat(digest.hash(), "/", digest.size_bytes());
}

CacheClient::CacheClient(std::shared_ptr<grpc::Channel> channel, ChannelOptions channel_options,
                         CacheClientOptions options)
    : stub_(v1::Cache::NewStub(std::move(channel))),
      channel_options_(std::move(channel_options)),
      options_(options) {}

absl::StatusOr<std::unique_ptr<CacheClient>> CacheClient::Create(
    const ChannelOptions& channel_options, CacheClientOptions options) {
  absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = CreateChannel(channel_options);
  if (!channel.ok()) return channel.status();
  return std::make_unique<CacheClient>(*std::move(channel), channel_options, options);
}

void CacheClient::Prepare(grpc::ClientContext* context) const {
  PrepareContext(channel_options_, context);
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.timeout));
}

absl::StatusOr<CacheClient::PutResult> CacheClient::Put(absl::string_view bytes) {
  return Put(DigestOf(bytes), bytes);
}

absl::StatusOr<CacheClient::PutResult> CacheClient::Put(const v1::Digest& digest,
                                                        absl::string_view bytes) {
  // As Get: one unary call when the blob fits one message and the server knows PutWhole.
  if (bytes.size() <= kChunkBytes && put_whole_.load(std::memory_order_relaxed)) {
    absl::StatusOr<PutResult> put = PutWhole(digest, bytes);
    if (absl::IsUnimplemented(put.status())) put_whole_.store(false, std::memory_order_relaxed);
    if (!absl::IsUnimplemented(put.status()) && !absl::IsOutOfRange(put.status())) return put;
  }
  return PutStream(digest, bytes);
}

absl::StatusOr<CacheClient::PutResult> CacheClient::PutWhole(const v1::Digest& digest,
                                                             absl::string_view bytes) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::PutRequest request;
  *request.mutable_digest() = digest;
  request.set_data(bytes.data(), bytes.size());
  v1::PutResponse response;
  grpc::Status status = stub_->PutWhole(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return PutResult{response.digest(), response.already_present()};
}

absl::StatusOr<CacheClient::PutResult> CacheClient::PutStream(const v1::Digest& digest,
                                                              absl::string_view bytes) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::PutResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer = stub_->Put(&context, &response);
  v1::PutRequest request;
  *request.mutable_digest() = digest;
  size_t offset = 0;
  bool closed = false;
  do {
    const size_t n = std::min(kChunkBytes, bytes.size() - offset);
    request.set_data(bytes.data() + offset, n);
    offset += n;
    // The last chunk also closes the stream, in one write. A failed write means the server
    // has answered already; Finish says how.
    if (offset == bytes.size()) {
      closed = true;
      if (!writer->Write(request, grpc::WriteOptions().set_last_message())) break;
    } else if (!writer->Write(request)) {
      break;
    }
    request.clear_digest();
  } while (offset < bytes.size());
  if (!closed) writer->WritesDone();
  grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return PutResult{response.digest(), response.already_present()};
}

absl::StatusOr<std::string> CacheClient::Get(const v1::Digest& digest) {
  absl::StatusOr<std::string> bytes;
  // A blob that fits in one message comes in a unary call; larger ones, those of unknown size
  // that turn out larger, and every blob from a server without GetWhole come in a stream.
  bool whole = digest.size_bytes() <= static_cast<int64_t>(kChunkBytes) &&
               get_whole_.load(std::memory_order_relaxed);
  if (whole) {
    bytes = GetWhole(digest);
    if (absl::IsUnimplemented(bytes.status())) get_whole_.store(false, std::memory_order_relaxed);
    whole = !absl::IsUnimplemented(bytes.status()) && !absl::IsOutOfRange(bytes.status());
  }
  if (!whole) bytes = GetStream(digest);
  if (!bytes.ok()) return bytes.status();
  if (options_.verify_reads && Sha256Hex(*bytes) != digest.hash()) {
    return absl::DataLossError(absl::StrCat("blob ", digest.hash(), " arrived damaged"));
  }
  return bytes;
}

absl::StatusOr<std::string> CacheClient::GetWhole(const v1::Digest& digest) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetRequest request;
  *request.mutable_digest() = digest;
  v1::GetResponse response;
  grpc::Status status = stub_->GetWhole(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::move(*response.mutable_data());
}

absl::StatusOr<std::string> CacheClient::GetStream(const v1::Digest& digest) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetRequest request;
  *request.mutable_digest() = digest;
  std::unique_ptr<grpc::ClientReader<v1::GetResponse>> reader = stub_->Get(&context, request);
  v1::GetResponse response;
  std::string bytes;
  bool first = true;
  while (reader->Read(&response)) {
    if (first && response.data().size() == static_cast<size_t>(response.digest().size_bytes())) {
      bytes = std::move(*response.mutable_data());  // the whole blob in one message
    } else {
      if (first)
        bytes.reserve(static_cast<size_t>(std::max<int64_t>(0, response.digest().size_bytes())));
      if (response.offset() != static_cast<int64_t>(bytes.size())) {
        context.TryCancel();
        reader->Finish().IgnoreError();
        return absl::DataLossError(absl::StrCat("chunk at offset ", response.offset(),
                                                " arrived after ", bytes.size(), " bytes"));
      }
      bytes.append(response.data());
    }
    first = false;
  }
  grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return bytes;
}

absl::StatusOr<std::vector<v1::Digest>> CacheClient::FindMissing(
    const std::vector<v1::Digest>& digests) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::FindMissingRequest request;
  for (const v1::Digest& d : digests) *request.add_digests() = d;
  v1::FindMissingResponse response;
  grpc::Status status = stub_->FindMissing(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return std::vector<v1::Digest>(response.missing().begin(), response.missing().end());
}

absl::StatusOr<v1::CacheStats> CacheClient::Stat() {
  grpc::ClientContext context;
  Prepare(&context);
  v1::CacheStats response;
  grpc::Status status = stub_->Stat(&context, v1::StatRequest(), &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::ActionEntry> CacheClient::GetAction(const std::string& compile_key) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::GetActionRequest request;
  request.set_compile_key(compile_key);
  v1::ActionEntry response;
  grpc::Status status = stub_->GetAction(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::Status CacheClient::PutAction(const std::string& compile_key,
                                    const v1::ActionVariant& variant) {
  grpc::ClientContext context;
  Prepare(&context);
  v1::PutActionRequest request;
  request.set_compile_key(compile_key);
  *request.mutable_variant() = variant;
  v1::PutActionResponse response;
  return FromGrpcStatus(stub_->PutAction(&context, request, &response));
}

absl::StatusOr<std::vector<v1::ActionEntry>> CacheClient::ListActions(
    v1::ListActionsRequest request) {
  std::vector<v1::ActionEntry> entries;
  while (true) {
    grpc::ClientContext context;
    Prepare(&context);
    v1::ListActionsResponse response;
    grpc::Status status = stub_->ListActions(&context, request, &response);
    if (!status.ok()) return FromGrpcStatus(status);
    for (v1::ActionEntry& e : *response.mutable_actions()) entries.push_back(std::move(e));
    if (response.next_start_after().empty()) return entries;
    request.set_start_after(response.next_start_after());
  }
}

}  // namespace kiln::client
