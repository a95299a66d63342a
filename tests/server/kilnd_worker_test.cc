// Compile isolation end to end: a real kilnd compiling in worker processes, real gRPC over
// loopback, and the worker's test fault hook (KILN_TEST_WORKER_FAULT, inherited by kilnd's
// workers) aimed at one compile key. The request whose compile crashes, hangs past its
// deadline, is cancelled or runs out of memory gets the right error; requests running beside
// it succeed with the right artifacts; the pool recovers; the crashing key is answered from
// memory at once, and force_compile really compiles it again.

#include <signal.h>
#include <stdlib.h>

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <filesystem>
#include <optional>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "client/compile_client.h"
#include "compiler/canon/compile_key.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "tests/server/kilnd_client_fixture.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::LoadSharedGraph;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

v1::CompileRequest Request(const std::string& file) {
  v1::CompileRequest r;
  *r.mutable_graph() = LoadSharedGraph(file);
  r.mutable_options()->set_target("x86_64");
  return r;
}

std::string KeyOf(const v1::CompileRequest& r) {
  absl::StatusOr<canon::KeyedGraph> keyed = canon::KeyGraph(r.graph(), r.options());
  EXPECT_TRUE(keyed.ok()) << keyed.status();
  return keyed.ok() ? keyed->record.compile_key() : "";
}

class KilndWorkerTest : public testing::KilndClientTest {
 protected:
  KilndWorkerTest()
      : bad_(Request("mlp_fp32.fw.json")),
        good_({Request("mlp_fp32.bw.json"), Request("mlp_automatic_dynamic2.fw.json")}),
        bad_key_(KeyOf(bad_)) {
    for (const v1::CompileRequest& r : good_) EXPECT_NE(KeyOf(r), bad_key_);
  }
  ~KilndWorkerTest() override { ::unsetenv("KILN_TEST_WORKER_FAULT"); }

  // kilnd with `fault` aimed at the bad graph's key.
  void Start(const std::string& fault, std::vector<std::string> flags = {}) {
    if (fault.empty()) {
      ::unsetenv("KILN_TEST_WORKER_FAULT");
    } else {
      ::setenv("KILN_TEST_WORKER_FAULT", (fault + ":" + bad_key_).c_str(), 1);
    }
    StartKilnd(flags);
  }

  double Restarts(const std::string& reason) {
    return Metric("kiln_compile_worker_restarts_total{reason=\"" + reason + "\"}");
  }
  // Whether `series` reaches `value` within 30 s (restarts are counted as workers are reaped).
  bool MetricReaches(const std::string& series, double value) {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (Metric(series) != value) {
      if (absl::Now() > deadline) return false;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return true;
  }

  // The artifacts of the good graphs, compiled in kilnd's own threads.
  std::vector<std::string> InProcessArtifacts() {
    TempDir dir;
    absl::StatusOr<KilndProcess> k =
        KilndProcess::Start(dir.path() + "/data", {"--compile-isolation", "none"});
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return {};
    auto c = testing::ConnectTo(*k);
    EXPECT_TRUE(c.ok()) << c.status();
    if (!c.ok()) return {};
    std::vector<std::string> artifacts;
    for (const v1::CompileRequest& r : good_) {
      absl::StatusOr<v1::CompileResponse> a = (*c)->Compile(r, absl::Seconds(120));
      EXPECT_TRUE(a.ok()) << a.status();
      artifacts.push_back(a.ok() ? a->compiled_graph() : "");
    }
    return artifacts;
  }

  const v1::CompileRequest bad_;
  const std::vector<v1::CompileRequest> good_;
  const std::string bad_key_;
};

TEST_F(KilndWorkerTest, ACrashFailsOneRequestAndIsRememberedUntilForced) {
  const std::vector<std::string> expected = InProcessArtifacts();
  ASSERT_EQ(expected.size(), good_.size());
  Start("crash@codegen", {"--compile-workers", "2"});

  // The crashing compile, with good ones beside it on the other worker.
  std::atomic<bool> crashed{false};
  std::thread crasher([&] {
    absl::StatusOr<v1::CompileResponse> a = Compile(bad_);
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInternal) << a.status();
    EXPECT_THAT(a.status().message(), HasSubstr("crashed with SIGABRT"));
    EXPECT_THAT(a.status().message(), HasSubstr("after phase codegen"));
    EXPECT_THAT(a.status().message(), HasSubstr(bad_key_));
    EXPECT_THAT(a.status().message(), HasSubstr("crash report"));
    crashed = true;
  });
  for (size_t i = 0; !crashed.load() || i < good_.size(); ++i) {
    const size_t g = i % good_.size();
    absl::StatusOr<v1::CompileResponse> a = Compile(good_[g]);
    EXPECT_TRUE(a.ok()) << a.status();
    if (!a.ok()) break;
    EXPECT_EQ(a->compiled_graph(), expected[g]) << i;
  }
  crasher.join();
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"crash\"}", 1));
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"INTERNAL\"}"), 1);
  // The report is under the data directory.
  int reports = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/data/crashes")) {
    reports += e.path().extension() == ".json";
  }
  EXPECT_EQ(reports, 1);

  // A retry is answered at once from memory, without a compile or another crash.
  const absl::Time t0 = absl::Now();
  absl::StatusOr<v1::CompileResponse> again = Compile(bad_);
  EXPECT_LT(absl::Now() - t0, absl::Seconds(1));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(again.status().message(), HasSubstr("crashed with SIGABRT"));
  EXPECT_THAT(again.status().message(), HasSubstr("force_compile retries"));
  // The status page shows the pool, the crash and the remembered key.
  absl::StatusOr<std::string> page = testing::FetchPage(kilnd_->http_port(), "/");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(*page, HasSubstr("In worker processes"));
  EXPECT_THAT(*page, HasSubstr("lost: 1 crash, 0 memory"));
  EXPECT_THAT(*page, HasSubstr("<h2>Keys remembered as failing</h2>"));
  EXPECT_THAT(*page, HasSubstr(bad_key_.substr(0, 16)));
  EXPECT_THAT(*page, HasSubstr("</td><td>idle</td></tr>"));
  EXPECT_EQ(Restarts("crash"), 1);
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"INTERNAL\"}"), 1);

  // force_compile compiles it for real: it crashes a worker again.
  v1::CompileRequest forced = bad_;
  forced.set_force_compile(true);
  absl::StatusOr<v1::CompileResponse> retried = Compile(forced);
  EXPECT_EQ(retried.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(retried.status().message(), ::testing::Not(HasSubstr("remembered")));
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"crash\"}", 2));

  // The pool is whole: both workers serve (two compiles at once).
  std::vector<std::thread> both;
  for (const v1::CompileRequest& r : good_) {
    v1::CompileRequest f = r;
    f.set_force_compile(true);
    both.emplace_back([this, f] { EXPECT_TRUE(Compile(f).ok()); });
  }
  for (std::thread& t : both) t.join();
}

TEST_F(KilndWorkerTest, AHangPastTheDeadlineIsDeadlineExceededAndNotRemembered) {
  Start("hang@fuse", {"--compile-workers", "1"});
  absl::StatusOr<v1::CompileResponse> a = Compile(bad_, absl::Seconds(2));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDeadlineExceeded) << a.status();
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"deadline\"}", 1));
  // The one worker was replaced: the next compile runs.
  absl::StatusOr<v1::CompileResponse> good = Compile(good_[0]);
  EXPECT_TRUE(good.ok()) << good.status();
  // Not remembered: a hang depends on the deadline, so a retry compiles (and hangs) again.
  a = Compile(bad_, absl::Seconds(2));
  EXPECT_EQ(a.status().code(), absl::StatusCode::kDeadlineExceeded) << a.status();
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"deadline\"}", 2));
}

TEST_F(KilndWorkerTest, CancellingTheRequestKillsItsWorker) {
  Start("hang@lower", {"--compile-workers", "1"});
  auto channel = grpc::CreateChannel(kilnd_->address(), grpc::InsecureChannelCredentials());
  auto stub = v1::Compiler::NewStub(channel);
  grpc::ClientContext context;
  v1::CompileResponse response;
  std::thread canceller([&] {
    absl::SleepFor(absl::Seconds(1));
    context.TryCancel();
  });
  grpc::Status status = stub->Compile(&context, bad_, &response);
  canceller.join();
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"cancelled\"}", 1));
  absl::StatusOr<v1::CompileResponse> good = Compile(good_[0]);
  EXPECT_TRUE(good.ok()) << good.status();
}

TEST_F(KilndWorkerTest, RunningOutOfMemoryFailsTheRequest) {
  if (testing::kSanitized) GTEST_SKIP() << "sanitizers take the address space a limit needs";
  Start("oom@decompose", {"--compile-workers", "1", "--compile-memory-bytes", "2GiB"});
  absl::StatusOr<v1::CompileResponse> a = Compile(bad_);
  EXPECT_EQ(a.status().code(), absl::StatusCode::kInternal) << a.status();
  EXPECT_THAT(a.status().message(), HasSubstr("ran out of memory"));
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"memory\"}", 1));
  absl::StatusOr<v1::CompileResponse> good = Compile(good_[0]);
  EXPECT_TRUE(good.ok()) << good.status();
  // Remembered like a crash.
  EXPECT_THAT(Compile(bad_).status().message(), HasSubstr("remembered"));
}

// The pids of `parent`'s children that are still running (not zombies).
std::vector<pid_t> LiveChildren(pid_t parent) {
  std::vector<pid_t> children;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    pid_t pid = 0;
    if (!absl::SimpleAtoi(e.path().filename().string(), &pid)) continue;
    absl::StatusOr<std::string> stat = testing::ReadFile(e.path().string() + "/stat");
    if (!stat.ok()) continue;
    // pid (comm) state ppid ...: the fields after the last ')'.
    std::vector<std::string> fields =
        absl::StrSplit(stat->substr(stat->rfind(')') + 2), ' ', absl::SkipEmpty());
    pid_t ppid = 0;
    if (fields.size() > 1 && fields[0] != "Z" && absl::SimpleAtoi(fields[1], &ppid) &&
        ppid == parent) {
      children.push_back(pid);
    }
  }
  return children;
}

bool Running(pid_t pid) {
  absl::StatusOr<std::string> stat = testing::ReadFile(absl::StrCat("/proc/", pid, "/stat"));
  return stat.ok() && stat->substr(stat->rfind(')') + 2, 1) != "Z";
}

TEST_F(KilndWorkerTest, WorkersLeaveWithAKilledKilndAndHoldNothingOfIts) {
  Start("hang@lower", {"--compile-workers", "2"});
  const std::vector<pid_t> workers = LiveChildren(kilnd_->process().pid());
  ASSERT_EQ(workers.size(), 2u);
  // One worker busy (hung), one idle, when kilnd dies.
  std::thread hung([&] { (void)Compile(bad_, absl::Seconds(30)); });
  absl::SleepFor(absl::Milliseconds(500));
  kilnd_->process().Signal(SIGKILL);
  hung.join();
  ASSERT_TRUE(kilnd_->process().Wait(absl::Seconds(10)).has_value());
  // A new kilnd takes the data directory at once: no worker holds its lock.
  Start("");
  EXPECT_TRUE(Compile(good_[0]).ok());
  const absl::Time deadline = absl::Now() + absl::Seconds(10);
  for (pid_t w : workers) {
    while (Running(w) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
    EXPECT_FALSE(Running(w)) << "worker " << w << " outlived its kilnd";
  }
}

TEST_F(KilndWorkerTest, BadIsolationFlagsAreRefused) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--compile-isolation", "fork"},
        std::vector<std::string>{"--compile-memory-bytes", "1MiB"},
        std::vector<std::string>{"--poisoned-key-seconds", "-1"}}) {
    std::vector<std::string> argv = {testing::KilndPath(), "--data-dir", dir_.path() + "/x"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    absl::StatusOr<testing::RunResult> r = testing::Run(argv, absl::Seconds(30));
    ASSERT_TRUE(r.ok());
    EXPECT_EQ(r->exit_code, 2) << flags[0];
    EXPECT_THAT(r->err, HasSubstr(flags[0])) << r->err;
  }
}

TEST_F(KilndWorkerTest, AWorkerIsReplacedAfterItsMaximumCompiles) {
  Start("", {"--compile-workers", "1", "--compile-worker-max-compiles", "2"});
  const std::vector<std::string> expected = InProcessArtifacts();
  ASSERT_EQ(expected.size(), good_.size());
  const std::vector<pid_t> first = LiveChildren(kilnd_->process().pid());
  ASSERT_EQ(first.size(), 1u);
  // Five forced compiles on one worker that serves two: two replacements, every answer right.
  for (int i = 0; i < 5; ++i) {
    v1::CompileRequest r = good_[i % good_.size()];
    r.set_force_compile(true);
    absl::StatusOr<v1::CompileResponse> a = Compile(r);
    ASSERT_TRUE(a.ok()) << i << ": " << a.status();
    EXPECT_EQ(a->compiled_graph(), expected[i % good_.size()]) << i;
  }
  EXPECT_TRUE(MetricReaches("kiln_compile_worker_restarts_total{reason=\"recycled\"}", 2));
  EXPECT_EQ(Restarts("crash"), 0);
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 5);
  // The worker now is another process.
  absl::SleepFor(absl::Milliseconds(200));
  std::vector<pid_t> now = LiveChildren(kilnd_->process().pid());
  for (int tries = 0; now.size() != 1 && tries < 100; ++tries) {
    absl::SleepFor(absl::Milliseconds(50));
    now = LiveChildren(kilnd_->process().pid());
  }
  ASSERT_EQ(now.size(), 1u);
  EXPECT_NE(now[0], first[0]);
}

TEST_F(KilndWorkerTest, WorkersThatCannotStartLeaveKilndCompilingInItsOwnThreads) {
  // Every worker dies before it says it is ready, as where a sandbox refuses the spawn.
  ::setenv("KILN_TEST_WORKER_FAULT", "crash@ready", 1);
  absl::StatusOr<KilndProcess> k = KilndProcess::Start(dir_.path() + "/data", {});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_THAT(k->process().Stderr(), HasSubstr("compile_workers_unavailable"));
  Use(*std::move(k));
  EXPECT_EQ(Metric("kiln_compile_isolated"), 0);
  absl::StatusOr<std::string> page = testing::FetchPage(kilnd_->http_port(), "/");
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_THAT(*page, HasSubstr("without isolation: the compile workers could not start"));
  const std::vector<std::string> in_process = InProcessArtifacts();
  for (size_t i = 0; i < good_.size(); ++i) {
    absl::StatusOr<v1::CompileResponse> a = Compile(good_[i]);
    ASSERT_TRUE(a.ok()) << a.status();
    EXPECT_EQ(a->compiled_graph(), in_process[i]);
  }
  // With workers, the gauge says so.
  Start("", {"--compile-workers", "1"});
  EXPECT_EQ(Metric("kiln_compile_isolated"), 1);
}

}  // namespace
}  // namespace kiln
