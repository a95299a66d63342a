#pragma once

// The canonical form of an imported graph: an order of its nodes and a naming of its
// symbols and process groups that depend only on what the graph computes, and a byte
// encoding of every node in that form. Compile keys hash these encodings.
//
// Canonical order: graph inputs first, in calling order (the calling convention is part of
// the meaning). Then the calls in a topological order where, among the nodes ready at each
// step, the one with the smallest identity comes first. A node's identity is the SHA-256
// of its content (op, arguments, output metadata) and its operands' identities, so it does
// not depend on names or on where the node sits in the proto. Ops whose relative order is
// part of their meaning (collectives, random draws, mutation, and unknown ops, which may
// be any of those) are chained in their original order: that order is kept, and a change
// to it changes the key. Nodes with equal identities compute the same thing from the same
// operands, so which of them comes first does not change the encoding.
//
// Names: symbols are renamed by first appearance in canonical order ("s77" -> "s0", kind
// prefixes kept), process groups (`group_name` of _c10d_functional ops) by first
// appearance among the ordered ops ("pg0", "pg1", ...). Left out: node and input names,
// stack traces, symbol hints and ranges, guards (a key holds several guarded variants),
// device indices (ranks on cuda:0 and cuda:3 share entries).
//
// Immutable once built; thread-safe to read. Borrows the Graph, which must outlive it.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/types/span.h"
#include "compiler/graph/graph.h"
#include "proto/base/digest.h"

namespace kiln::canon {

// The encoding's version: bump it whenever encodings change, so old keys stop matching.
// 2: list defaults an FX node omits are bound in place (1 shifted the node's arguments).
// 3: the attention ops that draw dropout masks are ordered (2 let them trade places with
//    other random ops, whose Philox streams then differed under one key).
inline constexpr uint32_t kCanonicalFormat = 3;

// One field of a node, for explanations: where it is, what to compare, what to print.
struct NodeField {
  std::string path;     // "target", "args[1]", "outputs[0].sizes[2]", "meta.dtype", ...
  std::string label;    // for sentences: "arg 1 (other)", "outputs[0].sizes[2]"
  std::string compare;  // equal across graphs exactly when the field means the same
  std::string display;  // the value for people: "2.0", "%5 (view_3)", "torch.float32"
};

class CanonicalGraph {
 public:
  explicit CanonicalGraph(const graph::Graph& graph);

  const graph::Graph& graph() const { return graph_; }

  // Node indices in canonical order, and each node's canonical position.
  absl::Span<const uint32_t> order() const { return order_; }
  uint32_t position(uint32_t node) const { return position_[node]; }

  // By node index: the identity (position-independent) and the canonical digest (with
  // operands by position and final symbol names).
  const Sha256Bytes& identity(uint32_t node) const { return identity_[node]; }
  const Sha256Bytes& digest(uint32_t node) const { return digest_[node]; }

  // The canonical encoding of the graph's output (refs by canonical position).
  const std::string& output_encoding() const { return output_encoding_; }
  // The edges alone: for each node in canonical order, its operands' positions.
  const std::string& structure_encoding() const { return structure_encoding_; }

  // Canonical symbol names by original name ("s77" -> "s0"), for every symbol the graph uses.
  const absl::flat_hash_map<std::string, std::string>& symbol_names() const {
    return symbol_names_;
  }

  // The canonical name of the process group that arg `arg_index` of node `node` names
  // ("pg0", "pg1", ... in order of first use), or "" when that arg names no process group.
  std::string ProcessGroupName(uint32_t node, uint32_t arg_index) const;

  // The node's fields in a fixed order, for comparing two nodes field by field.
  std::vector<NodeField> Fields(uint32_t node) const;
  // The graph output's elements, as fields "output[i]".
  std::vector<NodeField> OutputFields() const;

 private:
  enum class Mode { kIdentity, kFinal };

  void NameProcessGroups();
  void NameSymbols(uint32_t node);
  // Prints every expression with the symbol names known so far.
  void RenderExprs();
  void ComputeIdentities();
  void ComputeOrder();
  void ComputeDigests();

  bool IsGroupName(const graph::Node& n, uint32_t arg_index) const;
  void Encode(uint32_t node, Mode mode, std::string* out) const;
  void EncodeArg(const graph::Arg& a, Mode mode, bool group_name, std::string* out) const;
  void EncodeValue(const graph::Value& v, Mode mode, std::string* out) const;
  void EncodeSymInt(const graph::SymInt& s, Mode mode, std::string* out) const;
  std::string ArgText(const graph::Arg& a, bool group_name, bool for_compare) const;
  std::string SymIntText(const graph::SymInt& s) const;
  void ValueFields(const graph::Value& v, const std::string& prefix,
                   std::vector<NodeField>* out) const;

  const graph::Graph& graph_;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> position_;
  std::vector<Sha256Bytes> identity_;
  std::vector<Sha256Bytes> digest_;
  std::vector<int32_t> effect_pred_;                            // the previous ordered node, or -1
  absl::flat_hash_map<uint32_t, uint32_t> group_index_;         // string id -> canonical index
  std::vector<std::vector<std::string>> free_symbols_;          // by expression id
  absl::flat_hash_map<std::string, std::string> symbol_names_;  // original -> canonical
  std::vector<std::string> expr_text_;  // by expression id, in the current mode's names
  std::string output_encoding_;
  std::string structure_encoding_;
};

}  // namespace kiln::canon
