#pragma once

// An incremental parser of the RESP2 commands on one connection (the Redis protocol, as
// redis-cli and client libraries send it). The connection appends bytes as they arrive, in
// pieces of any size; Next returns each command once all of it is there, so pipelined
// commands come out in order and the results never depend on how the bytes were split.
//
// What it accepts: a multibulk request (`*N\r\n` then N bulk strings `$LEN\r\nBYTES\r\n`),
// or an inline command (one line of words separated by spaces or tabs, as typed into a
// terminal). `*0` and empty inline lines are no command and are skipped. Limits bound every
// piece: the arguments of a command, the length of a bulk string, the length of an inline
// line and of a `*`/`$` header line. Anything malformed or beyond a limit is an error with a
// one-line message ("Protocol error: ..."); the parser then stops, since the stream cannot be
// trusted to be back in step: the connection answers the error and closes.
//
// Not thread-safe: one parser per connection.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "server/net/input_buffer.h"

namespace kiln::server {

struct RespLimits {
  size_t max_arguments = 1024;                  // of one command, its name included
  int64_t max_bulk_bytes = int64_t{512} << 20;  // one argument of a multibulk request
  size_t max_inline_bytes = 64 << 10;           // one inline command line
};

class RespParser {
 public:
  explicit RespParser(const RespLimits& limits = RespLimits());

  void Append(absl::string_view bytes);

  enum class Progress {
    kNeedMore,  // no complete command yet
    kCommand,   // TakeCommand() is the next command
    kError,     // error() says why; every later call returns kError again
  };
  Progress Next();

  // The command Next returned kCommand for: its arguments, the name first. Leaves it empty.
  std::vector<std::string> TakeCommand() { return std::move(command_); }
  // "Protocol error: ...", one line.
  const std::string& error() const { return error_; }

  // Bytes appended and not yet parsed.
  size_t buffered() const { return buffer_.size(); }

 private:
  enum class State { kStart, kBulkHeader, kBulkData, kBulkEnd };
  Progress Fail(std::string message);
  // Consumes the `*N` or `$N` line at the front into `line` (without its CRLF). False when it has
  // not all arrived, or (with `failed` set, after Fail) when it is longer than a header line.
  bool HeaderLine(absl::string_view* line, bool* failed);
  Progress ParseInline();

  const RespLimits limits_;
  InputBuffer buffer_;
  State state_ = State::kStart;
  int64_t arguments_left_ = 0;  // bulk strings still to come in the current command
  int64_t bulk_left_ = 0;       // bytes of the current bulk string still to come
  bool failed_ = false;
  std::vector<std::string> command_;
  std::string error_;
};

}  // namespace kiln::server
