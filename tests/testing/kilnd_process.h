#pragma once

// A kilnd child process on ephemeral loopback ports, for integration tests.

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "tests/testing/subprocess.h"

namespace kiln::testing {

class KilndProcess {
 public:
  // Starts kilnd with `--listen LISTEN --metrics-listen 127.0.0.1:0 --data-dir DIR` plus
  // `extra_flags`, and waits for its "serving" log line. A fleet's members need their
  // addresses before they start: `listen` names one (testing::FreeLoopbackPort()).
  static absl::StatusOr<KilndProcess> Start(const std::string& data_dir,
                                            const std::vector<std::string>& extra_flags = {},
                                            const std::string& listen = "127.0.0.1:0");

  int grpc_port() const { return grpc_port_; }
  int http_port() const { return http_port_; }
  int blob_port() const { return blob_port_; }  // 0 without --blob-listen
  int resp_port() const { return resp_port_; }  // 0 without --resp-listen
  std::string address() const { return "127.0.0.1:" + std::to_string(grpc_port_); }
  Subprocess& process() { return process_; }

 private:
  KilndProcess(Subprocess p, int grpc, int http, int blob, int resp)
      : process_(std::move(p)),
        grpc_port_(grpc),
        http_port_(http),
        blob_port_(blob),
        resp_port_(resp) {}
  Subprocess process_;
  int grpc_port_;
  int http_port_;
  int blob_port_;
  int resp_port_;
};

}  // namespace kiln::testing
