// The cache bundle file (client/bundle.h): round trip, deterministic bytes, and a clear
// refusal of every kind of damage: a flipped byte in each part, truncation, trailing bytes,
// a missing file, a format version this reader does not know.

#include "client/bundle.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "client/bundle_transfer.h"
#include "proto/base/digest.h"
#include "tests/testing/test_env.h"

namespace kiln::client {
namespace {

using ::kiln::testing::PseudoRandomBytes;
using ::kiln::testing::ReadFile;
using ::kiln::testing::TempDir;
using ::testing::HasSubstr;

class BundleTest : public ::testing::Test {
 protected:
  // A blob held by the fake source the writer reads from.
  v1::Digest Blob(const std::string& bytes) {
    v1::Digest d = DigestOf(bytes);
    blobs_[d.hash()] = bytes;
    return d;
  }

  static v1::ActionEntry Entry(const std::string& key, const std::string& guard,
                               std::vector<v1::Digest> artifacts) {
    v1::ActionEntry e;
    e.set_compile_key(key);
    v1::ActionVariant* v = e.add_variants();
    if (!guard.empty()) v->mutable_guards()->add_shape_env(guard);
    for (v1::Digest& d : artifacts) *v->add_artifacts() = std::move(d);
    v->set_created_unix_ms(1'700'000'000'000);
    v->set_last_used_unix_ms(1'700'000'123'000);
    v->set_compile_micros(4321);
    v->set_decision_digest("decision-" + key);
    return e;
  }

  // Three entries sharing a blob, one blob over the reader's 1 MiB piece size.
  std::vector<v1::ActionEntry> Entries() {
    const v1::Digest shared = Blob("key record shared by two entries");
    const v1::Digest big = Blob(PseudoRandomBytes(3 * (1 << 20) + 17, 7));
    return {Entry("ccc", "Eq(s0, 8)", {Blob("artifact c"), shared}),
            Entry("aaa", "", {big, shared}), Entry("bbb", "s0 >= 2", {Blob(""), Blob("b")})};
  }

  absl::Status Write(const std::string& path, std::vector<v1::ActionEntry> entries) {
    absl::StatusOr<v1::BundleManifest> m = MakeBundleManifest(std::move(entries));
    if (!m.ok()) return m.status();
    return WriteBundle(path, *m, [this](const v1::Digest& d) -> absl::StatusOr<std::string> {
      auto it = blobs_.find(d.hash());
      if (it == blobs_.end()) return absl::NotFoundError("gone");
      return it->second;
    });
  }

  std::string Written() {
    const std::string path = dir_.path() + "/written.bundle";
    EXPECT_TRUE(Write(path, Entries()).ok());
    absl::StatusOr<std::string> bytes = ReadFile(path);
    EXPECT_TRUE(bytes.ok());
    return bytes.ok() ? *bytes : "";
  }

  std::string Save(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
    return path;
  }

  // Open and VerifyBlobs, as an import runs them.
  static absl::Status Check(const std::string& path) {
    absl::StatusOr<std::unique_ptr<BundleReader>> r = BundleReader::Open(path);
    if (!r.ok()) return r.status();
    return (*r)->VerifyBlobs();
  }

  TempDir dir_;
  std::map<std::string, std::string> blobs_;
};

TEST_F(BundleTest, RoundTripKeepsEntriesAndBlobs) {
  const std::string path = Save("b.bundle", Written());
  absl::StatusOr<std::unique_ptr<BundleReader>> r = BundleReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE((*r)->VerifyBlobs().ok());
  const v1::BundleManifest& m = (*r)->manifest();
  ASSERT_EQ(m.actions_size(), 3);
  EXPECT_EQ(m.actions(0).compile_key(), "aaa");
  EXPECT_EQ(m.actions(1).compile_key(), "bbb");
  EXPECT_EQ(m.actions(2).compile_key(), "ccc");
  const v1::ActionVariant& v = m.actions(2).variants(0);
  EXPECT_EQ(v.guards().shape_env(0), "Eq(s0, 8)");
  EXPECT_EQ(v.created_unix_ms(), 1'700'000'000'000);
  EXPECT_EQ(v.last_used_unix_ms(), 0) << "usage is not content";
  EXPECT_EQ(v.compile_micros(), 4321);
  EXPECT_EQ(v.decision_digest(), "decision-ccc");
  // Six artifacts, one shared: five blobs, sorted by hash, the empty blob among them.
  ASSERT_EQ(m.blobs_size(), 5);
  for (int i = 1; i < m.blobs_size(); ++i) EXPECT_LT(m.blobs(i - 1).hash(), m.blobs(i).hash());
  for (int i = 0; i < m.blobs_size(); ++i) {
    absl::StatusOr<std::string> bytes = (*r)->ReadBlob(i);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    EXPECT_EQ(*bytes, blobs_[m.blobs(i).hash()]);
  }
  int64_t total = 0;
  for (const auto& [hash, bytes] : blobs_) total += bytes.size();
  EXPECT_EQ((*r)->blob_bytes(), total);
}

TEST_F(BundleTest, SameEntriesGiveTheSameBytesWhateverTheOrderAndUse) {
  const std::string first = Written();
  std::vector<v1::ActionEntry> entries = Entries();
  std::reverse(entries.begin(), entries.end());
  for (v1::ActionEntry& e : entries) e.mutable_variants(0)->set_last_used_unix_ms(99);
  const std::string path = dir_.path() + "/again.bundle";
  ASSERT_TRUE(Write(path, entries).ok());
  EXPECT_EQ(*ReadFile(path), first);
  EXPECT_EQ(first.substr(0, 8), "KILNBNDL");
}

TEST_F(BundleTest, AFlippedByteAnywhereIsRefusedWithWhatIsWrong) {
  const std::string good = Written();
  absl::StatusOr<std::unique_ptr<BundleReader>> r = BundleReader::Open(Save("good", good));
  ASSERT_TRUE(r.ok());
  const v1::BundleManifest manifest = (*r)->manifest();
  const size_t blobs_start = good.size() - (*r)->blob_bytes();
  struct Case {
    size_t at;
    std::string says;
  };
  std::vector<Case> cases = {
      {0, "is not a Kiln bundle"},
      {8, "format version"},
      {19, "truncated or corrupt"},  // the manifest's length (its top byte)
      {30, "checksum does not match"},
      {blobs_start - 5, "checksum does not match"},  // the checksum itself
  };
  // The last byte of each blob (for the 3 MiB one, in its last piece).
  int64_t offset = static_cast<int64_t>(blobs_start);
  for (const v1::Digest& d : manifest.blobs()) {
    if (d.size_bytes() > 0) {
      cases.push_back({static_cast<size_t>(offset + d.size_bytes() - 1),
                       absl::StrCat("blob ", d.hash(), "/", d.size_bytes())});
    }
    offset += d.size_bytes();
  }
  for (const Case& c : cases) {
    std::string bad = good;
    bad[c.at] = static_cast<char>(bad[c.at] ^ 0x20);
    absl::Status s = Check(Save("bad", bad));
    EXPECT_FALSE(s.ok()) << "flipped byte " << c.at;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.says)) << "flipped byte " << c.at;
    EXPECT_THAT(std::string(s.message()), HasSubstr("/bad")) << "the error names the file";
  }
}

TEST_F(BundleTest, TruncatedAndPaddedFilesAreRefused) {
  const std::string good = Written();
  for (size_t keep :
       {size_t{0}, size_t{5}, size_t{15}, size_t{60}, good.size() / 2, good.size() - 1}) {
    absl::Status s = Check(Save("short", good.substr(0, keep)));
    EXPECT_FALSE(s.ok()) << keep;
    const std::string message(s.message());
    EXPECT_TRUE(message.find("truncated") != std::string::npos ||
                message.find("not a Kiln bundle") != std::string::npos)
        << keep << ": " << message;
  }
  absl::Status s = Check(Save("long", good + "x"));
  EXPECT_TRUE(absl::IsDataLoss(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("1 bytes follow its last blob"));
}

TEST_F(BundleTest, AMissingFileIsNotFound) {
  absl::Status s = Check(dir_.path() + "/nowhere.bundle");
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr("nowhere.bundle"));
}

TEST_F(BundleTest, AFailedWriteLeavesNothing) {
  std::vector<v1::ActionEntry> entries = Entries();
  v1::Digest gone = DigestOf("never held");
  *entries[0].mutable_variants(0)->add_artifacts() = gone;
  const std::string path = dir_.path() + "/failed.bundle";
  absl::Status s = Write(path, entries);
  EXPECT_TRUE(absl::IsNotFound(s)) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(gone.hash()));
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_FALSE(std::filesystem::exists(path + ".partial"));
}

TEST_F(BundleTest, MalformedEntriesAreRefusedByName) {
  const v1::Digest a = Blob("a");
  EXPECT_THAT(
      std::string(
          MakeBundleManifest({Entry("k", "", {a}), Entry("k", "x", {a})}).status().message()),
      HasSubstr("action k appears twice"));
  v1::ActionEntry no_variant;
  no_variant.set_compile_key("k2");
  EXPECT_THAT(std::string(MakeBundleManifest({no_variant}).status().message()),
              HasSubstr("action k2 has no variant"));
  EXPECT_THAT(std::string(MakeBundleManifest({Entry("k3", "", {})}).status().message()),
              HasSubstr("action k3 has a variant without artifacts"));
  v1::Digest resized = a;
  resized.set_size_bytes(2);
  EXPECT_THAT(std::string(MakeBundleManifest({Entry("k4", "", {a}), Entry("k5", "", {resized})})
                              .status()
                              .message()),
              HasSubstr("is named with sizes 1 and 2"));
}

TEST(ParseSinceTest, TimesAndDurationsAgo) {
  const absl::Time now = absl::FromUnixMillis(1'750'000'000'000);
  EXPECT_EQ(*ParseSince("2h", now), 1'750'000'000'000 - 2 * 3600 * 1000);
  EXPECT_EQ(*ParseSince("2025-06-15T15:06:40Z", now), 1'750'000'000'000);
  absl::StatusOr<int64_t> bad = ParseSince("yesterday", now);
  EXPECT_TRUE(absl::IsInvalidArgument(bad.status()));
  EXPECT_THAT(std::string(bad.status().message()), HasSubstr("RFC 3339"));
  EXPECT_FALSE(ParseSince("-2h", now).ok());
}

}  // namespace
}  // namespace kiln::client
