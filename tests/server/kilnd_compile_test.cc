// kiln.v1.Compiler end to end: a real kilnd over loopback with the real compiler behind it.
// Hits and misses with identical bytes, guard variants, roles, bad input, message limits, the
// CLI, the status page and traces. What stands in front of the compiler (single flight, the
// queue, deadlines, cancellation, rendezvous) is tested exactly against a fake compiler in
// rpc/compile_service_test.cc.

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <random>
#include <set>
#include <vector>

#include "client/compile_client.h"
#include "httplib.h"
#include "kiln/v1/compile.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "proto/base/digest.h"
#include "tests/server/kilnd_client_fixture.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::LoadSharedGraph;

using ::kiln::testing::KilndProcess;
using ::kiln::testing::TempDir;
using ::testing::AllOf;
using ::testing::HasSubstr;

v1::CompileRequest Request(const v1::Graph& g) {
  v1::CompileRequest r;
  *r.mutable_graph() = g;
  r.mutable_options()->set_target("x86_64");
  return r;
}

class KilndCompileTest : public testing::KilndClientTest {
 protected:
  void Start(const std::vector<std::string>& flags = {}) { StartKilnd(flags); }
};

TEST_F(KilndCompileTest, MissThenHitWithIdenticalBytes) {
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

TEST_F(KilndCompileTest, GuardMissAddsAVariant) {
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

TEST_F(KilndCompileTest, ReadTokensGetHitsOnly) {
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

TEST_F(KilndCompileTest, MalformedRequestsAreInvalidAndServingGoesOn) {
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

// A node whose recorded metadata disagrees with what its op computes from its inputs (a
// fuzzer found such graphs) is the request's fault, through the compile workers as in process:
// INVALID_ARGUMENT naming the node and what disagrees, and serving goes on.
TEST_F(KilndCompileTest, MetadataThatDisagreesWithTheOpIsInvalid) {
  Start();
  const v1::Graph good = LoadSharedGraph("mlp_fp32.fw.json");
  // The metadata of output 0 of the node `name` (native_layer_norm's first output, and the
  // getitem that takes it out of the tuple), 8 x 128 x 512.
  const auto meta = [](v1::Graph& g, const std::string& name) -> v1::TensorMeta* {
    for (v1::Node& n : *g.mutable_nodes()) {
      if (n.name() == name) return n.mutable_outputs(0)->mutable_tensor();
    }
    return nullptr;
  };
  // The same rank, another size.
  v1::Graph wider = good;
  ASSERT_NE(meta(wider, "native_layer_norm"), nullptr);
  meta(wider, "native_layer_norm")->mutable_sizes(2)->set_value(513);
  absl::StatusOr<v1::CompileResponse> answer = Compile(Request(wider));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument) << answer.status();
  EXPECT_THAT(std::string(answer.status().message()),
              AllOf(HasSubstr("node `native_layer_norm`"), HasSubstr("aten.native_layer_norm"),
                    HasSubstr("has size 513 at dim 2"), HasSubstr("computes 512")));
  // Another rank, 1 x 8 x 128 x 512, where the getitem agrees (else import refuses it first).
  v1::Graph deeper = good;
  for (const char* name : {"native_layer_norm", "getitem"}) {
    v1::TensorMeta* m = meta(deeper, name);
    ASSERT_NE(m, nullptr) << name;
    m->mutable_sizes()->Add()->set_value(1);
    m->mutable_strides()->Add()->set_value(8 * 128 * 512);
    for (int i = m->sizes_size() - 1; i > 0; --i) {
      m->mutable_sizes()->SwapElements(i, i - 1);
      m->mutable_strides()->SwapElements(i, i - 1);
    }
  }
  answer = Compile(Request(deeper));
  EXPECT_EQ(answer.status().code(), absl::StatusCode::kInvalidArgument) << answer.status();
  EXPECT_THAT(std::string(answer.status().message()),
              AllOf(HasSubstr("decompose"), HasSubstr("node `native_layer_norm`"),
                    HasSubstr("has rank 4"), HasSubstr("computes rank 3")));
  absl::StatusOr<v1::CompileResponse> still = Compile(Request(good));
  ASSERT_TRUE(still.ok()) << still.status();
  EXPECT_EQ(still->outcome(), v1::CACHE_OUTCOME_MISS);
}

TEST_F(KilndCompileTest, CliCompilesAndReportsTheOutcome) {
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

TEST_F(KilndCompileTest, StatusPageShowsCompilesAndTheStore) {
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
  EXPECT_THAT(page->body, HasSubstr("<h2>Compile workers</h2>"));
  EXPECT_THAT(page->body, HasSubstr("lost: 0 crash, 0 memory, 0 protocol"));

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

TEST_F(KilndCompileTest, TraceparentJoinsTheCallersTrace) {
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

TEST_F(KilndCompileTest, OversizedMessagesGetAClearError) {
  Start({"--max-message-bytes", "65536"});
  // A request over the limit: 128 KiB of stack trace on one node.
  v1::Graph huge = testing::LoadSharedGraph("mlp_fp32.fw.json");
  huge.mutable_nodes(0)->mutable_debug()->set_stack_trace(std::string(128 << 10, 'x'));
  absl::StatusOr<v1::CompileResponse> big = Compile(Request(huge));
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted) << big.status();
  // The server goes on serving.
  EXPECT_TRUE(Compile(Request(testing::LoadSharedGraph("mlp_fp32.fw.json"))).ok());
}

}  // namespace
}  // namespace kiln
