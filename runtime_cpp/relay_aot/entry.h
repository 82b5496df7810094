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
#include "cpu.h"
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
  const CpuRequirement* cpu;  //!< what the kernels need of the CPU, checked before anything runs
  int num_shared_extents = 0;  //!< named dimensions several parameters share (checked after their types)
  const SharedExtentDesc* shared_extents = nullptr;
};

/*! \brief The packed arguments of an entry call, checked against \p signature and converted. */
std::vector<ObjectRef> entry_arguments(TVMValue* args, int* type_codes, int num_args, const EntrySignature& signature);

/*! \brief Hand \p result to TVM as the return value of an exported function. */
void entry_result(ObjectRef result, TVMValue* ret, int* ret_type_code);

/*!
 * \brief Check the CPU and the packed arguments, run \p body on the arguments and hand its
 *        result to TVM.
 * \return 0 on success, -1 with TVM's last error set otherwise.
 */
template <typename Body>
inline int packed_entry(TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                        int* ret_type_code, const EntrySignature& signature, Body body) {
  try {
    require_cpu(*signature.cpu);
    std::vector<ObjectRef> values = entry_arguments(args, type_codes, num_args, signature);
    entry_result(body(values.data()), ret, ret_type_code);
    return 0;
  } catch (const std::exception& e) {
    return TVMAPIHandleException(e);
  }
}

/*! \brief Return the embedded description of the program (JSON text) as a TVM string. */
int packed_metadata(const char* text, size_t size, TVMValue* ret, int* ret_type_code);

}  // namespace relay_aot

#endif  // RELAY_AOT_ENTRY_H_
