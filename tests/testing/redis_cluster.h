#pragma once

// A Redis Cluster on loopback for tests: N redis-server masters (Debian's redis-server 7, in
// cluster mode, no persistence) in a temporary folder, joined by `redis-cli --cluster create`
// with no replicas. Nodes can be killed and restarted on the same port with the same cluster
// configuration, so they rejoin owning the slots they had (and none of the data).

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {

class LocalRedisCluster {
 public:
  struct Options {
    int masters = 3;
    // How long a silent node takes to be judged failed (the cluster then answers CLUSTERDOWN
    // for every key, since it has no replicas).
    int node_timeout_ms = 1000;
  };
  // Starts the nodes, creates the cluster and waits until every node says cluster_state:ok.
  static absl::StatusOr<std::unique_ptr<LocalRedisCluster>> Start(Options options);
  static absl::StatusOr<std::unique_ptr<LocalRedisCluster>> Start() { return Start(Options{}); }
  ~LocalRedisCluster();

  int size() const { return static_cast<int>(ports_.size()); }
  int port(int node) const { return ports_[node]; }
  std::string address(int node) const;  // "127.0.0.1:port"
  std::vector<std::string> addresses() const;
  std::string url() const;  // "redis://127.0.0.1:p1,127.0.0.1:p2,..."
  // The index of the node listening on `address`, -1 if none.
  int IndexOf(const std::string& address) const;

  // SIGKILL, and waits for the process to go.
  absl::Status Kill(int node);
  // Sends `signal` to a running node (SIGSTOP/SIGCONT make a node that hangs).
  absl::Status Signal(int node, int signal);
  // Starts a killed node again and waits until it accepts connections.
  absl::Status Restart(int node);
  // Waits until every running node reports cluster_state:ok.
  absl::Status WaitHealthy(absl::Duration timeout);

  // Runs `redis-cli -p <port of node> args...` and returns what it printed; an error when it
  // fails or prints an error reply.
  absl::StatusOr<std::string> Cli(int node, const std::vector<std::string>& args);
  absl::StatusOr<std::string> NodeId(int node);

  // Moving one slot from node `from` to node `to` in the steps redis-cli's resharding takes,
  // so that tests can act between them: mark it importing on `to` and migrating on `from`;
  // move keys; hand the slot to `to` on every node.
  absl::Status BeginSlotMigration(int slot, int from, int to);
  absl::Status MigrateKey(const std::string& key, int from, int to);
  absl::Status FinishSlotMigration(int slot, int to);

 private:
  explicit LocalRedisCluster(Options options) : options_(options) {}
  absl::Status StartNode(int node);

  Options options_;
  TempDir dir_;
  std::vector<int> ports_;
  std::vector<std::unique_ptr<Subprocess>> servers_;
};

// A test with a fresh cluster of its own (default options) in cluster_.
class RedisClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<LocalRedisCluster>> cluster = LocalRedisCluster::Start();
    ASSERT_TRUE(cluster.ok()) << cluster.status();
    cluster_ = *std::move(cluster);
  }

  std::unique_ptr<LocalRedisCluster> cluster_;
};

}  // namespace kiln::testing
