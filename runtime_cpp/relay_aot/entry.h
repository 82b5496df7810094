/*!
 * \file relay_aot/entry.h
 * \brief The exported entry points of a compiled library, in TVM's packed C convention.
 *
 * `tvm.runtime.load_module(path)[name]` finds these by symbol and wraps them as PackedFuncs
 * (see TVM's src/runtime/library_module.cc), so they must catch every C++ exception and
 * report it through TVMAPISetLastError instead of letting it cross the C boundary.
 */
#ifndef RELAY_AOT_ENTRY_H_
#define RELAY_AOT_ENTRY_H_

#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/container/string.h>
#include <tvm/runtime/packed_func.h>

#include <exception>
#include <string>
#include <vector>

#include "closure.h"
#include "errors.h"

namespace relay_aot {

/*!
 * \brief Run \p body on the converted packed arguments and hand its result back to TVM.
 * \param arity The number of parameters of the program's main function.
 * \return 0 on success, -1 with TVM's last error set otherwise.
 */
template <typename Body>
inline int packed_entry(TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                        int* ret_type_code, int arity, Body body) {
  try {
    if (num_args != arity) {
      raise_type_error("the program takes " + std::to_string(arity) + " arguments, got " +
                       std::to_string(num_args));
    }
    TVMArgs packed(args, type_codes, num_args);
    std::vector<ObjectRef> values;
    values.reserve(num_args);
    for (int i = 0; i < num_args; ++i) values.push_back(object_from_arg(packed[i], i));
    TVMRetValue rv;
    rv = body(values.data());
    rv.MoveToCHost(ret, ret_type_code);
    return 0;
  } catch (const std::exception& e) {
    TVMAPISetLastError(e.what());
    return -1;
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
    TVMAPISetLastError(e.what());
    return -1;
  }
}

}  // namespace relay_aot

#endif  // RELAY_AOT_ENTRY_H_
