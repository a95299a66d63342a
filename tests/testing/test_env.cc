#include "tests/testing/test_env.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <zlib.h>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "proto/fx/capture_import.h"

namespace kiln::testing {

namespace fs = std::filesystem;

std::string GraphsDir() {
  if (const char* env = std::getenv("KILN_GRAPHS_DIR"); env != nullptr && *env != '\0') return env;
  return KILN_GRAPHS_DIR;
}

std::vector<std::string> GraphFiles() {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(GraphsDir())) {
    if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string BinaryDir() {
  if (const char* env = std::getenv("KILN_BINARY_DIR"); env != nullptr && *env != '\0') return env;
  return KILN_BINARY_DIR;
}

std::string KilndPath() { return BinaryDir() + "/server/kilnd"; }
std::string KilnCliPath() { return BinaryDir() + "/client/kiln"; }
std::string KilncPath() { return BinaryDir() + "/compiler/kilnc"; }

absl::StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

absl::StatusOr<std::string> ReadDataFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFile(path);
  if (!bytes.ok() || !absl::EndsWith(path, ".gz")) return bytes;
  z_stream z{};
  // 16 + MAX_WBITS: a gzip header and trailer around the deflate stream.
  if (inflateInit2(&z, 16 + MAX_WBITS) != Z_OK) {
    return absl::InternalError(absl::StrCat("cannot start inflating ", path));
  }
  z.next_in = reinterpret_cast<Bytef*>(bytes->data());
  z.avail_in = static_cast<uInt>(bytes->size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    z.next_out = reinterpret_cast<Bytef*>(buffer);
    z.avail_out = sizeof buffer;
    rc = inflate(&z, Z_NO_FLUSH);
    out.append(buffer, sizeof buffer - z.avail_out);
  }
  inflateEnd(&z);
  if (rc != Z_STREAM_END) {
    return absl::InvalidArgumentError(absl::StrCat(path, " is not a whole gzip file"));
  }
  return out;
}

v1::Graph LoadSharedGraph(const std::string& file_name) {
  absl::StatusOr<std::string> text = ReadDataFile(GraphsDir() + "/" + file_name);
  EXPECT_TRUE(text.ok()) << text.status();
  if (!text.ok()) return {};
  absl::StatusOr<v1::Graph> graph = fx::ImportCapture(*text);
  EXPECT_TRUE(graph.ok()) << file_name << ": " << graph.status();
  return graph.ok() ? *std::move(graph) : v1::Graph();
}

std::string PseudoRandomBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (char& c : s) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<char>(x);
  }
  return s;
}

TempDir::TempDir() {
  std::string pattern = (fs::temp_directory_path() / "kiln-test-XXXXXX").string();
  if (mkdtemp(pattern.data()) == nullptr) std::abort();
  path_ = pattern;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

}  // namespace kiln::testing
