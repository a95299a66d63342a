#include "compiler/codegen/registry.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::codegen {

absl::Status BackendRegistry::Register(std::unique_ptr<Backend> backend) {
  const absl::string_view target = backend->target();
  if (!IsKnownTarget(target)) {
    return absl::InvalidArgumentError(
        absl::StrCat("a backend for unknown target `", target,
                     "` (known targets: ", absl::StrJoin(kKnownTargets, ", "), ")"));
  }
  if (Find(target) != nullptr) {
    return absl::AlreadyExistsError(
        absl::StrCat("target ", target, " has a backend registered already"));
  }
  backends_.push_back(std::move(backend));
  return absl::OkStatus();
}

const Backend* BackendRegistry::Find(absl::string_view target) const {
  for (const std::unique_ptr<Backend>& b : backends_) {
    if (b->target() == target) return b.get();
  }
  return nullptr;
}

absl::StatusOr<const Backend*> BackendRegistry::For(absl::string_view target) const {
  if (!IsKnownTarget(target)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "unknown target `", target, "` (known targets: ", absl::StrJoin(kKnownTargets, ", "), ")"));
  }
  if (const Backend* b = Find(target)) return b;
  const std::vector<absl::string_view> have = targets();
  return absl::UnimplementedError(absl::StrCat(
      "no backend registered for target ", target,
      " in this build (backends: ", have.empty() ? "none" : absl::StrJoin(have, ", "), ")"));
}

std::vector<absl::string_view> BackendRegistry::targets() const {
  std::vector<absl::string_view> out;
  out.reserve(backends_.size());
  for (const std::unique_ptr<Backend>& b : backends_) out.push_back(b->target());
  return out;
}

}  // namespace kiln::codegen
