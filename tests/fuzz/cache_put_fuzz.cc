// Fuzzes kilnd's Cache.Put stream and Cache.PutWhole over gRPC, against a kilnd in this
// process (tests/fuzz/fuzz_kilnd.h). The input describes a stream, so that mutations reach
// both the accepting and the refusing paths (a random digest almost never names its bytes):
//
//   input   := head:u8 size_delta:i8 message*        (at most 64 messages)
//   message := flags:u8 length:u8 data[length]
//
// The blob is the messages' data concatenated. head bit 0: the first message declares a
// digest; bit 1: its hash is the blob's SHA-256 (else another blob's, or with bit 2 a
// malformed hash); its size is the blob's length plus size_delta; bit 3: one PutWhole of
// the whole blob instead of a stream. A later message whose flags bit 0 is set repeats the
// digest, changed in size when bit 1 is also set.
//
// kilnd must store exactly the streams that declare their blob truly and answer OK for
// them, the stored bytes must read back, and a refused stream must leave nothing under the
// digest it declared.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/client_context.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "proto/base/digest.h"
#include "tests/fuzz/fuzz_kilnd.h"

namespace {

using kiln::fuzz::Check;
using kiln::fuzz::CheckDocumentedCode;
using kiln::fuzz::FuzzKilnd;
namespace v1 = kiln::v1;

constexpr const char* kTarget = "cache_put_fuzz";
constexpr size_t kMaxMessages = 64;

struct Stream {
  bool whole = false;
  std::string blob;
  std::vector<v1::PutRequest> messages;
  bool truthful = true;    // every declared digest names the blob exactly
  bool valid_hash = true;  // the declared hash is well formed (FindMissing accepts it)
  v1::Digest declared;
};

Stream Decode(const uint8_t* data, size_t size) {
  Stream s;
  if (size < 2) {
    s.truthful = false;
    s.valid_hash = false;
    return s;
  }
  const uint8_t head = data[0];
  const int delta = static_cast<int8_t>(data[1]);
  struct Piece {
    uint8_t flags;
    std::string data;
  };
  std::vector<Piece> pieces;
  for (size_t at = 2; at + 2 <= size && pieces.size() < kMaxMessages;) {
    const uint8_t flags = data[at];
    const size_t length = std::min<size_t>(data[at + 1], size - at - 2);
    pieces.push_back({flags, std::string(reinterpret_cast<const char*>(data) + at + 2, length)});
    at += 2 + length;
  }
  for (const Piece& p : pieces) s.blob += p.data;

  s.whole = (head & 8) != 0;
  if (head & 2) {
    s.declared = kiln::DigestOf(s.blob);
  } else {
    s.declared = kiln::DigestOf(s.blob + "another blob");
    s.truthful = false;
    if (head & 4) {
      s.declared.set_hash(s.declared.hash().substr(0, 10));
      s.valid_hash = false;
    }
  }
  s.declared.set_size_bytes(static_cast<int64_t>(s.blob.size()) + delta);
  if (delta != 0) s.truthful = false;
  if (!(head & 1)) s.truthful = false;

  if (s.whole) {
    v1::PutRequest& m = s.messages.emplace_back();
    if (head & 1) *m.mutable_digest() = s.declared;
    m.set_data(s.blob);
    return s;
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    v1::PutRequest& m = s.messages.emplace_back();
    if (i == 0 ? (head & 1) != 0 : (pieces[i].flags & 1) != 0) {
      *m.mutable_digest() = s.declared;
      if (i > 0 && (pieces[i].flags & 2)) {
        m.mutable_digest()->set_size_bytes(s.declared.size_bytes() + 1);
        s.truthful = false;
      }
    }
    m.set_data(pieces[i].data);
  }
  if (s.messages.empty()) s.truthful = false;
  return s;
}

grpc::Status Send(v1::Cache::Stub& stub, const Stream& s, v1::PutResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  if (s.whole) return stub.PutWhole(&context, s.messages[0], response);
  std::unique_ptr<grpc::ClientWriter<v1::PutRequest>> writer = stub.Put(&context, response);
  for (const v1::PutRequest& m : s.messages) {
    if (!writer->Write(m)) break;  // kilnd answered early (a refusal); Finish says why
  }
  writer->WritesDone();
  return writer->Finish();
}

// Whether kilnd holds `digest` (only asked for well-formed digests).
bool Held(v1::Cache::Stub& stub, const v1::Digest& digest) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  v1::FindMissingRequest request;
  *request.add_digests() = digest;
  v1::FindMissingResponse response;
  const grpc::Status status = stub.FindMissing(&context, request, &response);
  Check(status.ok(), kTarget, "FindMissing answers a well-formed digest");
  return response.missing_size() == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const Stream s = Decode(data, size);
  FuzzKilnd& kilnd = FuzzKilnd::Get();
  static const std::unique_ptr<v1::Cache::Stub> stub = v1::Cache::NewStub(kilnd.channel());

  const bool checkable = s.valid_hash && s.declared.size_bytes() >= 0;
  const bool held_before = checkable && Held(*stub, s.declared);
  v1::PutResponse response;
  const grpc::Status status = Send(*stub, s, &response);
  CheckDocumentedCode(status, kTarget,
                      {grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT,
                       grpc::StatusCode::RESOURCE_EXHAUSTED});
  Check(status.ok() == s.truthful, kTarget, "kilnd stores exactly the truthful streams");
  if (status.ok()) {
    Check(response.digest().hash() == s.declared.hash(), kTarget, "Put answers its digest");
    Check(response.already_present() == held_before, kTarget,
          "already_present says whether the store held the blob");
    grpc::ClientContext context;
    v1::GetRequest get;
    *get.mutable_digest() = s.declared;
    v1::GetResponse read;
    const grpc::Status got = stub->GetWhole(&context, get, &read);
    Check(got.ok() && read.data() == s.blob, kTarget, "a stored blob reads back");
  } else if (checkable && !held_before) {
    Check(!Held(*stub, s.declared), kTarget, "a refused stream stores nothing");
  }
  return 0;
}
