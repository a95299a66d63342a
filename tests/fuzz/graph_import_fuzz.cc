// libFuzzer target over graph import and compile keys: bytes -> kiln.v1.Graph -> Import ->
// canonical form -> key record -> Explain. Seeded with the shared real graphs in binary
// form (corpus/graph_import), so byte mutations also explore near-real graphs. No input
// may crash, hang or trip a sanitizer; an imported graph must key deterministically.

#include <cstdint>
#include <cstdlib>

#include "compiler/canon/compile_key.h"
#include "compiler/canon/explain.h"
#include "compiler/graph/import.h"
#include "kiln/v1/graph.pb.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  kiln::v1::Graph proto;
  if (!proto.ParseFromArray(data, static_cast<int>(size))) return 0;
  absl::StatusOr<kiln::graph::Graph> graph = kiln::graph::Import(proto);
  if (!graph.ok()) {
    if (graph.status().code() != absl::StatusCode::kInvalidArgument) std::abort();
    return 0;
  }
  kiln::v1::CompileOptions options;
  options.set_target("x86_64");
  kiln::canon::CanonicalGraph canonical(*graph);
  absl::StatusOr<kiln::v1::KeyRecord> record = kiln::canon::ComputeKeyRecord(canonical, options);
  if (!record.ok()) std::abort();
  // Keys are deterministic, and Explain copes with anything that keys.
  kiln::canon::CanonicalGraph again(*graph);
  absl::StatusOr<kiln::v1::KeyRecord> second = kiln::canon::ComputeKeyRecord(again, options);
  if (!second.ok() || second->compile_key() != record->compile_key()) std::abort();
  for (uint32_t n = 0; n < graph->num_nodes(); ++n) (void)canonical.Fields(n);
  (void)canonical.OutputFields();
  (void)kiln::canon::Explain(*record, *second);
  return 0;
}
