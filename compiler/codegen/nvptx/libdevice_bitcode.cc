// libdevice's bitcode, embedded at build time so that kilnd needs no CUDA toolkit files beside
// it at run time. KILN_LIBDEVICE_PATH and KILN_LIBDEVICE_SHA256 (string literals) come from
// CMake; the digest on the command line also makes a new libdevice rebuild this file.

#include "absl/strings/string_view.h"
#include "compiler/codegen/nvptx/libdevice.h"

// The bitcode reader needs the bytes 4-byte aligned.
asm(".pushsection .rodata.kiln_libdevice, \"a\"\n"
    ".balign 16\n"
    ".hidden kiln_libdevice_begin\n"
    ".hidden kiln_libdevice_end\n"
    "kiln_libdevice_begin:\n"
    ".incbin \"" KILN_LIBDEVICE_PATH
    "\"\n"
    "kiln_libdevice_end:\n"
    ".popsection\n");

extern "C" const char kiln_libdevice_begin[];
extern "C" const char kiln_libdevice_end[];

namespace kiln::codegen::nvptx {

absl::string_view LibdeviceBitcode() {
  return absl::string_view(kiln_libdevice_begin,
                           static_cast<size_t>(kiln_libdevice_end - kiln_libdevice_begin));
}

absl::string_view LibdeviceSha256() { return KILN_LIBDEVICE_SHA256; }

}  // namespace kiln::codegen::nvptx
