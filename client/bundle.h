#pragma once

// A cache bundle is one file holding action-cache entries and every blob they name, so that a
// new kilnd (a fresh cluster, a CI image) starts warm: `kiln bundle export` writes one from a
// server, `kiln bundle import` loads it into another.
//
// Layout (integers little-endian):
//   offset 0        "KILNBNDL"                          magic, 8 bytes
//   offset 8        uint32 format version               kBundleVersion
//   offset 12       uint64 N                            length of the manifest
//   offset 20       N bytes                             kiln.v1.BundleManifest, deterministic
//   offset 20+N     32 bytes                            SHA-256 of bytes [0, 20+N)
//   offset 52+N     the blobs, in manifest order        each exactly its digest's size_bytes
// and nothing after the last blob. The manifest lists the entries sorted by compile key and
// the blobs sorted by hash, without usage times, so the same entries always give the same
// bytes. Every blob is named by its SHA-256 and the manifest by its own checksum: a reader
// checks all of them before anything is trusted, and refuses the whole bundle at the first
// mismatch.

#include <cstdint>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kiln/v1/cache.pb.h"

namespace kiln::client {

inline constexpr char kBundleMagic[] = "KILNBNDL";
inline constexpr uint32_t kBundleVersion = 1;

// The manifest of `actions`: entries sorted by key, their last_used_unix_ms cleared, and every
// artifact they name once in `blobs`, sorted by hash. INVALID_ARGUMENT, naming the entry, for
// a duplicate or empty key, an entry without variants, a variant without artifacts, a
// malformed digest or one hash named with two sizes.
absl::StatusOr<v1::BundleManifest> MakeBundleManifest(std::vector<v1::ActionEntry> actions);

// Writes the bundle of `manifest` (as MakeBundleManifest returns it) to `path`, taking each
// blob's bytes from `read_blob` and checking them against the digest first. The file is
// written beside `path` and renamed into place: on any error nothing is left at `path`.
absl::Status WriteBundle(
    const std::string& path, const v1::BundleManifest& manifest,
    absl::FunctionRef<absl::StatusOr<std::string>(const v1::Digest&)> read_blob);

// Reads a bundle. Open checks the header, the manifest's checksum and consistency and the
// file's length; VerifyBlobs hashes every blob. Errors name the file and what is wrong:
// NOT_FOUND (no such file), INVALID_ARGUMENT (not a bundle, or a format version this reader
// does not know), DATA_LOSS (truncated, trailing bytes, a checksum or digest that does not
// match). Not thread-safe.
class BundleReader {
 public:
  static absl::StatusOr<std::unique_ptr<BundleReader>> Open(const std::string& path);

  const v1::BundleManifest& manifest() const { return manifest_; }
  int64_t blob_bytes() const { return blob_bytes_; }

  // Hashes every blob, reading the file in pieces (memory stays small whatever the blobs'
  // sizes): DATA_LOSS naming the first blob whose bytes do not hash to its digest.
  absl::Status VerifyBlobs();
  // The bytes of manifest().blobs(index), checked against its digest again (the file may
  // have changed since VerifyBlobs).
  absl::StatusOr<std::string> ReadBlob(int index);

 private:
  BundleReader() = default;
  absl::Status Corrupt(int index, const std::string& actual_hash) const;

  std::string path_;
  std::ifstream in_;
  v1::BundleManifest manifest_;
  std::vector<int64_t> offsets_;  // where each blob starts in the file
  int64_t blob_bytes_ = 0;
};

}  // namespace kiln::client
