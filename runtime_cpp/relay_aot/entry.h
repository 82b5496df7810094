/*!
 * \file relay_aot/entry.h
 * \brief The exported entry points of a compiled library, in TVM's packed C convention.
 *
 * `tvm.runtime.load_module(path)[name]` finds these by symbol and wraps them as PackedFuncs
 * (see TVM's src/runtime/library_module.cc), so they must catch every C++ exception and
 * report it as TVM's last error instead of letting it cross the C boundary.
 *
 * Called with one device argument instead of the program's (no Relay value is a device),
 * `lib["<model>"](dev)` makes an executor module instead, with the interface of TVM's graph and
 * AOT executors (`set_input`, `run`, `get_output`, ...: see `executor_module`), so that
 * `graph_executor.GraphModule(lib["default"](dev))`, `AotModule(...)` and
 * `Module.time_evaluator("run", dev)` work on a relay_aot library as on relay.build's.
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
#include <tvm/runtime/container/map.h>
#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/data_type.h>
#include <tvm/runtime/device_api.h>
#include <tvm/runtime/module.h>
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
  int result_type;  //!< type index of the result (the executor module flattens its tuples)
  int num_shared_extents = 0;  //!< named dimensions several parameters share (checked after their types)
  const SharedExtentDesc* shared_extents = nullptr;
};

/*! \brief The program on its arguments, converted to their static types. */
using EntryBody = ObjectRef (*)(const ObjectRef*);

/*! \brief The packed arguments of an entry call, checked against \p signature and converted. */
std::vector<ObjectRef> entry_arguments(TVMValue* args, int* type_codes, int num_args, const EntrySignature& signature);

/*! \brief Check converted arguments against \p signature (types, then shared dimensions). */
void check_arguments(const ObjectRef* values, const EntrySignature& signature);

/*!
 * \brief An executor of the program on \p device (a CPU): a module with the functions of TVM's
 *        graph and AOT executor modules -- set_input, set_input_zero_copy, get_input,
 *        get_input_index, get_input_name, get_input_info, get_num_inputs, run, run_from_inputs,
 *        get_output, get_num_outputs -- and the VM's invoke("main"). Inputs of a tensor type
 *        with a static shape have a buffer of their own, as in the graph executor, that
 *        get_input returns before any set_input; outputs are the result's tensors, tuples
 *        flattened.
 */
tvm::runtime::Module executor_module(const EntrySignature& signature, EntryBody body, DLDevice device);

/*! \brief Hand \p result to TVM as the return value of an exported function. */
void entry_result(ObjectRef result, TVMValue* ret, int* ret_type_code);

/*!
 * \brief Check the CPU and the packed arguments, run \p body on the arguments and hand its
 *        result to TVM.
 * \return 0 on success, -1 with TVM's last error set otherwise.
 */
inline int packed_entry(TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                        int* ret_type_code, const EntrySignature& signature, EntryBody body) {
  try {
    require_cpu(*signature.cpu);
    if (num_args == 1 && type_codes[0] == kDLDevice) {
      TVMRetValue rv;
      rv = executor_module(signature, body, args[0].v_device);
      rv.MoveToCHost(ret, ret_type_code);
      return 0;
    }
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
