// kiln.v1.Compiler served in process over loopback, with a fake compiler behind it, so that a
// test decides when each compile finishes: single flight, rank rendezvous, the bounded queue,
// deadlines, cancellation, per-client limits and compile errors, with exact counts. The real
// compiler end to end is kilnd_compile_test.cc's.

#include "server/rpc/compile_service.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "cache/cache.h"
#include "client/compile_client.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "server/observe/json_log.h"
#include "tests/server/compile/fake_compiler.h"
#include "tests/server/rpc/test_authorizer.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::server {
namespace {

using ::kiln::testing::FakeCompiler;
using ::kiln::testing::LoadSharedGraph;
using ::kiln::testing::TempDir;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

using Answer = absl::StatusOr<v1::CompileResponse>;

v1::CompileRequest Request(const v1::Graph& g) {
  v1::CompileRequest r;
  *r.mutable_graph() = g;
  r.mutable_options()->set_target("x86_64");
  return r;
}

// A graph that differs from `g` in one constant (a distinct compile key per `i`).
v1::Graph Variant(v1::Graph g, int i) {
  for (v1::Node& n : *g.mutable_nodes()) {
    for (v1::Argument& a : *n.mutable_args()) {
      if (a.kind_case() == v1::Argument::kFloatValue) {
        a.set_float_value(a.float_value() + 1e-3 * (i + 1));
        return g;
      }
    }
  }
  ADD_FAILURE() << "no float argument to vary";
  return g;
}

// Whether `condition` holds within `timeout`, polling.
bool Eventually(const std::function<bool()>& condition,
                absl::Duration timeout = absl::Seconds(30)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (!condition()) {
    if (absl::Now() > deadline) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

class CompileServiceTest : public ::testing::Test {
 protected:
  // Every answer logs a line; only errors matter here.
  CompileServiceTest() { SetLogLevel(LogLevel::kError); }

  void Start(CompileServiceOptions options = {}, const std::string& tokens = "") {
    cache::CacheOptions o;
    o.path = dir_.path() + "/store";
    o.background_maintenance = false;
    absl::StatusOr<std::unique_ptr<cache::Cache>> cache = cache::Cache::Open(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    cache_ = *std::move(cache);
    absl::StatusOr<std::unique_ptr<Authorizer>> authorizer = testing::TestAuthorizer(tokens);
    ASSERT_TRUE(authorizer.ok()) << authorizer.status();
    authorizer_ = *std::move(authorizer);
    if (options.workers <= 0) options.workers = 4;
    service_ = std::make_unique<CompileService>(options, &compiler_, cache_.get(), &metrics_,
                                                &traces_, authorizer_.get());
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    client_ = Connect();
  }

  void TearDown() override {
    compiler_.Release();
    if (server_ != nullptr) server_->Shutdown();
    service_.reset();
    if (cache_ != nullptr) EXPECT_TRUE(cache_->Close().ok());
  }

  std::unique_ptr<client::CompileClient> Connect(const std::string& token = "") {
    client::ChannelOptions o;
    o.address = absl::StrCat("127.0.0.1:", port_);
    o.token = token;
    absl::StatusOr<std::unique_ptr<client::CompileClient>> c = client::CompileClient::Connect(o);
    EXPECT_TRUE(c.ok()) << c.status();
    return c.ok() ? *std::move(c) : nullptr;
  }

  Answer Compile(const v1::CompileRequest& r, absl::Duration timeout = absl::Seconds(60)) {
    return client_->Compile(r, timeout);
  }

  // Runs Compile(r) on a thread of its own; join() it to read `answer`.
  struct Call {
    std::thread thread;
    Answer answer = absl::UnknownError("not answered");
    void join() { thread.join(); }
    ~Call() {
      if (thread.joinable()) thread.join();
    }
  };
  std::unique_ptr<Call> CompileAsync(v1::CompileRequest r,
                                     absl::Duration timeout = absl::Seconds(60)) {
    auto call = std::make_unique<Call>();
    call->thread = std::thread(
        [this, c = call.get(), r = std::move(r), timeout] { c->answer = Compile(r, timeout); });
    return call;
  }

  // Holds the fake compiler and sends `request`, which keeps a worker busy until
  // ReleaseRunning(); returns once the fake has begun `started` compiles in all.
  void StartRunning(v1::CompileRequest request, int started = 1) {
    compiler_.Hold();
    running_ = CompileAsync(std::move(request));
    ASSERT_TRUE(compiler_.WaitForStarted(started));
  }

  // Lets every held compile finish; the answer of the one StartRunning sent.
  const Answer& ReleaseRunning() {
    compiler_.Release();
    running_->join();
    return running_->answer;
  }

  // One series of the service's metrics, e.g. `kiln_compiles_total{result="ok"}`.
  double Metric(const std::string& series) {
    return testing::MetricValue(metrics_.Render(), series);
  }

  CompileService::Snapshot Snapshot() const { return service_->TakeSnapshot(); }

  TempDir dir_;
  FakeCompiler compiler_;
  MetricsRegistry metrics_;
  TraceStore traces_{64};
  std::unique_ptr<cache::Cache> cache_;
  std::unique_ptr<Authorizer> authorizer_;
  std::unique_ptr<CompileService> service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::unique_ptr<client::CompileClient> client_;
  std::unique_ptr<Call> running_;  // StartRunning's compile
};

TEST_F(CompileServiceTest, MissCompilesOnceThenHitsWithIdenticalBytes) {
  Start();
  const v1::CompileRequest request = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  Answer first = Compile(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_FALSE(first->deduplicated());
  EXPECT_EQ(first->artifact_digest().hash(), Sha256Hex(first->compiled_graph()));
  v1::CompiledGraph compiled;
  ASSERT_TRUE(compiled.ParseFromString(first->compiled_graph()));
  EXPECT_EQ(compiled.compile_key(), first->compile_key());
  std::set<std::string> phases;
  for (const v1::PhaseTiming& t : first->timings()) phases.insert(t.phase());
  EXPECT_THAT(phases, ::testing::IsSupersetOf({"key", "lookup", "queue", "fake_codegen", "store"}));

  Answer second = Compile(request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(second->compiled_graph(), first->compiled_graph());
  EXPECT_EQ(compiler_.started(), 1);
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 1);
  EXPECT_EQ(Metric("kiln_compile_requests_total{outcome=\"hit\"}"), 1);
  EXPECT_EQ(Metric("kiln_compile_requests_total{outcome=\"miss\"}"), 1);
}

TEST_F(CompileServiceTest, ConcurrentIdenticalRequestsShareOneCompile) {
  Start();
  compiler_.Hold();
  const v1::CompileRequest request = Request(LoadSharedGraph("nanogpt_fp32.fw.json"));
  constexpr int kClients = 64;
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < kClients; ++i) calls.push_back(CompileAsync(request));
  ASSERT_TRUE(compiler_.WaitForStarted(1));
  // Every client has joined the one flight before it lands.
  ASSERT_TRUE(Eventually([&] { return Snapshot().deduplicated == kClients - 1; }));
  compiler_.Release();
  int deduplicated = 0;
  for (auto& c : calls) {
    c->join();
    ASSERT_TRUE(c->answer.ok()) << c->answer.status();
    EXPECT_EQ(c->answer->compiled_graph(), calls[0]->answer->compiled_graph());
    EXPECT_EQ(c->answer->outcome(), v1::CACHE_OUTCOME_MISS);
    deduplicated += c->answer->deduplicated() ? 1 : 0;
  }
  EXPECT_EQ(deduplicated, kClients - 1);
  EXPECT_EQ(compiler_.started(), 1);
  EXPECT_EQ(Metric("kiln_compile_deduplicated_waiters_total"), kClients - 1);
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 1);
}

// Runs `graphs.size()` ranks of one job at once; rank r sends graphs[r] (nullopt: absent).
std::vector<Answer> RunJob(client::CompileClient& client,
                           const std::vector<std::optional<v1::Graph>>& graphs,
                           const std::string& job) {
  const int world = static_cast<int>(graphs.size());
  std::vector<Answer> out(world, absl::UnknownError("absent"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    if (!graphs[r].has_value()) continue;
    threads.emplace_back([&, r] {
      v1::CompileRequest request = Request(*graphs[r]);
      request.mutable_job()->set_job_id(job);
      request.mutable_job()->set_rank(r);
      request.mutable_job()->set_world_size(world);
      request.mutable_job()->set_sequence(0);
      out[r] = client.Compile(request, absl::Seconds(60));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

// Runs job `job` of 8 ranks that send one graph, but for rank 3, which never arrives.
std::vector<Answer> RunJobWithoutRank3(client::CompileClient& client, const std::string& job) {
  std::vector<std::optional<v1::Graph>> graphs(8, LoadSharedGraph("mlp_fp32.fw.json"));
  graphs[3].reset();
  return RunJob(client, graphs, job);
}

TEST_F(CompileServiceTest, EightRanksWithOneGraphCompileOnce) {
  Start();
  const v1::Graph g = LoadSharedGraph("mlp_fp32.bw.json");
  std::vector<std::optional<v1::Graph>> graphs(8, g);
  // Ranks run on different devices; the key does not care.
  for (int r = 0; r < 8; ++r) {
    for (v1::GraphInput& in : *graphs[r]->mutable_inputs()) {
      if (in.meta().has_tensor()) {
        in.mutable_meta()->mutable_tensor()->mutable_device()->set_index(r);
      }
    }
  }
  std::vector<Answer> answers = RunJob(*client_, graphs, "job-same");
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(answers[r].ok()) << r << ": " << answers[r].status();
    EXPECT_EQ(answers[r]->compiled_graph(), answers[0]->compiled_graph());
    EXPECT_EQ(answers[r]->decision_digest(), answers[0]->decision_digest());
    EXPECT_EQ(answers[r]->outcome(), v1::CACHE_OUTCOME_MISS) << "hit/miss is unanimous";
    EXPECT_EQ(answers[r]->rendezvous().present_ranks_size(), 8);
  }
  EXPECT_EQ(compiler_.started(), 1);
  EXPECT_EQ(Metric("kiln_rendezvous_waits_total"), 8);
}

TEST_F(CompileServiceTest, ADivergentRankIsNamedToEveryRankAndNothingCompiles) {
  Start();
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  std::vector<std::optional<v1::Graph>> graphs(8, g);
  graphs[5] = Variant(g, 0);
  std::vector<Answer> answers = RunJob(*client_, graphs, "job-diverge");
  for (int r = 0; r < 8; ++r) {
    const absl::Status s = answers[r].status();
    ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << r << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("ranks [5]"));
    std::optional<v1::ErrorDetail> detail = ErrorDetailOf(s);
    ASSERT_TRUE(detail.has_value());
    ASSERT_EQ(detail->divergence().groups_size(), 2);
    EXPECT_EQ(detail->divergence().groups(1).ranks(0), 5);
    ASSERT_EQ(detail->divergence().differences_size(), 1);
    EXPECT_THAT(detail->divergence().differences(0), HasSubstr("native_layer_norm"));
  }
  EXPECT_EQ(compiler_.started(), 0);
  EXPECT_EQ(Metric("kiln_rendezvous_divergences_total"), 8);
}

TEST_F(CompileServiceTest, AMissingRankFailsEveryRankByDefault) {
  CompileServiceOptions options;
  options.rendezvous.timeout = absl::Milliseconds(300);
  Start(options);
  std::vector<Answer> answers = RunJobWithoutRank3(*client_, "job-missing");
  for (int r = 0; r < 8; ++r) {
    if (r == 3) continue;
    const absl::Status s = answers[r].status();
    ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << r << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("ranks 3 of 8 did not arrive"));
    std::optional<v1::ErrorDetail> detail = ErrorDetailOf(s);
    ASSERT_TRUE(detail.has_value());
    EXPECT_THAT(detail->missing_ranks(), ElementsAre(3));
  }
  EXPECT_EQ(compiler_.started(), 0);
}

TEST_F(CompileServiceTest, AMissingRankCanBeLeftBehind) {
  CompileServiceOptions options;
  options.rendezvous.timeout = absl::Milliseconds(300);
  options.rendezvous.proceed_without_missing = true;
  Start(options);
  std::vector<Answer> answers = RunJobWithoutRank3(*client_, "job-proceed");
  for (int r = 0; r < 8; ++r) {
    if (r == 3) continue;
    ASSERT_TRUE(answers[r].ok()) << r << ": " << answers[r].status();
    EXPECT_THAT(answers[r]->rendezvous().missing_ranks(), ElementsAre(3));
    EXPECT_EQ(answers[r]->compiled_graph(), answers[0]->compiled_graph());
  }
  EXPECT_EQ(compiler_.started(), 1);
}

TEST_F(CompileServiceTest, AFullQueueIsRefusedWithARetryHint) {
  CompileServiceOptions options;
  options.workers = 1;
  options.queue_capacity = 1;
  Start(options);
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  ASSERT_NO_FATAL_FAILURE(StartRunning(Request(Variant(g, 0))));
  std::unique_ptr<Call> queued = CompileAsync(Request(Variant(g, 1)));
  ASSERT_TRUE(Eventually([&] { return Snapshot().queue_depth == 1; }));
  EXPECT_EQ(Metric("kiln_compile_queue_depth"), 1);
  EXPECT_EQ(Metric("kiln_compiles_in_flight"), 1);

  Answer refused = Compile(Request(Variant(g, 2)));
  ASSERT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_EQ(refused.status().message(),
            "the compile queue is full (1 waiting); retry in about 1 s");
  std::optional<v1::ErrorDetail> detail = ErrorDetailOf(refused.status());
  ASSERT_TRUE(detail.has_value());
  EXPECT_EQ(detail->retry_after_ms(), 1000);

  const Answer& running = ReleaseRunning();
  queued->join();
  EXPECT_TRUE(running.ok()) << running.status();
  EXPECT_TRUE(queued->answer.ok()) << queued->answer.status();
  EXPECT_EQ(compiler_.started(), 2);
  // The refused graph compiles once there is room.
  EXPECT_TRUE(Compile(Request(Variant(g, 2))).ok());
}

// --compile-queue 0 refused every compile, even with idle workers.
TEST_F(CompileServiceTest, AQueueOfZeroStillCompilesOnAFreeWorker) {
  CompileServiceOptions options;
  options.workers = 1;
  options.queue_capacity = 0;
  Start(options);
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  Answer first = Compile(Request(Variant(g, 0)));
  EXPECT_TRUE(first.ok()) << first.status();
  // The answer may arrive before its worker counts as free again.
  ASSERT_TRUE(Eventually([&] { return Snapshot().in_flight == 0; }));
  // With the only worker busy, nothing may wait.
  ASSERT_NO_FATAL_FAILURE(StartRunning(Request(Variant(g, 1)), 2));
  EXPECT_EQ(Compile(Request(Variant(g, 2))).status().code(), absl::StatusCode::kResourceExhausted);
  const Answer& running = ReleaseRunning();
  EXPECT_TRUE(running.ok()) << running.status();
}

TEST_F(CompileServiceTest, TheQueueWaitIsAPhaseOfTheAnswer) {
  CompileServiceOptions options;
  options.workers = 1;
  Start(options);
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  ASSERT_NO_FATAL_FAILURE(StartRunning(Request(Variant(g, 0))));
  std::unique_ptr<Call> queued = CompileAsync(Request(Variant(g, 1)));
  ASSERT_TRUE(Eventually([&] { return Snapshot().queue_depth == 1; }));
  absl::SleepFor(absl::Milliseconds(50));
  ReleaseRunning();
  queued->join();
  ASSERT_TRUE(queued->answer.ok()) << queued->answer.status();
  int64_t queue_micros = -1;
  for (const v1::PhaseTiming& t : queued->answer->timings()) {
    if (t.phase() == "queue") queue_micros = t.micros();
  }
  EXPECT_GE(queue_micros, 50000);
}

TEST_F(CompileServiceTest, ADeadlineWhileQueuedLeavesTheCompileUnrun) {
  CompileServiceOptions options;
  options.workers = 1;
  Start(options);
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  ASSERT_NO_FATAL_FAILURE(StartRunning(Request(Variant(g, 0))));
  Answer late = Compile(Request(Variant(g, 1)), absl::Milliseconds(200));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  // The client's deadline fires on its side; the server's waiter leaves the flight on its own
  // clock, and answers (counts) only after it has. Before that, a freed worker would run it.
  ASSERT_TRUE(
      Eventually([&] { return Metric("kiln_compile_requests_total{outcome=\"error\"}") == 1; }));
  const Answer& running = ReleaseRunning();
  EXPECT_TRUE(running.ok()) << running.status();
  // Its only waiter left: the queued compile is dropped when a worker reaches it.
  ASSERT_TRUE(Eventually([&] { return Metric("kiln_compiles_total{result=\"cancelled\"}") == 1; }));
  EXPECT_EQ(compiler_.started(), 1);
}

TEST_F(CompileServiceTest, AWaiterThatGivesUpLeavesTheCompileToTheOthers) {
  Start();
  const v1::CompileRequest shared = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  ASSERT_NO_FATAL_FAILURE(StartRunning(shared));
  Answer impatient = Compile(shared, absl::Milliseconds(200));
  EXPECT_EQ(impatient.status().code(), absl::StatusCode::kDeadlineExceeded);
  const Answer& patient = ReleaseRunning();
  EXPECT_TRUE(patient.ok()) << patient.status();
  EXPECT_EQ(compiler_.cancelled(), 0);
  EXPECT_EQ(compiler_.started(), 1);
}

TEST_F(CompileServiceTest, WhenEveryWaiterLeavesTheCompileIsCancelled) {
  Start();
  compiler_.Hold();
  const v1::CompileRequest request = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  Answer gone = Compile(request, absl::Milliseconds(200));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kDeadlineExceeded);
  ASSERT_TRUE(compiler_.WaitForCancelled(1));
  ASSERT_TRUE(Eventually([&] { return Metric("kiln_compiles_total{result=\"CANCELLED\"}") == 1; }));
  // The key is free again: the next request compiles afresh.
  compiler_.Release();
  Answer again = Compile(request);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_EQ(compiler_.started(), 2);
}

TEST_F(CompileServiceTest, ACompileErrorReachesEveryWaiterAndIsNotCached) {
  Start();
  compiler_.FailWith(absl::InternalError("codegen failed"));
  compiler_.Hold();
  const v1::CompileRequest request = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  std::vector<std::unique_ptr<Call>> calls;
  for (int i = 0; i < 4; ++i) calls.push_back(CompileAsync(request));
  ASSERT_TRUE(compiler_.WaitForStarted(1));
  ASSERT_TRUE(Eventually([&] { return Snapshot().deduplicated == 3; }));
  compiler_.Release();
  for (auto& c : calls) {
    c->join();
    EXPECT_EQ(c->answer.status().code(), absl::StatusCode::kInternal) << c->answer.status();
    EXPECT_EQ(c->answer.status().message(), "codegen failed");
  }
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"INTERNAL\"}"), 1);
  compiler_.FailWith(absl::OkStatus());
  Answer fixed = Compile(request);
  ASSERT_TRUE(fixed.ok()) << fixed.status();
  EXPECT_EQ(fixed->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_EQ(compiler_.started(), 2);
}

TEST_F(CompileServiceTest, AKeyThatCrashedItsCompilerIsAnsweredFromMemoryUntilForced) {
  CompileServiceOptions options;
  options.failing_key_ttl = absl::Minutes(5);
  Start(options);
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  compiler_.FailWith(MarkCrashedCompile(absl::InternalError("the worker crashed with SIGSEGV")));
  Answer first = Compile(Request(g));
  EXPECT_EQ(first.status().code(), absl::StatusCode::kInternal);
  EXPECT_EQ(compiler_.started(), 1);
  // Answered at once, without the compiler, even once it would succeed.
  compiler_.FailWith(absl::OkStatus());
  Answer again = Compile(Request(g));
  EXPECT_EQ(again.status().code(), absl::StatusCode::kInternal);
  EXPECT_THAT(again.status().message(), HasSubstr("crashed with SIGSEGV"));
  EXPECT_THAT(again.status().message(), HasSubstr("force_compile retries"));
  EXPECT_EQ(compiler_.started(), 1);
  // Another key compiles; an error that is no crash is not remembered.
  compiler_.FailWith(absl::InternalError("codegen failed"));
  EXPECT_EQ(Compile(Request(Variant(g, 1))).status().code(), absl::StatusCode::kInternal);
  compiler_.FailWith(absl::OkStatus());
  EXPECT_TRUE(Compile(Request(Variant(g, 1))).ok());
  EXPECT_EQ(compiler_.started(), 3);
  // force_compile compiles for real and clears the memory.
  v1::CompileRequest forced = Request(g);
  forced.set_force_compile(true);
  Answer retried = Compile(forced);
  ASSERT_TRUE(retried.ok()) << retried.status();
  EXPECT_EQ(compiler_.started(), 4);
  Answer hit = Compile(Request(g));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->outcome(), v1::CACHE_OUTCOME_HIT);
}

TEST_F(CompileServiceTest, OneClientsRequestsInFlightAreCapped) {
  CompileServiceOptions options;
  options.max_in_flight_per_client = 1;
  Start(options);
  const v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  ASSERT_NO_FATAL_FAILURE(StartRunning(Request(Variant(g, 0))));
  Answer refused = Compile(Request(Variant(g, 1)));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted) << refused.status();
  EXPECT_THAT(std::string(refused.status().message()), HasSubstr("requests in flight"));
  const Answer& running = ReleaseRunning();
  EXPECT_TRUE(running.ok()) << running.status();
  EXPECT_TRUE(Compile(Request(Variant(g, 1))).ok());
}

TEST_F(CompileServiceTest, ReadTokensGetHitsOnly) {
  Start({}, "read reader-token-0123456789\ncompile compile-token-0123456789\n");
  const v1::CompileRequest request = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  std::unique_ptr<client::CompileClient> reader = Connect("reader-token-0123456789");
  Answer denied = reader->Compile(request, absl::Seconds(60));
  EXPECT_EQ(denied.status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_THAT(std::string(denied.status().message()), HasSubstr("not cached (miss)"));
  EXPECT_EQ(compiler_.started(), 0);
  EXPECT_TRUE(Connect("compile-token-0123456789")->Compile(request, absl::Seconds(60)).ok());
  Answer hit = reader->Compile(request, absl::Seconds(60));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(Connect()->Compile(request, absl::Seconds(60)).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(CompileServiceTest, ADrainingServiceRefusesNewRequests) {
  Start();
  service_->BeginDrain();
  Answer refused = Compile(Request(LoadSharedGraph("mlp_fp32.fw.json")));
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_EQ(compiler_.started(), 0);
}

}  // namespace
}  // namespace kiln::server
