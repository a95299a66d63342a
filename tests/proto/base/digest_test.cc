#include "proto/base/digest.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

TEST(DigestTest, KnownVectors) {
  EXPECT_EQ(Sha256Hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(Sha256Hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

TEST(DigestTest, IncrementalMatchesOneShot) {
  Sha256Hasher h;
  h.Update("a");
  h.Update("bc");
  EXPECT_EQ(h.FinishHex(), Sha256Hex("abc"));
}

TEST(DigestTest, ValidateNamesTheProblem) {
  v1::Digest d = DigestOf("abc");
  EXPECT_TRUE(ValidateDigest(d).ok());
  EXPECT_EQ(d.size_bytes(), 3);
  d.set_hash("ABC");
  absl::Status s = ValidateDigest(d, "request.digest");
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("request.digest.hash"), std::string::npos);
  d = DigestOf("abc");
  d.set_size_bytes(-1);
  EXPECT_NE(ValidateDigest(d).message().find("size_bytes"), std::string::npos);
}

}  // namespace
}  // namespace kiln
