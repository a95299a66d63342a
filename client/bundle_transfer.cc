#include "client/bundle_transfer.h"

#include <algorithm>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/bundle.h"

namespace kiln::client {
namespace {

// Digests per FindMissing call, to keep each message small.
constexpr size_t kFindMissingBatch = 4096;

BundleSummary Summarize(const v1::BundleManifest& manifest) {
  BundleSummary s;
  s.actions = manifest.actions_size();
  for (const v1::ActionEntry& e : manifest.actions()) s.variants += e.variants_size();
  s.blobs = manifest.blobs_size();
  for (const v1::Digest& d : manifest.blobs()) s.blob_bytes += d.size_bytes();
  return s;
}

}  // namespace

absl::StatusOr<int64_t> ParseSince(absl::string_view text, absl::Time now) {
  absl::Time t;
  std::string error;
  if (absl::ParseTime(absl::RFC3339_full, text, &t, &error)) return absl::ToUnixMillis(t);
  absl::Duration ago;
  if (absl::ParseDuration(text, &ago) && ago >= absl::ZeroDuration()) {
    return absl::ToUnixMillis(now - ago);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--since ", text,
                   ": expected an RFC 3339 time (2025-06-01T12:00:00Z) or a duration ago (24h)"));
}

absl::StatusOr<BundleSummary> ExportBundle(CacheClient& cache, const BundleSelection& selection,
                                           const std::string& path) {
  if (!selection.all && selection.job_id.empty() && selection.since_unix_ms <= 0 &&
      selection.compile_keys.empty()) {
    return absl::InvalidArgumentError(
        "name what to export: a job, a time (since) or compile keys, or ask for all");
  }
  v1::ListActionsRequest request;
  request.set_job_id(selection.job_id);
  request.set_since_unix_ms(selection.since_unix_ms);
  for (const std::string& k : selection.compile_keys) request.add_compile_keys(k);
  absl::StatusOr<std::vector<v1::ActionEntry>> entries = cache.ListActions(request);
  if (!entries.ok()) return entries.status();
  if (entries->empty()) {
    return absl::NotFoundError(absl::StrCat(
        "no action entry matches",
        selection.job_id.empty() ? "" : absl::StrCat(" job ", selection.job_id),
        selection.since_unix_ms <= 0 ? ""
                                     : absl::StrCat(" since unix ms ", selection.since_unix_ms),
        selection.compile_keys.empty() ? "" : " the keys given"));
  }
  absl::StatusOr<v1::BundleManifest> manifest = MakeBundleManifest(*std::move(entries));
  if (!manifest.ok()) return manifest.status();
  absl::Status written =
      WriteBundle(path, *manifest, [&cache](const v1::Digest& d) -> absl::StatusOr<std::string> {
        absl::StatusOr<std::string> bytes = cache.Get(d);
        if (absl::IsNotFound(bytes.status())) {
          return absl::NotFoundError(absl::StrCat(
              "the server no longer holds it (evicted while exporting?); export again: ",
              bytes.status().message()));
        }
        return bytes;
      });
  if (!written.ok()) return written;
  return Summarize(*manifest);
}

absl::StatusOr<BundleSummary> ImportBundle(CacheClient& cache, const std::string& path) {
  absl::StatusOr<std::unique_ptr<BundleReader>> reader = BundleReader::Open(path);
  if (!reader.ok()) return reader.status();
  if (absl::Status s = (*reader)->VerifyBlobs(); !s.ok()) return s;
  const v1::BundleManifest& manifest = (*reader)->manifest();
  BundleSummary summary = Summarize(manifest);

  // Blobs first, and only those the server lacks.
  std::vector<int> missing;
  for (size_t start = 0; start < static_cast<size_t>(manifest.blobs_size());
       start += kFindMissingBatch) {
    const size_t end =
        std::min(start + kFindMissingBatch, static_cast<size_t>(manifest.blobs_size()));
    std::vector<v1::Digest> batch(manifest.blobs().begin() + start, manifest.blobs().begin() + end);
    absl::StatusOr<std::vector<v1::Digest>> absent = cache.FindMissing(batch);
    if (!absent.ok()) return absent.status();
    // FindMissing answers in request order, and the manifest is sorted by hash.
    size_t j = 0;
    for (size_t i = start; i < end && j < absent->size(); ++i) {
      if (manifest.blobs(static_cast<int>(i)).hash() == (*absent)[j].hash()) {
        missing.push_back(static_cast<int>(i));
        ++j;
      }
    }
  }
  for (int i : missing) {
    absl::StatusOr<std::string> bytes = (*reader)->ReadBlob(i);
    if (!bytes.ok()) return bytes.status();
    absl::StatusOr<CacheClient::PutResult> put = cache.Put(manifest.blobs(i), *bytes);
    if (!put.ok()) {
      return absl::Status(put.status().code(),
                          absl::StrCat("storing blob ", manifest.blobs(i).hash(), " of ", path,
                                       ": ", put.status().message()));
    }
    ++summary.blobs_written;
  }
  for (const v1::ActionEntry& e : manifest.actions()) {
    for (const v1::ActionVariant& v : e.variants()) {
      if (absl::Status s = cache.PutAction(e.compile_key(), v); !s.ok()) {
        return absl::Status(s.code(), absl::StrCat("storing action ", e.compile_key(), " of ", path,
                                                   ": ", s.message()));
      }
    }
  }
  return summary;
}

}  // namespace kiln::client
