// soak: a long mixed load against one kilnd, to show that it stays flat. kilnd runs with its
// compile workers and a small cache budget (--cache-max-bytes, default 48 MiB), so the store
// evicts all the time; clients send, each picking by weight:
//
//   hit         a compile of a graph compiled at start (kept warm by use)
//   guard miss  a dynamic-shape graph at one of 48 sizes (a new size is a guard miss and a
//               compile of a new variant; a known one a hit)
//   miss        a compile of a fresh key (a backend option that changes the key only)
//   put         a blob of 1 KiB to 256 KiB, and one in 16 of 4 to 6 MiB (a streamed Put)
//   get         a blob put earlier (NOT_FOUND is expected once eviction took it)
//
// Every report period it prints, per kind, the requests answered, throughput and p50/p99
// latency, and kilnd's resident memory (its own and its workers'), its open files (sockets,
// pipes and the like apart from the files of its data directory, which RocksDB opens and
// closes as it compacts), stored bytes and bytes evicted. Errors other than the expected ones
// are counted and printed. At the end, after a warm-up (the first third of the run, in which
// the caches fill: kilnd runs with a 16 MiB memory tier and a 32 MiB RocksDB block cache),
// kilnd's RSS, its compile workers' RSS together and its open files outside the data
// directory must be flat: peak RSS at most 10% + 32 MiB above the warm-up's peak, open files
// at most 4 more (50% + 64 MiB and 8 when the warm-up is under five minutes). Evictions must
// have happened and no unexpected error may have occurred; the exit code says whether they
// held.
//
//   build/release/tests/bench/soak [--seconds 1800] [--report-seconds 60] [--clients 4]
//                                  [--budget-mib 48] [--json FILE]

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/cache_client.h"
#include "client/compile_client.h"
#include "nlohmann/json.hpp"
#include "proto/base/digest.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::bench {
namespace {

struct Flags {
  int seconds = 1800;
  int report_seconds = 60;
  int clients = 4;
  int budget_mib = 48;
  std::string json;
};

enum Kind { kHit, kGuardMiss, kMiss, kPut, kGet, kKinds };
constexpr const char* kKindNames[kKinds] = {"hit", "guard miss", "miss", "put", "get"};
constexpr int kWeights[kKinds] = {50, 10, 8, 20, 12};

std::optional<testing::KilndProcess> g_kilnd;

[[noreturn]] void Die(const std::string& message) {
  std::fprintf(stderr, "soak: %s\n", message.c_str());
  if (g_kilnd.has_value()) g_kilnd->process().Signal(SIGKILL);
  std::exit(2);
}

Flags ParseFlags(int argc, char** argv) {
  Flags f;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (i + 1 >= argc) Die(absl::StrCat("flag ", arg, " needs a value"));
    const std::string value = argv[++i];
    int* number = arg == "--seconds"          ? &f.seconds
                  : arg == "--report-seconds" ? &f.report_seconds
                  : arg == "--clients"        ? &f.clients
                  : arg == "--budget-mib"     ? &f.budget_mib
                                              : nullptr;
    if (arg == "--json") {
      f.json = value;
    } else if (number == nullptr) {
      Die(absl::StrCat("unknown flag ", arg,
                       " (flags: --seconds --report-seconds --clients --budget-mib --json)"));
    } else if (!absl::SimpleAtoi(value, number) || *number <= 0) {
      Die(absl::StrCat(arg, " takes a positive integer, not \"", value, "\""));
    }
  }
  return f;
}

// Latencies and errors of one kind within one report period.
struct Period {
  std::vector<double> millis[kKinds];
  int64_t expected_errors[kKinds] = {};
  std::map<std::string, int64_t> unexpected;  // "kind: CODE message" -> count
};

class Load {
 public:
  Load(const testing::KilndProcess& kilnd, int clients) {
    client::ChannelOptions o;
    o.address = kilnd.address();
    for (int i = 0; i < clients; ++i) {
      auto c = client::CompileClient::Connect(o);
      if (!c.ok()) Die(c.status().ToString());
      compile_.push_back(*std::move(c));
      auto cache = client::CacheClient::Create(o);
      if (!cache.ok()) Die(cache.status().ToString());
      cache_.push_back(*std::move(cache));
    }
    for (const char* name : {"mlp_fp32.fw.json", "mlp_fp32.bw.json",
                             "mlp_automatic_dynamic.fw.json", "mlp_automatic_dynamic.bw.json"}) {
      v1::CompileRequest& r = warm_.emplace_back();
      *r.mutable_graph() = testing::LoadSharedGraph(name);
      r.mutable_options()->set_target("x86_64");
    }
    dynamic_.mutable_options()->set_target("x86_64");
    *dynamic_.mutable_graph() = testing::LoadSharedGraph("mlp_automatic_dynamic2.fw.json");
    if (dynamic_.graph().symbols_size() != 1) Die("mlp_automatic_dynamic2.fw has no one symbol");
    miss_ = warm_[0];
  }

  // Compiles the warm set once, so that later requests for it are hits.
  void Warm() {
    for (const v1::CompileRequest& r : warm_) {
      absl::StatusOr<v1::CompileResponse> a = compile_[0]->Compile(r, absl::Seconds(300));
      if (!a.ok()) Die(absl::StrCat("warming up: ", a.status().ToString()));
    }
  }

  // One client's loop until `stop`.
  void Run(int client, const std::atomic<bool>& stop) {
    std::mt19937_64 random(1000 + client);
    std::discrete_distribution<int> pick(std::begin(kWeights), std::end(kWeights));
    while (!stop.load()) {
      const Kind kind = static_cast<Kind>(pick(random));
      const absl::Time t0 = absl::Now();
      absl::Status status = Once(client, kind, random);
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      std::lock_guard<std::mutex> lock(mu_);
      if (status.ok()) {
        period_.millis[kind].push_back(ms);
      } else if (absl::IsNotFound(status) && kind == kGet) {
        ++period_.expected_errors[kind];  // evicted
      } else {
        ++period_
              .unexpected[absl::StrCat(kKindNames[kind], ": ", status.ToString().substr(0, 200))];
      }
    }
  }

  Period TakePeriod() {
    std::lock_guard<std::mutex> lock(mu_);
    Period p = std::move(period_);
    period_ = Period();
    return p;
  }

 private:
  absl::Status Once(int client, Kind kind, std::mt19937_64& random) {
    switch (kind) {
      case kHit:
        return Compiled(client, warm_[random() % warm_.size()], v1::CACHE_OUTCOME_UNSPECIFIED);
      case kGuardMiss: {
        v1::CompileRequest r = dynamic_;
        const int size = 8 * (1 + static_cast<int>(random() % 48));
        r.mutable_graph()->mutable_symbols(0)->set_int_hint(size);
        r.mutable_graph()->mutable_guards()->set_python_expr(absl::StrCat("L['t0'] == ", size));
        return Compiled(client, r, v1::CACHE_OUTCOME_UNSPECIFIED);
      }
      case kMiss: {
        v1::CompileRequest r = miss_;
        (*r.mutable_options()->mutable_backend_options())["soak.variant"] =
            absl::StrCat(next_variant_.fetch_add(1));
        return Compiled(client, r, v1::CACHE_OUTCOME_MISS);
      }
      case kPut: {
        const size_t size =
            random() % 16 == 0 ? (4 << 20) + random() % (2 << 20) : 1024 + random() % (255 << 10);
        const std::string bytes = testing::PseudoRandomBytes(size, random());
        absl::StatusOr<client::CacheClient::PutResult> put = cache_[client]->Put(bytes);
        if (!put.ok()) return put.status();
        std::lock_guard<std::mutex> lock(mu_);
        put_[put_count_++ % put_.size()] = put->digest;
        return absl::OkStatus();
      }
      case kGet: {
        v1::Digest digest;
        {
          std::lock_guard<std::mutex> lock(mu_);
          if (put_count_ == 0) return absl::OkStatus();
          digest = put_[random() % std::min<size_t>(put_count_, put_.size())];
        }
        absl::StatusOr<std::string> got = cache_[client]->Get(digest);
        if (!got.ok()) return got.status();
        if (DigestOf(*got).hash() != digest.hash()) {
          return absl::DataLossError("a Get answered bytes that are not the blob asked for");
        }
        return absl::OkStatus();
      }
      case kKinds:
        break;
    }
    return absl::OkStatus();
  }

  absl::Status Compiled(int client, const v1::CompileRequest& r, v1::CacheOutcome expected) {
    absl::StatusOr<v1::CompileResponse> a = compile_[client]->Compile(r, absl::Seconds(300));
    if (!a.ok()) return a.status();
    if (expected != v1::CACHE_OUTCOME_UNSPECIFIED && a->outcome() != expected) {
      return absl::InternalError(absl::StrCat("outcome ", a->outcome(), ", expected ", expected));
    }
    if (DigestOf(a->compiled_graph()).hash() != a->artifact_digest().hash()) {
      return absl::DataLossError("an artifact that does not hash to its digest");
    }
    return absl::OkStatus();
  }

  std::vector<std::unique_ptr<client::CompileClient>> compile_;
  std::vector<std::unique_ptr<client::CacheClient>> cache_;
  std::vector<v1::CompileRequest> warm_;
  v1::CompileRequest dynamic_;
  v1::CompileRequest miss_;
  std::atomic<int64_t> next_variant_{0};
  std::mutex mu_;
  Period period_;
  std::vector<v1::Digest> put_ = std::vector<v1::Digest>(256);
  size_t put_count_ = 0;
};

// kilnd's resident bytes (VmRSS) and its children's (the compile workers), and its open
// files.
struct Resources {
  int64_t rss = 0;
  int64_t workers_rss = 0;
  int64_t fds = 0;        // open files but the data directory's: sockets, pipes, logs
  int64_t store_fds = 0;  // files under the data directory (RocksDB's, the lock)
};

int64_t RssOf(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(status, line)) {
    int64_t kib = 0;
    if (line.rfind("VmRSS:", 0) == 0 &&
        absl::SimpleAtoi(absl::StripAsciiWhitespace(line.substr(6, line.size() - 9)), &kib)) {
      return kib << 10;
    }
  }
  return 0;
}

Resources Measure(pid_t kilnd, const std::string& data_dir) {
  Resources r;
  r.rss = RssOf(kilnd);
  std::error_code error;
  for (const auto& e :
       std::filesystem::directory_iterator(absl::StrCat("/proc/", kilnd, "/fd"), error)) {
    const std::string target = std::filesystem::read_symlink(e.path(), error).string();
    ++(target.rfind(data_dir + "/", 0) == 0 ? r.store_fds : r.fds);
  }
  for (const auto& e : std::filesystem::directory_iterator("/proc", error)) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    std::ifstream stat(e.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const size_t close = text.rfind(')');
    if (close == std::string::npos) continue;
    // pid (comm) state ppid ...
    std::istringstream rest(text.substr(close + 2));
    std::string state;
    pid_t ppid = 0;
    rest >> state >> ppid;
    if (ppid == kilnd) r.workers_rss += RssOf(pid);
  }
  return r;
}

double Percentile(std::vector<double>& v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size())))];
}

double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1 << 20); }

}  // namespace
}  // namespace kiln::bench

int main(int argc, char** argv) {
  using namespace kiln::bench;  // NOLINT: a program's main
  namespace testing = kiln::testing;
  const Flags flags = ParseFlags(argc, argv);
  testing::TempDir dir;
  absl::StatusOr<testing::KilndProcess> k = testing::KilndProcess::Start(
      dir.path() + "/data",
      {"--cache-max-bytes", absl::StrCat(flags.budget_mib, "MiB"), "--cache-memory-bytes", "16MiB",
       "--cache-block-cache-bytes", "32MiB", "--compile-workers", "2"});
  if (!k.ok()) Die(k.status().ToString());
  g_kilnd.emplace(*std::move(k));
  const pid_t pid = g_kilnd->process().pid();
  const std::string data_dir = std::filesystem::canonical(dir.path() + "/data").string();

  Load load(*g_kilnd, flags.clients);
  load.Warm();
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int c = 0; c < flags.clients; ++c) {
    clients.emplace_back([&, c] { load.Run(c, stop); });
  }
  std::printf(
      "soak: %d clients against kilnd (pid %d, budget %d MiB) for %d s, reports every %d s\n",
      flags.clients, pid, flags.budget_mib, flags.seconds, flags.report_seconds);
  std::printf("%6s %-10s %8s %8s %9s %9s %9s | %8s %8s %5s %6s %8s %9s\n", "t(s)", "kind", "ok",
              "ok/s", "p50 ms", "p99 ms", "expected", "rss MiB", "wrk MiB", "fds", "db fds",
              "store", "evict MiB");
  nlohmann::json report = nlohmann::json::array();
  std::map<std::string, int64_t> unexpected;
  std::vector<Resources> resources;
  double evictions = 0;
  const absl::Time start = absl::Now();
  for (int t = flags.report_seconds; t <= flags.seconds; t += flags.report_seconds) {
    absl::SleepFor(start + absl::Seconds(t) - absl::Now());
    Period p = load.TakePeriod();
    const Resources r = Measure(pid, data_dir);
    resources.push_back(r);
    evictions =
        testing::ScrapeMetric(g_kilnd->http_port(), "kiln_cache_evicted_bytes_total").value_or(-1);
    const double stored =
        testing::ScrapeMetric(g_kilnd->http_port(), "kiln_cache_stored_bytes").value_or(-1);
    nlohmann::json row = {{"t", t},
                          {"rss_bytes", r.rss},
                          {"workers_rss_bytes", r.workers_rss},
                          {"fds", r.fds},
                          {"store_fds", r.store_fds},
                          {"stored_bytes", stored},
                          {"evicted_bytes", evictions}};
    for (int kind = 0; kind < kKinds; ++kind) {
      std::vector<double>& ms = p.millis[kind];
      const double rate = static_cast<double>(ms.size()) / flags.report_seconds;
      const double p50 = Percentile(ms, 0.5), p99 = Percentile(ms, 0.99);
      row["kinds"][kKindNames[kind]] = {{"ok", ms.size()},
                                        {"per_second", rate},
                                        {"p50_ms", p50},
                                        {"p99_ms", p99},
                                        {"expected_errors", p.expected_errors[kind]}};
      if (kind == 0) {
        std::printf(
            "%6d %-10s %8zu %8.1f %9.2f %9.2f %9lld | %8.1f %8.1f %5lld %6lld %8.1f %9.0f\n", t,
            kKindNames[kind], ms.size(), rate, p50, p99,
            static_cast<long long>(p.expected_errors[kind]), Mib(r.rss), Mib(r.workers_rss),
            static_cast<long long>(r.fds), static_cast<long long>(r.store_fds),
            Mib(static_cast<int64_t>(stored)), Mib(static_cast<int64_t>(evictions)));
      } else {
        std::printf("%6s %-10s %8zu %8.1f %9.2f %9.2f %9lld |\n", "", kKindNames[kind], ms.size(),
                    rate, p50, p99, static_cast<long long>(p.expected_errors[kind]));
      }
    }
    for (const auto& [what, n] : p.unexpected) {
      std::printf("       unexpected: %lld x %s\n", static_cast<long long>(n), what.c_str());
      unexpected[what] += n;
    }
    row["unexpected_errors"] = p.unexpected;
    report.push_back(row);
    std::fflush(stdout);
  }
  stop.store(true);
  for (std::thread& c : clients) c.join();

  // The verdict: the first third of the run (one report period at least) is warm-up, in
  // which kilnd's caches and RocksDB's write buffers fill; the rest must stay near its peak.
  std::vector<std::string> failures;
  const size_t warm_periods = std::max<size_t>(1, resources.size() / 3);
  if (resources.size() > warm_periods) {
    Resources warm, later;
    for (size_t i = 0; i < resources.size(); ++i) {
      Resources& r = i < warm_periods ? warm : later;
      r.rss = std::max(r.rss, resources[i].rss);
      r.fds = std::max(r.fds, resources[i].fds);
      r.workers_rss = std::max(r.workers_rss, resources[i].workers_rss);
    }
    // A warm-up under five minutes has not seen the caches and write buffers at their peak
    // together: such runs are judged against a looser bound, which catches gross leaks only.
    const bool long_run = warm_periods * flags.report_seconds >= 300;
    const double slack = long_run ? 1.10 : 1.50;
    const int64_t extra = long_run ? (32 << 20) : (64 << 20);
    if (static_cast<double>(later.rss) > slack * static_cast<double>(warm.rss) + extra) {
      failures.push_back(absl::StrFormat("kilnd's RSS grew from %.1f MiB in warm-up to %.1f MiB",
                                         Mib(warm.rss), Mib(later.rss)));
    }
    if (static_cast<double>(later.workers_rss) >
        slack * static_cast<double>(warm.workers_rss) + extra) {
      failures.push_back(
          absl::StrFormat("the compile workers' RSS grew from %.1f MiB in warm-up to %.1f MiB",
                          Mib(warm.workers_rss), Mib(later.workers_rss)));
    }
    if (later.fds > warm.fds + (long_run ? 4 : 8)) {
      failures.push_back(absl::StrCat("kilnd's open files (outside its data directory) grew from ",
                                      warm.fds, " in warm-up to ", later.fds));
    }
    std::printf(
        "warm-up peak: RSS %.1f MiB (workers %.1f), %lld files; after: RSS %.1f MiB (workers "
        "%.1f), %lld files\n",
        Mib(warm.rss), Mib(warm.workers_rss), static_cast<long long>(warm.fds), Mib(later.rss),
        Mib(later.workers_rss), static_cast<long long>(later.fds));
  } else {
    failures.push_back("too short a run to judge: no report period after the warm-up");
  }
  if (evictions <= 0) failures.push_back("nothing was evicted: the budget did not bind");
  for (const auto& [what, n] : unexpected) {
    failures.push_back(absl::StrCat(n, " unexpected errors: ", what));
  }
  if (!flags.json.empty()) {
    std::ofstream(flags.json) << nlohmann::json{{"periods", report}, {"failures", failures}}.dump(2)
                              << "\n";
  }
  g_kilnd->process().Signal(SIGTERM);
  const std::optional<int> code = g_kilnd->process().Wait(absl::Seconds(30));
  if (!code.has_value() || *code != 0) failures.push_back("kilnd did not stop cleanly on SIGTERM");
  for (const std::string& f : failures) std::printf("FAILED: %s\n", f.c_str());
  if (failures.empty()) std::printf("soak: flat and clean\n");
  return failures.empty() ? 0 : 1;
}
