// The backend registry: target names in one list, one backend per known target, and errors
// that say whether a target is unknown or only has no backend in this build.

#include "compiler/codegen/registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "compiler/codegen/target.h"

namespace kiln::codegen {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A backend that only has a name: the registry never calls the rest.
class NamedBackend final : public Backend {
 public:
  explicit NamedBackend(std::string target) : target_(std::move(target)) {}
  absl::string_view target() const override { return target_; }
  std::string KeyFacts() const override { return "named"; }
  absl::StatusOr<std::vector<KernelSchedule>> Schedule(const loop::Program&) const override {
    return absl::UnimplementedError("named only");
  }
  absl::StatusOr<GeneratedCode> Generate(const loop::Program&,
                                         const GenerateOptions&) const override {
    return absl::UnimplementedError("named only");
  }

 private:
  std::string target_;
};

TEST(TargetTest, KnownTargetsAreTheNamesClientsSend) {
  EXPECT_THAT(kKnownTargets, ElementsAre("x86_64", "cuda:sm_90"));
  EXPECT_TRUE(IsKnownTarget(kTargetX86_64));
  EXPECT_TRUE(IsKnownTarget(kTargetCudaSm90));
  EXPECT_FALSE(IsKnownTarget("riscv"));
  EXPECT_FALSE(IsKnownTarget(""));
  EXPECT_FALSE(IsKnownTarget("cuda:sm_80"));
}

TEST(BackendRegistryTest, BuiltinBackendsAreThoseOfThisBuild) {
  const BackendRegistry& builtin = BuiltinBackends();
#ifdef KILN_HAVE_CUDA
  EXPECT_THAT(builtin.targets(), ElementsAre(kTargetX86_64, kTargetCudaSm90));
  absl::StatusOr<const Backend*> sm90 = builtin.For(kTargetCudaSm90);
  ASSERT_TRUE(sm90.ok()) << sm90.status();
  EXPECT_EQ((*sm90)->target(), kTargetCudaSm90);
  EXPECT_EQ(builtin.Find(kTargetCudaSm90), *sm90);
#else
  EXPECT_THAT(builtin.targets(), ElementsAre(kTargetX86_64));
  EXPECT_EQ(builtin.Find(kTargetCudaSm90), nullptr);
#endif
  absl::StatusOr<const Backend*> x86 = builtin.For(kTargetX86_64);
  ASSERT_TRUE(x86.ok()) << x86.status();
  EXPECT_EQ((*x86)->target(), kTargetX86_64);
  EXPECT_EQ(builtin.Find(kTargetX86_64), *x86);
  EXPECT_EQ(&BuiltinBackends(), &builtin) << "built once";
}

TEST(BackendRegistryTest, KnownTargetWithoutBackendIsUnimplemented) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<NamedBackend>("x86_64")).ok());
  absl::StatusOr<const Backend*> sm90 = registry.For(kTargetCudaSm90);
  EXPECT_EQ(sm90.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(sm90.status().message(), HasSubstr("no backend registered for target cuda:sm_90"));
  EXPECT_THAT(sm90.status().message(), HasSubstr("backends: x86_64"));
  EXPECT_EQ(registry.Find(kTargetCudaSm90), nullptr);

  const BackendRegistry empty;
  EXPECT_THAT(empty.For(kTargetX86_64).status().message(), HasSubstr("backends: none"));
}

TEST(BackendRegistryTest, UnknownTargetIsInvalidArgumentNamingTheKnownOnes) {
  absl::StatusOr<const Backend*> riscv = BuiltinBackends().For("riscv");
  EXPECT_EQ(riscv.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(riscv.status().message(), HasSubstr("unknown target `riscv`"));
  EXPECT_THAT(riscv.status().message(), HasSubstr("x86_64, cuda:sm_90"));
}

TEST(BackendRegistryTest, RegistersOneBackendPerKnownTarget) {
  BackendRegistry registry;
  ASSERT_TRUE(registry.Register(std::make_unique<NamedBackend>("cuda:sm_90")).ok());
  absl::StatusOr<const Backend*> sm90 = registry.For(kTargetCudaSm90);
  ASSERT_TRUE(sm90.ok()) << sm90.status();
  EXPECT_EQ((*sm90)->KeyFacts(), "named");

  const absl::Status again = registry.Register(std::make_unique<NamedBackend>("cuda:sm_90"));
  EXPECT_EQ(again.code(), absl::StatusCode::kAlreadyExists) << again;
  const absl::Status unknown = registry.Register(std::make_unique<NamedBackend>("riscv"));
  EXPECT_EQ(unknown.code(), absl::StatusCode::kInvalidArgument) << unknown;
  EXPECT_THAT(registry.targets(), ElementsAre(kTargetCudaSm90));
  EXPECT_EQ(registry.For(kTargetX86_64).status().code(), absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace kiln::codegen
