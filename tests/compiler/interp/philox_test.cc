#include "compiler/interp/philox.h"

#include <gtest/gtest.h>

#include <cmath>

#include "tests/compiler/interp/test_util.h"

namespace kiln::interp {
namespace {

using testing::I;
using testing::RunAll;
using testing::T;

// Random123's known-answer vectors (kat_vectors, "philox4x32 10"): counter, key, result.
TEST(Philox, MatchesRandom123KnownAnswers) {
  struct Case {
    PhiloxCounter counter;
    PhiloxKey key;
    PhiloxCounter want;
  };
  const Case cases[] = {
      {{0, 0, 0, 0}, {0, 0}, {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
      {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
       {0xffffffff, 0xffffffff},
       {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
      {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
       {0xa4093822, 0x299f31d0},
       {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
  };
  for (const Case& c : cases) EXPECT_EQ(Philox4x32_10(c.counter, c.key), c.want);
}

// The element-to-counter mapping of philox.h, spelled out independently.
TEST(Philox, ElementBitsFollowTheDefinition) {
  const uint64_t seed = 0x123456789abcdef0ull;
  const uint64_t stream = 0xfedcba9876543210ull;
  for (uint64_t index : {0ull, 1ull, 3ull, 4ull, 7ull, (1ull << 34) + 6}) {
    const uint64_t block = index / 4;
    const PhiloxCounter ctr = {static_cast<uint32_t>(block), static_cast<uint32_t>(block >> 32),
                               0x76543210u, 0xfedcba98u};
    const PhiloxKey key = {0x9abcdef0u, 0x12345678u};
    EXPECT_EQ(PhiloxBits(seed, stream, index), Philox4x32_10(ctr, key)[index % 4]);
    EXPECT_EQ(PhiloxUniform(seed, stream, index),
              std::ldexp(static_cast<double>(PhiloxBits(seed, stream, index) >> 8), -24));
  }
}

TEST(Philox, DropoutThresholdAndScale) {
  EXPECT_EQ(DropoutThreshold(0.0), 0u);
  EXPECT_EQ(DropoutThreshold(1.0), 1u << 24);
  EXPECT_EQ(DropoutThreshold(0.5), 1u << 23);
  EXPECT_EQ(DropoutThreshold(0.1), static_cast<uint32_t>(std::ceil(0.1 * (1 << 24))));
  EXPECT_DOUBLE_EQ(DropoutScale(0.1), 1.0 / 0.9);
  EXPECT_EQ(DropoutScale(1.0), 0.0);
  for (uint64_t i = 0; i < 64; ++i) {
    EXPECT_TRUE(DropoutKeeps(1, 2, i, 0.0));
    EXPECT_FALSE(DropoutKeeps(1, 2, i, 1.0));
    EXPECT_EQ(DropoutKeeps(1, 2, i, 0.3), PhiloxUniform(1, 2, i) >= 0.3);
  }
}

TEST(Philox, DropoutRateIsCloseToP) {
  int kept = 0;
  const int n = 1 << 16;
  for (int i = 0; i < n; ++i) kept += DropoutKeeps(42, 0, static_cast<uint64_t>(i), 0.25);
  EXPECT_NEAR(static_cast<double>(kept) / n, 0.75, 0.01);
}

// native_dropout: mask and output follow the definition; the same seed and stream replay
// exactly; another stream or seed gives another mask.
TEST(Philox, NativeDropoutIsReproducibleAndFollowsDefinition) {
  std::vector<double> xs(40);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = 1.0 + static_cast<double>(i);
  const Tensor x = T({5, 8}, xs, v1::DTYPE_FLOAT32);
  RunOptions o;
  o.rng_seed = 77;
  o.rng_offset = 10;
  auto run = [&](const RunOptions& opts, uint64_t k) {
    absl::StatusOr<std::vector<Value>> r =
        RunOp("aten.native_dropout.default", {x, 0.5, true}, {}, opts, k);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  };
  const std::vector<Value> a = run(o, 2);
  const Tensor out = std::get<Tensor>(a[0]);
  const Tensor mask = std::get<Tensor>(a[1]);
  EXPECT_EQ(mask.dtype(), v1::DTYPE_BOOL);
  const std::vector<int64_t> m = mask.ToInts();
  const std::vector<double> y = out.ToDoubles();
  int kept = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const bool keep = DropoutKeeps(77, 12, i, 0.5);
    EXPECT_EQ(m[i], keep ? 1 : 0);
    EXPECT_EQ(y[i], keep ? xs[i] * 2.0 : 0.0);
    kept += keep;
  }
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 40);
  EXPECT_EQ(std::get<Tensor>(run(o, 2)[1]).ToInts(), m);
  EXPECT_NE(std::get<Tensor>(run(o, 3)[1]).ToInts(), m);
  RunOptions other = o;
  other.rng_seed = 78;
  EXPECT_NE(std::get<Tensor>(run(other, 2)[1]).ToInts(), m);
  // Evaluation mode keeps everything.
  const std::vector<Value> eval = RunAll("aten.native_dropout.default", {x, 0.5, false});
  EXPECT_EQ(std::get<Tensor>(eval[0]).ToDoubles(), x.ToDoubles());
  EXPECT_EQ(std::get<Tensor>(eval[1]).ToInts(), std::vector<int64_t>(40, 1));
}

TEST(Philox, GraphRngOpsTakeConsecutiveStreams) {
  v1::Graph g;
  v1::GraphInput* in = g.add_inputs();
  in->set_name("x");
  v1::TensorMeta* m = in->mutable_meta()->mutable_tensor();
  m->set_dtype(v1::DTYPE_FLOAT32);
  m->add_sizes()->set_value(16);
  m->add_strides()->set_value(1);
  for (const char* name : {"d0", "d1"}) {
    v1::Node* n = g.add_nodes();
    n->set_name(name);
    n->set_target("aten.native_dropout.default");
    n->set_multi_output(true);
    n->add_args()->mutable_ref()->set_node("x");
    n->add_args()->set_float_value(0.5);
    n->add_args()->set_bool_value(true);
    v1::Argument* out = g.mutable_output()->mutable_list()->add_items();
    out->mutable_ref()->set_node(name);
    out->mutable_ref()->set_output(1);
  }
  EXPECT_EQ(RngOpCount(g), 2);
  std::vector<double> ones(16, 1.0);
  RunOptions o;
  o.rng_seed = 5;
  o.rng_offset = 100;
  absl::StatusOr<std::vector<Value>> r =
      interp::Run(g, {Value(T({16}, ones, v1::DTYPE_FLOAT32))}, o);
  ASSERT_TRUE(r.ok()) << r.status();
  for (int k = 0; k < 2; ++k) {
    const std::vector<int64_t> mask = std::get<Tensor>((*r)[static_cast<size_t>(k)]).ToInts();
    for (uint64_t i = 0; i < 16; ++i) {
      EXPECT_EQ(mask[i], DropoutKeeps(5, 100 + static_cast<uint64_t>(k), i, 0.5) ? 1 : 0);
    }
  }
}

}  // namespace
}  // namespace kiln::interp
