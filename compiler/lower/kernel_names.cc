#include "compiler/lower/kernel_names.h"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "proto/ops/registry.h"

namespace kiln::lower {
namespace {

// The canonical position in "%12", "%12.1" or "%12~3"; false for any other name.
bool PositionOf(absl::string_view name, uint32_t* position) {
  if (!absl::ConsumePrefix(&name, "%")) return false;
  const size_t end = name.find_first_not_of("0123456789");
  return absl::SimpleAtoi(name.substr(0, end), position);
}

// "aten.amax.default" -> "amax", "prims.convert_element_type.default" ->
// "convert_element_type": the op's name, leading underscores and characters that cannot be in
// a symbol left out.
std::string OpName(absl::string_view target) {
  const std::vector<absl::string_view> parts = absl::StrSplit(target, '.');
  absl::string_view op = parts.size() >= 2 ? parts[1] : parts[0];
  op = op.substr(std::min(op.find_first_not_of('_'), op.size()));
  std::string out;
  for (char c : op) {
    if (absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_') out.push_back(c);
  }
  return out;
}

// Ops that copy, convert or make constants: in nearly every kernel, they would crowd out
// what it computes.
bool Incidental(absl::string_view op) {
  static constexpr absl::string_view kIncidental[] = {"clone",
                                                      "convert_element_type",
                                                      "copy",
                                                      "empty",
                                                      "empty_like",
                                                      "empty_strided",
                                                      "full",
                                                      "full_like",
                                                      "lift_fresh_copy",
                                                      "ones",
                                                      "ones_like",
                                                      "scalar_tensor",
                                                      "to_copy",
                                                      "zeros",
                                                      "zeros_like"};
  return std::find(std::begin(kIncidental), std::end(kIncidental), op) != std::end(kIncidental);
}

}  // namespace

std::string KernelName(const canon::CanonicalGraph& canonical,
                       const std::vector<std::string>& nodes) {
  const graph::Graph& graph = canonical.graph();
  std::vector<uint32_t> positions;
  for (const std::string& n : nodes) {
    uint32_t position = 0;
    if (PositionOf(n, &position) && position < canonical.order().size()) {
      positions.push_back(position);
    }
  }
  std::sort(positions.begin(), positions.end());
  positions.erase(std::unique(positions.begin(), positions.end()), positions.end());

  std::vector<std::string> ops;
  for (uint32_t position : positions) {
    const graph::Node& node = graph.node(canonical.order()[position]);
    if (node.kind != graph::NodeKind::kCall) continue;
    if (node.op != nullptr && node.op->is_view()) continue;
    std::string op = OpName(graph.target(node));
    if (op.empty() || Incidental(op) || std::find(ops.begin(), ops.end(), op) != ops.end()) {
      continue;
    }
    ops.push_back(std::move(op));
  }
  std::string name;
  for (const std::string& op : ops) {
    if (name.size() + (name.empty() ? 0 : 1) + op.size() > kMaxKernelNameChars) break;
    if (!name.empty()) name.push_back('_');
    name += op;
  }
  return name;
}

void NameKernels(const canon::CanonicalGraph& canonical, loop::Program& program) {
  for (loop::Kernel& k : program.kernels) k.name = KernelName(canonical, k.nodes);
}

}  // namespace kiln::lower
