#include "server/config.h"

#include "absl/strings/str_cat.h"

#include <gtest/gtest.h>

namespace kiln::server {
namespace {

TEST(ConfigTest, LoopbackAddresses) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1:1"));
  EXPECT_TRUE(IsLoopbackAddress("127.4.5.6:1"));
  EXPECT_TRUE(IsLoopbackAddress("localhost:80"));
  EXPECT_TRUE(IsLoopbackAddress("[::1]:80"));
  EXPECT_TRUE(IsLoopbackAddress("unix:/tmp/kiln.sock"));
  EXPECT_FALSE(IsLoopbackAddress("0.0.0.0:80"));
  EXPECT_FALSE(IsLoopbackAddress("[::]:80"));
  EXPECT_FALSE(IsLoopbackAddress("10.0.0.1:80"));
}

TEST(ConfigTest, DefaultsAreValid) { EXPECT_TRUE(ValidateConfig(ServerConfig{}).ok()); }

TEST(ConfigTest, ErrorsNameTheFlag) {
  ServerConfig c;
  c.listen = "example";
  EXPECT_NE(ValidateConfig(c).message().find("--listen"), std::string::npos);
  c = ServerConfig{};
  c.metrics_listen = "1.2.3.4:9";
  EXPECT_NE(ValidateConfig(c).message().find("--metrics-listen"), std::string::npos);
  c.insecure = true;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c = ServerConfig{};
  c.blob_listen = "0.0.0.0:8080";
  EXPECT_NE(ValidateConfig(c).message().find("--blob-listen"), std::string::npos);
  c.insecure = true;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.blob_listen = "no-port";
  EXPECT_NE(ValidateConfig(c).message().find("--blob-listen"), std::string::npos);
  c = ServerConfig{};
  c.resp_listen = "0.0.0.0:6379";
  EXPECT_NE(ValidateConfig(c).message().find("--resp-listen 0.0.0.0:6379 is not a loopback"),
            std::string::npos);
  c.insecure = true;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c.resp_listen = "6379";
  EXPECT_NE(ValidateConfig(c).message().find("--resp-listen"), std::string::npos);
  c = ServerConfig{};
  c.blob_loops = 0;
  EXPECT_NE(ValidateConfig(c).message().find("--blob-loops"), std::string::npos);
  c = ServerConfig{};
  c.max_message_bytes = 1;
  EXPECT_NE(ValidateConfig(c).message().find("--max-message-bytes"), std::string::npos);
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

TEST(ConfigTest, CacheLimitsAreChecked) {
  ServerConfig c;
  c.cache_max_bytes = -1;
  EXPECT_NE(ValidateConfig(c).message().find("--cache-max-bytes"), std::string::npos);
  c = ServerConfig{};
  c.max_blob_bytes = 0;
  EXPECT_NE(ValidateConfig(c).message().find("--max-blob-bytes"), std::string::npos);
  c.max_blob_bytes = int64_t{4} << 30;
  EXPECT_NE(ValidateConfig(c).message().find("--max-blob-bytes"), std::string::npos);
  c = ServerConfig{};
  c.cache_memory_bytes = -1;
  EXPECT_NE(ValidateConfig(c).message().find("--cache-memory-bytes"), std::string::npos);
  c = ServerConfig{};
  c.cache_block_cache_bytes = 1000;
  EXPECT_NE(ValidateConfig(c).message().find("--cache-block-cache-bytes"), std::string::npos);
  c = ServerConfig{};
  c.cache_max_bytes = 0;
  c.cache_memory_bytes = 0;
  EXPECT_TRUE(ValidateConfig(c).ok());
}

}  // namespace
}  // namespace kiln::server

namespace kiln::server {
namespace {

TEST(ConfigTest, SharedCacheUrlIsChecked) {
  ServerConfig c;
  EXPECT_TRUE(c.shared_cache.empty());
  for (const char* bad : {"http://127.0.0.1:7000", "redis://", "redis://127.0.0.1",
                          "redis://127.0.0.1:99999", "redis://127.0.0.1:7000,"}) {
    c.shared_cache = bad;
    const absl::Status s = ValidateConfig(c);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find("--shared-cache"), std::string::npos) << s;
    EXPECT_NE(s.message().find(bad), std::string::npos) << s;
  }
  c.shared_cache = "redis://127.0.0.1:7000,127.0.0.1:7001";
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(ConfigTest, FleetNeedsItsOwnAddressInIt) {
  ServerConfig c;
  c.fleet = "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003";
  c.advertise = "127.0.0.1:7002";
  EXPECT_TRUE(ValidateConfig(c).ok());

  c.advertise = "127.0.0.1:7004";
  absl::Status s = ValidateConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("--advertise 127.0.0.1:7004 is not in --fleet"), std::string::npos)
      << s;
  c.advertise = "";
  s = ValidateConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("--fleet needs --advertise"), std::string::npos) << s;

  c.fleet = "";
  c.advertise = "127.0.0.1:7001";
  s = ValidateConfig(c);
  EXPECT_NE(s.message().find("--advertise needs --fleet"), std::string::npos) << s;

  c.fleet = "127.0.0.1:7001,kiln-2";
  s = ValidateConfig(c);
  EXPECT_TRUE(absl::IsInvalidArgument(s));
  EXPECT_NE(s.message().find("--fleet"), std::string::npos) << s;
  EXPECT_NE(s.message().find("\"kiln-2\""), std::string::npos) << s;
}

TEST(ConfigTest, SharedCacheLeaseIsChecked) {
  ServerConfig c;
  EXPECT_EQ(c.shared_cache_lease_ms, 10000);
  for (int64_t bad : {int64_t{-1}, int64_t{0}, int64_t{29}, int64_t{3600} * 1000 + 1}) {
    c.shared_cache_lease_ms = bad;
    const absl::Status s = ValidateConfig(c);
    EXPECT_TRUE(absl::IsInvalidArgument(s)) << bad;
    EXPECT_NE(s.message().find("--shared-cache-lease-ms"), std::string::npos) << s;
    EXPECT_NE(s.message().find(absl::StrCat(bad)), std::string::npos) << s;
  }
  c.shared_cache_lease_ms = 30;
  EXPECT_TRUE(ValidateConfig(c).ok());
}

TEST(ConfigTest, CompileIsolationIsChecked) {
  ServerConfig c;
  EXPECT_EQ(c.compile_isolation, "process");
  c.compile_isolation = "fork";
  EXPECT_NE(ValidateConfig(c).message().find("--compile-isolation"), std::string::npos);
  c.compile_isolation = "none";
  EXPECT_TRUE(ValidateConfig(c).ok());
  c = ServerConfig{};
  c.compile_memory_bytes = -1;
  EXPECT_NE(ValidateConfig(c).message().find("--compile-memory-bytes"), std::string::npos);
  c.compile_memory_bytes = 1 << 20;  // too little for a worker to start
  EXPECT_NE(ValidateConfig(c).message().find("at least 256MiB"), std::string::npos);
  c.compile_memory_bytes = 0;
  EXPECT_TRUE(ValidateConfig(c).ok());
  c = ServerConfig{};
  c.poisoned_key_seconds = -1;
  EXPECT_NE(ValidateConfig(c).message().find("--poisoned-key-seconds"), std::string::npos);
  c.poisoned_key_seconds = 0;
  EXPECT_TRUE(ValidateConfig(c).ok());
}

}  // namespace
}  // namespace kiln::server
