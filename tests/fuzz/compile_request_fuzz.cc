// Fuzzes kilnd's Compile front door: arbitrary bytes parsed as a kiln.v1.CompileRequest and
// sent over gRPC to a kilnd in this process (tests/fuzz/fuzz_kilnd.h). Seeded with small
// real graphs wrapped in requests (corpus/compile_request), so mutations explore malformed
// graphs, options, job identities and guards near real ones. No request may crash kilnd,
// trip a sanitizer or get a code Compile does not document; a request that compiles is
// answered again from the cache, as a hit with the same bytes. Compiler faults (INTERNAL,
// which kilnd survives) are printed for a person to read.

#include <cstdint>
#include <cstdio>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "google/protobuf/stubs/logging.h"
#include "grpcpp/client_context.h"
#include "kiln/v1/artifact.pb.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "proto/base/digest.h"
#include "tests/fuzz/fuzz_kilnd.h"

namespace {

using kiln::fuzz::Check;
using kiln::fuzz::CheckDocumentedCode;
using kiln::fuzz::FuzzKilnd;
namespace v1 = kiln::v1;

constexpr const char* kTarget = "compile_request_fuzz";

grpc::Status Compile(v1::Compiler::Stub& stub, const v1::CompileRequest& request,
                     v1::CompileResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  return stub.Compile(&context, request, response);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  // Mutated strings that are not UTF-8 fail to parse, which protobuf would log every time.
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  v1::CompileRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  FuzzKilnd& kilnd = FuzzKilnd::Get();
  static const std::unique_ptr<v1::Compiler::Stub> stub = v1::Compiler::NewStub(kilnd.channel());

  v1::CompileResponse response;
  const grpc::Status status = Compile(*stub, request, &response);
  // INTERNAL is a compiler fault that kilnd survived; it is reported for a person to read.
  CheckDocumentedCode(status, kTarget,
                      {grpc::StatusCode::OK, grpc::StatusCode::INVALID_ARGUMENT,
                       grpc::StatusCode::FAILED_PRECONDITION, grpc::StatusCode::RESOURCE_EXHAUSTED,
                       grpc::StatusCode::DEADLINE_EXCEEDED, grpc::StatusCode::INTERNAL});
  if (status.error_code() == grpc::StatusCode::INTERNAL) {
    std::fprintf(stderr, "%s: compiler fault: %s\n", kTarget, status.error_message().c_str());
  }
  if (!status.ok()) {
    // A refused request must leave kilnd serving.
    if (status.error_code() == grpc::StatusCode::INTERNAL) kilnd.CheckServing();
    return 0;
  }
  Check(kiln::DigestOf(response.compiled_graph()).hash() == response.artifact_digest().hash(),
        kTarget, "the artifact digest names the artifact's bytes");
  v1::CompiledGraph compiled;
  Check(compiled.ParseFromString(response.compiled_graph()), kTarget,
        "the artifact is a CompiledGraph");
  Check(compiled.decision_digest() == response.decision_digest(), kTarget,
        "the response's decision digest is the artifact's");

  // The same request again is a hit with the same bytes (or, for an artifact the small
  // budget evicted at once, a compile that gives the same bytes).
  v1::CompileRequest again = request;
  again.set_force_compile(false);
  v1::CompileResponse second;
  const grpc::Status second_status = Compile(*stub, again, &second);
  Check(second_status.ok(), kTarget, "a request that compiled compiles again");
  Check(second.outcome() == v1::CACHE_OUTCOME_HIT || response.compiled_graph().size() > (1 << 20),
        kTarget, "the second answer is a hit");
  Check(second.compiled_graph() == response.compiled_graph(), kTarget,
        "a hit answers the bytes the compile stored");
  Check(second.compile_key() == response.compile_key(), kTarget, "the key is deterministic");
  return 0;
}
