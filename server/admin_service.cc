#include "server/admin_service.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/canon/compile_key.h"
#include "compiler/canon/explain.h"
#include "proto/digest.h"
#include "proto/grpc_status.h"

namespace kiln::server {
namespace {

// One side of an explanation: a keyed graph, or a remembered record alone.
struct Side {
  std::optional<canon::KeyedGraph> keyed;
  v1::KeyRecord record;
};

// Prefixes a status's field violations with the side they came from ("a.", "b.").
absl::Status OnSide(absl::Status status, absl::string_view side) {
  auto detail = ErrorDetailOf(status);
  if (!detail.has_value()) return status;
  for (v1::FieldViolation& v : *detail->mutable_violations()) {
    v.set_field(absl::StrCat(side, ".request.", v.field()));
  }
  return WithErrorDetail(absl::Status(status.code(), absl::StrCat(side, ": ", status.message())),
                         *detail);
}

}  // namespace

grpc::Status AdminService::GetServerStats(grpc::ServerContext*, const v1::ServerStatsRequest*,
                                          v1::ServerStats*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED,
                      "GetServerStats is not wired to the cache yet");
}

grpc::Status AdminService::Evict(grpc::ServerContext*, const v1::EvictRequest*,
                                 v1::EvictResponse*) {
  return grpc::Status(grpc::StatusCode::UNIMPLEMENTED, "Evict is not wired to the cache yet");
}

void AdminService::Remember(const v1::KeyRecord& record) {
  MutexLock lock(&mu_);
  if (records_.contains(record.compile_key())) return;
  records_.emplace(record.compile_key(), record);
  arrival_.push_back(record.compile_key());
  while (arrival_.size() > kRememberedKeys) {
    records_.erase(arrival_.front());
    arrival_.pop_front();
  }
}

grpc::Status AdminService::Explain(grpc::ServerContext*, const v1::ExplainRequest* request,
                                   v1::ExplainResponse* response) {
  Side sides[2];
  const v1::KeySource* sources[2] = {&request->a(), &request->b()};
  const char* names[2] = {"a", "b"};
  for (int i = 0; i < 2; ++i) {
    const v1::KeySource& source = *sources[i];
    switch (source.kind_case()) {
      case v1::KeySource::kRequest: {
        absl::StatusOr<canon::KeyedGraph> keyed =
            canon::KeyGraph(source.request().graph(), source.request().options());
        if (!keyed.ok()) return ToGrpcStatus(OnSide(keyed.status(), names[i]));
        sides[i].record = keyed->record;
        sides[i].keyed = *std::move(keyed);
        Remember(sides[i].record);
        break;
      }
      case v1::KeySource::kCompileKey: {
        if (!IsSha256Hex(source.compile_key())) {
          return ToGrpcStatus(InvalidField("", absl::StrCat(names[i], ".compile_key"),
                                           "a compile key is 64 lowercase hex characters"));
        }
        MutexLock lock(&mu_);
        auto it = records_.find(source.compile_key());
        if (it == records_.end()) {
          return grpc::Status(
              grpc::StatusCode::NOT_FOUND,
              absl::StrCat("compile key ", source.compile_key(), " was never seen by this server"));
        }
        sides[i].record = it->second;
        break;
      }
      default:
        return ToGrpcStatus(InvalidField("", names[i], "a key source needs a key or a request"));
    }
  }
  if (sides[0].keyed.has_value() && sides[1].keyed.has_value()) {
    *response = canon::Explain(*sides[0].keyed, *sides[1].keyed);
  } else {
    *response = canon::Explain(sides[0].record, sides[1].record);
  }
  return grpc::Status::OK;
}

}  // namespace kiln::server
