#include "compiler/loop/ir.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace kiln::loop {

ScalarType ScalarTypeOf(graph::DType dtype) {
  switch (dtype) {
    case graph::DType::kBool:
      return ScalarType::kBool;
    case graph::DType::kInt8:
      return ScalarType::kI8;
    case graph::DType::kUInt8:
      return ScalarType::kU8;
    case graph::DType::kInt16:
      return ScalarType::kI16;
    case graph::DType::kInt32:
      return ScalarType::kI32;
    case graph::DType::kInt64:
      return ScalarType::kI64;
    case graph::DType::kFloat16:
      return ScalarType::kF16;
    case graph::DType::kBFloat16:
      return ScalarType::kBF16;
    case graph::DType::kFloat64:
      return ScalarType::kF64;
    default:
      return ScalarType::kF32;
  }
}

graph::DType DTypeOf(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
      return graph::DType::kBool;
    case ScalarType::kI8:
      return graph::DType::kInt8;
    case ScalarType::kU8:
      return graph::DType::kUInt8;
    case ScalarType::kI16:
      return graph::DType::kInt16;
    case ScalarType::kI32:
      return graph::DType::kInt32;
    case ScalarType::kI64:
      return graph::DType::kInt64;
    case ScalarType::kF16:
      return graph::DType::kFloat16;
    case ScalarType::kBF16:
      return graph::DType::kBFloat16;
    case ScalarType::kF32:
      return graph::DType::kFloat32;
    case ScalarType::kF64:
      return graph::DType::kFloat64;
  }
  return graph::DType::kFloat32;
}

int ByteSize(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
    case ScalarType::kI8:
    case ScalarType::kU8:
      return 1;
    case ScalarType::kI16:
    case ScalarType::kF16:
    case ScalarType::kBF16:
      return 2;
    case ScalarType::kI32:
    case ScalarType::kF32:
      return 4;
    case ScalarType::kI64:
    case ScalarType::kF64:
      return 8;
  }
  return 4;
}

bool IsFloat(ScalarType type) {
  return type == ScalarType::kF16 || type == ScalarType::kBF16 || type == ScalarType::kF32 ||
         type == ScalarType::kF64;
}

bool IsSigned(ScalarType type) {
  return type == ScalarType::kI8 || type == ScalarType::kI16 || type == ScalarType::kI32 ||
         type == ScalarType::kI64;
}

ScalarType ComputeType(ScalarType type) {
  return type == ScalarType::kF16 || type == ScalarType::kBF16 ? ScalarType::kF32 : type;
}

const char* ScalarTypeName(ScalarType type) {
  switch (type) {
    case ScalarType::kBool:
      return "bool";
    case ScalarType::kI8:
      return "i8";
    case ScalarType::kU8:
      return "u8";
    case ScalarType::kI16:
      return "i16";
    case ScalarType::kI32:
      return "i32";
    case ScalarType::kI64:
      return "i64";
    case ScalarType::kF16:
      return "f16";
    case ScalarType::kBF16:
      return "bf16";
    case ScalarType::kF32:
      return "f32";
    case ScalarType::kF64:
      return "f64";
  }
  return "?";
}

const char* OpcodeName(Opcode op) {
  switch (op) {
    case Opcode::kConst:
      return "const";
    case Opcode::kIndex:
      return "index";
    case Opcode::kLoad:
      return "load";
    case Opcode::kStore:
      return "store";
    case Opcode::kRandBits:
      return "randbits";
    case Opcode::kReduce:
      return "reduce";
    case Opcode::kCast:
      return "cast";
    case Opcode::kSelect:
      return "select";
    case Opcode::kNeg:
      return "neg";
    case Opcode::kAbs:
      return "abs";
    case Opcode::kExp:
      return "exp";
    case Opcode::kExpm1:
      return "expm1";
    case Opcode::kExp2:
      return "exp2";
    case Opcode::kLog:
      return "log";
    case Opcode::kLog1p:
      return "log1p";
    case Opcode::kLog2:
      return "log2";
    case Opcode::kLog10:
      return "log10";
    case Opcode::kSqrt:
      return "sqrt";
    case Opcode::kRsqrt:
      return "rsqrt";
    case Opcode::kRecip:
      return "recip";
    case Opcode::kSin:
      return "sin";
    case Opcode::kCos:
      return "cos";
    case Opcode::kTan:
      return "tan";
    case Opcode::kAsin:
      return "asin";
    case Opcode::kAcos:
      return "acos";
    case Opcode::kAtan:
      return "atan";
    case Opcode::kSinh:
      return "sinh";
    case Opcode::kCosh:
      return "cosh";
    case Opcode::kTanh:
      return "tanh";
    case Opcode::kSigmoid:
      return "sigmoid";
    case Opcode::kErf:
      return "erf";
    case Opcode::kErfc:
      return "erfc";
    case Opcode::kFloor:
      return "floor";
    case Opcode::kCeil:
      return "ceil";
    case Opcode::kRound:
      return "round";
    case Opcode::kTrunc:
      return "trunc";
    case Opcode::kSign:
      return "sign";
    case Opcode::kIsNan:
      return "isnan";
    case Opcode::kIsInf:
      return "isinf";
    case Opcode::kNot:
      return "not";
    case Opcode::kBitNot:
      return "bitnot";
    case Opcode::kLgamma:
      return "lgamma";
    case Opcode::kAdd:
      return "add";
    case Opcode::kSub:
      return "sub";
    case Opcode::kMul:
      return "mul";
    case Opcode::kDiv:
      return "div";
    case Opcode::kFloorDiv:
      return "floordiv";
    case Opcode::kRemainder:
      return "remainder";
    case Opcode::kFmod:
      return "fmod";
    case Opcode::kPow:
      return "pow";
    case Opcode::kAtan2:
      return "atan2";
    case Opcode::kMax:
      return "max";
    case Opcode::kMin:
      return "min";
    case Opcode::kAnd:
      return "and";
    case Opcode::kOr:
      return "or";
    case Opcode::kXor:
      return "xor";
    case Opcode::kEq:
      return "eq";
    case Opcode::kNe:
      return "ne";
    case Opcode::kLt:
      return "lt";
    case Opcode::kLe:
      return "le";
    case Opcode::kGt:
      return "gt";
    case Opcode::kGe:
      return "ge";
  }
  return "?";
}

bool IsUnary(Opcode op) { return op >= Opcode::kNeg && op <= Opcode::kLgamma; }
bool IsBinary(Opcode op) { return op >= Opcode::kAdd && op <= Opcode::kGe; }

namespace {
const char* ReduceName(ReduceKind k) {
  switch (k) {
    case ReduceKind::kSum:
      return "sum";
    case ReduceKind::kProd:
      return "prod";
    case ReduceKind::kMax:
      return "max";
    case ReduceKind::kMin:
      return "min";
    case ReduceKind::kArgMax:
      return "argmax";
    case ReduceKind::kArgMin:
      return "argmin";
    case ReduceKind::kAny:
      return "any";
    case ReduceKind::kAll:
      return "all";
  }
  return "?";
}

std::string IndexText(const Program& p, const Inst& in) {
  std::string s = in.index.ToString(p.symbols);
  for (const DynIndex& d : in.dyn) {
    absl::StrAppend(&s, " + %", d.value, "*(", d.stride.ToString(p.symbols), ")");
  }
  return s;
}
}  // namespace

void RemapOperands(Inst* in, const std::vector<int32_t>& map) {
  auto m = [&](int32_t v) { return v < 0 ? v : map[static_cast<size_t>(v)]; };
  in->a = m(in->a);
  in->b = m(in->b);
  in->c = m(in->c);
  in->mask = m(in->mask);
  for (DynIndex& d : in->dyn) d.value = m(d.value);
}

int32_t AppendRemapped(std::vector<Inst>* out, Inst in, const std::vector<int32_t>& map) {
  RemapOperands(&in, map);
  out->push_back(std::move(in));
  return static_cast<int32_t>(out->size() - 1);
}

bool HasLoopStage(const Kernel& k) {
  for (const Stage& s : k.stages) {
    if (s.loops) return true;
  }
  return false;
}

std::string ToString(const Program& p, const Kernel& k) {
  std::string out = absl::StrCat("kernel ", k.name, " parallel[");
  for (size_t i = 0; i < k.parallel.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", k.parallel[i].ToString(p.symbols));
  }
  out += "] reduction[";
  for (size_t i = 0; i < k.reduction.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", k.reduction[i].ToString(p.symbols));
  }
  absl::StrAppend(&out, "] nodes=[", absl::StrJoin(k.nodes, ","), "]");
  if (!k.segments.empty())
    absl::StrAppend(&out, " segments=[", absl::StrJoin(k.segments, ","), "]");
  if (!k.segment_points.empty())
    absl::StrAppend(&out, " segment_points=[", absl::StrJoin(k.segment_points, ","), "]");
  out += "\n";
  for (size_t s = 0; s < k.stages.size(); ++s) {
    const Stage& st = k.stages[s];
    absl::StrAppend(&out, "  stage ", s, st.loops ? " (loops)" : "", ":\n");
    for (int32_t i = st.begin; i < st.end; ++i) {
      const Inst& in = k.insts[static_cast<size_t>(i)];
      absl::StrAppend(&out, "    %", i, " = ", ScalarTypeName(in.type), " ", OpcodeName(in.op));
      switch (in.op) {
        case Opcode::kConst:
          if (IsFloat(in.type)) {
            absl::StrAppend(&out, " ", in.fimm);
          } else {
            absl::StrAppend(&out, " ", in.iimm);
          }
          break;
        case Opcode::kIndex:
          absl::StrAppend(&out, " ", in.index.ToString(p.symbols));
          break;
        case Opcode::kLoad:
          absl::StrAppend(&out, " buf", in.buffer, "[", IndexText(p, in), "]");
          if (in.mask >= 0) absl::StrAppend(&out, " mask %", in.mask);
          break;
        case Opcode::kStore:
          absl::StrAppend(&out, " buf", in.buffer, "[", IndexText(p, in), "] <- %", in.a);
          break;
        case Opcode::kRandBits:
          absl::StrAppend(&out, " stream ", in.iimm, " elem %", in.a);
          break;
        case Opcode::kReduce:
          absl::StrAppend(&out, " ", ReduceName(in.reduce), " %", in.a);
          if (in.b >= 0) absl::StrAppend(&out, " idx %", in.b);
          break;
        default:
          if (in.a >= 0) absl::StrAppend(&out, " %", in.a);
          if (in.b >= 0) absl::StrAppend(&out, ", %", in.b);
          if (in.c >= 0) absl::StrAppend(&out, ", %", in.c);
          break;
      }
      out += "\n";
    }
  }
  return out;
}

std::string ToString(const Program& p) {
  std::string out;
  for (size_t i = 0; i < p.buffers.size(); ++i) {
    const Buffer& b = p.buffers[i];
    absl::StrAppend(&out, "buf", i, " ", b.kind == Buffer::Kind::kInput ? "input " : "",
                    graph::DTypeName(b.dtype), "[", b.elements.ToString(p.symbols), "] ", b.name,
                    "\n");
  }
  for (const Step& s : p.steps) {
    switch (s.kind) {
      case Step::Kind::kKernel:
        out += ToString(p, p.kernels[static_cast<size_t>(s.kernel)]);
        break;
      case Step::Kind::kExtern:
        absl::StrAppend(&out, s.call.fallback ? "fallback " : "extern ", s.call.op, " ",
                        s.call.node, "\n");
        break;
      case Step::Kind::kWriteBack:
        absl::StrAppend(&out, "write_back input ", s.input_index, " from buf", s.src.buffer, "\n");
        break;
    }
  }
  return out;
}

}  // namespace kiln::loop
