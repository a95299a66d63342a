#include "proto/base/digest.h"

#include <openssl/evp.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace kiln {
namespace {

// Fetched once: EVP_sha256() makes OpenSSL 3 look the algorithm up on every use, which
// costs more than hashing the few hundred bytes of a compile key's node encodings.
const EVP_MD* Sha256Md() {
  static const EVP_MD* md = [] {
    const EVP_MD* fetched = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    return fetched != nullptr ? fetched : EVP_sha256();
  }();
  return md;
}

EVP_MD_CTX* NewSha256Context() {
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  if (ctx == nullptr || EVP_DigestInit_ex(ctx, Sha256Md(), nullptr) != 1) std::abort();
  return ctx;
}

}  // namespace

Sha256Hasher::Sha256Hasher() : ctx_(NewSha256Context()) {}

Sha256Hasher::~Sha256Hasher() { EVP_MD_CTX_free(static_cast<EVP_MD_CTX*>(ctx_)); }

void Sha256Hasher::Update(absl::string_view bytes) {
  EVP_DigestUpdate(static_cast<EVP_MD_CTX*>(ctx_), bytes.data(), bytes.size());
}

Sha256Bytes Sha256Hasher::Finish() {
  Sha256Bytes out{};
  unsigned int len = 0;
  EVP_DigestFinal_ex(static_cast<EVP_MD_CTX*>(ctx_), out.data(), &len);
  return out;
}

std::string Sha256Hasher::FinishHex() {
  Sha256Bytes raw = Finish();
  return ToHex(absl::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
}

Sha256Bytes Sha256(absl::string_view bytes) {
  Sha256Bytes out{};
  unsigned int len = 0;
  EVP_Digest(bytes.data(), bytes.size(), out.data(), &len, Sha256Md(), nullptr);
  return out;
}

std::string ToHex(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(bytes.size() * 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto b = static_cast<uint8_t>(bytes[i]);
    out[2 * i] = kDigits[b >> 4];
    out[2 * i + 1] = kDigits[b & 0xf];
  }
  return out;
}

std::string Sha256Hex(absl::string_view bytes) {
  Sha256Bytes raw = Sha256(bytes);
  return ToHex(absl::string_view(reinterpret_cast<const char*>(raw.data()), raw.size()));
}

v1::Digest DigestOf(absl::string_view bytes) {
  v1::Digest d;
  d.set_hash(Sha256Hex(bytes));
  d.set_size_bytes(static_cast<int64_t>(bytes.size()));
  return d;
}

bool IsSha256Hex(absl::string_view hash) {
  if (hash.size() != 64) return false;
  for (char c : hash) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

absl::Status ValidateDigest(const v1::Digest& digest, absl::string_view field) {
  if (!IsSha256Hex(digest.hash())) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".hash: expected 64 lowercase hex characters, got \"",
                     digest.hash().substr(0, 80), "\""));
  }
  if (digest.size_bytes() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, ".size_bytes: must not be negative, got ", digest.size_bytes()));
  }
  return absl::OkStatus();
}

}  // namespace kiln
