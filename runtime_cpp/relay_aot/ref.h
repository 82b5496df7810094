/*!
 * \file relay_aot/ref.h
 * \brief Relay references (RefCreate, RefRead, RefWrite): a mutable cell holding one value.
 *
 * A cell is a one-element runtime.Array written in place. Using TVM's own container (rather
 * than a new object type) lets any TVM client -- Python included -- read a returned reference
 * with `ref[0]`, with no type registration and no extra exported functions.
 */
#ifndef RELAY_AOT_REF_H_
#define RELAY_AOT_REF_H_

#include <tvm/runtime/container/array.h>
#include <tvm/runtime/object.h>

#include <utility>

#include "memory.h"

namespace relay_aot {

using tvm::runtime::ArrayNode;
using tvm::runtime::ObjectRef;

/*! \brief A Relay reference value: a one-element array whose element is its contents. */
class Ref : public ObjectRef {
 public:
  TVM_DEFINE_OBJECT_REF_METHODS(Ref, ObjectRef, ArrayNode);
};

/*! \brief `ref(value)` */
inline Ref ref_new(const ObjectRef& value) {
  auto cell = ArrayNode::CreateRepeated(1, value);
  ObjectAccess::Set(cell.get(), &iterative_deleter<SimpleObjAllocator::ArrayHandler<ArrayNode, ObjectRef>>);
  return Ref(std::move(cell));
}

/*! \brief `!ref` */
inline ObjectRef ref_read(const Ref& ref) { return ref->at(0); }

/*! \brief `ref := value` (cells are mutable by definition; Array's copy-on-write is bypassed). */
inline void ref_write(const Ref& ref, ObjectRef value) {
  const_cast<ArrayNode*>(ref.get())->SetItem(0, std::move(value));
}

}  // namespace relay_aot

#endif  // RELAY_AOT_REF_H_
