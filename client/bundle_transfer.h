#pragma once

// Moving cache bundles (client/bundle.h) between a file and a kilnd through its Cache
// service: ExportBundle selects entries with Cache.ListActions and fetches their blobs;
// ImportBundle verifies the whole file first and then writes blobs before the entries that
// name them, so a server never holds an entry whose blobs are missing, and a bundle that
// fails verification writes nothing at all. Export needs the `read` role, import `compile`.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "client/cache_client.h"

namespace kiln::client {

// Which entries to export: those matching every field set (at least one must be).
struct BundleSelection {
  std::string job_id;                     // keys the job compiled or hit
  int64_t since_unix_ms = 0;              // keys with a variant compiled at or after
  std::vector<std::string> compile_keys;  // these keys; one the server lacks is an error
  bool all = false;                       // every entry the server holds
};

// What a bundle held, and for an import what was written.
struct BundleSummary {
  int actions = 0;
  int variants = 0;
  int blobs = 0;
  int64_t blob_bytes = 0;
  int blobs_written = 0;  // import: blobs the server lacked (the others were present)
};

// A --since argument as unix milliseconds: an RFC 3339 time ("2025-06-01T12:00:00Z") or a
// duration before `now` ("90m", "24h"). INVALID_ARGUMENT saying which forms are accepted.
absl::StatusOr<int64_t> ParseSince(absl::string_view text, absl::Time now);

// Writes the entries `selection` names and their blobs to `path`. NOT_FOUND when nothing
// matches or a named key is unknown; INVALID_ARGUMENT for an empty selection; a blob evicted
// while exporting fails the export (run it again). Nothing is left at `path` on error.
absl::StatusOr<BundleSummary> ExportBundle(CacheClient& cache, const BundleSelection& selection,
                                           const std::string& path);

// Loads the bundle at `path` into the server: BundleReader::Open and VerifyBlobs first (any
// error refuses the bundle whole, with nothing written), then the blobs the server lacks, then
// every variant through Cache.PutAction (which keeps the variant's creation time).
absl::StatusOr<BundleSummary> ImportBundle(CacheClient& cache, const std::string& path);

}  // namespace kiln::client
