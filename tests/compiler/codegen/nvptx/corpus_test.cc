// Every graph of the real-graph corpus (tests/data/graphs, plain and gzipped) that compiles
// for x86_64 compiles for cuda:sm_90: nvJitLink assembles every kernel, externs and fallbacks
// are the same steps as on x86_64, module digests are those of their bytes, and the code is
// the same bytes on one thread as on many. The CUDA-graph analysis of each says what
// tests/data/cudagraph_status.txt says (capturable, or the kinds of reasons it is not), and
// every reason names what causes it. No GPU is needed.

#include <unistd.h>
#include <zlib.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "compiler/codegen/nvptx/backend.h"
#include "compiler/codegen/nvptx/launch.h"
#include "compiler/codegen/nvptx/specialize.h"
#include "compiler/codegen/target.h"
#include "compiler/compile.h"
#include "compiler/fuse/batch_write_backs.h"
#include "compiler/fuse/coalesce_dims.h"
#include "compiler/fuse/narrow_masks.h"
#include "compiler/fuse/order_dims.h"
#include "compiler/fuse/split_reductions.h"
#include "compiler/graph/import.h"
#include "compiler/lower/kernel_names.h"
#include "proto/base/digest.h"
#include "proto/graph_file.h"
#include "tests/compiler/graph_testing.h"
#include "tests/testing/test_env.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;

// Corpus files by their path under GraphsDir(): the graphs split by AOTAutograd's default
// partitioner, then those split by min-cut (min_cut/).
std::vector<std::string> CorpusFiles() {
  std::vector<std::string> files;
  for (const std::string dir : {"", "min_cut/"}) {
    for (const auto& entry : fs::directory_iterator(testing::GraphsDir() + "/" + dir)) {
      const std::string name = entry.path().filename().string();
      // Sanitizer builds (ten times slower) assemble the plain seed graphs only; release
      // builds take the whole gzipped corpus.
      if (testing::kSanitized && absl::EndsWith(name, ".json.gz")) continue;
      if (absl::EndsWith(name, ".json") || absl::EndsWith(name, ".json.gz")) {
        files.push_back(dir + name);
      }
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

// The graph in corpus file `name`, gunzipped first when the name ends in ".gz".
absl::StatusOr<v1::Graph> ReadCorpusGraph(const std::string& name) {
  const std::string path = testing::GraphsDir() + "/" + name;
  if (!absl::EndsWith(name, ".gz")) return ReadGraphFile(path);
  std::string text;
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) return absl::NotFoundError(path);
  char chunk[1 << 16];
  for (int n; (n = gzread(f, chunk, sizeof chunk)) > 0;) text.append(chunk, static_cast<size_t>(n));
  gzclose(f);
  // Named for this process too: another run of the test may write the same graph.
  std::string stem = name.substr(0, name.size() - 3);
  std::replace(stem.begin(), stem.end(), '/', '_');
  const std::string plain = absl::StrCat(::testing::TempDir(), "/", getpid(), "_", stem);
  std::ofstream(plain, std::ios::binary) << text;
  absl::StatusOr<v1::Graph> graph = ReadGraphFile(plain);
  std::remove(plain.c_str());
  return graph;
}

absl::StatusOr<v1::CompiledGraph> CompileFor(const graph::Graph& g, absl::string_view target) {
  v1::CompileOptions options;
  options.set_target(std::string(target));
  return compiler::Compile(g, options, "corpus");
}

// tests/data/cudagraph_status.txt: graph file -> "yes", or "no BLOCKER,BLOCKER".
std::map<std::string, std::string> ExpectedCudaGraphs() {
  std::map<std::string, std::string> out;
  std::ifstream in(testing::GraphsDir() + "/../cudagraph_status.txt");
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.size() < 2) continue;
    out[words[0]] = words.size() > 2 ? absl::StrCat(words[1], " ", words[2]) : words[1];
  }
  return out;
}

// The analysis as the status file writes it.
std::string CudaGraphStatus(const v1::CudaGraphInfo& info) {
  if (info.capturable()) return "yes";
  std::set<std::string> blockers;
  for (const v1::CaptureReason& r : info.reasons()) {
    blockers.insert(
        std::string(absl::StripPrefix(v1::CaptureBlocker_Name(r.blocker()), "CAPTURE_BLOCKER_")));
  }
  return absl::StrCat("no ", absl::StrJoin(blockers, ","));
}

class CorpusTest : public ::testing::TestWithParam<std::string> {};

TEST_P(CorpusTest, CompilesForSm90WhereItCompilesForX86) {
  absl::StatusOr<v1::Graph> proto = ReadCorpusGraph(GetParam());
  ASSERT_TRUE(proto.ok()) << proto.status();
  absl::StatusOr<graph::Graph> g = graph::Import(*proto);
  if (!g.ok()) GTEST_SKIP() << "does not import: " << g.status();
  absl::StatusOr<v1::CompiledGraph> cpu = CompileFor(*g, codegen::kTargetX86_64);
  if (!cpu.ok()) GTEST_SKIP() << "does not compile for x86_64: " << cpu.status();

  absl::StatusOr<v1::CompiledGraph> gpu = CompileFor(*g, codegen::kTargetCudaSm90);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  EXPECT_EQ(gpu->target(), codegen::kTargetCudaSm90);
  ASSERT_GE(gpu->modules_size(), 2);
  for (int m = 0; m < gpu->modules_size(); ++m) {
    const v1::CodeModule& module = gpu->modules(m);
    EXPECT_EQ(module.target(), codegen::kTargetCudaSm90);
    EXPECT_EQ(module.kind(), m % 2 == 0 ? v1::BINARY_KIND_CUBIN : v1::BINARY_KIND_PTX);
    EXPECT_EQ(module.digest().SerializeAsString(), DigestOf(module.binary()).SerializeAsString());
  }
  // The CUDA-graph analysis, as recorded; every reason but dynamic shapes names its node.
  static const std::map<std::string, std::string> expected = ExpectedCudaGraphs();
  auto it = expected.find(GetParam());
  ASSERT_NE(it, expected.end()) << GetParam() << " is missing from cudagraph_status.txt";
  EXPECT_EQ(CudaGraphStatus(gpu->cudagraph()), it->second);
  EXPECT_EQ(gpu->cudagraph().capturable(), gpu->cudagraph().reasons().empty());
  for (const v1::CaptureReason& r : gpu->cudagraph().reasons()) {
    EXPECT_FALSE(r.detail().empty());
    if (r.blocker() != v1::CAPTURE_BLOCKER_DYNAMIC_SHAPE)
      EXPECT_FALSE(r.node().empty()) << r.detail();
  }
  // The analysis is of the plan, not the target's code; only the workspace may differ, where
  // sm_90 pads matmul rows (fuse/pad_rows.h).
  v1::CudaGraphInfo gpu_info = gpu->cudagraph(), cpu_info = cpu->cudagraph();
  gpu_info.clear_workspace_bytes();
  cpu_info.clear_workspace_bytes();
  EXPECT_EQ(gpu_info.SerializeAsString(), cpu_info.SerializeAsString());

  // The fused program (matmul rows padded as sm_90 asks), and as sm_90 runs it: reductions
  // that would leave the GPU idle cut into parts (x86-64 cuts none), masked indices narrowed,
  // pointwise kernels walked in their stores' order, then dimensions that index as one
  // merged, write-backs batched, then the target's own rewrites; its kernels named as Compile
  // names them.
  absl::StatusOr<loop::Program> fused =
      testing::FuseGraph(*proto, codegen::nvptx::NewBackend()->MatmulRowAlignment());
  ASSERT_TRUE(fused.ok()) << fused.status();
  loop::Program split =
      fuse::SplitReductions(*fused, [](const loop::Program&, const loop::Kernel& k) {
        return codegen::nvptx::ReductionParts(k);
      });
  loop::Program program = codegen::nvptx::Specialize(fuse::BatchWriteBacks(
      fuse::CoalesceDims(fuse::OrderDims(fuse::NarrowMaskedIndices(std::move(split))))));
  lower::NameKernels(canon::CanonicalGraph(*g), program);
  absl::StatusOr<loop::Program> fused_for_x86 = testing::FuseGraph(*proto);
  ASSERT_TRUE(fused_for_x86.ok()) << fused_for_x86.status();
  EXPECT_EQ(cpu->kernels_size(),
            static_cast<int>(fuse::BatchWriteBacks(*fused_for_x86).kernels.size()));
  ASSERT_EQ(gpu->kernels_size(), static_cast<int>(program.kernels.size()));

  // Externs stay externs and fallbacks stay fallbacks, the same nodes as on x86_64.
  EXPECT_EQ(gpu->summary().extern_steps(), cpu->summary().extern_steps());
  ASSERT_EQ(gpu->summary().fallbacks_size(), cpu->summary().fallbacks_size());
  for (int i = 0; i < gpu->summary().fallbacks_size(); ++i) {
    EXPECT_EQ(gpu->summary().fallbacks(i).node(), cpu->summary().fallbacks(i).node());
    EXPECT_EQ(gpu->summary().fallbacks(i).op(), cpu->summary().fallbacks(i).op());
  }
  for (int i = 0; i < gpu->kernels_size(); ++i) {
    const v1::Kernel& k = gpu->kernels(i);
    // Its own code, or an earlier kernel's that is the same.
    int same = -1;
    ASSERT_TRUE(absl::StartsWith(k.name(), "kiln_k")) << k.name();
    // "kiln_k<same>_<what it computes>".
    const size_t end = k.name().find('_', 6);
    ASSERT_TRUE(
        absl::SimpleAtoi(k.name().substr(6, end == std::string::npos ? end : end - 6), &same))
        << k.name();
    ASSERT_LE(same, i) << k.name();
    EXPECT_EQ(gpu->kernels(same).name(), k.name());
    EXPECT_EQ(k.module(), gpu->kernels(same).module()) << k.name();
    EXPECT_EQ(k.module() % 2, 0) << k.name();
    EXPECT_EQ(k.launch().grid_size(), 3);
    EXPECT_EQ(k.launch().block_size(), 3);
    EXPECT_GT(k.registers(), 0) << k.name();
    EXPECT_TRUE(absl::StartsWith(gpu->modules(k.module()).binary(),
                                 "\x7f"
                                 "ELF"))
        << k.name();
  }

  // The same bytes again, on one thread. The default-split graphs hold the compiler to it;
  // the min-cut ones, the same models' kernels cut elsewhere, would double the test's time.
  if (absl::StartsWith(GetParam(), "min_cut/")) return;
  codegen::GenerateOptions one_thread;
  one_thread.threads = 1;
  absl::StatusOr<codegen::GeneratedCode> again =
      codegen::nvptx::NewBackend()->Generate(program, one_thread);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_EQ(static_cast<int>(again->modules.size()), gpu->modules_size());
  for (int m = 0; m < gpu->modules_size(); ++m) {
    EXPECT_TRUE(again->modules[static_cast<size_t>(m)].binary == gpu->modules(m).binary())
        << "module " << m;
  }
}

std::string TestName(const ::testing::TestParamInfo<std::string>& info) {
  std::string name = info.param;
  for (char& c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  }
  return name;
}

INSTANTIATE_TEST_SUITE_P(Graphs, CorpusTest, ::testing::ValuesIn(CorpusFiles()), TestName);

}  // namespace
}  // namespace kiln
