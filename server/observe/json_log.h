#pragma once

// JSON-lines logging for kilnd: one object per line on stderr, with a timestamp, level and
// event name plus any fields the caller adds. Safe for concurrent use; lines never interleave.

#include "absl/strings/string_view.h"

#include "nlohmann/json.hpp"

namespace kiln::server {

enum class LogLevel { kDebug, kInfo, kWarning, kError };

// Writes {"ts": ..., "level": ..., "event": event, ...fields} as one line.
void Log(LogLevel level, absl::string_view event, nlohmann::json fields = nlohmann::json::object());

inline void LogInfo(absl::string_view event, nlohmann::json fields = nlohmann::json::object()) {
  Log(LogLevel::kInfo, event, std::move(fields));
}
inline void LogWarning(absl::string_view event, nlohmann::json fields = nlohmann::json::object()) {
  Log(LogLevel::kWarning, event, std::move(fields));
}
inline void LogError(absl::string_view event, nlohmann::json fields = nlohmann::json::object()) {
  Log(LogLevel::kError, event, std::move(fields));
}

// Lines below `level` are dropped. Default: kInfo.
void SetLogLevel(LogLevel level);

}  // namespace kiln::server
