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

std::string describe(const Object* value);

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

std::string path_of(const std::vector<Pending>& seen, int index);

}  // namespace detail

/*!
 * \brief One axis of a tensor inside an entry parameter (relay_aot.ir.Axis): the parameter, the
 *        tuple fields from it to the tensor (\p depth of them), and the axis.
 */
struct AxisDesc {
  int param;
  int depth;
  const int* path;
  int axis;
};

/*!
 * \brief A named dimension of the program's types (`n` in `Tensor[(n, 16), float32]`) shared by
 *        several axes of the entry's parameters, which must agree (relay_aot.ir.SharedExtent).
 */
struct SharedExtentDesc {
  const char* name;
  int count;
  const AxisDesc* axes;
};

/*!
 * \brief Raise ArgumentValueError unless, for each of \p count shared dimensions, every axis it
 *        names has the same extent in \p values (the entry's arguments, each already checked
 *        against its type). \p names are the parameters' Relay names, for the message.
 */
void check_shared_extents(const ObjectRef* values, const SharedExtentDesc* extents, int count,
                          const char* const* names);

/*!
 * \brief Raise TypeError/ValueError unless \p value fits type \p type of \p table.
 * \param what How the value is called in messages ("argument 0 (%x)").
 */
void check_value(const ObjectRef& value, int type, const TypeDesc* table, const std::string& what);

}  // namespace relay_aot

#endif  // RELAY_AOT_CHECK_H_
