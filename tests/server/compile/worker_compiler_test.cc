// WorkerCompiler with real worker processes (the kilnd binary under test, in its
// --compile-worker mode) and the real compiler: the same bytes and phases as compiling in
// process; every fault the test hook can cause (crash, SIGSEGV, hang, memory, garbage on the
// socket) fails that compile alone with the right error and restart reason, a crash report is
// kept, other compiles on other workers go on, and the pool is whole again afterwards.

#include "server/compile/worker_compiler.h"

#include <signal.h>
#include <stdlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "compiler/canon/compile_key.h"
#include "nlohmann/json.hpp"
#include "proto/base/serialize.h"
#include "server/observe/json_log.h"
#include "tests/testing/test_env.h"

namespace kiln::server {
namespace {

using ::kiln::testing::LoadSharedGraph;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

// A graph imported and keyed as the compile service does it.
struct Keyed {
  v1::Graph source;
  canon::KeyedGraph keyed;
  std::string key;
};

std::unique_ptr<Keyed> KeyOf(const std::string& file, const std::string& target = "x86_64") {
  auto k = std::make_unique<Keyed>();
  k->source = LoadSharedGraph(file);
  v1::CompileOptions options;
  options.set_target(target);
  absl::StatusOr<canon::KeyedGraph> keyed = canon::KeyGraph(k->source, options);
  EXPECT_TRUE(keyed.ok()) << keyed.status();
  k->keyed = *std::move(keyed);
  k->key = k->keyed.record.compile_key();
  return k;
}

struct Outcome {
  absl::StatusOr<v1::CompiledGraph> result = absl::UnknownError("not run");
  std::vector<std::string> phases;
};

Outcome CompileWith(Compiler& compiler, const Keyed& k, const std::atomic<bool>* cancel = nullptr,
                    absl::Time deadline = absl::InfiniteFuture()) {
  Outcome run;
  compiler::CompileContext context;
  context.cancel = cancel;
  context.on_phase = [&](absl::string_view phase, absl::Time, absl::Time) {
    run.phases.emplace_back(phase);
  };
  const CompileInput input{*k.keyed.graph, k.source, k.keyed.options, k.key, deadline};
  run.result = compiler.Compile(input, context);
  return run;
}

bool Eventually(const std::function<bool()>& condition,
                absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return true;
}

class WorkerCompilerTest : public ::testing::Test {
 protected:
  WorkerCompilerTest() { SetLogLevel(LogLevel::kError); }
  ~WorkerCompilerTest() override {
    pool_.reset();
    ::unsetenv("KILN_TEST_WORKER_FAULT");
  }

  // Starts `workers` workers; `fault` is KILN_TEST_WORKER_FAULT for them.
  void Start(int workers, const std::string& fault = "", int64_t memory_bytes = 0) {
    if (fault.empty()) {
      ::unsetenv("KILN_TEST_WORKER_FAULT");
    } else {
      ::setenv("KILN_TEST_WORKER_FAULT", fault.c_str(), 1);
    }
    WorkerCompilerOptions options;
    options.workers = workers;
    options.binary = testing::KilndPath();
    options.memory_bytes = memory_bytes;
    options.crash_dir = dir_.path() + "/crashes";
    options.crash_reports_kept = reports_kept_;
    absl::StatusOr<std::unique_ptr<WorkerCompiler>> pool =
        WorkerCompiler::Start(options, &metrics_);
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
  }

  // The pool has `n` live workers, all idle, none of them in `gone`.
  bool Whole(int n, const std::vector<pid_t>& gone = {}) {
    return Eventually([&] {
      std::vector<pid_t> pids = pool_->worker_pids();
      for (pid_t p : gone) {
        if (std::find(pids.begin(), pids.end(), p) != pids.end()) return false;
      }
      return static_cast<int>(pids.size()) == n && pool_->idle_workers() == n;
    });
  }

  std::vector<std::string> CrashReports() {
    std::vector<std::string> reports;
    std::error_code error;
    for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/crashes", error)) {
      if (e.path().extension() == ".json") reports.push_back(e.path().string());
    }
    return reports;
  }

  int reports_kept_ = 64;
  TempDir dir_;
  MetricsRegistry metrics_;
  std::unique_ptr<WorkerCompiler> pool_;
};

TEST_F(WorkerCompilerTest, SameBytesAndPhasesAsInProcess) {
  Start(1, "", int64_t{16} << 30);  // kilnd's default limit
  InProcessCompiler in_process;
  // sm_90 too: the worker assembles cubins through nvJitLink as kilnd would (or, in a build
  // without the CUDA backend, fails the same way).
  for (const char* target : {"x86_64", "cuda:sm_90"}) {
    for (const char* file : {"mlp_fp32.fw.json", "mlp_fp32.bw.json"}) {
      std::unique_ptr<Keyed> k = KeyOf(file, target);
      Outcome local = CompileWith(in_process, *k);
      Outcome worker = CompileWith(*pool_, *k);
      ASSERT_EQ(worker.result.status(), local.result.status()) << file << " " << target;
      if (!local.result.ok()) continue;
      EXPECT_EQ(DeterministicBytes(*worker.result), DeterministicBytes(*local.result))
          << file << " " << target;
      EXPECT_EQ(worker.phases, local.phases) << file << " " << target;
    }
  }
  EXPECT_EQ(pool_->worker_pids().size(), 1u);
  for (const char* reason : {"crash", "memory", "protocol", "cancelled", "deadline"}) {
    EXPECT_EQ(pool_->restarts(reason), 0) << reason;
  }
}

// Every sixth graph of the corpus (all of them: KILN_WORKER_CORPUS=all), under the default
// memory limit: a worker gives exactly the bytes the compiler gives in process.
TEST_F(WorkerCompilerTest, CorpusGraphsGiveTheSameBytesAsInProcess) {
  Start(2, "", int64_t{16} << 30);
  const char* all = std::getenv("KILN_WORKER_CORPUS");
  const int step = all != nullptr && std::string(all) == "all" ? 1 : 6;
  InProcessCompiler in_process;
  std::vector<std::string> files;  // .json and .json.gz
  for (const auto& e : std::filesystem::directory_iterator(testing::GraphsDir())) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".json") || name.ends_with(".json.gz")) files.push_back(name);
  }
  std::sort(files.begin(), files.end());
  ASSERT_GT(files.size(), 50u);
  int compared = 0;
  for (size_t i = 0; i < files.size(); i += step) {
    const std::string& name = files[i];
    std::unique_ptr<Keyed> k = KeyOf(name);
    Outcome local = CompileWith(in_process, *k);
    Outcome worker = CompileWith(*pool_, *k);
    ASSERT_EQ(worker.result.status(), local.result.status()) << name;
    if (local.result.ok()) {
      EXPECT_EQ(DeterministicBytes(*worker.result), DeterministicBytes(*local.result)) << name;
    }
    ++compared;
  }
  EXPECT_GE(compared, static_cast<int>(files.size()) / step);
  EXPECT_EQ(pool_->restarts("crash") + pool_->restarts("memory"), 0);
}

TEST_F(WorkerCompilerTest, CompileErrorsKeepTheirCodeAndTheWorker) {
  Start(1);
  std::unique_ptr<Keyed> k = KeyOf("mlp_fp32.fw.json");
  // No backend for this target in the worker or here: the same UNIMPLEMENTED either way.
  v1::CompileOptions options = k->keyed.options;
  options.set_require_cudagraph(true);
  options.set_target("cuda:sm_90");
  const CompileInput input{*k->keyed.graph, k->source, options, k->key};
  InProcessCompiler in_process;
  absl::StatusOr<v1::CompiledGraph> local = in_process.Compile(input, {});
  absl::StatusOr<v1::CompiledGraph> remote = pool_->Compile(input, {});
  EXPECT_EQ(remote.status().code(), local.status().code()) << remote.status();
  EXPECT_EQ(remote.status().message(), local.status().message());
  const std::vector<pid_t> before = pool_->worker_pids();
  EXPECT_TRUE(CompileWith(*pool_, *k).result.ok());
  EXPECT_EQ(pool_->worker_pids(), before);
}

TEST_F(WorkerCompilerTest, CrashFailsThatCompileWhileOthersGoOn) {
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  std::unique_ptr<Keyed> good = KeyOf("mlp_fp32.bw.json");
  Start(2, "crash@lower:" + bad->key.substr(0, 12));
  InProcessCompiler in_process;
  const std::string expected = DeterministicBytes(*CompileWith(in_process, *good).result);
  const std::vector<pid_t> before = pool_->worker_pids();

  // The crashing compile and good ones at the same time, on the other worker.
  std::atomic<bool> crashed{false};
  std::thread crasher([&] {
    Outcome run = CompileWith(*pool_, *bad);
    EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInternal) << run.result.status();
    EXPECT_THAT(run.result.status().message(), HasSubstr("SIGABRT"));
    EXPECT_THAT(run.result.status().message(), HasSubstr("after phase lower"));
    EXPECT_THAT(run.result.status().message(), HasSubstr(bad->key));
    EXPECT_TRUE(IsCrashedCompile(run.result.status()));
    // The phases before the crash were reported.
    EXPECT_EQ(run.phases, (std::vector<std::string>{"decompose", "lower"}));
    crashed = true;
  });
  int good_compiles = 0;
  while (!crashed.load() || good_compiles < 2) {
    Outcome run = CompileWith(*pool_, *good);
    ASSERT_TRUE(run.result.ok()) << run.result.status();
    EXPECT_EQ(DeterministicBytes(*run.result), expected);
    ++good_compiles;
  }
  crasher.join();
  EXPECT_EQ(pool_->restarts("crash"), 1);

  // A report names the key, the signal and the phase, with the graph beside it.
  std::vector<std::string> reports = CrashReports();
  ASSERT_EQ(reports.size(), 1u);
  std::ifstream in(reports[0]);
  nlohmann::json report = nlohmann::json::parse(in);
  EXPECT_EQ(report["compile_key"], bad->key);
  EXPECT_EQ(report["reason"], "crash");
  EXPECT_EQ(report["last_phase"], "lower");
  EXPECT_THAT(report["what"].get<std::string>(), HasSubstr("SIGABRT"));
  v1::Graph saved;
  absl::StatusOr<std::string> bytes = testing::ReadFile(report["graph_file"].get<std::string>());
  ASSERT_TRUE(bytes.ok());
  ASSERT_TRUE(saved.ParseFromString(*bytes));
  EXPECT_EQ(saved.nodes_size(), bad->source.nodes_size());

  // The crashed worker was replaced; the pool is whole again and compiles.
  std::vector<pid_t> gone;
  for (pid_t p : before) {
    if (::kill(p, 0) != 0) gone.push_back(p);
  }
  EXPECT_EQ(gone.size(), 1u);
  EXPECT_TRUE(Whole(2, gone));
  EXPECT_TRUE(CompileWith(*pool_, *good).result.ok());
}

TEST_F(WorkerCompilerTest, OnlyTheNewestCrashReportsAreKept) {
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  reports_kept_ = 2;
  Start(1, "crash@start:" + bad->key);
  std::vector<std::string> messages;
  for (int i = 0; i < 3; ++i) {
    Outcome run = CompileWith(*pool_, *bad);
    ASSERT_EQ(run.result.status().code(), absl::StatusCode::kInternal) << run.result.status();
    messages.emplace_back(run.result.status().message());
  }
  EXPECT_EQ(pool_->restarts("crash"), 3);
  std::vector<std::string> reports = CrashReports();
  std::sort(reports.begin(), reports.end());
  ASSERT_EQ(reports.size(), 2u);
  // The first crash's report went, with its graph; the last two stay.
  EXPECT_THAT(messages[0], ::testing::Not(HasSubstr(reports[0])));
  EXPECT_THAT(messages[1], HasSubstr(reports[0]));
  EXPECT_THAT(messages[2], HasSubstr(reports[1]));
  int graphs = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir_.path() + "/crashes")) {
    graphs += e.path().string().ends_with(".graph.pb");
  }
  EXPECT_EQ(graphs, 2);
}

TEST_F(WorkerCompilerTest, SegfaultNamesTheSignal) {
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  Start(1, "segv@codegen:" + bad->key);
  Outcome run = CompileWith(*pool_, *bad);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(run.result.status().message(), HasSubstr("SIGSEGV (signal 11)"));
  EXPECT_THAT(run.result.status().message(), HasSubstr("after phase codegen"));
  EXPECT_EQ(pool_->restarts("crash"), 1);
  EXPECT_TRUE(Whole(1));
  EXPECT_TRUE(CompileWith(*pool_, *KeyOf("mlp_fp32.bw.json")).result.ok());
}

TEST_F(WorkerCompilerTest, CancellationKillsAHungWorker) {
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  Start(1, "hang@fuse:" + bad->key);
  std::atomic<bool> cancel{false};
  std::thread canceller([&] {
    absl::SleepFor(absl::Milliseconds(300));
    cancel = true;
  });
  const absl::Time t0 = absl::Now();
  Outcome run = CompileWith(*pool_, *bad, &cancel);
  canceller.join();
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kCancelled) << run.result.status();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(5));
  EXPECT_EQ(pool_->restarts("cancelled"), 1);
  EXPECT_FALSE(IsCrashedCompile(run.result.status()));
  EXPECT_TRUE(CrashReports().empty());
  EXPECT_TRUE(Whole(1));
  EXPECT_TRUE(CompileWith(*pool_, *KeyOf("mlp_fp32.bw.json")).result.ok());
}

TEST_F(WorkerCompilerTest, APassedDeadlineIsDeadlineExceeded) {
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  Start(1, "hang@start:" + bad->key);
  const absl::Time deadline = absl::Now() + absl::Milliseconds(300);
  std::atomic<bool> cancel{false};
  // As the compile service does: the last waiter leaves at its deadline.
  std::thread leaver([&] {
    absl::SleepFor(deadline - absl::Now());
    cancel = true;
  });
  Outcome run = CompileWith(*pool_, *bad, &cancel, deadline);
  leaver.join();
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kDeadlineExceeded) << run.result.status();
  EXPECT_EQ(pool_->restarts("deadline"), 1);
  EXPECT_TRUE(Whole(1));
}

TEST_F(WorkerCompilerTest, RunningOutOfMemoryIsReported) {
  if (testing::kSanitized) GTEST_SKIP() << "sanitizers take the address space a limit needs";
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  Start(1, "oom@lower:" + bad->key, int64_t{2} << 30);
  Outcome run = CompileWith(*pool_, *bad);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInternal) << run.result.status();
  EXPECT_THAT(run.result.status().message(), HasSubstr("ran out of memory"));
  EXPECT_THAT(run.result.status().message(), HasSubstr("after phase lower"));
  EXPECT_TRUE(IsCrashedCompile(run.result.status()));
  EXPECT_EQ(pool_->restarts("memory"), 1);
  EXPECT_TRUE(Whole(1));
  // Under the same limit a real compile fits.
  EXPECT_TRUE(CompileWith(*pool_, *KeyOf("mlp_fp32.bw.json")).result.ok());
}

TEST_F(WorkerCompilerTest, GarbageOnTheSocketIsAProtocolError) {
  std::unique_ptr<Keyed> bad = KeyOf("mlp_fp32.fw.json");
  Start(1, "garbage@plan:" + bad->key);
  Outcome run = CompileWith(*pool_, *bad);
  EXPECT_EQ(run.result.status().code(), absl::StatusCode::kInternal) << run.result.status();
  EXPECT_THAT(run.result.status().message(), HasSubstr("malformed"));
  EXPECT_EQ(pool_->restarts("protocol"), 1);
  EXPECT_TRUE(Whole(1));
  EXPECT_TRUE(CompileWith(*pool_, *KeyOf("mlp_fp32.bw.json")).result.ok());
}

TEST_F(WorkerCompilerTest, AWorkerKilledWhileIdleIsReplacedWithoutFailingACompile) {
  Start(1);
  const pid_t victim = pool_->worker_pids().at(0);
  ASSERT_EQ(::kill(victim, SIGKILL), 0);
  absl::SleepFor(absl::Milliseconds(50));
  Outcome run = CompileWith(*pool_, *KeyOf("mlp_fp32.fw.json"));
  EXPECT_TRUE(run.result.ok()) << run.result.status();
  EXPECT_EQ(pool_->restarts("crash"), 1);
  EXPECT_TRUE(Whole(1, {victim}));
}

TEST_F(WorkerCompilerTest, AWorkerThatCannotStartIsAClearError) {
  WorkerCompilerOptions options;
  options.binary = dir_.path() + "/no-such-kilnd";
  absl::StatusOr<std::unique_ptr<WorkerCompiler>> missing =
      WorkerCompiler::Start(options, &metrics_);
  EXPECT_THAT(missing.status().message(), HasSubstr("no-such-kilnd"));
  options.binary = "/bin/true";
  absl::StatusOr<std::unique_ptr<WorkerCompiler>> not_a_worker =
      WorkerCompiler::Start(options, &metrics_);
  EXPECT_THAT(not_a_worker.status().message(), HasSubstr("did not start: it exited with code 0"));
}

}  // namespace
}  // namespace kiln::server
