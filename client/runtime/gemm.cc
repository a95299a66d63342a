#include "client/runtime/gemm.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <vector>

namespace kiln::runtime {
namespace {

// Blocking: a kKC-deep slice of an kMC x kNC output tile at a time; A is packed into
// kMR-row strips, B into NR-column strips, so the micro-kernel streams both from
// contiguous memory. The sizes keep a B strip in L1 and the packed A block in L2.
constexpr int64_t kMR = 6;
constexpr int64_t kKC = 256;
constexpr int64_t kMC = 96;
constexpr int64_t kNC = 256;

template <typename T>
constexpr int64_t kLanes = 32 / static_cast<int64_t>(sizeof(T));  // elements per 256-bit vector
template <typename T>
constexpr int64_t kNR = 2 * kLanes<T>;

struct Bf16 {};
struct Fp16 {};

template <typename T, typename S>
inline T Read(const void* base, int64_t index) {
  if constexpr (std::is_same_v<S, Bf16>) {
    return static_cast<T>(Bf16ToFloat(static_cast<const uint16_t*>(base)[index]));
  } else if constexpr (std::is_same_v<S, Fp16>) {
    return static_cast<T>(Fp16ToFloat(static_cast<const uint16_t*>(base)[index]));
  } else {
    return static_cast<T>(static_cast<const S*>(base)[index]);
  }
}

// Calls f.template operator()<S>() with S the source element type of `dtype`.
template <typename F>
void DispatchSource(DType dtype, F&& f) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64:
      f.template operator()<double>();
      break;
    case v1::DTYPE_FLOAT16:
      f.template operator()<Fp16>();
      break;
    case v1::DTYPE_BFLOAT16:
      f.template operator()<Bf16>();
      break;
    default:
      f.template operator()<float>();
      break;
  }
}

// Packs rows [i0, i0 + mc) x cols [p0, p0 + kc) of A into strips of kMR rows, k-major,
// zero-padding rows past m.
template <typename T>
void PackA(const MatRef& a, int64_t batch, int64_t m, int64_t i0, int64_t mc, int64_t p0,
           int64_t kc, T* out) {
  DispatchSource(a.dtype, [&]<typename S>() {
    const int64_t strips = (mc + kMR - 1) / kMR;
    for (int64_t s = 0; s < strips; ++s) {
      T* dst = out + s * kc * kMR;
      for (int64_t i = 0; i < kMR; ++i) {
        const int64_t row = i0 + s * kMR + i;
        if (row >= m || row >= i0 + mc) {
          for (int64_t k = 0; k < kc; ++k) dst[k * kMR + i] = T(0);
          continue;
        }
        const int64_t base = batch * a.bs + row * a.rs + p0 * a.cs;
        for (int64_t k = 0; k < kc; ++k) dst[k * kMR + i] = Read<T, S>(a.data, base + k * a.cs);
      }
    }
  });
}

// Packs rows [p0, p0 + kc) x cols [j0, j0 + nc) of B into strips of NR columns, k-major.
template <typename T>
void PackB(const MatRef& b, int64_t batch, int64_t n, int64_t j0, int64_t nc, int64_t p0,
           int64_t kc, T* out) {
  constexpr int64_t nr = kNR<T>;
  DispatchSource(b.dtype, [&]<typename S>() {
    const int64_t strips = (nc + nr - 1) / nr;
    for (int64_t s = 0; s < strips; ++s) {
      T* dst = out + s * kc * nr;
      const int64_t cols = std::min(nr, j0 + nc - (j0 + s * nr));
      for (int64_t k = 0; k < kc; ++k) {
        const int64_t base = batch * b.bs + (p0 + k) * b.rs + (j0 + s * nr) * b.cs;
        T* row = dst + k * nr;
        if (b.cs == 1 && std::is_same_v<S, T>) {
          std::memcpy(row, static_cast<const T*>(b.data) + base, sizeof(T) * cols);
        } else {
          for (int64_t j = 0; j < cols; ++j) row[j] = Read<T, S>(b.data, base + j * b.cs);
        }
        for (int64_t j = cols; j < nr; ++j) row[j] = T(0);
      }
    }
  });
  (void)n;
}

// c[kMR x NR] += a-strip @ b-strip over kc. Written with vector extensions so the same
// source compiles to AVX2+FMA or to the baseline instruction set.
template <typename T>
[[gnu::always_inline]] inline void MicroKernelBody(int64_t kc, const T* __restrict a,
                                                   const T* __restrict b, T* __restrict c,
                                                   int64_t ldc) {
  constexpr int64_t w = kLanes<T>;
  typedef T V __attribute__((vector_size(32)));
  V acc[kMR][2];
  for (int64_t i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = V{};
  for (int64_t k = 0; k < kc; ++k) {
    V b0, b1;
    std::memcpy(&b0, b + k * 2 * w, sizeof(V));
    std::memcpy(&b1, b + k * 2 * w + w, sizeof(V));
    const T* ak = a + k * kMR;
#pragma unroll
    for (int64_t i = 0; i < kMR; ++i) {
      const T ai = ak[i];
      acc[i][0] += b0 * ai;
      acc[i][1] += b1 * ai;
    }
  }
  for (int64_t i = 0; i < kMR; ++i) {
    V c0, c1;
    std::memcpy(&c0, c + i * ldc, sizeof(V));
    std::memcpy(&c1, c + i * ldc + w, sizeof(V));
    c0 += acc[i][0];
    c1 += acc[i][1];
    std::memcpy(c + i * ldc, &c0, sizeof(V));
    std::memcpy(c + i * ldc + w, &c1, sizeof(V));
  }
}

template <typename T>
using MicroKernelFn = void (*)(int64_t, const T*, const T*, T*, int64_t);

template <typename T>
void MicroKernelBase(int64_t kc, const T* a, const T* b, T* c, int64_t ldc) {
  MicroKernelBody<T>(kc, a, b, c, ldc);
}

template <typename T>
__attribute__((target("avx2,fma"))) void MicroKernelAvx2(int64_t kc, const T* a, const T* b, T* c,
                                                         int64_t ldc) {
  MicroKernelBody<T>(kc, a, b, c, ldc);
}

bool CpuHasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

template <typename T>
MicroKernelFn<T> PickMicroKernel() {
  return CpuHasAvx2() ? &MicroKernelAvx2<T> : &MicroKernelBase<T>;
}

// Writes one finished tile: c = beta * addend + alpha * acc, rounded to c's dtype.
template <typename T>
void StoreTile(const GemmArgs& g, int64_t batch, int64_t i0, int64_t mc, int64_t j0, int64_t nc,
               T* acc, int64_t ldc) {
  const T alpha = static_cast<T>(g.alpha);
  if (g.alpha != 1.0) {
    for (int64_t i = 0; i < mc; ++i) {
      for (int64_t j = 0; j < nc; ++j) acc[i * ldc + j] *= alpha;
    }
  }
  if (g.addend != nullptr && g.beta != 0.0) {
    const T beta = static_cast<T>(g.beta);
    const MatRef& d = *g.addend;
    const char* base = static_cast<const char*>(d.data);
    const int64_t es = ElementSize(d.dtype);
    for (int64_t i = 0; i < mc; ++i) {
      for (int64_t j = 0; j < nc; ++j) {
        const int64_t idx = batch * d.bs + (i0 + i) * d.rs + (j0 + j) * d.cs;
        acc[i * ldc + j] += beta * static_cast<T>(LoadAsDouble(base + idx * es, d.dtype));
      }
    }
  }
  const int64_t origin = batch * g.c.bs + i0 * g.c.rs + j0 * g.c.cs;
  auto store = [&]<typename Out>(Out* out, auto convert) {
    for (int64_t i = 0; i < mc; ++i) {
      Out* row = out + origin + i * g.c.rs;
      const T* src = acc + i * ldc;
      for (int64_t j = 0; j < nc; ++j) row[j * g.c.cs] = convert(src[j]);
    }
  };
  void* out = const_cast<void*>(g.c.data);
  switch (g.c.dtype) {
    case v1::DTYPE_FLOAT32:
      store(static_cast<float*>(out), [](T v) { return static_cast<float>(v); });
      break;
    case v1::DTYPE_FLOAT64:
      store(static_cast<double*>(out), [](T v) { return static_cast<double>(v); });
      break;
    case v1::DTYPE_BFLOAT16:
      store(static_cast<uint16_t*>(out), [](T v) { return FloatToBf16(static_cast<float>(v)); });
      break;
    case v1::DTYPE_FLOAT16:
      store(static_cast<uint16_t*>(out), [](T v) { return FloatToFp16(static_cast<float>(v)); });
      break;
    default:
      break;
  }
}

template <typename T>
void GemmTyped(const GemmArgs& g, ThreadPool* pool, int max_threads) {
  constexpr int64_t nr = kNR<T>;
  const MicroKernelFn<T> kernel = PickMicroKernel<T>();
  // Threads only pay off past a few million flops each.
  const double flops = 2.0 * static_cast<double>(g.batch) * static_cast<double>(g.m) *
                       static_cast<double>(g.n) * static_cast<double>(g.k);
  const int useful = static_cast<int>(std::min<double>(1 << 20, flops / 4e6 + 1));
  int threads = max_threads <= 0 ? useful : std::min(max_threads, useful);
  if (pool == nullptr) threads = 1;
  threads = std::min(threads, pool == nullptr ? 1 : pool->loop_threads());
  // Tiles: kMC x kNC, with fewer rows per tile when that is what it takes to give every
  // thread a few. Tiling never changes results: each element sums its k blocks in order.
  const int64_t tiles_n = (g.n + kNC - 1) / kNC;
  int64_t mc_tile = kMC;
  const int64_t want_tiles = 4 * static_cast<int64_t>(threads);
  if (threads > 1 && g.batch * tiles_n * ((g.m + kMC - 1) / kMC) < want_tiles) {
    const int64_t rows = (want_tiles + g.batch * tiles_n - 1) / (g.batch * tiles_n);
    mc_tile = std::max(kMR, ((g.m + rows - 1) / rows + kMR - 1) / kMR * kMR);
    mc_tile = std::min(mc_tile, kMC);
  }
  const int64_t tiles_m = (g.m + mc_tile - 1) / mc_tile;
  const int64_t tasks = g.batch * tiles_m * tiles_n;
  // Scratch sized for this product (small products must not pay for full tiles).
  const int64_t mc_pad = (std::min(mc_tile, g.m) + kMR - 1) / kMR * kMR;
  const int64_t ldc = (std::min(kNC, g.n) + nr - 1) / nr * nr;
  const int64_t kc_max = std::max<int64_t>(1, std::min(kKC, g.k));

  auto run = [&](int64_t begin, int64_t end) {
    // Per-thread scratch, kept between calls so steady-state products allocate nothing.
    thread_local std::vector<T> acc_store, apack_store, bpack_store;
    const auto fit = [](std::vector<T>& v, int64_t n) {
      if (static_cast<int64_t>(v.size()) < n) v.resize(static_cast<size_t>(n));
      return v.data();
    };
    T* acc = fit(acc_store, mc_pad * ldc);
    T* apack = fit(apack_store, mc_pad * kc_max);
    T* bpack = fit(bpack_store, ldc * kc_max);
    for (int64_t t = begin; t < end; ++t) {
      const int64_t batch = t / (tiles_m * tiles_n);
      const int64_t rem = t % (tiles_m * tiles_n);
      const int64_t i0 = (rem / tiles_n) * mc_tile;
      const int64_t j0 = (rem % tiles_n) * kNC;
      const int64_t mc = std::min(mc_tile, g.m - i0);
      const int64_t nc = std::min(kNC, g.n - j0);
      std::fill(acc, acc + mc_pad * ldc, T(0));
      for (int64_t p0 = 0; p0 < g.k; p0 += kKC) {
        const int64_t kc = std::min(kKC, g.k - p0);
        PackA<T>(g.a, batch, g.m, i0, mc, p0, kc, apack);
        PackB<T>(g.b, batch, g.n, j0, nc, p0, kc, bpack);
        for (int64_t js = 0; js * nr < nc; ++js) {
          for (int64_t is = 0; is * kMR < mc; ++is) {
            kernel(kc, apack + is * kc * kMR, bpack + js * kc * nr, acc + is * kMR * ldc + js * nr,
                   ldc);
          }
        }
      }
      StoreTile<T>(g, batch, i0, mc, j0, nc, acc, ldc);
    }
  };
  if (pool == nullptr || threads <= 1) {
    run(0, tasks);
  } else {
    pool->ParallelFor(tasks, 1, threads, run);
  }
}

}  // namespace

void Gemm(const GemmArgs& g, ThreadPool* pool, int max_threads) {
  if (g.batch <= 0 || g.m <= 0 || g.n <= 0) return;
  const bool wide = g.a.dtype == v1::DTYPE_FLOAT64 || g.b.dtype == v1::DTYPE_FLOAT64 ||
                    g.c.dtype == v1::DTYPE_FLOAT64;
  if (wide) {
    GemmTyped<double>(g, pool, max_threads);
  } else {
    GemmTyped<float>(g, pool, max_threads);
  }
}

bool GemmUsesAvx2() { return CpuHasAvx2(); }

}  // namespace kiln::runtime
