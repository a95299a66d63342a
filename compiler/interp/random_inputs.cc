#include "compiler/interp/random_inputs.h"

#include <cmath>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "proto/base/int_expr.h"

namespace kiln::interp {
namespace {

using SymbolMap = std::map<std::string, int64_t, std::less<>>;

// splitmix64: a small, fully specified generator, so inputs are the same everywhere.
class Random {
 public:
  explicit Random(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double Uniform() { return std::ldexp(static_cast<double>(Next() >> 11), -53); }
  int64_t Int(int64_t low, int64_t high) {
    if (high <= low) return low;
    return low + static_cast<int64_t>(Next() % static_cast<uint64_t>(high - low));
  }

 private:
  uint64_t state_;
};

// Ops through which an integer input keeps its values (views and copies).
bool PassesValues(absl::string_view target) {
  static const std::unordered_set<std::string>* ops = new std::unordered_set<std::string>{
      "aten.view.default",       "aten._unsafe_view.default", "aten.reshape.default",
      "aten.t.default",          "aten.transpose.int",        "aten.permute.default",
      "aten.expand.default",     "aten.unsqueeze.default",    "aten.squeeze.dim",
      "aten.squeeze.dims",       "aten.squeeze.default",      "aten.slice.Tensor",
      "aten.select.int",         "aten.alias.default",        "aten.detach.default",
      "aten.clone.default",      "aten._to_copy.default",     "aten.lift_fresh_copy.default",
      "aten.contiguous.default",
  };
  return ops->contains(std::string(target));
}

// Ops whose result is their first argument's elements in the same order and shape.
bool KeepsElements(absl::string_view target) {
  static const std::unordered_set<std::string>* ops = new std::unordered_set<std::string>{
      "aten.alias.default",    "aten.detach.default",          "aten.clone.default",
      "aten._to_copy.default", "aten.lift_fresh_copy.default", "aten.contiguous.default",
  };
  return ops->contains(std::string(target));
}

// The window of a max_pool2d whose indices an input holds, and the pooled plane's size: an
// index saved by the forward pool always lies in its own output's window, and the backward
// may rely on it (PyTorch's CUDA kernel, like Kiln's lowering, gathers from the windows that
// cover each input element, so an index outside its window is never found).
struct PoolWindow {
  int64_t kh = 1, kw = 1, sh = 1, sw = 1, ph = 0, pw = 0, dh = 1, dw = 1;
  int64_t height = 0, width = 0;

  // An index inside the window of output (i, j) and inside the plane; draws uniformly among
  // the window's positions inside it.
  int64_t Draw(int64_t i, int64_t j, Random& rng) const {
    std::vector<int64_t> inside;
    for (int64_t a = 0; a < kh; ++a) {
      const int64_t h = i * sh - ph + a * dh;
      if (h < 0 || h >= height) continue;
      for (int64_t b = 0; b < kw; ++b) {
        const int64_t w = j * sw - pw + b * dw;
        if (w >= 0 && w < width) inside.push_back(h * width + w);
      }
    }
    if (inside.empty()) return 0;
    return inside[static_cast<size_t>(rng.Int(0, static_cast<int64_t>(inside.size())))];
  }
};

class RangeInference {
 public:
  RangeInference(const v1::Graph& graph, const SymbolMap& symbols) : symbols_(symbols) {
    for (const v1::GraphInput& in : graph.inputs()) {
      origin_[in.name()] = in.name();
      meta_[in.name()] = {&in.meta()};
      inputs_.insert(in.name());
    }
    for (const v1::Node& node : graph.nodes()) {
      nodes_[node.name()] = &node;
      std::vector<const v1::ValueMeta*> metas;
      for (const v1::ValueMeta& m : node.outputs()) metas.push_back(&m);
      meta_[node.name()] = metas;
      if (PassesValues(node.target()) && node.args_size() > 0 && node.args(0).has_ref()) {
        auto it = origin_.find(node.args(0).ref().node());
        if (it != origin_.end()) origin_[node.name()] = it->second;
      }
    }
    for (const v1::Node& node : graph.nodes()) Infer(node);
  }

  std::optional<std::pair<int64_t, int64_t>> RangeOf(const std::string& input) const {
    auto it = ranges_.find(input);
    if (it == ranges_.end()) return std::nullopt;
    return it->second;
  }

  const PoolWindow* PoolWindowOf(const std::string& input) const {
    auto it = windows_.find(input);
    return it == windows_.end() ? nullptr : &it->second;
  }

  // The values a floating input is drawn from: [-scale, scale), or [scale / 2, 3 scale / 2)
  // where the graph needs it positive.
  std::pair<double, double> FloatRangeOf(const std::string& input) const {
    double scale = 1;
    if (auto it = scales_.find(input); it != scales_.end()) scale = it->second;
    if (positive_.contains(input)) return {scale / 2, scale * 3 / 2};
    return {-scale, scale};
  }

 private:
  // Size `dim` (negative counts from the end) of the tensor an argument refers to; a 0-d
  // tensor has size 1 along its dim 0 (or -1), as indexing ops see it.
  std::optional<int64_t> SizeOf(const v1::Argument& a, int64_t dim) const {
    const v1::TensorMeta* meta = TensorOf(a);
    if (meta == nullptr) return std::nullopt;
    const v1::TensorMeta& t = *meta;
    const int64_t rank = t.sizes_size();
    if (rank == 0 && (dim == 0 || dim == -1)) return 1;
    if (dim < 0) dim += rank;
    if (dim < 0 || dim >= rank) return std::nullopt;
    const v1::SymInt& s = t.sizes(static_cast<int>(dim));
    if (s.kind_case() == v1::SymInt::kValue) return s.value();
    absl::StatusOr<int64_t> v = EvaluateIntExpr(s.expr(), symbols_);
    if (!v.ok()) return std::nullopt;
    return *v;
  }

  std::optional<int64_t> IntArg(const v1::Node& node, int pos) const {
    if (pos >= node.args_size()) return std::nullopt;
    const v1::Argument& a = node.args(pos);
    if (a.kind_case() == v1::Argument::kIntValue) return a.int_value();
    if (a.kind_case() == v1::Argument::kSymbolic) {
      absl::StatusOr<int64_t> v = EvaluateIntExpr(a.symbolic().expr(), symbols_);
      if (v.ok()) return *v;
    }
    return std::nullopt;
  }

  void Limit(const v1::Node& node, int index_pos, std::optional<int64_t> high) {
    if (index_pos < node.args_size()) Limit(node.args(index_pos), high);
  }
  void Limit(const v1::Argument& a, std::optional<int64_t> high) {
    if (!high.has_value() || !a.has_ref()) return;
    auto it = origin_.find(a.ref().node());
    if (it == origin_.end()) return;
    auto [r, inserted] = ranges_.emplace(it->second, std::make_pair<int64_t, int64_t>(0, 0));
    r->second.second = inserted ? *high : std::min(r->second.second, *high);
  }

  std::optional<std::vector<int64_t>> IntsArg(const v1::Node& node, int pos) const {
    if (pos >= node.args_size()) return std::nullopt;
    const v1::Argument& a = node.args(pos);
    if (a.kind_case() == v1::Argument::kIntValue) return std::vector<int64_t>{a.int_value()};
    if (a.kind_case() != v1::Argument::kList) return std::nullopt;
    std::vector<int64_t> out;
    for (const v1::Argument& item : a.list().items()) {
      if (item.kind_case() != v1::Argument::kIntValue) return std::nullopt;
      out.push_back(item.int_value());
    }
    return out;
  }

  // The graph input whose elements argument `pos` of `node` is, in the same order and shape.
  std::optional<std::string> InputOf(const v1::Node& node, int pos) const {
    if (pos >= node.args_size() || !node.args(pos).has_ref()) return std::nullopt;
    std::string name = node.args(pos).ref().node();
    while (!inputs_.contains(name)) {
      auto it = nodes_.find(name);
      if (it == nodes_.end() || !KeepsElements(it->second->target()) ||
          it->second->args_size() == 0 || !it->second->args(0).has_ref()) {
        return std::nullopt;
      }
      name = it->second->args(0).ref().node();
    }
    return name;
  }

  // max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding,
  // dilation, ceil_mode, indices).
  void InferPoolWindow(const v1::Node& node) {
    const std::optional<std::string> input = InputOf(node, 7);
    const auto h = SizeOf(node.args(1), -2), w = SizeOf(node.args(1), -1);
    if (!input.has_value() || !h || !w) return;
    auto pair = [&](int pos, std::vector<int64_t> dflt) -> std::optional<std::vector<int64_t>> {
      std::optional<std::vector<int64_t>> v = IntsArg(node, pos);
      if (!v.has_value() && pos < node.args_size()) return std::nullopt;
      if (!v.has_value() || v->empty()) v = std::move(dflt);
      if (v->size() == 1) v->push_back((*v)[0]);
      if (v->size() != 2) return std::nullopt;
      return v;
    };
    const auto k = pair(2, {});
    if (!k.has_value()) return;
    const auto st = pair(3, *k), pad = pair(4, {0}), dil = pair(5, {1});
    if (!st || !pad || !dil) return;
    windows_[*input] = PoolWindow{(*k)[0],   (*k)[1],   (*st)[0],  (*st)[1], (*pad)[0],
                                  (*pad)[1], (*dil)[0], (*dil)[1], *h,       *w};
  }

  // The graph input whose values argument `pos` of `node` (or item `item` of that list) are,
  // through views and copies.
  std::optional<std::string> OriginOf(const v1::Node& node, int pos, int item = -1) const {
    if (pos >= node.args_size()) return std::nullopt;
    const v1::Argument* a = &node.args(pos);
    if (item >= 0) {
      if (!a->has_list() || item >= a->list().items_size()) return std::nullopt;
      a = &a->list().items(item);
    }
    if (!a->has_ref()) return std::nullopt;
    auto it = origin_.find(a->ref().node());
    if (it == origin_.end()) return std::nullopt;
    return it->second;
  }

  // A matmul's or convolution's weight operand: drawn with PyTorch's default initialization
  // bound 1 / sqrt(fan_in) (nn.Linear, nn.Conv), so each product keeps its inputs' magnitude.
  // With [-1, 1) weights every layer multiplies magnitudes by about sqrt(fan_in): a deep
  // graph's values overflow float32 where no trained or freshly initialized model's do.
  void ScaleWeight(const v1::Node& node, int pos, std::optional<int64_t> fan_in) {
    const std::optional<std::string> input = OriginOf(node, pos);
    if (!input.has_value() || !fan_in.has_value() || *fan_in <= 0) return;
    const double scale = 1 / std::sqrt(static_cast<double>(*fan_in));
    auto [it, inserted] = scales_.emplace(*input, scale);
    if (!inserted) it->second = std::min(it->second, scale);
  }

  // A convolution weight's fan-in: every size but the first (output channels).
  std::optional<int64_t> FanIn(const v1::Argument& weight) const {
    const std::optional<int64_t> rank = RankOf(weight);
    if (!rank.has_value()) return std::nullopt;
    int64_t fan_in = 1;
    for (int64_t d = 1; d < *rank; ++d) {
      const std::optional<int64_t> size = SizeOf(weight, d);
      if (!size.has_value()) return std::nullopt;
      fan_in *= *size;
    }
    return fan_in;
  }

  std::optional<int64_t> RankOf(const v1::Argument& a) const {
    const v1::TensorMeta* meta = TensorOf(a);
    if (meta == nullptr) return std::nullopt;
    return meta->sizes_size();
  }

  // The metadata of the tensor an argument refers to; null for anything else.
  const v1::TensorMeta* TensorOf(const v1::Argument& a) const {
    if (!a.has_ref()) return nullptr;
    auto it = meta_.find(a.ref().node());
    if (it == meta_.end() || it->second.empty()) return nullptr;
    const size_t out = a.ref().has_output() ? static_cast<size_t>(a.ref().output()) : 0;
    if (out >= it->second.size() || !it->second[out]->has_tensor()) return nullptr;
    return &it->second[out]->tensor();
  }

  void MarkPositive(const v1::Node& node, int pos, int item = -1) {
    if (pos >= node.args_size()) return;
    const v1::Argument& a = node.args(pos);
    if (item < 0) return MarkPositive(a);
    if (a.has_list() && item < a.list().items_size()) MarkPositive(a.list().items(item));
  }

  // Marks the input a positive value comes from, following ops that keep their first
  // argument's sign (an optimizer's `exp_avg_sq * beta2 + (1 - beta2) * g * g` under a square
  // root needs exp_avg_sq positive), and both terms of a sum of tensors (an RMS norm's
  // `rsqrt(mean(x * x) + eps)` with eps an input needs eps positive).
  void MarkPositive(const v1::Argument& value, int depth = 0) {
    const v1::Argument* a = &value;
    for (; depth < 64 && a->has_ref(); ++depth) {
      if (auto it = origin_.find(a->ref().node()); it != origin_.end()) {
        positive_.insert(it->second);
        return;
      }
      auto n = nodes_.find(a->ref().node());
      if (n == nodes_.end()) return;
      if (n->second->target() == "aten.add.Tensor" && n->second->args_size() >= 2 &&
          n->second->args(1).has_ref()) {
        MarkPositive(n->second->args(1), depth + 1);
        a = &n->second->args(0);
        continue;
      }
      if (!KeepsSign(*n->second)) return;
      const v1::Argument& self = n->second->args(0);
      if (!self.has_list()) {
        a = &self;
        continue;
      }
      const int out = a->ref().has_output() ? static_cast<int>(a->ref().output()) : 0;
      if (out >= self.list().items_size()) return;
      a = &self.list().items(out);
    }
  }

  // Whether `node` (elementwise, or item by item over lists) is positive wherever its first
  // argument is: scaling or shifting by a positive scalar, or adding a positive multiple of
  // a square.
  static bool KeepsSign(const v1::Node& node) {
    static const std::unordered_set<std::string>* by_scalar = new std::unordered_set<std::string>{
        "aten.mul.Tensor",          "aten.div.Tensor",          "aten.add.Tensor",
        "aten._foreach_mul.Scalar", "aten._foreach_div.Scalar", "aten._foreach_add.Scalar",
    };
    auto positive = [&](int pos) {
      if (pos >= node.args_size()) return false;
      const v1::Argument& a = node.args(pos);
      return (a.has_float_value() && a.float_value() > 0) ||
             (a.has_int_value() && a.int_value() > 0);
    };
    const std::string& t = node.target();
    if (node.args_size() == 0) return false;
    if (by_scalar->contains(t)) return positive(1);
    if (t == "prims.convert_element_type.default" || t == "aten._to_copy.default") return true;
    if (t == "aten.addcmul.default" || t == "aten._foreach_addcmul.Scalar") {
      if (node.args_size() < 3) return false;
      const bool square = node.args(1).SerializeAsString() == node.args(2).SerializeAsString();
      return square && (node.args_size() < 4 || positive(3));
    }
    return false;
  }

  // Inputs whose values must be positive for the graph to mean anything: variances and
  // inverse standard deviations saved by normalizations, running variances, what a square
  // root or logarithm takes, and exponents of a power of a scalar (an optimizer's step count:
  // 1 - beta^step under a square root). Drawn from both signs they make NaN where no model
  // has any, and NaN compares equal to NaN: the check would check nothing there.
  void InferPositive(const v1::Node& node) {
    static const std::unordered_map<std::string, std::vector<int>>* positive_args =
        new std::unordered_map<std::string, std::vector<int>>{
            {"aten.sqrt.default", {0}},
            {"aten.rsqrt.default", {0}},
            {"aten.log.default", {0}},
            {"aten.log2.default", {0}},
            {"aten.log10.default", {0}},
            {"aten.native_layer_norm_backward.default", {4}},
            {"aten.native_batch_norm.default", {4}},
            {"aten._native_batch_norm_legit.default", {4}},
            {"aten._native_batch_norm_legit_functional.default", {4}},
            {"aten._native_batch_norm_legit_no_training.default", {4}},
            {"aten.cudnn_batch_norm.default", {4}},
            {"aten.native_batch_norm_backward.default", {4, 6}},
            {"aten.cudnn_batch_norm_backward.default", {4, 6}},
            {"aten.pow.Scalar", {1}},
        };
    static const std::unordered_map<std::string, int>* positive_lists =
        new std::unordered_map<std::string, int>{
            {"aten._foreach_sqrt.default", 0},
            {"aten._foreach_log.default", 0},
            {"aten._foreach_pow.ScalarAndTensor", 1},
        };
    const std::string& t = node.target();
    if (auto it = positive_args->find(t); it != positive_args->end()) {
      for (int pos : it->second) MarkPositive(node, pos);
    }
    if (auto it = positive_lists->find(t); it != positive_lists->end() &&
                                           it->second < node.args_size() &&
                                           node.args(it->second).has_list()) {
      for (int i = 0; i < node.args(it->second).list().items_size(); ++i) {
        MarkPositive(node, it->second, i);
      }
    }
  }

  void Infer(const v1::Node& node) {
    const std::string& t = node.target();
    InferPositive(node);
    if (t == "aten.mm.default" && node.args_size() > 1) {
      ScaleWeight(node, 1, SizeOf(node.args(1), 0));
    } else if (t == "aten.addmm.default" && node.args_size() > 2) {
      ScaleWeight(node, 2, SizeOf(node.args(2), 0));
    } else if (t == "aten.bmm.default" && node.args_size() > 1) {
      ScaleWeight(node, 1, SizeOf(node.args(1), -2));
    } else if (t == "aten.convolution.default" && node.args_size() > 1) {
      ScaleWeight(node, 1, FanIn(node.args(1)));
    } else if (t == "aten.convolution_backward.default" && node.args_size() > 2) {
      ScaleWeight(node, 2, FanIn(node.args(2)));
    }
    if (t == "aten.embedding.default") {
      Limit(node, 1, SizeOf(node.args(0), 0));
    } else if (t == "aten.embedding_dense_backward.default") {
      Limit(node, 1, IntArg(node, 2));
    } else if (t == "aten.nll_loss_forward.default" && node.args_size() > 0) {
      Limit(node, 1, SizeOf(node.args(0), -1));
    } else if (t == "aten.nll_loss_backward.default" && node.args_size() > 1) {
      Limit(node, 2, SizeOf(node.args(1), -1));
    } else if ((t == "aten.gather.default" || t == "aten.index_select.default" ||
                t == "aten.scatter_add.default" || t == "aten.scatter.src" ||
                t == "aten.scatter.value") &&
               node.args_size() > 1) {
      const auto dim = IntArg(node, 1);
      if (dim.has_value()) Limit(node, 2, SizeOf(node.args(0), *dim));
    } else if ((t == "aten.index.Tensor" || t == "aten._unsafe_index.Tensor") &&
               node.args_size() > 1 && node.args(1).has_list()) {
      // Index k of the list indexes dim k.
      for (int k = 0; k < node.args(1).list().items_size(); ++k) {
        Limit(node.args(1).list().items(k), SizeOf(node.args(0), k));
      }
    } else if (t == "aten.max_pool2d_with_indices_backward.default" && node.args_size() > 1) {
      const auto h = SizeOf(node.args(1), -2);
      const auto w = SizeOf(node.args(1), -1);
      if (h && w) Limit(node, 7, *h * *w);
      InferPoolWindow(node);
    }
  }

  const SymbolMap& symbols_;
  std::unordered_map<std::string, std::string> origin_;
  std::unordered_map<std::string, std::vector<const v1::ValueMeta*>> meta_;
  std::unordered_map<std::string, std::pair<int64_t, int64_t>> ranges_;
  std::unordered_map<std::string, PoolWindow> windows_;
  std::unordered_map<std::string, double> scales_;
  std::unordered_set<std::string> positive_;
  std::unordered_set<std::string> inputs_;
  std::unordered_map<std::string, const v1::Node*> nodes_;
};

absl::StatusOr<int64_t> Eval(const v1::SymInt& s, const SymbolMap& symbols) {
  if (s.kind_case() == v1::SymInt::kExpr) return EvaluateIntExpr(s.expr(), symbols);
  return s.value();
}

}  // namespace

absl::StatusOr<SymbolMap> ResolveSymbols(const v1::Graph& graph, const SymbolMap& overrides) {
  SymbolMap out = overrides;
  for (const v1::Symbol& s : graph.symbols()) {
    if (out.contains(s.name())) continue;
    if (s.hint_case() == v1::Symbol::kIntHint) {
      out[s.name()] = s.int_hint();
    } else if (s.kind() != v1::SYM_KIND_FLOAT) {
      return absl::InvalidArgumentError(
          absl::StrCat("symbol ", s.name(), " has no value and no hint"));
    }
  }
  return out;
}

namespace {

// The ranges of each kind of input, from one inference over the graph.
std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> IntRanges(
    const v1::Graph& graph, const RangeInference& inferred, const RandomInputOptions& options) {
  std::map<std::string, std::pair<int64_t, int64_t>, std::less<>> out;
  for (const v1::GraphInput& in : graph.inputs()) {
    if (!in.meta().has_tensor()) continue;
    const v1::DType dtype = in.meta().tensor().dtype();
    if (IsFloating(dtype) || dtype == v1::DTYPE_BOOL) continue;
    std::pair<int64_t, int64_t> range = {0, 2};
    if (auto r = inferred.RangeOf(in.name())) range = *r;
    if (auto it = options.int_ranges.find(in.name()); it != options.int_ranges.end()) {
      range = it->second;
    }
    out[in.name()] = range;
  }
  return out;
}

std::map<std::string, std::pair<double, double>, std::less<>> FloatRanges(
    const v1::Graph& graph, const RangeInference& inferred, const RandomInputOptions& options) {
  std::map<std::string, std::pair<double, double>, std::less<>> out;
  for (const v1::GraphInput& in : graph.inputs()) {
    if (!in.meta().has_tensor() || !IsFloating(in.meta().tensor().dtype())) continue;
    auto it = options.float_ranges.find(in.name());
    out[in.name()] =
        it != options.float_ranges.end() ? it->second : inferred.FloatRangeOf(in.name());
  }
  return out;
}

}  // namespace

absl::StatusOr<std::map<std::string, std::pair<int64_t, int64_t>, std::less<>>> IntInputRanges(
    const v1::Graph& graph, const RandomInputOptions& options) {
  absl::StatusOr<SymbolMap> symbols = ResolveSymbols(graph, options.symbols);
  if (!symbols.ok()) return symbols.status();
  return IntRanges(graph, RangeInference(graph, *symbols), options);
}

absl::StatusOr<std::map<std::string, std::pair<double, double>, std::less<>>> FloatInputRanges(
    const v1::Graph& graph, const RandomInputOptions& options) {
  absl::StatusOr<SymbolMap> symbols = ResolveSymbols(graph, options.symbols);
  if (!symbols.ok()) return symbols.status();
  return FloatRanges(graph, RangeInference(graph, *symbols), options);
}

absl::StatusOr<std::vector<Value>> MakeRandomInputs(const v1::Graph& graph,
                                                    const RandomInputOptions& options) {
  absl::StatusOr<SymbolMap> symbols = ResolveSymbols(graph, options.symbols);
  if (!symbols.ok()) return symbols.status();
  const RangeInference inference(graph, *symbols);
  const auto ranges = IntRanges(graph, inference, options);
  const auto float_ranges = FloatRanges(graph, inference, options);
  std::vector<Value> out;
  for (int i = 0; i < graph.inputs_size(); ++i) {
    const v1::GraphInput& in = graph.inputs(i);
    Random rng(options.seed * 0x100000001B3ull + static_cast<uint64_t>(i) + 1);
    if (in.meta().has_symbolic()) {
      absl::StatusOr<int64_t> v = EvaluateIntExpr(in.meta().symbolic().expr(), *symbols);
      if (!v.ok()) return v.status();
      out.emplace_back(*v);
      continue;
    }
    if (!in.meta().has_tensor()) {
      out.emplace_back(None{});
      continue;
    }
    const v1::TensorMeta& m = in.meta().tensor();
    if (!IsSupported(m.dtype())) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input ", in.name(), ": dtype ", v1::DType_Name(m.dtype()), " is not supported"));
    }
    std::vector<int64_t> sizes;
    std::vector<int64_t> strides;
    for (const v1::SymInt& s : m.sizes()) {
      absl::StatusOr<int64_t> v = Eval(s, *symbols);
      if (!v.ok()) return v.status();
      sizes.push_back(*v);
    }
    for (const v1::SymInt& s : m.strides()) {
      absl::StatusOr<int64_t> v = Eval(s, *symbols);
      if (!v.ok()) return v.status();
      strides.push_back(*v);
    }
    if (strides.size() != sizes.size()) strides = ContiguousStrides(sizes);
    int64_t offset = 0;
    if (m.has_storage_offset()) {
      absl::StatusOr<int64_t> v = Eval(m.storage_offset(), *symbols);
      if (!v.ok()) return v.status();
      offset = *v;
    }
    Tensor t = Tensor::ZerosStrided(sizes, strides, offset, m.dtype());
    const std::vector<int64_t> slots = t.ElementIndices();
    if (IsFloating(m.dtype())) {
      const auto [low, high] = float_ranges.at(in.name());
      for (int64_t slot : slots) t.WriteDouble(slot, low + (high - low) * rng.Uniform());
    } else {
      std::pair<int64_t, int64_t> range = {0, 2};
      if (auto it = ranges.find(in.name()); it != ranges.end()) range = it->second;
      const PoolWindow* window = inference.PoolWindowOf(in.name());
      if (options.int_ranges.contains(in.name()) || sizes.size() < 2) window = nullptr;
      for (size_t k = 0; k < slots.size(); ++k) {
        if (window != nullptr) {
          // Element k of [.., oh, ow] in row-major order is output (i, j) of its plane.
          const int64_t ow = sizes.back(), oh = sizes[sizes.size() - 2];
          const int64_t e = static_cast<int64_t>(k);
          t.WriteInt(slots[k], window->Draw(e / ow % oh, e % ow, rng));
        } else {
          t.WriteInt(slots[k], rng.Int(range.first, range.second));
        }
      }
    }
    out.emplace_back(std::move(t));
  }
  return out;
}

}  // namespace kiln::interp
