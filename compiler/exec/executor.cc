#include "compiler/exec/executor.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <map>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "compiler/interp/dtype.h"
#include "compiler/sym/expr.h"
#include "proto/base/digest.h"
#include "proto/dtype.h"
#include "proto/kernel_abi.h"

namespace kiln::exec {
namespace {

using interp::Tensor;

int ItemSize(v1::DType d) { return static_cast<int>(kiln::ElementSize(d)); }

uint16_t FloatToHalf(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((x >> 23) & 0xFF) - 127 + 15;
  uint32_t mant = x & 0x7FFFFF;
  if (((x >> 23) & 0xFF) == 0xFF) return static_cast<uint16_t>(sign | 0x7C00 | (mant ? 0x200 : 0));
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7C00);
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    const int shift = 14 - exp;
    uint32_t h = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (h & 1))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = (static_cast<uint32_t>(exp) << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1FFF;
  if (rem > 0x1000 || (rem == 0x1000 && (h & 1))) ++h;
  return static_cast<uint16_t>(sign | h);
}

float HalfToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  float f;
  if (exp == 0) {
    f = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    f = mant ? std::nanf("") : INFINITY;
  } else {
    f = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  }
  return sign ? -f : f;
}

void WriteElement(uint8_t* p, v1::DType d, double v, int64_t iv, bool is_int) {
  switch (d) {
    case v1::DTYPE_FLOAT32: {
      float f = static_cast<float>(is_int ? static_cast<double>(iv) : v);
      std::memcpy(p, &f, 4);
      break;
    }
    case v1::DTYPE_FLOAT64: {
      double f = is_int ? static_cast<double>(iv) : v;
      std::memcpy(p, &f, 8);
      break;
    }
    case v1::DTYPE_FLOAT16: {
      uint16_t h = FloatToHalf(static_cast<float>(is_int ? static_cast<double>(iv) : v));
      std::memcpy(p, &h, 2);
      break;
    }
    case v1::DTYPE_BFLOAT16: {
      float f = static_cast<float>(is_int ? static_cast<double>(iv) : v);
      uint32_t x;
      std::memcpy(&x, &f, 4);
      uint16_t b =
          std::isnan(f) ? 0x7FC0 : static_cast<uint16_t>((x + 0x7FFF + ((x >> 16) & 1)) >> 16);
      std::memcpy(p, &b, 2);
      break;
    }
    default: {
      int64_t i = is_int ? iv : static_cast<int64_t>(v);
      const int n = ItemSize(d);
      if (d == v1::DTYPE_BOOL) i = i != 0;
      std::memcpy(p, &i, static_cast<size_t>(n));  // little-endian truncation
      break;
    }
  }
}

// Reads one element as (double, int64).
void ReadElement(const uint8_t* p, v1::DType d, double* v, int64_t* iv) {
  switch (d) {
    case v1::DTYPE_FLOAT32: {
      float f;
      std::memcpy(&f, p, 4);
      *v = f;
      return;
    }
    case v1::DTYPE_FLOAT64:
      std::memcpy(v, p, 8);
      return;
    case v1::DTYPE_FLOAT16: {
      uint16_t h;
      std::memcpy(&h, p, 2);
      *v = HalfToFloat(h);
      return;
    }
    case v1::DTYPE_BFLOAT16: {
      uint16_t b;
      std::memcpy(&b, p, 2);
      uint32_t x = static_cast<uint32_t>(b) << 16;
      float f;
      std::memcpy(&f, &x, 4);
      *v = f;
      return;
    }
    case v1::DTYPE_INT64:
      std::memcpy(iv, p, 8);
      break;
    case v1::DTYPE_INT32: {
      int32_t i;
      std::memcpy(&i, p, 4);
      *iv = i;
      break;
    }
    case v1::DTYPE_INT16: {
      int16_t i;
      std::memcpy(&i, p, 2);
      *iv = i;
      break;
    }
    case v1::DTYPE_INT8:
      *iv = static_cast<int8_t>(*p);
      break;
    case v1::DTYPE_UINT8:
      *iv = *p;
      break;
    case v1::DTYPE_BOOL:
      *iv = *p;
      break;
    default:
      *iv = 0;
      break;
  }
  *v = static_cast<double>(*iv);
}

class Executor {
 public:
  Executor(const v1::CompiledGraph& a, absl::Span<const interp::Value> inputs, const ExecOptions& o)
      : a_(a), inputs_(inputs), o_(o) {}
  ~Executor() {
    if (handle_ != nullptr) dlclose(handle_);
  }

  absl::StatusOr<std::vector<interp::Value>> Run();

 private:
  absl::StatusOr<int64_t> Eval(const v1::SymInt& s) {
    if (s.kind_case() != v1::SymInt::kExpr) return s.value();
    auto e = sym::Parse(s.expr());
    if (!e.ok()) return e.status();
    return sym::EvaluateInt(**e, bindings_);
  }
  absl::Status Load();
  absl::Status BindSymbols();
  absl::Status Allocate();
  uint8_t* Base(int32_t buffer) { return base_[static_cast<size_t>(buffer)]; }

  struct ViewGeom {
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
  };
  absl::StatusOr<ViewGeom> Geom(const v1::TensorView& v) {
    ViewGeom g;
    for (const v1::SymInt& s : v.sizes()) {
      auto x = Eval(s);
      if (!x.ok()) return x.status();
      g.sizes.push_back(*x);
    }
    for (const v1::SymInt& s : v.strides()) {
      auto x = Eval(s);
      if (!x.ok()) return x.status();
      g.strides.push_back(*x);
    }
    auto off = Eval(v.offset());
    if (!off.ok()) return off.status();
    g.offset = *off;
    return g;
  }
  template <typename Fn>
  static void ForEach(const ViewGeom& g, Fn fn) {
    int64_t n = 1;
    for (int64_t s : g.sizes) n *= s;
    std::vector<int64_t> idx(g.sizes.size(), 0);
    for (int64_t e = 0; e < n; ++e) {
      int64_t pos = g.offset;
      for (size_t d = 0; d < idx.size(); ++d) pos += idx[d] * g.strides[d];
      fn(e, pos);
      for (size_t d = idx.size(); d-- > 0;) {
        if (++idx[d] < g.sizes[d]) break;
        idx[d] = 0;
      }
    }
  }
  absl::StatusOr<Tensor> ReadView(const v1::TensorView& v) {
    auto g = Geom(v);
    if (!g.ok()) return g.status();
    const v1::DType d = v.dtype();
    const int isz = ItemSize(d);
    uint8_t* base = Base(v.buffer());
    const bool ints = interp::StoresInts(d);
    std::vector<double> fv;
    std::vector<int64_t> iv;
    ForEach(*g, [&](int64_t, int64_t pos) {
      double x = 0;
      int64_t i = 0;
      ReadElement(base + pos * isz, d, &x, &i);
      fv.push_back(x);
      iv.push_back(i);
    });
    return ints ? Tensor::FromInts(g->sizes, d, iv) : Tensor::FromDoubles(g->sizes, d, fv);
  }
  absl::Status WriteView(const v1::TensorView& v, const Tensor& t) {
    auto g = Geom(v);
    if (!g.ok()) return g.status();
    const v1::DType d = v.dtype();
    const int isz = ItemSize(d);
    uint8_t* base = Base(v.buffer());
    const bool ints = interp::StoresInts(t.dtype());
    const std::vector<double> fv = ints ? std::vector<double>() : t.ToDoubles();
    const std::vector<int64_t> iv = ints ? t.ToInts() : std::vector<int64_t>();
    ForEach(*g, [&](int64_t e, int64_t pos) {
      WriteElement(base + pos * isz, d, ints ? 0 : fv[static_cast<size_t>(e)],
                   ints ? iv[static_cast<size_t>(e)] : 0, ints);
    });
    return absl::OkStatus();
  }
  absl::StatusOr<interp::Arg> ToArg(const v1::CallArgument& a);
  absl::StatusOr<interp::Arg> ValueArg(const v1::Argument& a);
  absl::Status Launch(int32_t kernel);
  absl::Status Call(const std::string& op,
                    const google::protobuf::RepeatedPtrField<v1::CallArgument>& args,
                    const google::protobuf::RepeatedPtrField<v1::NamedCallArgument>& kwargs,
                    const google::protobuf::RepeatedPtrField<v1::TensorView>& outputs,
                    int64_t rng_stream);

  const v1::CompiledGraph& a_;
  absl::Span<const interp::Value> inputs_;
  ExecOptions o_;
  void* handle_ = nullptr;
  std::vector<CpuKernelFn> fns_;
  sym::Bindings bindings_;
  std::vector<int64_t> symbol_values_;
  std::vector<std::vector<uint8_t>> owned_;
  std::vector<uint8_t> arena_;
  std::vector<uint8_t*> base_;
  std::vector<int64_t> size_;
};

absl::Status Executor::Load() {
  if (a_.modules_size() != 1) return absl::InvalidArgumentError("expected one code module");
  const v1::CodeModule& m = a_.modules(0);
  if (DigestOf(m.binary()).hash() != m.digest().hash()) {
    return absl::DataLossError("the module's bytes do not match its digest");
  }
  const int fd = memfd_create("kiln-kernels", MFD_CLOEXEC);
  if (fd < 0) return absl::InternalError("memfd_create failed");
  const std::string& bin = m.binary();
  size_t done = 0;
  while (done < bin.size()) {
    const ssize_t w = write(fd, bin.data() + done, bin.size() - done);
    if (w <= 0) {
      close(fd);
      return absl::InternalError("cannot write the shared object");
    }
    done += static_cast<size_t>(w);
  }
  const std::string path = absl::StrCat("/proc/self/fd/", fd);
  handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  close(fd);
  if (handle_ == nullptr) return absl::InternalError(absl::StrCat("dlopen: ", dlerror()));
  for (const v1::Kernel& k : a_.kernels()) {
    void* f = dlsym(handle_, k.name().c_str());
    if (f == nullptr)
      return absl::NotFoundError(absl::StrCat("kernel ", k.name(), " not exported"));
    fns_.push_back(reinterpret_cast<CpuKernelFn>(f));
  }
  return absl::OkStatus();
}

absl::Status Executor::BindSymbols() {
  for (const v1::SymbolSource& s : a_.symbol_sources()) {
    if (s.input_index() < 0 || static_cast<size_t>(s.input_index()) >= inputs_.size()) {
      return absl::InvalidArgumentError(absl::StrCat("symbol ", s.symbol(), " has no input"));
    }
    const interp::Value& v = inputs_[static_cast<size_t>(s.input_index())];
    int64_t value = 0;
    if (s.dim() < 0) {
      if (const int64_t* i = std::get_if<int64_t>(&v)) {
        value = *i;
      } else {
        return absl::InvalidArgumentError(
            absl::StrCat("input ", s.input_index(), " is not an int"));
      }
    } else {
      const Tensor* t = std::get_if<Tensor>(&v);
      if (t == nullptr) return absl::InvalidArgumentError("symbol source is not a tensor");
      value = s.from_stride() ? t->stride(s.dim()) : t->size(s.dim());
    }
    bindings_.symbols[s.symbol()] = value;
  }
  return absl::OkStatus();
}

absl::Status Executor::Allocate() {
  const size_t nb = static_cast<size_t>(a_.buffers_size());
  base_.assign(nb, nullptr);
  size_.assign(nb, 0);
  owned_.resize(nb);
  auto ws = Eval(a_.cudagraph().workspace_bytes());
  if (!ws.ok()) return ws.status();
  arena_.assign(static_cast<size_t>(std::max<int64_t>(*ws, 0)) + 64, 0xFF);
  for (size_t b = 0; b < nb; ++b) {
    const v1::Buffer& buf = a_.buffers(static_cast<int>(b));
    auto bytes = Eval(buf.size_bytes());
    if (!bytes.ok()) return bytes.status();
    size_[b] = std::max<int64_t>(*bytes, 0);
    if (buf.kind() == v1::BUFFER_KIND_INTERMEDIATE) {
      auto off = Eval(buf.arena_offset());
      if (!off.ok()) return off.status();
      if (*off + size_[b] > *ws)
        return absl::InternalError(absl::StrCat("buffer ", b, " exceeds the arena"));
      base_[b] = arena_.data() + *off;
      continue;
    }
    owned_[b].assign(static_cast<size_t>(size_[b]) + 64, 0xFF);
    base_[b] = owned_[b].data();
    if (buf.kind() == v1::BUFFER_KIND_INPUT) {
      const interp::Value& v = inputs_[static_cast<size_t>(buf.input_index())];
      const Tensor* t = std::get_if<Tensor>(&v);
      if (t == nullptr) return absl::InvalidArgumentError("a buffer input is not a tensor");
      ViewGeom g;
      g.sizes = t->sizes();
      g.strides = t->strides();
      g.offset = 0;  // the buffer starts at the tensor's first element
      const bool ints = interp::StoresInts(t->dtype());
      const std::vector<double> fv = ints ? std::vector<double>() : t->ToDoubles();
      const std::vector<int64_t> iv = ints ? t->ToInts() : std::vector<int64_t>();
      const int isz = ItemSize(buf.dtype());
      uint8_t* base = base_[b];
      const int64_t limit = size_[b];
      bool oob = false;
      ForEach(g, [&](int64_t e, int64_t pos) {
        if ((pos + 1) * isz > limit) {
          oob = true;
          return;
        }
        WriteElement(base + pos * isz, buf.dtype(), ints ? 0 : fv[static_cast<size_t>(e)],
                     ints ? iv[static_cast<size_t>(e)] : 0, ints);
      });
      if (oob)
        return absl::InvalidArgumentError(
            absl::StrCat("input ", buf.input_index(), " exceeds its buffer"));
    }
  }
  return absl::OkStatus();
}

absl::Status Executor::Launch(int32_t kernel) {
  const v1::Kernel& k = a_.kernels(kernel);
  std::vector<int64_t> scalars(static_cast<size_t>(k.params_size()));
  std::vector<void*> params(static_cast<size_t>(k.params_size()));
  for (int i = 0; i < k.params_size(); ++i) {
    const v1::KernelParam& p = k.params(i);
    switch (p.kind()) {
      case v1::PARAM_KIND_BUFFER:
        params[static_cast<size_t>(i)] = Base(p.buffer());
        break;
      case v1::PARAM_KIND_SYMBOL: {
        auto it = bindings_.symbols.find(p.symbol());
        if (it == bindings_.symbols.end()) return absl::InternalError("unbound kernel symbol");
        scalars[static_cast<size_t>(i)] = std::get<int64_t>(it->second);
        params[static_cast<size_t>(i)] = &scalars[static_cast<size_t>(i)];
        break;
      }
      case v1::PARAM_KIND_RNG_SEED:
        scalars[static_cast<size_t>(i)] = static_cast<int64_t>(o_.rng_seed);
        params[static_cast<size_t>(i)] = &scalars[static_cast<size_t>(i)];
        break;
      case v1::PARAM_KIND_RNG_OFFSET:
        scalars[static_cast<size_t>(i)] = static_cast<int64_t>(o_.rng_offset);
        params[static_cast<size_t>(i)] = &scalars[static_cast<size_t>(i)];
        break;
      default:
        return absl::UnimplementedError("kernel parameter kind");
    }
  }
  auto grid = Eval(k.launch().grid(0));
  if (!grid.ok()) return grid.status();
  const int64_t n = std::max<int64_t>(*grid, 0);
  const int64_t pieces = std::max(1, o_.pieces);
  std::vector<std::pair<int64_t, int64_t>> ranges;
  for (int64_t i = 0; i < pieces; ++i) {
    const int64_t b = n * i / pieces, e = n * (i + 1) / pieces;
    if (e > b) ranges.emplace_back(b, e);
  }
  CpuKernelFn fn = fns_[static_cast<size_t>(kernel)];
  if (o_.threads <= 1) {
    for (auto [b, e] : ranges) fn(params.data(), b, e);
  } else {
    std::vector<std::thread> threads;
    for (auto [b, e] : ranges) threads.emplace_back([&, b = b, e = e] { fn(params.data(), b, e); });
    for (std::thread& t : threads) t.join();
  }
  return absl::OkStatus();
}

absl::StatusOr<interp::Arg> Executor::ValueArg(const v1::Argument& a) {
  return interp::ArgFromArgument(a, [this](const v1::Argument& x) -> absl::StatusOr<interp::Arg> {
    if (x.kind_case() != v1::Argument::kSymbolic) {
      return absl::UnimplementedError("argument kind");
    }
    auto e = sym::Parse(x.symbolic().expr());
    if (!e.ok()) return e.status();
    auto v = sym::Evaluate(**e, bindings_);
    if (!v.ok()) return v.status();
    if (const int64_t* i = std::get_if<int64_t>(&*v)) return interp::Arg(*i);
    if (const double* d = std::get_if<double>(&*v)) return interp::Arg(*d);
    return interp::Arg(std::get<bool>(*v));
  });
}

absl::StatusOr<interp::Arg> Executor::ToArg(const v1::CallArgument& a) {
  switch (a.kind_case()) {
    case v1::CallArgument::kTensor: {
      auto t = ReadView(a.tensor());
      if (!t.ok()) return t.status();
      return interp::Arg(*std::move(t));
    }
    case v1::CallArgument::kValue:
      return ValueArg(a.value());
    case v1::CallArgument::kList: {
      interp::Arg::List items;
      for (const v1::CallArgument& x : a.list().items()) {
        auto i = ToArg(x);
        if (!i.ok()) return i.status();
        items.push_back(*std::move(i));
      }
      return interp::Arg(std::move(items));
    }
    default:
      return interp::Arg();
  }
}

absl::Status Executor::Call(const std::string& op,
                            const google::protobuf::RepeatedPtrField<v1::CallArgument>& args,
                            const google::protobuf::RepeatedPtrField<v1::NamedCallArgument>& kwargs,
                            const google::protobuf::RepeatedPtrField<v1::TensorView>& outputs,
                            int64_t rng_stream) {
  std::vector<interp::Arg> in;
  for (const v1::CallArgument& a : args) {
    auto x = ToArg(a);
    if (!x.ok()) return x.status();
    in.push_back(*std::move(x));
  }
  std::vector<std::pair<std::string, interp::Arg>> kw;
  for (const v1::NamedCallArgument& a : kwargs) {
    auto x = ToArg(a.value());
    if (!x.ok()) return x.status();
    kw.emplace_back(a.name(), *std::move(x));
  }
  interp::RunOptions ro;
  ro.rng_seed = o_.rng_seed;
  ro.rng_offset = o_.rng_offset;
  ro.follow_meta = false;
  for (const auto& [name, v] : bindings_.symbols) {
    if (const int64_t* i = std::get_if<int64_t>(&v)) ro.symbols[name] = *i;
  }
  auto results = interp::RunOp(op, std::move(in), std::move(kw), ro,
                               rng_stream < 0 ? 0 : static_cast<uint64_t>(rng_stream));
  if (!results.ok()) return results.status();
  for (int i = 0; i < outputs.size(); ++i) {
    if (outputs[i].buffer() < 0) continue;
    if (static_cast<size_t>(i) >= results->size())
      return absl::InternalError(absl::StrCat(op, ": too few results"));
    const Tensor* t = std::get_if<Tensor>(&(*results)[static_cast<size_t>(i)]);
    if (t == nullptr || !t->defined()) continue;
    if (absl::Status s = WriteView(outputs[i], *t); !s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<interp::Value>> Executor::Run() {
  if (absl::Status s = Load(); !s.ok()) return s;
  if (absl::Status s = BindSymbols(); !s.ok()) return s;
  if (absl::Status s = Allocate(); !s.ok()) return s;
  for (const v1::PlanStep& step : a_.steps()) {
    absl::Status s;
    const absl::Time t0 = absl::Now();
    switch (step.kind_case()) {
      case v1::PlanStep::kLaunch:
        s = Launch(step.launch().kernel());
        break;
      case v1::PlanStep::kExternCall:
        s = Call(step.extern_call().op(), step.extern_call().args(), step.extern_call().kwargs(),
                 step.extern_call().outputs(), step.extern_call().rng_stream());
        break;
      case v1::PlanStep::kFallback:
        s = Call(step.fallback().op(), step.fallback().args(), step.fallback().kwargs(),
                 step.fallback().outputs(), step.fallback().rng_stream());
        break;
      case v1::PlanStep::kCopy: {
        auto t = ReadView(step.copy().src());
        if (!t.ok()) return t.status();
        s = WriteView(step.copy().dst(), *t);
        break;
      }
      case v1::PlanStep::kWriteBack: {
        auto t = ReadView(step.write_back().src());
        if (!t.ok()) return t.status();
        const interp::Value& v = inputs_[static_cast<size_t>(step.write_back().input_index())];
        Tensor dst = std::get<Tensor>(v);
        dst.CopyFrom(*t);
        break;
      }
      case v1::PlanStep::kFree: {
        const int32_t b = step.free().buffer();
        std::memset(Base(b), 0xFF, static_cast<size_t>(size_[static_cast<size_t>(b)]));
        break;
      }
      default:
        s = absl::UnimplementedError("plan step kind");
    }
    if (!s.ok()) return s;
    if (o_.stats != nullptr) {
      const double ms = absl::ToDoubleMilliseconds(absl::Now() - t0);
      if (step.has_launch()) o_.stats->kernel_ms += ms;
      if (step.has_extern_call() || step.has_fallback()) o_.stats->extern_ms += ms;
    }
  }
  std::vector<interp::Value> out;
  for (const v1::OutputBinding& o : a_.outputs()) {
    if (o.none()) {
      out.emplace_back(interp::None{});
    } else if (!o.symbol().empty()) {
      v1::SymInt e;
      e.set_expr(o.symbol());
      auto v = Eval(e);
      if (!v.ok()) return v.status();
      out.emplace_back(*v);
    } else {
      auto t = ReadView(o.view());
      if (!t.ok()) return t.status();
      out.emplace_back(*std::move(t));
    }
  }
  return out;
}

}  // namespace

absl::StatusOr<std::vector<interp::Value>> Execute(const v1::CompiledGraph& artifact,
                                                   absl::Span<const interp::Value> inputs,
                                                   const ExecOptions& options) {
  return Executor(artifact, inputs, options).Run();
}

}  // namespace kiln::exec
