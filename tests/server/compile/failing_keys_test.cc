// FailingKeys: what a compile that took a worker down leaves behind, for how long, and how
// force_compile clears it.

#include "server/compile/failing_keys.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "server/compile/compiler.h"

namespace kiln::server {
namespace {

using ::testing::HasSubstr;

TEST(FailingKeysTest, ARememberedKeyAnswersWithItsErrorUntilForgotten) {
  FailingKeys keys(absl::Minutes(10));
  const absl::Status crash =
      MarkCrashedCompile(absl::InternalError("the compile worker crashed with SIGSEGV"));
  EXPECT_FALSE(keys.Find("k1").has_value());
  keys.Remember("k1", crash);
  std::optional<absl::Status> found = keys.Find("k1");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->code(), absl::StatusCode::kInternal);
  EXPECT_THAT(found->message(), HasSubstr("crashed with SIGSEGV"));
  EXPECT_THAT(found->message(), HasSubstr("force_compile retries it now"));
  EXPECT_TRUE(IsCrashedCompile(*found));  // payloads stay
  EXPECT_FALSE(keys.Find("k2").has_value());
  keys.Forget("k1");
  EXPECT_FALSE(keys.Find("k1").has_value());
}

TEST(FailingKeysTest, EntriesExpire) {
  FailingKeys keys(absl::Milliseconds(50));
  keys.Remember("old", absl::InternalError("crash"));
  EXPECT_TRUE(keys.Find("old").has_value());
  absl::SleepFor(absl::Milliseconds(80));
  EXPECT_FALSE(keys.Find("old").has_value());
  // An expired entry goes when the next one comes.
  keys.Remember("new", absl::InternalError("crash"));
  EXPECT_EQ(keys.size(), 1u);
}

TEST(FailingKeysTest, AZeroTimeRemembersNothing) {
  FailingKeys keys(absl::ZeroDuration());
  keys.Remember("k", absl::InternalError("crash"));
  EXPECT_FALSE(keys.Find("k").has_value());
  EXPECT_EQ(keys.size(), 0u);
}

}  // namespace
}  // namespace kiln::server
