#pragma once

// Tests of kilnd processes sharing one loopback Redis Cluster (--shared-cache): a fresh
// cluster for each test, kilnds started on it with data directories of their own, and what
// those tests ask of a kilnd (its metrics, its write-through queue drained) and of the
// cluster (a blob corrupted where it is stored).

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "tests/testing/kilnd_process.h"
#include "tests/testing/redis_cluster.h"
#include "tests/testing/scrape.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {

// One kilnd on the cluster. Tests add the clients they need.
struct ClusterKilnd {
  std::unique_ptr<KilndProcess> process;

  // The value of one metric series; a failed scrape fails the test and reads -1.
  double Metric(const std::string& series) const {
    absl::StatusOr<double> v = ScrapeMetric(process->http_port(), series);
    EXPECT_TRUE(v.ok()) << v.status();
    return v.ok() ? *v : -1;
  }
  double Compiles() const { return Metric("kiln_compiles_total{result=\"ok\"}"); }
  // Whether `series` reaches at least `value` within `timeout`.
  bool AwaitMetric(const std::string& series, double value,
                   absl::Duration timeout = absl::Seconds(30)) const {
    return AwaitMetricWhere(
        series, [&](double v) { return v >= value; }, timeout);
  }
  // Whether `series` falls to `value` or below within `timeout`: a gauge that a server lowers
  // after its answer has gone out (a lease is released after the result is served).
  bool AwaitMetricAtMost(const std::string& series, double value,
                         absl::Duration timeout = absl::Seconds(30)) const {
    return AwaitMetricWhere(
        series, [&](double v) { return v <= value; }, timeout);
  }
  bool AwaitMetricWhere(const std::string& series, const std::function<bool(double)>& holds,
                        absl::Duration timeout) const {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      absl::StatusOr<double> v = ScrapeMetric(process->http_port(), series);
      if (v.ok() && holds(*v)) return true;
      absl::SleepFor(absl::Milliseconds(20));
    }
    return false;
  }
  // Waits until the write-through queue is empty and at least `writes` jobs have been done.
  void WaitForWrites(double writes) const {
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline) {
      if (Metric("kiln_shared_cache_write_queue_depth") == 0 &&
          Metric("kiln_shared_cache_writes_total") >= writes) {
        return;
      }
      absl::SleepFor(absl::Milliseconds(50));
    }
    ADD_FAILURE() << "write-through did not finish " << writes << " jobs";
  }
};

class SharedClusterTest : public RedisClusterTest {
 protected:
  // A kilnd with a fresh data directory `name` on the cluster, started with --shared-cache
  // and `flags`; null (the test failed) when it does not start.
  std::unique_ptr<KilndProcess> StartKilnd(const std::string& name,
                                           std::vector<std::string> flags) {
    flags.insert(flags.begin(), {"--shared-cache", cluster_->url()});
    absl::StatusOr<KilndProcess> k = KilndProcess::Start(dir_.path() + "/" + name, flags);
    EXPECT_TRUE(k.ok()) << k.status();
    if (!k.ok()) return nullptr;
    return std::make_unique<KilndProcess>(*std::move(k));
  }

  // Overwrites the start of a blob's first chunk inside Redis, on whichever node owns it.
  void CorruptBlob(const std::string& hash) {
    const std::string key = absl::StrCat("kiln:b:{", hash, "}:0");
    for (int node = 0; node < cluster_->size(); ++node) {
      if (cluster_->Cli(node, {"SETRANGE", key, "0", "CORRUPTED-BYTES"}).ok()) return;
    }
    FAIL() << "no node accepted a write to " << key;
  }

  TempDir dir_;
};

}  // namespace kiln::testing
