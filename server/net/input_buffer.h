#pragma once

// The bytes a connection has received and its parser has not consumed yet, for the
// incremental parsers of kilnd's protocol front ends (HTTP/1.1, RESP). Bytes are appended at
// the end as they arrive and consumed from the front as they are parsed. Consumed bytes are
// given back once they are all of the buffer, or at least 4 KiB and half of it, so a long
// pipelined stream costs time linear in its length however it is split.
//
// Not thread-safe: one buffer per connection.

#include <cstddef>
#include <string>

#include "absl/strings/string_view.h"

namespace kiln::server {

class InputBuffer {
 public:
  void Append(absl::string_view bytes);

  // The bytes not consumed yet; valid until the next Append or Clear.
  absl::string_view pending() const {
    return absl::string_view(buffer_.data() + start_, buffer_.size() - start_);
  }
  size_t size() const { return buffer_.size() - start_; }
  bool empty() const { return size() == 0; }
  // The first byte not consumed yet; only when !empty().
  char front() const { return buffer_[start_]; }

  // Consumes the first `n` <= size() bytes.
  void Consume(size_t n) { start_ += n; }
  // Drops every byte, consumed or not.
  void Clear();

 private:
  std::string buffer_;
  size_t start_ = 0;  // buffer_[start_, end) is not consumed yet
};

}  // namespace kiln::server
