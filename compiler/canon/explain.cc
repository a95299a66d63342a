#include "compiler/canon/explain.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "proto/base/digest.h"

namespace kiln::canon {
namespace {

struct FieldDiff {
  std::string path;
  std::string label;
  std::string a;
  std::string b;
};

// The first field at which two field lists differ.
std::optional<FieldDiff> FirstDifference(const std::vector<NodeField>& a,
                                         const std::vector<NodeField>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i].path != b[i].path) {
      return FieldDiff{a[i].path, a[i].label, a[i].path, b[i].path};
    }
    if (a[i].compare != b[i].compare) {
      return FieldDiff{a[i].path, a[i].label, a[i].display, b[i].display};
    }
  }
  if (a.size() != b.size()) {
    const NodeField& extra = a.size() > b.size() ? a[n] : b[n];
    return FieldDiff{extra.path, extra.label, a.size() > n ? a[n].display : "(nothing)",
                     b.size() > n ? b[n].display : "(nothing)"};
  }
  return std::nullopt;
}

std::vector<NodeField> OptionFields(const v1::CompileOptions& o) {
  std::vector<NodeField> out;
  auto add = [&](const std::string& path, const std::string& text) {
    out.push_back({path, path, text, text});
  };
  add("target", o.target());
  add("require_cudagraph", o.require_cudagraph() ? "true" : "false");
  const v1::PrecisionPolicy p = o.precision() == v1::PRECISION_POLICY_UNSPECIFIED
                                    ? v1::PRECISION_POLICY_STRICT
                                    : o.precision();
  add("precision", v1::PrecisionPolicy_Name(p));
  std::map<std::string, std::string> sorted(o.backend_options().begin(), o.backend_options().end());
  add("backend_options", absl::StrCat(sorted.size(), " entries"));
  for (const auto& [k, v] : sorted) add(absl::StrCat("backend_options[", k, "]"), v);
  return out;
}

class Explainer {
 public:
  Explainer(const v1::KeyRecord& a, const v1::KeyRecord& b, const KeyedGraph* ga,
            const KeyedGraph* gb)
      : a_(a), b_(b), ga_(ga), gb_(gb) {}

  v1::ExplainResponse Run() {
    if (a_.compile_key() == b_.compile_key()) {
      out_.set_equal(true);
      out_.set_description(absl::StrCat("the keys are equal: ", a_.compile_key()));
      return out_;
    }
    if (a_.format() != b_.format()) {
      return Component("format",
                       absl::StrCat("encoding format ", a_.format(), " vs ", b_.format()));
    }
    if (a_.toolchain_digest() != b_.toolchain_digest()) {
      return Component("toolchain", absl::StrCat(a_.toolchain(), " vs ", b_.toolchain()));
    }
    if (a_.options_digest() != b_.options_digest()) return Options();
    if (a_.inputs_digest() != b_.inputs_digest() || a_.num_inputs() != b_.num_inputs()) {
      return Inputs();
    }
    if (a_.graph_digest() != b_.graph_digest()) {
      if (auto r = Nodes(); r.has_value()) return *r;
      if (a_.outputs_digest() != b_.outputs_digest()) return Outputs();
    }
    return Component("graph", "the graphs differ, but no single node or output explains it");
  }

 private:
  v1::ExplainResponse Component(const std::string& component, const std::string& what) {
    out_.set_equal(false);
    out_.set_component(component);
    out_.set_description(absl::StrCat("differs in component ", component, ": ", what));
    return out_;
  }

  v1::ExplainResponse Options() {
    out_.set_component("options");
    if (ga_ != nullptr && gb_ != nullptr) {
      if (auto d = FirstDifference(OptionFields(ga_->options), OptionFields(gb_->options))) {
        out_.set_field(d->path);
        out_.set_description(absl::StrCat("differs in component options, field ", d->label, ": ",
                                          d->a, " vs ", d->b));
        return out_;
      }
    }
    out_.set_description("differs in component options");
    return out_;
  }

  std::string NodeName(int pos_a, int pos_b) const {
    const std::string a = pos_a >= 0 ? a_.nodes(pos_a).name() : "-";
    const std::string b = pos_b >= 0 ? b_.nodes(pos_b).name() : "-";
    return absl::StrCat("%", pos_a >= 0 ? pos_a : pos_b, " (", a, " vs ", b, ")");
  }

  // Reports node `pos_a` of A against node `pos_b` of B (either may be -1: no counterpart).
  v1::ExplainResponse NodeDifference(const std::string& component, int pos_a, int pos_b) {
    out_.set_component(component);
    const int pos = pos_a >= 0 ? pos_a : pos_b;
    out_.set_node_index(pos);
    out_.set_node(NodeName(pos_a, pos_b));
    const std::string target = pos_a >= 0 ? a_.nodes(pos_a).target() : b_.nodes(pos_b).target();
    std::string where = absl::StrCat("differs in component ", component, ", first at node ", pos,
                                     " (", target, ")");
    if (pos_a < 0 || pos_b < 0) {
      out_.set_description(absl::StrCat(where, ", which only ", pos_a < 0 ? "B" : "A", " has"));
      return out_;
    }
    if (ga_ != nullptr && gb_ != nullptr) {
      const uint32_t na = ga_->canonical->order()[pos_a];
      const uint32_t nb = gb_->canonical->order()[pos_b];
      if (auto d = FirstDifference(ga_->canonical->Fields(na), gb_->canonical->Fields(nb))) {
        out_.set_field(d->path);
        out_.set_description(absl::StrCat(where, " ", d->label, ": ", d->a, " vs ", d->b));
        return out_;
      }
    }
    out_.set_description(where);
    return out_;
  }

  v1::ExplainResponse Inputs() {
    if (a_.num_inputs() != b_.num_inputs()) {
      out_.set_component("inputs");
      out_.set_field("inputs");
      out_.set_description(absl::StrCat("differs in component inputs: ", a_.num_inputs(), " vs ",
                                        b_.num_inputs(), " inputs"));
      return out_;
    }
    for (int i = 0; i < a_.num_inputs(); ++i) {
      if (a_.nodes(i).digest() != b_.nodes(i).digest()) return NodeDifference("inputs", i, i);
    }
    return Component("inputs", "the inputs differ");
  }

  // The first call of each graph whose identity the other graph lacks: a change to one node
  // changes its identity and its dependents', all of which come after it.
  std::optional<v1::ExplainResponse> Nodes() {
    const int first = a_.num_inputs();
    auto unmatched = [first](const v1::KeyRecord& x, const v1::KeyRecord& y) {
      absl::flat_hash_map<std::string, int> available;
      for (int i = first; i < y.nodes_size(); ++i) ++available[y.nodes(i).identity()];
      for (int i = first; i < x.nodes_size(); ++i) {
        auto it = available.find(x.nodes(i).identity());
        if (it == available.end() || it->second == 0) return i;
        --it->second;
      }
      return -1;
    };
    const int ua = unmatched(a_, b_);
    const int ub = unmatched(b_, a_);
    if (ua >= 0 || ub >= 0) return NodeDifference("graph", ua, ub);
    // Same computations; a difference only the final naming sees (unbacked symbols).
    for (int i = first; i < std::min(a_.nodes_size(), b_.nodes_size()); ++i) {
      if (a_.nodes(i).digest() != b_.nodes(i).digest()) return NodeDifference("graph", i, i);
    }
    return std::nullopt;
  }

  v1::ExplainResponse Outputs() {
    out_.set_component("outputs");
    if (ga_ != nullptr && gb_ != nullptr) {
      if (auto d =
              FirstDifference(ga_->canonical->OutputFields(), gb_->canonical->OutputFields())) {
        out_.set_field(d->path);
        out_.set_description(
            absl::StrCat("differs in component outputs, ", d->label, ": ", d->a, " vs ", d->b));
        return out_;
      }
    }
    out_.set_description("differs in component outputs");
    return out_;
  }

  const v1::KeyRecord& a_;
  const v1::KeyRecord& b_;
  const KeyedGraph* ga_;
  const KeyedGraph* gb_;
  v1::ExplainResponse out_;
};

}  // namespace

v1::ExplainResponse Explain(const v1::KeyRecord& a, const v1::KeyRecord& b) {
  return Explainer(a, b, nullptr, nullptr).Run();
}

v1::ExplainResponse Explain(const KeyedGraph& a, const KeyedGraph& b) {
  return Explainer(a.record, b.record, &a, &b).Run();
}

}  // namespace kiln::canon
