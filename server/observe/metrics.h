#pragma once

// Prometheus metrics for kilnd: counters, gauges and histograms with labels, rendered in the
// text exposition format 0.0.4. Metric objects are created once (at start-up) and then
// updated lock-free from any thread; rendering takes a consistent-enough snapshot for
// monitoring. Values derived from other components (cache sizes, queue depth) are
// registered as callbacks read at scrape time.

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/string_view.h"
#include "proto/base/sync.h"

namespace kiln::server {

// A monotonically increasing count.
class Counter {
 public:
  void Increment(double by = 1);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// A value that goes up and down.
class Gauge {
 public:
  void Set(double v) { value_.store(v, std::memory_order_relaxed); }
  void Add(double by);
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0};
};

// Observations counted into fixed buckets (upper bounds, ascending; +Inf is implicit).
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void Observe(double v);

  struct Snapshot {
    std::vector<uint64_t> cumulative;  // per bound, then +Inf
    double sum = 0;
    uint64_t count = 0;
  };
  Snapshot Take() const;
  const std::vector<double>& bounds() const { return bounds_; }

 private:
  std::vector<double> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket (not cumulative), then +Inf
  std::atomic<double> sum_{0};
};

// Bucket bounds for request latencies in seconds: 100 µs to 600 s.
std::vector<double> LatencyBuckets();

// Label values in the order of the family's label names.
using LabelValues = std::vector<std::string>;

// A named metric with one child per distinct set of label values.
template <typename T>
class Family {
 public:
  Family(std::vector<std::string> label_names, std::function<std::unique_ptr<T>()> make)
      : label_names_(std::move(label_names)), make_(std::move(make)) {}

  // The child for `values` (created on first use). The reference stays valid.
  T& With(const LabelValues& values) {
    MutexLock lock(&mu_);
    auto& slot = children_[values];
    if (slot == nullptr) slot = make_();
    return *slot;
  }

  const std::vector<std::string>& label_names() const { return label_names_; }

  // Calls `fn(values, child)` for every child, in label order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    MutexLock lock(&mu_);
    for (const auto& [values, child] : children_) fn(values, *child);
  }

 private:
  std::vector<std::string> label_names_;
  std::function<std::unique_ptr<T>()> make_;
  mutable Mutex mu_;
  std::map<LabelValues, std::unique_ptr<T>> children_ ABSL_GUARDED_BY(mu_);
};

// All of kilnd's metrics. Registration happens before serving; Render may run concurrently
// with updates.
class MetricsRegistry {
 public:
  Family<Counter>& AddCounter(const std::string& name, const std::string& help,
                              std::vector<std::string> labels = {});
  Family<Gauge>& AddGauge(const std::string& name, const std::string& help,
                          std::vector<std::string> labels = {});
  Family<Histogram>& AddHistogram(const std::string& name, const std::string& help,
                                  std::vector<double> bounds, std::vector<std::string> labels = {});
  // A gauge (or counter, with `is_counter`) whose value is read from `read` at scrape time.
  void AddCallback(const std::string& name, const std::string& help, std::function<double()> read,
                   bool is_counter = false);

  // Adds process_cpu_seconds_total, process_resident_memory_bytes,
  // process_virtual_memory_bytes, process_open_fds, process_max_fds and
  // process_start_time_seconds, read from /proc at scrape time.
  void AddProcessMetrics();

  // The text exposition format, families in registration order.
  std::string Render() const;

 private:
  struct Entry {
    std::string name;
    std::string help;
    std::string type;  // counter, gauge, histogram
    std::unique_ptr<Family<Counter>> counters;
    std::unique_ptr<Family<Gauge>> gauges;
    std::unique_ptr<Family<Histogram>> histograms;
    std::function<double()> callback;
  };
  Entry& Add(const std::string& name, const std::string& help, const std::string& type);

  mutable Mutex mu_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
};

// Escapes a label value for the text format (backslash, quote, newline).
std::string EscapeLabelValue(absl::string_view value);

}  // namespace kiln::server
