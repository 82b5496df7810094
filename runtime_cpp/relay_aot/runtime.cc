/*!
 * \file relay_aot/runtime.cc
 * \brief The runtime's out-of-line functions: argument checks, conversions, errors, the C API's
 *        helpers, the profiler's start and stop, deleters, stack segments.
 *
 * Every generated library links one object compiled from this file, cached per toolchain
 * (relay_aot/builder: "runtime object"), so the compiler does not generate these functions --
 * and the TVM helpers they use -- again for each library: they are most of what a small
 * program's unit compiled before. A build that finds no runtime object includes this file
 * into its units instead (RELAY_AOT_RUNTIME_LINKAGE below). They are the cold paths, the
 * deleters (only ever called through a pointer) and the switch to a new stack segment; what
 * generated code does per value (allocation, reference counts, kernel calls, stack checks)
 * stays inline in the headers.
 * One translation unit, because parsing TVM's headers is most of its compile time.
 * Definitions appear in the order of the headers that declare them.
 */
#include "runtime.h"

#include <tvm/runtime/registry.h>

#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>

// Empty when this file is compiled as the runtime object. A build that has no runtime object
// yet (the toolchain's first) includes this file into every unit with the linkage `inline`
// instead: each unit then generates only the functions it uses, as before there was an object.
#ifndef RELAY_AOT_RUNTIME_LINKAGE
#define RELAY_AOT_RUNTIME_LINKAGE
#endif

// ---- errors.h ----------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE void raise_match_failure(const char* where) {
  throw Error("MatchError", std::string("no clause matched the value in ") + where);
}

RELAY_AOT_RUNTIME_LINKAGE void raise_type_error(const std::string& message) {
  throw Error("ArgumentTypeError", message);
}

RELAY_AOT_RUNTIME_LINKAGE std::string detail::shape_text(const int64_t* dims, int rank) {
  std::string out = "(";
  for (int i = 0; i < rank; ++i) out += (i ? ", " : "") + std::to_string(dims[i]);
  return out + (rank == 1 ? ",)" : ")");
}

}  // namespace relay_aot

// ---- scalar.h ----------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE void raise_zero_division(const char* op) {
  throw Error("ZeroDivisionError", std::string("integer ") + op + " by zero");
}

RELAY_AOT_RUNTIME_LINKAGE NDArray scalar_of_dtype(DLDataType dtype, NumberKind kind, double real, int64_t integer, const char* what) {
  auto fail = [&]() -> NDArray {  // a number of the right kind, out of range
    throw Error("ArgumentValueError", std::string(what) + ": the number does not fit in dtype " +
                                  tvm::runtime::DLDataType2String(dtype));
  };
  auto mismatch = [&]() -> NDArray {
    const char* got = kind == NumberKind::kBool ? "bool" : kind == NumberKind::kInt ? "integer" : "float";
    raise_type_error(std::string(what) + ": expected a tensor of dtype " + tvm::runtime::DLDataType2String(dtype) +
                     ", got a " + got);
  };
  if (dtype.lanes != 1) return mismatch();
  if (dtype.code == kDLUInt && dtype.bits == 1) {
    return kind == NumberKind::kBool ? box(integer != 0) : mismatch();
  }
  if (kind == NumberKind::kBool) return mismatch();
  if (dtype.code == kDLFloat) {
    double value = kind == NumberKind::kFloat ? real : static_cast<double>(integer);
    if (dtype.bits == 32) {
      if (std::isfinite(value) && std::fabs(value) > std::numeric_limits<float>::max()) return fail();
      return box(static_cast<float>(value));
    }
    if (dtype.bits == 64) return box(value);
    return mismatch();
  }
  if (kind == NumberKind::kFloat) {
    // a whole number stands for itself (0.0 for an int32 pad value, as TVM's executors take it);
    // anything else would be truncated, silently
    if (!std::isfinite(real) || real != std::trunc(real)) return mismatch();
    if (real < -9223372036854775808.0 || real >= 9223372036854775808.0) return fail();
    integer = static_cast<int64_t>(real);
  }
  auto in_range = [&](auto typed) {
    using T = decltype(typed);
    return integer >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
           (std::is_same_v<T, uint64_t> || integer <= static_cast<int64_t>(std::numeric_limits<T>::max()));
  };
  switch ((dtype.code == kDLInt ? 100 : 200) + dtype.bits) {
    case 108: return in_range(int8_t()) ? box(static_cast<int8_t>(integer)) : fail();
    case 116: return in_range(int16_t()) ? box(static_cast<int16_t>(integer)) : fail();
    case 132: return in_range(int32_t()) ? box(static_cast<int32_t>(integer)) : fail();
    case 164: return box(integer);
    case 208: return in_range(uint8_t()) ? box(static_cast<uint8_t>(integer)) : fail();
    case 216: return in_range(uint16_t()) ? box(static_cast<uint16_t>(integer)) : fail();
    case 232: return in_range(uint32_t()) ? box(static_cast<uint32_t>(integer)) : fail();
    case 264: return integer >= 0 ? box(static_cast<uint64_t>(integer)) : fail();
    default: return mismatch();
  }
}

}  // namespace relay_aot

// ---- kernel.h ----------------------------------------------------------------------------------

namespace relay_aot::detail {

RELAY_AOT_RUNTIME_LINKAGE void raise_kernel_failure_on(const char* name, DLTensor* const* tensors, int count) {
  std::string shapes;
  for (int i = 0; i < count; ++i) shapes += (i ? ", " : "") + shape_text(tensors[i]->shape, tensors[i]->ndim);
  const char* detail = TVMGetLastError();
  throw Error("KernelError", std::string("kernel ") + name + " failed on arguments of shapes " + shapes + ": " +
                                 (detail != nullptr ? detail : "(no message)"));
}

}  // namespace relay_aot::detail

// ---- check.h -----------------------------------------------------------------------------------

namespace relay_aot::detail {

RELAY_AOT_RUNTIME_LINKAGE std::string describe(const Object* value) {
  if (value == nullptr) return "None";
  if (value->IsInstance<NDArray::Container>()) {
    const DLTensor& t = static_cast<const NDArray::Container*>(value)->dl_tensor;
    std::ostringstream os;
    os << "a tensor of dtype " << tvm::runtime::DLDataType2String(t.dtype) << " and shape (";
    for (int i = 0; i < t.ndim; ++i) os << (i ? ", " : "") << t.shape[i];
    os << (t.ndim == 1 ? ",)" : ")");
    return os.str();
  }
  if (value->IsInstance<ADTObj>()) {
    const auto* a = static_cast<const ADTObj*>(value);
    return "an ADT with tag " + std::to_string(a->tag) + " and " + std::to_string(a->size) + " fields";
  }
  if (value->IsInstance<tvm::runtime::PackedFuncObj>()) return "a function";
  if (value->IsInstance<tvm::runtime::ArrayNode>()) return "an array";
  return "an object of type " + value->GetTypeKey();
}

RELAY_AOT_RUNTIME_LINKAGE std::string path_of(const std::vector<Pending>& seen, int index) {
  std::string path;
  for (int i = index; seen[i].parent >= 0; i = seen[i].parent) {
    const Pending& p = seen[i];
    std::string step = p.is_ref_contents ? ".value"
                       : p.ctor != nullptr ? std::string(".") + p.ctor + "[" + std::to_string(p.index) + "]"
                                           : "[" + std::to_string(p.index) + "]";
    path = step + path;
  }
  return path;
}

}  // namespace relay_aot::detail

// ---- check.h -----------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE void check_value(const ObjectRef& value, int type, const TypeDesc* table, const std::string& what) {
  using detail::Pending;
  std::vector<Pending> seen;
  std::unordered_set<detail::Visit, detail::VisitHash> shared;  // checked objects with several owners
  seen.push_back({value.get(), type, -1, 0, nullptr, false});
  for (size_t next = 0; next < seen.size(); ++next) {
    const Object* obj = seen[next].value;
    const TypeDesc& desc = table[seen[next].type];
    if (obj != nullptr && desc.kind != Kind::kTensor && ObjectAccess::UseCount(obj) > 1 &&
        !shared.insert({obj, seen[next].type}).second) {
      continue;  // this object was checked against this type already
    }
    const int here = static_cast<int>(next);
    auto fail = [&](const char* error_kind, const std::string& got) {
      throw Error(error_kind, what + detail::path_of(seen, here) + ": expected " + desc.text + ", got " + got);
    };
    switch (desc.kind) {
      case Kind::kAny:
        break;
      case Kind::kTensor: {
        if (obj == nullptr || !obj->IsInstance<NDArray::Container>()) fail("ArgumentTypeError", detail::describe(obj));
        const DLTensor& dl = static_cast<const NDArray::Container*>(obj)->dl_tensor;
        if (dl.device.device_type != kDLCPU) fail("ArgumentValueError", "a tensor on a device other than the CPU");
        if (dl.dtype.code != desc.dtype.code || dl.dtype.bits != desc.dtype.bits ||
            dl.dtype.lanes != desc.dtype.lanes) {
          fail("ArgumentTypeError", detail::describe(obj));
        }
        bool same = dl.ndim == desc.ndim;
        // A ? dimension (kAnyDim) accepts every extent; a static one must match.
        for (int i = 0; same && i < desc.ndim; ++i) same = desc.shape[i] == kAnyDim || dl.shape[i] == desc.shape[i];
        if (!same) fail("ArgumentValueError", detail::describe(obj));
        break;
      }
      case Kind::kTuple: {
        if (obj == nullptr || !obj->IsInstance<ADTObj>()) fail("ArgumentTypeError", detail::describe(obj));
        const auto* a = static_cast<const ADTObj*>(obj);
        if (a->tag != 0) fail("ArgumentTypeError", detail::describe(obj));
        if (static_cast<int>(a->size) != desc.num_fields) fail("ArgumentValueError", detail::describe(obj));
        for (int i = 0; i < desc.num_fields; ++i) {
          seen.push_back({(*a)[i].get(), desc.fields[i], here, i, nullptr, false});
        }
        break;
      }
      case Kind::kAdt: {
        if (obj == nullptr || !obj->IsInstance<ADTObj>()) fail("ArgumentTypeError", detail::describe(obj));
        const auto* a = static_cast<const ADTObj*>(obj);
        const CtorDesc* ctor = nullptr;
        for (int c = 0; c < desc.num_ctors; ++c) {
          if (desc.ctors[c].tag == a->tag) ctor = &desc.ctors[c];
        }
        if (ctor == nullptr) fail("ArgumentValueError", detail::describe(obj) + " (no constructor has that tag)");
        if (static_cast<int>(a->size) != ctor->num_fields) {
          fail("ArgumentValueError", detail::describe(obj) + " (" + ctor->name + " has " +
                                 std::to_string(ctor->num_fields) + " fields)");
        }
        for (int i = 0; i < ctor->num_fields; ++i) {
          seen.push_back({(*a)[i].get(), ctor->fields[i], here, i, ctor->name, false});
        }
        break;
      }
      case Kind::kFunc:
        if (obj == nullptr || !obj->IsInstance<tvm::runtime::PackedFuncObj>()) {
          fail("ArgumentTypeError", detail::describe(obj));
        }
        break;
      case Kind::kRef: {
        if (obj == nullptr || !obj->IsInstance<tvm::runtime::ArrayNode>()) fail("ArgumentTypeError", detail::describe(obj));
        const auto* cell = static_cast<const tvm::runtime::ArrayNode*>(obj);
        if (cell->size() != 1) fail("ArgumentTypeError", detail::describe(obj));
        seen.push_back({(*cell)[0].get(), desc.fields[0], here, 0, nullptr, true});
        break;
      }
    }
  }
}

namespace detail {

/*! \brief The extent of \p axis in \p values (see AxisDesc), and how the message names it. */
static int64_t axis_extent(const ObjectRef* values, const AxisDesc& axis, const char* const* names, std::string* where) {
  const Object* obj = values[axis.param].get();
  *where = "argument " + std::to_string(axis.param) + " (%" + names[axis.param] + ")";
  for (int i = 0; i < axis.depth; ++i) {
    obj = (*static_cast<const ADTObj*>(obj))[axis.path[i]].get();
    *where += "[" + std::to_string(axis.path[i]) + "]";
  }
  *where += " axis " + std::to_string(axis.axis);
  return static_cast<const NDArray::Container*>(obj)->dl_tensor.shape[axis.axis];
}

}  // namespace detail

RELAY_AOT_RUNTIME_LINKAGE void check_shared_extents(const ObjectRef* values, const SharedExtentDesc* extents, int count,
                                                    const char* const* names) {
  for (int g = 0; g < count; ++g) {
    const SharedExtentDesc& shared = extents[g];
    std::string first_where;
    const int64_t first = detail::axis_extent(values, shared.axes[0], names, &first_where);
    for (int i = 1; i < shared.count; ++i) {
      std::string where;
      const int64_t extent = detail::axis_extent(values, shared.axes[i], names, &where);
      if (extent != first) {
        throw Error("ArgumentValueError", first_where + " and " + where + " are both the dimension " + shared.name +
                                              " of the program's types, but have the extents " +
                                              std::to_string(first) + " and " + std::to_string(extent));
      }
    }
  }
}

}  // namespace relay_aot

// ---- closure.h ---------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE ObjectRef object_from_arg(const TVMArgValue& arg, const std::string& what, const TypeDesc& expected) {
  switch (arg.type_code()) {
    case kTVMNDArrayHandle:
    case kTVMObjectHandle:
    case kTVMObjectRValueRefArg:
    case kTVMPackedFuncHandle:
      return arg.operator ObjectRef();
    case kTVMDLTensorHandle: {
      // A view of the caller's data (a numpy array): copied into a block of the program's own
      // allocator, which keeps it for the next call. TVM's (NDArray::NewFromDLTensor) asks the
      // system for a new one each call: a 600 KB image cost 43 us over an NDArray argument, 18
      // now.
      DLTensor* tensor = arg.operator DLTensor*();
      if (tensor->device.device_type != kDLCPU || !tvm::runtime::IsContiguous(*tensor)) {
        return NDArray::NewFromDLTensor(tensor, tensor->device);
      }
      NDArray copy = alloc_tensor(ShapeTuple(tensor->shape, tensor->shape + tensor->ndim), tensor->dtype);
      std::memcpy(const_cast<DLTensor*>(copy.operator->())->data, static_cast<const char*>(tensor->data) + tensor->byte_offset,
                  tvm::runtime::GetDataSize(*tensor));
      return copy;
    }
    case kTVMNullptr:
      // None where the type says nothing (a type variable, a tensor with no element type): the
      // program cannot look at the value, and TVM's VM takes None there too.
      if (expected.kind == Kind::kAny) return ObjectRef();
      break;
    case kDLInt:
    case kDLFloat:
    case kTVMArgBool:
      if (expected.kind == Kind::kTensor && expected.ndim == 0) {
        const int code = arg.type_code();
        const NumberKind kind = code == kDLFloat ? NumberKind::kFloat : code == kDLInt ? NumberKind::kInt : NumberKind::kBool;
        return scalar_of_dtype(expected.dtype, kind, code == kDLFloat ? arg.value().v_float64 : 0.0,
                               code == kDLFloat ? 0 : arg.value().v_int64, what.c_str());
      }
      break;
    default:
      break;
  }
  raise_type_error(what + ": expected " + expected.text +
                   ", got a value that is not a tensor, tuple, ADT or function (TVM type code " +
                   std::to_string(arg.type_code()) + ")");
}

RELAY_AOT_RUNTIME_LINKAGE void ClosureObj::CallPacked(const PackedFuncObj* obj, TVMArgs args, TVMRetValue* rv) {
  const auto* self = static_cast<const ClosureObj*>(obj);
  if (args.size() != self->arity) {
    raise_type_error("closure takes " + std::to_string(self->arity) + " arguments, got " +
                     std::to_string(args.size()));
  }
  std::vector<ObjectRef> values;
  values.reserve(args.size());
  for (int i = 0; i < args.size(); ++i) {
    std::string what = "closure argument " + std::to_string(i);
    values.push_back(object_from_arg(args[i], what, self->types[self->param_types[i]]));
    check_value(values.back(), self->param_types[i], self->types, what);
  }
  *rv = self->entry(self, values.data());
}

RELAY_AOT_RUNTIME_LINKAGE ObjectRef call_foreign(const Closure& fn, const ObjectRef* args, int count, const TypeDesc* types,
                              int ret_type) {
  std::vector<TVMValue> values(count);
  std::vector<int> codes(count);
  TVMArgsSetter setter(values.data(), codes.data());
  for (int i = 0; i < count; ++i) setter(i, args[i]);
  TVMRetValue rv;
  static_cast<const PackedFuncObj*>(fn.get())->CallPacked(TVMArgs(values.data(), codes.data(), count), &rv);
  int code = rv.type_code();
  if (code != kTVMNDArrayHandle && code != kTVMObjectHandle && code != kTVMPackedFuncHandle) {
    raise_type_error("a function passed to the program returned a value that is not a tensor, "
                     "tuple, ADT or function (TVM type code " + std::to_string(code) + ")");
  }
  ObjectRef result = rv.operator ObjectRef();
  check_value(result, ret_type, types, "the result of a function passed to the program");
  return result;
}

}  // namespace relay_aot

// ---- constants.h -------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE std::vector<NDArray>* load_constants(const unsigned char* blob, const ConstantSpec* specs,
                                            const int64_t* shapes, int count) {
  auto* table = new std::vector<NDArray>();
  table->reserve(count);
  for (int i = 0; i < count; ++i) {
    const ConstantSpec& spec = specs[i];
    tvm::runtime::ShapeTuple shape(shapes + spec.shape_index, shapes + spec.shape_index + spec.ndim);
    NDArray array = NDArray::Empty(shape, spec.dtype, kDevice);
    array.CopyFromBytes(blob + spec.offset, spec.nbytes);
    table->push_back(array);
  }
  return table;
}

}  // namespace relay_aot

// ---- cpu.h -------------------------------------------------------------------------------------

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace relay_aot {

namespace cpu_detail {

//! Which registers the OS must save for a feature's instructions (XCR0, read with xgetbv).
enum State : unsigned char { kNone, kAvx, kAvx512, kAmx, kApx };

//! Where CPUID reports a feature: leaf, subleaf, register (0-3: EAX, EBX, ECX, EDX), bit.
struct Bit {
  const char* name;
  unsigned leaf, subleaf;
  unsigned char reg, bit;
  State state;
};

// LLVM's names and bits (llvm/lib/TargetParser/Host.cpp, sys::getHostCPUFeatures, LLVM 22).
// Leaf 7 subleaf 1, 0x1E subleaf 1 and 0x24 are read only when leaf 7 / the maximum leaf says
// they exist. avx10.1 and avx10.2 are special: a bit of leaf 7.1 and a version in leaf 0x24.
constexpr unsigned kExt1 = 0x80000001u, kExt8 = 0x80000008u;
constexpr Bit kBits[] = {
    {"cx8", 1, 0, 3, 8, kNone}, {"cmov", 1, 0, 3, 15, kNone}, {"mmx", 1, 0, 3, 23, kNone},
    {"fxsr", 1, 0, 3, 24, kNone}, {"sse", 1, 0, 3, 25, kNone}, {"sse2", 1, 0, 3, 26, kNone},
    {"sse3", 1, 0, 2, 0, kNone}, {"pclmul", 1, 0, 2, 1, kNone}, {"ssse3", 1, 0, 2, 9, kNone},
    {"fma", 1, 0, 2, 12, kAvx}, {"cx16", 1, 0, 2, 13, kNone}, {"sse4.1", 1, 0, 2, 19, kNone},
    {"sse4.2", 1, 0, 2, 20, kNone}, {"crc32", 1, 0, 2, 20, kNone}, {"movbe", 1, 0, 2, 22, kNone},
    {"popcnt", 1, 0, 2, 23, kNone}, {"aes", 1, 0, 2, 25, kNone}, {"xsave", 1, 0, 2, 26, kAvx},
    {"avx", 1, 0, 2, 28, kAvx}, {"f16c", 1, 0, 2, 29, kAvx}, {"rdrnd", 1, 0, 2, 30, kNone},
    {"sahf", kExt1, 0, 2, 0, kNone}, {"lzcnt", kExt1, 0, 2, 5, kNone}, {"sse4a", kExt1, 0, 2, 6, kNone},
    {"prfchw", kExt1, 0, 2, 8, kNone}, {"xop", kExt1, 0, 2, 11, kAvx}, {"lwp", kExt1, 0, 2, 15, kNone},
    {"fma4", kExt1, 0, 2, 16, kAvx}, {"tbm", kExt1, 0, 2, 21, kNone}, {"mwaitx", kExt1, 0, 2, 29, kNone},
    {"64bit", kExt1, 0, 3, 29, kNone},
    {"clzero", kExt8, 0, 1, 0, kNone}, {"rdpru", kExt8, 0, 1, 4, kNone}, {"wbnoinvd", kExt8, 0, 1, 9, kNone},
    {"fsgsbase", 7, 0, 1, 0, kNone}, {"sgx", 7, 0, 1, 2, kNone}, {"bmi", 7, 0, 1, 3, kNone},
    {"avx2", 7, 0, 1, 5, kAvx}, {"bmi2", 7, 0, 1, 8, kNone}, {"invpcid", 7, 0, 1, 10, kNone},
    {"rtm", 7, 0, 1, 11, kNone}, {"avx512f", 7, 0, 1, 16, kAvx512}, {"avx512dq", 7, 0, 1, 17, kAvx512},
    {"rdseed", 7, 0, 1, 18, kNone}, {"adx", 7, 0, 1, 19, kNone}, {"avx512ifma", 7, 0, 1, 21, kAvx512},
    {"clflushopt", 7, 0, 1, 23, kNone}, {"clwb", 7, 0, 1, 24, kNone}, {"avx512cd", 7, 0, 1, 28, kAvx512},
    {"sha", 7, 0, 1, 29, kNone}, {"avx512bw", 7, 0, 1, 30, kAvx512}, {"avx512vl", 7, 0, 1, 31, kAvx512},
    {"avx512vbmi", 7, 0, 2, 1, kAvx512}, {"pku", 7, 0, 2, 4, kNone}, {"waitpkg", 7, 0, 2, 5, kNone},
    {"avx512vbmi2", 7, 0, 2, 6, kAvx512}, {"shstk", 7, 0, 2, 7, kNone}, {"gfni", 7, 0, 2, 8, kNone},
    {"vaes", 7, 0, 2, 9, kAvx}, {"vpclmulqdq", 7, 0, 2, 10, kAvx}, {"avx512vnni", 7, 0, 2, 11, kAvx512},
    {"avx512bitalg", 7, 0, 2, 12, kAvx512}, {"avx512vpopcntdq", 7, 0, 2, 14, kAvx512},
    {"rdpid", 7, 0, 2, 22, kNone}, {"kl", 7, 0, 2, 23, kNone}, {"cldemote", 7, 0, 2, 25, kNone},
    {"movdiri", 7, 0, 2, 27, kNone}, {"movdir64b", 7, 0, 2, 28, kNone}, {"enqcmd", 7, 0, 2, 29, kNone},
    {"uintr", 7, 0, 3, 5, kNone}, {"avx512vp2intersect", 7, 0, 3, 8, kAvx512}, {"serialize", 7, 0, 3, 14, kNone},
    {"tsxldtrk", 7, 0, 3, 16, kNone}, {"pconfig", 7, 0, 3, 18, kNone}, {"amx-bf16", 7, 0, 3, 22, kAmx},
    {"avx512fp16", 7, 0, 3, 23, kAvx512}, {"amx-tile", 7, 0, 3, 24, kAmx}, {"amx-int8", 7, 0, 3, 25, kAmx},
    {"sha512", 7, 1, 0, 0, kNone}, {"sm3", 7, 1, 0, 1, kNone}, {"sm4", 7, 1, 0, 2, kNone},
    {"raoint", 7, 1, 0, 3, kNone}, {"avxvnni", 7, 1, 0, 4, kAvx}, {"avx512bf16", 7, 1, 0, 5, kAvx512},
    {"cmpccxadd", 7, 1, 0, 7, kNone}, {"amx-fp16", 7, 1, 0, 21, kAmx}, {"hreset", 7, 1, 0, 22, kNone},
    {"avxifma", 7, 1, 0, 23, kAvx}, {"movrs", 7, 1, 0, 31, kNone},
    {"avxvnniint8", 7, 1, 3, 4, kAvx}, {"avxneconvert", 7, 1, 3, 5, kAvx}, {"amx-complex", 7, 1, 3, 8, kAmx},
    {"avxvnniint16", 7, 1, 3, 10, kAvx}, {"prefetchi", 7, 1, 3, 14, kNone}, {"usermsr", 7, 1, 3, 15, kNone},
    // APX: one bit for all of its features.
    {"egpr", 7, 1, 3, 21, kApx}, {"push2pop2", 7, 1, 3, 21, kApx}, {"ppx", 7, 1, 3, 21, kApx},
    {"ndd", 7, 1, 3, 21, kApx}, {"ccmp", 7, 1, 3, 21, kApx}, {"nf", 7, 1, 3, 21, kApx},
    {"cf", 7, 1, 3, 21, kApx}, {"zu", 7, 1, 3, 21, kApx},
    {"xsaveopt", 0xd, 1, 0, 0, kAvx}, {"xsavec", 0xd, 1, 0, 1, kAvx}, {"xsaves", 0xd, 1, 0, 3, kAvx},
    {"ptwrite", 0x14, 0, 1, 4, kNone}, {"widekl", 0x19, 0, 1, 2, kNone},
    {"amx-fp8", 0x1e, 1, 0, 4, kAmx}, {"amx-tf32", 0x1e, 1, 0, 6, kAmx}, {"amx-avx512", 0x1e, 1, 0, 7, kAmx},
    {"amx-movrs", 0x1e, 1, 0, 8, kAmx},
};

//! The CPUID registers of one leaf and subleaf (all zero where the CPU does not have it).
struct Leaf {
  unsigned reg[4] = {0, 0, 0, 0};
};

//! What this CPU reports, read once per process.
struct Host {
  Leaf l1, ext1, ext8, l7, l7s1, ld1, l14, l19, l1e1, l24;
  bool saves[5] = {true, false, false, false, false};  //!< by State

  const Leaf* leaf(unsigned leaf, unsigned subleaf) const {
    switch (leaf) {
      case 1: return &l1;
      case kExt1: return &ext1;
      case kExt8: return &ext8;
      case 7: return subleaf == 0 ? &l7 : &l7s1;
      case 0xd: return &ld1;
      case 0x14: return &l14;
      case 0x19: return &l19;
      case 0x1e: return &l1e1;
      default: return nullptr;
    }
  }
};

#if defined(__x86_64__) || defined(__i386__)
inline Leaf read_leaf(unsigned max, unsigned leaf, unsigned subleaf) {
  Leaf out;
  if (leaf <= max) __cpuid_count(leaf, subleaf, out.reg[0], out.reg[1], out.reg[2], out.reg[3]);
  return out;
}

inline Host read_host() {
  Host host;
  unsigned max = __get_cpuid_max(0, nullptr);
  unsigned max_ext = __get_cpuid_max(0x80000000u, nullptr);
  if (max < 1) return host;
  host.l1 = read_leaf(max, 1, 0);
  host.ext1 = read_leaf(max_ext, kExt1, 0);
  host.ext8 = read_leaf(max_ext, kExt8, 0);
  host.l7 = read_leaf(max, 7, 0);
  if (host.l7.reg[0] >= 1) host.l7s1 = read_leaf(max, 7, 1);
  host.ld1 = read_leaf(max, 0xd, 1);
  host.l14 = read_leaf(max, 0x14, 0);
  host.l19 = read_leaf(max, 0x19, 0);
  host.l1e1 = read_leaf(max, 0x1e, 1);
  host.l24 = read_leaf(max, 0x24, 0);
  // xgetbv exists when the OS enabled XSAVE (OSXSAVE, leaf 1 ECX bit 27).
  if ((host.l1.reg[2] >> 27) & 1) {
    unsigned xcr0, high;
    __asm__ volatile("xgetbv" : "=a"(xcr0), "=d"(high) : "c"(0));
    bool avx = ((host.l1.reg[2] >> 28) & 1) && (xcr0 & 0x6) == 0x6;
    host.saves[kAvx] = avx;
    host.saves[kAvx512] = avx && (xcr0 & 0xe0) == 0xe0;
    host.saves[kAmx] = (xcr0 & 0x60000) == 0x60000;
    host.saves[kApx] = (xcr0 >> 19) & 1;
  }
  return host;
}
#else
inline Host read_host() { return Host(); }  // features of other architectures are not detected
#endif

inline const Host& host() {
  static const Host detected = read_host();
  return detected;
}

inline bool x86() {
#if defined(__x86_64__) || defined(__i386__)
  return true;
#else
  return false;
#endif
}

//! Whether this CPU has feature \p name: 1 yes, 0 no, -1 unknown to this runtime.
inline int has_feature(const std::string& name) {
  if (!x86()) return -1;
  const Host& h = host();
  if (name == "avx10.1" || name == "avx10.2") {
    bool avx10 = (h.l7s1.reg[3] >> 19) & 1;
    unsigned version = h.l24.reg[1] & 0xff;
    return avx10 && h.saves[kAvx512] && version >= (name == "avx10.1" ? 1u : 2u);
  }
  for (const Bit& bit : kBits) {
    if (name != bit.name) continue;
    const Leaf* leaf = h.leaf(bit.leaf, bit.subleaf);
    return ((leaf->reg[bit.reg] >> bit.bit) & 1) && h.saves[bit.state];
  }
  return -1;
}

}  // namespace cpu_detail

RELAY_AOT_RUNTIME_LINKAGE std::vector<std::pair<std::string, bool>> cpu_features() {
  std::vector<std::pair<std::string, bool>> out;
  if (!cpu_detail::x86()) return out;
  for (const cpu_detail::Bit& bit : cpu_detail::kBits) out.emplace_back(bit.name, cpu_detail::has_feature(bit.name) == 1);
  for (const char* name : {"avx10.1", "avx10.2"}) out.emplace_back(name, cpu_detail::has_feature(name) == 1);
  return out;
}

RELAY_AOT_RUNTIME_LINKAGE std::string cpu_mismatch(const char* target, const char* const* features, int count) {
  std::string missing;
  for (int i = 0; i < count; ++i) {
    int has = cpu_detail::has_feature(features[i]);
    if (has == 1) continue;
    missing += (missing.empty() ? "" : ", ") + std::string(features[i]) + (has < 0 ? " (not detectable here)" : "");
  }
  if (missing.empty()) return missing;
  return std::string("the kernels were compiled for `") + target +
         "` and use CPU features this machine does not have: " + missing +
         ". Compile the model on this machine (the default target is its CPU), or for a CPU it "
         "matches (target=\"llvm\" runs on any x86-64)";
}

RELAY_AOT_RUNTIME_LINKAGE void check_cpu(const CpuRequirement& cpu) {
  std::string why = cpu_mismatch(cpu.target, cpu.features, cpu.count);
  if (!why.empty()) throw Error("CpuFeatureError", why);
  cpu.ok.store(1, std::memory_order_release);
}

}  // namespace relay_aot

// ---- entry.h -----------------------------------------------------------------------------------

namespace relay_aot {

namespace {

/*!
 * \brief How messages name parameter \p i: "argument 0 (%x)". The checks take the name on every
 *        call and use it only in a message: the names of the last signature asked about are
 *        kept (per thread), so that a call builds no string.
 */
inline const std::string& argument_name(const EntrySignature& signature, int i) {
  thread_local const EntrySignature* cached = nullptr;
  thread_local std::vector<std::string> params, names;  // the parameters' names, the messages'
  // the text compared too: another library's signature may be loaded where an unloaded one was
  if (cached != &signature || static_cast<int>(params.size()) != signature.arity || params[i] != signature.names[i]) {
    params.clear();
    names.clear();
    for (int k = 0; k < signature.arity; ++k) {
      params.emplace_back(signature.names[k]);
      names.push_back("argument " + std::to_string(k) + " (%" + params.back() + ")");
    }
    cached = &signature;
  }
  return names[i];
}

}  // namespace

RELAY_AOT_RUNTIME_LINKAGE std::vector<ObjectRef> entry_arguments(TVMValue* args, int* type_codes, int num_args, const EntrySignature& signature) {
  if (num_args != signature.arity) {
    raise_type_error("the program takes " + std::to_string(signature.arity) + " arguments, got " +
                     std::to_string(num_args));
  }
  TVMArgs packed(args, type_codes, num_args);
  std::vector<ObjectRef> values;
  values.reserve(num_args);
  for (int i = 0; i < num_args; ++i) {
    values.push_back(object_from_arg(packed[i], argument_name(signature, i), signature.types[signature.param_types[i]]));
  }
  check_arguments(values.data(), signature);
  return values;
}

RELAY_AOT_RUNTIME_LINKAGE void check_arguments(const ObjectRef* values, const EntrySignature& signature) {
  for (int i = 0; i < signature.arity; ++i) {
    check_value(values[i], signature.param_types[i], signature.types, argument_name(signature, i));
  }
  check_shared_extents(values, signature.shared_extents, signature.num_shared_extents, signature.names);
}

RELAY_AOT_RUNTIME_LINKAGE void entry_result(ObjectRef result, TVMValue* ret, int* ret_type_code) {
  TVMRetValue rv;
  rv = std::move(result);
  rv.MoveToCHost(ret, ret_type_code);
}

RELAY_AOT_RUNTIME_LINKAGE int packed_metadata(const char* text, size_t size, TVMValue* ret, int* ret_type_code) {
  try {
    entry_result(tvm::runtime::String(std::string(text, size)), ret, ret_type_code);
    return 0;
  } catch (const std::exception& e) {
    return TVMAPIHandleException(e);
  }
}

namespace detail {

using tvm::runtime::ObjectPtr;
using tvm::runtime::String;

/*!
 * \brief The executor module of `executor_module` (entry.h): the program's inputs, set one by
 *        one, and the outputs of its last run. Every function checks what it is given and
 *        raises relay_aot's errors (argument errors name the input); `run` checks the inputs as
 *        the entry checks its arguments.
 */
class ExecutorNode final : public tvm::runtime::ModuleNode {
 public:
  ExecutorNode(const EntrySignature& signature, EntryBody body)
      : signature_(signature), body_(body), inputs_(signature.arity), owned_(signature.arity, false) {}

  const char* type_key() const final { return "relay_aot.Executor"; }
  int GetPropertyMask() const final { return tvm::runtime::ModulePropertyMask::kRunnable; }

  PackedFunc GetFunction(const String& name, const ObjectPtr<Object>& self) final {
    using tvm::runtime::TVMArgs;
    if (name == "set_input" || name == "set_input_zero_copy") {
      const bool copy = name == "set_input";
      return PackedFunc([self, this, copy](TVMArgs args, TVMRetValue*) {
        const Lock lock(mutex_);
        arity(args, 2, "set_input(key, value)");
        set_input(input_index(args[0]), args[1], copy);
      });
    }
    if (name == "get_input") {
      return PackedFunc([self, this](TVMArgs args, TVMRetValue* rv) {
        const Lock lock(mutex_);
        arity(args, 1, "get_input(key)");
        *rv = get_input(input_index(args[0]));
      });
    }
    if (name == "get_input_index") {
      return PackedFunc([self, this](TVMArgs args, TVMRetValue* rv) {
        const Lock lock(mutex_);
        arity(args, 1, "get_input_index(name)");
        *rv = find_input(args[0].operator std::string());
      });
    }
    if (name == "get_input_name") {
      return PackedFunc([self, this](TVMArgs args, TVMRetValue* rv) {
        const Lock lock(mutex_);
        arity(args, 1, "get_input_name(index)");
        *rv = String(signature_.names[checked_index(args[0].operator int64_t(), signature_.arity, "input")]);
      });
    }
    if (name == "get_num_inputs") {
      return PackedFunc([self, this](TVMArgs, TVMRetValue* rv) { *rv = signature_.arity; });
    }
    if (name == "get_input_info") {
      return PackedFunc([self, this](TVMArgs, TVMRetValue* rv) { *rv = input_info(); });
    }
    if (name == "get_num_outputs") {
      return PackedFunc([self, this](TVMArgs, TVMRetValue* rv) { *rv = count_outputs(signature_.result_type); });
    }
    if (name == "run") {
      return PackedFunc([self, this](TVMArgs args, TVMRetValue*) {
        const Lock lock(mutex_);
        arity(args, 0, "run()");
        run();
      });
    }
    if (name == "run_from_inputs") {
      // The graph executor's end-to-end benchmark: (device type, device id, name, value, ...).
      return PackedFunc([self, this](TVMArgs args, TVMRetValue* rv) {
        const Lock lock(mutex_);
        if (args.size() < 2 || args.size() % 2 != 0) {
          throw Error("ArgumentValueError", "run_from_inputs(device_type, device_id, name, value, ...) takes pairs");
        }
        for (int i = 2; i < args.size(); i += 2) set_input(input_index(args[i]), args[i + 1], true);
        run();
        *rv = tvm::runtime::Array<ObjectRef>(outputs_);
      });
    }
    if (name == "get_output") {
      return PackedFunc([self, this](TVMArgs args, TVMRetValue* rv) {
        const Lock lock(mutex_);
        if (args.size() != 1 && args.size() != 2) throw Error("ArgumentValueError", "get_output(index[, out]) takes 1 or 2 arguments");
        if (!ran_) throw Error("ArgumentValueError", "get_output: the program has not run yet (run() first)");
        const ObjectRef& value = outputs_[checked_index(args[0].operator int64_t(), outputs_.size(), "output")];
        if (args.size() == 2) {
          if (value.as<NDArray::Container>() == nullptr) {
            throw Error("ArgumentValueError", "get_output(index, out): that output is not a tensor");
          }
          // None converts to a null DLTensor*, which CopyTo would write through.
          const int code = args[1].type_code();
          if (code != kTVMDLTensorHandle && code != kTVMNDArrayHandle) {
            raise_type_error(std::string("get_output(index, out): out must be a tensor (tvm.nd.array), got ") +
                             tvm::runtime::ArgTypeCode2Str(code));
          }
          tvm::runtime::Downcast<NDArray>(value).CopyTo(args[1].operator DLTensor*());
          return;
        }
        *rv = value;
      });
    }
    if (name == "load_params") {
      // Saved parameters (tvm.runtime.save_param_dict): those that name an input set it, the
      // others are ignored, as by the graph executor.
      return PackedFunc([self, this](TVMArgs args, TVMRetValue*) {
        const Lock lock(mutex_);
        arity(args, 1, "load_params(bytes)");
        const PackedFunc* load = tvm::runtime::Registry::Get("runtime.LoadParams");
        ICHECK(load != nullptr) << "TVM's runtime.LoadParams is not registered";
        tvm::runtime::Map<String, NDArray> params = (*load)(String(args[0].operator std::string()));
        for (const auto& [key, value] : params) {
          const int index = find_input(key);
          if (index >= 0) store(index, value, true);
        }
      });
    }
    if (name == "share_params") {
      return PackedFunc([self](TVMArgs, TVMRetValue*) {
        throw Error("ArgumentValueError", "share_params: a relay_aot library has its parameters built in; set inputs with set_input");
      });
    }
    if (name == "invoke") {
      // The VM's invoke(function name), on the inputs set: relay_aot compiles @main only.
      return PackedFunc([self, this](TVMArgs args, TVMRetValue* rv) {
        const Lock lock(mutex_);
        if (args.size() != 1 || args[0].operator std::string() != "main") {
          throw Error("ArgumentValueError", "invoke: a relay_aot library runs @main only: invoke(\"main\")");
        }
        *rv = run();
      });
    }
    return PackedFunc();
  }

 private:
  static void arity(const tvm::runtime::TVMArgs& args, int expected, const char* usage) {
    if (args.size() != expected) {
      throw Error("ArgumentValueError", std::string(usage) + " takes " + std::to_string(expected) + " arguments, got " +
                                            std::to_string(args.size()));
    }
  }

  static size_t checked_index(int64_t index, size_t count, const char* what) {
    if (index < 0 || static_cast<size_t>(index) >= count) {
      throw Error("ArgumentValueError", std::string("there is no ") + what + " " + std::to_string(index) + " (the program has " +
                                            std::to_string(count) + ")");
    }
    return static_cast<size_t>(index);
  }

  int find_input(const std::string& name) const {
    for (int i = 0; i < signature_.arity; ++i) {
      if (name == signature_.names[i]) return i;
    }
    return -1;
  }

  int input_index(const tvm::runtime::TVMArgValue& key) const {
    if (key.type_code() == kDLInt) return static_cast<int>(checked_index(key.operator int64_t(), signature_.arity, "input"));
    const std::string name = key.operator std::string();
    const int index = find_input(name);
    if (index < 0) {
      std::string known;
      for (int i = 0; i < signature_.arity; ++i) known += std::string(i ? ", %" : "%") + signature_.names[i];
      throw Error("ArgumentValueError", "the program has no input named '" + name + "' (its inputs: " +
                                            (known.empty() ? std::string("none") : known) + ")");
    }
    return index;
  }

  const TypeDesc& input_type(int index) const { return signature_.types[signature_.param_types[index]]; }

  /*! The input's own buffer, for a tensor type of static shape (the graph executor's kind). */
  bool has_buffer(int index) const {
    const TypeDesc& type = input_type(index);
    if (type.kind != Kind::kTensor || type.dtype.bits == 0) return false;
    for (int d = 0; d < type.ndim; ++d) {
      if (type.shape[d] == kAnyDim) return false;
    }
    return true;
  }

  NDArray buffer(int index) {
    if (owned_[index]) return tvm::runtime::Downcast<NDArray>(inputs_[index]);
    const TypeDesc& type = input_type(index);
    NDArray array = NDArray::Empty(tvm::runtime::ShapeTuple(type.shape, type.shape + type.ndim), type.dtype, DLDevice{kDLCPU, 0});
    inputs_[index] = array;
    owned_[index] = true;
    return array;
  }

  void set_input(int index, const tvm::runtime::TVMArgValue& value, bool copy) {
    store(index, object_from_arg(value, argument_name(signature_, index), input_type(index)), copy);
  }

  void store(int index, const ObjectRef& converted, bool copy) {
    if (copy && converted.as<NDArray::Container>() != nullptr) {
      // set_input copies, as the graph executor's does: the caller may reuse its array.
      NDArray source = tvm::runtime::Downcast<NDArray>(converted);
      if (owned_[index] && same_layout(tvm::runtime::Downcast<NDArray>(inputs_[index]), source)) {
        tvm::runtime::Downcast<NDArray>(inputs_[index]).CopyFrom(source);
        return;
      }
      NDArray own = NDArray::Empty(source.Shape(), source->dtype, DLDevice{kDLCPU, 0});
      own.CopyFrom(source);
      inputs_[index] = own;
      owned_[index] = true;
      return;
    }
    inputs_[index] = converted;
    owned_[index] = false;
  }

  static bool same_layout(const NDArray& a, const NDArray& b) {
    const tvm::runtime::ShapeTuple x = a.Shape(), y = b.Shape();
    return tvm::runtime::DataType(a->dtype) == tvm::runtime::DataType(b->dtype) && std::equal(x.begin(), x.end(), y.begin(), y.end());
  }

  TVMRetValue get_input(int index) {
    TVMRetValue rv;
    if (inputs_[index].defined()) {
      rv = inputs_[index];
    } else if (has_buffer(index)) {
      rv = buffer(index);
    }
    return rv;  // None: an input of another type that was never set
  }

  ObjectRef input_info() const {
    tvm::runtime::Map<String, ObjectRef> shapes, dtypes;
    for (int i = 0; i < signature_.arity; ++i) {
      const TypeDesc& type = input_type(i);
      if (type.kind != Kind::kTensor || type.dtype.bits == 0) continue;
      shapes.Set(signature_.names[i], tvm::runtime::ShapeTuple(type.shape, type.shape + type.ndim));
      dtypes.Set(signature_.names[i], String(tvm::runtime::DLDataType2String(type.dtype)));
    }
    tvm::runtime::Map<String, ObjectRef> info;
    info.Set("shape", shapes);
    info.Set("dtype", dtypes);
    return info;
  }

  int count_outputs(int type) const {
    const TypeDesc& desc = signature_.types[type];
    if (desc.kind != Kind::kTuple) return 1;
    int count = 0;
    for (int i = 0; i < desc.num_fields; ++i) count += count_outputs(desc.fields[i]);
    return count;
  }

  void flatten(const ObjectRef& value, int type) {
    const TypeDesc& desc = signature_.types[type];
    if (desc.kind != Kind::kTuple) {
      outputs_.push_back(value);
      return;
    }
    const tvm::runtime::ADT tuple = tvm::runtime::Downcast<tvm::runtime::ADT>(value);
    for (int i = 0; i < desc.num_fields; ++i) flatten(tuple[i], desc.fields[i]);
  }

  ObjectRef run() {
    for (int i = 0; i < signature_.arity; ++i) {
      if (!inputs_[i].defined() && input_type(i).kind != Kind::kAny) {
        throw Error("ArgumentValueError", argument_name(signature_, i) + " was never set (set_input)");
      }
    }
    require_cpu(*signature_.cpu);
    check_arguments(inputs_.data(), signature_);
    ObjectRef result = body_(inputs_.data());
    outputs_.clear();
    flatten(result, signature_.result_type);
    ran_ = true;
    return result;
  }

  const EntrySignature& signature_;
  EntryBody body_;
  std::vector<ObjectRef> inputs_;
  std::vector<bool> owned_;  //!< inputs_[i] is a buffer of the module's own (set_input copies into it)
  std::vector<ObjectRef> outputs_;
  bool ran_ = false;
  // One caller at a time: TVM's graph executor is not safe to share between threads, but a run
  // racing get_output must not see half-replaced outputs. Recursive: a callable input that calls
  // back into the module on the same thread must not deadlock.
  std::recursive_mutex mutex_;
  using Lock = std::lock_guard<std::recursive_mutex>;
};

}  // namespace detail

RELAY_AOT_RUNTIME_LINKAGE tvm::runtime::Module executor_module(const EntrySignature& signature, EntryBody body, DLDevice device) {
  if (device.device_type != kDLCPU) {
    throw Error("ArgumentValueError", "a relay_aot library runs on the CPU, not on " +
                                          std::string(tvm::runtime::DLDeviceType2Str(device.device_type)) + "(" +
                                          std::to_string(device.device_id) + ")");
  }
  return tvm::runtime::Module(tvm::runtime::make_object<detail::ExecutorNode>(signature, body));
}

}  // namespace relay_aot

// ---- capi.h ------------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE std::string& c_error_text() {
  thread_local std::string text;
  return text;
}

RELAY_AOT_RUNTIME_LINKAGE void c_require(const void* pointer, const char* what) {
  if (pointer == nullptr) raise_type_error(std::string(what) + " is NULL");
}

RELAY_AOT_RUNTIME_LINKAGE const ShapeTuple& leaked_shape(std::initializer_list<int64_t> dims) {
  return *new ShapeTuple(std::vector<int64_t>(dims));  // never destroyed: no destructor at exit
}

RELAY_AOT_RUNTIME_LINKAGE NDArray c_input(const void* data, const ShapeTuple& shape, DLDataType dtype, const char* what) {
  c_require(data, what);
  if (reinterpret_cast<uintptr_t>(data) % detail::kAlignment != 0) {
    NDArray copy = alloc_tensor(shape, dtype);
    std::memcpy(arg(copy)->data, data, tvm::runtime::GetDataSize(*arg(copy)));
    return copy;
  }
  auto* view = new NDArray::Container(const_cast<void*>(data), shape, dtype, kDevice);
  view->SetDeleter(&detail::delete_view);
  return adopt<NDArray>(view);
}

RELAY_AOT_RUNTIME_LINKAGE void c_output(const ObjectRef& tensor, void* out, size_t nbytes, const char* what) {
  c_require(out, what);
  const DLTensor* t = arg(tensor);
  // memmove: a result may be an input, and a caller may pass the same buffer for both.
  std::memmove(out, static_cast<const char*>(t->data) + t->byte_offset, nbytes);
}

namespace {

/*! \brief TVM's MaxConcurrency (threading_backend.cc) without its environment: the processors, halved on x86. */
int processor_concurrency() {
  int count = static_cast<int>(std::thread::hardware_concurrency());
#if defined(__x86_64__) || defined(_M_X64)
  count /= 2;  // as TVM: hyper-threads ignored
#endif
  return std::max(count, 1);
}

/*! \brief The threads TVM's thread pool would run a parallel loop on (TVM's MaxConcurrency). */
int max_concurrency() {
  const char* value = std::getenv("TVM_NUM_THREADS");
  if (value == nullptr) value = std::getenv("OMP_NUM_THREADS");
  if (value != nullptr) return std::max(std::atoi(value), 1);
  static const int processors = processor_concurrency();
  return processors;
}

}  // namespace

RELAY_AOT_RUNTIME_LINKAGE int parallel_launch(FTVMParallelLambda flambda, void* cdata, int num_task) {
  if (max_concurrency() != 1) return TVMBackendParallelLaunch(flambda, cdata, num_task);
  // TVM's own single-thread case
  std::atomic<int32_t> sync_counter{0};
  TVMParallelGroupEnv env;
  env.num_task = 1;
  env.sync_handle = &sync_counter;
  (*flambda)(0, &env, cdata);
  return 0;
}

RELAY_AOT_RUNTIME_LINKAGE int get_func_from_env(void* /*module_context*/, const char* name, TVMFunctionHandle* out) {
  if (TVMFuncGetGlobal(name, out) != 0) return -1;
  if (*out == nullptr) {
    TVMAPISetLastError((std::string("cannot find the global function ") + name).c_str());
    return -1;
  }
  return 0;
}

}  // namespace relay_aot

// ---- profile.h ---------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE void Profiler::start(std::vector<std::string> functions, std::vector<std::string> kernels, int64_t max_events) {
  function_names_ = std::move(functions);
  kernel_names_ = std::move(kernels);
  functions_.assign(function_names_.size(), FunctionTotals{});
  kernels_.assign(kernel_names_.size(), KernelTotals{});
  for (auto& a : allocations_) a = {0, 0};
  stack_.clear();
  events_.clear();
  max_events_ = max_events > 0 ? static_cast<size_t>(max_events) : 0;
  dropped_ = 0;
  total_ = 0;
  top_calls_ = 0;
  origin_ = profile_clock();
  active_ = true;
}

RELAY_AOT_RUNTIME_LINKAGE std::string Profiler::stop() {
  active_ = false;
  std::string out = "{\"total_ns\":" + std::to_string(total_) + ",\"top_calls\":" + std::to_string(top_calls_);
  out += ",\"unfinished_calls\":" + std::to_string(stack_.size());
  out += ",\"functions\":[";
  for (size_t i = 0; i < functions_.size(); ++i) {
    const FunctionTotals& f = functions_[i];
    out += (i ? ",{" : "{") + std::string("\"name\":") + json_string(function_names_[i]);
    out += ",\"calls\":" + std::to_string(f.calls) + ",\"inclusive_ns\":" + std::to_string(f.inclusive);
    out += ",\"exclusive_ns\":" + std::to_string(f.exclusive) + ",\"self_ns\":" + std::to_string(f.self) + "}";
  }
  out += "],\"kernels\":[";
  for (size_t i = 0; i < kernels_.size(); ++i) {
    const KernelTotals& k = kernels_[i];
    out += (i ? ",{" : "{") + std::string("\"name\":") + json_string(kernel_names_[i]);
    out += ",\"calls\":" + std::to_string(k.calls) + ",\"ns\":" + std::to_string(k.time) + "}";
  }
  out += "],\"allocations\":{";
  const char* kinds[] = {"tensor", "adt", "closure", "ref"};
  for (int i = 0; i < 4; ++i) {
    out += (i ? ",\"" : "\"") + std::string(kinds[i]) + "\":[" + std::to_string(allocations_[i].count) + "," +
           std::to_string(allocations_[i].bytes) + "]";
  }
  out += "},\"dropped_events\":" + std::to_string(dropped_) + ",\"events\":[";
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    out += (i ? ",[" : "[") + std::to_string(e.kind) + "," + std::to_string(e.id) + "," + std::to_string(e.start) +
           "," + std::to_string(e.duration) + "]";
  }
  out += "]}";
  stack_.clear();
  events_.clear();
  events_.shrink_to_fit();
  return out;
}

RELAY_AOT_RUNTIME_LINKAGE std::string Profiler::json_string(const std::string& text) {
  std::string out = "\"";
  for (unsigned char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c >= 0x7f) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\u%04x", c);
      out += buffer;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

RELAY_AOT_RUNTIME_LINKAGE int packed_profile(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code,
                          const ProfileNames& names) {
  try {
    if (num_args != 2) raise_type_error("the profile function takes (command, max_events)");
    TVMArgs packed(args, type_codes, num_args);
    int64_t command = packed[0];
    int64_t max_events = packed[1];
    std::string out;
    if (command == 1) {
      profiler().start(std::vector<std::string>(names.functions, names.functions + names.num_functions),
                       std::vector<std::string>(names.kernels, names.kernels + names.num_kernels), max_events);
    } else {
      out = profiler().stop();
    }
    entry_result(tvm::runtime::String(out), ret, ret_type_code);
    return 0;
  } catch (const std::exception& e) {
    return TVMAPIHandleException(e);
  }
}

}  // namespace relay_aot

// ---- memory.h ----------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE void release(Object* obj, Object::FDeleter real_deleter) {
  DeletionQueue& queue = deletion_queue();
  if (queue.draining) {
    queue.pending.emplace_back(obj, real_deleter);
    return;
  }
  queue.draining = true;
  real_deleter(obj);
  while (!queue.pending.empty()) {
    auto next = queue.pending.back();
    queue.pending.pop_back();
    next.second(next.first);
  }
  queue.draining = false;
}

namespace detail {

RELAY_AOT_RUNTIME_LINKAGE BlockCache::~BlockCache() {
  for (SizeClass& c : classes_) {
    for (void* block : c.blocks) std::free(block);
  }
}

RELAY_AOT_RUNTIME_LINKAGE void BlockCache::Give(void* block, size_t bytes) {
  if (bytes <= kMaxCachedBlock && cached_bytes_ + bytes <= kCachedBytes) {
    for (SizeClass& c : classes_) {
      if (c.bytes == bytes) {
        c.blocks.push_back(block);
        cached_bytes_ += bytes;
        return;
      }
    }
    if (classes_.size() < kCachedSizes) {
      classes_.push_back({bytes, {block}});
      cached_bytes_ += bytes;
      return;
    }
    // A full cache gives an emptied class to the new size: a tensor that grows at every
    // step (a scan output, a decoder's tokens) would otherwise leave every class to sizes
    // never asked for again and send each later allocation to malloc.
    for (SizeClass& c : classes_) {
      if (c.blocks.empty()) {
        c.bytes = bytes;
        c.blocks.push_back(block);
        cached_bytes_ += bytes;
        return;
      }
    }
  }
  std::free(block);
}

RELAY_AOT_RUNTIME_LINKAGE void free_adt(Object* obj) {
  auto* adt = static_cast<ADTObj*>(obj);
  size_t bytes = rounded(sizeof(ADTObj) + adt->size * sizeof(ObjectRef));
  adt->~ADTObj();  // destroys the fields
  block_cache().Give(adt, bytes);
}

RELAY_AOT_RUNTIME_LINKAGE void free_adt_iteratively(Object* obj) { release(obj, &free_adt); }

}  // namespace detail
}  // namespace relay_aot

// ---- stack.h -----------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE size_t max_segment_bytes() {
  static const size_t limit = [] {
    const char* env = std::getenv("RELAY_AOT_MAX_STACK_MB");
    long long mb = env != nullptr ? std::atoll(env) : 4096;
    return static_cast<size_t>(mb > 0 ? mb : 4096) << 20;
  }();
  return limit;
}

RELAY_AOT_RUNTIME_LINKAGE char* thread_stack_limit(uint64_t* range) {
  pthread_attr_t attr;
  void* base = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
  }
  if (base == nullptr || size < 4 * kStackMargin) {
    // Unknown bounds, or a small stack (threads may have 256 KiB): run every call of generated
    // code on a segment of its own, where the bounds are known.
    *range = 0;
    return reinterpret_cast<char*>(UINTPTR_MAX);
  }
  char* limit = static_cast<char*>(base) + kStackMargin;
  *range = detail::pack_range(reinterpret_cast<uintptr_t>(limit), reinterpret_cast<uintptr_t>(base) + size);
  return limit;
}

namespace detail {

/*! \brief Gives up the thread's claim on safe_range when it exits (before its stack is freed). */
struct RangeOwner {
  uint64_t range = 0;
  ~RangeOwner() {
    uint64_t expected = range;
    if (expected != 0) safe_range.compare_exchange_strong(expected, 0);
  }
};

// Not inlined into stack_low even where this file is included into a unit: the fast path
// stays a load and a comparison.
[[gnu::noinline]] RELAY_AOT_RUNTIME_LINKAGE bool stack_low_slow(uintptr_t frame) {
  StackState& state = stack_state();
  if (state.limit == nullptr) {
    uint64_t range = 0;
    state.limit = thread_stack_limit(&range);
    uint64_t none = 0;
    if (range != 0 && safe_range.load(std::memory_order_relaxed) == 0 && safe_range.compare_exchange_strong(none, range)) {
      static thread_local RangeOwner owner;
      owner.range = range;
    }
  }
  return frame < reinterpret_cast<uintptr_t>(state.limit);
}

/*! \brief A call running on a new segment, with room for its exception. */
struct SegmentCall {
  void (*run)(void*);
  void* frame;
  std::exception_ptr error;
  ucontext_t caller;
  ucontext_t callee;

  static void Run() {
    auto* self = static_cast<SegmentCall*>(stack_state().pending);
    try {
      self->run(self->frame);
    } catch (...) {
      self->error = std::current_exception();
    }
    // Returning resumes `caller` through uc_link.
  }
};

RELAY_AOT_RUNTIME_LINKAGE void run_on_segment(void (*run)(void*), void* frame) {
  StackState& state = stack_state();
  if (state.segment_bytes + kSegmentSize > max_segment_bytes()) {
    throw Error("RecursionDepthError",
                "the program recursed deeper than relay_aot's limit of " +
                    std::to_string(max_segment_bytes() >> 20) +
                    " MiB of stack (set RELAY_AOT_MAX_STACK_MB to change it)");
  }
  void* memory = mmap(nullptr, kSegmentSize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (memory == MAP_FAILED) {
    throw Error("RecursionDepthError", "could not map another stack segment for deep recursion");
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  mprotect(memory, page, PROT_NONE);  // a guard page: overflow faults instead of corrupting

  SegmentCall call{run, frame, nullptr, {}, {}};
  getcontext(&call.callee);
  call.callee.uc_stack.ss_sp = memory;
  call.callee.uc_stack.ss_size = kSegmentSize;
  call.callee.uc_link = &call.caller;
  makecontext(&call.callee, &SegmentCall::Run, 0);

  char* saved_limit = state.limit;
  state.limit = static_cast<char*>(memory) + page + kStackMargin;
  state.segment_bytes += kSegmentSize;
  state.pending = &call;
  swapcontext(&call.caller, &call.callee);
  state.limit = saved_limit;
  state.segment_bytes -= kSegmentSize;
  munmap(memory, kSegmentSize);

  if (call.error) std::rethrow_exception(call.error);
}

}  // namespace detail
}  // namespace relay_aot

// ---- shape.h -----------------------------------------------------------------------------------

namespace relay_aot {

RELAY_AOT_RUNTIME_LINKAGE void check_computed_shape(const char* kernel, const int64_t* dims, int rank,
                                                    const int64_t* expected) {
  bool bad = false, empty = false;
  uint64_t elements = 1;
  bool overflow = false;
  for (int i = 0; i < rank; ++i) {
    bad = bad || dims[i] < 0 || (expected != nullptr && expected[i] != dims[i]);
    empty = empty || dims[i] == 0;
    if (dims[i] > 0) overflow = overflow || __builtin_mul_overflow(elements, static_cast<uint64_t>(dims[i]), &elements);
  }
  // the message is made only for an error: this check runs at every step of a loop
  auto made = [&] {
    return std::string("kernel ") + kernel + " would make a tensor of shape " + detail::shape_text(dims, rank);
  };
  if (bad) {
    throw Error("ShapeError", made() + (expected != nullptr ? " where its type says " + detail::shape_text(expected, rank) : ""));
  }
  if (!empty && (overflow || elements > static_cast<uint64_t>(INT64_MAX))) {
    throw Error("ShapeError", made() + ", whose number of elements does not fit in 64 bits");
  }
}

RELAY_AOT_RUNTIME_LINKAGE NDArray append_in_place(NDArray& first, const ShapeTuple& shape, DLDataType dtype,
                                                  std::initializer_list<DLTensor*> rest) {
  // One holder (this caller, at its last use): no other value sees the tensor change.
  if (!first.defined() || first.use_count() != 1) return NDArray();
  auto* container = const_cast<NDArray::Container*>(static_cast<const NDArray::Container*>(first.get()));
  const DLTensor& old = container->dl_tensor;
  if (!detail::ContainerAccess::in_cached_block(container) || !detail::is_compact(&old) || old.ndim == 0 ||
      shape.size() == 0 || old.dtype.code != dtype.code || old.dtype.bits != dtype.bits ||
      old.dtype.lanes != dtype.lanes) {
    return NDArray();
  }
  const size_t old_bytes = tvm::runtime::GetDataSize(old);
  size_t appended = 0;
  for (const DLTensor* piece : rest) {
    if (!detail::is_compact(piece)) return NDArray();
    appended += tvm::runtime::GetDataSize(*piece);
  }
  DLTensor grown{old.data, kDevice, static_cast<int>(shape.size()), dtype, const_cast<int64_t*>(shape.data()),
                 nullptr, 0};
  // (A size near the address space is left to alloc_tensor, which reports it.)
  if (tvm::runtime::GetDataSize(grown) != old_bytes + appended || old_bytes + appended > (size_t(1) << 60)) {
    return NDArray();
  }
  // Both have their data after the header (neither is 0-d): only the block's size can differ.
  const size_t capacity = detail::block_capacity(container);
  const size_t needed = detail::block_bytes(grown);
  char* data = static_cast<char*>(old.data);
  size_t out_capacity = capacity;
  void* block = nullptr;
  if (needed > capacity) {
    // No room: a block twice the size, so that the next steps find room (amortised linear,
    // as a std::vector grows); the old bytes are copied once into it.
    out_capacity = detail::kHeaderBytes + detail::bucketed(2 * (old_bytes + appended));
    try {
      block = detail::block_cache().Take(out_capacity);
    } catch (const std::bad_alloc&) {
      return NDArray();  // the caller's allocation of the exact size reports it
    }
    data = static_cast<char*>(block) + detail::kHeaderBytes;
    if (old_bytes != 0) std::memcpy(data, old.data, old_bytes);
  }
  char* to = data + old_bytes;
  for (const DLTensor* piece : rest) {  // before the old block may go: a piece may be the first tensor
    size_t bytes = tvm::runtime::GetDataSize(*piece);
    if (bytes != 0) std::memmove(to, piece->data, bytes);
    to += bytes;
  }
  NDArray out;
  NDArray::Container* target = container;
  if (block == nullptr) {
    out = std::move(first);
    detail::ContainerAccess::reshape(target, shape);
  } else {
    target = detail::ContainerAccess::make(block, data, shape, dtype);
    target->SetDeleter(&detail::free_tensor_block);
    profiler().allocation(AllocKind::kTensor, static_cast<int64_t>(out_capacity));
    out = own<NDArray>(target);
    first = NDArray();
  }
  // The deleter finds the block's bytes here when its shape would say fewer (block_capacity).
  target->manager_ctx = out_capacity != needed ? reinterpret_cast<void*>(out_capacity) : nullptr;
  return out;
}

}  // namespace relay_aot

// ---- tensor.h ----------------------------------------------------------------------------------

namespace relay_aot {
namespace detail {

RELAY_AOT_RUNTIME_LINKAGE void free_tensor_block(tvm::runtime::Object* obj) {
  auto* container = static_cast<NDArray::Container*>(obj);
  size_t bytes = block_capacity(container);
  container->~Container();
  block_cache().Give(container, bytes);
}

RELAY_AOT_RUNTIME_LINKAGE void free_tensor_header(tvm::runtime::Object* obj) {
  auto* container = static_cast<NDArray::Container*>(obj);
  container->~Container();
  block_cache().Give(container, rounded(sizeof(NDArray::Container)));
}

RELAY_AOT_RUNTIME_LINKAGE void free_inline_shape(tvm::runtime::Object* obj) {
  auto* shape = static_cast<InlineShape*>(obj);
  size_t bytes = InlineShape::block_bytes(shape->size);
  shape->~InlineShape();
  block_cache().Give(shape, bytes);
}

}  // namespace detail

RELAY_AOT_RUNTIME_LINKAGE NDArray alloc_tensor(const ShapeTuple& shape, DLDataType dtype) {
  DLTensor probe{nullptr, kDevice, static_cast<int>(shape.size()), dtype,
                 const_cast<int64_t*>(shape.data()), nullptr, 0};
  // Shapes made at run time are checked to have a representable element count
  // (check_computed_shape); the bytes may still be too many, or more than there is.
  uint64_t elements = 1;
  for (int64_t d : shape) elements *= static_cast<uint64_t>(d);
  const uint64_t element_bytes = (dtype.bits * dtype.lanes + 7) / 8;
  auto what = [&] {
    return "a tensor of shape " + detail::shape_text(shape.data(), static_cast<int>(shape.size())) + " and dtype " +
           tvm::runtime::DLDataType2String(dtype);
  };
  if (element_bytes != 0 && elements > (uint64_t(1) << 61) / element_bytes) {
    throw Error("ShapeError", what() + " is too big: its size in bytes exceeds the largest possible allocation");
  }
  void* block;
  try {
    block = detail::block_cache().Take(detail::block_bytes(probe));
  } catch (const std::bad_alloc&) {
    throw Error("MemoryError", "unable to allocate " + std::to_string(elements * element_bytes) + " bytes for " + what());
  }
  char* data = static_cast<char*>(block) + detail::data_offset(probe);
  NDArray::Container* container = detail::ContainerAccess::make(block, data, shape, dtype);
  container->SetDeleter(&detail::free_tensor_block);
  return own<NDArray>(container);
}

RELAY_AOT_RUNTIME_LINKAGE NDArray view_tensor(const NDArray& whole, const ShapeTuple& shape, DLDataType dtype, size_t offset) {
  void* block = detail::block_cache().Take(detail::rounded(sizeof(NDArray::Container)));
  char* data = static_cast<char*>(whole->data) + offset;
  NDArray::Container* container = detail::ContainerAccess::make(block, data, shape, dtype);
  container->SetDeleter(&detail::free_tensor_header);
  return own<NDArray>(container);
}

}  // namespace relay_aot
