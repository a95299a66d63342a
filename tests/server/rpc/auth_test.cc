// Tokens with roles, TLS and mutual TLS, with certificates made by the test.

#include "server/rpc/auth.h"

#include <gtest/gtest.h>

#include <grpcpp/grpcpp.h>

#include <fstream>
#include <optional>

#include "client/cache_client.h"
#include "client/health.h"
#include "kiln/v1/admin.grpc.pb.h"
#include "kiln/v1/cache.grpc.pb.h"
#include "proto/base/digest.h"
#include "tests/testing/certs.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

using ::kiln::testing::KilndProcess;
using ::kiln::testing::TempDir;

TEST(AuthorizerTest, ParsesTokenFile) {
  auto a = server::Authorizer::FromText(
      "# tokens\n"
      "read    rrrrrrrrrrrrrrrrrrrr  dashboards\n"
      "compile cccccccccccccccccccc\n"
      "admin   aaaaaaaaaaaaaaaaaaaa oncall  # the on-call engineer\n");
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE((*a)->enabled());
}

TEST(AuthorizerTest, BadLinesAreNamed) {
  struct Case {
    const char* text;
    const char* expected;
  };
  const Case cases[] = {
      {"reader rrrrrrrrrrrrrrrrrrrr\n", "line 1: expected `ROLE TOKEN [NAME]`"},
      {"read short\n", "line 1: token shorter than 16 characters"},
      {"\nread rrrrrrrrrrrrrrrrrrrr\nadmin rrrrrrrrrrrrrrrrrrrr\n", "line 3: duplicate token"},
      {"# nothing\n", "the token file holds no tokens"},
  };
  for (const Case& c : cases) {
    auto a = server::Authorizer::FromText(c.text);
    ASSERT_FALSE(a.ok()) << c.text;
    EXPECT_EQ(a.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(a.status().message().find(c.expected), std::string::npos) << a.status();
  }
}

class TlsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    absl::StatusOr<testing::TestPki> pki = testing::MakeTestPki(dir_.path());
    ASSERT_TRUE(pki.ok()) << pki.status();
    pki_ = *pki;
  }
  client::ChannelOptions Tls(const KilndProcess& k) const {
    client::ChannelOptions o;
    o.address = k.address();
    o.ca_cert_file = pki_.ca_cert;
    return o;
  }
  absl::StatusOr<client::ServingStatus> Health(const client::ChannelOptions& o) {
    return client::CheckHealth(o, "", absl::Seconds(3));
  }

  TempDir dir_;
  testing::TestPki pki_;
};

TEST_F(TlsTest, ServerTls) {
  absl::StatusOr<KilndProcess> kilnd = KilndProcess::Start(
      dir_.path() + "/data", {"--tls-cert", pki_.server_cert, "--tls-key", pki_.server_key});
  ASSERT_TRUE(kilnd.ok()) << kilnd.status();
  auto ok = Health(Tls(*kilnd));
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, client::ServingStatus::kServing);

  client::ChannelOptions plaintext;
  plaintext.address = kilnd->address();
  EXPECT_FALSE(Health(plaintext).ok());

  client::ChannelOptions wrong_ca = Tls(*kilnd);
  wrong_ca.ca_cert_file = pki_.other_ca_cert;
  EXPECT_FALSE(Health(wrong_ca).ok());
}

TEST_F(TlsTest, MutualTlsRequiresAClientCertificate) {
  absl::StatusOr<KilndProcess> kilnd = KilndProcess::Start(
      dir_.path() + "/data", {"--tls-cert", pki_.server_cert, "--tls-key", pki_.server_key,
                              "--tls-client-ca", pki_.ca_cert});
  ASSERT_TRUE(kilnd.ok()) << kilnd.status();
  EXPECT_FALSE(Health(Tls(*kilnd)).ok()) << "a client without a certificate got through";

  client::ChannelOptions mtls = Tls(*kilnd);
  mtls.client_cert_file = pki_.client_cert;
  mtls.client_key_file = pki_.client_key;
  auto ok = Health(mtls);
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(*ok, client::ServingStatus::kServing);
}

TEST_F(TlsTest, TlsAllowsNonLoopbackListenAndUnreadableKeyIsReported) {
  absl::StatusOr<testing::RunResult> r = testing::Run(
      {testing::KilndPath(), "--listen", "0.0.0.0:0", "--metrics-listen", "", "--data-dir",
       dir_.path() + "/d2", "--tls-cert", pki_.server_cert, "--tls-key", dir_.path() + "/nope"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->exit_code, 1);
  EXPECT_NE(r->err.find("--tls-key: cannot read"), std::string::npos) << r->err;
}

}  // namespace
}  // namespace kiln

namespace kiln {
namespace {

// Roles across the services: read < compile < admin.
class RolesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string tokens = dir_.path() + "/tokens";
    std::ofstream(tokens) << "read    reader-token-0123456789  dashboards\n"
                             "compile compile-token-0123456789 trainer\n"
                             "admin   admin-token-01234567890  oncall\n";
    absl::StatusOr<KilndProcess> k =
        KilndProcess::Start(dir_.path() + "/data", {"--token-file", tokens});
    ASSERT_TRUE(k.ok()) << k.status();
    kilnd_.emplace(*std::move(k));
  }
  grpc::StatusCode Stat(const std::string& token) {
    auto channel = grpc::CreateChannel(kilnd_->address(), grpc::InsecureChannelCredentials());
    auto stub = v1::Cache::NewStub(channel);
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    v1::CacheStats stats;
    return stub->Stat(&context, v1::StatRequest(), &stats).error_code();
  }
  grpc::StatusCode PutAction(const std::string& token) {
    auto channel = grpc::CreateChannel(kilnd_->address(), grpc::InsecureChannelCredentials());
    auto stub = v1::Cache::NewStub(channel);
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::PutActionRequest request;
    request.set_compile_key(std::string(64, 'b'));
    v1::PutActionResponse response;
    return stub->PutAction(&context, request, &response).error_code();
  }
  grpc::StatusCode ServerStats(const std::string& token) {
    auto channel = grpc::CreateChannel(kilnd_->address(), grpc::InsecureChannelCredentials());
    auto stub = v1::Admin::NewStub(channel);
    grpc::ClientContext context;
    context.AddMetadata("authorization", "Bearer " + token);
    v1::ServerStats stats;
    return stub->GetServerStats(&context, v1::ServerStatsRequest(), &stats).error_code();
  }
  TempDir dir_;
  std::optional<KilndProcess> kilnd_;
};

TEST_F(RolesTest, BlobReadsNeedReadAndWritesNeedCompileInOneMessageOrInChunks) {
  client::ChannelOptions o;
  o.address = kilnd_->address();
  o.token = "reader-token-0123456789";
  absl::StatusOr<std::unique_ptr<client::CacheClient>> reader = client::CacheClient::Create(o);
  o.token = "compile-token-0123456789";
  absl::StatusOr<std::unique_ptr<client::CacheClient>> writer = client::CacheClient::Create(o);
  o.token = "";
  absl::StatusOr<std::unique_ptr<client::CacheClient>> anonymous = client::CacheClient::Create(o);
  ASSERT_TRUE(reader.ok() && writer.ok() && anonymous.ok());
  // The first travels in unary calls (PutWhole, GetWhole), the second in chunks.
  const std::string small = "artifact bytes", large(5 << 20, 'k');
  for (const std::string* bytes : {&small, &large}) {
    absl::Status s = (*reader)->Put(*bytes).status();
    EXPECT_TRUE(absl::IsPermissionDenied(s)) << s;
    s = (*anonymous)->Put(*bytes).status();
    EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
    ASSERT_TRUE((*writer)->Put(*bytes).ok());
    absl::StatusOr<std::string> got = (*reader)->Get(DigestOf(*bytes));
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_TRUE(*got == *bytes);
    s = (*anonymous)->Get(DigestOf(*bytes)).status();
    EXPECT_TRUE(absl::IsUnauthenticated(s)) << s;
  }
}

TEST_F(RolesTest, MissingOrUnknownTokenIsUnauthenticated) {
  EXPECT_EQ(Stat(""), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Stat("not-a-token-of-this-server"), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(RolesTest, RolesGateEachCall) {
  EXPECT_EQ(Stat("reader-token-0123456789"), grpc::StatusCode::OK);
  // A write needs `compile`: the reader is refused before the request is even looked at.
  EXPECT_EQ(PutAction("reader-token-0123456789"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(PutAction("compile-token-0123456789"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ServerStats("compile-token-0123456789"), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(ServerStats("admin-token-01234567890"), grpc::StatusCode::OK);
  // The health service stays open for load balancers.
  client::ChannelOptions o;
  o.address = kilnd_->address();
  auto health = client::CheckHealth(o, "", absl::Seconds(3));
  ASSERT_TRUE(health.ok()) << health.status();
}

}  // namespace
}  // namespace kiln
