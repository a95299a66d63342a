#include "server/rpc/auth.h"

#include <grpcpp/server_context.h>
#include <openssl/crypto.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "proto/rpc/grpc_status.h"

namespace kiln::server {
namespace {

constexpr size_t kMinTokenLength = 16;

bool ParseRole(absl::string_view text, Role* role) {
  if (text == "read") {
    *role = Role::kRead;
  } else if (text == "compile") {
    *role = Role::kCompile;
  } else if (text == "admin") {
    *role = Role::kAdmin;
  } else {
    return false;
  }
  return true;
}

// The name a client certificate carries, or the peer address.
std::string PeerName(const grpc::ServerContextBase& context) {
  std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
  if (auth != nullptr && auth->IsPeerAuthenticated()) {
    for (const auto& property : auth->FindPropertyValues("x509_common_name")) {
      return std::string(property.data(), property.size());
    }
  }
  return context.peer();
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kRead:
      return "read";
    case Role::kCompile:
      return "compile";
    case Role::kAdmin:
      return "admin";
  }
  return "read";
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("cannot read token file ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  absl::StatusOr<std::unique_ptr<Authorizer>> a = FromText(ss.str());
  if (!a.ok()) return absl::InvalidArgumentError(absl::StrCat(path, ": ", a.status().message()));
  return a;
}

absl::StatusOr<std::unique_ptr<Authorizer>> Authorizer::FromText(absl::string_view text) {
  auto authorizer = std::make_unique<Authorizer>();
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (size_t hash = line.find('#'); hash != absl::string_view::npos) line = line.substr(0, hash);
    std::vector<absl::string_view> fields =
        absl::StrSplit(absl::StripAsciiWhitespace(line), ' ', absl::SkipEmpty());
    if (fields.empty()) continue;
    Identity identity;
    if (fields.size() < 2 || fields.size() > 3 || !ParseRole(fields[0], &identity.role)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "line ", line_number, ": expected `ROLE TOKEN [NAME]` with ROLE read, compile or admin"));
    }
    if (fields[1].size() < kMinTokenLength) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": token shorter than ",
                                                     kMinTokenLength, " characters"));
    }
    identity.name =
        fields.size() == 3 ? std::string(fields[2]) : absl::StrCat("token#", line_number);
    if (!authorizer->tokens_.emplace(std::string(fields[1]), identity).second) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": duplicate token"));
    }
  }
  if (authorizer->tokens_.empty()) {
    return absl::InvalidArgumentError("the token file holds no tokens");
  }
  return authorizer;
}

namespace {

// `identity`, if its role includes `needed`; PERMISSION_DENIED otherwise.
absl::StatusOr<Identity> HoldsRole(Identity identity, Role needed) {
  if (static_cast<int>(identity.role) < static_cast<int>(needed)) {
    return absl::PermissionDeniedError(absl::StrCat("the token of ", identity.name, " has role ",
                                                    RoleName(identity.role), "; this call needs ",
                                                    RoleName(needed)));
  }
  return identity;
}

}  // namespace

absl::StatusOr<Identity> Authorizer::Identify(const grpc::ServerContextBase& context) const {
  if (tokens_.empty()) return Identity{PeerName(context), Role::kAdmin};
  const auto& metadata = context.client_metadata();
  auto it = metadata.find("authorization");
  if (it == metadata.end()) return IdentifyHeader(nullptr);
  const absl::string_view header(it->second.data(), it->second.size());
  return IdentifyHeader(&header);
}

absl::StatusOr<Identity> Authorizer::IdentifyHeader(const absl::string_view* authorization) const {
  if (tokens_.empty()) return Identity{"", Role::kAdmin};
  if (authorization == nullptr) {
    return absl::UnauthenticatedError("missing `authorization: Bearer TOKEN` metadata");
  }
  absl::string_view header = *authorization;
  if (!absl::ConsumePrefix(&header, "Bearer ")) {
    return absl::UnauthenticatedError("the authorization metadata is not a Bearer token");
  }
  // Compare every token in constant time so timing does not reveal a prefix match.
  const Identity* found = nullptr;
  for (const auto& [token, identity] : tokens_) {
    if (token.size() == header.size() &&
        CRYPTO_memcmp(token.data(), header.data(), token.size()) == 0) {
      found = &identity;
    }
  }
  if (found == nullptr) return absl::UnauthenticatedError("unknown token");
  return *found;
}

absl::StatusOr<Identity> Authorizer::Check(const grpc::ServerContextBase& context,
                                           Role needed) const {
  absl::StatusOr<Identity> identity = Identify(context);
  if (!identity.ok()) return identity.status();
  return HoldsRole(*std::move(identity), needed);
}

grpc::Status Authorizer::Permit(const grpc::ServerContextBase& context, Role needed) const {
  return ToGrpcStatus(Check(context, needed).status());
}

absl::StatusOr<Identity> Authorizer::CheckHeader(const absl::string_view* authorization,
                                                 Role needed) const {
  absl::StatusOr<Identity> identity = IdentifyHeader(authorization);
  if (!identity.ok()) return identity.status();
  return HoldsRole(*std::move(identity), needed);
}

}  // namespace kiln::server
