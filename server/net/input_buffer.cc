#include "server/net/input_buffer.h"

namespace kiln::server {
namespace {

// The least number of consumed bytes worth moving the rest for (unless nothing is left).
constexpr size_t kCompactBytes = 4096;

}  // namespace

void InputBuffer::Append(absl::string_view bytes) {
  if (start_ > 0 &&
      (start_ == buffer_.size() || (start_ >= kCompactBytes && start_ >= buffer_.size() / 2))) {
    buffer_.erase(0, start_);
    start_ = 0;
  }
  buffer_.append(bytes.data(), bytes.size());
}

void InputBuffer::Clear() {
  buffer_.clear();
  start_ = 0;
}

}  // namespace kiln::server
