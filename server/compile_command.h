#pragma once

// `kilnd compile GRAPH [--target T] [--check]`: compiles one graph file offline (a
// kiln.v1.Graph in binary or JSON form, or the FX capture JSON) and prints its compile key
// and a plan summary; with --check, runs the artifact against the reference interpreter at
// the symbols' hints and at other values inside their ranges that satisfy the guards.

#include <string>

namespace kiln::server {

struct CompileCommand {
  std::string graph_path;
  std::string target = "x86_64";
  bool check = false;
};

// Returns the process exit code: 0 compiled (and checked), 1 failed.
int RunCompileCommand(const CompileCommand& command);

}  // namespace kiln::server
