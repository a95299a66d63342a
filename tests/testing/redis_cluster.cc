#include "tests/testing/redis_cluster.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "tests/testing/loopback.h"

namespace kiln::testing {
namespace {

constexpr char kRedisServer[] = "/usr/bin/redis-server";
constexpr char kRedisCli[] = "/usr/bin/redis-cli";
// Redis Cluster talks between nodes on the client port + 10000.
constexpr int kBusOffset = 10000;

bool PortFree(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

// A port whose bus port is free too, below the ephemeral range so neither is taken by an
// outgoing connection meanwhile.
int FreeClusterPort(std::mt19937& rng, const std::vector<int>& taken) {
  std::uniform_int_distribution<int> pick(20000, 29999);
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int port = pick(rng);
    if (std::find(taken.begin(), taken.end(), port) != taken.end()) continue;
    if (PortFree(port) && PortFree(port + kBusOffset)) return port;
  }
  return -1;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalRedisCluster>> LocalRedisCluster::Start(Options options) {
  if (access(kRedisServer, X_OK) != 0 || access(kRedisCli, X_OK) != 0) {
    return absl::FailedPreconditionError(
        "redis-server and redis-cli are needed (Debian's redis-server and redis-tools)");
  }
  std::unique_ptr<LocalRedisCluster> c(new LocalRedisCluster(options));
  std::mt19937 rng(static_cast<uint32_t>(getpid() ^ absl::ToUnixNanos(absl::Now())));
  for (int i = 0; i < options.masters; ++i) {
    c->servers_.emplace_back();
    std::filesystem::create_directories(absl::StrCat(c->dir_.path(), "/node", i));
    absl::Status started;
    // A port found free may be taken before redis-server binds it: try another.
    for (int attempt = 0; attempt < 5; ++attempt) {
      const int port = FreeClusterPort(rng, c->ports_);
      if (port < 0) return absl::UnavailableError("no free port pair for a redis node");
      if (static_cast<int>(c->ports_.size()) <= i) c->ports_.push_back(port);
      c->ports_[i] = port;
      started = c->StartNode(i);
      if (started.ok()) break;
    }
    if (!started.ok()) return started;
  }
  std::vector<std::string> create = {kRedisCli, "--cluster", "create"};
  for (int i = 0; i < c->size(); ++i) create.push_back(c->address(i));
  create.insert(create.end(), {"--cluster-replicas", "0", "--cluster-yes"});
  absl::StatusOr<RunResult> r = Run(create, absl::Seconds(60));
  if (!r.ok()) return r.status();
  if (r->exit_code != 0 || !absl::StrContains(r->out, "All 16384 slots covered")) {
    return absl::InternalError(absl::StrCat("redis-cli --cluster create failed (exit ",
                                            r->exit_code, "): ", r->out, r->err));
  }
  if (absl::Status s = c->WaitHealthy(absl::Seconds(30)); !s.ok()) return s;
  return c;
}

LocalRedisCluster::~LocalRedisCluster() {
  for (std::unique_ptr<Subprocess>& s : servers_) {
    if (s == nullptr) continue;
    s->Signal(SIGKILL);
    s->Wait(absl::Seconds(10));
  }
}

absl::Status LocalRedisCluster::StartNode(int node) {
  const std::string dir = absl::StrCat(dir_.path(), "/node", node);
  absl::StatusOr<Subprocess> p = Subprocess::Start({
      kRedisServer,
      "--bind",
      "127.0.0.1",
      "--port",
      absl::StrCat(ports_[node]),
      "--dir",
      dir,
      "--cluster-enabled",
      "yes",
      "--cluster-config-file",
      "nodes.conf",
      "--cluster-node-timeout",
      absl::StrCat(options_.node_timeout_ms),
      "--appendonly",
      "no",
      "--save",
      "",
      "--daemonize",
      "no",
      "--loglevel",
      "warning",
  });
  if (!p.ok()) return p.status();
  auto server = std::make_unique<Subprocess>(std::move(*p));
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  while (true) {
    const int fd = ConnectLoopback(ports_[node]);
    if (fd >= 0) {
      close(fd);
      break;
    }
    if (std::optional<int> code = server->Wait(absl::ZeroDuration()); code.has_value()) {
      return absl::UnavailableError(absl::StrCat("redis-server on port ", ports_[node],
                                                 " exited with ", *code, ": ", server->Stdout(),
                                                 server->Stderr()));
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("redis-server on port ", ports_[node], " did not start listening"));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  // What listens may be another test's redis-server, which took the port between the check
  // and ours binding it (ours then exits): only a server that reports our process id is ours.
  absl::StatusOr<RunResult> info =
      Run({kRedisCli, "-h", "127.0.0.1", "-p", absl::StrCat(ports_[node]), "INFO", "server"},
          absl::Seconds(10));
  if (!info.ok()) return info.status();
  const std::string ours = absl::StrCat("process_id:", server->pid());
  bool found = false;
  for (absl::string_view line : absl::StrSplit(info->out, '\n')) {
    found |= absl::StripSuffix(line, "\r") == ours;
  }
  if (!found) {
    server->Signal(SIGKILL);
    server->Wait(absl::Seconds(10));
    return absl::UnavailableError(
        absl::StrCat("port ", ports_[node], " is another redis-server's"));
  }
  servers_[node] = std::move(server);
  return absl::OkStatus();
}

std::string LocalRedisCluster::address(int node) const {
  return absl::StrCat("127.0.0.1:", ports_[node]);
}

std::vector<std::string> LocalRedisCluster::addresses() const {
  std::vector<std::string> out;
  for (int i = 0; i < size(); ++i) out.push_back(address(i));
  return out;
}

std::string LocalRedisCluster::url() const {
  return absl::StrCat("redis://", absl::StrJoin(addresses(), ","));
}

int LocalRedisCluster::IndexOf(const std::string& address) const {
  for (int i = 0; i < size(); ++i) {
    if (this->address(i) == address) return i;
  }
  return -1;
}

absl::Status LocalRedisCluster::Kill(int node) {
  if (servers_[node] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("redis node ", node, " is not running"));
  }
  servers_[node]->Signal(SIGKILL);
  if (!servers_[node]->Wait(absl::Seconds(10)).has_value()) {
    return absl::DeadlineExceededError(absl::StrCat("redis node ", node, " did not die"));
  }
  servers_[node].reset();
  return absl::OkStatus();
}

absl::Status LocalRedisCluster::Signal(int node, int signal) {
  if (servers_[node] == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("redis node ", node, " is not running"));
  }
  servers_[node]->Signal(signal);
  return absl::OkStatus();
}

absl::Status LocalRedisCluster::Restart(int node) {
  if (servers_[node] != nullptr) {
    return absl::FailedPreconditionError(absl::StrCat("redis node ", node, " still runs"));
  }
  return StartNode(node);
}

absl::Status LocalRedisCluster::WaitHealthy(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  while (true) {
    bool ok = true;
    for (int i = 0; i < size() && ok; ++i) {
      if (servers_[i] == nullptr) continue;
      absl::StatusOr<std::string> info = Cli(i, {"CLUSTER", "INFO"});
      ok = info.ok() && absl::StrContains(*info, "cluster_state:ok");
      if (!ok) last = info.ok() ? *info : std::string(info.status().message());
    }
    if (ok) return absl::OkStatus();
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("redis cluster not healthy in time; last: ", last));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

absl::StatusOr<std::string> LocalRedisCluster::Cli(int node, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {kRedisCli, "-h", "127.0.0.1", "-p", absl::StrCat(ports_[node])};
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<RunResult> r = Run(argv, absl::Seconds(30));
  if (!r.ok()) return r.status();
  // redis-cli exits 0 on error replies when not on a terminal but prints "ERR ..." or
  // "(error) ...", and a node that does not own the key prints its redirection ("MOVED slot
  // host:port", "ASK ..."), which is an error reply too; connection failures exit 1.
  if (r->exit_code != 0 || absl::StartsWith(r->out, "ERR") || absl::StartsWith(r->out, "(error)") ||
      absl::StartsWith(r->out, "MOVED ") || absl::StartsWith(r->out, "ASK ") ||
      absl::StrContains(r->err, "Could not connect")) {
    return absl::InternalError(absl::StrCat("redis-cli -p ", ports_[node], " ",
                                            absl::StrJoin(args, " "), ": ", r->out, r->err));
  }
  return std::string(absl::StripTrailingAsciiWhitespace(r->out));
}

absl::StatusOr<std::string> LocalRedisCluster::NodeId(int node) {
  return Cli(node, {"CLUSTER", "MYID"});
}

absl::Status LocalRedisCluster::BeginSlotMigration(int slot, int from, int to) {
  absl::StatusOr<std::string> from_id = NodeId(from);
  absl::StatusOr<std::string> to_id = NodeId(to);
  if (!from_id.ok()) return from_id.status();
  if (!to_id.ok()) return to_id.status();
  const std::string s = absl::StrCat(slot);
  if (auto r = Cli(to, {"CLUSTER", "SETSLOT", s, "IMPORTING", *from_id}); !r.ok()) {
    return r.status();
  }
  if (auto r = Cli(from, {"CLUSTER", "SETSLOT", s, "MIGRATING", *to_id}); !r.ok()) {
    return r.status();
  }
  return absl::OkStatus();
}

absl::Status LocalRedisCluster::MigrateKey(const std::string& key, int from, int to) {
  absl::StatusOr<std::string> r =
      Cli(from, {"MIGRATE", "127.0.0.1", absl::StrCat(ports_[to]), key, "0", "5000", "REPLACE"});
  if (!r.ok()) return r.status();
  if (*r != "OK" && *r != "NOKEY") {
    return absl::InternalError(absl::StrCat("MIGRATE ", key, " answered ", *r));
  }
  return absl::OkStatus();
}

absl::Status LocalRedisCluster::FinishSlotMigration(int slot, int to) {
  absl::StatusOr<std::string> to_id = NodeId(to);
  if (!to_id.ok()) return to_id.status();
  // The new owner first, so it bumps its epoch and the others learn it from there too.
  std::vector<int> order = {to};
  for (int i = 0; i < size(); ++i) {
    if (i != to) order.push_back(i);
  }
  for (int i : order) {
    if (servers_[i] == nullptr) continue;
    if (auto r = Cli(i, {"CLUSTER", "SETSLOT", absl::StrCat(slot), "NODE", *to_id}); !r.ok()) {
      return r.status();
    }
  }
  return absl::OkStatus();
}

}  // namespace kiln::testing
