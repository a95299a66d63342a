#include "server/observe/metrics.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace kiln::server {
namespace {

TEST(MetricsTest, RendersTextFormat) {
  MetricsRegistry r;
  Family<Counter>& requests = r.AddCounter("kiln_requests_total", "Requests.", {"method", "code"});
  requests.With({"Get", "OK"}).Increment();
  requests.With({"Get", "OK"}).Increment(2);
  requests.With({"Put", "INVALID_ARGUMENT"}).Increment();
  r.AddGauge("kiln_depth", "Depth.").With({}).Set(4);
  Family<Histogram>& h = r.AddHistogram("kiln_seconds", "Time.", {0.1, 1}, {"phase"});
  h.With({"lower"}).Observe(0.05);
  h.With({"lower"}).Observe(0.5);
  h.With({"lower"}).Observe(5);
  r.AddCallback("kiln_bytes", "Bytes.", [] { return 1536.0; });

  EXPECT_EQ(r.Render(),
            "# HELP kiln_requests_total Requests.\n"
            "# TYPE kiln_requests_total counter\n"
            "kiln_requests_total{method=\"Get\",code=\"OK\"} 3\n"
            "kiln_requests_total{method=\"Put\",code=\"INVALID_ARGUMENT\"} 1\n"
            "# HELP kiln_depth Depth.\n"
            "# TYPE kiln_depth gauge\n"
            "kiln_depth 4\n"
            "# HELP kiln_seconds Time.\n"
            "# TYPE kiln_seconds histogram\n"
            "kiln_seconds_bucket{phase=\"lower\",le=\"0.10000000000000001\"} 1\n"
            "kiln_seconds_bucket{phase=\"lower\",le=\"1\"} 2\n"
            "kiln_seconds_bucket{phase=\"lower\",le=\"+Inf\"} 3\n"
            "kiln_seconds_sum{phase=\"lower\"} 5.5499999999999998\n"
            "kiln_seconds_count{phase=\"lower\"} 3\n"
            "# HELP kiln_bytes Bytes.\n"
            "# TYPE kiln_bytes gauge\n"
            "kiln_bytes 1536\n");
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(EscapeLabelValue("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
}

TEST(MetricsTest, ConcurrentIncrementsAreNotLost) {
  MetricsRegistry r;
  Counter& c = r.AddCounter("kiln_c_total", "C.").With({});
  Histogram& h = r.AddHistogram("kiln_h", "H.", LatencyBuckets()).With({});
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 80000);
  EXPECT_EQ(h.Take().count, 80000u);
}

TEST(MetricsTest, ProcessMetricsAreReadable) {
  MetricsRegistry r;
  r.AddProcessMetrics();
  const std::string text = r.Render();
  for (const char* name :
       {"process_cpu_seconds_total ", "process_resident_memory_bytes ", "process_open_fds ",
        "process_max_fds ", "process_start_time_seconds "}) {
    EXPECT_NE(text.find(std::string("\n") + name), std::string::npos) << name << "\n" << text;
  }
}

}  // namespace
}  // namespace kiln::server
