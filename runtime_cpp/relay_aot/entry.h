/*!
 * \file relay_aot/entry.h
 * \brief The exported entry points of a compiled library, in TVM's packed C convention.
 *
 * `tvm.runtime.load_module(path)[name]` finds these by symbol and wraps them as PackedFuncs
 * (see TVM's src/runtime/library_module.cc), so they must catch every C++ exception and
 * report it as TVM's last error instead of letting it cross the C boundary.
 *
 * They report it the way TVM's own C API functions do (TVMAPIHandleException): an exception
 * raised by a Python function the program called (TVM wraps it, holding the Python exception
 * object) stays that Python exception, type, message and traceback, for the Python caller --
 * formatting it as text would leave an empty message.
 */
#ifndef RELAY_AOT_ENTRY_H_
#define RELAY_AOT_ENTRY_H_

#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/container/string.h>
#include <tvm/runtime/packed_func.h>

#include <exception>
#include <string>
#include <vector>

#include "check.h"
#include "closure.h"
#include "errors.h"

/*!
 * \brief Record \p e as the calling thread's last TVM error, keeping a wrapped Python exception
 *        as it is; returns -1. Defined in libtvm_runtime.so / libtvm.so (src/runtime/runtime_base.h),
 *        which every TVM C API function ends with.
 */
int TVMAPIHandleException(const std::exception& e);

namespace relay_aot {

/*! \brief The parameters of a program's entry function, for checking its arguments. */
struct EntrySignature {
  int arity;
  const TypeDesc* types;     //!< the program's type table
  const int* param_types;    //!< type index of each parameter
  const char* const* names;  //!< Relay name of each parameter
};

/*!
 * \brief Check and convert the packed arguments, run \p body on them and hand its result to TVM.
 * \return 0 on success, -1 with TVM's last error set otherwise.
 */
template <typename Body>
inline int packed_entry(TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                        int* ret_type_code, const EntrySignature& signature, Body body) {
  try {
    if (num_args != signature.arity) {
      raise_type_error("the program takes " + std::to_string(signature.arity) + " arguments, got " +
                       std::to_string(num_args));
    }
    TVMArgs packed(args, type_codes, num_args);
    std::vector<ObjectRef> values;
    values.reserve(num_args);
    for (int i = 0; i < num_args; ++i) {
      std::string what = "argument " + std::to_string(i) + " (%" + signature.names[i] + ")";
      values.push_back(object_from_arg(packed[i], what, signature.types[signature.param_types[i]]));
      check_value(values.back(), signature.param_types[i], signature.types, what);
    }
    TVMRetValue rv;
    rv = body(values.data());
    rv.MoveToCHost(ret, ret_type_code);
    return 0;
  } catch (const std::exception& e) {
    return TVMAPIHandleException(e);
  }
}

/*! \brief Return the embedded description of the program (JSON text) as a TVM string. */
inline int packed_metadata(const char* text, size_t size, TVMValue* ret, int* ret_type_code) {
  try {
    TVMRetValue rv;
    rv = tvm::runtime::String(std::string(text, size));
    rv.MoveToCHost(ret, ret_type_code);
    return 0;
  } catch (const std::exception& e) {
    return TVMAPIHandleException(e);
  }
}

}  // namespace relay_aot

#endif  // RELAY_AOT_ENTRY_H_
