// cache_bench: Get and Put throughput and latency of kilnd's blobs over loopback, through
// the gRPC Cache service and the HTTP/1.1 blob endpoint (--blob-listen), beside redis-server
// (no persistence) measured in the same run with the same value sizes and concurrency.
// kilnd persists every write (WAL on; a second table adds fsync per write). Usage: cache_bench
// [--seconds S] [--kilnd PATH] [--redis-server PATH]
//   [--sizes 1K,64K,1M] [--clients 1,16] [--tables wal,sync,store] [--rounds N]
// The last three pick rows (for profiling one case); by default every row runs. Gets are
// measured in N rounds (default 3) that take turns between kilnd and redis-server, each
// `seconds / N` long, and every figure is the median of its rounds: a burst of other load
// on the machine moves one round, not the ratio. Beside each
// rate, "cpu µs/op" is the CPU time per operation of the server + of the client process:
// what the machine spends, whatever else runs on it.

#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "cache/cache.h"
#include "client/blob_http_client.h"
#include "client/cache_client.h"
#include "grpcpp/create_channel.h"
#include "proto/base/digest.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/loopback.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln::bench {
namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "cache_bench: %s\n", message.c_str());
  std::exit(1);
}

// A minimal blocking RESP client: SET, GET and PING, one connection.
class RespClient {
 public:
  explicit RespClient(int port) : fd_(testing::ConnectLoopback(port)) {}
  ~RespClient() {
    if (fd_ >= 0) close(fd_);
  }
  bool connected() const { return fd_ >= 0; }

  bool Ping() {
    if (!SendAll({"*1\r\n$4\r\nPING\r\n"})) return false;
    std::string line;
    return ReadLine(&line) && line == "+PONG";
  }

  bool Set(const std::string& key, const std::string& value) {
    const std::string head = absl::StrCat("*3\r\n$3\r\nSET\r\n$", key.size(), "\r\n", key, "\r\n$",
                                          value.size(), "\r\n");
    if (!SendAll({head, value, "\r\n"})) return false;
    std::string line;
    return ReadLine(&line) && line == "+OK";
  }

  bool Get(const std::string& key, std::string* value) {
    if (!SendAll({absl::StrCat("*2\r\n$3\r\nGET\r\n$", key.size(), "\r\n", key, "\r\n")})) {
      return false;
    }
    std::string line;
    int64_t n = 0;
    if (!ReadLine(&line) || line.empty() || line[0] != '$' ||
        !absl::SimpleAtoi(absl::string_view(line).substr(1), &n) || n < 0) {
      return false;
    }
    value->resize(static_cast<size_t>(n));
    return ReadExact(value->data(), value->size()) && ReadExact(crlf_, 2);
  }

 private:
  bool SendAll(std::initializer_list<absl::string_view> parts) {
    std::vector<iovec> iov;
    for (absl::string_view p : parts) {
      iov.push_back({const_cast<char*>(p.data()), p.size()});
    }
    size_t i = 0;
    while (i < iov.size()) {
      ssize_t n = writev(fd_, iov.data() + i, static_cast<int>(iov.size() - i));
      if (n <= 0) return false;
      auto left = static_cast<size_t>(n);
      while (i < iov.size() && left >= iov[i].iov_len) left -= iov[i++].iov_len;
      if (i < iov.size()) {
        iov[i].iov_base = static_cast<char*>(iov[i].iov_base) + left;
        iov[i].iov_len -= left;
      }
    }
    return true;
  }

  bool Fill() {
    if (start_ == end_) start_ = end_ = 0;
    if (end_ == sizeof(buf_)) {
      std::memmove(buf_, buf_ + start_, end_ - start_);
      end_ -= start_;
      start_ = 0;
    }
    ssize_t n = read(fd_, buf_ + end_, sizeof(buf_) - end_);
    if (n <= 0) return false;
    end_ += static_cast<size_t>(n);
    return true;
  }

  bool ReadLine(std::string* line) {
    line->clear();
    while (true) {
      for (size_t i = start_; i + 1 < end_; ++i) {
        if (buf_[i] == '\r' && buf_[i + 1] == '\n') {
          line->assign(buf_ + start_, i - start_);
          start_ = i + 2;
          return true;
        }
      }
      if (!Fill()) return false;
    }
  }

  bool ReadExact(char* out, size_t n) {
    size_t have = std::min(n, end_ - start_);
    std::memcpy(out, buf_ + start_, have);
    start_ += have;
    while (have < n) {
      ssize_t r = read(fd_, out + have, n - have);
      if (r <= 0) return false;
      have += static_cast<size_t>(r);
    }
    return true;
  }

  int fd_ = -1;
  char buf_[16384];
  size_t start_ = 0, end_ = 0;
  char crlf_[2];
};

struct Result {
  double ops_per_second = 0;
  double p50_ms = 0;
  double p99_ms = 0;
  int64_t errors = 0;
  // CPU time per operation, in µs, of the server process and of this (the client) process.
  // Less sensitive than throughput to other load on the machine.
  double server_cpu_us = 0;
  double client_cpu_us = 0;
};

// CPU seconds `pid` has used (user and system, all threads), from /proc.
double ProcessCpuSeconds(pid_t pid) {
  std::FILE* f = std::fopen(absl::StrCat("/proc/", pid, "/stat").c_str(), "r");
  if (f == nullptr) return 0;
  char buf[1024];
  const size_t n = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[n] = '\0';
  // Fields after the command name (which may hold spaces) start past the last ')'.
  const char* p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  std::vector<absl::string_view> fields = absl::StrSplit(p + 2, ' ');
  int64_t utime = 0, stime = 0;
  // utime and stime are fields 14 and 15 of the line, 12 and 13 after the state field.
  if (fields.size() < 14 || !absl::SimpleAtoi(fields[11], &utime) ||
      !absl::SimpleAtoi(fields[12], &stime)) {
    return 0;
  }
  return static_cast<double>(utime + stime) / static_cast<double>(sysconf(_SC_CLK_TCK));
}

double OwnCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs `op(client, i)` from `clients` threads: `total_ops` operations in all, or for
// `seconds` when total_ops is 0. `server` (0: none) is the process whose CPU time is counted
// as the server's.
Result Measure(pid_t server, int clients, int64_t total_ops, double seconds,
               const std::function<bool(int client, int64_t i)>& op) {
  std::vector<std::vector<double>> latencies(clients);
  std::atomic<int64_t> next{0}, errors{0};
  const double server_cpu0 = server != 0 ? ProcessCpuSeconds(server) : 0;
  const double client_cpu0 = OwnCpuSeconds();
  const Clock::time_point start = Clock::now();
  const Clock::time_point stop =
      start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
  std::vector<std::thread> threads;
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      while (true) {
        const int64_t i = next.fetch_add(1);
        if (total_ops > 0 ? i >= total_ops : Clock::now() >= stop) break;
        const Clock::time_point t0 = Clock::now();
        if (!op(c, i)) errors.fetch_add(1);
        latencies[c].push_back(
            std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
    });
  }
  for (std::thread& t : threads) t.join();
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double server_cpu = server != 0 ? ProcessCpuSeconds(server) - server_cpu0 : 0;
  const double client_cpu = OwnCpuSeconds() - client_cpu0;
  std::vector<double> all;
  for (const auto& l : latencies) all.insert(all.end(), l.begin(), l.end());
  std::sort(all.begin(), all.end());
  Result r;
  r.errors = errors.load();
  if (all.empty()) return r;
  r.ops_per_second = static_cast<double>(all.size()) / elapsed;
  r.p50_ms = all[all.size() / 2];
  r.p99_ms = all[std::min(all.size() - 1, all.size() * 99 / 100)];
  r.server_cpu_us = server_cpu * 1e6 / static_cast<double>(all.size());
  r.client_cpu_us = client_cpu * 1e6 / static_cast<double>(all.size());
  return r;
}

// Per field, the median of several measurements of the same thing.
Result Median(std::vector<Result> runs) {
  auto median = [&](double Result::*field) {
    std::vector<double> v;
    for (const Result& r : runs) v.push_back(r.*field);
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  Result m;
  m.ops_per_second = median(&Result::ops_per_second);
  m.p50_ms = median(&Result::p50_ms);
  m.p99_ms = median(&Result::p99_ms);
  m.server_cpu_us = median(&Result::server_cpu_us);
  m.client_cpu_us = median(&Result::client_cpu_us);
  for (const Result& r : runs) m.errors += r.errors;
  return m;
}

struct Values {
  std::vector<std::string> bytes;
  std::vector<v1::Digest> digests;
};

Values MakeValues(size_t size, int count, uint64_t seed) {
  Values v;
  std::mt19937_64 rng(seed);
  for (int i = 0; i < count; ++i) {
    std::string b(size, '\0');
    for (size_t j = 0; j + 8 <= size; j += 8) {
      const uint64_t x = rng();
      std::memcpy(b.data() + j, &x, 8);
    }
    v.digests.push_back(DigestOf(b));
    v.bytes.push_back(std::move(b));
  }
  return v;
}

std::shared_ptr<grpc::Channel> Channel(const std::string& address, int id) {
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(64 << 20);
  args.SetMaxSendMessageSize(64 << 20);
  // One TCP connection per client, as each Redis client has its own.
  args.SetInt("kiln.bench_client", id);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  // Receive a whole blob chunk without waiting for window updates.
  args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, 8 << 20);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

std::string SizeName(size_t size) {
  return size >= (1 << 20) ? absl::StrCat(size >> 20, " MiB") : absl::StrCat(size >> 10, " KiB");
}

std::string CpuCell(const Result& r) {
  return absl::StrFormat("%.0f+%.0f", r.server_cpu_us, r.client_cpu_us);
}

void PrintRow(const char* op, const char* via, size_t size, int clients, const Result& k,
              const Result& r) {
  std::printf(
      "| %-3s | %-4s | %7s | %2d | %9.0f | %6.3f | %6.3f | %11s | %9.0f | %6.3f | %6.3f | %11s | "
      "%5.2fx |%s\n",
      op, via, SizeName(size).c_str(), clients, k.ops_per_second, k.p50_ms, k.p99_ms,
      CpuCell(k).c_str(), r.ops_per_second, r.p50_ms, r.p99_ms, CpuCell(r).c_str(),
      r.ops_per_second > 0 ? k.ops_per_second / r.ops_per_second : 0.0,
      k.errors + r.errors > 0
          ? absl::StrCat(" errors: kiln ", k.errors, " redis ", r.errors).c_str()
          : "");
  std::fflush(stdout);
}

// "1K,64K,1M" -> bytes; "1,16" -> counts.
std::vector<int64_t> ParseList(const std::string& text) {
  std::vector<int64_t> out;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    int64_t scale = 1;
    if (absl::ConsumeSuffix(&item, "K")) scale = 1 << 10;
    if (absl::ConsumeSuffix(&item, "M")) scale = 1 << 20;
    int64_t n = 0;
    if (!absl::SimpleAtoi(item, &n) || n <= 0) Die("bad list " + text);
    out.push_back(n * scale);
  }
  return out;
}

int Main(int argc, char** argv) {
  double seconds = 3;
  int rounds = 3;
  std::string kilnd = testing::KilndPath();
  std::string redis = "/usr/bin/redis-server";
  std::vector<int64_t> only_sizes, only_clients;
  std::string tables = "wal,sync,store";
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (flag == "--kilnd")
      kilnd = argv[i + 1];
    else if (flag == "--redis-server")
      redis = argv[i + 1];
    else if (flag == "--sizes")
      only_sizes = ParseList(argv[i + 1]);
    else if (flag == "--clients")
      only_clients = ParseList(argv[i + 1]);
    else if (flag == "--tables")
      tables = argv[i + 1];
    else if (flag == "--rounds")
      rounds = std::max(1, std::atoi(argv[i + 1]));
    else
      Die("unknown flag " + flag);
  }
  const std::vector<std::string> table_list = absl::StrSplit(tables, ',');
  auto table_on = [&](const char* name) {
    return std::find(table_list.begin(), table_list.end(), name) != table_list.end();
  };
  auto picked = [](const std::vector<int64_t>& only, int64_t v) {
    return only.empty() || std::find(only.begin(), only.end(), v) != only.end();
  };
  setenv("KILN_BINARY_DIR", kilnd.substr(0, kilnd.rfind("/server/kilnd")).c_str(), 0);

  testing::TempDir dir;
  const int redis_port = testing::FreeLoopbackPort();
  absl::StatusOr<testing::Subprocess> redis_server = testing::Subprocess::Start(
      {redis, "--port", std::to_string(redis_port), "--bind", "127.0.0.1", "--save", "",
       "--appendonly", "no", "--protected-mode", "no", "--dir", dir.path(), "--loglevel",
       "warning"});
  if (!redis_server.ok()) Die(redis_server.status().ToString());
  for (int attempt = 0;; ++attempt) {
    RespClient probe(redis_port);
    if (probe.connected() && probe.Ping()) break;
    if (attempt > 100) Die("redis-server did not answer: " + redis_server->Stderr());
    absl::SleepFor(absl::Milliseconds(50));
  }

  const int kClients[] = {1, 16};
  struct Size {
    size_t bytes;
    int puts_per_run;
  };
  const Size kSizes[] = {{1 << 10, 20000}, {64 << 10, 2000}, {1 << 20, 300}};

  auto run_table = [&](const std::vector<std::string>& flags, bool gets, const char* title,
                       const std::vector<Size>& sizes) {
    std::vector<std::string> kilnd_flags = flags;
    kilnd_flags.insert(kilnd_flags.end(), {"--blob-listen", "127.0.0.1:0"});
    absl::StatusOr<testing::KilndProcess> k = testing::KilndProcess::Start(
        dir.path() + "/kiln-" + std::to_string(flags.size()), kilnd_flags);
    if (!k.ok()) Die(k.status().ToString());
    std::printf("\n%s\n\n", title);
    std::printf(
        "| op  | via  | size    | c  | kiln op/s | p50 ms | p99 ms | cpu µs/op   | redis op/s | "
        "p50 ms | p99 ms | cpu µs/op   | kiln/redis |\n");
    std::printf(
        "|-----|------|---------|----|-----------|--------|--------|-------------|-----------|"
        "--------|--------|-------------|-------|\n");
    std::vector<std::unique_ptr<client::CacheClient>> kiln_clients;
    std::vector<std::unique_ptr<client::BlobHttpClient>> http_clients;
    std::vector<std::unique_ptr<RespClient>> redis_clients;
    client::CacheClientOptions options;
    options.verify_reads = false;  // kilnd verifies every read; Redis clients check nothing
    for (int c = 0; c < 16; ++c) {
      kiln_clients.push_back(std::make_unique<client::CacheClient>(
          Channel(k->address(), c), client::ChannelOptions{}, options));
      http_clients.push_back(std::make_unique<client::BlobHttpClient>(client::BlobHttpClientOptions{
          .address = "127.0.0.1:" + std::to_string(k->blob_port()), .verify_reads = false}));
      redis_clients.push_back(std::make_unique<RespClient>(redis_port));
      if (!redis_clients.back()->connected()) Die("cannot connect to redis-server");
    }
    uint64_t seed = flags.size() * 1000;
    for (const Size& size : sizes) {
      for (int clients : kClients) {
        ++seed;
        if (!picked(only_sizes, size.bytes) || !picked(only_clients, clients)) continue;
        const int n = clients == 1 ? size.puts_per_run / 4 : size.puts_per_run;
        const Values values = MakeValues(size.bytes, n, seed);
        std::vector<std::string> keys;
        for (const v1::Digest& d : values.digests) keys.push_back(d.hash());
        const Result kput = Measure(k->process().pid(), clients, n, 0, [&](int c, int64_t i) {
          return kiln_clients[c]->Put(values.digests[i], values.bytes[i]).ok();
        });
        const Values http_values = MakeValues(size.bytes, n, seed + 500);
        const Result hput = Measure(k->process().pid(), clients, n, 0, [&](int c, int64_t i) {
          return http_clients[c]->Put(http_values.digests[i], http_values.bytes[i]).ok();
        });
        const Result rput = Measure(redis_server->pid(), clients, n, 0, [&](int c, int64_t i) {
          return redis_clients[c]->Set(keys[i], values.bytes[i]);
        });
        PrintRow("put", "grpc", size.bytes, clients, kput, rput);
        PrintRow("put", "http", size.bytes, clients, hput, rput);
        if (!gets) continue;
        // Gets pick among the values just stored, in the same order for both servers.
        std::vector<int> order(1 << 16);
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int& o : order) o = static_cast<int>(rng() % values.bytes.size());
        const double each = seconds / rounds;
        std::vector<Result> kgets, hgets, rgets;
        for (int round = 0; round < rounds; ++round) {
          kgets.push_back(Measure(k->process().pid(), clients, 0, each, [&](int c, int64_t i) {
            absl::StatusOr<std::string> got =
                kiln_clients[c]->Get(values.digests[order[i % order.size()]]);
            return got.ok() && got->size() == size.bytes;
          }));
          hgets.push_back(Measure(k->process().pid(), clients, 0, each, [&](int c, int64_t i) {
            absl::StatusOr<std::string> got =
                http_clients[c]->Get(values.digests[order[i % order.size()]]);
            return got.ok() && got->size() == size.bytes;
          }));
          rgets.push_back(Measure(redis_server->pid(), clients, 0, each, [&](int c, int64_t i) {
            thread_local std::string v;
            return redis_clients[c]->Get(keys[order[i % order.size()]], &v) &&
                   v.size() == size.bytes;
          }));
        }
        const Result rget = Median(rgets);
        PrintRow("get", "grpc", size.bytes, clients, Median(kgets), rget);
        PrintRow("get", "http", size.bytes, clients, Median(hgets), rget);
      }
    }
  };

  if (table_on("wal")) {
    run_table({}, true,
              "kilnd (WAL on, no fsync per write: acknowledged writes survive kill -9) vs "
              "redis-server (no persistence)",
              {std::begin(kSizes), std::end(kSizes)});
  }
  if (table_on("sync")) {
    run_table({"--cache-sync-writes"}, false,
              "kilnd --cache-sync-writes (fsync per write: survives a machine crash) vs "
              "redis-server (no persistence): what durability costs",
              {{1 << 10, 2000}, {64 << 10, 1000}, {1 << 20, 200}});
  }
  // The store alone, in this process: what the transport adds is the difference.
  if (table_on("store")) {
    std::printf(
        "\nThe store in-process (no gRPC), same values, for comparison with the kilnd rows\n\n");
    std::printf("| op  | size    | c  | store op/s | p50 ms | p99 ms | cpu µs/op |\n");
    std::printf("|-----|---------|----|-----------|--------|--------|-----------|\n");
    cache::CacheOptions o;
    o.path = dir.path() + "/inprocess";
    absl::StatusOr<std::unique_ptr<cache::Cache>> store = cache::Cache::Open(o);
    if (!store.ok()) Die(store.status().ToString());
    uint64_t seed = 7777;
    for (const Size& size : kSizes) {
      for (int clients : kClients) {
        ++seed;
        if (!picked(only_sizes, size.bytes) || !picked(only_clients, clients)) continue;
        const int n = clients == 1 ? size.puts_per_run / 4 : size.puts_per_run;
        const Values values = MakeValues(size.bytes, n, seed);
        const Result put = Measure(0, clients, n, 0, [&](int c, int64_t i) {
          return (*store)->store().Put(values.digests[i], values.bytes[i]).ok();
        });
        const Result get = Measure(0, clients, 0, seconds / 2, [&](int c, int64_t i) {
          return (*store)->store().Get(values.digests[(i * 7919) % n]).ok();
        });
        for (auto [op, r] : {std::pair{"put", put}, std::pair{"get", get}}) {
          std::printf("| %-3s | %7s | %2d | %9.0f | %6.3f | %6.3f | %9.0f |\n", op,
                      SizeName(size.bytes).c_str(), clients, r.ops_per_second, r.p50_ms, r.p99_ms,
                      r.client_cpu_us);
        }
      }
    }
  }
  redis_server->Signal(SIGTERM);
  redis_server->Wait(absl::Seconds(10));
  return 0;
}

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  return kiln::bench::Main(argc, argv);
}
