#include "compiler/fuse/fuse.h"

namespace kiln::fuse {

absl::StatusOr<loop::Program> Fuse(loop::Program program, const FuseOptions& options) {
  (void)options;
  return program;
}

}  // namespace kiln::fuse
