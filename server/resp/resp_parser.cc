#include "server/resp/resp_parser.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace kiln::server {
namespace {

// A `*N` or `$N` line: the sign and digits of a 64-bit number fit with room to spare.
constexpr size_t kMaxHeaderLine = 32;
// What a bulk string reserves before its bytes arrive: a header alone must not make the
// connection allocate the whole length it announces.
constexpr int64_t kMaxReserve = 1 << 20;

// A byte as a message shows it: itself when printable, else its code.
std::string Shown(char c) {
  if (absl::ascii_isprint(static_cast<unsigned char>(c)))
    return absl::StrCat("'", std::string(1, c), "'");
  return absl::StrCat("byte ", static_cast<int>(static_cast<unsigned char>(c)));
}

// A non-negative or negative decimal number, the whole of `digits`.
bool ParseNumber(absl::string_view digits, int64_t* value) {
  if (digits.empty() || digits.size() > 20) return false;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(digits[i])) &&
        !(i == 0 && digits[i] == '-')) {
      return false;
    }
  }
  return absl::SimpleAtoi(digits, value);
}

}  // namespace

RespParser::RespParser(const RespLimits& limits) : limits_(limits) {}

void RespParser::Append(absl::string_view bytes) {
  if (failed_) return;
  buffer_.Append(bytes);
}

RespParser::Progress RespParser::Fail(std::string message) {
  failed_ = true;
  error_ = absl::StrCat("Protocol error: ", message);
  command_.clear();
  buffer_.Clear();
  return Progress::kError;
}

bool RespParser::HeaderLine(absl::string_view* line, bool* failed) {
  const absl::string_view pending = buffer_.pending();
  const absl::string_view window = pending.substr(0, kMaxHeaderLine + 2);
  const size_t end = window.find("\r\n");
  if (end == absl::string_view::npos) {
    // Without its CRLF within the limit the line is too long, however the rest arrives.
    if (window.size() == kMaxHeaderLine + 2) {
      Fail(absl::StrCat("a '", std::string(1, pending[0]), "' line longer than ", kMaxHeaderLine,
                        " bytes"));
      *failed = true;
    }
    return false;
  }
  *line = pending.substr(0, end);
  buffer_.Consume(end + 2);
  return true;
}

RespParser::Progress RespParser::ParseInline() {
  const absl::string_view pending = buffer_.pending();
  const size_t end = pending.find('\n');
  const size_t length = end == absl::string_view::npos ? pending.size() : end;
  if (length > limits_.max_inline_bytes) {
    return Fail(absl::StrCat("an inline command longer than ", limits_.max_inline_bytes,
                             " bytes (send large values as a multibulk request)"));
  }
  if (end == absl::string_view::npos) return Progress::kNeedMore;
  absl::string_view line = pending.substr(0, end);
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  buffer_.Consume(end + 1);
  command_.clear();
  size_t i = 0;
  while (i < line.size()) {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    size_t j = i;
    while (j < line.size() && line[j] != ' ' && line[j] != '\t') ++j;
    if (j > i) {
      if (command_.size() == limits_.max_arguments) {
        return Fail(
            absl::StrCat("an inline command of more than ", limits_.max_arguments, " arguments"));
      }
      command_.emplace_back(line.substr(i, j - i));
    }
    i = j;
  }
  return Progress::kCommand;  // empty when the line held no word
}

RespParser::Progress RespParser::Next() {
  if (failed_) return Progress::kError;
  while (true) {
    switch (state_) {
      case State::kStart: {
        if (buffered() == 0) return Progress::kNeedMore;
        if (buffer_.front() != '*') {
          const Progress p = ParseInline();
          if (p == Progress::kCommand && command_.empty()) continue;  // an empty line
          return p;
        }
        absl::string_view line;
        bool failed = false;
        if (!HeaderLine(&line, &failed)) return failed ? Progress::kError : Progress::kNeedMore;
        int64_t count = 0;
        if (!ParseNumber(line.substr(1), &count)) {
          return Fail(
              absl::StrCat("invalid multibulk length \"", absl::CHexEscape(line.substr(1)), "\""));
        }
        if (count <= 0) continue;  // no command
        if (static_cast<uint64_t>(count) > limits_.max_arguments) {
          return Fail(absl::StrCat("a command of ", count, " arguments exceeds the limit of ",
                                   limits_.max_arguments));
        }
        command_.clear();
        command_.reserve(static_cast<size_t>(count));
        arguments_left_ = count;
        state_ = State::kBulkHeader;
        continue;
      }
      case State::kBulkHeader: {
        if (arguments_left_ == 0) {
          state_ = State::kStart;
          return Progress::kCommand;
        }
        if (buffered() == 0) return Progress::kNeedMore;
        if (buffer_.front() != '$') {
          return Fail(absl::StrCat("expected '$', got ", Shown(buffer_.front())));
        }
        absl::string_view line;
        bool failed = false;
        if (!HeaderLine(&line, &failed)) return failed ? Progress::kError : Progress::kNeedMore;
        int64_t length = 0;
        if (!ParseNumber(line.substr(1), &length) || length < 0) {
          return Fail(
              absl::StrCat("invalid bulk length \"", absl::CHexEscape(line.substr(1)), "\""));
        }
        if (length > limits_.max_bulk_bytes) {
          return Fail(absl::StrCat("a bulk string of ", length, " bytes exceeds the limit of ",
                                   limits_.max_bulk_bytes, " bytes"));
        }
        command_.emplace_back().reserve(static_cast<size_t>(std::min(length, kMaxReserve)));
        bulk_left_ = length;
        state_ = State::kBulkData;
        continue;
      }
      case State::kBulkData: {
        const size_t take = static_cast<size_t>(std::min<int64_t>(bulk_left_, buffered()));
        command_.back().append(buffer_.pending().data(), take);
        buffer_.Consume(take);
        bulk_left_ -= static_cast<int64_t>(take);
        if (bulk_left_ > 0) return Progress::kNeedMore;
        state_ = State::kBulkEnd;
        continue;
      }
      case State::kBulkEnd: {
        const absl::string_view pending = buffer_.pending().substr(0, 2);
        if (pending != absl::string_view("\r\n").substr(0, pending.size())) {
          return Fail("a bulk string is longer than its length (no CRLF after its bytes)");
        }
        if (pending.size() < 2) return Progress::kNeedMore;
        buffer_.Consume(2);
        --arguments_left_;
        state_ = State::kBulkHeader;
        continue;
      }
    }
  }
}

}  // namespace kiln::server
