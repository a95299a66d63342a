// Fuzzes the RESP command parser (server/resp/resp_parser.h) with arbitrary byte streams: no
// input may crash it, trip a sanitizer, break its limits or let its buffer grow while it waits
// for more, and the commands and error it finds must not depend on how the stream is cut into
// pieces (the whole stream at once, and pieces whose sizes come from the stream's own bytes).

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "server/resp/resp_parser.h"

namespace {

using kiln::server::RespLimits;
using kiln::server::RespParser;
using Progress = RespParser::Progress;

RespLimits Limits() {
  RespLimits limits;
  limits.max_arguments = 16;
  limits.max_bulk_bytes = 4096;
  limits.max_inline_bytes = 256;
  return limits;
}

void Check(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "resp_parser_fuzz: %s does not hold\n", what);
  std::abort();
}

struct Parsed {
  std::vector<std::vector<std::string>> commands;
  std::string error;
};

// Parses what `parser` holds and checks what holds after every step.
void Drain(RespParser& parser, Parsed& out) {
  const RespLimits limits = Limits();
  while (out.error.empty()) {
    switch (parser.Next()) {
      case Progress::kNeedMore:
        // A bulk string's bytes are taken as they come; only an unfinished line waits.
        Check(parser.buffered() <= std::max<size_t>(limits.max_inline_bytes, 34),
              "what waits for more stays within a line's limit");
        return;
      case Progress::kError:
        Check(absl::StartsWith(parser.error(), "Protocol error: "), "errors say what they are");
        Check(parser.error().find_first_of("\r\n") == std::string::npos, "errors are one line");
        Check(parser.Next() == Progress::kError, "an error is final");
        out.error = parser.error();
        return;
      case Progress::kCommand: {
        std::vector<std::string> command = parser.TakeCommand();
        Check(!command.empty(), "a command has a name");
        Check(command.size() <= limits.max_arguments, "a command is within the argument limit");
        for (const std::string& arg : command) {
          Check(static_cast<int64_t>(arg.size()) <= limits.max_bulk_bytes,
                "an argument is within the bulk limit");
        }
        out.commands.push_back(std::move(command));
        break;
      }
    }
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string stream(reinterpret_cast<const char*>(data), size);

  RespParser whole_parser(Limits());
  Parsed whole;
  whole_parser.Append(stream);
  Drain(whole_parser, whole);

  // The same stream in pieces of 1 to 16 bytes, their sizes taken from the bytes themselves.
  RespParser split_parser(Limits());
  Parsed split;
  for (size_t at = 0; at < stream.size();) {
    const size_t n = std::min<size_t>(stream.size() - at, 1 + (data[at] * 7 + at) % 16);
    split_parser.Append(absl::string_view(stream).substr(at, n));
    Drain(split_parser, split);
    at += n;
  }

  Check(split.commands == whole.commands, "pieces give the same commands");
  Check(split.error == whole.error, "pieces give the same error");
  return 0;
}
