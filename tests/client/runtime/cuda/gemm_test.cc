// Matrix products of client/runtime/cuda (kiln_cuda_gemm_*) against the stand-in driver and
// the stand-in cuBLASLt (fake_libcublaslt.c, named by KILN_LIBCUBLASLT), which computes each
// product on the host: every layout the runtime hands cuBLAS is checked by value against a
// plain loop over the row-major description, as PyTorch describes its tensors.

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/runtime/cuda/kiln_cuda.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

struct FakeBlas {
  FakeBlas() {
    handle = dlopen(std::getenv("KILN_LIBCUBLASLT"), RTLD_NOW | RTLD_LOCAL);
    compute = reinterpret_cast<void (*)(int)>(dlsym(handle, "fake_cublaslt_compute"));
    find_none = reinterpret_cast<void (*)(int)>(dlsym(handle, "fake_cublaslt_find_none"));
    handles = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cublaslt_handles"));
    call_count = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cublaslt_call_count"));
    pointers =
        reinterpret_cast<void (*)(int, uint64_t*)>(dlsym(handle, "fake_cublaslt_call_pointers"));
    algo = reinterpret_cast<void (*)(int, uint64_t*)>(dlsym(handle, "fake_cublaslt_call_algo"));
    stream = reinterpret_cast<void* (*)(int)>(dlsym(handle, "fake_cublaslt_call_stream"));
  }
  void* handle;
  void (*compute)(int);
  void (*find_none)(int);
  int (*handles)();
  int (*call_count)();
  void (*pointers)(int, uint64_t*);
  void (*algo)(int, uint64_t*);
  void* (*stream)(int);
};

FakeBlas& blas() {
  static FakeBlas* f = new FakeBlas;
  return *f;
}

// A row-major description's operand: extents and strides over (batch, row, column).
struct Matrix {
  uint64_t rows, cols;
  int64_t strides[3];
};

uint16_t Bf16(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  return static_cast<uint16_t>(bits >> 16);  // the values used are exact in bf16
}

float FromBf16(uint16_t h) {
  const uint32_t bits = static_cast<uint32_t>(h) << 16;
  float v;
  std::memcpy(&v, &bits, 4);
  return v;
}

class GemmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("KILN_LIBCUBLASLT"), nullptr);
    ASSERT_NE(blas().handle, nullptr) << dlerror();
    blas().compute(1);
    blas().find_none(0);
  }

  kiln_cuda_gemm_desc Desc(int dtype, uint64_t batch, uint64_t m, uint64_t n, uint64_t k,
                           const Matrix& a, const Matrix& b, const Matrix& d) {
    kiln_cuda_gemm_desc g{};
    g.dtype = dtype;
    g.batch = batch;
    g.m = m, g.n = n, g.k = k;
    std::memcpy(g.a_strides, a.strides, sizeof g.a_strides);
    std::memcpy(g.b_strides, b.strides, sizeof g.b_strides);
    std::memcpy(g.d_strides, d.strides, sizeof g.d_strides);
    g.workspace_bytes = 1 << 20;
    return g;
  }

  // Runs `g` once in a sequence of one record, its operands at the given addresses.
  int Run(kiln_cuda_gemm* gemm, const std::vector<uint64_t>& addresses) {
    std::vector<uint32_t> params;
    for (uint32_t i = 0; i < addresses.size(); ++i) params.push_back(i);
    kiln_cuda_launch_record record{};
    record.gemm = gemm;
    record.param_count = static_cast<uint32_t>(params.size());
    record.param_slots = params.data();
    size_t failed = 0;
    return kiln_cuda_launch_sequence(&record, 1, addresses.data(), addresses.size(),
                                     reinterpret_cast<void*>(0x5EED), &failed, error,
                                     sizeof(error));
  }

  kiln_cuda_gemm* Create(const kiln_cuda_gemm_desc& g) {
    kiln_cuda_gemm* gemm = nullptr;
    EXPECT_EQ(kiln_cuda_gemm_create(0, &g, &gemm, error, sizeof(error)), 0) << error;
    return gemm;
  }

  char error[512] = {};
  alignas(256) float workspace[64] = {};
};

// Element (batch, i, j) of a row-major operand in `memory`.
float At(const std::vector<float>& memory, const Matrix& x, uint64_t batch, uint64_t i,
         uint64_t j) {
  return memory[batch * x.strides[0] + i * x.strides[1] + j * x.strides[2]];
}

// Fills every element an operand touches with small integers, exact in any precision.
std::vector<float> Fill(const Matrix& x, uint64_t batch, int seed) {
  size_t span = 1;
  span += (batch - 1) * x.strides[0] + (x.rows - 1) * x.strides[1] + (x.cols - 1) * x.strides[2];
  std::vector<float> out(span, -1000.0f);
  for (uint64_t b = 0; b < batch; ++b) {
    for (uint64_t i = 0; i < x.rows; ++i) {
      for (uint64_t j = 0; j < x.cols; ++j) {
        out[b * x.strides[0] + i * x.strides[1] + j * x.strides[2]] =
            static_cast<float>((seed + 3 * b + 5 * i + 7 * j) % 9) - 4.0f;
      }
    }
  }
  return out;
}

struct Case {
  const char* name;
  uint64_t batch, m, n, k;
  Matrix a, b, d;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

// Every way PyTorch's products come: contiguous, transposed views, a D by columns, a batch
// whose B is broadcast (batch stride 0), extents of one whose strides are free.
const Case kCases[] = {
    {"rows", 1, 3, 4, 5, {3, 5, {0, 5, 1}}, {5, 4, {0, 4, 1}}, {3, 4, {0, 4, 1}}},
    {"a_transposed", 1, 3, 4, 5, {3, 5, {0, 1, 3}}, {5, 4, {0, 4, 1}}, {3, 4, {0, 4, 1}}},
    {"b_transposed", 1, 3, 4, 5, {3, 5, {0, 5, 1}}, {5, 4, {0, 1, 5}}, {3, 4, {0, 4, 1}}},
    {"padded_rows", 1, 3, 4, 5, {3, 5, {0, 8, 1}}, {5, 4, {0, 6, 1}}, {3, 4, {0, 7, 1}}},
    {"d_by_columns", 1, 3, 4, 5, {3, 5, {0, 5, 1}}, {5, 4, {0, 1, 5}}, {3, 4, {0, 1, 3}}},
    {"batched", 2, 3, 4, 5, {3, 5, {15, 5, 1}}, {5, 4, {20, 1, 5}}, {3, 4, {12, 4, 1}}},
    {"broadcast_b", 3, 2, 4, 5, {2, 5, {10, 5, 1}}, {5, 4, {0, 4, 1}}, {2, 4, {8, 4, 1}}},
    {"one_row", 1, 1, 4, 5, {1, 5, {0, 99, 1}}, {5, 4, {0, 4, 1}}, {1, 4, {0, 99, 1}}},
    {"one_column", 1, 3, 1, 5, {3, 5, {0, 5, 1}}, {5, 1, {0, 1, 77}}, {3, 1, {0, 1, 55}}},
};

class GemmLayoutTest : public GemmTest, public ::testing::WithParamInterface<Case> {};

TEST_P(GemmLayoutTest, EachLayoutComputesTheRowMajorProduct) {
  const Case& c = GetParam();
  std::vector<float> a = Fill(c.a, c.batch, 1), b = Fill(c.b, c.batch, 2);
  Matrix d = c.d;
  std::vector<float> out(
      1 + (c.batch - 1) * d.strides[0] + (d.rows - 1) * d.strides[1] + (d.cols - 1) * d.strides[2],
      0.0f);
  kiln_cuda_gemm* gemm = Create(Desc(KILN_CUDA_DTYPE_F32, c.batch, c.m, c.n, c.k, c.a, c.b, d));
  ASSERT_NE(gemm, nullptr);
  ASSERT_EQ(
      Run(gemm, {reinterpret_cast<uint64_t>(a.data()), reinterpret_cast<uint64_t>(b.data()),
                 reinterpret_cast<uint64_t>(out.data()), reinterpret_cast<uint64_t>(workspace)}),
      0)
      << error;
  for (uint64_t batch = 0; batch < c.batch; ++batch) {
    for (uint64_t i = 0; i < c.m; ++i) {
      for (uint64_t j = 0; j < c.n; ++j) {
        float want = 0;
        for (uint64_t l = 0; l < c.k; ++l)
          want += At(a, c.a, batch, i, l) * At(b, c.b, batch, l, j);
        EXPECT_EQ(At(out, d, batch, i, j), want)
            << c.name << " at " << batch << "," << i << "," << j;
      }
    }
  }
  kiln_cuda_gemm_destroy(gemm);
}

INSTANTIATE_TEST_SUITE_P(Layouts, GemmLayoutTest, ::testing::ValuesIn(kCases),
                         [](const auto& info) { return std::string(info.param.name); });

TEST_F(GemmTest, ABiasIsAddedToEveryRowAndOperandsSitAtTheirOffsets) {
  // bf16, every operand in one buffer at its offset, as a plan's arena holds them.
  const uint64_t m = 2, n = 8, k = 3;
  alignas(256) uint16_t arena[256] = {};
  const uint64_t offsets[4] = {0, 64, 128, 192};  // bytes: A, B, D, bias
  auto at = [&](int operand, uint64_t i) -> uint16_t& { return arena[offsets[operand] / 2 + i]; };
  for (uint64_t i = 0; i < m * k; ++i) at(0, i) = Bf16(static_cast<float>(i % 5) - 2);
  for (uint64_t i = 0; i < k * n; ++i) at(1, i) = Bf16(static_cast<float>(i % 7) - 3);
  for (uint64_t j = 0; j < n; ++j) at(3, j) = Bf16(static_cast<float>(10 * j));
  kiln_cuda_gemm_desc g = Desc(KILN_CUDA_DTYPE_BF16, 1, m, n, k, {m, k, {0, 3, 1}},
                               {k, n, {0, 8, 1}}, {m, n, {0, 8, 1}});
  g.flags = KILN_CUDA_GEMM_BIAS;
  std::memcpy(g.offsets, offsets, sizeof offsets);
  kiln_cuda_gemm* gemm = Create(g);
  ASSERT_NE(gemm, nullptr);
  const auto base = reinterpret_cast<uint64_t>(arena);
  // Slots: A, B and D all at the arena's start, the workspace, the bias at the arena too.
  ASSERT_EQ(Run(gemm, {base, base, base, reinterpret_cast<uint64_t>(workspace), base}), 0) << error;
  for (uint64_t i = 0; i < m; ++i) {
    for (uint64_t j = 0; j < n; ++j) {
      float want = 10.0f * j;
      for (uint64_t l = 0; l < k; ++l) {
        want += FromBf16(at(0, i * k + l)) * FromBf16(at(1, l * n + j));
      }
      EXPECT_EQ(FromBf16(at(2, i * n + j)), want) << i << "," << j;
    }
  }
  const int call = blas().call_count() - 1;
  uint64_t p[6];
  blas().pointers(call, p);
  // cuBLAS's first operand is B, its second A; C is D; then the bias and the workspace.
  EXPECT_THAT(std::vector<uint64_t>(p, p + 6),
              ElementsAre(base + 64, base, base + 128, base + 128, base + 192,
                          reinterpret_cast<uint64_t>(workspace)));
  EXPECT_EQ(blas().stream(call), reinterpret_cast<void*>(0x5EED));
  kiln_cuda_gemm_destroy(gemm);
}

TEST_F(GemmTest, AnAddressLessAlignedThanItsOffsetSaysTakesTheAlgorithmForAnyAlignment) {
  blas().compute(0);  // only the choice matters here
  const Matrix a{4, 8, {0, 8, 1}}, b{8, 8, {0, 8, 1}}, d{4, 8, {0, 8, 1}};
  kiln_cuda_gemm_desc g = Desc(KILN_CUDA_DTYPE_F16, 1, 4, 8, 8, a, b, d);
  g.offsets[0] = 0, g.offsets[1] = 32, g.offsets[2] = 512;  // aligned to 256, 32 and 256
  kiln_cuda_gemm* gemm = Create(g);
  ASSERT_NE(gemm, nullptr);
  const uint64_t ws = reinterpret_cast<uint64_t>(workspace);
  uint64_t algo[8];
  ASSERT_EQ(Run(gemm, {0x10000, 0x20000, 0x30000, ws}), 0) << error;
  blas().algo(blas().call_count() - 1, algo);
  EXPECT_EQ(algo[0], 32u);  // the least of the operands' alignments
  // An input whose storage offset leaves it 2-byte aligned: the other algorithm, not a refusal.
  ASSERT_EQ(Run(gemm, {0x10002, 0x20000, 0x30000, ws}), 0) << error;
  blas().algo(blas().call_count() - 1, algo);
  EXPECT_EQ(algo[0], 2u);
  EXPECT_EQ(algo[7], 1u << 20);  // the workspace's size
  // Not even aligned to its element: refused, naming the operand.
  EXPECT_EQ(Run(gemm, {0x10001, 0x20000, 0x30000, ws}), KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_THAT(error, HasSubstr("operand A at 65537 is not aligned to its element"));
  kiln_cuda_gemm_destroy(gemm);
  // The alignment the caller expects (an arena buffer's, at its offset) instead of the offset's.
  g.offsets[1] = g.offsets[2] = 0;
  g.alignments[0] = g.alignments[1] = g.alignments[2] = 64;
  gemm = Create(g);
  ASSERT_NE(gemm, nullptr);
  ASSERT_EQ(Run(gemm, {0x10040, 0x20000, 0x30040, ws}), 0) << error;
  blas().algo(blas().call_count() - 1, algo);
  EXPECT_EQ(algo[0], 64u);
  kiln_cuda_gemm_destroy(gemm);
}

TEST_F(GemmTest, PyTorchsPrecisionSettingsChooseTheComputeTypeAndReductions) {
  blas().compute(0);
  const Matrix a{4, 4, {0, 4, 1}};
  const uint64_t ws = reinterpret_cast<uint64_t>(workspace);
  struct Want {
    int dtype, flags;
    uint64_t compute, reductions;
  };
  // 68: CUBLAS_COMPUTE_32F, 77: its TF32 form; 7: every reduction, 3: none in the output type.
  for (const Want& w :
       {Want{KILN_CUDA_DTYPE_F32, 0, 68, 7}, Want{KILN_CUDA_DTYPE_F32, KILN_CUDA_GEMM_TF32, 77, 7},
        Want{KILN_CUDA_DTYPE_BF16, 0, 68, 3},
        Want{KILN_CUDA_DTYPE_BF16, KILN_CUDA_GEMM_REDUCED_REDUCTION, 68, 7},
        Want{KILN_CUDA_DTYPE_F16, 0, 68, 3}}) {
    kiln_cuda_gemm_desc g = Desc(w.dtype, 1, 4, 4, 4, a, a, a);
    g.flags = w.flags;
    kiln_cuda_gemm* gemm = Create(g);
    ASSERT_NE(gemm, nullptr);
    ASSERT_EQ(Run(gemm, {0x10000, 0x20000, 0x30000, ws}), 0) << error;
    uint64_t algo[8];
    blas().algo(blas().call_count() - 1, algo);
    EXPECT_EQ(algo[2], w.compute) << w.dtype << " " << w.flags;
    EXPECT_EQ(algo[1], w.reductions) << w.dtype << " " << w.flags;
    kiln_cuda_gemm_destroy(gemm);
  }
}

TEST_F(GemmTest, DescriptionsCuBlasCannotReadAreRefusedNamingWhy) {
  kiln_cuda_gemm* gemm = nullptr;
  const Matrix rows{4, 4, {0, 4, 1}};
  auto refused = [&](const kiln_cuda_gemm_desc& g) {
    gemm = nullptr;
    EXPECT_EQ(kiln_cuda_gemm_create(0, &g, &gemm, error, sizeof(error)),
              KILN_CUDA_ERROR_BAD_ARGUMENT);
    EXPECT_EQ(gemm, nullptr);
    return std::string(error);
  };
  EXPECT_THAT(refused(Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, {4, 4, {0, 8, 2}}, rows, rows)),
              HasSubstr("A is laid out by neither rows nor columns"));
  EXPECT_THAT(refused(Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, {4, 4, {0, 2, 1}}, rows)),
              HasSubstr("B is laid out by neither rows nor columns"));
  EXPECT_THAT(refused(Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, rows, {4, 4, {0, 8, 2}})),
              HasSubstr("D is laid out by neither rows nor columns"));
  kiln_cuda_gemm_desc biased = Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, rows, {4, 4, {0, 1, 4}});
  biased.flags = KILN_CUDA_GEMM_BIAS;
  EXPECT_THAT(refused(biased), HasSubstr("D laid out by columns takes no bias"));
  EXPECT_THAT(refused(Desc(7, 1, 4, 4, 4, rows, rows, rows)),
              HasSubstr("element type 7 is not one of KILN_CUDA_DTYPE_*"));
  EXPECT_THAT(refused(Desc(KILN_CUDA_DTYPE_F32, 1, 4, 0, 4, rows, rows, rows)),
              HasSubstr("an empty extent (batch 1, 4 x 0 x 4)"));
  kiln_cuda_gemm_desc odd = Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, rows, rows);
  odd.offsets[1] = 6;
  EXPECT_THAT(refused(odd), HasSubstr("the offset of B is not a multiple of its element"));
  kiln_cuda_gemm_desc loose = Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, rows, rows);
  loose.alignments[2] = 48;
  EXPECT_THAT(refused(loose),
              HasSubstr("the alignment of D, 48, is not a power of two from its element's size"));
  EXPECT_EQ(kiln_cuda_gemm_create(0, nullptr, &gemm, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  kiln_cuda_gemm_desc g = Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, rows, rows);
  EXPECT_EQ(kiln_cuda_gemm_create(3, &g, &gemm, error, sizeof(error)), 101);
  EXPECT_THAT(error, HasSubstr("cuDeviceGet: CUDA_ERROR_INVALID_DEVICE for device 3"));
  blas().find_none(1);
  EXPECT_EQ(kiln_cuda_gemm_create(0, &g, &gemm, error, sizeof(error)), KILN_CUDA_ERROR_BLAS);
  EXPECT_THAT(error, HasSubstr("cublasLtMatmulAlgoGetHeuristic: CUBLAS_STATUS_NOT_SUPPORTED"));
}

TEST_F(GemmTest, ASequenceMixesKernelsAndProductsAndChecksEachRecord) {
  blas().compute(0);
  const Matrix rows{4, 4, {0, 4, 1}};
  kiln_cuda_gemm* gemm = Create(Desc(KILN_CUDA_DTYPE_F32, 1, 4, 4, 4, rows, rows, rows));
  ASSERT_NE(gemm, nullptr);
  kiln_cuda_module* m = nullptr;
  const std::string image = "kernel mix 1\n";
  ASSERT_EQ(kiln_cuda_module_load(0, image.data(), image.size(), &m, error, sizeof(error)), 0);
  kiln_cuda_function* f = nullptr;
  ASSERT_EQ(kiln_cuda_module_function(m, "mix", &f, error, sizeof(error)), 0);
  const uint64_t slots[4] = {0x10000, 0x20000, 0x30000, reinterpret_cast<uint64_t>(workspace)};
  const uint32_t product[4] = {0, 1, 2, 3};
  const uint32_t kernel[1] = {2};
  kiln_cuda_launch_record records[3] = {};
  records[0].function = f, records[0].param_count = 1, records[0].param_slots = kernel;
  records[1].gemm = gemm, records[1].param_count = 4, records[1].param_slots = product;
  records[2] = records[0];
  for (auto* r : {&records[0], &records[2]}) {
    for (int i = 0; i < 3; ++i) r->grid[i] = r->block[i] = 1;
  }
  const int calls = blas().call_count();
  size_t failed = 99;
  ASSERT_EQ(kiln_cuda_launch_sequence(records, 3, slots, 4, nullptr, &failed, error, sizeof(error)),
            0)
      << error;
  EXPECT_EQ(blas().call_count(), calls + 1);
  // A product with a parameter missing, or a record that is both, runs nothing.
  records[1].param_count = 3;
  EXPECT_EQ(kiln_cuda_launch_sequence(records, 3, slots, 4, nullptr, &failed, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(failed, 1u);
  EXPECT_THAT(error, HasSubstr("record 1: a product of 3 parameters, not 4"));
  records[1].param_count = 4;
  records[1].function = f;
  EXPECT_EQ(kiln_cuda_launch_sequence(records, 3, slots, 4, nullptr, &failed, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_THAT(error, HasSubstr("record 1: not one function, product or copy"));
  EXPECT_EQ(blas().call_count(), calls + 1);
  kiln_cuda_module_unload(m);
  kiln_cuda_gemm_destroy(gemm);
  kiln_cuda_gemm_destroy(nullptr);
}

TEST_F(GemmTest, OneHandleServesEveryProductOfADevice) {
  blas().compute(0);
  const Matrix rows{2, 2, {0, 2, 1}};
  size_t version = 0;
  ASSERT_EQ(kiln_cuda_blas_open(&version, error, sizeof(error)), 0) << error;
  EXPECT_EQ(version, 130100u);
  kiln_cuda_gemm* first = Create(Desc(KILN_CUDA_DTYPE_F32, 1, 2, 2, 2, rows, rows, rows));
  const int handles = blas().handles();
  kiln_cuda_gemm* second = Create(Desc(KILN_CUDA_DTYPE_F32, 1, 2, 2, 2, rows, rows, rows));
  EXPECT_EQ(blas().handles(), handles);
  EXPECT_EQ(handles, 1);
  kiln_cuda_gemm_destroy(first);
  kiln_cuda_gemm_destroy(second);
}

}  // namespace
