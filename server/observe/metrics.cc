#include "server/observe/metrics.h"

#include <dirent.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace kiln::server {
namespace {

void AtomicAdd(std::atomic<double>& target, double by) {
  double current = target.load(std::memory_order_relaxed);
  while (!target.compare_exchange_weak(current, current + by, std::memory_order_relaxed)) {
  }
}

// Numbers as Prometheus expects them: integers without a fraction, +Inf spelled out.
std::string FormatValue(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return absl::StrCat(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.17g", v);
  return buf;
}

std::string LabelSet(const std::vector<std::string>& names, const LabelValues& values,
                     const std::string& extra_name = "", const std::string& extra_value = "") {
  std::string out;
  for (size_t i = 0; i < names.size(); ++i) {
    absl::StrAppend(&out, out.empty() ? "" : ",", names[i], "=\"", EscapeLabelValue(values[i]),
                    "\"");
  }
  if (!extra_name.empty()) {
    absl::StrAppend(&out, out.empty() ? "" : ",", extra_name, "=\"", extra_value, "\"");
  }
  return out.empty() ? "" : absl::StrCat("{", out, "}");
}

// Fields of /proc/self/stat after the command name.
std::vector<std::string> ProcStatFields() {
  std::ifstream in("/proc/self/stat");
  std::string line;
  std::getline(in, line);
  size_t close = line.rfind(')');
  if (close == std::string::npos) return {};
  return absl::StrSplit(line.substr(close + 2), ' ');
}

double ProcessStartTimeSeconds() {
  std::vector<std::string> f = ProcStatFields();
  if (f.size() < 20) return 0;
  std::ifstream uptime_in("/proc/uptime");
  double uptime = 0;
  uptime_in >> uptime;
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const double started_after_boot = std::stod(f[19]) / ticks;
  return static_cast<double>(time(nullptr)) - uptime + started_after_boot;
}

}  // namespace

void Counter::Increment(double by) { AtomicAdd(value_, by); }

void Gauge::Add(double by) { AtomicAdd(value_, by); }

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)),
      counts_(std::make_unique<std::atomic<uint64_t>[]>(bounds_.size() + 1)) {}

void Histogram::Observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
}

Histogram::Snapshot Histogram::Take() const {
  Snapshot s;
  uint64_t running = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    running += counts_[i].load(std::memory_order_relaxed);
    s.cumulative.push_back(running);
  }
  s.count = running;
  s.sum = sum_.load(std::memory_order_relaxed);
  return s;
}

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
          0.5,    1,       2.5,    5,     10,     30,    60,   120,   300,  600};
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

MetricsRegistry::Entry& MetricsRegistry::Add(const std::string& name, const std::string& help,
                                             const std::string& type) {
  auto entry = std::make_unique<Entry>();
  entry->name = name;
  entry->help = help;
  entry->type = type;
  MutexLock lock(&mu_);
  entries_.push_back(std::move(entry));
  return *entries_.back();
}

Family<Counter>& MetricsRegistry::AddCounter(const std::string& name, const std::string& help,
                                             std::vector<std::string> labels) {
  Entry& e = Add(name, help, "counter");
  e.counters = std::make_unique<Family<Counter>>(std::move(labels),
                                                 [] { return std::make_unique<Counter>(); });
  return *e.counters;
}

Family<Gauge>& MetricsRegistry::AddGauge(const std::string& name, const std::string& help,
                                         std::vector<std::string> labels) {
  Entry& e = Add(name, help, "gauge");
  e.gauges =
      std::make_unique<Family<Gauge>>(std::move(labels), [] { return std::make_unique<Gauge>(); });
  return *e.gauges;
}

Family<Histogram>& MetricsRegistry::AddHistogram(const std::string& name, const std::string& help,
                                                 std::vector<double> bounds,
                                                 std::vector<std::string> labels) {
  Entry& e = Add(name, help, "histogram");
  e.histograms = std::make_unique<Family<Histogram>>(
      std::move(labels), [bounds] { return std::make_unique<Histogram>(bounds); });
  return *e.histograms;
}

void MetricsRegistry::AddCallback(const std::string& name, const std::string& help,
                                  std::function<double()> read, bool is_counter) {
  Entry& e = Add(name, help, is_counter ? "counter" : "gauge");
  e.callback = std::move(read);
}

void MetricsRegistry::AddProcessMetrics() {
  AddCallback(
      "process_cpu_seconds_total", "User and system CPU time spent, in seconds.",
      [] {
        rusage usage{};
        getrusage(RUSAGE_SELF, &usage);
        return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
               static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
      },
      /*is_counter=*/true);
  AddCallback("process_resident_memory_bytes", "Resident memory size in bytes.", [] {
    std::vector<std::string> f = ProcStatFields();
    return f.size() > 21 ? std::stod(f[21]) * static_cast<double>(sysconf(_SC_PAGESIZE)) : 0.0;
  });
  AddCallback("process_virtual_memory_bytes", "Virtual memory size in bytes.", [] {
    std::vector<std::string> f = ProcStatFields();
    return f.size() > 20 ? std::stod(f[20]) : 0.0;
  });
  AddCallback("process_open_fds", "Number of open file descriptors.", [] {
    double n = 0;
    if (DIR* dir = opendir("/proc/self/fd")) {
      while (dirent* e = readdir(dir)) {
        if (e->d_name[0] != '.') ++n;
      }
      closedir(dir);
    }
    return n - 1;  // the descriptor opendir itself holds
  });
  AddCallback("process_max_fds", "Maximum number of open file descriptors.", [] {
    rlimit limit{};
    getrlimit(RLIMIT_NOFILE, &limit);
    return static_cast<double>(limit.rlim_cur);
  });
  const double start = ProcessStartTimeSeconds();
  AddCallback("process_start_time_seconds",
              "Start time of the process since the epoch, in seconds.", [start] { return start; });
}

std::string MetricsRegistry::Render() const {
  std::string out;
  MutexLock lock(&mu_);
  for (const auto& e : entries_) {
    absl::StrAppend(&out, "# HELP ", e->name, " ", e->help, "\n# TYPE ", e->name, " ", e->type,
                    "\n");
    if (e->callback) {
      absl::StrAppend(&out, e->name, " ", FormatValue(e->callback()), "\n");
    } else if (e->counters) {
      e->counters->ForEach([&](const LabelValues& values, const Counter& c) {
        absl::StrAppend(&out, e->name, LabelSet(e->counters->label_names(), values), " ",
                        FormatValue(c.value()), "\n");
      });
    } else if (e->gauges) {
      e->gauges->ForEach([&](const LabelValues& values, const Gauge& g) {
        absl::StrAppend(&out, e->name, LabelSet(e->gauges->label_names(), values), " ",
                        FormatValue(g.value()), "\n");
      });
    } else if (e->histograms) {
      const auto& names = e->histograms->label_names();
      e->histograms->ForEach([&](const LabelValues& values, const Histogram& h) {
        Histogram::Snapshot s = h.Take();
        for (size_t i = 0; i < h.bounds().size(); ++i) {
          absl::StrAppend(&out, e->name, "_bucket",
                          LabelSet(names, values, "le", FormatValue(h.bounds()[i])), " ",
                          s.cumulative[i], "\n");
        }
        absl::StrAppend(&out, e->name, "_bucket", LabelSet(names, values, "le", "+Inf"), " ",
                        s.count, "\n");
        absl::StrAppend(&out, e->name, "_sum", LabelSet(names, values), " ", FormatValue(s.sum),
                        "\n");
        absl::StrAppend(&out, e->name, "_count", LabelSet(names, values), " ", s.count, "\n");
      });
    }
  }
  return out;
}

}  // namespace kiln::server
