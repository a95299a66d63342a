// Matrix-product speed of the CPU runtime's extern aten.mm, against anchors measured in the
// same run on the same inputs: a plain i-k-j triple loop (what the runtime would be without
// blocking and packing) and, when the build found it, Debian's OpenBLAS sgemm (what a tuned
// library does on this machine). Prints GFLOP/s per size and thread count, and the
// runtime's speed as a ratio to each anchor. A program, not a test:
// `build/release/tests/bench/extern_bench [max_size]`.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <thread>
#include <vector>

#include "client/runtime/extern_ops.h"
#include "client/runtime/gemm.h"

#ifdef KILN_HAVE_OPENBLAS
#include <cblas.h>
#endif

namespace {

using kiln::ThreadPool;
using kiln::ThreadPoolOptions;
using kiln::runtime::CallValue;
using kiln::runtime::ExternCall;
using kiln::runtime::ExternContext;
using kiln::runtime::Tensor;

// Best seconds per call over a few timed batches of at least ~0.2 s each.
template <typename F>
double Time(F f, int max_reps) {
  f();  // warm up: page in memory, load code
  double best = 1e30;
  for (int batch = 0; batch < 3; ++batch) {
    int reps = 0;
    const auto start = std::chrono::steady_clock::now();
    double elapsed = 0;
    do {
      f();
      ++reps;
      elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    } while (elapsed < 0.2 && reps < max_reps);
    best = std::min(best, elapsed / reps);
    if (elapsed > 2) break;  // slow anchors: one batch is enough
  }
  return best;
}

void NaiveMm(const float* a, const float* b, float* c, int64_t m, int64_t k, int64_t n) {
  std::fill(c, c + m * n, 0.0f);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const float aip = a[i * k + p];
      for (int64_t j = 0; j < n; ++j) c[i * n + j] += aip * b[p * n + j];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t max_size = argc > 1 ? std::atoll(argv[1]) : 1024;
  const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  ThreadPool pool(ThreadPoolOptions::ForLoops(hw));
  std::printf("aten.mm f32, square m = k = n; AVX2+FMA kernels: %s; %d hardware threads\n",
              kiln::runtime::GemmUsesAvx2() ? "yes" : "no", hw);
#ifdef KILN_HAVE_OPENBLAS
  std::printf("%6s %7s %10s %10s %10s %12s %12s\n", "size", "threads", "kiln", "naive", "openblas",
              "kiln/naive", "kiln/openblas");
#else
  std::printf("%6s %7s %10s %10s %12s   (OpenBLAS not found at build time)\n", "size", "threads",
              "kiln", "naive", "kiln/naive");
#endif
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1, 1);
  for (int64_t size : {64, 128, 256, 512, 1024, 2048}) {
    if (size > max_size) break;
    const int64_t m = size, k = size, n = size;
    Tensor a = Tensor::Empty({m, k}, kiln::v1::DTYPE_FLOAT32);
    Tensor b = Tensor::Empty({k, n}, kiln::v1::DTYPE_FLOAT32);
    Tensor c = Tensor::Empty({m, n}, kiln::v1::DTYPE_FLOAT32);
    for (int64_t i = 0; i < m * k; ++i) a.data_as<float>()[i] = dist(rng);
    for (int64_t i = 0; i < k * n; ++i) b.data_as<float>()[i] = dist(rng);
    std::vector<float> naive_out(static_cast<size_t>(m * n));
    const double flops = 2.0 * static_cast<double>(m * n * k);
    // The naive loop is single-threaded; measure it once per size.
    const double naive_s = Time(
        [&] { NaiveMm(a.data_as<float>(), b.data_as<float>(), naive_out.data(), m, k, n); }, 50);
    for (int threads : {1, hw}) {
      if (threads == hw && hw == 1) continue;
      std::vector<CallValue> args = {CallValue{a}, CallValue{b}};
      std::vector<Tensor> outs = {c};
      ExternContext ctx;
      ctx.pool = &pool;
      ctx.max_threads = threads;
      ExternCall call;
      call.op = "aten.mm.default";
      call.args = args;
      call.outputs = outs;
      call.context = &ctx;
      const double kiln_s = Time(
          [&] {
            if (!kiln::runtime::RunExternOp(call).ok()) std::abort();
          },
          1000);
      const double kiln_gf = flops / kiln_s * 1e-9;
      // The naive anchor runs on one thread; scale it by the thread count so the ratio
      // compares like with like (a perfectly parallel naive loop).
      const double naive_gf = flops / naive_s * 1e-9 * threads;
#ifdef KILN_HAVE_OPENBLAS
      openblas_set_num_threads(threads);
      std::vector<float> blas_out(static_cast<size_t>(m * n));
      const double blas_s = Time(
          [&] {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(m),
                        static_cast<int>(n), static_cast<int>(k), 1.0f, a.data_as<float>(),
                        static_cast<int>(k), b.data_as<float>(), static_cast<int>(n), 0.0f,
                        blas_out.data(), static_cast<int>(n));
          },
          1000);
      const double blas_gf = flops / blas_s * 1e-9;
      std::printf("%6lld %7d %10.1f %10.1f %10.1f %12.2f %12.2f\n", static_cast<long long>(size),
                  threads, kiln_gf, naive_gf, blas_gf, kiln_gf / naive_gf, kiln_gf / blas_gf);
#else
      std::printf("%6lld %7d %10.1f %10.1f %12.2f\n", static_cast<long long>(size), threads,
                  kiln_gf, naive_gf, kiln_gf / naive_gf);
#endif
    }
  }
  std::printf("GFLOP/s; naive scaled by threads. Ratios above 1 mean Kiln is faster.\n");
  return 0;
}
