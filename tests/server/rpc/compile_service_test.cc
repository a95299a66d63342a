// kiln.v1.Compiler through a real kilnd over loopback: hits and misses, single-flight,
// rank rendezvous, guard variants, queue limits, deadlines, cancellation, roles, bad input.

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <atomic>
#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <vector>

#include "client/compile_client.h"
#include "httplib.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "proto/base/digest.h"
#include "proto/error_detail.h"
#include "proto/fx/capture_import.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::LoadSharedGraph;

using ::kiln::testing::KilndProcess;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

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

class CompileServiceTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& flags = {}) {
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(dir_.path() + "/data", flags);
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd_.emplace(*std::move(k));
    client::ChannelOptions o;
    o.address = kilnd_->address();
    auto c = client::CompileClient::Connect(o);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }
  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r,
                                              absl::Duration timeout = absl::Seconds(120)) {
    return client_->Compile(r, timeout);
  }
  double Metric(const std::string& series) {
    absl::StatusOr<double> v = testing::ScrapeMetric(kilnd_->http_port(), series);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }

  TempDir dir_;
  std::optional<KilndProcess> kilnd_;
  std::unique_ptr<client::CompileClient> client_;
};

TEST_F(CompileServiceTest, MissThenHitWithIdenticalBytes) {
  Start();
  const v1::CompileRequest request = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  absl::StatusOr<v1::CompileResponse> first = Compile(request);
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->outcome(), v1::CACHE_OUTCOME_MISS);
  EXPECT_EQ(first->artifact_digest().hash(), Sha256Hex(first->compiled_graph()));
  v1::CompiledGraph compiled;
  ASSERT_TRUE(compiled.ParseFromString(first->compiled_graph()));
  EXPECT_EQ(compiled.compile_key(), first->compile_key());
  EXPECT_EQ(compiled.decision_digest(), first->decision_digest());
  EXPECT_FALSE(first->timings().empty());

  absl::StatusOr<v1::CompileResponse> second = Compile(request);
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(second->compiled_graph(), first->compiled_graph());
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 1);
  EXPECT_EQ(Metric("kiln_compile_requests_total{outcome=\"hit\"}"), 1);
  EXPECT_EQ(Metric("kiln_compile_requests_total{outcome=\"miss\"}"), 1);
}

TEST_F(CompileServiceTest, ConcurrentIdenticalRequestsCompileOnce) {
  Start();
  const v1::CompileRequest request = Request(LoadSharedGraph("nanogpt_fp32.fw.json"));
  constexpr int kClients = 256;
  std::vector<absl::StatusOr<v1::CompileResponse>> answers(kClients, absl::UnknownError("not run"));
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] { answers[i] = Compile(request, absl::Seconds(300)); });
  }
  for (auto& t : threads) t.join();
  ASSERT_TRUE(answers[0].ok()) << answers[0].status();
  for (int i = 0; i < kClients; ++i) {
    ASSERT_TRUE(answers[i].ok()) << i << ": " << answers[i].status();
    EXPECT_EQ(answers[i]->compiled_graph(), answers[0]->compiled_graph()) << i;
  }
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 1);
}

// Runs `world` ranks of one job at once; rank r sends graphs[r] (nullopt: absent).
std::vector<absl::StatusOr<v1::CompileResponse>> RunJob(
    client::CompileClient& client, const std::vector<std::optional<v1::Graph>>& graphs,
    const std::string& job) {
  const int world = static_cast<int>(graphs.size());
  std::vector<absl::StatusOr<v1::CompileResponse>> out(world, absl::UnknownError("absent"));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    if (!graphs[r].has_value()) continue;
    threads.emplace_back([&, r] {
      v1::CompileRequest request = Request(*graphs[r]);
      request.mutable_job()->set_job_id(job);
      request.mutable_job()->set_rank(r);
      request.mutable_job()->set_world_size(world);
      request.mutable_job()->set_sequence(0);
      out[r] = client.Compile(request, absl::Seconds(120));
    });
  }
  for (auto& t : threads) t.join();
  return out;
}

TEST_F(CompileServiceTest, EightRanksWithOneGraphCompileOnce) {
  Start();
  v1::Graph g = LoadSharedGraph("mlp_fp32.bw.json");
  std::vector<std::optional<v1::Graph>> graphs(8, g);
  // Ranks run on different devices; the key does not care.
  for (int r = 0; r < 8; ++r) {
    for (v1::GraphInput& in : *graphs[r]->mutable_inputs()) {
      if (in.meta().has_tensor())
        in.mutable_meta()->mutable_tensor()->mutable_device()->set_index(r);
    }
  }
  auto answers = RunJob(*client_, graphs, "job-same");
  for (int r = 0; r < 8; ++r) {
    ASSERT_TRUE(answers[r].ok()) << r << ": " << answers[r].status();
    EXPECT_EQ(answers[r]->compiled_graph(), answers[0]->compiled_graph());
    EXPECT_EQ(answers[r]->decision_digest(), answers[0]->decision_digest());
    EXPECT_EQ(answers[r]->outcome(), answers[0]->outcome()) << "hit/miss is unanimous";
    EXPECT_EQ(answers[r]->rendezvous().present_ranks_size(), 8);
  }
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 1);
}

TEST_F(CompileServiceTest, DivergentRankIsNamedToEveryRank) {
  Start();
  v1::Graph g = LoadSharedGraph("mlp_fp32.fw.json");
  std::vector<std::optional<v1::Graph>> graphs(8, g);
  graphs[5] = Variant(g, 0);
  auto answers = RunJob(*client_, graphs, "job-diverge");
  for (int r = 0; r < 8; ++r) {
    const absl::Status s = answers[r].status();
    ASSERT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << r << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("ranks [5]"));
    auto detail = ErrorDetailOf(s);
    ASSERT_TRUE(detail.has_value());
    ASSERT_EQ(detail->divergence().groups_size(), 2);
    EXPECT_EQ(detail->divergence().groups(1).ranks(0), 5);
    ASSERT_EQ(detail->divergence().differences_size(), 1);
    EXPECT_THAT(detail->divergence().differences(0), HasSubstr("native_layer_norm"));
  }
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 0);
}

TEST_F(CompileServiceTest, MissingRankFailsEveryRankByDefault) {
  Start({"--rendezvous-timeout", "1"});
  std::vector<std::optional<v1::Graph>> graphs(8, LoadSharedGraph("mlp_fp32.fw.json"));
  graphs[3].reset();
  auto answers = RunJob(*client_, graphs, "job-missing");
  for (int r = 0; r < 8; ++r) {
    if (r == 3) continue;
    const absl::Status s = answers[r].status();
    ASSERT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << r << ": " << s;
    EXPECT_THAT(std::string(s.message()), HasSubstr("ranks 3 of 8 did not arrive"));
    auto detail = ErrorDetailOf(s);
    ASSERT_TRUE(detail.has_value());
    EXPECT_THAT(detail->missing_ranks(), ::testing::ElementsAre(3));
  }
}

TEST_F(CompileServiceTest, MissingRankCanBeLeftBehind) {
  Start({"--rendezvous-timeout", "1", "--rendezvous-policy", "proceed"});
  std::vector<std::optional<v1::Graph>> graphs(8, LoadSharedGraph("mlp_fp32.fw.json"));
  graphs[3].reset();
  auto answers = RunJob(*client_, graphs, "job-proceed");
  for (int r = 0; r < 8; ++r) {
    if (r == 3) continue;
    ASSERT_TRUE(answers[r].ok()) << r << ": " << answers[r].status();
    EXPECT_THAT(answers[r]->rendezvous().missing_ranks(), ::testing::ElementsAre(3));
    EXPECT_EQ(answers[r]->compiled_graph(), answers[0]->compiled_graph());
  }
}

TEST_F(CompileServiceTest, GuardMissAddsAVariant) {
  Start();
  v1::Graph g = LoadSharedGraph("mlp_automatic_dynamic2.fw.json");
  ASSERT_EQ(g.symbols_size(), 1);
  g.mutable_guards()->set_python_expr("L['t0'] == 16");
  absl::StatusOr<v1::CompileResponse> at16 = Compile(Request(g));
  ASSERT_TRUE(at16.ok()) << at16.status();
  EXPECT_EQ(at16->outcome(), v1::CACHE_OUTCOME_MISS);

  v1::Graph g32 = g;
  g32.mutable_symbols(0)->set_int_hint(32);
  g32.mutable_guards()->set_python_expr("L['t0'] == 32");
  absl::StatusOr<v1::CompileResponse> at32 = Compile(Request(g32));
  ASSERT_TRUE(at32.ok()) << at32.status();
  EXPECT_EQ(at32->outcome(), v1::CACHE_OUTCOME_GUARD_MISS);
  EXPECT_EQ(at32->compile_key(), at16->compile_key());
  EXPECT_THAT(at32->failed_guard(), HasSubstr("L['t0'] == 16"));

  absl::StatusOr<v1::CompileResponse> again = Compile(Request(g));
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(again->compiled_graph(), at16->compiled_graph());
}

TEST_F(CompileServiceTest, FullQueueIsRefusedWithRetryHint) {
  Start({"--compile-workers", "1", "--compile-queue", "1"});
  const v1::Graph g = LoadSharedGraph("nanogpt_fp32.bw.json");
  constexpr int kGraphs = 12;
  std::vector<absl::StatusOr<v1::CompileResponse>> answers(kGraphs, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int i = 0; i < kGraphs; ++i) {
    threads.emplace_back([&, i] { answers[i] = Compile(Request(Variant(g, i))); });
  }
  for (auto& t : threads) t.join();
  int refused = 0, compiled = 0;
  for (const auto& a : answers) {
    if (a.ok()) {
      ++compiled;
      continue;
    }
    ASSERT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted) << a.status();
    auto detail = ErrorDetailOf(a.status());
    ASSERT_TRUE(detail.has_value());
    EXPECT_GT(detail->retry_after_ms(), 0);
    ++refused;
  }
  EXPECT_GE(compiled, 1);
  EXPECT_GE(refused, 1);
  // The server still answers.
  absl::StatusOr<v1::CompileResponse> after = Compile(Request(LoadSharedGraph("mlp_fp32.fw.json")));
  EXPECT_TRUE(after.ok()) << after.status();
}

TEST_F(CompileServiceTest, DeadlineWhileQueuedAndCancelledWaiters) {
  Start({"--compile-workers", "1", "--compile-queue", "8"});
  const v1::Graph big = LoadSharedGraph("nanogpt_fp32.bw.json");
  // Occupy the only worker.
  std::thread busy([&] { EXPECT_TRUE(Compile(Request(big)).ok()); });
  absl::SleepFor(absl::Milliseconds(50));
  absl::StatusOr<v1::CompileResponse> late =
      Compile(Request(Variant(big, 1)), absl::Milliseconds(100));
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();

  // Two waiters on one compile: the one that gives up does not take the other's answer away.
  const v1::CompileRequest shared = Request(Variant(big, 2));
  std::thread patient([&] {
    absl::StatusOr<v1::CompileResponse> r = Compile(shared);
    EXPECT_TRUE(r.ok()) << r.status();
  });
  absl::StatusOr<v1::CompileResponse> impatient = Compile(shared, absl::Milliseconds(200));
  EXPECT_EQ(impatient.status().code(), absl::StatusCode::kDeadlineExceeded);
  patient.join();
  busy.join();
}

TEST_F(CompileServiceTest, ReadTokensGetHitsOnly) {
  const std::string tokens = dir_.path() + "/tokens";
  std::ofstream(tokens) << "read reader-token-0123456789\ncompile compile-token-0123456789\n";
  Start({"--token-file", tokens});
  auto as = [&](const std::string& token) {
    client::ChannelOptions o;
    o.address = kilnd_->address();
    o.token = token;
    return *client::CompileClient::Connect(o);
  };
  const v1::CompileRequest request = Request(LoadSharedGraph("mlp_fp32.fw.json"));
  auto reader = as("reader-token-0123456789");
  EXPECT_EQ(reader->Compile(request, absl::Seconds(60)).status().code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_TRUE(as("compile-token-0123456789")->Compile(request, absl::Seconds(60)).ok());
  absl::StatusOr<v1::CompileResponse> hit = reader->Compile(request, absl::Seconds(60));
  ASSERT_TRUE(hit.ok()) << hit.status();
  EXPECT_EQ(hit->outcome(), v1::CACHE_OUTCOME_HIT);
  EXPECT_EQ(as("")->Compile(request, absl::Seconds(60)).status().code(),
            absl::StatusCode::kUnauthenticated);
}

TEST_F(CompileServiceTest, MalformedRequestsAreInvalidAndServingGoesOn) {
  Start();
  const v1::Graph good = LoadSharedGraph("mlp_fp32.fw.json");
  absl::StatusOr<v1::CompileResponse> reference = Compile(Request(good));
  ASSERT_TRUE(reference.ok()) << reference.status();
  std::mt19937 rng(1234);
  int invalid = 0;
  for (int i = 0; i < 2000; ++i) {
    v1::CompileRequest r = Request(good);
    v1::Graph* g = r.mutable_graph();
    v1::Node* n = g->mutable_nodes(rng() % g->nodes_size());
    switch (i % 8) {
      case 0:  // a reference to nowhere
        for (v1::Argument& a : *n->mutable_args()) {
          if (a.has_ref()) a.mutable_ref()->set_node("ghost_" + std::to_string(i));
        }
        if (n->args_size() == 0) n->add_args()->mutable_ref()->set_node("ghost");
        break;
      case 1:  // a negative size
        n->mutable_outputs(0)->mutable_tensor()->mutable_sizes(0)->set_value(-1 - (i % 7));
        break;
      case 2:  // a huge size
        n->mutable_outputs(0)->mutable_tensor()->mutable_sizes(0)->set_value(int64_t{1} << 62);
        break;
      case 3:  // an unknown dtype
        n->mutable_outputs(0)->mutable_tensor()->set_dtype(static_cast<v1::DType>(90 + i % 9));
        break;
      case 4:  // an unparsable guard
        g->mutable_guards()->add_shape_env("Eq(s0,, " + std::to_string(i));
        break;
      case 5:  // truncated: the tail of the graph is gone but the output still names it
        g->mutable_nodes()->DeleteSubrange(g->nodes_size() / 2, g->nodes_size() / 2);
        break;
      case 6:  // a bad target
        r.mutable_options()->set_target("riscv" + std::to_string(i));
        break;
      case 7: {  // random bytes as a graph, when they parse at all
        std::string bytes(64 + rng() % 512, '\0');
        for (char& c : bytes) c = static_cast<char>(rng());
        v1::Graph random;
        if (!random.ParseFromString(bytes)) random.add_nodes()->set_name("x");
        *g = random;
        break;
      }
    }
    absl::StatusOr<v1::CompileResponse> answer = Compile(r, absl::Seconds(30));
    ASSERT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument)
        << "mutation " << i % 8 << ": " << answer.status();
    ++invalid;
    if (i % 250 == 0) {
      absl::StatusOr<v1::CompileResponse> still = Compile(Request(good));
      ASSERT_TRUE(still.ok()) << still.status();
      EXPECT_EQ(still->outcome(), v1::CACHE_OUTCOME_HIT);
      EXPECT_EQ(still->compiled_graph(), reference->compiled_graph());
    }
  }
  EXPECT_EQ(invalid, 2000);
  EXPECT_EQ(Metric("kiln_compiles_total{result=\"ok\"}"), 1);
}

TEST_F(CompileServiceTest, CliCompilesAndReportsTheOutcome) {
  Start();
  const std::string out = dir_.path() + "/artifact.pb";
  const std::vector<std::string> argv = {testing::KilnCliPath(),
                                         "compile",
                                         testing::GraphsDir() + "/mlp_fp32.fw.json",
                                         "--server",
                                         kilnd_->address(),
                                         "--target",
                                         "x86_64",
                                         "-o",
                                         out};
  absl::StatusOr<testing::RunResult> first = testing::Run(argv, absl::Seconds(120));
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->exit_code, 0) << first->err;
  EXPECT_THAT(first->out, HasSubstr("miss"));
  absl::StatusOr<testing::RunResult> second = testing::Run(argv, absl::Seconds(120));
  ASSERT_TRUE(second.ok());
  EXPECT_THAT(second->out, HasSubstr("hit"));
  absl::StatusOr<std::string> bytes = testing::ReadFile(out);
  ASSERT_TRUE(bytes.ok());
  v1::CompiledGraph compiled;
  EXPECT_TRUE(compiled.ParseFromString(*bytes));
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

TEST_F(CompileServiceTest, StatusPageShowsCompilesAndTheStore) {
  Start();
  ASSERT_TRUE(Compile(Request(testing::LoadSharedGraph("mlp_fp32.fw.json"))).ok());
  httplib::Client http("127.0.0.1", kilnd_->http_port());
  auto page = http.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 200);
  EXPECT_THAT(page->get_header_value("Content-Type"), HasSubstr("text/html"));
  EXPECT_THAT(page->body, HasSubstr("<h1>kilnd "));
  EXPECT_THAT(page->body, HasSubstr("Recent compiles"));
  EXPECT_THAT(page->body, HasSubstr("miss"));
  EXPECT_THAT(page->body, HasSubstr("codegen"));
  EXPECT_THAT(page->body, HasSubstr("of 16.0 GiB"));

  auto traces = http.Get("/debug/traces");
  ASSERT_TRUE(traces);
  nlohmann::json chrome = nlohmann::json::parse(traces->body);
  std::set<std::string> spans;
  for (const auto& e : chrome["traceEvents"]) {
    if (e["ph"] == "X") spans.insert(e["name"].get<std::string>());
  }
  for (const char* span :
       {"kiln.v1.Compiler/Compile", "key", "lookup", "compile_wait", "queue", "codegen", "store"}) {
    EXPECT_TRUE(spans.contains(span)) << span;
  }
}

TEST_F(CompileServiceTest, TraceparentJoinsTheCallersTrace) {
  Start();
  const std::string parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
  ASSERT_TRUE(client_
                  ->Compile(Request(testing::LoadSharedGraph("mlp_fp32.fw.json")),
                            absl::Seconds(60), parent)
                  .ok());
  httplib::Client http("127.0.0.1", kilnd_->http_port());
  auto traces = http.Get("/debug/traces");
  ASSERT_TRUE(traces);
  nlohmann::json chrome = nlohmann::json::parse(traces->body);
  bool joined = false;
  for (const auto& e : chrome["traceEvents"]) {
    if (e["ph"] == "X" && e["name"] == "kiln.v1.Compiler/Compile") {
      EXPECT_EQ(e["args"]["trace_id"], "4bf92f3577b34da6a3ce929d0e0e4736");
      EXPECT_EQ(e["args"]["parent_span_id"], "00f067aa0ba902b7");
      joined = true;
    }
  }
  EXPECT_TRUE(joined);
}

TEST_F(CompileServiceTest, OversizedMessagesAndBusyClientsGetClearErrors) {
  Start({"--max-message-bytes", "65536", "--max-in-flight-per-client", "1", "--compile-workers",
         "1"});
  // A request over the limit: 128 KiB of stack trace on one node.
  v1::Graph huge = testing::LoadSharedGraph("mlp_fp32.fw.json");
  huge.mutable_nodes(0)->mutable_debug()->set_stack_trace(std::string(128 << 10, 'x'));
  absl::StatusOr<v1::CompileResponse> big = Compile(Request(huge));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  // One request in flight per client: a second concurrent one from the same peer is refused.
  const v1::Graph g = testing::LoadSharedGraph("mlp_fp32.bw.json");
  std::vector<absl::StatusOr<v1::CompileResponse>> answers(4, absl::UnknownError(""));
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&, i] { answers[i] = Compile(Request(Variant(g, i))); });
  }
  for (auto& t : threads) t.join();
  int refused = 0;
  for (const auto& a : answers) {
    if (a.ok()) continue;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kResourceExhausted) << a.status();
    EXPECT_THAT(std::string(a.status().message()), HasSubstr("requests in flight"));
    ++refused;
  }
  EXPECT_GE(refused, 1);
}

}  // namespace
}  // namespace kiln
