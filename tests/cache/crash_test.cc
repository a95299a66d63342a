// Crash safety: a child process writes blobs and actions and reports each acknowledged write
// on stderr; the parent SIGKILLs it mid-stream, reopens the store and checks that every
// acknowledged write is there and verifies. The child is this binary, re-run with
// KILN_CRASH_CHILD_DIR set.

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "cache/cache.h"
#include "proto/base/digest.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/test_env.h"

namespace kiln::cache {
namespace {

constexpr char kChildEnv[] = "KILN_CRASH_CHILD_DIR";

using ::kiln::testing::PseudoRandomBytes;

// Sizes cycle through inline values, blob-file values and a large one now and then.
size_t SizeOf(uint64_t i) {
  static constexpr size_t kSizes[] = {100, 3000, 5000, 70000, 1000, 300000, 20, 9000};
  return kSizes[i % 8];
}

void Report(const std::string& line) {
  const std::string out = line + "\n";
  // write(2) at once: nothing waits in a stdio buffer when the kill comes.
  [[maybe_unused]] ssize_t n = write(STDERR_FILENO, out.data(), out.size());
}

// The child: writes until killed.
TEST(CrashChild, WriteForever) {
  const char* dir = std::getenv(kChildEnv);
  if (dir == nullptr) GTEST_SKIP() << "runs only as the crash test's child";
  CacheOptions o;
  o.path = dir;
  absl::StatusOr<std::unique_ptr<Cache>> cache = Cache::Open(o);
  ASSERT_TRUE(cache.ok()) << cache.status();
  for (uint64_t i = 0;; ++i) {
    const std::string bytes = PseudoRandomBytes(SizeOf(i), i);
    const v1::Digest d = DigestOf(bytes);
    ASSERT_TRUE((*cache)->store().Put(d, bytes).ok());
    Report(absl::StrCat("blob ", i));
    if (i % 4 == 3) {
      v1::ActionVariant v;
      *v.add_artifacts() = d;
      v.mutable_guards()->add_shape_env(absl::StrCat("Eq(s0, ", i, ")"));
      ASSERT_TRUE((*cache)->actions().Put(absl::StrCat("key", i / 16), v).ok());
      Report(absl::StrCat("action ", i));
    }
  }
}

TEST(CrashTest, EveryAcknowledgedWriteSurvivesSigkill) {
  if (std::getenv(kChildEnv) != nullptr) GTEST_SKIP();
  testing::TempDir dir;
  const std::string path = dir.path() + "/store";
  for (int round = 0; round < 3; ++round) {
    absl::StatusOr<testing::Subprocess> child =
        testing::Subprocess::Start({"/proc/self/exe", "--gtest_filter=CrashChild.WriteForever"},
                                   {absl::StrCat(kChildEnv, "=", path)});
    ASSERT_TRUE(child.ok()) << child.status();
    // Kill at a different point each round, well inside the stream.
    const std::string needle = absl::StrCat("blob ", 150 + round * 170);
    ASSERT_TRUE(child->WaitForStderrLine(needle, absl::Seconds(120)).has_value())
        << child->Stderr();
    child->Signal(SIGKILL);
    std::optional<int> code = child->Wait(absl::Seconds(30));
    ASSERT_TRUE(code.has_value());
    ASSERT_EQ(*code, 128 + SIGKILL);

    std::vector<uint64_t> blobs, actions;
    for (absl::string_view line : absl::StrSplit(child->Stderr(), '\n')) {
      uint64_t i = 0;
      std::istringstream in{std::string(line)};
      std::string what;
      if (!(in >> what >> i)) continue;
      if (what == "blob") blobs.push_back(i);
      if (what == "action") actions.push_back(i);
    }
    ASSERT_GE(blobs.size(), 150u + round * 170);

    CacheOptions o;
    o.path = path;
    o.background_maintenance = false;
    absl::StatusOr<std::unique_ptr<Cache>> cache = Cache::Open(o);
    ASSERT_TRUE(cache.ok()) << cache.status();
    for (uint64_t i : blobs) {
      const std::string bytes = PseudoRandomBytes(SizeOf(i), i);
      absl::StatusOr<std::string> got = (*cache)->store().Get(DigestOf(bytes));
      ASSERT_TRUE(got.ok()) << "acknowledged blob " << i << ": " << got.status();
      ASSERT_EQ(*got, bytes);
    }
    for (uint64_t i : actions) {
      absl::StatusOr<v1::ActionEntry> e = (*cache)->actions().Get(absl::StrCat("key", i / 16));
      ASSERT_TRUE(e.ok()) << "acknowledged action " << i << ": " << e.status();
      bool found = false;
      for (const v1::ActionVariant& v : e->variants()) {
        found |= v.guards().shape_env(0) == absl::StrCat("Eq(s0, ", i, ")");
      }
      EXPECT_TRUE(found) << "variant " << i;
    }
    const CacheStatistics s = (*cache)->Statistics();
    EXPECT_EQ(s.integrity_failures, 0);
    EXPECT_GE(s.blobs, static_cast<int64_t>(blobs.size()));
  }
}

}  // namespace
}  // namespace kiln::cache
