/*!
 * \file relay_aot/ref.h
 * \brief Relay references (RefCreate, RefRead, RefWrite): a mutable cell holding one value.
 */
#ifndef RELAY_AOT_REF_H_
#define RELAY_AOT_REF_H_

#include <tvm/runtime/object.h>

#include <utility>

namespace relay_aot {

using tvm::runtime::Object;
using tvm::runtime::ObjectRef;

/*! \brief The cell behind a Relay reference. */
class RefObj : public Object {
 public:
  explicit RefObj(ObjectRef value) : value(std::move(value)) {}
  /*! \brief Mutable because ObjectRef only hands out const pointers; Relay refs are cells. */
  mutable ObjectRef value;

  static constexpr const char* _type_key = "relay_aot.Ref";
  TVM_DECLARE_FINAL_OBJECT_INFO(RefObj, Object);
};

/*! \brief A Relay reference value. */
class Ref : public ObjectRef {
 public:
  TVM_DEFINE_OBJECT_REF_METHODS(Ref, ObjectRef, RefObj);
};

/*! \brief `ref(value)` */
inline Ref ref_new(ObjectRef value) {
  return Ref(tvm::runtime::make_object<RefObj>(std::move(value)));
}

/*! \brief `!ref` */
inline ObjectRef ref_read(const Ref& ref) { return ref->value; }

/*! \brief `ref := value` */
inline void ref_write(const Ref& ref, ObjectRef value) { ref->value = std::move(value); }

}  // namespace relay_aot

#endif  // RELAY_AOT_REF_H_
