#include "compiler/codegen/x86/link.h"

#include <signal.h>

#include <thread>

#include "compiler/codegen/x86/codegen.h"
#include "compiler/loop/ir.h"
#include "gtest/gtest.h"

namespace kiln::codegen::x86 {
namespace {

// LLD registers LLVM's signal handlers the first time a process links, and that gave the
// linking thread an alternate signal stack of LLVM's. A thread's runtime unmaps the stack it
// made when the thread ends (AddressSanitizer's aborted on LLVM's malloc'd one), so the thread
// must end with the stack it had. This is the process's first link.
TEST(LinkSharedObjectTest, TheLinkingThreadKeepsItsSignalStack) {
  std::thread([] {
    stack_t before{}, after{};
    ASSERT_EQ(sigaltstack(nullptr, &before), 0);
    absl::StatusOr<CodegenResult> code = GenerateSharedObject(loop::Program());
    ASSERT_TRUE(code.ok()) << code.status();
    EXPECT_FALSE(code->shared_object.empty());
    ASSERT_EQ(sigaltstack(nullptr, &after), 0);
    EXPECT_EQ(after.ss_sp, before.ss_sp);
    EXPECT_EQ(after.ss_size, before.ss_size);
    EXPECT_EQ(after.ss_flags, before.ss_flags);
  }).join();
}

}  // namespace
}  // namespace kiln::codegen::x86
