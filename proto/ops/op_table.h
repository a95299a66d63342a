#pragma once

// How the family files (families/*.cc) declare the registry's entries: schemas in the aten
// schema language, each with the traits the schema does not say itself. The registry
// derives the rest (mutated parameters, collective and attention layouts, `ordered`).
// Internal to kiln_ops: everyone else reads the table through registry.h.

#include <vector>

#include "absl/types/span.h"
#include "proto/ops/registry.h"

namespace kiln::ops {

// The declared traits of an entry (see Op in registry.h).
struct Traits {
  bool pointwise = false;
  bool reduction = false;
  int view_of = -1;
  bool view_within_base = true;
  bool extern_call = false;
  bool extern_when_stored = false;
  bool collective = false;
  bool attention = false;
  bool random = false;
  bool capture_safe = true;
};

// The entries of the registry as the family files add them. A malformed schema aborts: the
// schemas are Kiln's own source text, so the first test that reads the registry catches it.
class OpTable {
 public:
  // Adds one entry per schema, each with `traits`.
  void Add(const Traits& traits, absl::Span<const char* const> schemas);

  std::vector<Op>& ops() { return ops_; }

 private:
  std::vector<Op> ops_;
};

// Each family file adds its entries.
void AddScalarOps(OpTable& table);  // Python operators on symbolic scalars, shape queries
void AddCollectiveOps(OpTable& table);
void AddPointwiseOps(OpTable& table);
void AddReductionOps(OpTable& table);  // and the softmax family
void AddViewOps(OpTable& table);
void AddCopyOps(OpTable& table);  // copies, casts, concatenation, padding, sorting
void AddIndexingOps(OpTable& table);
void AddFactoryOps(OpTable& table);
void AddRandomOps(OpTable& table);
void AddLinalgOps(OpTable& table);  // matrix products and convolution
void AddNnOps(OpTable& table);      // pooling, normalization, losses
void AddAttentionOps(OpTable& table);

}  // namespace kiln::ops
