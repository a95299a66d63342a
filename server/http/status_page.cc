#include "server/http/status_page.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace kiln::server {
namespace {

std::string Bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f %s", v, units[u]) : absl::StrFormat("%.1f %s", v, units[u]);
}

std::string Millis(absl::Duration d) {
  return absl::StrFormat("%.1f ms", absl::ToDoubleMilliseconds(d));
}

void CompileTable(const std::vector<CompileRecord>& records, bool running, std::string* out) {
  if (records.empty()) {
    absl::StrAppend(out, "<p class=none>none</p>\n");
    return;
  }
  absl::StrAppend(out, "<table><tr><th>started</th><th>key</th><th>job/rank</th>",
                  running ? "" : "<th>outcome</th><th>total</th><th>phases</th>", "</tr>\n");
  for (const CompileRecord& r : records) {
    absl::StrAppend(out, "<tr><td>",
                    HtmlEscape(absl::FormatTime("%H:%M:%E3S", r.started, absl::UTCTimeZone())),
                    "</td><td><code>", HtmlEscape(r.compile_key.substr(0, 16)), "</code></td><td>",
                    HtmlEscape(r.job), "</td>");
    if (!running) {
      std::string phases;
      for (const auto& [name, took] : r.phases) {
        absl::StrAppend(&phases, phases.empty() ? "" : ", ", name, " ", Millis(took));
      }
      absl::StrAppend(out, "<td>", HtmlEscape(r.outcome), "</td><td>", Millis(r.total), "</td><td>",
                      HtmlEscape(phases), "</td>");
    }
    absl::StrAppend(out, "</tr>\n");
  }
  absl::StrAppend(out, "</table>\n");
}

void WorkerTable(const StatusPageInput& in, std::string* out) {
  absl::StrAppend(out, "<p>", HtmlEscape(in.isolation), "</p>\n");
  if (in.workers.has_value()) {
    const WorkerPoolSnapshot& w = *in.workers;
    absl::StrAppend(out, "<table><tr><th>pid</th><th>up</th><th>compiles</th><th>now</th></tr>\n");
    for (const WorkerPoolSnapshot::Worker& worker : w.workers) {
      const std::string now =
          worker.compile_key.empty()
              ? std::string("idle")
              : absl::StrCat("compiling <code>", HtmlEscape(worker.compile_key.substr(0, 16)),
                             "</code> for ", Millis(in.now - worker.busy_since));
      absl::StrAppend(
          out, "<tr><td>", worker.pid, "</td><td>",
          HtmlEscape(absl::FormatDuration(absl::Trunc(in.now - worker.started, absl::Seconds(1)))),
          "</td><td>", worker.compiles, "</td><td>", now, "</td></tr>\n");
    }
    absl::StrAppend(out, "</table>\n<p>", w.starting, " starting; lost: ");
    for (size_t i = 0; i < w.restarts.size(); ++i) {
      absl::StrAppend(out, i == 0 ? "" : ", ", w.restarts[i].second, " ",
                      HtmlEscape(w.restarts[i].first));
    }
    absl::StrAppend(out, "</p>\n");
  }
  absl::StrAppend(out, "<h2>Keys remembered as failing</h2>\n");
  if (in.compiles.failing_keys.empty()) {
    absl::StrAppend(out, "<p class=none>none</p>\n");
    return;
  }
  absl::StrAppend(out, "<table><tr><th>key</th><th>failed</th><th>for</th><th>error</th></tr>\n");
  for (const auto& [key, entry] : in.compiles.failing_keys) {
    absl::StrAppend(
        out, "<tr><td><code>", HtmlEscape(key.substr(0, 16)), "</code></td><td>",
        HtmlEscape(absl::FormatTime("%H:%M:%E3S", entry.failed, absl::UTCTimeZone())), "</td><td>",
        HtmlEscape(absl::FormatDuration(absl::Trunc(entry.expires - in.now, absl::Seconds(1)))),
        " more</td><td>", HtmlEscape(entry.error.message().substr(0, 300)), "</td></tr>\n");
  }
  absl::StrAppend(out, "</table>\n");
}

}  // namespace

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

// The shared cache tier: health, hit rate, mean read latency, write-through queue.
static void SharedCacheRow(const SharedCache::Snapshot& s, std::string* out) {
  const int64_t reads = s.tier.hits + s.tier.misses;
  const std::string hit_rate =
      reads == 0
          ? "n/a"
          : absl::StrFormat("%.1f%% of %d reads",
                            100.0 * static_cast<double>(s.tier.hits) / static_cast<double>(reads),
                            reads);
  const std::string latency =
      s.tier.operations == 0
          ? "n/a"
          : absl::StrFormat("%.2f ms", absl::ToDoubleMilliseconds(s.tier.latency_total) /
                                           static_cast<double>(s.tier.operations));
  absl::StrAppend(
      out, "<tr><th>shared cache</th><td>",
      s.tier.healthy ? "up" : absl::StrCat("<b>down</b> (", HtmlEscape(s.tier.last_error), ")"),
      "; hit rate ", hit_rate, "; mean latency ", latency, "; ", s.tier.corrupt,
      " corrupt dropped, ", s.tier.errors, " errors; write-through ", s.queue_depth, " queued, ",
      s.dropped, " dropped</td></tr>\n");
}

// Fleet-wide single flight: who this server is to the others, and its compile leases.
static void LeaseRow(const CompileLeases::Snapshot& s, std::string* out) {
  absl::StrAppend(out, "<tr><th>compile leases</th><td>instance <code>", HtmlEscape(s.instance_id),
                  "</code>, ttl ", absl::FormatDuration(s.ttl), "; ", s.held, " held, ", s.waiting,
                  " waiting now; ", s.acquired, " acquired, ", s.waited, " waited, ", s.taken_over,
                  " taken over, ", s.errors, " errors, ", s.lost, " lost</td></tr>\n");
}

std::string RenderStatusPage(const StatusPageInput& in) {
  const cache::CacheStatistics& c = in.cache;
  const int64_t lookups = c.hits + c.misses + c.guard_misses;
  const std::string hit_rate =
      lookups == 0
          ? "n/a"
          : absl::StrFormat("%.1f%% of %d",
                            100.0 * static_cast<double>(c.hits) / static_cast<double>(lookups),
                            lookups);
  const std::string budget =
      c.budget_bytes > 0
          ? absl::StrFormat(
                "%s of %s (%.1f%%)", Bytes(c.stored_bytes()), Bytes(c.budget_bytes),
                100.0 * static_cast<double>(c.stored_bytes()) / static_cast<double>(c.budget_bytes))
          : absl::StrCat(Bytes(c.stored_bytes()), " (no budget)");
  std::string out = absl::StrCat(
      "<!doctype html>\n<html><head><meta charset=utf-8><title>kilnd</title>\n",
      "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
      "td,th{border:1px solid #ccc;padding:2px 8px;text-align:left}"
      "code{font-size:90%}.none{color:#888}</style></head><body>\n",
      "<h1>kilnd ", HtmlEscape(in.version), "</h1>\n<table>\n", "<tr><th>uptime</th><td>",
      HtmlEscape(absl::FormatDuration(absl::Trunc(in.uptime, absl::Seconds(1)))), "</td></tr>\n",
      "<tr><th>store</th><td>", budget, "; ", c.blobs, " blobs, ", c.actions, " keys, ", c.variants,
      " variants</td></tr>\n", "<tr><th>hit rate</th><td>", hit_rate, " (", c.guard_misses,
      " guard misses)</td></tr>\n", "<tr><th>compiles</th><td>", in.compiles.compiles, " run, ",
      in.compiles.in_flight, " in flight, ", in.compiles.queue_depth, " queued, ",
      in.compiles.deduplicated, " deduplicated waiters</td></tr>\n", "<tr><th>rendezvous</th><td>",
      in.compiles.rendezvous.groups, " decisions, ", in.compiles.rendezvous.divergences,
      " divergences, ", in.compiles.rendezvous.timeouts, " timeouts, ",
      in.compiles.rendezvous.waiting, " ranks waiting</td></tr>\n", "<tr><th>integrity</th><td>",
      c.integrity_failures, " blobs dropped, ", c.evictions, " evictions (", Bytes(c.evicted_bytes),
      ")</td></tr>\n");
  if (in.shared.has_value()) SharedCacheRow(*in.shared, &out);
  if (in.leases.has_value()) LeaseRow(*in.leases, &out);
  absl::StrAppend(&out, "</table>\n<h2>In flight</h2>\n");
  CompileTable(in.compiles.running, /*running=*/true, &out);
  absl::StrAppend(&out, "<h2>Recent compiles</h2>\n");
  CompileTable(in.compiles.recent, /*running=*/false, &out);
  absl::StrAppend(&out, "<h2>Compile workers</h2>\n");
  WorkerTable(in, &out);
  absl::StrAppend(&out, "<h2>Recent divergences</h2>\n");
  if (in.compiles.recent_divergences.empty()) {
    absl::StrAppend(&out, "<p class=none>none</p>\n");
  } else {
    absl::StrAppend(&out, "<ul>\n");
    for (const std::string& d : in.compiles.recent_divergences) {
      absl::StrAppend(&out, "<li>", HtmlEscape(d), "</li>\n");
    }
    absl::StrAppend(&out, "</ul>\n");
  }
  absl::StrAppend(&out,
                  "<p><a href=/metrics>metrics</a> · <a href=/debug/traces>traces</a></p>\n"
                  "</body></html>\n");
  return out;
}

}  // namespace kiln::server
