#include "tests/compiler/graph_testing.h"

#include <google/protobuf/text_format.h>
#include <gtest/gtest.h>

#include "proto/fx/capture_import.h"
#include "tests/testing/test_env.h"

namespace kiln::testing {

std::vector<NamedGraph> LoadSharedGraphs() {
  std::vector<NamedGraph> out;
  for (const std::string& path : GraphFiles()) {
    NamedGraph g;
    g.name = path.substr(path.rfind('/') + 1);
    g.graph = LoadSharedGraph(g.name);
    out.push_back(std::move(g));
  }
  EXPECT_FALSE(out.empty()) << "no graphs under " << GraphsDir();
  return out;
}

v1::Graph SmallGraph() {
  constexpr char kText[] = R"pb(
    inputs {
      name: "x"
      role: INPUT_ROLE_USER_INPUT
      meta {
        tensor {
          sizes { value: 4 }
          sizes { value: 8 }
          strides { value: 8 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    nodes {
      name: "t"
      target: "aten.t.default"
      args { ref { node: "x" } }
      outputs {
        tensor {
          sizes { value: 8 }
          sizes { value: 4 }
          strides { value: 1 }
          strides { value: 8 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    nodes {
      name: "mm"
      target: "aten.mm.default"
      args { ref { node: "x" } }
      args { ref { node: "t" } }
      outputs {
        tensor {
          sizes { value: 4 }
          sizes { value: 4 }
          strides { value: 4 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    nodes {
      name: "s"
      target: "aten.sum.dim_IntList"
      args { ref { node: "mm" } }
      args { list { items { int_value: 1 } } }
      args { bool_value: true }
      outputs {
        tensor {
          sizes { value: 4 }
          sizes { value: 1 }
          strides { value: 1 }
          strides { value: 1 }
          storage_offset { value: 0 }
          dtype: DTYPE_FLOAT32
          device { type: "cuda" index: 0 }
        }
      }
    }
    output {
      list {
        items { ref { node: "mm" } }
        items { ref { node: "s" } }
      }
    }
  )pb";
  v1::Graph g;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(kText, &g));
  return g;
}

}  // namespace kiln::testing
