#pragma once

// Who may call what. With a token file, every call carries `authorization: Bearer TOKEN`;
// the token maps to a role: `read` (cache reads and compile hits) < `compile` (may compile
// and store) < `admin` (stats, explain, eviction), each including the ones before. Missing or
// unknown token: UNAUTHENTICATED; a role too low: PERMISSION_DENIED. Without a token file
// every caller has every role (loopback development). Thread-safe after construction.

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/support/status.h"

namespace grpc {
class ServerContextBase;
}

namespace kiln::server {

enum class Role { kRead = 0, kCompile = 1, kAdmin = 2 };

const char* RoleName(Role role);

// The caller of one RPC, as far as Kiln knows it.
struct Identity {
  std::string name;  // the token's name, the client certificate's CN, or the peer address
  Role role = Role::kAdmin;
};

class Authorizer {
 public:
  // No token file: everyone is admin.
  Authorizer() = default;

  // Reads a token file: one `ROLE TOKEN [NAME]` per line, `#` starts a comment. Errors name
  // the line. Tokens must be at least 16 characters.
  static absl::StatusOr<std::unique_ptr<Authorizer>> FromFile(const std::string& path);
  static absl::StatusOr<std::unique_ptr<Authorizer>> FromText(absl::string_view text);

  // Identifies the caller and checks that it holds `needed`.
  absl::StatusOr<Identity> Check(const grpc::ServerContextBase& context, Role needed) const;
  // Check for an RPC that needs only the verdict: OK, or the status to answer the call with.
  grpc::Status Permit(const grpc::ServerContextBase& context, Role needed) const;

  // The identity a token grants, without a role check (UNAUTHENTICATED if unknown).
  absl::StatusOr<Identity> Identify(const grpc::ServerContextBase& context) const;

  // The same for a caller outside gRPC: `authorization` is its Authorization header (null
  // when absent). Without a token file the caller is an unnamed admin.
  absl::StatusOr<Identity> IdentifyHeader(const absl::string_view* authorization) const;
  absl::StatusOr<Identity> CheckHeader(const absl::string_view* authorization, Role needed) const;

  bool enabled() const { return !tokens_.empty(); }

 private:
  std::map<std::string, Identity, std::less<>> tokens_;  // token -> identity
};

}  // namespace kiln::server
