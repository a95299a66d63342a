// Admin.Explain through a real kilnd over loopback, and `kiln explain` against it.

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include "client/channel.h"
#include "compiler/canon/compile_key.h"
#include "kiln/v1/admin.grpc.pb.h"
#include "proto/error_detail.h"
#include "proto/fx/capture_import.h"
#include "proto/rpc/grpc_status.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::LoadSharedGraph;

using ::kiln::testing::KilndProcess;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

class AdminServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(dir_.path() + "/data");
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd_.emplace(*std::move(k));
    client::ChannelOptions options;
    options.address = kilnd_->address();
    absl::StatusOr<std::shared_ptr<grpc::Channel>> channel = client::CreateChannel(options);
    ASSERT_TRUE(channel.ok()) << channel.status();
    stub_ = v1::Admin::NewStub(*channel);
  }

  grpc::Status Explain(const v1::ExplainRequest& request, v1::ExplainResponse* response) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    return stub_->Explain(&context, request, response);
  }

  static v1::KeySource Source(const v1::Graph& g, const std::string& target = "cuda:sm_90") {
    v1::KeySource s;
    *s.mutable_request()->mutable_graph() = g;
    s.mutable_request()->mutable_options()->set_target(target);
    return s;
  }

  TempDir dir_;
  std::optional<KilndProcess> kilnd_;
  std::unique_ptr<v1::Admin::Stub> stub_;
};

TEST_F(AdminServiceTest, ExplainsTheFirstDifferingNodeAndField) {
  const v1::Graph a = LoadSharedGraph("mlp_fp32.fw.json");
  v1::Graph b = a;
  std::string dropout;
  for (v1::Node& n : *b.mutable_nodes()) {
    if (n.target() == "aten.native_dropout.default") {
      n.mutable_args(1)->set_float_value(0.25);
      dropout = n.name();
    }
  }
  v1::ExplainRequest request;
  *request.mutable_a() = Source(a);
  *request.mutable_b() = Source(b);
  v1::ExplainResponse response;
  grpc::Status status = Explain(request, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_FALSE(response.equal());
  EXPECT_EQ(response.component(), "graph");
  EXPECT_EQ(response.field(), "args[1]");
  EXPECT_THAT(response.node(), HasSubstr(dropout));
  EXPECT_THAT(response.description(), HasSubstr("(aten.native_dropout.default) arg 1 (p): "
                                                "0.1 vs 0.25"));

  *request.mutable_b() = Source(a);
  ASSERT_TRUE(Explain(request, &response).ok());
  EXPECT_TRUE(response.equal());

  *request.mutable_b() = Source(a, "x86_64");
  ASSERT_TRUE(Explain(request, &response).ok());
  EXPECT_EQ(response.component(), "toolchain");
}

TEST_F(AdminServiceTest, RemembersKeysItDerived) {
  const v1::Graph a = LoadSharedGraph("mlp_fp32.bw.json");
  v1::Graph b = a;
  b.mutable_inputs(0)->mutable_meta()->mutable_tensor()->set_dtype(v1::DTYPE_FLOAT16);
  v1::ExplainRequest request;
  *request.mutable_a() = Source(a);
  *request.mutable_b() = Source(b);
  v1::ExplainResponse by_graphs;
  ASSERT_TRUE(Explain(request, &by_graphs).ok());
  EXPECT_EQ(by_graphs.component(), "inputs");
  EXPECT_EQ(by_graphs.field(), "meta.dtype");

  // The same question by key: the server has seen `a`, and answers from its record.
  absl::StatusOr<canon::KeyedGraph> keyed = canon::KeyGraph(a, request.a().request().options());
  ASSERT_TRUE(keyed.ok()) << keyed.status();
  v1::ExplainRequest by_key;
  by_key.mutable_a()->set_compile_key(keyed->record.compile_key());
  *by_key.mutable_b() = Source(b);
  v1::ExplainResponse response;
  grpc::Status status = Explain(by_key, &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.component(), "inputs");
  EXPECT_EQ(response.node_index(), by_graphs.node_index());

  by_key.mutable_a()->set_compile_key(std::string(64, '0'));
  status = Explain(by_key, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND) << status.error_message();
  by_key.mutable_a()->set_compile_key("not-a-key");
  status = Explain(by_key, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
}

TEST_F(AdminServiceTest, InvalidGraphIsInvalidArgumentNamingSideNodeAndField) {
  v1::Graph bad = LoadSharedGraph("mlp_fp32.fw.json");
  bad.mutable_nodes(0)->mutable_outputs(0)->mutable_tensor()->mutable_sizes(0)->set_value(-1);
  v1::ExplainRequest request;
  *request.mutable_a() = Source(LoadSharedGraph("mlp_fp32.fw.json"));
  *request.mutable_b() = Source(bad);
  v1::ExplainResponse response;
  grpc::Status status = Explain(request, &response);
  ASSERT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
  absl::Status back = FromGrpcStatus(status);
  auto detail = ErrorDetailOf(back);
  ASSERT_TRUE(detail.has_value());
  ASSERT_EQ(detail->violations_size(), 1);
  EXPECT_EQ(detail->violations(0).node(), bad.nodes(0).name());
  EXPECT_EQ(detail->violations(0).field(), "b.request.outputs[0].sizes[0]");

  *request.mutable_b() = Source(LoadSharedGraph("mlp_fp32.fw.json"), "riscv");
  status = Explain(request, &response);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
}

TEST_F(AdminServiceTest, StatsAndEviction) {
  grpc::ClientContext context;
  v1::ServerStats stats;
  ASSERT_TRUE(stub_->GetServerStats(&context, v1::ServerStatsRequest(), &stats).ok());
  EXPECT_FALSE(stats.version().empty());
  EXPECT_THAT(stats.toolchain(), HasSubstr("llvm 16"));
  EXPECT_EQ(stats.cache().blobs(), 0);

  grpc::ClientContext evict_context;
  v1::EvictRequest evict;
  evict.set_compile_key(std::string(64, 'a'));
  v1::EvictResponse evicted;
  EXPECT_EQ(stub_->Evict(&evict_context, evict, &evicted).error_code(),
            grpc::StatusCode::NOT_FOUND);

  grpc::ClientContext bad_context;
  evict.set_compile_key("not-a-key");
  EXPECT_EQ(stub_->Evict(&bad_context, evict, &evicted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  grpc::ClientContext target_context;
  evict.set_target_bytes(0);
  ASSERT_TRUE(stub_->Evict(&target_context, evict, &evicted).ok());
  EXPECT_EQ(evicted.evicted_entries(), 0);
}

TEST_F(AdminServiceTest, CliExplainsTwoGraphFiles) {
  const std::string g = testing::GraphsDir();
  absl::StatusOr<testing::RunResult> r =
      testing::Run({testing::KilnCliPath(), "explain", g + "/mlp_fp32.fw.json",
                    g + "/mlp_automatic_dynamic2.fw.json", "--server", kilnd_->address()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_EQ(r->out, "differs in component inputs: 7 vs 8 inputs\n");

  // The first (static) dynamic-shape compile is the fp32 graph: same key.
  r = testing::Run({testing::KilnCliPath(), "explain", g + "/mlp_fp32.bw.json",
                    g + "/mlp_automatic_dynamic.bw.json", "--server", kilnd_->address()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 0) << r->err;
  EXPECT_THAT(r->out, HasSubstr("the keys are equal"));

  // A binary kiln.v1.Graph works as well as the capture format.
  TempDir tmp;
  const std::string pb = tmp.path() + "/g.pb";
  r = testing::Run(
      {testing::KilnCliPath(), "graph", "import-fx", g + "/mlp_fp32.fw.json", "-o", pb});
  ASSERT_TRUE(r.ok() && r->exit_code == 0);
  r = testing::Run({testing::KilnCliPath(), "explain", pb, g + "/mlp_fp32.fw.json", "--target",
                    "x86_64", "--server", kilnd_->address()});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_THAT(r->out, HasSubstr("the keys are equal"));
}

}  // namespace
}  // namespace kiln
