// kiln::FleetOrder against the fixed vectors tests/data/fleet_vectors.json, which
// tests/client/python/fleet_test.py checks kiln.fleet.fleet_order against: the C++ client,
// kilnd and the Python client route a job to the same instance.

#include "proto/base/fleet.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

TEST(FleetOrderTest, MatchesTheSharedVectors) {
  absl::StatusOr<std::string> text = testing::ReadFile(KILN_FLEET_VECTORS);
  ASSERT_TRUE(text.ok()) << text.status();
  const nlohmann::json doc = nlohmann::json::parse(*text);
  ASSERT_GE(doc["cases"].size(), 20u);
  for (const nlohmann::json& c : doc["cases"]) {
    const std::string key = c["key"];
    const std::vector<std::string> fleet = c["fleet"];
    const std::vector<std::string> order = c["order"];
    EXPECT_EQ(FleetOrder(key, fleet), order) << "key \"" << key << "\"";
    for (const std::string& address : fleet) {
      EXPECT_EQ(absl::StrFormat("%016x", FleetWeight(key, address)),
                c["weights"][address].get<std::string>())
          << "key \"" << key << "\", address " << address;
    }
  }
}

TEST(FleetOrderTest, DoesNotDependOnTheListsOrder) {
  std::vector<std::string> fleet = {"a:1", "b:2", "c:3", "d:4"};
  const std::vector<std::string> first = FleetOrder("job-9", fleet);
  std::reverse(fleet.begin(), fleet.end());
  EXPECT_EQ(FleetOrder("job-9", fleet), first);
  std::rotate(fleet.begin(), fleet.begin() + 1, fleet.end());
  EXPECT_EQ(FleetOrder("job-9", fleet), first);
}

TEST(FleetOrderTest, RemovingAnInstanceMovesOnlyItsKeys) {
  const std::vector<std::string> four = {"a:1", "b:2", "c:3", "d:4"};
  const std::vector<std::string> three = {"a:1", "b:2", "c:3"};
  int moved = 0;
  std::set<std::string> owners;
  for (int i = 0; i < 400; ++i) {
    const std::string key = "job-" + std::to_string(i);
    const std::string before = FleetOrder(key, four)[0];
    const std::string after = FleetOrder(key, three)[0];
    owners.insert(before);
    if (before != "d:4") {
      EXPECT_EQ(after, before) << key;
    } else {
      ++moved;
      // The key goes to the one that came second before.
      EXPECT_EQ(after, FleetOrder(key, four)[1]) << key;
    }
  }
  EXPECT_EQ(owners.size(), 4u);
  EXPECT_GT(moved, 60);  // about a quarter of 400
  EXPECT_LT(moved, 140);
}

TEST(ParseFleetTest, SplitsTrimsAndDropsDuplicates) {
  absl::StatusOr<std::vector<std::string>> fleet =
      ParseFleet(" 10.0.0.1:50051, kiln-1.kiln:50051 ,[::1]:7,10.0.0.1:50051", true);
  ASSERT_TRUE(fleet.ok()) << fleet.status();
  EXPECT_EQ(*fleet, (std::vector<std::string>{"10.0.0.1:50051", "kiln-1.kiln:50051", "[::1]:7"}));
  absl::StatusOr<std::vector<std::string>> targets = ParseFleet("unix:/run/kiln.sock", false);
  ASSERT_TRUE(targets.ok()) << targets.status();
  EXPECT_EQ(targets->size(), 1u);
}

TEST(ParseFleetTest, NamesTheBadEntry) {
  absl::StatusOr<std::vector<std::string>> empty = ParseFleet("a:1,,b:2", true);
  EXPECT_EQ(empty.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(empty.status().message().find("empty entry"), std::string::npos);
  absl::StatusOr<std::vector<std::string>> no_port = ParseFleet("a:1,kiln-2", true);
  EXPECT_EQ(no_port.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(no_port.status().message().find("\"kiln-2\""), std::string::npos);
  EXPECT_FALSE(ParseFleet("a:0", true).ok());
  EXPECT_FALSE(ParseFleet("a:65536", true).ok());
  EXPECT_FALSE(ParseFleet("", true).ok());
}

}  // namespace
}  // namespace kiln
