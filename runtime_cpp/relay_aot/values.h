/*!
 * \file relay_aot/values.h
 * \brief Runtime values of compiled Relay programs and the small operations the generated
 *        control code performs on them (field access, tags, casts, scalar reads).
 *
 * Relay values map onto TVM runtime objects so that results cross into Python or a C++
 * application without conversion: tensors are NDArray, tuples and constructor values are ADT
 * (tuples with tag 0, as the Relay VM returns them), closures are PackedFunc objects (see
 * closure.h) and references are RefObj (see ref.h).
 */
#ifndef RELAY_AOT_VALUES_H_
#define RELAY_AOT_VALUES_H_

#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/object.h>

#include <cstdint>
#include <utility>

#include "memory.h"

namespace relay_aot {

using tvm::runtime::ADT;
using tvm::runtime::ADTObj;
using tvm::runtime::Downcast;
using tvm::runtime::NDArray;
using tvm::runtime::Object;
using tvm::runtime::ObjectRef;

/*!
 * \brief Convert a value of static type "any" to its known static type, without a check.
 *
 * Relay is statically typed and every value from outside is checked against the program's
 * types on entry (check.h), so inside generated code the static type is always right. (TVM's
 * Downcast re-checks the type index each time: measurable on list-heavy programs.)
 */
template <typename T>
inline T as(const ObjectRef& value) {
  return adopt<T>(value.get());
}

/*!
 * \brief As above, for a temporary (a reference's contents, a closure call's result): its count
 *        goes with it. Through the overload above, reading a reference cost an increment, a
 *        second one and a decrement, all atomic; a gradient program reads a thousand per call.
 */
template <typename T>
inline T as(ObjectRef&& value) {
  T out;  // every reference class holds one pointer and starts empty
  static_cast<ObjectRef&>(out) = std::move(value);
  return out;
}

/*!
 * \brief View a value of static type "any" as its known static type, without a copy.
 *
 * Object references of every static type have the same layout (one pointer; TVM's ObjectRef
 * subclasses add no data), so this only changes how the compiler sees the reference. Used where
 * the viewed value outlives the use (closure entries reading their argument array).
 */
template <typename T>
inline const T& view(const ObjectRef& value) {
  static_assert(sizeof(T) == sizeof(ObjectRef), "object references are one pointer");
  return static_cast<const T&>(value);
}

/*!
 * \brief Field \p i of a tuple or constructor value (no bounds check: the static type fixes the
 *        number of fields, and values from outside are checked on entry).
 */
inline const ObjectRef& field(const ObjectRef& adt, int i) {
  const char* fields = reinterpret_cast<const char*>(adt.get()) + sizeof(ADTObj);
  return reinterpret_cast<const ObjectRef*>(fields)[i];
}

/*! \brief Constructor tag of an ADT value. */
inline int32_t tag(const ObjectRef& adt) { return static_cast<const ADTObj*>(adt.get())->tag; }

/*!
 * \brief The unit value `()`: one shared, immutable object (every reference write and every
 *        backpropagator call of a gradient program returns it; a new one was a malloc each).
 */
inline ADT unit() {
  static const ADT* shared = new ADT(0, std::vector<ObjectRef>());  // never freed, like scalar_shape
  return *shared;
}

/*! \brief Read a 0-d tensor of bool (stored as one byte per element) as a C++ bool. */
inline bool truthy(const NDArray& cond) {
  const DLTensor* t = cond.operator->();
  return static_cast<const uint8_t*>(t->data)[t->byte_offset] != 0;
}

}  // namespace relay_aot

#endif  // RELAY_AOT_VALUES_H_
