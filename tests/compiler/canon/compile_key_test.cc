// Compile keys over the shared real graphs: what must not change the key (names, order of
// independent nodes, device indices, symbol names, process-group names, debug data) and
// what must (every one-field change), with Explain naming the changed node and field.

#include "compiler/canon/compile_key.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <regex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/canon/compiler_fingerprint.h"
#include "compiler/canon/explain.h"
#include "compiler/codegen/target.h"
#include "compiler/decompose/decompose.h"
#include "kiln/version.h"
#include "proto/kernel_abi.h"
#include "proto/ops/registry.h"
#include "tests/compiler/graph_testing.h"

namespace kiln::canon {
namespace {

using ::testing::HasSubstr;

v1::CompileOptions Options(absl::string_view target = codegen::kTargetCudaSm90) {
  v1::CompileOptions o;
  o.set_target(std::string(target));
  return o;
}

KeyedGraph MustKey(const v1::Graph& g, const v1::CompileOptions& o = Options()) {
  absl::StatusOr<KeyedGraph> k = KeyGraph(g, o);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) std::abort();
  return *std::move(k);
}

std::string KeyOf(const v1::Graph& g, const v1::CompileOptions& o = Options()) {
  return MustKey(g, o).record.compile_key();
}

// ---- graph rewrites that keep the meaning ----

template <typename F>
void ForEachArgument(v1::Graph& g, F&& f) {
  std::function<void(v1::Argument&)> walk = [&](v1::Argument& a) {
    f(a);
    if (a.has_list()) {
      for (v1::Argument& item : *a.mutable_list()->mutable_items()) walk(item);
    }
  };
  for (v1::Node& n : *g.mutable_nodes()) {
    for (v1::Argument& a : *n.mutable_args()) walk(a);
    for (v1::NamedArgument& a : *n.mutable_kwargs()) walk(*a.mutable_value());
  }
  walk(*g.mutable_output());
}

template <typename F>
void ForEachMeta(v1::Graph& g, F&& f) {
  for (v1::GraphInput& in : *g.mutable_inputs()) f(*in.mutable_meta());
  for (v1::Node& n : *g.mutable_nodes()) {
    for (v1::ValueMeta& m : *n.mutable_outputs()) f(m);
  }
}

v1::Graph Rename(v1::Graph g, std::mt19937& rng) {
  absl::flat_hash_map<std::string, std::string> names;
  std::vector<int> ids(g.inputs_size() + g.nodes_size());
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  int k = 0;
  for (v1::GraphInput& in : *g.mutable_inputs()) {
    names[in.name()] = absl::StrCat("arg", ids[k++]);
    in.set_name(names[in.name()]);
    in.mutable_debug()->set_stack_trace(absl::StrCat("File x.py, line ", rng()));
  }
  for (v1::Node& n : *g.mutable_nodes()) {
    names[n.name()] = absl::StrCat("v", ids[k++]);
    n.set_name(names[n.name()]);
    n.mutable_debug()->set_stack_trace(absl::StrCat("File y.py, line ", rng()));
    n.mutable_debug()->set_module_path("renamed");
  }
  ForEachArgument(g, [&](v1::Argument& a) {
    if (a.has_ref()) a.mutable_ref()->set_node(names.at(a.ref().node()));
  });
  g.mutable_info()->set_model("another model");
  g.mutable_info()->set_source("");
  return g;
}

// A random topological order of the nodes: data dependencies and the order among ordered
// ops are kept, everything else is shuffled.
v1::Graph Permute(const v1::Graph& g, std::mt19937& rng) {
  const int n = g.nodes_size();
  absl::flat_hash_map<std::string, int> index;
  for (int i = 0; i < n; ++i) index[g.nodes(i).name()] = i;
  std::vector<std::vector<int>> users(n);
  std::vector<int> pending(n, 0);
  int last_ordered = -1;
  for (int i = 0; i < n; ++i) {
    absl::flat_hash_set<int> deps;
    std::function<void(const v1::Argument&)> walk = [&](const v1::Argument& a) {
      if (a.has_ref() && index.contains(a.ref().node())) deps.insert(index.at(a.ref().node()));
      for (const v1::Argument& item : a.list().items()) walk(item);
    };
    for (const v1::Argument& a : g.nodes(i).args()) walk(a);
    for (const v1::NamedArgument& a : g.nodes(i).kwargs()) walk(a.value());
    if (ops::IsOrdered(g.nodes(i).target())) {
      if (last_ordered >= 0) deps.insert(last_ordered);
      last_ordered = i;
    }
    for (int d : deps) users[d].push_back(i);
    pending[i] = static_cast<int>(deps.size());
  }
  std::vector<int> ready;
  for (int i = 0; i < n; ++i) {
    if (pending[i] == 0) ready.push_back(i);
  }
  v1::Graph out = g;
  out.clear_nodes();
  while (!ready.empty()) {
    const size_t pick = std::uniform_int_distribution<size_t>(0, ready.size() - 1)(rng);
    const int next = ready[pick];
    ready.erase(ready.begin() + static_cast<long>(pick));
    *out.add_nodes() = g.nodes(next);
    for (int u : users[next]) {
      if (--pending[u] == 0) ready.push_back(u);
    }
  }
  EXPECT_EQ(out.nodes_size(), n);
  return out;
}

v1::Graph ChangeDeviceIndex(v1::Graph g, int index) {
  ForEachMeta(g, [&](v1::ValueMeta& m) {
    if (m.has_tensor() && m.tensor().device().has_index()) {
      m.mutable_tensor()->mutable_device()->set_index(index);
    }
  });
  ForEachArgument(g, [&](v1::Argument& a) {
    if (a.has_device() && a.device().has_index()) a.mutable_device()->set_index(index);
  });
  return g;
}

// Renames every symbol (s77 -> s1077, ...) everywhere it occurs, and changes hints.
v1::Graph RenameSymbols(v1::Graph g) {
  static const std::regex kSymbol(R"(\b(s|u|zf)(\d+)\b)");
  auto rename = [](const std::string& text) {
    std::string out;
    auto begin = std::sregex_iterator(text.begin(), text.end(), kSymbol);
    size_t last = 0;
    for (auto it = begin; it != std::sregex_iterator(); ++it) {
      out += text.substr(last, it->position() - last);
      out += (*it)[1].str() + std::to_string(1000 + std::stoi((*it)[2].str()));
      last = it->position() + it->length();
    }
    return out + text.substr(last);
  };
  auto sym_int = [&](v1::SymInt& s) {
    if (s.has_expr()) s.set_expr(rename(s.expr()));
  };
  ForEachMeta(g, [&](v1::ValueMeta& m) {
    if (m.has_symbolic()) m.mutable_symbolic()->set_expr(rename(m.symbolic().expr()));
    if (!m.has_tensor()) return;
    for (v1::SymInt& s : *m.mutable_tensor()->mutable_sizes()) sym_int(s);
    for (v1::SymInt& s : *m.mutable_tensor()->mutable_strides()) sym_int(s);
    sym_int(*m.mutable_tensor()->mutable_storage_offset());
  });
  ForEachArgument(g, [&](v1::Argument& a) {
    if (a.has_symbolic()) a.mutable_symbolic()->set_expr(rename(a.symbolic().expr()));
  });
  for (v1::Symbol& s : *g.mutable_symbols()) {
    s.set_name(rename(s.name()));
    if (s.has_int_hint()) s.set_int_hint(s.int_hint() + 7);
  }
  for (std::string& guard : *g.mutable_guards()->mutable_shape_env()) guard = rename(guard);
  return g;
}

TEST(CompileKeyTest, DeterministicAndDistinctAcrossGraphs) {
  absl::flat_hash_map<std::string, std::string> keys;  // key -> graph
  for (const auto& [name, g] : testing::LoadSharedGraphs()) {
    const std::string key = KeyOf(g);
    EXPECT_EQ(key.size(), 64u);
    EXPECT_EQ(KeyOf(g), key) << name;
    // mlp_automatic_dynamic.* is the first (static) compile of the same model as
    // mlp_fp32.*: the same graphs but for stack traces, so the same keys.
    std::string twin = name;
    if (absl::StartsWith(name, "mlp_automatic_dynamic.")) {
      twin = "mlp_fp32" + name.substr(std::string("mlp_automatic_dynamic").size());
    }
    auto [it, inserted] = keys.emplace(key, twin);
    if (!inserted) EXPECT_EQ(it->second, twin) << name << " has the key of " << it->second;
  }
  EXPECT_EQ(keys.size(), 6u);
}

TEST(CompileKeyTest, InvariantUnderRenamingPermutationDeviceIndexAndSymbols) {
  std::mt19937 rng(20261122);
  for (const auto& [name, g] : testing::LoadSharedGraphs()) {
    const std::string key = KeyOf(g);
    for (int trial = 0; trial < 5; ++trial) {
      EXPECT_EQ(KeyOf(Rename(g, rng)), key) << name << " renamed, trial " << trial;
      EXPECT_EQ(KeyOf(Permute(g, rng)), key) << name << " permuted, trial " << trial;
      EXPECT_EQ(KeyOf(Permute(Rename(g, rng), rng)), key) << name << " both, trial " << trial;
    }
    EXPECT_EQ(KeyOf(ChangeDeviceIndex(g, 3)), key) << name;
    EXPECT_EQ(KeyOf(RenameSymbols(g)), key) << name;
    v1::Graph no_guards = g;
    no_guards.clear_guards();
    no_guards.clear_info();
    EXPECT_EQ(KeyOf(no_guards), key) << name << ": guards are variants, not key";
  }
}

TEST(CompileKeyTest, PermutationChangesTheOrderTheProtoHad) {
  // The invariance above is only meaningful if permutations really move nodes.
  std::mt19937 rng(7);
  const v1::Graph g = testing::LoadSharedGraph("nanogpt_fp32.bw.json");
  const v1::Graph p = Permute(g, rng);
  int moved = 0;
  for (int i = 0; i < g.nodes_size(); ++i) moved += g.nodes(i).name() != p.nodes(i).name();
  EXPECT_GT(moved, g.nodes_size() / 2);
}

TEST(CompileKeyTest, OptionsAndToolchainChangeTheKey) {
  const v1::Graph g = testing::SmallGraph();
  const std::string base = KeyOf(g);
  EXPECT_NE(KeyOf(g, Options(codegen::kTargetX86_64)), base);
  v1::CompileOptions o = Options();
  o.set_require_cudagraph(true);
  EXPECT_NE(KeyOf(g, o), base);
  o = Options();
  o.set_precision(v1::PRECISION_POLICY_ALLOW_TF32);
  EXPECT_NE(KeyOf(g, o), base);
  o.set_precision(v1::PRECISION_POLICY_STRICT);
  EXPECT_EQ(KeyOf(g, o), base) << "unspecified precision is strict";
  o = Options();
  (*o.mutable_backend_options())["unroll"] = "4";
  (*o.mutable_backend_options())["a"] = "b";
  const std::string with_options = KeyOf(g, o);
  EXPECT_NE(with_options, base);
  v1::CompileOptions reordered = Options();
  (*reordered.mutable_backend_options())["a"] = "b";
  (*reordered.mutable_backend_options())["unroll"] = "4";
  EXPECT_EQ(KeyOf(g, reordered), with_options);

  KeyedGraph a = MustKey(g, o);
  (*o.mutable_backend_options())["unroll"] = "8";
  KeyedGraph b = MustKey(g, o);
  v1::ExplainResponse e = Explain(a, b);
  EXPECT_EQ(e.component(), "options");
  EXPECT_EQ(e.field(), "backend_options[unroll]");
  EXPECT_THAT(e.description(), HasSubstr("4 vs 8"));

  Toolchain older_cuda = CurrentToolchain();
  older_cuda.cuda_version = "12.4";
  absl::StatusOr<v1::KeyRecord> other = ComputeKeyRecord(*a.canonical, a.options, older_cuda);
  ASSERT_TRUE(other.ok());
  EXPECT_NE(other->compile_key(), a.record.compile_key());
  e = Explain(a.record, *other);
  EXPECT_EQ(e.component(), "toolchain");
  EXPECT_THAT(e.description(), HasSubstr("cuda 13.0"));
  EXPECT_THAT(e.description(), HasSubstr("cuda 12.4"));

  EXPECT_FALSE(KeyGraph(g, Options("riscv")).ok());
}

// Infinities and NaN are arguments like any other (masked_fill with -inf, scalar_tensor of
// nan); every NaN bit pattern gives one key.
TEST(CompileKeyTest, NonFiniteArgumentsKeyByValue) {
  auto with_fill = [](double value) {
    v1::Graph g = testing::SmallGraph();
    v1::Node* fill = g.add_nodes();
    fill->set_name("fill");
    fill->set_target("aten.fill.Scalar");
    fill->add_args()->mutable_ref()->set_node("mm");
    fill->add_args()->set_float_value(value);
    *fill->add_outputs() = g.nodes(1).outputs(0);
    g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("fill");
    return g;
  };
  const double inf = std::numeric_limits<double>::infinity();
  double other_nan = std::numeric_limits<double>::quiet_NaN();
  uint64_t bits;
  std::memcpy(&bits, &other_nan, sizeof bits);
  bits |= 0x5a5a5;  // another payload
  std::memcpy(&other_nan, &bits, sizeof bits);
  ASSERT_TRUE(std::isnan(other_nan));
  const std::string nan_key = KeyOf(with_fill(std::nan("")));
  EXPECT_EQ(KeyOf(with_fill(other_nan)), nan_key);
  EXPECT_NE(KeyOf(with_fill(inf)), nan_key);
  EXPECT_NE(KeyOf(with_fill(-inf)), KeyOf(with_fill(inf)));
  EXPECT_NE(KeyOf(with_fill(1.0)), nan_key);
}

// Keys know the compiler: a kilnd whose compiler differs in any source (a fixed fusion or
// codegen bug) must not serve the old compiler's artifacts from a shared cache.
// aten.mul.Tensor(x, 0.5), as AOTAutograd writes it, is the op's Scalar overload: one graph,
// one key, however the trainer spelled it.
TEST(CompileKeyTest, ANumberForATensorIsTheScalarOverload) {
  auto with_mul = [](const char* target) {
    v1::Graph g = testing::SmallGraph();
    v1::Node* mul = g.add_nodes();
    mul->set_name("half");
    mul->set_target(target);
    mul->add_args()->mutable_ref()->set_node("mm");
    mul->add_args()->set_float_value(0.5);
    *mul->add_outputs() = g.nodes(1).outputs(0);
    g.mutable_output()->mutable_list()->add_items()->mutable_ref()->set_node("half");
    return g;
  };
  const KeyedGraph tensor = MustKey(with_mul("aten.mul.Tensor"));
  EXPECT_EQ(tensor.record.compile_key(), KeyOf(with_mul("aten.mul.Scalar")));
  EXPECT_EQ(tensor.graph->target(tensor.graph->node(tensor.graph->num_nodes() - 1)),
            "aten.mul.Scalar");
}

TEST(CompileKeyTest, TheCompilerItselfIsPartOfTheKey) {
  const Toolchain& current = CurrentToolchain();
  EXPECT_TRUE(std::regex_match(current.compiler_fingerprint, std::regex("[0-9a-f]{64}")))
      << current.compiler_fingerprint;
  EXPECT_EQ(current.compiler_fingerprint, kCompilerFingerprint);
  EXPECT_EQ(current.kernel_abi_version, kKernelAbiVersion);
  EXPECT_EQ(current.kiln_version, kKilnVersion);

  const KeyedGraph x86 = MustKey(testing::SmallGraph(), Options(codegen::kTargetX86_64));
  EXPECT_THAT(x86.record.toolchain(), HasSubstr(absl::StrCat("compiler ", kCompilerFingerprint)));
  EXPECT_THAT(x86.record.toolchain(), HasSubstr(absl::StrCat("kernel abi ", kKernelAbiVersion)));
  EXPECT_THAT(x86.record.toolchain(), HasSubstr(absl::StrCat("kiln ", kKilnVersion)));
  EXPECT_THAT(x86.record.toolchain(), HasSubstr("target x86_64 ("));
  EXPECT_THAT(x86.record.toolchain(), HasSubstr("cpu x86-64-v3"));
#ifdef KILN_HAVE_CUDA
  EXPECT_THAT(MustKey(testing::SmallGraph()).record.toolchain(),
              HasSubstr("target cuda:sm_90 (nvptx64-nvidia-cuda, sm_90 +ptx78, O2, libdevice "));
#else
  // The key of a target without a backend in this build still says which target it is for.
  EXPECT_THAT(MustKey(testing::SmallGraph()).record.toolchain(),
              HasSubstr("target cuda:sm_90 (no backend)"));
#endif

  struct Change {
    std::string what;
    std::function<void(Toolchain&)> apply;
    std::string before, after;  // what Explain shows of each side
  };
  const std::vector<Change> changes = {
      {"compiler fingerprint", [](Toolchain& t) { t.compiler_fingerprint = std::string(64, 'f'); },
       kCompilerFingerprint, std::string(64, 'f')},
      {"kernel ABI", [](Toolchain& t) { ++t.kernel_abi_version; },
       absl::StrCat("kernel abi ", kKernelAbiVersion),
       absl::StrCat("kernel abi ", kKernelAbiVersion + 1)},
      {"Kiln version", [](Toolchain& t) { t.kiln_version = "0.2.0"; }, kKilnVersion, "kiln 0.2.0"},
      {"CPU level",
       [](Toolchain& t) {
         std::string& facts = t.backends.at(std::string(codegen::kTargetX86_64));
         facts.replace(facts.find("x86-64-v3"), 9, "x86-64-v4");
       },
       "cpu x86-64-v3", "cpu x86-64-v4"},
  };
  for (const Change& c : changes) {
    Toolchain changed = current;
    c.apply(changed);
    absl::StatusOr<v1::KeyRecord> record = ComputeKeyRecord(*x86.canonical, x86.options, changed);
    ASSERT_TRUE(record.ok()) << record.status();
    EXPECT_NE(record->compile_key(), x86.record.compile_key()) << c.what;
    const v1::ExplainResponse e = Explain(x86.record, *record);
    EXPECT_EQ(e.component(), "toolchain") << c.what;
    EXPECT_THAT(e.description(), HasSubstr(c.before)) << c.what;
    EXPECT_THAT(e.description(), HasSubstr(c.after)) << c.what;
  }
}

TEST(CompileKeyTest, OutputPositionsMatter) {
  const v1::Graph g = testing::SmallGraph();
  v1::Graph swapped = g;
  swapped.mutable_output()->mutable_list()->mutable_items()->SwapElements(0, 1);
  KeyedGraph a = MustKey(g);
  KeyedGraph b = MustKey(swapped);
  EXPECT_NE(a.record.compile_key(), b.record.compile_key());
  v1::ExplainResponse e = Explain(a, b);
  EXPECT_EQ(e.component(), "outputs");
  EXPECT_EQ(e.field(), "output[0]");
}

TEST(CompileKeyTest, EqualKeysExplainAsEqual) {
  KeyedGraph a = MustKey(testing::SmallGraph());
  v1::ExplainResponse e = Explain(a, a);
  EXPECT_TRUE(e.equal());
  EXPECT_THAT(e.description(), HasSubstr(a.record.compile_key()));
}

TEST(CompileKeyTest, ProcessGroupNamesAreNormalizedToTheirPosition) {
  const std::string key = KeyOf(testing::CollectiveGraph("tp:0", "dp:1"));
  EXPECT_EQ(KeyOf(testing::CollectiveGraph("group_17", "group_3")), key);
  EXPECT_NE(KeyOf(testing::CollectiveGraph("tp:0", "tp:0")), key) << "one group is not two groups";
  EXPECT_NE(KeyOf(testing::CollectiveGraph("dp:1", "tp:0")),
            KeyOf(testing::CollectiveGraph("tp:0", "tp:0")));

  // Collectives keep their order: issuing them the other way round is another program.
  v1::Graph swapped = testing::CollectiveGraph("tp:0", "dp:1");
  swapped.mutable_nodes()->SwapElements(3, 4);
  KeyedGraph a = MustKey(testing::CollectiveGraph("tp:0", "dp:1"));
  KeyedGraph b = MustKey(swapped);
  EXPECT_NE(a.record.compile_key(), b.record.compile_key());
  EXPECT_EQ(Explain(a, b).component(), "graph");
}

// q [1, 2, 4, 8] and two independent random ops on it, in the order given: each of `ops` is
// "attention" (efficient attention with dropout) or a dropout probability ("0.5").
v1::Graph RandomOpsGraph(const std::vector<std::string>& ops) {
  auto meta = [](std::vector<int64_t> sizes, v1::DType dtype) {
    v1::ValueMeta m;
    v1::TensorMeta* t = m.mutable_tensor();
    int64_t stride = 1;
    for (size_t d = sizes.size(); d-- > 0;) {
      t->add_sizes()->set_value(sizes[d]);
      t->add_strides()->set_value(stride);
      stride *= sizes[d];
    }
    std::reverse(t->mutable_sizes()->begin(), t->mutable_sizes()->end());
    std::reverse(t->mutable_strides()->begin(), t->mutable_strides()->end());
    t->set_dtype(dtype);
    t->mutable_device()->set_type("cuda");
    return m;
  };
  const std::vector<int64_t> qkv = {1, 2, 4, 8};
  v1::Graph g;
  v1::GraphInput* q = g.add_inputs();
  q->set_name("q");
  *q->mutable_meta() = meta(qkv, v1::DTYPE_FLOAT32);
  for (size_t i = 0; i < ops.size(); ++i) {
    v1::Node* n = g.add_nodes();
    n->set_name(absl::StrCat("r", i));
    n->set_multi_output(true);
    if (ops[i] == "attention") {
      n->set_target("aten._scaled_dot_product_efficient_attention.default");
      for (int k = 0; k < 3; ++k) n->add_args()->mutable_ref()->set_node("q");
      n->add_args()->mutable_none();
      n->add_args()->set_bool_value(false);  // compute_log_sumexp
      n->add_args()->set_float_value(0.1);   // dropout_p
      n->add_args()->set_bool_value(false);  // is_causal
      *n->add_outputs() = meta(qkv, v1::DTYPE_FLOAT32);
      *n->add_outputs() = meta({1, 2, 0}, v1::DTYPE_FLOAT32);
      *n->add_outputs() = meta({}, v1::DTYPE_INT64);
      *n->add_outputs() = meta({}, v1::DTYPE_INT64);
    } else {
      n->set_target("aten.native_dropout.default");
      n->add_args()->mutable_ref()->set_node("q");
      n->add_args()->set_float_value(std::stod(ops[i]));
      n->add_args()->set_bool_value(true);
      *n->add_outputs() = meta(qkv, v1::DTYPE_FLOAT32);
      *n->add_outputs() = meta(qkv, v1::DTYPE_BOOL);
    }
    v1::ValueRef* out = g.mutable_output()->mutable_list()->add_items()->mutable_ref();
    out->set_node(n->name());
    out->set_output(0);
  }
  return g;
}

// The canonical digests of a graph's nodes, in canonical order, in hex.
std::vector<std::string> CanonicalForm(const KeyedGraph& k) {
  std::vector<std::string> form;
  for (uint32_t node : k.canonical->order()) {
    const Sha256Bytes& d = k.canonical->digest(node);
    form.push_back(ToHex(absl::string_view(reinterpret_cast<const char*>(d.data()), d.size())));
  }
  return form;
}

// Random ops take Philox streams in their order, so their order is part of the program:
// swapping two of them must change the key, whichever ops draw. (Attention with dropout
// once traded places freely with a dropout, and one key compiled to two plans.)
TEST(CompileKeyTest, RandomOpsKeepTheirOrderAttentionIncluded) {
  for (const std::vector<std::string>& pair :
       std::vector<std::vector<std::string>>{{"0.5", "0.3"}, {"attention", "0.5"}}) {
    SCOPED_TRACE(absl::StrJoin(pair, " then "));
    const v1::Graph g = RandomOpsGraph(pair);
    v1::Graph swapped = g;
    swapped.mutable_nodes()->SwapElements(0, 1);
    KeyedGraph a = MustKey(g);
    KeyedGraph b = MustKey(swapped);
    EXPECT_NE(CanonicalForm(a), CanonicalForm(b));
    EXPECT_NE(a.record.compile_key(), b.record.compile_key());
    EXPECT_EQ(Explain(a, b).component(), "graph");
  }
  // What the key protects: the attention's stream is its position among the random ops.
  for (const auto& [order, stream] : std::vector<std::pair<std::vector<std::string>, int64_t>>{
           {{"attention", "0.5"}, 0}, {{"0.5", "attention"}, 1}}) {
    KeyedGraph k = MustKey(RandomOpsGraph(order));
    absl::StatusOr<decompose::PrimGraph> p = decompose::Decompose(*k.graph, *k.canonical);
    ASSERT_TRUE(p.ok()) << p.status();
    EXPECT_EQ(p->rng_ops, 2);
    int attention = 0;
    for (const decompose::Node& n : p->nodes) {
      if (n.op != "aten._scaled_dot_product_efficient_attention.default") continue;
      ++attention;
      EXPECT_EQ(n.rng_stream, stream) << absl::StrJoin(order, " then ");
    }
    EXPECT_EQ(attention, 1);
  }
}

// ---- one-field mutations ----

struct Mutation {
  std::string what;    // for messages
  bool input = false;  // an input (else a node)
  int index = 0;       // into inputs or nodes
  std::string field;   // the field Explain must name
  // Applies variant `attempt` of the change (a graph can reject one variant, e.g. a view
  // that would reach outside its base, and accept another); false: no such variant.
  std::function<bool(v1::Graph&, int attempt)> apply;
};

// Steps tried in turn for integers: grow first, then shrink.
constexpr int64_t kSteps[] = {1, -1, 2};

bool MutateArgument(v1::Argument& a, const v1::Graph& g, int attempt) {
  switch (a.kind_case()) {
    case v1::Argument::kIntValue:
      if (attempt >= 3) return false;
      a.set_int_value(a.int_value() + kSteps[attempt]);
      return true;
    case v1::Argument::kFloatValue:
      a.set_float_value(a.float_value() + 0.5 * (attempt + 1));
      return attempt < 2;
    case v1::Argument::kBoolValue:
      a.set_bool_value(!a.bool_value());
      return attempt == 0;
    case v1::Argument::kStringValue:
      a.set_string_value(a.string_value() + "_x");
      return attempt == 0;
    case v1::Argument::kDtype:
      a.set_dtype(a.dtype() == v1::DTYPE_FLOAT64 ? v1::DTYPE_FLOAT32 : v1::DTYPE_FLOAT64);
      return attempt == 0;
    case v1::Argument::kDevice:
      a.mutable_device()->set_type(a.device().type() == "cpu" ? "cuda" : "cpu");
      return attempt == 0;
    case v1::Argument::kSymbolic:
      a.mutable_symbolic()->set_expr(a.symbolic().expr() + " + 1");
      return attempt == 0;
    case v1::Argument::kRef: {
      // Another input of the same kind (tensor or symbolic scalar) each attempt.
      v1::ValueMeta::KindCase kind = v1::ValueMeta::kTensor;
      for (const v1::GraphInput& in : g.inputs()) {
        if (in.name() == a.ref().node()) kind = in.meta().kind_case();
      }
      for (const v1::Node& n : g.nodes()) {
        if (n.name() == a.ref().node() && !n.multi_output()) kind = n.outputs(0).kind_case();
      }
      int k = 0;
      for (const v1::GraphInput& in : g.inputs()) {
        if (in.meta().kind_case() != kind || in.name() == a.ref().node()) continue;
        if (k++ < attempt) continue;
        a.mutable_ref()->set_node(in.name());
        a.mutable_ref()->clear_output();
        return true;
      }
      return false;
    }
    case v1::Argument::kList:
      for (v1::Argument& item : *a.mutable_list()->mutable_items()) {
        v1::Argument copy = item;
        if (MutateArgument(copy, g, attempt)) {
          item = copy;
          return true;
        }
      }
      return false;
    default:
      return false;
  }
}

void MetaMutations(const v1::ValueMeta& meta, const std::string& prefix, bool input, int index,
                   int output, std::vector<Mutation>* out) {
  if (!meta.has_tensor()) return;
  auto add = [&](const std::string& field, std::function<bool(v1::TensorMeta&, int)> f) {
    out->push_back(
        {field, input, index, absl::StrCat(prefix, ".", field), [=](v1::Graph& g, int attempt) {
           v1::ValueMeta* m = input ? g.mutable_inputs(index)->mutable_meta()
                                    : g.mutable_nodes(index)->mutable_outputs(output);
           return f(*m->mutable_tensor(), attempt);
         }});
  };
  auto bump = [](v1::SymInt& s, int attempt) {
    if (attempt >= 3) return false;
    if (s.has_expr()) {
      s.set_expr(absl::StrCat(s.expr(), " + ", attempt + 1));
    } else {
      if (s.value() + kSteps[attempt] < 0) return false;
      s.set_value(s.value() + kSteps[attempt]);
    }
    return true;
  };
  add("dtype", [](v1::TensorMeta& t, int attempt) {
    t.set_dtype(t.dtype() == v1::DTYPE_FLOAT64 ? v1::DTYPE_FLOAT32 : v1::DTYPE_FLOAT64);
    return attempt == 0;
  });
  add("requires_grad", [](v1::TensorMeta& t, int attempt) {
    t.set_requires_grad(!t.requires_grad());
    return attempt == 0;
  });
  for (int d = 0; d < meta.tensor().sizes_size(); ++d) {
    add(absl::StrCat("sizes[", d, "]"),
        [=](v1::TensorMeta& t, int attempt) { return bump(*t.mutable_sizes(d), attempt); });
    add(absl::StrCat("strides[", d, "]"),
        [=](v1::TensorMeta& t, int attempt) { return bump(*t.mutable_strides(d), attempt); });
  }
  add("storage_offset",
      [=](v1::TensorMeta& t, int attempt) { return bump(*t.mutable_storage_offset(), attempt); });
}

std::vector<Mutation> Mutations(const v1::Graph& g) {
  std::vector<Mutation> out;
  for (int i = 0; i < g.inputs_size(); ++i) {
    MetaMutations(g.inputs(i).meta(), "meta", true, i, 0, &out);
  }
  for (int i = 0; i < g.nodes_size(); ++i) {
    const v1::Node& n = g.nodes(i);
    out.push_back({"target", false, i, "target", [i](v1::Graph& m, int attempt) {
                     m.mutable_nodes(i)->set_target(m.nodes(i).target() + "_mutated");
                     return attempt == 0;
                   }});
    const ops::Op* op = ops::FindOp(n.target());
    for (int a = 0; a < n.args_size(); ++a) {
      out.push_back({absl::StrCat("args[", a, "]"), false, i, absl::StrCat("args[", a, "]"),
                     [i, a](v1::Graph& m, int attempt) {
                       return MutateArgument(*m.mutable_nodes(i)->mutable_args(a), m, attempt);
                     }});
    }
    for (int k = 0; k < n.kwargs_size(); ++k) {
      const std::string& kw = n.kwargs(k).name();
      const std::string field = op != nullptr
                                    ? absl::StrCat("args[", op->schema.ParamIndex(kw), "]")
                                    : absl::StrCat("kwargs.", kw);
      out.push_back(
          {absl::StrCat("kwargs.", kw), false, i, field, [i, k](v1::Graph& m, int attempt) {
             return MutateArgument(*m.mutable_nodes(i)->mutable_kwargs(k)->mutable_value(), m,
                                   attempt);
           }});
    }
    for (int o = 0; o < n.outputs_size(); ++o) {
      MetaMutations(n.outputs(o), absl::StrCat("outputs[", o, "]"), false, i, o, &out);
    }
  }
  return out;
}

// The first variant of `m` that import accepts.
std::optional<KeyedGraph> ApplyValid(const v1::Graph& g, const Mutation& m, std::string* why) {
  for (int attempt = 0;; ++attempt) {
    v1::Graph mutated = g;
    if (!m.apply(mutated, attempt)) return std::nullopt;
    absl::StatusOr<KeyedGraph> keyed = KeyGraph(mutated, Options());
    if (keyed.ok()) return *std::move(keyed);
    *why = std::string(keyed.status().message());
  }
}

TEST(CompileKeyTest, EveryOneFieldMutationChangesTheKeyAndIsExplained) {
  for (const auto& [name, g] : testing::LoadSharedGraphs()) {
    const KeyedGraph base = MustKey(g);
    int applied = 0;
    std::vector<std::string> rejected;
    for (const Mutation& m : Mutations(g)) {
      const std::string node_name = m.input ? g.inputs(m.index).name() : g.nodes(m.index).name();
      const std::string label = absl::StrCat(name, ": ", node_name, " ", m.what);
      std::string why;
      std::optional<KeyedGraph> keyed = ApplyValid(g, m, &why);
      if (!keyed.has_value()) {
        // No variant of the change is a valid graph (a getitem whose element no longer
        // matches, a ref that no input can replace): import rejects it, which is right too.
        if (!why.empty()) rejected.push_back(absl::StrCat(label, ": ", why));
        continue;
      }
      ++applied;
      ASSERT_NE(keyed->record.compile_key(), base.record.compile_key()) << label;
      const v1::ExplainResponse e = Explain(base, *keyed);
      const uint32_t node_index = m.input ? m.index : g.inputs_size() + m.index;
      EXPECT_FALSE(e.equal()) << label;
      EXPECT_EQ(e.component(), m.input ? "inputs" : "graph") << label << ": " << e.description();
      EXPECT_EQ(static_cast<uint32_t>(e.node_index()), base.canonical->position(node_index))
          << label << ": " << e.description();
      EXPECT_EQ(e.field(), m.field) << label << ": " << e.description();
      EXPECT_THAT(e.node(), HasSubstr(node_name)) << label;

      // The records alone name the same component and node.
      const v1::ExplainResponse r = Explain(base.record, keyed->record);
      EXPECT_EQ(r.component(), e.component()) << label;
      EXPECT_EQ(r.node_index(), e.node_index()) << label;
    }
    // Most changes to views' metadata make them reach outside their base, a getitem must
    // agree with its element, and an unknown op needs metadata on every output: such
    // changes are rejected, for the reasons named here only.
    EXPECT_GT(applied, g.nodes_size() * 2) << name;
    for (const std::string& r : rejected) {
      EXPECT_TRUE(absl::StrContains(r, "the view reaches elements") ||
                  absl::StrContains(r, "disagrees with element") ||
                  absl::StrContains(r, "operator.getitem needs the whole result") ||
                  absl::StrContains(r, "is out of range") ||
                  absl::StrContains(r, "is not an op Kiln knows, so every output needs"))
          << r;
    }
  }
}

TEST(CompileKeyTest, ExplainSentenceNamesNodeOpAndValues) {
  v1::Graph g = testing::LoadSharedGraph("mlp_fp32.fw.json");
  v1::Graph changed = g;
  for (v1::Node& n : *changed.mutable_nodes()) {
    if (n.target() == "aten.native_dropout.default") n.mutable_args(1)->set_float_value(0.2);
  }
  const v1::ExplainResponse e = Explain(MustKey(g), MustKey(changed));
  EXPECT_EQ(e.component(), "graph");
  EXPECT_EQ(e.field(), "args[1]");
  EXPECT_THAT(e.description(),
              ::testing::MatchesRegex("differs in component graph, first at node [0-9]+ "
                                      "\\(aten.native_dropout.default\\) arg 1 \\(p\\): "
                                      "0.1 vs 0.2"));
}

}  // namespace
}  // namespace kiln::canon
