#pragma once

// The meaning of the RESP commands kilnd answers: what PyTorch Inductor's Redis remote caches
// send (GET key, SET key value), what Redis clients send on connecting (AUTH, SELECT 0,
// CLIENT SETNAME/SETINFO, HELLO, which is refused so that they stay on RESP2), and PING,
// ECHO, INFO, EXISTS, QUIT. Anything else is answered with a RESP error.
//
// A RESP key is kept in the cache like a compile result: its value is a blob of the
// content-addressed store (digest = SHA-256 of the value) and the key maps to it through an
// action-cache entry under the compile key `resp:<SHA-256 hex of the RESP key>`, one variant
// without guards whose only artifact is the value. So the cache's byte budget evicts RESP
// values with everything else, its hit, miss and integrity counters count them, and a value
// is read back only when its bytes still hash to its digest: a corrupt one is a miss, never
// served. Values are immutable and never expire: SET replaces the key's value, SET options
// (EX, NX, ...) and DEL are refused.
//
// With a shared tier (kilnd --shared-cache), GET and EXISTS read a key the local cache lacks
// through from it (the action entry `resp:<SHA-256>` and its blob, verified, stored locally),
// unless the tier is down; SET queues the entry and its blob for write-through, as gRPC
// PutAction and Put do. Both run in a command's `work`, never on an event loop.
//
// With a token file every command but AUTH, PING, ECHO, HELLO and QUIT needs `AUTH TOKEN`
// (or `AUTH USER TOKEN`, the user ignored) first; GET, EXISTS and INFO need the read role,
// SET the compile role (server/rpc/auth.h). Thread-safe: called from several event loops.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/strings/string_view.h"
#include "cache/cache.h"
#include "server/observe/metrics.h"
#include "server/resp/resp_reply.h"
#include "server/rpc/auth.h"
#include "server/shared_cache.h"

namespace kiln::server {

// One connection's state.
struct RespSession {
  std::optional<Identity> identity;  // who AUTH proved the client is; none yet
};

// What to do with a command: answer `reply` at once, or run `work` where it may block (disk)
// and answer what it returns.
struct RespAction {
  RespReply reply;
  absl::AnyInvocable<RespReply() &&> work;
};

// The compile key that holds a RESP key's value.
std::string RespCompileKey(absl::string_view key);

class RespCommands {
 public:
  // `cache`, `authorizer` and `shared` (null: no shared tier) must outlive it.
  // kiln_resp_commands_total (by command and outcome) goes to `metrics` when not null.
  RespCommands(cache::Cache* cache, const Authorizer* authorizer, MetricsRegistry* metrics,
               SharedCache* shared = nullptr);
  ~RespCommands();

  // A fresh connection's session: without a token file it holds every role already.
  RespSession NewSession() const;

  // `args` is a command, its name first (never empty).
  RespAction Handle(RespSession& session, std::vector<std::string> args);

  // A connection closed on a protocol error: counted as command "protocol", outcome "error".
  void CountProtocolError();

 private:
  class Counts;
  RespReply Get(const std::string& key);
  // The value of `compile_key` in the local cache and the variant that names it; NOT_FOUND
  // when the entry or its blob is absent (evicted, or dropped as corrupt).
  absl::StatusOr<cache::BlobBytes> ReadLocal(const std::string& compile_key,
                                             v1::ActionVariant* variant);
  // Whether the shared tier had `compile_key` and it is now in the local cache.
  bool ReadThrough(const std::string& compile_key);
  RespReply Set(const std::string& key, const std::string& value);
  RespReply Exists(const std::vector<std::string>& keys);
  RespReply Info();

  cache::Cache* const cache_;
  const Authorizer* const authorizer_;
  SharedCache* const shared_;
  std::unique_ptr<Counts> counts_;
};

}  // namespace kiln::server
