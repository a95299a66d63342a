#include "server/rpc/admin_service.h"

#include <memory>
#include <optional>

#include "absl/strings/str_cat.h"
#include "compiler/canon/compile_key.h"
#include "compiler/canon/explain.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "proto/rpc/grpc_status.h"

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

AdminService::AdminService(cache::Cache* cache, const Authorizer* authorizer, StatsFn stats)
    : cache_(cache), authorizer_(authorizer), stats_(std::move(stats)) {}

grpc::Status AdminService::GetServerStats(grpc::ServerContext* context,
                                          const v1::ServerStatsRequest*,
                                          v1::ServerStats* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kAdmin); !denied.ok())
    return denied;
  *response->mutable_cache() = cache::ToProto(cache_->Statistics());
  if (stats_) stats_(response);
  return grpc::Status::OK;
}

grpc::Status AdminService::Evict(grpc::ServerContext* context, const v1::EvictRequest* request,
                                 v1::EvictResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kAdmin); !denied.ok())
    return denied;
  const int64_t evictions_before = cache_->Statistics().evictions;
  switch (request->kind_case()) {
    case v1::EvictRequest::kCompileKey: {
      if (!IsSha256Hex(request->compile_key())) {
        return ToGrpcStatus(
            InvalidField("", "compile_key", "a compile key is 64 lowercase hex characters"));
      }
      absl::StatusOr<int64_t> freed = cache_->actions().Evict(request->compile_key());
      if (!freed.ok()) return ToGrpcStatus(freed.status());
      if (*freed == 0 && cache_->Statistics().evictions == evictions_before) {
        return grpc::Status(grpc::StatusCode::NOT_FOUND,
                            absl::StrCat("compile key ", request->compile_key(), " is not cached"));
      }
      response->set_evicted_bytes(*freed);
      break;
    }
    case v1::EvictRequest::kTargetBytes: {
      if (request->target_bytes() < 0) {
        return ToGrpcStatus(InvalidField("", "target_bytes", "must not be negative"));
      }
      absl::StatusOr<int64_t> freed = cache_->EvictDownTo(request->target_bytes());
      if (!freed.ok()) return ToGrpcStatus(freed.status());
      response->set_evicted_bytes(*freed);
      break;
    }
    default:
      return ToGrpcStatus(InvalidField("", "kind", "name a compile_key or a target_bytes"));
  }
  response->set_evicted_entries(cache_->Statistics().evictions - evictions_before);
  return grpc::Status::OK;
}

absl::StatusOr<v1::KeyRecord> AdminService::RecordOf(const std::string& compile_key) {
  {
    MutexLock lock(&mu_);
    auto it = records_.find(compile_key);
    if (it != records_.end()) return it->second;
  }
  // A compiled key keeps its record as the second blob of its variants.
  absl::StatusOr<v1::ActionEntry> entry = cache_->actions().Get(compile_key);
  if (entry.ok()) {
    for (const v1::ActionVariant& variant : entry->variants()) {
      if (variant.artifacts_size() < 2) continue;
      absl::StatusOr<std::string> bytes = cache_->store().Get(variant.artifacts(1));
      v1::KeyRecord record;
      if (bytes.ok() && record.ParseFromString(*bytes) && record.compile_key() == compile_key) {
        return record;
      }
    }
  }
  return absl::NotFoundError(
      absl::StrCat("compile key ", compile_key, " was never seen by this server"));
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

grpc::Status AdminService::Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                                   v1::ExplainResponse* response) {
  if (grpc::Status denied = authorizer_->Permit(*context, Role::kAdmin); !denied.ok())
    return denied;
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
        absl::StatusOr<v1::KeyRecord> record = RecordOf(source.compile_key());
        if (!record.ok()) return ToGrpcStatus(record.status());
        sides[i].record = *std::move(record);
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
