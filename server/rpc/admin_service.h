#pragma once

// AdminService implements kiln.v1.Admin. Explain derives the compile keys of two requests
// (graph and options each) and names the first difference between them; keys the server
// has derived are remembered (a bounded set, most recent kept) so that a later Explain
// can name them by key. GetServerStats reports the cache's statistics and what the server
// adds through its StatsFn; Evict drops one compile key's entry (NOT_FOUND when it is not
// cached) or evicts until the cache holds at most a byte target. Thread-safe.

#include <deque>
#include <functional>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "cache/cache.h"
#include "kiln/v1/admin.grpc.pb.h"
#include "kiln/v1/key.pb.h"
#include "proto/base/sync.h"
#include "server/rpc/auth.h"

namespace kiln::server {

class AdminService final : public v1::Admin::Service {
 public:
  // Fills the parts of ServerStats only the server knows (uptime, compiles, ...).
  using StatsFn = std::function<void(v1::ServerStats*)>;

  // `cache` and `authorizer` must outlive the service. Every RPC needs the admin role.
  AdminService(cache::Cache* cache, const Authorizer* authorizer, StatsFn stats);

  // How many key records Explain remembers for lookups by key.
  static constexpr size_t kRememberedKeys = 4096;

  grpc::Status GetServerStats(grpc::ServerContext* context, const v1::ServerStatsRequest* request,
                              v1::ServerStats* response) override;
  grpc::Status Explain(grpc::ServerContext* context, const v1::ExplainRequest* request,
                       v1::ExplainResponse* response) override;
  grpc::Status Evict(grpc::ServerContext* context, const v1::EvictRequest* request,
                     v1::EvictResponse* response) override;

 private:
  void Remember(const v1::KeyRecord& record) ABSL_LOCKS_EXCLUDED(mu_);
  // The record of a key: remembered here, or stored with the key's first variant.
  absl::StatusOr<v1::KeyRecord> RecordOf(const std::string& compile_key);

  cache::Cache* const cache_;
  const Authorizer* const authorizer_;
  const StatsFn stats_;

  Mutex mu_;
  absl::flat_hash_map<std::string, v1::KeyRecord> records_ ABSL_GUARDED_BY(mu_);
  std::deque<std::string> arrival_ ABSL_GUARDED_BY(mu_);  // oldest first
};

}  // namespace kiln::server
