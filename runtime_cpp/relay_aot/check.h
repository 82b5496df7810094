/*!
 * \file relay_aot/check.h
 * \brief Checking values that enter compiled code from outside against the program's types.
 *
 * Generated code trusts its static types (it reads ADT fields and tensor data without checks),
 * so every value that comes from a caller -- the entry point's arguments, the arguments of a
 * closure called through its PackedFunc, the result of a foreign function the program calls --
 * is checked first, against a table of type descriptors generated with the program. A value
 * that does not fit raises TypeError/ValueError naming where it was found; nothing reads memory
 * that is not there.
 *
 * Traversal uses an explicit work list, so a list of a million elements is checked without
 * deep recursion, and visits each (object, type) pair once: a value whose parts are shared (a
 * tree of depth 60 whose two children are the same object, which programs build and return)
 * is checked in time linear in its number of objects, not its number of paths. Only objects
 * with more than one reference can be reached twice, so only those are remembered.
 */
#ifndef RELAY_AOT_CHECK_H_
#define RELAY_AOT_CHECK_H_

#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/container/array.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <unordered_set>
#include <vector>

#include "errors.h"
#include "values.h"

namespace relay_aot {

/*! \brief A ? dimension in a type's shape: any extent (relay_aot.ir.ANY_DIM). */
constexpr int64_t kAnyDim = -1;

/*! \brief What kind of value a type describes. */
enum class Kind : int8_t { kAny, kTensor, kTuple, kAdt, kFunc, kRef };

/*! \brief One constructor of an ADT type (with its field types instantiated). */
struct CtorDesc {
  int32_t tag;
  int num_fields;
  const int* fields;  //!< type indices of the fields
  const char* name;
};

/*! \brief A static type; indices refer to entries of the same table. */
struct TypeDesc {
  Kind kind;
  const char* text;  //!< the type as Relay-like text, for messages
  // tensor
  DLDataType dtype;
  int ndim;
  const int64_t* shape;
  // tuple (fields) / ADT (ctors) / reference (fields[0] is the contents)
  int num_fields;
  const int* fields;
  int num_ctors;
  const CtorDesc* ctors;
};

namespace detail {

inline std::string describe(const Object* value) {
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

/*! \brief A value still to check, and how it was reached (kept compact: lists can be long). */
struct Pending {
  const Object* value;
  int type;
  int parent;            //!< index of the entry it was found in, or -1
  int index;             //!< field index within the parent
  const char* ctor;      //!< constructor name of the parent, if an ADT; nullptr otherwise
  bool is_ref_contents;  //!< found as the contents of a reference
};

/*! \brief An (object, type index) pair, for remembering shared objects already checked. */
struct Visit {
  const Object* value;
  int type;
  bool operator==(const Visit& other) const { return value == other.value && type == other.type; }
};

struct VisitHash {
  size_t operator()(const Visit& v) const {
    return std::hash<const void*>()(v.value) ^ (static_cast<size_t>(v.type) * 0x9E3779B97F4A7C15ull);
  }
};

inline std::string path_of(const std::vector<Pending>& seen, int index) {
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

}  // namespace detail

/*!
 * \brief Raise TypeError/ValueError unless \p value fits type \p type of \p table.
 * \param what How the value is called in messages ("argument 0 (%x)").
 */
inline void check_value(const ObjectRef& value, int type, const TypeDesc* table, const std::string& what) {
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
        if (obj == nullptr || !obj->IsInstance<NDArray::Container>()) fail("TypeError", detail::describe(obj));
        const DLTensor& dl = static_cast<const NDArray::Container*>(obj)->dl_tensor;
        if (dl.device.device_type != kDLCPU) fail("ValueError", "a tensor on a device other than the CPU");
        if (dl.dtype.code != desc.dtype.code || dl.dtype.bits != desc.dtype.bits ||
            dl.dtype.lanes != desc.dtype.lanes) {
          fail("TypeError", detail::describe(obj));
        }
        bool same = dl.ndim == desc.ndim;
        // A ? dimension (kAnyDim) accepts every extent; a static one must match.
        for (int i = 0; same && i < desc.ndim; ++i) same = desc.shape[i] == kAnyDim || dl.shape[i] == desc.shape[i];
        if (!same) fail("ValueError", detail::describe(obj));
        break;
      }
      case Kind::kTuple: {
        if (obj == nullptr || !obj->IsInstance<ADTObj>()) fail("TypeError", detail::describe(obj));
        const auto* a = static_cast<const ADTObj*>(obj);
        if (a->tag != 0) fail("TypeError", detail::describe(obj));
        if (static_cast<int>(a->size) != desc.num_fields) fail("ValueError", detail::describe(obj));
        for (int i = 0; i < desc.num_fields; ++i) {
          seen.push_back({(*a)[i].get(), desc.fields[i], here, i, nullptr, false});
        }
        break;
      }
      case Kind::kAdt: {
        if (obj == nullptr || !obj->IsInstance<ADTObj>()) fail("TypeError", detail::describe(obj));
        const auto* a = static_cast<const ADTObj*>(obj);
        const CtorDesc* ctor = nullptr;
        for (int c = 0; c < desc.num_ctors; ++c) {
          if (desc.ctors[c].tag == a->tag) ctor = &desc.ctors[c];
        }
        if (ctor == nullptr) fail("ValueError", detail::describe(obj) + " (no constructor has that tag)");
        if (static_cast<int>(a->size) != ctor->num_fields) {
          fail("ValueError", detail::describe(obj) + " (" + ctor->name + " has " +
                                 std::to_string(ctor->num_fields) + " fields)");
        }
        for (int i = 0; i < ctor->num_fields; ++i) {
          seen.push_back({(*a)[i].get(), ctor->fields[i], here, i, ctor->name, false});
        }
        break;
      }
      case Kind::kFunc:
        if (obj == nullptr || !obj->IsInstance<tvm::runtime::PackedFuncObj>()) {
          fail("TypeError", detail::describe(obj));
        }
        break;
      case Kind::kRef: {
        if (obj == nullptr || !obj->IsInstance<tvm::runtime::ArrayNode>()) fail("TypeError", detail::describe(obj));
        const auto* cell = static_cast<const tvm::runtime::ArrayNode*>(obj);
        if (cell->size() != 1) fail("TypeError", detail::describe(obj));
        seen.push_back({(*cell)[0].get(), desc.fields[0], here, 0, nullptr, true});
        break;
      }
    }
  }
}

}  // namespace relay_aot

#endif  // RELAY_AOT_CHECK_H_
