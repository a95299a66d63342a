#include "server/observe/json_log.h"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <string>

#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace kiln::server {
namespace {

std::atomic<LogLevel> min_level{LogLevel::kInfo};
std::mutex write_mu;

const char* LevelName(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarning:
      return "warning";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

}  // namespace

void SetLogLevel(LogLevel level) { min_level.store(level, std::memory_order_relaxed); }

void Log(LogLevel level, absl::string_view event, nlohmann::json fields) {
  if (level < min_level.load(std::memory_order_relaxed)) return;
  nlohmann::json line = nlohmann::json::object();
  line["ts"] = absl::FormatTime("%Y-%m-%dT%H:%M:%E6SZ", absl::Now(), absl::UTCTimeZone());
  line["level"] = LevelName(level);
  line["event"] = std::string(event);
  if (fields.is_object()) {
    for (auto& [key, value] : fields.items()) line[key] = std::move(value);
  }
  // Replace invalid UTF-8 rather than throw: a log line must never take the server down.
  std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  text.push_back('\n');
  std::lock_guard<std::mutex> lock(write_mu);
  std::fwrite(text.data(), 1, text.size(), stderr);
  std::fflush(stderr);
}

}  // namespace kiln::server
