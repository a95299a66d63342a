#include "client/bundle.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/base/digest.h"
#include "proto/base/serialize.h"

namespace kiln::client {
namespace {

constexpr size_t kMagicBytes = 8;
constexpr size_t kHeaderBytes = kMagicBytes + 4 + 8;
constexpr size_t kChecksumBytes = 32;
// A manifest is a few hundred bytes per entry; anything near this is not a manifest.
constexpr uint64_t kMaxManifestBytes = uint64_t{1} << 30;
// Blobs are hashed and copied in pieces of this size.
constexpr int64_t kPieceBytes = int64_t{1} << 20;

void AppendLittleEndian(uint64_t value, int bytes, std::string* out) {
  for (int i = 0; i < bytes; ++i) out->push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

uint64_t ReadLittleEndian(const char* data, int bytes) {
  uint64_t value = 0;
  for (int i = bytes - 1; i >= 0; --i) value = (value << 8) | static_cast<unsigned char>(data[i]);
  return value;
}

std::string Raw(const Sha256Bytes& hash) {
  return std::string(reinterpret_cast<const char*>(hash.data()), hash.size());
}

std::string Name(const v1::Digest& d) { return absl::StrCat(d.hash(), "/", d.size_bytes()); }

// The consistency MakeBundleManifest establishes, checked on a manifest read from a file.
absl::Status CheckManifest(const v1::BundleManifest& m) {
  std::map<std::string, int64_t> sizes;
  for (int i = 0; i < m.blobs_size(); ++i) {
    const v1::Digest& d = m.blobs(i);
    if (absl::Status s = ValidateDigest(d, absl::StrCat("blobs[", i, "]")); !s.ok()) return s;
    if (i > 0 && d.hash() <= m.blobs(i - 1).hash()) {
      return absl::InvalidArgumentError(
          absl::StrCat("blobs[", i, "] ", d.hash(), " is out of order or repeated"));
    }
    sizes[d.hash()] = d.size_bytes();
  }
  for (int i = 0; i < m.actions_size(); ++i) {
    const v1::ActionEntry& e = m.actions(i);
    if (e.compile_key().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("actions[", i, "] has no compile key"));
    }
    if (i > 0 && e.compile_key() <= m.actions(i - 1).compile_key()) {
      return absl::InvalidArgumentError(
          absl::StrCat("action ", e.compile_key(), " is out of order or repeated"));
    }
    if (e.variants_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("action ", e.compile_key(), " has no variant"));
    }
    for (int v = 0; v < e.variants_size(); ++v) {
      if (e.variants(v).artifacts_size() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("action ", e.compile_key(), " variant ", v, " names no artifact"));
      }
      for (const v1::Digest& d : e.variants(v).artifacts()) {
        auto it = sizes.find(d.hash());
        if (it == sizes.end() || it->second != d.size_bytes()) {
          return absl::InvalidArgumentError(absl::StrCat("action ", e.compile_key(), " variant ", v,
                                                         " names blob ", Name(d),
                                                         ", which the bundle does not hold"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<v1::BundleManifest> MakeBundleManifest(std::vector<v1::ActionEntry> actions) {
  std::sort(actions.begin(), actions.end(), [](const v1::ActionEntry& a, const v1::ActionEntry& b) {
    return a.compile_key() < b.compile_key();
  });
  v1::BundleManifest manifest;
  std::map<std::string, int64_t> blobs;  // hash -> size, sorted
  for (size_t i = 0; i < actions.size(); ++i) {
    v1::ActionEntry& e = actions[i];
    if (e.compile_key().empty()) return absl::InvalidArgumentError("an action has no compile key");
    // Earlier entries have moved into the manifest already.
    if (i > 0 && e.compile_key() == manifest.actions(manifest.actions_size() - 1).compile_key()) {
      return absl::InvalidArgumentError(absl::StrCat("action ", e.compile_key(), " appears twice"));
    }
    if (e.variants_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("action ", e.compile_key(), " has no variant"));
    }
    for (v1::ActionVariant& v : *e.mutable_variants()) {
      v.set_last_used_unix_ms(0);  // usage, not content: the importer sets its own
      if (v.artifacts_size() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("action ", e.compile_key(), " has a variant without artifacts"));
      }
      for (const v1::Digest& d : v.artifacts()) {
        if (absl::Status s = ValidateDigest(d); !s.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("action ", e.compile_key(), ": ", s.message()));
        }
        auto [it, added] = blobs.emplace(d.hash(), d.size_bytes());
        if (!added && it->second != d.size_bytes()) {
          return absl::InvalidArgumentError(absl::StrCat("blob ", d.hash(), " is named with sizes ",
                                                         it->second, " and ", d.size_bytes()));
        }
      }
    }
    *manifest.add_actions() = std::move(e);
  }
  for (const auto& [hash, size] : blobs) {
    v1::Digest* d = manifest.add_blobs();
    d->set_hash(hash);
    d->set_size_bytes(size);
  }
  return manifest;
}

absl::Status WriteBundle(
    const std::string& path, const v1::BundleManifest& manifest,
    absl::FunctionRef<absl::StatusOr<std::string>(const v1::Digest&)> read_blob) {
  if (absl::Status s = CheckManifest(manifest); !s.ok()) return s;
  const std::string manifest_bytes = DeterministicBytes(manifest);
  std::string head(kBundleMagic, kMagicBytes);
  AppendLittleEndian(kBundleVersion, 4, &head);
  AppendLittleEndian(manifest_bytes.size(), 8, &head);
  head += manifest_bytes;
  head += Raw(Sha256(head));

  const std::string partial = absl::StrCat(path, ".partial");
  std::error_code ec;
  auto fail = [&](absl::Status status) {
    std::filesystem::remove(partial, ec);
    return status;
  };
  std::ofstream out(partial, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::PermissionDeniedError(
        absl::StrCat("cannot write ", partial, ": ", std::strerror(errno)));
  }
  out.write(head.data(), static_cast<std::streamsize>(head.size()));
  for (const v1::Digest& d : manifest.blobs()) {
    absl::StatusOr<std::string> bytes = read_blob(d);
    if (!bytes.ok()) {
      return fail(absl::Status(bytes.status().code(), absl::StrCat("reading blob ", Name(d), ": ",
                                                                   bytes.status().message())));
    }
    if (static_cast<int64_t>(bytes->size()) != d.size_bytes() || Sha256Hex(*bytes) != d.hash()) {
      return fail(absl::DataLossError(absl::StrCat("blob ", Name(d), " came back as ",
                                                   Name(DigestOf(*bytes)), "; not written")));
    }
    out.write(bytes->data(), static_cast<std::streamsize>(bytes->size()));
    if (!out) break;
  }
  out.close();
  if (!out) return fail(absl::DataLossError(absl::StrCat("writing ", partial, " failed")));
  std::filesystem::rename(partial, path, ec);
  if (ec) {
    return fail(absl::PermissionDeniedError(
        absl::StrCat("cannot move ", partial, " to ", path, ": ", ec.message())));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<BundleReader>> BundleReader::Open(const std::string& path) {
  std::error_code ec;
  const uintmax_t file_size = std::filesystem::file_size(path, ec);
  if (ec) {
    if (ec == std::errc::no_such_file_or_directory) {
      return absl::NotFoundError(absl::StrCat("no bundle at ", path));
    }
    return absl::InvalidArgumentError(absl::StrCat("cannot read ", path, ": ", ec.message()));
  }
  std::unique_ptr<BundleReader> r(new BundleReader());
  r->path_ = path;
  r->in_.open(path, std::ios::binary);
  if (!r->in_) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read ", path, ": ", std::strerror(errno)));
  }
  char header[kHeaderBytes];
  const size_t got = std::min<uintmax_t>(file_size, kHeaderBytes);
  r->in_.read(header, static_cast<std::streamsize>(got));
  if (got < kMagicBytes || std::memcmp(header, kBundleMagic, kMagicBytes) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, " is not a Kiln bundle: it does not begin with \"", kBundleMagic, "\""));
  }
  if (got < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: ", file_size,
                                            " bytes, shorter than the ", kHeaderBytes,
                                            "-byte header"));
  }
  const uint32_t version = static_cast<uint32_t>(ReadLittleEndian(header + kMagicBytes, 4));
  if (version != kBundleVersion) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is a bundle of format version ", version,
                                                   "; this kiln reads version ", kBundleVersion));
  }
  const uint64_t manifest_size = ReadLittleEndian(header + kMagicBytes + 4, 8);
  if (manifest_size > kMaxManifestBytes ||
      kHeaderBytes + manifest_size + kChecksumBytes > file_size) {
    return absl::DataLossError(
        absl::StrCat(path, " is truncated or corrupt: its header declares a manifest of ",
                     manifest_size, " bytes, and the file is ", file_size, " bytes"));
  }
  std::string head(header, kHeaderBytes);
  head.resize(kHeaderBytes + manifest_size);
  r->in_.read(head.data() + kHeaderBytes, static_cast<std::streamsize>(manifest_size));
  char checksum[kChecksumBytes];
  r->in_.read(checksum, kChecksumBytes);
  if (!r->in_) return absl::DataLossError(absl::StrCat("reading ", path, " failed"));
  if (Raw(Sha256(head)) != std::string(checksum, kChecksumBytes)) {
    return absl::DataLossError(
        absl::StrCat(path, " is corrupt: the manifest's checksum does not match its bytes"));
  }
  if (!r->manifest_.ParseFromArray(head.data() + kHeaderBytes, static_cast<int>(manifest_size))) {
    return absl::DataLossError(absl::StrCat(path, " is corrupt: its manifest does not parse"));
  }
  if (absl::Status s = CheckManifest(r->manifest_); !s.ok()) {
    return absl::DataLossError(absl::StrCat(path, " has an inconsistent manifest: ", s.message()));
  }
  int64_t offset = static_cast<int64_t>(kHeaderBytes + manifest_size + kChecksumBytes);
  for (const v1::Digest& d : r->manifest_.blobs()) {
    r->offsets_.push_back(offset);
    offset += d.size_bytes();
    r->blob_bytes_ += d.size_bytes();
  }
  if (static_cast<uintmax_t>(offset) > file_size) {
    return absl::DataLossError(absl::StrCat(path, " is truncated: its manifest names ",
                                            r->manifest_.blobs_size(), " blobs ending at byte ",
                                            offset, ", but the file has ", file_size, " bytes"));
  }
  if (static_cast<uintmax_t>(offset) < file_size) {
    return absl::DataLossError(
        absl::StrCat(path, " is corrupt: ", file_size - static_cast<uintmax_t>(offset),
                     " bytes follow its last blob"));
  }
  return r;
}

absl::Status BundleReader::Corrupt(int index, const std::string& actual_hash) const {
  const v1::Digest& d = manifest_.blobs(index);
  return absl::DataLossError(absl::StrCat(path_, " is corrupt: blob ", Name(d), " (", index + 1,
                                          " of ", manifest_.blobs_size(), ", at byte ",
                                          offsets_[index], ") hashes to ", actual_hash));
}

absl::Status BundleReader::VerifyBlobs() {
  std::string piece;
  for (int i = 0; i < manifest_.blobs_size(); ++i) {
    in_.clear();
    in_.seekg(offsets_[i]);
    Sha256Hasher hasher;
    for (int64_t left = manifest_.blobs(i).size_bytes(); left > 0;) {
      piece.resize(static_cast<size_t>(std::min(left, kPieceBytes)));
      in_.read(piece.data(), static_cast<std::streamsize>(piece.size()));
      if (!in_) return absl::DataLossError(absl::StrCat("reading ", path_, " failed"));
      hasher.Update(piece);
      left -= static_cast<int64_t>(piece.size());
    }
    const std::string actual = hasher.FinishHex();
    if (actual != manifest_.blobs(i).hash()) return Corrupt(i, actual);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> BundleReader::ReadBlob(int index) {
  if (index < 0 || index >= manifest_.blobs_size()) {
    return absl::OutOfRangeError(absl::StrCat("no blob ", index, " in ", path_));
  }
  std::string bytes(static_cast<size_t>(manifest_.blobs(index).size_bytes()), '\0');
  in_.clear();
  in_.seekg(offsets_[index]);
  in_.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in_) return absl::DataLossError(absl::StrCat("reading ", path_, " failed"));
  const std::string actual = Sha256Hex(bytes);
  if (actual != manifest_.blobs(index).hash()) return Corrupt(index, actual);
  return bytes;
}

}  // namespace kiln::client
