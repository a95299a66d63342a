#pragma once

// How the C ABI's calls report a failure (kiln_cuda.h): they return a code and write a
// NUL-terminated message, cut to the caller's buffer.

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace kiln::runtime::cuda {

inline int Fail(int code, const std::string& message, char* error, size_t error_size) {
  if (error != nullptr && error_size > 0) {
    const size_t n = std::min(message.size(), error_size - 1);
    std::memcpy(error, message.data(), n);
    error[n] = '\0';
  }
  return code;
}

}  // namespace kiln::runtime::cuda
