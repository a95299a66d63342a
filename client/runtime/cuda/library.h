#pragma once

// What the runtime's look-ups in libraries it opens at run time (the CUDA driver, cuBLASLt)
// share.

#include <dlfcn.h>

#include <string>

namespace kiln::runtime::cuda {

// Points `out` at `symbol` of the opened `library`; false, with `error` naming the library
// (`what`) and the symbol, when it has none.
template <typename Fn>
bool Resolve(void* library, const char* symbol, const char* what, Fn* out, std::string* error) {
  void* address = dlsym(library, symbol);
  if (address == nullptr) {
    *error = std::string(what) + " has no " + symbol;
    return false;
  }
  *out = reinterpret_cast<Fn>(address);
  return true;
}

}  // namespace kiln::runtime::cuda
