// kilnd's grpc.health.v1 service in an in-process server: Check and Watch, status changes,
// unknown services, and Shutdown ending the Watch streams.

#include "server/rpc/health_service.h"

#include <gtest/gtest.h>

#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/ext/health_check_service_server_builder_option.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"

namespace kiln::server {
namespace {

using grpc::health::v1::Health;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

class HealthServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto service = std::make_unique<HealthService>(absl::Milliseconds(20));
    service_ = service.get();
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(service_);
    builder.SetOption(std::make_unique<grpc::HealthCheckServiceServerBuilderOption>(
        std::unique_ptr<grpc::HealthCheckServiceInterface>(service.release())));
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    stub_ = Health::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  void TearDown() override { server_->Shutdown(); }

  // The status Check answers, or the error code as a negative number.
  int Check(const std::string& service) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    HealthCheckRequest request;
    request.set_service(service);
    HealthCheckResponse response;
    grpc::Status status = stub_->Check(&context, request, &response);
    return status.ok() ? response.status() : -status.error_code();
  }

  HealthService* service_ = nullptr;  // owned by server_
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<Health::Stub> stub_;
};

TEST_F(HealthServiceTest, TheServerItselfIsReachableThroughGrpcServer) {
  EXPECT_EQ(server_->GetHealthCheckService(), service_);
}

TEST_F(HealthServiceTest, CheckFollowsTheServingStatus) {
  EXPECT_EQ(Check(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("kiln.v1.Cache"), -grpc::StatusCode::NOT_FOUND);
  service_->SetServingStatus("kiln.v1.Cache", true);
  EXPECT_EQ(Check("kiln.v1.Cache"), HealthCheckResponse::SERVING);
  service_->SetServingStatus(false);
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
  EXPECT_EQ(Check("kiln.v1.Cache"), HealthCheckResponse::NOT_SERVING);
  service_->SetServingStatus("", true);
  EXPECT_EQ(Check(""), HealthCheckResponse::SERVING);
  EXPECT_EQ(Check("kiln.v1.Cache"), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchSendsEveryChangeAndEndsAtShutdown) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  service_->SetServingStatus(false);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  service_->SetServingStatus(true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);

  service_->Shutdown();
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::UNAVAILABLE);
  // Shut down for good: later changes are ignored.
  service_->SetServingStatus(true);
  EXPECT_EQ(Check(""), HealthCheckResponse::NOT_SERVING);
}

TEST_F(HealthServiceTest, WatchOfAnUnknownServiceWaitsForItToAppear) {
  grpc::ClientContext context;
  HealthCheckRequest request;
  request.set_service("later");
  std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader = stub_->Watch(&context, request);
  HealthCheckResponse response;
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVICE_UNKNOWN);
  service_->SetServingStatus("later", true);
  ASSERT_TRUE(reader->Read(&response));
  EXPECT_EQ(response.status(), HealthCheckResponse::SERVING);
  context.TryCancel();
  EXPECT_FALSE(reader->Read(&response));
  EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
}

TEST_F(HealthServiceTest, AWatchWhoseClientLeftDoesNotHoldTheServer) {
  {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReader<HealthCheckResponse>> reader =
        stub_->Watch(&context, HealthCheckRequest());
    HealthCheckResponse response;
    ASSERT_TRUE(reader->Read(&response));
    context.TryCancel();
    reader->Finish().IgnoreError();
  }
  // Shutdown without a deadline waits for every handler: the Watch must notice the
  // cancellation by itself.
  const absl::Time start = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
}

}  // namespace
}  // namespace kiln::server
