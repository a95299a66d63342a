// Scaled-dot-product attention as the memory-efficient and cuDNN kernels define it,
// computed naively: scores = scale * q k^T + bias (causal masks are aligned top-left:
// query i sees keys j <= i), P = softmax(scores), out = dropout(P) v. The backwards follow
// the kernels' contract: they rebuild P from the saved logsumexp and use the saved output,
// so they agree with a faithful kernel even on inputs that are not a forward's results.
// Dropout draws from the op's Philox stream over the [B, H, L, S] probabilities (see
// philox.h); the forward returns the seed and stream as its philox_seed/philox_offset.

#include <cmath>
#include <limits>

#include "compiler/interp/op_registry.h"
#include "compiler/interp/philox.h"
#include "proto/ops/registry.h"

namespace kiln::interp {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

struct Attention {
  int64_t b = 0, h = 0, l = 0, s = 0, e = 0, ev = 0;
  double scale = 1;
  bool causal = false;
  double dropout_p = 0;
  uint64_t seed = 0;
  uint64_t stream = 0;
  std::vector<double> q, k, v, bias;  // row-major [B, H, *, *]; bias empty or [B, H, L, S]

  int64_t bh() const { return b * h; }
  double Keep(int64_t bh_i, int64_t i, int64_t j) const {
    if (dropout_p == 0) return 1.0;
    const uint64_t index = static_cast<uint64_t>((bh_i * l + i) * s + j);
    return DropoutKeeps(seed, stream, index, dropout_p) ? DropoutScale(dropout_p) : 0.0;
  }
  // Scores of query row i against every key (-inf where masked).
  void Scores(int64_t bh_i, int64_t i, std::vector<double>& out) const {
    out.resize(static_cast<size_t>(s));
    const double* qi = q.data() + (bh_i * l + i) * e;
    for (int64_t j = 0; j < s; ++j) {
      if (causal && j > i) {
        out[static_cast<size_t>(j)] = -kInf;
        continue;
      }
      const double* kj = k.data() + (bh_i * s + j) * e;
      double dot = 0;
      for (int64_t c = 0; c < e; ++c) dot += qi[c] * kj[c];
      double score = scale * dot;
      if (!bias.empty()) score += bias[static_cast<size_t>((bh_i * l + i) * s + j)];
      out[static_cast<size_t>(j)] = score;
    }
  }
};

Attention Load(const OpCall& c, const Tensor& q, const Tensor& k, const Tensor& v,
               const Tensor& bias, bool causal, double dropout_p) {
  Check(q.dim() == 4 && k.dim() == 4 && v.dim() == 4,
        "attention expects 4-d query, key and value [B, H, L, E]");
  Check(q.dtype() == k.dtype() && q.dtype() == v.dtype(), "attention: q, k, v dtypes differ");
  Attention a;
  a.b = q.size(0);
  a.h = q.size(1);
  a.l = q.size(2);
  a.e = q.size(3);
  a.s = k.size(2);
  a.ev = v.size(3);
  Check(k.size(0) == a.b && v.size(0) == a.b && k.size(1) == a.h && v.size(1) == a.h &&
            k.size(3) == a.e && v.size(2) == a.s,
        "attention: shapes ", q.DebugString(), ", ", k.DebugString(), ", ", v.DebugString(),
        " do not match");
  Check(dropout_p >= 0 && dropout_p <= 1, "attention: dropout_p must be in [0, 1]");
  a.scale = c.GetOptDouble(-1, "scale").value_or(1.0 / std::sqrt(static_cast<double>(a.e)));
  a.causal = causal;
  a.dropout_p = dropout_p;
  a.q = q.ToDoubles();
  a.k = k.ToDoubles();
  a.v = v.ToDoubles();
  if (bias.defined()) a.bias = ExpandTo(bias, {a.b, a.h, a.l, a.s}).ToDoubles();
  return a;
}

struct Forward {
  std::vector<double> out;  // [B, H, L, Ev]
  std::vector<double> lse;  // [B, H, L]
};

Forward RunForward(const Attention& a) {
  Forward f;
  f.out.assign(static_cast<size_t>(a.bh() * a.l * a.ev), 0.0);
  f.lse.assign(static_cast<size_t>(a.bh() * a.l), -kInf);
  std::vector<double> sc;
  for (int64_t bh = 0; bh < a.bh(); ++bh) {
    for (int64_t i = 0; i < a.l; ++i) {
      a.Scores(bh, i, sc);
      double m = -kInf;
      for (double x : sc) m = std::max(m, x);
      if (m == -kInf) continue;  // a fully masked row: output 0, logsumexp -inf
      double sum = 0;
      for (double x : sc) sum += std::exp(x - m);
      const double lse = m + std::log(sum);
      f.lse[static_cast<size_t>(bh * a.l + i)] = lse;
      double* oi = f.out.data() + (bh * a.l + i) * a.ev;
      for (int64_t j = 0; j < a.s; ++j) {
        const double p = std::exp(sc[static_cast<size_t>(j)] - lse) * a.Keep(bh, i, j);
        if (p == 0) continue;
        const double* vj = a.v.data() + (bh * a.s + j) * a.ev;
        for (int64_t c = 0; c < a.ev; ++c) oi[c] += p * vj[c];
      }
    }
  }
  return f;
}

struct Backward {
  std::vector<double> dq, dk, dv, dbias;  // dbias is [B, H, L, S]
};

// `lse` holds [B, H, L] values, `out` and `dout` [B, H, L, Ev].
Backward RunBackward(const Attention& a, const std::vector<double>& dout,
                     const std::vector<double>& out, const std::vector<double>& lse) {
  Backward r;
  r.dq.assign(a.q.size(), 0.0);
  r.dk.assign(a.k.size(), 0.0);
  r.dv.assign(a.v.size(), 0.0);
  r.dbias.assign(static_cast<size_t>(a.bh() * a.l * a.s), 0.0);
  std::vector<double> sc;
  for (int64_t bh = 0; bh < a.bh(); ++bh) {
    for (int64_t i = 0; i < a.l; ++i) {
      a.Scores(bh, i, sc);
      const double li = lse[static_cast<size_t>(bh * a.l + i)];
      const double* doi = dout.data() + (bh * a.l + i) * a.ev;
      const double* oi = out.data() + (bh * a.l + i) * a.ev;
      double d = 0;
      for (int64_t c = 0; c < a.ev; ++c) d += doi[c] * oi[c];
      const double* qi = a.q.data() + (bh * a.l + i) * a.e;
      double* dqi = r.dq.data() + (bh * a.l + i) * a.e;
      for (int64_t j = 0; j < a.s; ++j) {
        const double x = sc[static_cast<size_t>(j)];
        if (x == -kInf || li == -kInf) continue;
        const double p = std::exp(x - li);
        const double z = a.Keep(bh, i, j);
        const double* vj = a.v.data() + (bh * a.s + j) * a.ev;
        double* dvj = r.dv.data() + (bh * a.s + j) * a.ev;
        double dpd = 0;
        for (int64_t c = 0; c < a.ev; ++c) {
          dpd += doi[c] * vj[c];
          dvj[c] += p * z * doi[c];
        }
        const double ds = p * (dpd * z - d);
        r.dbias[static_cast<size_t>((bh * a.l + i) * a.s + j)] = ds;
        const double* kj = a.k.data() + (bh * a.s + j) * a.e;
        double* dkj = r.dk.data() + (bh * a.s + j) * a.e;
        for (int64_t c = 0; c < a.e; ++c) {
          dqi[c] += a.scale * ds * kj[c];
          dkj[c] += a.scale * ds * qi[c];
        }
      }
    }
  }
  return r;
}

// Sums a [B, H, L, S] gradient down to the bias's (broadcast) shape.
Tensor ReduceToBias(const std::vector<double>& full, const Attention& a, const Tensor& bias) {
  Tensor out = Tensor::Zeros(bias.sizes(), bias.dtype());
  const std::vector<int64_t> slots = ExpandTo(out, {a.b, a.h, a.l, a.s}).ElementIndices();
  std::vector<double> acc(static_cast<size_t>(out.numel()), 0.0);
  for (size_t i = 0; i < slots.size(); ++i) acc[static_cast<size_t>(slots[i])] += full[i];
  return MakeTensor(bias.sizes(), bias.dtype(), acc);
}

Tensor SeedTensor(uint64_t v) {
  return Tensor::FromInts({}, v1::DTYPE_INT64, {static_cast<int64_t>(v)});
}

// The logsumexp of [B, H, L] as a float32 tensor of `sizes`. Padded entries are +inf, as the
// efficient-attention kernel writes them (so that its backward needs no bounds checks).
Tensor LseTensor(const std::vector<double>& lse, const Attention& a, std::vector<int64_t> sizes,
                 int64_t padded_l) {
  std::vector<double> v(static_cast<size_t>(a.bh() * padded_l), kInf);
  // Without compute_log_sumexp (inference) the rows are empty: nothing to write.
  const int64_t rows = std::min(a.l, padded_l);
  for (int64_t bh = 0; bh < a.bh(); ++bh) {
    for (int64_t i = 0; i < rows; ++i) {
      v[static_cast<size_t>(bh * padded_l + i)] = lse[static_cast<size_t>(bh * a.l + i)];
    }
  }
  return MakeTensor(sizes, v1::DTYPE_FLOAT32, v);
}

// Reads the first L entries of each [B, H] row of a saved logsumexp.
std::vector<double> ReadLse(const Tensor& lse, const Attention& a) {
  Check(lse.numel() >= a.bh() * a.l && lse.numel() % std::max<int64_t>(a.bh(), 1) == 0,
        "attention backward: logsumexp ", lse.DebugString(), " is too small");
  const std::vector<double> all = lse.ToDoubles();
  const int64_t row = a.bh() == 0 ? 0 : lse.numel() / a.bh();
  std::vector<double> out(static_cast<size_t>(a.bh() * a.l));
  for (int64_t bh = 0; bh < a.bh(); ++bh) {
    for (int64_t i = 0; i < a.l; ++i) {
      out[static_cast<size_t>(bh * a.l + i)] = all[static_cast<size_t>(bh * row + i)];
    }
  }
  return out;
}

// Where the op keeps its arguments and results (the registry reads them from its schema).
const ops::AttentionLayout& LayoutOf(const OpCall& c) {
  return *ops::FindOp(c.target())->attention;
}

// A forward op's inputs, drawing from the op's own Philox stream.
Attention LoadForward(const OpCall& c, const ops::AttentionLayout& at) {
  Attention a = Load(c, c.GetTensor(at.query, "query"), c.GetTensor(at.key, "key"),
                     c.GetTensor(at.value, "value"), c.GetOptTensor(at.attn_bias, "attn_bias"),
                     c.GetBool(at.is_causal, "is_causal", false),
                     c.GetDouble(at.dropout_p, "dropout_p", 0.0));
  a.seed = c.options().rng_seed;
  a.stream = c.context().rng_stream;
  return a;
}

// A backward op's inputs, replaying the forward's stream from philox_seed/philox_offset.
Attention LoadBackward(const OpCall& c, const ops::AttentionLayout& at) {
  Attention a = Load(c, c.GetTensor(at.query, "query"), c.GetTensor(at.key, "key"),
                     c.GetTensor(at.value, "value"), c.GetOptTensor(at.attn_bias, "attn_bias"),
                     c.GetBool(at.is_causal, "is_causal", false),
                     c.GetDouble(at.dropout_p, "dropout_p", 0.0));
  a.seed = static_cast<uint64_t>(c.GetTensor(at.philox_seed, "philox_seed").ItemInt());
  a.stream = static_cast<uint64_t>(c.GetTensor(at.philox_offset, "philox_offset").ItemInt());
  return a;
}

std::vector<Value> EfficientForward(const OpCall& c) {
  const ops::AttentionLayout& at = LayoutOf(c);
  const Tensor q = c.GetTensor(at.query, "query");
  const bool compute_lse = c.GetBool(at.compute_log_sumexp, "compute_log_sumexp", false);
  Attention a = LoadForward(c, at);
  const Forward f = RunForward(a);
  // The kernel pads logsumexp rows to a multiple of 32.
  const int64_t padded = compute_lse ? (a.l + 31) / 32 * 32 : 0;
  return {MakeTensor({a.b, a.h, a.l, a.ev}, q.dtype(), f.out),
          LseTensor(f.lse, a, {a.b, a.h, padded}, padded), SeedTensor(a.seed),
          SeedTensor(a.stream)};
}

std::vector<Value> EfficientBackward(const OpCall& c) {
  const ops::AttentionLayout& at = LayoutOf(c);
  const Tensor q = c.GetTensor(at.query, "query");
  const Tensor k = c.GetTensor(at.key, "key");
  const Tensor v = c.GetTensor(at.value, "value");
  const Tensor bias = c.GetOptTensor(at.attn_bias, "attn_bias");
  Attention a = LoadBackward(c, at);
  const std::vector<bool> mask =
      c.GetBools(at.grad_input_mask, "grad_input_mask", {true, true, true, false});
  Check(mask.size() == 4, "grad_input_mask must have 4 entries");
  const Tensor dout = c.GetTensor(at.grad_out, "grad_out_");
  const Tensor out = c.GetTensor(at.out, "out");
  const Backward r = RunBackward(a, ExpandTo(dout, out.sizes()).ToDoubles(), out.ToDoubles(),
                                 ReadLse(c.GetTensor(at.logsumexp, "logsumexp"), a));
  std::vector<Value> result = {MakeTensor(q.sizes(), q.dtype(), r.dq),
                               MakeTensor(k.sizes(), k.dtype(), r.dk),
                               MakeTensor(v.sizes(), v.dtype(), r.dv)};
  if (mask[3] && bias.defined()) {
    result.emplace_back(ReduceToBias(r.dbias, a, bias));
  } else {
    result.emplace_back(None{});
  }
  return result;
}

std::vector<Value> CudnnForward(const OpCall& c) {
  const ops::AttentionLayout& at = LayoutOf(c);
  const Tensor q = c.GetTensor(at.query, "query");
  const bool compute_lse = c.GetBool(at.compute_log_sumexp, "compute_log_sumexp", false);
  Attention a = LoadForward(c, at);
  const Forward f = RunForward(a);
  Value lse = None{};
  if (compute_lse) lse = LseTensor(f.lse, a, {a.b, a.h, a.l, 1}, a.l);
  return {MakeTensor({a.b, a.h, a.l, a.ev}, q.dtype(), f.out),
          lse,
          None{},
          None{},
          a.l,
          a.s,
          SeedTensor(a.seed),
          SeedTensor(a.stream),
          None{}};
}

std::vector<Value> CudnnBackward(const OpCall& c) {
  const ops::AttentionLayout& at = LayoutOf(c);
  const Tensor q = c.GetTensor(at.query, "query");
  const Tensor k = c.GetTensor(at.key, "key");
  const Tensor v = c.GetTensor(at.value, "value");
  Attention a = LoadBackward(c, at);
  const Tensor dout = c.GetTensor(at.grad_out, "grad_out");
  const Tensor out = c.GetTensor(at.out, "out");
  const Backward r = RunBackward(a, ExpandTo(dout, out.sizes()).ToDoubles(), out.ToDoubles(),
                                 ReadLse(c.GetTensor(at.logsumexp, "logsumexp"), a));
  return {MakeTensor(q.sizes(), q.dtype(), r.dq), MakeTensor(k.sizes(), k.dtype(), r.dk),
          MakeTensor(v.sizes(), v.dtype(), r.dv)};
}

}  // namespace

void RegisterAttentionOps(OpRegistry& r) {
  r.Add("aten._scaled_dot_product_efficient_attention.default", EfficientForward);
  r.Add("aten._scaled_dot_product_efficient_attention_backward.default", EfficientBackward);
  r.Add("aten._scaled_dot_product_cudnn_attention.default", CudnnForward);
  r.Add("aten._scaled_dot_product_cudnn_attention_backward.default", CudnnBackward);
}

}  // namespace kiln::interp
