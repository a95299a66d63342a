// The x86-64 launch policy: which parallel dimensions the runtime's outer range covers, and
// the chunks of a flat elementwise kernel.

#include "compiler/codegen/x86/launch.h"

#include <gtest/gtest.h>

#include <vector>

namespace kiln::codegen::x86 {
namespace {

using loop::IndexExpr;

loop::Kernel KernelOver(std::vector<IndexExpr> parallel, std::vector<IndexExpr> reduction,
                        bool reduces) {
  loop::Kernel k;
  k.parallel = std::move(parallel);
  k.reduction = std::move(reduction);
  k.stages.push_back({reduces, 0, 0});
  return k;
}

int64_t GridAt(const LaunchSplit& split, std::vector<int64_t> syms) {
  absl::StatusOr<int64_t> v = split.grid.Evaluate(syms, {});
  EXPECT_TRUE(v.ok()) << v.status();
  return v.ok() ? *v : -1;
}

TEST(LaunchSplitTest, ReductionRowsAreOuterIterations) {
  const LaunchSplit s =
      SplitForLaunch(KernelOver({IndexExpr::Const(4), IndexExpr::Sym(0)}, {IndexExpr::Const(64)},
                                /*reduces=*/true));
  EXPECT_EQ(s.outer_dims, 2);
  EXPECT_EQ(s.chunk, 0);
  EXPECT_EQ(s.grid, IndexExpr::Const(4) * IndexExpr::Sym(0));
}

TEST(LaunchSplitTest, FlatKernelRunsInChunks) {
  const LaunchSplit s = SplitForLaunch(KernelOver({IndexExpr::Sym(0)}, {}, false));
  EXPECT_EQ(s.outer_dims, 1);
  EXPECT_EQ(s.chunk, kChunk);
  EXPECT_EQ(GridAt(s, {1}), 1);
  EXPECT_EQ(GridAt(s, {kChunk}), 1);
  EXPECT_EQ(GridAt(s, {kChunk + 1}), 2);
  EXPECT_EQ(GridAt(s, {10 * kChunk}), 10);
  EXPECT_EQ(GridAt(s, {0}), 0) << "an empty tensor launches nothing";
}

TEST(LaunchSplitTest, InnermostDimensionStaysInTheKernel) {
  const LaunchSplit s = SplitForLaunch(
      KernelOver({IndexExpr::Const(3), IndexExpr::Sym(0), IndexExpr::Const(1024)}, {}, false));
  EXPECT_EQ(s.outer_dims, 2);
  EXPECT_EQ(s.chunk, 0);
  EXPECT_EQ(s.grid, IndexExpr::Const(3) * IndexExpr::Sym(0));
}

TEST(LaunchSplitTest, NoParallelDimensionIsOneIteration) {
  const LaunchSplit flat = SplitForLaunch(KernelOver({}, {}, false));
  EXPECT_EQ(flat.outer_dims, 0);
  EXPECT_EQ(flat.grid, IndexExpr::Const(1));
  const LaunchSplit full_reduction = SplitForLaunch(KernelOver({}, {IndexExpr::Sym(0)}, true));
  EXPECT_EQ(full_reduction.outer_dims, 0);
  EXPECT_EQ(full_reduction.grid, IndexExpr::Const(1));
}

}  // namespace
}  // namespace kiln::codegen::x86
