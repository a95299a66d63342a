#pragma once

// SHA-256 digests as Kiln names blobs and keys: 64 lowercase hex characters. Thread-safe,
// no state.

#include <array>
#include <cstdint>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "kiln/v1/artifact.pb.h"

namespace kiln {

using Sha256Bytes = std::array<uint8_t, 32>;

// The raw SHA-256 of `bytes`.
Sha256Bytes Sha256(absl::string_view bytes);

// The SHA-256 of `bytes` as 64 lowercase hex characters.
std::string Sha256Hex(absl::string_view bytes);

// Lowercase hex of arbitrary bytes.
std::string ToHex(absl::string_view bytes);

// The digest (hash and size) of `bytes`.
v1::Digest DigestOf(absl::string_view bytes);

// OK when `digest` has a 64-character lowercase hex hash and a non-negative size;
// otherwise INVALID_ARGUMENT naming `field` and what is wrong.
absl::Status ValidateDigest(const v1::Digest& digest, absl::string_view field = "digest");

// OK when `hash` is 64 lowercase hex characters.
bool IsSha256Hex(absl::string_view hash);

// An incremental SHA-256, for hashing data that arrives in pieces.
class Sha256Hasher {
 public:
  Sha256Hasher();
  ~Sha256Hasher();
  Sha256Hasher(const Sha256Hasher&) = delete;
  Sha256Hasher& operator=(const Sha256Hasher&) = delete;

  void Update(absl::string_view bytes);
  // Finishes the hash; the hasher must not be used afterwards.
  Sha256Bytes Finish();
  std::string FinishHex();

 private:
  void* ctx_;  // EVP_MD_CTX, kept opaque so OpenSSL stays out of this header
};

}  // namespace kiln
