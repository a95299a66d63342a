// Scaled-dot-product attention on the CPU by the math path: the memory-efficient and cuDNN
// forward and backward ops, with causal masks (aligned top-left: query i sees keys j <= i),
// an optional additive bias, a custom scale and dropout of the probabilities, drawn over
// their [B, H, L, S] positions from the op's Philox stream (dropout.h); the forward returns
// the seed and stream as philox_seed and philox_offset, and the backward replays them.
// Computation is in float32 (float64 for float64 tensors) on dense copies; the backward
// rebuilds probabilities from the saved logsumexp and uses the saved output, as the kernels
// it stands in for do. Rows are split across threads and every sum runs in a fixed order, so
// results do not depend on threads.

#include <cmath>
#include <limits>
#include <vector>

#include "client/runtime/dropout.h"
#include "client/runtime/extern_args.h"
#include "proto/ops/registry.h"

namespace kiln::runtime {
namespace {

template <typename T>
struct Attention {
  int64_t b = 0, h = 0, l = 0, s = 0, e = 0, ev = 0;
  T scale = 1;
  bool causal = false;
  std::vector<T> q, k, v, bias;  // dense [B, H, *, *]; bias empty or [B, H, L, S]
  Dropout dropout{0, 0, 0};
  int64_t bh() const { return b * h; }

  // What probability (i, j) of head `hd` is multiplied by after dropout.
  T Keep(int64_t hd, int64_t i, int64_t j) const {
    return static_cast<T>(dropout.Factor(static_cast<uint64_t>((hd * l + i) * s + j)));
  }

  // Scores of query row i of head `hd` against every key; -inf where masked.
  void Scores(int64_t hd, int64_t i, T* out) const {
    const T* qi = q.data() + (hd * l + i) * e;
    for (int64_t j = 0; j < s; ++j) {
      if (causal && j > i) {
        out[j] = -std::numeric_limits<T>::infinity();
        continue;
      }
      const T* kj = k.data() + (hd * s + j) * e;
      T dot = 0;
      for (int64_t c = 0; c < e; ++c) dot += qi[c] * kj[c];
      T score = scale * dot;
      if (!bias.empty()) score += bias[static_cast<size_t>((hd * l + i) * s + j)];
      out[j] = score;
    }
  }
};

// `t` seen with sizes `to` by broadcasting (a zero stride on each expanded dim).
Tensor Broadcast(const Tensor& t, const std::vector<int64_t>& to, ArgReader& r) {
  const int64_t lead = static_cast<int64_t>(to.size()) - t.dim();
  if (!r.Check(lead >= 0, "attn_bias ", t.DebugString(), " does not broadcast")) return Tensor();
  std::vector<int64_t> strides(to.size(), 0);
  for (int64_t d = 0; d < t.dim(); ++d) {
    const size_t o = static_cast<size_t>(d + lead);
    if (t.size(d) == to[o]) {
      strides[o] = t.stride(d);
    } else if (!r.Check(t.size(d) == 1, "attn_bias ", t.DebugString(), " does not broadcast")) {
      return Tensor();
    }
  }
  return t.AsStrided(to, strides, t.offset());
}

// Reads the inputs; dropout draws from `stream` under `seed`.
template <typename T>
bool Load(ArgReader& r, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& bias,
          bool causal, double dropout_p, uint64_t seed, uint64_t stream, Attention<T>& a) {
  if (!r.Check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
               "query, key and value must be 4-d [B, H, L, E]") ||
      !r.Check(q.dtype() == k.dtype() && q.dtype() == v.dtype(),
               "query, key and value dtypes differ")) {
    return false;
  }
  a.b = q.size(0);
  a.h = q.size(1);
  a.l = q.size(2);
  a.e = q.size(3);
  a.s = k.size(2);
  a.ev = v.size(3);
  if (!r.Check(k.size(0) == a.b && v.size(0) == a.b && k.size(1) == a.h && v.size(1) == a.h &&
                   k.size(3) == a.e && v.size(2) == a.s,
               "shapes ", q.DebugString(), ", ", k.DebugString(), ", ", v.DebugString(),
               " do not match")) {
    return false;
  }
  if (!r.Check(dropout_p >= 0 && dropout_p <= 1, "dropout_p must be in [0, 1]")) return false;
  a.scale = static_cast<T>(r.GetDouble(-1, "scale", 1.0 / std::sqrt(static_cast<double>(a.e))));
  a.causal = causal;
  a.dropout = Dropout(dropout_p, seed, stream);
  a.q = ToDense<T>(q);
  a.k = ToDense<T>(k);
  a.v = ToDense<T>(v);
  if (bias.defined()) {
    const Tensor full = Broadcast(bias, {a.b, a.h, a.l, a.s}, r);
    if (!r.ok()) return false;
    a.bias = ToDense<T>(full);
  }
  return r.ok();
}

// Writes [B*H, L] logsumexp values into `out`, whose rows may be longer: padded with +inf, as
// PyTorch's efficient-attention kernel pads them.
template <typename T>
void WriteLse(const std::vector<T>& lse, const Attention<T>& a, const Tensor& out) {
  if (!out.defined() || a.bh() == 0) return;
  const int64_t row = out.numel() / a.bh();
  std::vector<T> v(static_cast<size_t>(out.numel()), std::numeric_limits<T>::infinity());
  for (int64_t hd = 0; hd < a.bh(); ++hd) {
    for (int64_t i = 0; i < std::min(row, a.l); ++i) {
      v[static_cast<size_t>(hd * row + i)] = lse[static_cast<size_t>(hd * a.l + i)];
    }
  }
  FromDense<T>(v.data(), out);
}

template <typename T>
bool ReadLse(ArgReader& r, const Tensor& t, const Attention<T>& a, std::vector<T>& lse) {
  if (!r.Check(a.bh() == 0 || (t.numel() % a.bh() == 0 && t.numel() / a.bh() >= a.l), "logsumexp ",
               t.DebugString(), " is too small")) {
    return false;
  }
  const std::vector<T> all = ToDense<T>(t);
  const int64_t row = a.bh() == 0 ? 0 : t.numel() / a.bh();
  lse.resize(static_cast<size_t>(a.bh() * a.l));
  for (int64_t hd = 0; hd < a.bh(); ++hd) {
    for (int64_t i = 0; i < a.l; ++i) {
      lse[static_cast<size_t>(hd * a.l + i)] = all[static_cast<size_t>(hd * row + i)];
    }
  }
  return true;
}

// Philox seeds and streams are 64-bit: an int64 tensor holds them exactly.
void WriteInt(const Tensor& t, int64_t value) {
  if (!t.defined() || t.numel() != 1) return;
  if (t.dtype() == v1::DTYPE_INT64) {
    *t.data_as<int64_t>() = value;
  } else {
    StoreFromDouble(t.data(), t.dtype(), static_cast<double>(value));
  }
}

template <typename T>
void Forward(const Attention<T>& a, const ExternContext& ctx, std::vector<T>& out,
             std::vector<T>& lse) {
  out.assign(static_cast<size_t>(a.bh() * a.l * a.ev), T(0));
  lse.assign(static_cast<size_t>(a.bh() * a.l), -std::numeric_limits<T>::infinity());
  ctx.pool->ParallelFor(a.bh() * a.l, 16, ctx.max_threads, [&](int64_t begin, int64_t end) {
    std::vector<T> sc(static_cast<size_t>(a.s));
    for (int64_t row = begin; row < end; ++row) {
      const int64_t hd = row / a.l, i = row % a.l;
      a.Scores(hd, i, sc.data());
      T m = -std::numeric_limits<T>::infinity();
      for (T x : sc) m = std::max(m, x);
      if (m == -std::numeric_limits<T>::infinity()) continue;  // fully masked: 0, lse -inf
      T sum = 0;
      for (T& x : sc) {
        x = std::exp(x - m);
        sum += x;
      }
      lse[static_cast<size_t>(row)] = m + std::log(sum);
      T* oi = out.data() + row * a.ev;
      const T inv = T(1) / sum;
      for (int64_t j = 0; j < a.s; ++j) {
        const T p = sc[static_cast<size_t>(j)] * inv * a.Keep(hd, i, j);
        if (p == 0) continue;
        const T* vj = a.v.data() + (hd * a.s + j) * a.ev;
        for (int64_t c = 0; c < a.ev; ++c) oi[c] += p * vj[c];
      }
    }
  });
}

template <typename T>
struct Grads {
  std::vector<T> dq, dk, dv, dbias;  // dbias dense [B, H, L, S] when wanted
};

template <typename T>
void Backward(const Attention<T>& a, const std::vector<T>& dout, const std::vector<T>& out,
              const std::vector<T>& lse, bool want_bias, const ExternContext& ctx, Grads<T>& g) {
  g.dq.assign(a.q.size(), T(0));
  g.dk.assign(a.k.size(), T(0));
  g.dv.assign(a.v.size(), T(0));
  if (want_bias) g.dbias.assign(static_cast<size_t>(a.bh() * a.l * a.s), T(0));
  // p holds the probabilities after dropout, ds the score gradients.
  std::vector<T> p(static_cast<size_t>(a.l * a.s)), ds(static_cast<size_t>(a.l * a.s));
  for (int64_t hd = 0; hd < a.bh(); ++hd) {
    // Pass 1, by query row: probabilities, score gradients and dq.
    ctx.pool->ParallelFor(a.l, 4, ctx.max_threads, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        T* pi = p.data() + i * a.s;
        T* dsi = ds.data() + i * a.s;
        a.Scores(hd, i, pi);
        const T li = lse[static_cast<size_t>(hd * a.l + i)];
        const T* doi = dout.data() + (hd * a.l + i) * a.ev;
        const T* oi = out.data() + (hd * a.l + i) * a.ev;
        T d = 0;
        for (int64_t c = 0; c < a.ev; ++c) d += doi[c] * oi[c];
        T* dqi = g.dq.data() + (hd * a.l + i) * a.e;
        for (int64_t j = 0; j < a.s; ++j) {
          const T x = pi[j];
          if (x == -std::numeric_limits<T>::infinity() ||
              li == -std::numeric_limits<T>::infinity()) {
            pi[j] = dsi[j] = 0;
            continue;
          }
          // out = (P * Z) v with Z the dropout factors: dV = (P * Z)^T dout, and
          // dS = P * (Z * dP - rowsum(dout * out)).
          const T pij = std::exp(x - li);
          const T z = a.Keep(hd, i, j);
          pi[j] = pij * z;
          const T* vj = a.v.data() + (hd * a.s + j) * a.ev;
          T dp = 0;
          for (int64_t c = 0; c < a.ev; ++c) dp += doi[c] * vj[c];
          dsi[j] = pij * (dp * z - d);
          const T* kj = a.k.data() + (hd * a.s + j) * a.e;
          const T f = a.scale * dsi[j];
          for (int64_t c = 0; c < a.e; ++c) dqi[c] += f * kj[c];
        }
        if (!g.dbias.empty()) {
          std::copy(dsi, dsi + a.s, g.dbias.data() + (hd * a.l + i) * a.s);
        }
      }
    });
    // Pass 2, by key: dk and dv, summing over queries in order.
    ctx.pool->ParallelFor(a.s, 4, ctx.max_threads, [&](int64_t begin, int64_t end) {
      for (int64_t j = begin; j < end; ++j) {
        T* dkj = g.dk.data() + (hd * a.s + j) * a.e;
        T* dvj = g.dv.data() + (hd * a.s + j) * a.ev;
        for (int64_t i = 0; i < a.l; ++i) {
          const T pij = p[static_cast<size_t>(i * a.s + j)];
          const T dsij = ds[static_cast<size_t>(i * a.s + j)];
          const T* doi = dout.data() + (hd * a.l + i) * a.ev;
          const T* qi = a.q.data() + (hd * a.l + i) * a.e;
          if (pij != 0) {
            for (int64_t c = 0; c < a.ev; ++c) dvj[c] += pij * doi[c];
          }
          if (dsij != 0) {
            const T f = a.scale * dsij;
            for (int64_t c = 0; c < a.e; ++c) dkj[c] += f * qi[c];
          }
        }
      }
    });
  }
}

// Sums a dense [B, H, L, S] gradient down to the bias's (broadcast) shape and writes it.
template <typename T>
void WriteBiasGrad(const std::vector<T>& full, const Attention<T>& a, const Tensor& bias,
                   const Tensor& out, ArgReader& r) {
  if (!out.defined()) return;
  // Positions in a dense copy of the bias, broadcast over [B, H, L, S].
  const Tensor dense = Tensor::Wrap(nullptr, bias.dtype(), bias.sizes());
  const Tensor expanded = Broadcast(dense, {a.b, a.h, a.l, a.s}, r);
  if (!r.ok()) return;
  std::vector<double> acc(static_cast<size_t>(bias.numel()), 0.0);
  size_t i = 0;
  ForEachIndexPair(expanded.sizes(), expanded.strides(), expanded.strides(),
                   [&](int64_t pos, int64_t) { acc[static_cast<size_t>(pos)] += full[i++]; });
  FromDense<double>(acc.data(), out);
}

template <typename T>
absl::Status ForwardOp(ArgReader& r, const ExternCall& call, const ops::AttentionLayout& at) {
  const Tensor q = r.GetTensor(at.query, "query");
  const Tensor k = r.GetTensor(at.key, "key");
  const Tensor v = r.GetTensor(at.value, "value");
  const Tensor bias = r.GetOptTensor(at.attn_bias, "attn_bias");
  const bool compute_lse = r.GetBool(at.compute_log_sumexp, "compute_log_sumexp", false);
  const double dropout_p = r.GetDouble(at.dropout_p, "dropout_p", 0.0);
  const bool causal = r.GetBool(at.is_causal, "is_causal", false);
  if (!r.ok()) return r.status();
  Attention<T> a;
  const ExternContext& ctx = *call.context;
  if (!Load(r, q, k, v, bias, causal, dropout_p, ctx.rng_seed, ctx.rng_offset, a)) {
    return r.status();
  }
  r.CheckOutput(0, {a.b, a.h, a.l, a.ev}, q.dtype());
  if (!r.ok()) return r.status();
  std::vector<T> out, lse;
  Forward(a, *call.context, out, lse);
  FromDense<T>(out.data(), r.Output(0));
  if (compute_lse) WriteLse(lse, a, r.Output(at.result_logsumexp));
  WriteInt(r.Output(at.result_philox_seed), static_cast<int64_t>(call.context->rng_seed));
  WriteInt(r.Output(at.result_philox_offset), static_cast<int64_t>(call.context->rng_offset));
  if (at.result_max_q >= 0) WriteInt(r.Output(at.result_max_q), a.l);
  if (at.result_max_k >= 0) WriteInt(r.Output(at.result_max_k), a.s);
  return absl::OkStatus();
}

template <typename T>
absl::Status BackwardOp(ArgReader& r, const ExternCall& call, const ops::Op& op) {
  const ops::AttentionLayout& at = *op.attention;
  const Tensor dout = r.GetTensor(at.grad_out, op.schema.params[at.grad_out].name);
  const Tensor q = r.GetTensor(at.query, "query");
  const Tensor k = r.GetTensor(at.key, "key");
  const Tensor v = r.GetTensor(at.value, "value");
  const Tensor bias = r.GetOptTensor(at.attn_bias, "attn_bias");
  const Tensor out = r.GetTensor(at.out, "out");
  const Tensor lse_t = r.GetTensor(at.logsumexp, "logsumexp");
  const double dropout_p = r.GetDouble(at.dropout_p, "dropout_p", 0.0);
  const bool causal = r.GetBool(at.is_causal, "is_causal", false);
  // Without a grad_input_mask (the cuDNN form) there is no bias gradient to compute.
  const bool has_mask = at.grad_input_mask >= 0;
  const std::vector<bool> mask =
      has_mask ? r.GetBools(at.grad_input_mask, "grad_input_mask", {true, true, true, false})
               : std::vector<bool>{true, true, true, false};
  if (!r.ok()) return r.status();
  if (!r.Check(mask.size() == 4, "grad_input_mask must have 4 entries")) return r.status();
  // Without dropout the kernels leave the seed and offset unread (and unwritten).
  const Tensor seed = r.GetOptTensor(at.philox_seed, "philox_seed");
  const Tensor stream = r.GetOptTensor(at.philox_offset, "philox_offset");
  if (!r.ok()) return r.status();
  if (dropout_p != 0 &&
      !r.Check(seed.defined() && stream.defined() && seed.numel() == 1 && stream.numel() == 1,
               "philox_seed and philox_offset must hold one value each")) {
    return r.status();
  }
  Attention<T> a;
  if (!Load(r, q, k, v, bias, causal, dropout_p,
            dropout_p != 0 ? static_cast<uint64_t>(seed.ItemInt()) : 0,
            dropout_p != 0 ? static_cast<uint64_t>(stream.ItemInt()) : 0, a)) {
    return r.status();
  }
  r.Check(out.sizes() == std::vector<int64_t>{a.b, a.h, a.l, a.ev}, "out ", out.DebugString(),
          " does not match the query and value");
  const Tensor dout_full = Broadcast(dout, out.sizes(), r);
  std::vector<T> lse;
  if (!r.ok() || !ReadLse(r, lse_t, a, lse)) return r.status();
  r.CheckOutput(0, q.sizes(), q.dtype());
  r.CheckOutput(1, k.sizes(), k.dtype());
  r.CheckOutput(2, v.sizes(), v.dtype());
  if (!r.ok()) return r.status();
  const bool want_bias = has_mask && mask[3] && bias.defined() && r.Output(3).defined();
  Grads<T> g;
  Backward(a, ToDense<T>(dout_full), ToDense<T>(out), lse, want_bias, *call.context, g);
  FromDense<T>(g.dq.data(), r.Output(0));
  FromDense<T>(g.dk.data(), r.Output(1));
  FromDense<T>(g.dv.data(), r.Output(2));
  if (want_bias) WriteBiasGrad(g.dbias, a, bias, r.Output(3), r);
  return r.status();
}

}  // namespace

absl::Status RunAttention(const ExternCall& call) {
  const ops::Op* op = ops::FindOp(call.op);
  if (op == nullptr || !op->attention.has_value()) {
    return absl::InvalidArgumentError(absl::StrCat(call.op, " is no attention op"));
  }
  ArgReader r(call);
  const Tensor q = r.GetTensor(op->attention->query, "query");
  if (!r.ok()) return r.status();
  if (!IsFloating(q.dtype())) {
    return absl::UnimplementedError(absl::StrCat(call.op, ": dtype ", DTypeName(q.dtype())));
  }
  const bool backward = op->attention->backward;
  if (q.dtype() == v1::DTYPE_FLOAT64) {
    return backward ? BackwardOp<double>(r, call, *op) : ForwardOp<double>(r, call, *op->attention);
  }
  return backward ? BackwardOp<float>(r, call, *op) : ForwardOp<float>(r, call, *op->attention);
}

}  // namespace kiln::runtime
