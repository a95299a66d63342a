#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "server/rpc/auth.h"

namespace kiln::testing {

// The authorizer a service under test checks its calls with: `tokens` in the token file's
// form, or, when empty, none at all (everyone is admin, as in a kilnd without --token-file).
inline absl::StatusOr<std::unique_ptr<server::Authorizer>> TestAuthorizer(
    const std::string& tokens) {
  if (tokens.empty()) return std::make_unique<server::Authorizer>();
  return server::Authorizer::FromText(tokens);
}

}  // namespace kiln::testing
