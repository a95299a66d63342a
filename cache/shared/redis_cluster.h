#pragma once

// A RedisCluster is a client of one Redis Cluster, speaking RESP through hiredis. It learns
// the slot map from its seeds (CLUSTER SLOTS), sends each command to the master that serves
// its key's slot, follows MOVED (and relearns the map) and ASK (ASKING, then the command, on
// the named node once), and keeps one connection per node.
//
// Failures are statuses, never hangs: every connect and every command has a timeout; a node
// that cannot be reached is left alone for an exponentially growing backoff, during which
// commands for its slots fail at once. UNAVAILABLE means the cluster (or the node serving the
// key) cannot answer now and names the node; INVALID_ARGUMENT means a seed is malformed;
// FAILED_PRECONDITION means a seed is not a cluster node; INTERNAL carries any other error
// reply, with the node and the command.
//
// A command sent on a kept connection that turns out to have been closed (the node
// restarted) is sent once more on a fresh one, so it may run twice: GET, SET, DEL, MGET and
// MSET are safe to repeat; a SET NX repeated that way answers "not stored" for its own write.
//
// Creating a client contacts nobody: the map is learnt on first use, so a process can start
// while the cluster is down and find it when it comes back. Safe for concurrent use; commands
// to one node are serialized on its connection.

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/base/sync.h"

namespace kiln::cache {

struct RedisClusterOptions {
  std::vector<std::string> seeds;  // "host:port", at least one
  absl::Duration connect_timeout = absl::Milliseconds(500);
  absl::Duration command_timeout = absl::Seconds(2);
  // MOVED, ASK and TRYAGAIN answers followed for one command before it fails.
  int max_redirects = 5;
  // A node that could not be reached is not tried again for `min_backoff`, doubled at every
  // further failure up to `max_backoff`; a success resets it.
  absl::Duration min_backoff = absl::Milliseconds(50);
  absl::Duration max_backoff = absl::Seconds(5);
};

// "redis://host:port[,host:port...]" as --shared-cache takes it: the seeds, or
// INVALID_ARGUMENT naming what is wrong.
absl::StatusOr<std::vector<std::string>> ParseRedisClusterUrl(absl::string_view url);

// One RESP2 reply.
struct RedisReply {
  enum class Type { kNil, kString, kStatus, kInteger, kArray, kError };
  Type type = Type::kNil;
  std::string str;  // kString, kStatus, kError
  int64_t integer = 0;
  std::vector<RedisReply> elements;  // kArray
};

// The hash slot (0..16383) of `key`: CRC16 of the key, or of the part inside its first
// non-empty {hash tag}, modulo 16384.
uint16_t RedisKeySlot(absl::string_view key);

class RedisCluster {
 public:
  static constexpr int kSlots = 16384;

  // INVALID_ARGUMENT when there is no seed or one is not "host:port" with a port in 1..65535.
  static absl::StatusOr<std::unique_ptr<RedisCluster>> Create(RedisClusterOptions options);
  ~RedisCluster();
  RedisCluster(const RedisCluster&) = delete;
  RedisCluster& operator=(const RedisCluster&) = delete;

  // The value under `key`, nullopt when there is none.
  absl::StatusOr<std::optional<std::string>> Get(absl::string_view key);

  struct SetOptions {
    std::optional<absl::Duration> expire;  // PX, in whole milliseconds (at least 1)
    bool only_if_absent = false;           // NX
  };
  // Whether the value was stored: false only when `only_if_absent` and the key existed.
  absl::StatusOr<bool> Set(absl::string_view key, absl::string_view value,
                           const SetOptions& options);
  absl::StatusOr<bool> Set(absl::string_view key, absl::string_view value) {
    return Set(key, value, SetOptions{});
  }
  // Whether the key existed.
  absl::StatusOr<bool> Del(absl::string_view key);

  // Runs `argv` on the master serving `key`'s slot, redirections followed. Every key the
  // command names must hash to that slot (use a common {hash tag}). Error replies become
  // statuses as the class comment says; a kError reply is never returned.
  absl::StatusOr<RedisReply> Command(absl::string_view key,
                                     const std::vector<absl::string_view>& argv);

  // Learns the slot map again now, from the known masters first, then the seeds.
  absl::Status Refresh();

  // "host:port" of the master that serves `slot` in the map as last learnt; empty when none.
  std::string MasterForSlot(int slot);
  // The distinct masters of the map as last learnt, sorted.
  std::vector<std::string> Masters();

  struct Counters {
    int64_t moved = 0;
    int64_t asked = 0;
    int64_t refreshes = 0;
    int64_t connects = 0;
    int64_t connect_failures = 0;
  };
  Counters counters() const;

 private:
  class Node;
  explicit RedisCluster(RedisClusterOptions options);

  Node* NodeFor(const std::string& address) ABSL_LOCKS_EXCLUDED(mu_);
  absl::StatusOr<Node*> NodeForSlot(int slot) ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status RefreshFrom(Node* node);
  // After a node failed: the map may be stale (a failover), so learn it again, at most once
  // a second.
  void MaybeRefreshAfterFailure() ABSL_LOCKS_EXCLUDED(mu_);
  void SetSlot(int slot, Node* node) ABSL_LOCKS_EXCLUDED(mu_);

  const RedisClusterOptions options_;
  Mutex refresh_mu_;  // one refresh at a time
  mutable Mutex mu_;
  // Nodes live as long as the client, so slot entries and callers may hold plain pointers.
  absl::flat_hash_map<std::string, std::unique_ptr<Node>> nodes_ ABSL_GUARDED_BY(mu_);
  std::vector<Node*> slots_ ABSL_GUARDED_BY(mu_);
  bool have_map_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time last_refresh_ ABSL_GUARDED_BY(mu_) = absl::InfinitePast();

  std::atomic<int64_t> moved_{0};
  std::atomic<int64_t> asked_{0};
  std::atomic<int64_t> refreshes_{0};
  std::atomic<int64_t> connects_{0};
  std::atomic<int64_t> connect_failures_{0};
};

}  // namespace kiln::cache
