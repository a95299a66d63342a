#pragma once

// Where tests find their data and the binaries under test.

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kiln/v1/graph.pb.h"

namespace kiln::testing {

// Whether this build runs under a sanitizer, whose tests run many times slower: slow tests
// check fewer points there (the release build checks them all).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// The folder of shared real graphs (env KILN_GRAPHS_DIR overrides the configured path).
std::string GraphsDir();

// Paths of every *.json graph in GraphsDir(), sorted.
std::vector<std::string> GraphFiles();

// The build tree's root (env KILN_BINARY_DIR overrides).
std::string BinaryDir();

// `BinaryDir()/server/kilnd`, `BinaryDir()/client/kiln`, `BinaryDir()/compiler/kilnc`.
std::string KilndPath();
std::string KilnCliPath();
std::string KilncPath();

absl::StatusOr<std::string> ReadFile(const std::string& path);
// The contents of `path`, gunzipped when its name ends in ".gz" (as most of the corpus is
// stored).
absl::StatusOr<std::string> ReadDataFile(const std::string& path);

// The shared graph `file_name` (e.g. "mlp_fp32.fw.json", "ref_mlp.fw.json.gz") as a
// kiln.v1.Graph; a test failure
// and an empty graph when it cannot be read or converted.
v1::Graph LoadSharedGraph(const std::string& file_name);

// `n` deterministic pseudo-random bytes; different seeds give different bytes.
std::string PseudoRandomBytes(size_t n, uint64_t seed);

// A fresh directory under $TMPDIR, removed by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kiln::testing
