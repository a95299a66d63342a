#include "tests/fuzz/fuzz_kilnd.h"

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "server/config.h"
#include "server/kilnd.h"
#include "server/observe/json_log.h"

namespace kiln::fuzz {

struct FuzzKilnd::State {
  std::string dir;
  std::unique_ptr<server::KilnServer> server;

  ~State() {
    if (server != nullptr) {
      server->Drain(absl::ZeroDuration());
      server->Wait();
      server.reset();
    }
    std::error_code error;
    std::filesystem::remove_all(dir, error);
  }
};

FuzzKilnd::FuzzKilnd(std::unique_ptr<State> state) : state_(std::move(state)) {
  channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", state_->server->grpc_port()),
                                 grpc::InsecureChannelCredentials());
}

FuzzKilnd& FuzzKilnd::Get() {
  static FuzzKilnd* const kilnd = [] {
    auto state = std::make_unique<State>();
    const char* tmp = std::getenv("TMPDIR");
    std::string pattern =
        std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/kiln-fuzz-XXXXXX";
    Check(::mkdtemp(pattern.data()) != nullptr, "fuzz_kilnd", "a temporary directory");
    state->dir = pattern;
    server::ServerConfig config;
    config.listen = "127.0.0.1:0";
    config.metrics_listen = "";
    config.data_dir = state->dir + "/data";
    server::SetLogLevel(server::LogLevel::kError);  // inputs make kilnd log; keep it quiet
    config.compile_isolation = "none";
    config.compile_workers = 2;
    config.cache_max_bytes = int64_t{8} << 20;
    config.max_blob_bytes = int64_t{1} << 20;
    config.cache_memory_bytes = int64_t{1} << 20;
    config.rendezvous_timeout_seconds = 0.2;
    absl::StatusOr<std::unique_ptr<server::KilnServer>> started = server::KilnServer::Start(config);
    if (!started.ok()) {
      std::fprintf(stderr, "fuzz_kilnd: kilnd did not start: %s\n",
                   std::string(started.status().message()).c_str());
      std::abort();
    }
    state->server = *std::move(started);
    // Destroyed at exit, after the last input: kilnd drains and its directory goes.
    static FuzzKilnd instance(std::move(state));
    return &instance;
  }();
  return *kilnd;
}

void FuzzKilnd::CheckServing() const {
  auto stub = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, {}, &response);
  Check(status.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING,
        "fuzz_kilnd", "kilnd still serving");
}

void Check(bool ok, const char* target, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "%s: %s does not hold\n", target, what);
  std::abort();
}

void CheckDocumentedCode(const grpc::Status& status, const char* target,
                         std::initializer_list<grpc::StatusCode> documented) {
  for (grpc::StatusCode code : documented) {
    if (status.error_code() == code) return;
  }
  std::fprintf(stderr, "%s: kilnd answered code %d, which it does not document here: %s\n", target,
               static_cast<int>(status.error_code()), status.error_message().c_str());
  std::abort();
}

}  // namespace kiln::fuzz
