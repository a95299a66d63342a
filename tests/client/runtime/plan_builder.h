#pragma once

// Builds CompiledGraphs by hand for the CPU runtime's tests, standing in for the compiler:
// modules from real shared-object bytes, kernels, buffers, steps and outputs, with sizes
// written as integers or sympy-form expressions.

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "client/runtime/tensor.h"
#include "kiln/v1/artifact.pb.h"
#include "proto/base/digest.h"

namespace kiln::runtime::testing {

// An integer or a symbolic expression.
using Sz = std::variant<int64_t, std::string>;

inline v1::SymInt S(const Sz& s) {
  v1::SymInt out;
  if (const auto* i = std::get_if<int64_t>(&s)) {
    out.set_value(*i);
  } else {
    out.set_expr(std::get<std::string>(s));
  }
  return out;
}

inline v1::TensorView View(int buffer, std::vector<Sz> sizes, std::vector<Sz> strides,
                           Sz offset = int64_t{0}, DType dtype = v1::DTYPE_FLOAT32) {
  v1::TensorView v;
  v.set_buffer(buffer);
  for (const Sz& s : sizes) *v.add_sizes() = S(s);
  for (const Sz& s : strides) *v.add_strides() = S(s);
  *v.mutable_offset() = S(offset);
  v.set_dtype(dtype);
  return v;
}

inline v1::TensorView NoView() {
  v1::TensorView v;
  v.set_buffer(-1);
  return v;
}

inline v1::CallArgument TensorArg(v1::TensorView v) {
  v1::CallArgument a;
  *a.mutable_tensor() = std::move(v);
  return a;
}
inline v1::CallArgument IntArg(int64_t i) {
  v1::CallArgument a;
  a.mutable_value()->set_int_value(i);
  return a;
}
inline v1::CallArgument FloatArg(double d) {
  v1::CallArgument a;
  a.mutable_value()->set_float_value(d);
  return a;
}
inline v1::CallArgument BoolArg(bool b) {
  v1::CallArgument a;
  a.mutable_value()->set_bool_value(b);
  return a;
}
inline v1::CallArgument StringArg(const std::string& s) {
  v1::CallArgument a;
  a.mutable_value()->set_string_value(s);
  return a;
}
inline v1::CallArgument SymArg(const std::string& expr) {
  v1::CallArgument a;
  a.mutable_value()->mutable_symbolic()->set_expr(expr);
  a.mutable_value()->mutable_symbolic()->set_kind(v1::SYM_KIND_INT);
  return a;
}
inline v1::CallArgument IntsArg(const std::vector<int64_t>& v) {
  v1::CallArgument a;
  for (int64_t i : v) a.mutable_value()->mutable_list()->add_items()->set_int_value(i);
  return a;
}

inline v1::KernelParam BufferParam(int b) {
  v1::KernelParam p;
  p.set_kind(v1::PARAM_KIND_BUFFER);
  p.set_buffer(b);
  return p;
}
inline v1::KernelParam SymbolParam(const std::string& s) {
  v1::KernelParam p;
  p.set_kind(v1::PARAM_KIND_SYMBOL);
  p.set_symbol(s);
  return p;
}
inline v1::KernelParam IntParam(int64_t v) {
  v1::KernelParam p;
  p.set_kind(v1::PARAM_KIND_SCALAR);
  p.mutable_scalar()->set_int_value(v);
  return p;
}
inline v1::KernelParam DoubleParam(double v) {
  v1::KernelParam p;
  p.set_kind(v1::PARAM_KIND_SCALAR);
  p.mutable_scalar()->set_float_value(v);
  return p;
}
inline v1::KernelParam RngParam(v1::ParamKind kind) {
  v1::KernelParam p;
  p.set_kind(kind);
  return p;
}

class PlanBuilder {
 public:
  PlanBuilder() { g_.set_target("x86_64"); }

  v1::CompiledGraph& graph() { return g_; }

  int Module(const std::string& bytes) {
    v1::CodeModule* m = g_.add_modules();
    m->set_target("x86_64");
    m->set_kind(v1::BINARY_KIND_SHARED_OBJECT);
    m->set_binary(bytes);
    *m->mutable_digest() = DigestOf(bytes);
    return g_.modules_size() - 1;
  }
  int Kernel(int module, const std::string& name, std::vector<v1::KernelParam> params, Sz grid) {
    v1::Kernel* k = g_.add_kernels();
    k->set_name(name);
    k->set_module(module);
    for (auto& p : params) *k->add_params() = p;
    *k->mutable_launch()->add_grid() = S(grid);
    return g_.kernels_size() - 1;
  }
  void Symbol(const std::string& name, int input, int dim, bool from_stride = false) {
    g_.add_symbols(name);
    v1::SymbolSource* s = g_.add_symbol_sources();
    s->set_symbol(name);
    s->set_input_index(input);
    s->set_dim(dim);
    s->set_from_stride(from_stride);
  }
  void TensorInput(const std::string& name, DType dtype, std::vector<Sz> sizes,
                   std::vector<Sz> strides) {
    v1::InputSpec* in = g_.add_inputs();
    in->set_name(name);
    in->set_dtype(dtype);
    for (const Sz& s : sizes) *in->add_sizes() = S(s);
    for (const Sz& s : strides) *in->add_strides() = S(s);
  }
  void SymbolicInput(const std::string& name) {
    v1::InputSpec* in = g_.add_inputs();
    in->set_name(name);
    in->set_symbolic(true);
    in->set_dtype(v1::DTYPE_INT64);
  }
  int Buffer(v1::BufferKind kind, Sz size_bytes, DType dtype, const std::string& name,
             int input_index = 0, Sz arena_offset = int64_t{0}) {
    v1::Buffer* b = g_.add_buffers();
    b->set_kind(kind);
    *b->mutable_size_bytes() = S(size_bytes);
    b->set_alignment(kind == v1::BUFFER_KIND_INPUT ? 4 : 64);
    b->set_dtype(dtype);
    b->set_name(name);
    if (kind == v1::BUFFER_KIND_INPUT) b->set_input_index(input_index);
    if (kind == v1::BUFFER_KIND_INTERMEDIATE || kind == v1::BUFFER_KIND_WORKSPACE) {
      *b->mutable_arena_offset() = S(arena_offset);
    }
    return g_.buffers_size() - 1;
  }
  void Launch(int kernel) { g_.add_steps()->mutable_launch()->set_kernel(kernel); }
  v1::ExternStep* Extern(const std::string& op, const std::string& node) {
    v1::ExternStep* e = g_.add_steps()->mutable_extern_call();
    e->set_op(op);
    e->set_node(node);
    return e;
  }
  v1::FallbackStep* Fallback(const std::string& op, const std::string& node) {
    v1::FallbackStep* f = g_.add_steps()->mutable_fallback();
    f->set_op(op);
    f->set_node(node);
    f->set_reason("no lowering in this test");
    return f;
  }
  void Copy(v1::TensorView src, v1::TensorView dst) {
    v1::CopyStep* c = g_.add_steps()->mutable_copy();
    *c->mutable_src() = std::move(src);
    *c->mutable_dst() = std::move(dst);
  }
  void WriteBack(int input, v1::TensorView src) {
    v1::WriteBackStep* w = g_.add_steps()->mutable_write_back();
    w->set_input_index(input);
    *w->mutable_src() = std::move(src);
  }
  void Free(int buffer) { g_.add_steps()->mutable_free()->set_buffer(buffer); }
  v1::OutputBinding* Output(v1::TensorView view) {
    v1::OutputBinding* o = g_.add_outputs();
    *o->mutable_view() = std::move(view);
    return o;
  }
  void SymbolOutput(const std::string& expr) { g_.add_outputs()->set_symbol(expr); }
  void NoneOutput() { g_.add_outputs()->set_none(true); }

 private:
  v1::CompiledGraph g_;
};

}  // namespace kiln::runtime::testing
