// The C ABI of client/runtime/cuda against a stand-in driver (fake_libcuda.c, named by
// KILN_LIBCUDA): what reaches the driver for each call, and the errors callers see.

#include "client/runtime/cuda/kiln_cuda.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

// The stand-in's own calls, for reading what it recorded. dlopen of the path the runtime
// opened returns the same library, so its state is shared.
struct Fake {
  Fake() {
    handle = dlopen(std::getenv("KILN_LIBCUDA"), RTLD_NOW | RTLD_LOCAL);
    launch_count = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cuda_launch_count"));
    launch_name = reinterpret_cast<const char* (*)(int)>(dlsym(handle, "fake_cuda_launch_name"));
    geometry =
        reinterpret_cast<const unsigned* (*)(int)>(dlsym(handle, "fake_cuda_launch_geometry"));
    stream = reinterpret_cast<void* (*)(int)>(dlsym(handle, "fake_cuda_launch_stream"));
    params = reinterpret_cast<int (*)(int)>(dlsym(handle, "fake_cuda_launch_params"));
    values = reinterpret_cast<const uint64_t* (*)(int)>(dlsym(handle, "fake_cuda_launch_values"));
    modules_loaded = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cuda_modules_loaded"));
    retained = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cuda_retained"));
    context_sets = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cuda_context_sets"));
    shared_sets = reinterpret_cast<int (*)()>(dlsym(handle, "fake_cuda_shared_sets"));
    clear_current = reinterpret_cast<void (*)()>(dlsym(handle, "fake_cuda_clear_current"));
  }
  void* handle;
  int (*launch_count)();
  const char* (*launch_name)(int);
  const unsigned* (*geometry)(int);
  void* (*stream)(int);
  int (*params)(int);
  const uint64_t* (*values)(int);
  int (*modules_loaded)();
  int (*retained)();
  int (*context_sets)();
  int (*shared_sets)();
  void (*clear_current)();
};

Fake& fake() {
  static Fake* f = new Fake;
  return *f;
}

class KilnCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(std::getenv("KILN_LIBCUDA"), nullptr);
    ASSERT_NE(fake().handle, nullptr) << dlerror();
  }

  kiln_cuda_module* Load(const std::string& image) {
    kiln_cuda_module* m = nullptr;
    EXPECT_EQ(kiln_cuda_module_load(0, image.data(), image.size(), &m, error, sizeof(error)), 0)
        << error;
    return m;
  }

  kiln_cuda_function* Function(kiln_cuda_module* m, const char* name) {
    kiln_cuda_function* f = nullptr;
    EXPECT_EQ(kiln_cuda_module_function(m, name, &f, error, sizeof(error)), 0) << error;
    return f;
  }

  char error[256] = {};
};

TEST_F(KilnCudaTest, OpensTheDriverNamedByTheEnvironment) {
  int version = 0;
  ASSERT_EQ(kiln_cuda_open(&version, error, sizeof(error)), 0) << error;
  EXPECT_EQ(version, 13000);
  EXPECT_EQ(kiln_cuda_open(nullptr, nullptr, 0), 0);
}

TEST_F(KilnCudaTest, LaunchPassesEachParameterByValueOnTheGivenStream) {
  // Text without a trailing NUL, as a PTX image might come: the runtime adds one.
  kiln_cuda_module* m = Load("kernel kiln_k0 3\nkernel kiln_k1 1\n");
  kiln_cuda_function* f = Function(m, "kiln_k0");
  const uint32_t grid[3] = {132, 1, 1};
  const uint32_t block[3] = {256, 1, 1};
  const uint64_t params[3] = {0x7f0000001000ull, 17, static_cast<uint64_t>(-5)};
  void* stream = reinterpret_cast<void*>(0x1234);
  const int before = fake().launch_count();
  ASSERT_EQ(kiln_cuda_launch(f, grid, block, 0, stream, params, 3, error, sizeof(error)), 0)
      << error;
  ASSERT_EQ(fake().launch_count(), before + 1);
  EXPECT_STREQ(fake().launch_name(before), "kiln_k0");
  const unsigned* g = fake().geometry(before);
  EXPECT_THAT(std::vector<unsigned>(g, g + 7), ElementsAre(132, 1, 1, 256, 1, 1, 0));
  EXPECT_EQ(fake().stream(before), stream);
  const uint64_t* v = fake().values(before);
  EXPECT_THAT(std::vector<uint64_t>(v, v + fake().params(before)),
              ElementsAre(0x7f0000001000ull, 17u, static_cast<uint64_t>(-5)));
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, ModulesHoldThePrimaryContextUntilUnloaded) {
  const int loaded = fake().modules_loaded();
  const int retained = fake().retained();
  kiln_cuda_module* m = Load(std::string("kernel a 0\n") + '\0');
  EXPECT_EQ(fake().modules_loaded(), loaded + 1);
  EXPECT_EQ(fake().retained(), retained + 1);
  kiln_cuda_module_unload(m);
  EXPECT_EQ(fake().modules_loaded(), loaded);
  EXPECT_EQ(fake().retained(), retained);
  kiln_cuda_module_unload(nullptr);
}

TEST_F(KilnCudaTest, ALaunchWithNoCurrentContextMakesTheModulesCurrent) {
  kiln_cuda_module* m = Load("kernel k 0\n");
  kiln_cuda_function* f = Function(m, "k");
  fake().clear_current();
  const int sets = fake().context_sets();
  const uint32_t one[3] = {1, 1, 1};
  ASSERT_EQ(kiln_cuda_launch(f, one, one, 0, nullptr, nullptr, 0, error, sizeof(error)), 0)
      << error;
  EXPECT_EQ(fake().context_sets(), sets + 1);
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, DynamicSharedMemoryPast48KiBIsAllowedOnce) {
  kiln_cuda_module* m = Load("kernel big 0\n");
  kiln_cuda_function* f = Function(m, "big");
  const uint32_t one[3] = {1, 1, 1};
  const int sets = fake().shared_sets();
  ASSERT_EQ(kiln_cuda_launch(f, one, one, 48 * 1024, nullptr, nullptr, 0, error, sizeof(error)), 0);
  EXPECT_EQ(fake().shared_sets(), sets);
  ASSERT_EQ(kiln_cuda_launch(f, one, one, 96 * 1024, nullptr, nullptr, 0, error, sizeof(error)), 0);
  ASSERT_EQ(kiln_cuda_launch(f, one, one, 64 * 1024, nullptr, nullptr, 0, error, sizeof(error)), 0);
  EXPECT_EQ(fake().shared_sets(), sets + 1);
  // More than the device has: the driver's refusal, with the amount.
  EXPECT_NE(kiln_cuda_launch(f, one, one, 300 * 1024, nullptr, nullptr, 0, error, sizeof(error)),
            0);
  EXPECT_THAT(error, HasSubstr("cuFuncSetAttribute: CUDA_ERROR_INVALID_VALUE"));
  EXPECT_THAT(error, HasSubstr("307200 bytes"));
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, FunctionAttributesComeFromTheDriver) {
  kiln_cuda_module* m = Load("kernel k 0\n");
  kiln_cuda_function* f = Function(m, "k");
  int registers = 0, shared = 0, threads = 0;
  ASSERT_EQ(kiln_cuda_function_attributes(f, &registers, &shared, &threads, error, sizeof(error)),
            0)
      << error;
  EXPECT_EQ(registers, 32);
  EXPECT_EQ(shared, 1024);
  EXPECT_EQ(threads, 1024);
  EXPECT_EQ(kiln_cuda_function_attributes(f, nullptr, nullptr, nullptr, error, sizeof(error)), 0);
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, ErrorsNameTheCallAndWhatTheDriverSaid) {
  kiln_cuda_module* m = nullptr;
  const std::string bad = "bad image";
  EXPECT_EQ(kiln_cuda_module_load(0, bad.data(), bad.size(), &m, error, sizeof(error)), 200);
  EXPECT_STREQ(error,
               "cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE (device kernel image is invalid)");
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(kiln_cuda_module_load(3, "kernel k 0\n", 11, &m, error, sizeof(error)), 101);
  EXPECT_THAT(error, HasSubstr("cuDeviceGet: CUDA_ERROR_INVALID_DEVICE for device 3"));

  m = Load("kernel k 0\n");
  kiln_cuda_function* f = nullptr;
  EXPECT_EQ(kiln_cuda_module_function(m, "missing", &f, error, sizeof(error)), 500);
  EXPECT_STREQ(error,
               "cuModuleGetFunction: CUDA_ERROR_NOT_FOUND (named symbol not found) for kernel "
               "missing");
  // A message longer than the caller's buffer is cut, never overrun.
  char small[12];
  EXPECT_EQ(kiln_cuda_module_function(m, "missing", &f, small, sizeof(small)), 500);
  EXPECT_STREQ(small, "cuModuleGet");
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, BadArgumentsAreRefusedBeforeTheDriver) {
  kiln_cuda_module* m = Load("kernel k 0\n");
  kiln_cuda_function* f = Function(m, "k");
  const uint32_t one[3] = {1, 1, 1};
  const uint32_t empty[3] = {0, 1, 1};
  const int before = fake().launch_count();
  EXPECT_EQ(kiln_cuda_launch(f, empty, one, 0, nullptr, nullptr, 0, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_THAT(error, HasSubstr("grid 0x1x1, block 1x1x1 has an empty extent"));
  std::vector<uint64_t> many(KILN_CUDA_MAX_PARAMS + 1);
  EXPECT_EQ(
      kiln_cuda_launch(f, one, one, 0, nullptr, many.data(), many.size(), error, sizeof(error)),
      KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_THAT(error, HasSubstr("257 parameters, more than 256"));
  EXPECT_EQ(kiln_cuda_launch(nullptr, one, one, 0, nullptr, nullptr, 0, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(kiln_cuda_module_load(0, nullptr, 0, &m, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(fake().launch_count(), before);
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, ASequenceLaunchesEachRecordWithItsSlotsValues) {
  kiln_cuda_module* m = Load("kernel seq_a 3\nkernel seq_b 2\n");
  kiln_cuda_function* a = Function(m, "seq_a");
  kiln_cuda_function* b = Function(m, "seq_b");
  // Slots as a run fills them: two buffer addresses, a seed, a symbol's value.
  const uint64_t slots[4] = {0x7f0000001000ull, 0x7f0000002000ull, 42, 1000};
  const uint32_t a_slots[3] = {0, 3, 2};
  const uint32_t b_slots[2] = {1, 1};
  const kiln_cuda_launch_record records[2] = {
      {a, {4, 1, 1}, {256, 1, 1}, 0, 3, a_slots, nullptr, 0, {}},
      {b, {8, 2, 1}, {128, 1, 1}, 0, 2, b_slots, nullptr, 0, {}},
  };
  void* stream = reinterpret_cast<void*>(0x77);
  size_t failed = 99;
  const int before = fake().launch_count();
  ASSERT_EQ(kiln_cuda_launch_sequence(records, 2, slots, 4, stream, &failed, error, sizeof(error)),
            0)
      << error;
  EXPECT_EQ(failed, 2u);
  ASSERT_EQ(fake().launch_count(), before + 2);
  EXPECT_STREQ(fake().launch_name(before), "seq_a");
  EXPECT_STREQ(fake().launch_name(before + 1), "seq_b");
  const uint64_t* va = fake().values(before);
  EXPECT_THAT(std::vector<uint64_t>(va, va + 3), ElementsAre(0x7f0000001000ull, 1000u, 42u));
  const uint64_t* vb = fake().values(before + 1);
  EXPECT_THAT(std::vector<uint64_t>(vb, vb + 2), ElementsAre(0x7f0000002000ull, 0x7f0000002000ull));
  const unsigned* g = fake().geometry(before + 1);
  EXPECT_THAT(std::vector<unsigned>(g, g + 7), ElementsAre(8, 2, 1, 128, 1, 1, 0));
  EXPECT_EQ(fake().stream(before + 1), stream);
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, ACopyRecordCopiesOnTheDeviceBetweenItsSlotsAtTheirOffsets) {
  kiln_cuda_module* m = Load("kernel seq_d 1\n");
  kiln_cuda_function* a = Function(m, "seq_d");
  const uint64_t slots[2] = {0x7f0000001000ull, 0x7f0000002000ull};
  const uint32_t a_slots[1] = {1};
  const uint32_t copy_slots[2] = {0, 1};  // destination, source
  kiln_cuda_launch_record records[2] = {{a, {1, 1, 1}, {32, 1, 1}, 0, 1, a_slots, nullptr, 0, {}},
                                        {nullptr, {}, {}, 0, 2, copy_slots, nullptr, 0, {}}};
  records[1].copy_bytes = 64;
  records[1].copy_offsets[0] = 8;
  records[1].copy_offsets[1] = 256;
  void* stream = reinterpret_cast<void*>(0x78);
  size_t failed = 99;
  const int before = fake().launch_count();
  ASSERT_EQ(kiln_cuda_launch_sequence(records, 2, slots, 2, stream, &failed, error, sizeof(error)),
            0)
      << error;
  ASSERT_EQ(fake().launch_count(), before + 2);
  EXPECT_STREQ(fake().launch_name(before + 1), "cuMemcpyDtoDAsync");
  const uint64_t* v = fake().values(before + 1);
  EXPECT_THAT(std::vector<uint64_t>(v, v + 3),
              ElementsAre(0x7f0000001008ull, 0x7f0000002100ull, 64u));
  EXPECT_EQ(fake().stream(before + 1), stream);
  // Copies alone run in the thread's current context; with none, the driver's error says so.
  EXPECT_EQ(
      kiln_cuda_launch_sequence(&records[1], 1, slots, 2, stream, &failed, error, sizeof(error)), 0)
      << error;
  fake().clear_current();
  EXPECT_EQ(
      kiln_cuda_launch_sequence(&records[1], 1, slots, 2, stream, &failed, error, sizeof(error)),
      201);
  EXPECT_EQ(failed, 0u);
  EXPECT_THAT(error, HasSubstr("cuMemcpyDtoDAsync: CUDA_ERROR_INVALID_CONTEXT (64 bytes)"));
  // A copy names two slots, and a record is one thing.
  const kiln_cuda_launch_record bad_copy = {nullptr, {}, {}, 0, 1, copy_slots, nullptr, 64, {}};
  EXPECT_EQ(
      kiln_cuda_launch_sequence(&bad_copy, 1, slots, 2, stream, &failed, error, sizeof(error)),
      KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_THAT(error, HasSubstr("record 0: a copy of 1 parameters, not 2"));
  const kiln_cuda_launch_record both = {a,          {1, 1, 1}, {32, 1, 1}, 0, 2,
                                        copy_slots, nullptr,   64,         {}};
  EXPECT_EQ(kiln_cuda_launch_sequence(&both, 1, slots, 2, stream, &failed, error, sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_THAT(error, HasSubstr("not one function, product or copy"));
  EXPECT_EQ(fake().launch_count(), before + 3);
  kiln_cuda_module_unload(m);
}

TEST_F(KilnCudaTest, ASequenceWithAnInvalidRecordLaunchesNothingAndNamesIt) {
  kiln_cuda_module* m = Load("kernel seq_c 1\n");
  kiln_cuda_function* a = Function(m, "seq_c");
  const uint64_t slots[1] = {5};
  const uint32_t good[1] = {0};
  const uint32_t past_the_end[1] = {1};
  const kiln_cuda_launch_record slot_out_of_range[2] = {
      {a, {1, 1, 1}, {32, 1, 1}, 0, 1, good, nullptr, 0, {}},
      {a, {1, 1, 1}, {32, 1, 1}, 0, 1, past_the_end, nullptr, 0, {}},
  };
  size_t failed = 99;
  const int before = fake().launch_count();
  EXPECT_EQ(kiln_cuda_launch_sequence(slot_out_of_range, 2, slots, 1, nullptr, &failed, error,
                                      sizeof(error)),
            KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(failed, 1u);
  EXPECT_THAT(error, HasSubstr("record 1: parameter 0 takes slot 1 of 1"));
  const kiln_cuda_launch_record empty_grid[1] = {
      {a, {0, 1, 1}, {32, 1, 1}, 0, 1, good, nullptr, 0, {}}};
  EXPECT_EQ(
      kiln_cuda_launch_sequence(empty_grid, 1, slots, 1, nullptr, &failed, error, sizeof(error)),
      KILN_CUDA_ERROR_BAD_ARGUMENT);
  EXPECT_EQ(failed, 0u);
  EXPECT_THAT(error, HasSubstr("record 0: grid 0x1x1, block 32x1x1 has an empty extent"));
  EXPECT_EQ(fake().launch_count(), before);
  EXPECT_EQ(
      kiln_cuda_launch_sequence(nullptr, 0, nullptr, 0, nullptr, &failed, error, sizeof(error)), 0);
  kiln_cuda_module_unload(m);
}

}  // namespace
