#include "compiler/canon/compile_key.h"

#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen/target.h"
#include "compiler/graph/import.h"
#include "proto/base/digest.h"
#include "proto/error_detail.h"

namespace kiln::canon {
namespace {

void PutStr(std::string* out, absl::string_view s) {
  const auto n = static_cast<uint32_t>(s.size());
  for (int i = 0; i < 4; ++i) out->push_back(static_cast<char>(n >> (8 * i)));
  out->append(s.data(), s.size());
}

std::string Bytes(const Sha256Bytes& d) {
  return std::string(reinterpret_cast<const char*>(d.data()), d.size());
}

// The options as they affect code: an unspecified precision is strict, and backend
// options go in key order whatever order the map iterates in.
std::string EncodeOptions(const v1::CompileOptions& options) {
  std::string out = "options/1";
  PutStr(&out, options.target());
  out.push_back(options.require_cudagraph() ? 1 : 0);
  const v1::PrecisionPolicy precision = options.precision() == v1::PRECISION_POLICY_UNSPECIFIED
                                            ? v1::PRECISION_POLICY_STRICT
                                            : options.precision();
  out.push_back(static_cast<char>(precision));
  std::map<std::string, std::string> sorted(options.backend_options().begin(),
                                            options.backend_options().end());
  PutStr(&out, absl::StrCat(sorted.size()));
  for (const auto& [k, v] : sorted) {
    PutStr(&out, k);
    PutStr(&out, v);
  }
  return out;
}

}  // namespace

absl::Status ValidateOptions(const v1::CompileOptions& options) {
  if (!codegen::IsKnownTarget(options.target())) {
    return InvalidField("", "options.target",
                        absl::StrCat("unknown target \"", options.target(), "\" (expected ",
                                     absl::StrJoin(codegen::kKnownTargets, " or "), ")"));
  }
  if (!v1::PrecisionPolicy_IsValid(options.precision())) {
    return InvalidField("", "options.precision",
                        absl::StrCat("unknown precision policy ", options.precision()));
  }
  return absl::OkStatus();
}

absl::StatusOr<v1::KeyRecord> ComputeKeyRecord(const CanonicalGraph& canonical,
                                               const v1::CompileOptions& options,
                                               const Toolchain& toolchain) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  const graph::Graph& g = canonical.graph();
  v1::KeyRecord record;
  record.set_format(kCanonicalFormat);
  record.set_toolchain(ToolchainFingerprint(toolchain, options.target()));
  record.set_toolchain_digest(Bytes(Sha256(record.toolchain())));
  record.set_options_digest(Bytes(Sha256(EncodeOptions(options))));
  record.set_num_inputs(static_cast<int32_t>(g.num_inputs()));

  Sha256Hasher graph_hasher;
  Sha256Hasher inputs_hasher;
  const std::string header =
      absl::StrCat("graph/", kCanonicalFormat, "/", g.num_inputs(), "/", g.num_nodes());
  graph_hasher.Update(header);
  record.mutable_nodes()->Reserve(static_cast<int>(g.num_nodes()));
  for (uint32_t node : canonical.order()) {
    const graph::Node& n = g.node(node);
    const Sha256Bytes& digest = canonical.digest(node);
    const absl::string_view bytes(reinterpret_cast<const char*>(digest.data()), digest.size());
    graph_hasher.Update(bytes);
    if (n.kind == graph::NodeKind::kInput) inputs_hasher.Update(bytes);
    v1::NodeKey* key = record.add_nodes();
    key->set_digest(bytes.data(), bytes.size());
    key->set_identity(Bytes(canonical.identity(node)));
    key->set_target(n.kind == graph::NodeKind::kInput ? "input" : g.target(n));
    key->set_name(g.name(n));
  }
  graph_hasher.Update("output");
  graph_hasher.Update(canonical.output_encoding());
  record.set_graph_digest(Bytes(graph_hasher.Finish()));
  record.set_inputs_digest(Bytes(inputs_hasher.Finish()));
  record.set_structure_digest(Bytes(Sha256(canonical.structure_encoding())));
  record.set_outputs_digest(Bytes(Sha256(canonical.output_encoding())));

  Sha256Hasher key;
  key.Update(absl::StrCat("kiln-compile-key/", kCanonicalFormat));
  key.Update(record.toolchain_digest());
  key.Update(record.options_digest());
  key.Update(record.graph_digest());
  record.set_compile_key(key.FinishHex());
  return record;
}

absl::StatusOr<KeyedGraph> KeyGraph(const v1::Graph& proto, const v1::CompileOptions& options,
                                    const Toolchain& toolchain) {
  if (absl::Status s = ValidateOptions(options); !s.ok()) return s;
  absl::StatusOr<graph::Graph> imported = graph::Import(proto);
  if (!imported.ok()) return imported.status();
  KeyedGraph out;
  out.graph = std::make_unique<graph::Graph>(*std::move(imported));
  out.canonical = std::make_unique<CanonicalGraph>(*out.graph);
  out.options = options;
  absl::StatusOr<v1::KeyRecord> record = ComputeKeyRecord(*out.canonical, options, toolchain);
  if (!record.ok()) return record.status();
  out.record = *std::move(record);
  return out;
}

}  // namespace kiln::canon
