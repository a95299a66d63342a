#pragma once

// What kilnd and a compile worker process (worker_main.h) say to each other over the socket
// they share. Every message is one frame: a 4-byte little-endian length of what follows, a
// 1-byte type, then the payload. kilnd sends a CompileRequest; the worker answers with one
// Phase per finished compile phase and then one Result (a serialized kiln.v1.CompiledGraph) or
// Error. A worker says Ready once when it has started, and OutOfMemory (with the last phase)
// when an allocation failed under its memory limit, just before it exits.
//
// Decoding never trusts its input: a frame longer than kMaxFrameBytes, an unknown type or a
// payload that does not parse is an error naming what is wrong (a worker that writes garbage
// is treated as broken). Thread-compatible.

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace kiln::server::worker {

inline constexpr uint32_t kProtocolVersion = 1;
inline constexpr uint32_t kMaxFrameBytes = (uint32_t{1} << 31) - 1;
inline constexpr int kHeaderBytes = 5;
// The descriptor a worker finds its socket on.
inline constexpr int kWorkerFd = 3;
// The exit code of a worker whose allocation failed under its memory limit.
inline constexpr int kExitOutOfMemory = 86;

enum class FrameType : uint8_t {
  kReady = 1,
  kCompileRequest = 2,
  kPhase = 3,
  kResult = 4,
  kError = 5,
  kOutOfMemory = 6,
};

struct Frame {
  FrameType type;
  std::string payload;
};

// Header and payload of one frame, ready to write.
std::string EncodeFrame(FrameType type, absl::string_view payload);

// Cuts frames off the front of a byte stream read in arbitrary pieces.
class FrameReader {
 public:
  void Append(absl::string_view bytes) { buffer_.append(bytes.data(), bytes.size()); }
  // The next whole frame; nullopt while it is still incomplete; an error for a frame that
  // cannot be one (too long, unknown type). After an error the stream is unusable.
  absl::StatusOr<std::optional<Frame>> Next();
  size_t buffered() const { return buffer_.size() - consumed_; }

 private:
  std::string buffer_;
  size_t consumed_ = 0;
};

// Writes all of `bytes` to the blocking descriptor `fd`; an error on a closed peer.
absl::Status WriteAll(int fd, absl::string_view bytes);
// Reads one frame from the blocking descriptor `fd`; nullopt on a clean end of stream
// between frames.
absl::StatusOr<std::optional<Frame>> ReadFrame(int fd);

// The payloads.
struct CompileRequest {
  std::string graph;        // serialized kiln.v1.Graph
  std::string options;      // serialized kiln.v1.CompileOptions
  std::string compile_key;  // recorded in the result
};
std::string EncodeCompileRequest(const CompileRequest& request);
absl::StatusOr<CompileRequest> DecodeCompileRequest(absl::string_view payload);

struct Ready {
  uint32_t protocol_version = kProtocolVersion;
  int64_t pid = 0;
};
std::string EncodeReady(const Ready& ready);
absl::StatusOr<Ready> DecodeReady(absl::string_view payload);

struct Phase {
  std::string name;
  absl::Time start;
  absl::Time end;
};
std::string EncodePhase(const Phase& phase);
absl::StatusOr<Phase> DecodePhase(absl::string_view payload);

// A failed compile: its code, message and payloads (such as a kiln.v1.ErrorDetail).
std::string EncodeError(const absl::Status& status);
// Sets `*error` and returns OK; or returns why `payload` is no error (`*error` untouched).
absl::Status DecodeError(absl::string_view payload, absl::Status* error);

}  // namespace kiln::server::worker
