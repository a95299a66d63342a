#pragma once

// Request traces: one span tree per request (queue wait, key, lookup, each compiler phase,
// store, rendezvous wait). A W3C `traceparent` from the trainer makes the request's root span
// a child of the trainer's span, in the trainer's trace. Finished traces are kept in a ring
// of recent ones, downloadable as Chrome/Perfetto trace JSON, and optionally exported as
// OTLP/JSON to a collector. Spans of one trace may be opened and closed from several threads.

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "nlohmann/json.hpp"
#include "proto/base/sync.h"

namespace kiln::server {

// A parsed W3C traceparent ("00-<32 hex trace id>-<16 hex span id>-<2 hex flags>").
struct TraceParent {
  std::string trace_id;  // 32 lowercase hex
  std::string span_id;   // 16 lowercase hex
  bool sampled = true;
};

// Nullopt when `header` is not a valid version-00 traceparent (then a new trace starts).
std::optional<TraceParent> ParseTraceParent(absl::string_view header);

struct SpanRecord {
  std::string span_id;
  std::string parent_span_id;  // empty for a root without a remote parent
  std::string name;
  absl::Time start;
  absl::Time end;
  std::map<std::string, std::string> attributes;
};

// One request's spans.
class Trace {
 public:
  // A new trace, or a child of `parent` when the request carried a traceparent.
  Trace(std::string root_name, const std::optional<TraceParent>& parent);

  const std::string& trace_id() const { return trace_id_; }
  const std::string& root_span_id() const { return root_span_id_; }

  // Opens a span under `parent_span_id` (the root when empty); returns its id.
  std::string Begin(absl::string_view name, absl::string_view parent_span_id = "");
  void End(const std::string& span_id);
  // Records a span that has already happened (e.g. a compile phase timed elsewhere).
  void Add(absl::string_view name, absl::Time start, absl::Time end,
           absl::string_view parent_span_id = "");
  void SetAttribute(const std::string& span_id, const std::string& key, const std::string& value);
  // Ends the root span (and any span left open).
  void Finish();

  std::vector<SpanRecord> spans() const;

 private:
  std::string NewSpanId();

  const std::string trace_id_;
  const std::string root_span_id_;
  mutable Mutex mu_;
  std::vector<SpanRecord> spans_ ABSL_GUARDED_BY(mu_);
};

// Opens a span for its scope.
class ScopedSpan {
 public:
  ScopedSpan(Trace* trace, absl::string_view name, absl::string_view parent = "")
      : trace_(trace), id_(trace ? trace->Begin(name, parent) : "") {}
  ~ScopedSpan() {
    if (trace_) trace_->End(id_);
  }
  ScopedSpan(const ScopedSpan&) = delete;
  ScopedSpan& operator=(const ScopedSpan&) = delete;
  const std::string& id() const { return id_; }

 private:
  Trace* trace_;
  std::string id_;
};

// Recent finished traces and, optionally, their export.
class TraceStore {
 public:
  // Keeps the last `capacity` traces. With a non-empty `otlp_url`
  // ("http://host:port/v1/traces"), finished traces are also posted there as OTLP/JSON by a
  // background thread, in batches.
  TraceStore(size_t capacity, std::string otlp_url = "");
  ~TraceStore();

  void Record(std::shared_ptr<const Trace> trace);

  // Chrome/Perfetto trace-event JSON of the recent traces (one row per trace).
  nlohmann::json ChromeTraceJson() const;
  // The OTLP/JSON ExportTraceServiceRequest for `traces`.
  static nlohmann::json OtlpJson(const std::vector<std::shared_ptr<const Trace>>& traces);

  int64_t exported() const;         // traces the collector accepted
  int64_t export_failures() const;  // batches it refused or could not be reached for

 private:
  void ExportLoop();

  const size_t capacity_;
  const std::string otlp_url_;
  mutable Mutex mu_;
  CondVar cv_;
  std::deque<std::shared_ptr<const Trace>> recent_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<const Trace>> pending_ ABSL_GUARDED_BY(mu_);
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  int64_t exported_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t export_failures_ ABSL_GUARDED_BY(mu_) = 0;
  std::thread exporter_;
};

}  // namespace kiln::server
