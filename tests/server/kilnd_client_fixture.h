#pragma once

// A test fixture holding a kilnd child process on loopback (tests/testing/kilnd_process.h)
// and a compile client connected to it, for the end-to-end kilnd tests.

#include <gtest/gtest.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "client/compile_client.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {

// A compile client of `kilnd`.
inline absl::StatusOr<std::unique_ptr<client::CompileClient>> ConnectTo(const KilndProcess& kilnd) {
  client::ChannelOptions o;
  o.address = kilnd.address();
  return client::CompileClient::Connect(o);
}

class KilndClientTest : public ::testing::Test {
 protected:
  // Stops the kilnd started before, if any, starts one on this test's data directory with
  // `flags`, and connects to it.
  void StartKilnd(const std::vector<std::string>& flags = {}) {
    kilnd_.reset();
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(dir_.path() + "/data", flags);
    ASSERT_TRUE(k.ok()) << k.status();
    Use(*std::move(k));
  }

  // Talks to `kilnd` from now on.
  void Use(KilndProcess kilnd) {
    kilnd_.emplace(std::move(kilnd));
    absl::StatusOr<std::unique_ptr<client::CompileClient>> c = ConnectTo(*kilnd_);
    ASSERT_TRUE(c.ok()) << c.status();
    client_ = *std::move(c);
  }

  absl::StatusOr<v1::CompileResponse> Compile(const v1::CompileRequest& r,
                                              absl::Duration timeout = absl::Seconds(120)) {
    return client_->Compile(r, timeout);
  }

  // The value of a /metrics series (-1, and a failure, when it cannot be read).
  double Metric(const std::string& series) {
    absl::StatusOr<double> v = ScrapeMetric(kilnd_->http_port(), series);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }

  TempDir dir_;
  std::optional<KilndProcess> kilnd_;
  std::unique_ptr<client::CompileClient> client_;
};

}  // namespace kiln::testing
