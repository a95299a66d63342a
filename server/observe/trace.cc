#include "server/observe/trace.h"

#include <random>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "httplib.h"
#include "proto/base/digest.h"

namespace kiln::server {
namespace {

bool IsLowerHex(absl::string_view s) {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

bool AllZero(absl::string_view s) { return s.find_first_not_of('0') == absl::string_view::npos; }

std::string RandomHex(size_t bytes) {
  thread_local std::mt19937_64 rng(std::random_device{}());
  std::string raw(bytes, '\0');
  for (char& c : raw) c = static_cast<char>(rng() & 0xff);
  return ToHex(raw);
}

int64_t UnixMicros(absl::Time t) { return absl::ToUnixMicros(t); }

}  // namespace

std::optional<TraceParent> ParseTraceParent(absl::string_view header) {
  // version "-" trace-id "-" parent-id "-" flags; only version 00 is understood.
  if (header.size() != 55 || header[2] != '-' || header[35] != '-' || header[52] != '-') {
    return std::nullopt;
  }
  absl::string_view version = header.substr(0, 2), trace = header.substr(3, 32),
                    span = header.substr(36, 16), flags = header.substr(53, 2);
  if (version != "00" || !IsLowerHex(trace) || !IsLowerHex(span) || !IsLowerHex(flags) ||
      AllZero(trace) || AllZero(span)) {
    return std::nullopt;
  }
  const int flag_bits = std::stoi(std::string(flags), nullptr, 16);
  return TraceParent{std::string(trace), std::string(span), (flag_bits & 1) != 0};
}

Trace::Trace(std::string root_name, const std::optional<TraceParent>& parent)
    : trace_id_(parent ? parent->trace_id : RandomHex(16)), root_span_id_(RandomHex(8)) {
  SpanRecord root;
  root.span_id = root_span_id_;
  root.parent_span_id = parent ? parent->span_id : "";
  root.name = std::move(root_name);
  root.start = absl::Now();
  root.end = absl::InfinitePast();
  spans_.push_back(std::move(root));
}

std::string Trace::NewSpanId() { return RandomHex(8); }

std::string Trace::Begin(absl::string_view name, absl::string_view parent_span_id) {
  SpanRecord span;
  span.span_id = NewSpanId();
  span.parent_span_id = parent_span_id.empty() ? root_span_id_ : std::string(parent_span_id);
  span.name = std::string(name);
  span.start = absl::Now();
  span.end = absl::InfinitePast();
  std::string id = span.span_id;
  MutexLock lock(&mu_);
  spans_.push_back(std::move(span));
  return id;
}

void Trace::End(const std::string& span_id) {
  const absl::Time now = absl::Now();
  MutexLock lock(&mu_);
  for (SpanRecord& s : spans_) {
    if (s.span_id == span_id && s.end == absl::InfinitePast()) s.end = now;
  }
}

void Trace::Add(absl::string_view name, absl::Time start, absl::Time end,
                absl::string_view parent_span_id) {
  SpanRecord span;
  span.span_id = NewSpanId();
  span.parent_span_id = parent_span_id.empty() ? root_span_id_ : std::string(parent_span_id);
  span.name = std::string(name);
  span.start = start;
  span.end = end;
  MutexLock lock(&mu_);
  spans_.push_back(std::move(span));
}

void Trace::SetAttribute(const std::string& span_id, const std::string& key,
                         const std::string& value) {
  MutexLock lock(&mu_);
  for (SpanRecord& s : spans_) {
    if (s.span_id == span_id) s.attributes[key] = value;
  }
}

void Trace::Finish() {
  const absl::Time now = absl::Now();
  MutexLock lock(&mu_);
  for (SpanRecord& s : spans_) {
    if (s.end == absl::InfinitePast()) s.end = now;
  }
}

std::vector<SpanRecord> Trace::spans() const {
  MutexLock lock(&mu_);
  return spans_;
}

TraceStore::TraceStore(size_t capacity, std::string otlp_url)
    : capacity_(capacity), otlp_url_(std::move(otlp_url)) {
  if (!otlp_url_.empty()) exporter_ = std::thread([this] { ExportLoop(); });
}

TraceStore::~TraceStore() {
  {
    MutexLock lock(&mu_);
    stopping_ = true;
    cv_.SignalAll();
  }
  if (exporter_.joinable()) exporter_.join();
}

void TraceStore::Record(std::shared_ptr<const Trace> trace) {
  MutexLock lock(&mu_);
  recent_.push_back(trace);
  while (recent_.size() > capacity_) recent_.pop_front();
  if (!otlp_url_.empty()) {
    pending_.push_back(std::move(trace));
    cv_.Signal();
  }
}

nlohmann::json TraceStore::ChromeTraceJson() const {
  std::vector<std::shared_ptr<const Trace>> traces;
  {
    MutexLock lock(&mu_);
    traces.assign(recent_.begin(), recent_.end());
  }
  nlohmann::json events = nlohmann::json::array();
  int row = 0;
  for (const auto& trace : traces) {
    ++row;
    std::vector<SpanRecord> spans = trace->spans();
    events.push_back(
        {{"name", "thread_name"},
         {"ph", "M"},
         {"pid", 1},
         {"tid", row},
         {"args", {{"name", spans.front().name + " " + trace->trace_id().substr(0, 8)}}}});
    for (const SpanRecord& s : spans) {
      nlohmann::json args = {{"trace_id", trace->trace_id()},
                             {"span_id", s.span_id},
                             {"parent_span_id", s.parent_span_id}};
      for (const auto& [k, v] : s.attributes) args[k] = v;
      events.push_back({{"name", s.name},
                        {"cat", "kiln"},
                        {"ph", "X"},
                        {"ts", UnixMicros(s.start)},
                        {"dur", std::max<int64_t>(0, UnixMicros(s.end) - UnixMicros(s.start))},
                        {"pid", 1},
                        {"tid", row},
                        {"args", args}});
    }
  }
  return {{"traceEvents", events}, {"displayTimeUnit", "ms"}};
}

nlohmann::json TraceStore::OtlpJson(const std::vector<std::shared_ptr<const Trace>>& traces) {
  nlohmann::json spans = nlohmann::json::array();
  for (const auto& trace : traces) {
    for (const SpanRecord& s : trace->spans()) {
      nlohmann::json attributes = nlohmann::json::array();
      for (const auto& [k, v] : s.attributes) {
        attributes.push_back({{"key", k}, {"value", {{"stringValue", v}}}});
      }
      nlohmann::json span = {
          {"traceId", trace->trace_id()},
          {"spanId", s.span_id},
          {"name", s.name},
          {"kind", s.span_id == trace->root_span_id() ? 2 : 1},  // SERVER for the root
          {"startTimeUnixNano", std::to_string(absl::ToUnixNanos(s.start))},
          {"endTimeUnixNano", std::to_string(absl::ToUnixNanos(s.end))},
          {"attributes", attributes}};
      if (!s.parent_span_id.empty()) span["parentSpanId"] = s.parent_span_id;
      spans.push_back(std::move(span));
    }
  }
  return {{"resourceSpans",
           {{{"resource",
              {{"attributes", {{{"key", "service.name"}, {"value", {{"stringValue", "kilnd"}}}}}}}},
             {"scopeSpans", {{{"scope", {{"name", "kiln"}}}, {"spans", spans}}}}}}}};
}

int64_t TraceStore::exported() const {
  MutexLock lock(&mu_);
  return exported_;
}

int64_t TraceStore::export_failures() const {
  MutexLock lock(&mu_);
  return export_failures_;
}

void TraceStore::ExportLoop() {
  // "http://host:port/path" -> client on host:port, POST to /path.
  std::string rest = otlp_url_;
  const std::string scheme_end = "://";
  const size_t s = rest.find(scheme_end);
  const std::string scheme_host =
      rest.substr(0, rest.find('/', s == std::string::npos ? 0 : s + scheme_end.size()));
  std::string path = rest.substr(scheme_host.size());
  if (path.empty()) path = "/v1/traces";
  httplib::Client client(scheme_host);
  client.set_connection_timeout(2);
  client.set_read_timeout(5);
  while (true) {
    std::vector<std::shared_ptr<const Trace>> batch;
    {
      MutexLock lock(&mu_);
      while (pending_.empty() && !stopping_) cv_.WaitWithTimeout(&mu_, absl::Seconds(1));
      if (pending_.empty() && stopping_) return;
      batch.swap(pending_);
    }
    const std::string body = OtlpJson(batch).dump();
    auto result = client.Post(path, body, "application/json");
    MutexLock lock(&mu_);
    if (result && result->status >= 200 && result->status < 300) {
      exported_ += static_cast<int64_t>(batch.size());
    } else {
      ++export_failures_;
    }
  }
}

}  // namespace kiln::server
