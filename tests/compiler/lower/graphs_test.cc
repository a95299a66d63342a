// Every shared graph compiled for x86-64, run by the in-process executor and compared with
// the reference interpreter; compiling twice gives identical bytes.

#include <string>

#include "compiler/canon/compile_key.h"
#include "compiler/compile.h"
#include "compiler/exec/check.h"
#include "compiler/graph/import.h"
#include "gtest/gtest.h"
#include "tests/compiler/graph_testing.h"

namespace kiln {
namespace {

// Sanitizer builds run the interpreter many times slower: they check fewer points.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

absl::StatusOr<v1::CompiledGraph> CompileProto(const v1::Graph& proto) {
  auto g = graph::Import(proto);
  if (!g.ok()) return g.status();
  v1::CompileOptions options;
  options.set_target("x86_64");
  return compiler::Compile(*g, options, "test-key");
}

class SharedGraphTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SharedGraphTest, MatchesInterpreter) {
  const v1::Graph proto = testing::LoadSharedGraph(GetParam());
  auto artifact = CompileProto(proto);
  ASSERT_TRUE(artifact.ok()) << artifact.status();
  for (uint64_t seed : {1, 2}) {
    if (kSanitized && seed > 1) break;
    exec::CheckOptions options;
    options.input_seed = seed;
    options.rng_seed = 100 + seed;
    auto report = exec::CheckAgainstInterpreter(proto, *artifact, options);
    ASSERT_TRUE(report.ok()) << report.status();
    EXPECT_TRUE(report->ok) << GetParam() << ": " << report->message;
    EXPECT_GT(report->outputs, 0);
  }
}

TEST_P(SharedGraphTest, Deterministic) {
  const v1::Graph proto = testing::LoadSharedGraph(GetParam());
  auto a = CompileProto(proto);
  auto b = CompileProto(proto);
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(b.ok()) << b.status();
  std::string sa, sb;
  ASSERT_TRUE(a->SerializeToString(&sa));
  ASSERT_TRUE(b->SerializeToString(&sb));
  EXPECT_EQ(sa, sb);
  EXPECT_EQ(a->decision_digest(), b->decision_digest());
  EXPECT_EQ(a->decision_digest().size(), 64u);
}

INSTANTIATE_TEST_SUITE_P(Graphs, SharedGraphTest,
                         ::testing::Values("mlp_fp32.fw.json", "mlp_fp32.bw.json",
                                           "mlp_automatic_dynamic.fw.json",
                                           "mlp_automatic_dynamic.bw.json",
                                           "mlp_automatic_dynamic2.fw.json",
                                           "mlp_automatic_dynamic2.bw.json", "nanogpt_fp32.fw.json",
                                           "nanogpt_fp32.bw.json"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string n = info.param;
                           for (char& c : n) {
                             if (!isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return n;
                         });

// The symbolic graphs run at other symbol values that satisfy their guards (s77 >= 2, and
// the backward's mul_10 == 128 * s77) without recompiling.
TEST(SymbolicGraphTest, RunsAtOtherSymbolValues) {
  for (const char* name : {"mlp_automatic_dynamic2.fw.json", "mlp_automatic_dynamic2.bw.json"}) {
    const v1::Graph proto = testing::LoadSharedGraph(name);
    auto artifact = CompileProto(proto);
    ASSERT_TRUE(artifact.ok()) << artifact.status();
    std::string sym;
    for (const v1::Symbol& s : proto.symbols()) sym = s.name();
    ASSERT_FALSE(sym.empty());
    for (int64_t value : {2, 3, 5}) {
      if (kSanitized && value > 2) break;
      exec::CheckOptions options;
      options.symbols[sym] = value;
      auto report = exec::CheckAgainstInterpreter(proto, *artifact, options);
      ASSERT_TRUE(report.ok()) << name << " at " << value << ": " << report.status();
      EXPECT_TRUE(report->ok) << name << " at " << sym << "=" << value << ": " << report->message;
    }
  }
}

}  // namespace
}  // namespace kiln
