/*!
 * \file relay_aot/closure.h
 * \brief Relay closures: a function pointer plus captured values, usable as a PackedFunc.
 *
 * ClosureObj derives from TVM's PackedFuncObj without a type index of its own (the same way
 * TVM's PackedFuncSubObj does), so a closure returned to Python or stored in an ADT is a plain
 * callable PackedFunc to everyone else. Generated code calls closures through `entry` directly;
 * a PackedFunc that did not come from this library (a Python callable, or a closure of another
 * compiled model) is called through the packed convention instead.
 *
 * Each lifted Relay function gets a generated subclass holding its captured values as typed
 * members. A recursive let-bound closure does not capture itself (that would be a reference
 * cycle, which reference counting never frees): its body receives `self` at call time.
 */
#ifndef RELAY_AOT_CLOSURE_H_
#define RELAY_AOT_CLOSURE_H_

#include <tvm/runtime/packed_func.h>

#include <string>
#include <utility>

#include "check.h"
#include "errors.h"
#include "memory.h"
#include "scalar.h"
#include "values.h"

namespace relay_aot {

using tvm::runtime::PackedFunc;
using tvm::runtime::PackedFuncObj;
using tvm::runtime::TVMArgs;
using tvm::runtime::TVMArgsSetter;
using tvm::runtime::TVMArgValue;
using tvm::runtime::TVMRetValue;

/*!
 * \brief Convert one packed argument to a runtime value of type \p expected (an entry of a type
 *        table): tensors passed as DLTensor* are copied, and a Python or C++ number passed where
 *        a 0-d tensor is expected becomes one of the expected dtype (see scalar_of_dtype for
 *        which kinds of number fit which dtypes).
 */
ObjectRef object_from_arg(const TVMArgValue& arg, const std::string& what, const TypeDesc& expected);

/*! \brief The closure object all generated closure classes derive from. */
class ClosureObj : public PackedFuncObj {
 public:
  /*! \brief Uniform entry: unpacks `args` (exactly `arity` values) and runs the body. */
  using Entry = ObjectRef (*)(const ClosureObj* self, const ObjectRef* args);

  Entry entry;
  int arity;
  /*! \brief The program's type table and the types of the parameters (checked for foreign callers). */
  const TypeDesc* types;
  const int* param_types;
  /*!
   * \brief The body with typed parameters (unboxed scalars, no argument array), and a number
   *        naming its C++ signature within the program; callers whose static function type has
   *        the same signature call it directly (see typed_closure).
   */
  const void* typed_entry;
  int signature;

  /*! \brief Whether \p obj (a PackedFuncObj) is a closure made by this library. */
  static bool IsNative(const Object* obj) {
    // Reads the base-class field through the derived type, which is how protected access
    // is granted; the layout of the PackedFuncObj prefix is the same for every subclass.
    return static_cast<const ClosureObj*>(obj)->f_call_packed_ == &ClosureObj::CallPacked;
  }

 protected:
  ClosureObj(Entry entry, int arity, const TypeDesc* types, const int* param_types, const void* typed_entry,
             int signature)
      : PackedFuncObj(&ClosureObj::CallPacked),
        entry(entry),
        arity(arity),
        types(types),
        param_types(param_types),
        typed_entry(typed_entry),
        signature(signature) {}

 private:
  /*! \brief The packed view of the closure, used by Python and other foreign callers. */
  static void CallPacked(const PackedFuncObj* obj, TVMArgs args, TVMRetValue* rv);
};

/*! \brief A Relay function value. */
class Closure : public ObjectRef {
 public:
  TVM_DEFINE_OBJECT_REF_METHODS(Closure, ObjectRef, PackedFuncObj);
};

namespace detail {

/*! \brief Destroy a closure of generated class \p T and give its block to the thread's cache. */
template <typename T>
void free_closure(Object* obj) {
  static_cast<T*>(obj)->~T();
  block_cache().Give(obj, rounded(sizeof(T)));
}

template <typename T>
void free_closure_iteratively(Object* obj) {
  release(obj, &free_closure<T>);
}

}  // namespace detail

/*!
 * \brief A new closure of generated class \p T over the captured values \p args, in a block
 *        from the thread's cache: a gradient program makes and drops a backpropagator closure
 *        per operator call, and malloc/free was a tenth of its time.
 */
template <typename T, typename... Args>
inline Closure make_closure(Args&&... args) {
  static_assert(alignof(T) <= detail::kAlignment, "closure classes are aligned like any block");
  T* closure = new (detail::block_cache().Take(detail::rounded(sizeof(T)))) T(std::forward<Args>(args)...);
  ObjectAccess::SetType(closure, T::RuntimeTypeIndex());
  ObjectAccess::Set(closure, &detail::free_closure_iteratively<T>);
  return own<Closure>(closure);
}

/*!
 * \brief Call a function value that did not come from this library, checking its result
 *        against type \p ret_type of \p types.
 */
ObjectRef call_foreign(const Closure& fn, const ObjectRef* args, int count, const TypeDesc* types,
                       int ret_type);

/*!
 * \brief Apply a function value to \p count arguments; \p ret_type (an index of \p types) is the
 *        static type of the result, checked when the function is not one of ours.
 */
inline ObjectRef call_closure(const Closure& fn, const ObjectRef* args, int count, const TypeDesc* types,
                              int ret_type) {
  const Object* obj = fn.get();
  if (ClosureObj::IsNative(obj)) {
    const auto* closure = static_cast<const ClosureObj*>(obj);
    return closure->entry(closure, args);
  }
  return call_foreign(fn, args, count, types, ret_type);
}

/*!
 * \brief The closure behind \p fn if it came from this library and its typed entry has C++
 *        signature number \p signature; nullptr otherwise (then call it with call_closure).
 */
inline const ClosureObj* typed_closure(const Closure& fn, int signature) {
  const Object* obj = fn.get();
  if (!ClosureObj::IsNative(obj)) return nullptr;
  const auto* closure = static_cast<const ClosureObj*>(obj);
  return closure->signature == signature ? closure : nullptr;
}

/*! \brief The closure a generated function body is running in, as a value. */
inline Closure closure_ref(const ClosureObj* self) {
  return adopt<Closure>(self);
}

}  // namespace relay_aot

#endif  // RELAY_AOT_CLOSURE_H_
