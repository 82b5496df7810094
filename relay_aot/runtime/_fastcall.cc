// relay_aot._fastcall: call a compiled library's entry point from Python without ctypes.
//
// TVM's Python FFI (ctypes, in this TVM build) costs several microseconds per call, and
// converting a numpy argument with tvm.nd.array tens more: for a small program that is most of
// the time of a call. This extension packs Python arguments straight into TVM's packed calling
// convention and calls the entry's C symbol: numpy arrays are passed as DLTensors viewing their
// data (the library's entry copies them into tensors it owns, and checks dtype and shape),
// Python and numpy numbers as numbers (the entry makes 0-d tensors of the parameter's dtype),
// TVM objects by handle. Anything else (tuples, the interpreter's values, Python callables)
// makes `call` return NotImplemented, and relay_aot converts the arguments in Python instead.
//
// The results are turned into Python objects by TVM's own ctypes return converters, so they are
// exactly what the ctypes FFI would have returned. Self-contained: the few DLPack/TVM C ABI
// definitions it needs are declared here, so it builds without TVM's headers.
//
// It also makes the tuples and constructor values (runtime.ADT) that relay_aot builds in Python
// (the Python backend's results, converted arguments): TVM's own ADT frees its fields
// recursively, so dropping a list of a few hundred thousand cells made in Python overflowed
// the C stack. ADTs made here free their fields through a per-thread work list instead.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

namespace py = pybind11;

namespace {

// --- the C ABI of DLPack and TVM's packed functions (stable; see dlpack.h, c_runtime_api.h) ---
struct DLDevice {
  int32_t device_type;
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
};
union TVMValue {
  int64_t v_int64;
  double v_float64;
  void* v_handle;
  const char* v_str;
  DLDataType v_type;
  DLDevice v_device;
};
using PackedCFunc = int (*)(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code,
                            void* resource_handle);

enum TypeCode : int {
  kInt = 0, kUInt = 1, kFloat = 2, kDLTensorHandle = 7, kObjectHandle = 8, kPackedFuncHandle = 10,
  kNDArrayHandle = 13, kBool = 15,
};

// --- TVM's object header and ADT layout (include/tvm/runtime/object.h, container/adt.h) ---
struct Object {
  uint32_t type_index;
  std::atomic<int32_t> ref_counter;
  void (*deleter)(Object* self);
};
static_assert(sizeof(Object) == 16, "TVM's object header is 16 bytes on 64-bit platforms");

/*! \brief An ADT: the header, tag and size, then `size` object pointers (TVM's InplaceArrayBase). */
struct ADTObj : Object {
  int32_t tag;
  uint32_t size;
};

/*! \brief runtime.Array: the header, size and capacity, then `size` object pointers. */
struct ArrayNode : Object {
  int64_t size;
  int64_t capacity;
};

/*! \brief The interpreter's relay.ConstructorValue (src/relay/backend/interpreter.cc). */
struct ConstructorValueObj : Object {
  int32_t tag;
  ArrayNode* fields;
  Object* constructor;
};

/*!
 * \brief The object behind an NDArray's FFI handle, which points at the DLTensor that follows
 *        the object header (NDArray::Container derives from Object, then ContainerBase).
 */
Object* object_of_tensor_handle(void* handle) {
  return reinterpret_cast<Object*>(static_cast<char*>(handle) - sizeof(Object));
}

Object** adt_fields(ADTObj* adt) { return reinterpret_cast<Object**>(reinterpret_cast<char*>(adt) + sizeof(ADTObj)); }

void inc_ref(Object* obj) { obj->ref_counter.fetch_add(1, std::memory_order_relaxed); }

/*! \brief TVM's Object::DecRef: the last reference runs the object's deleter. */
void dec_ref(Object* obj) {
  if (obj->ref_counter.fetch_sub(1, std::memory_order_release) == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);
    if (obj->deleter != nullptr) obj->deleter(obj);
  }
}

/*! \brief Deleter of the ADTs made here: fields are released in a loop, never by recursion. */
void free_adt(Object* obj) {
  thread_local std::vector<ADTObj*> pending;
  thread_local bool draining = false;
  pending.push_back(static_cast<ADTObj*>(obj));
  if (draining) return;  // an outer free_adt on this thread releases it
  draining = true;
  while (!pending.empty()) {
    ADTObj* adt = pending.back();
    pending.pop_back();
    Object** fields = adt_fields(adt);
    for (uint32_t i = 0; i < adt->size; ++i) {
      if (fields[i] != nullptr) dec_ref(fields[i]);
    }
    ::operator delete(adt);
  }
  draining = false;
}

/*! \brief The DLPack dtype of a numpy array, or false if it has none relay_aot uses. */
bool dtype_of(const py::array& array, DLDataType* out) {
  py::dtype dtype = array.dtype();
  const char kind = dtype.kind();
  const auto bits = static_cast<uint8_t>(8 * dtype.itemsize());
  if (dtype.byteorder() == '>') return false;  // big-endian data
  switch (kind) {
    case 'b': *out = {1, 1, 1}; return true;  // numpy bool: one byte per element, TVM's uint1
    case 'i': *out = {0, bits, 1}; return true;
    case 'u': *out = {1, bits, 1}; return true;
    case 'f': *out = {2, bits, 1}; return true;
    default: return false;
  }
}

/*! \brief Arguments packed for one call; owns the DLTensor views and their shapes. */
struct Packed {
  std::vector<TVMValue> values;
  std::vector<int> codes;
  std::vector<DLTensor> tensors;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<py::object> keep_alive;  // numpy arrays made from numpy scalars, while in use
};

/*!
 * \brief The pointer inside a TVM object's ctypes handle (a c_void_p, or for NDArrays a ctypes
 *        pointer): ctypes instances expose their storage, the pointer itself, as a buffer.
 */
void* handle_of(const py::handle& obj) {
  py::object handle = obj.attr("handle");
  Py_buffer view;
  if (PyObject_GetBuffer(handle.ptr(), &view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  void* pointer = nullptr;
  if (view.len == static_cast<Py_ssize_t>(sizeof(void*))) std::memcpy(&pointer, view.buf, sizeof(void*));
  PyBuffer_Release(&view);
  return pointer;
}

}  // namespace

/*! \brief Pack \p args into \p packed; false if one cannot be passed directly. */
bool pack_args(const py::tuple& args, const py::tuple& kinds, Packed& packed) {
  const py::handle ndarray_class = kinds[0], packed_func_class = kinds[1], object_class = kinds[2];
  const py::handle numpy_generic = kinds[3];
  const size_t count = args.size();
  packed.values.resize(count);
  packed.codes.resize(count);
  packed.tensors.reserve(count);
  packed.shapes.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    py::handle arg = args[i];
    TVMValue& value = packed.values[i];
    int& code = packed.codes[i];
    if (py::isinstance(arg, numpy_generic) || py::isinstance<py::array>(arg)) {
      // First: np.float64 is a Python float too, but keeps its dtype here (checked by the entry).
      py::array array = py::reinterpret_borrow<py::object>(arg);
      if (!py::isinstance<py::array>(arg)) {
        array = py::array::ensure(arg);  // a numpy scalar: a 0-d array of its dtype
        packed.keep_alive.push_back(array);
      }
      DLDataType dtype;
      if (!array || !dtype_of(array, &dtype) || !(array.flags() & py::array::c_style)) return false;
      packed.shapes.emplace_back(array.shape(), array.shape() + array.ndim());
      packed.tensors.push_back(DLTensor{const_cast<void*>(array.data()), DLDevice{1, 0},
                                        static_cast<int32_t>(array.ndim()), dtype,
                                        packed.shapes.back().data(), nullptr, 0});
      value.v_handle = &packed.tensors.back();
      code = kDLTensorHandle;
    } else if (PyBool_Check(arg.ptr())) {
      value.v_int64 = arg.ptr() == Py_True ? 1 : 0;
      code = kBool;
    } else if (PyLong_Check(arg.ptr())) {
      int overflow = 0;
      long long number = PyLong_AsLongLongAndOverflow(arg.ptr(), &overflow);
      if (overflow != 0) return false;
      value.v_int64 = number;
      code = kInt;
    } else if (PyFloat_Check(arg.ptr())) {
      value.v_float64 = PyFloat_AS_DOUBLE(arg.ptr());
      code = kFloat;
    } else if (py::isinstance(arg, ndarray_class)) {
      value.v_handle = handle_of(arg);
      code = py::bool_(arg.attr("is_view")) ? kDLTensorHandle : kNDArrayHandle;
    } else if (py::isinstance(arg, packed_func_class)) {
      value.v_handle = handle_of(arg);
      code = kPackedFuncHandle;
    } else if (py::isinstance(arg, object_class)) {
      value.v_handle = handle_of(arg);
      code = kObjectHandle;
    } else {
      return false;
    }
  }
  return true;
}

/*! \brief The Python value of a packed return, or the Python exception of a failed call. */
py::object finish(int status, TVMValue ret, int ret_code, const py::object& make_result, const py::object& raise_error) {
  if (status != 0) {
    raise_error();
    throw py::error_already_set();
  }
  return make_result(ret_code, ret.v_int64);
}

/*!
 * \brief Call the packed C function at \p address (a library's entry point) on \p args.
 * \param kinds Python classes (NDArray, PackedFunc, Object) of TVM's FFI, and numpy's scalar base.
 * \param make_result A function (type_code, value_bits) -> Python object (TVM's return converters).
 * \param raise_error A function raising the Python exception for TVM's last error.
 * \return The result, or NotImplemented if an argument cannot be passed directly.
 */
py::object call(uintptr_t address, const py::tuple& args, const py::tuple& kinds, const py::object& make_result,
                const py::object& raise_error) {
  Packed packed;
  if (!pack_args(args, kinds, packed)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  TVMValue ret;
  ret.v_int64 = 0;
  int ret_code = 4;  // kTVMNullptr
  int status;
  {
    // Compiled code may run long, and may call back into Python (functions passed to the
    // program): let other threads run meanwhile.
    py::gil_scoped_release release;
    status = reinterpret_cast<PackedCFunc>(address)(packed.values.data(), packed.codes.data(),
                                                    static_cast<int>(packed.values.size()), &ret, &ret_code, nullptr);
  }
  return finish(status, ret, ret_code, make_result, raise_error);
}

using TVMFuncCallFn = int (*)(void* func, TVMValue* args, int* type_codes, int num_args, TVMValue* ret,
                              int* ret_type_code);

/*!
 * \brief Call a TVM PackedFunc (by its handle) through TVM's C API ``TVMFuncCall`` at
 *        \p func_call: the Python backend's kernel calls, without ctypes.
 */
py::object call_packed(uintptr_t func_call, uintptr_t handle, const py::tuple& args, const py::tuple& kinds,
                       const py::object& make_result, const py::object& raise_error) {
  Packed packed;
  if (!pack_args(args, kinds, packed)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  TVMValue ret;
  ret.v_int64 = 0;
  int ret_code = 4;
  int status;
  {
    py::gil_scoped_release release;
    status = reinterpret_cast<TVMFuncCallFn>(func_call)(reinterpret_cast<void*>(handle), packed.values.data(),
                                                        packed.codes.data(), static_cast<int>(packed.values.size()),
                                                        &ret, &ret_code);
  }
  return finish(status, ret, ret_code, make_result, raise_error);
}

using TVMArrayAllocFn = int (*)(const int64_t* shape, int ndim, int dtype_code, int dtype_bits, int dtype_lanes,
                                int device_type, int device_id, void** out);

/*!
 * \brief A new CPU tensor through TVM's C API ``TVMArrayAlloc`` at \p array_alloc, returned as
 *        TVM's Python FFI would return it (an owned NDArray).
 */
py::object empty(uintptr_t array_alloc, const std::vector<int64_t>& shape, int code, int bits,
                 const py::object& make_result, const py::object& raise_error) {
  void* handle = nullptr;
  int status = reinterpret_cast<TVMArrayAllocFn>(array_alloc)(shape.data(), static_cast<int>(shape.size()), code,
                                                              bits, 1, 1, 0, &handle);
  TVMValue ret;
  ret.v_handle = handle;
  return finish(status, ret, kNDArrayHandle, make_result, raise_error);
}

/*!
 * \brief A new runtime.ADT with \p tag and \p fields (NDArrays, PackedFuncs or other TVM objects),
 *        returned as TVM's Python FFI would return it; its deleter never recurses.
 * \param type_index The runtime type index of runtime.ADT.
 */
py::object make_adt(uint32_t type_index, int32_t tag, const py::list& fields, const py::tuple& kinds,
                    const py::object& make_result) {
  const py::handle ndarray_class = kinds[0], packed_func_class = kinds[1], object_class = kinds[2];
  const size_t count = fields.size();
  std::vector<Object*> objects(count);
  for (size_t i = 0; i < count; ++i) {
    py::handle field = fields[i];
    if (py::isinstance(field, ndarray_class)) {
      objects[i] = object_of_tensor_handle(handle_of(field));
    } else if (py::isinstance(field, packed_func_class) || py::isinstance(field, object_class)) {
      objects[i] = static_cast<Object*>(handle_of(field));
    } else {
      throw py::type_error("a field of a runtime ADT must be a TVM object, not " +
                           std::string(py::str(field.get_type().attr("__name__"))));
    }
  }
  void* block = ::operator new(sizeof(ADTObj) + count * sizeof(Object*));
  auto* adt = new (block) ADTObj();
  adt->type_index = type_index;
  adt->ref_counter.store(1, std::memory_order_relaxed);  // owned by the Python object returned
  adt->deleter = &free_adt;
  adt->tag = tag;
  adt->size = static_cast<uint32_t>(count);
  Object** slots = adt_fields(adt);
  for (size_t i = 0; i < count; ++i) {
    if (objects[i] != nullptr) inc_ref(objects[i]);
    slots[i] = objects[i];
  }
  return make_result(static_cast<int>(kObjectHandle), reinterpret_cast<int64_t>(adt));
}

/*!
 * \brief \p obj as TVM's Python FFI returns an object (a new reference): NDArrays and
 *        PackedFuncs by their own type codes, None for a null reference.
 */
py::object to_python(Object* obj, uint32_t ndarray_index, uint32_t packed_func_index, const py::object& make_result) {
  if (obj == nullptr) return py::none();
  inc_ref(obj);
  if (obj->type_index == ndarray_index) {
    return make_result(static_cast<int>(kNDArrayHandle), reinterpret_cast<int64_t>(reinterpret_cast<char*>(obj) + sizeof(Object)));
  }
  const int code = obj->type_index == packed_func_index ? kPackedFuncHandle : kObjectHandle;
  return make_result(code, reinterpret_cast<int64_t>(obj));
}

/*!
 * \brief (tag, [fields]) of a runtime.ADT (\p of_constructor_value false) or of the interpreter's
 *        ConstructorValue, read in one call instead of one FFI call per field.
 * \param type_indices The runtime type indices of NDArray and PackedFunc.
 */
py::tuple parts(const py::handle& value, bool of_constructor_value, const py::tuple& type_indices,
                const py::object& make_result) {
  auto* obj = static_cast<Object*>(handle_of(value));
  const auto ndarray_index = type_indices[0].cast<uint32_t>(), packed_func_index = type_indices[1].cast<uint32_t>();
  int32_t tag;
  size_t count;
  Object** fields;
  if (of_constructor_value) {
    auto* cv = static_cast<ConstructorValueObj*>(obj);
    tag = cv->tag;
    count = cv->fields != nullptr ? static_cast<size_t>(cv->fields->size) : 0;
    fields = cv->fields != nullptr ? reinterpret_cast<Object**>(reinterpret_cast<char*>(cv->fields) + sizeof(ArrayNode))
                                   : nullptr;
  } else {
    auto* adt = static_cast<ADTObj*>(obj);
    tag = adt->tag;
    count = adt->size;
    fields = adt_fields(adt);
  }
  py::list out(count);
  for (size_t i = 0; i < count; ++i) out[i] = to_python(fields[i], ndarray_index, packed_func_index, make_result);
  return py::make_tuple(tag, out);
}

PYBIND11_MODULE(_fastcall, m) {
  m.doc() = "Call a relay_aot library's entry point from Python without TVM's ctypes FFI.";
  m.def("call", &call, py::arg("address"), py::arg("args"), py::arg("kinds"), py::arg("make_result"),
        py::arg("raise_error"));
  m.def("call_packed", &call_packed, py::arg("func_call"), py::arg("handle"), py::arg("args"), py::arg("kinds"),
        py::arg("make_result"), py::arg("raise_error"));
  m.def("make_adt", &make_adt, py::arg("type_index"), py::arg("tag"), py::arg("fields"), py::arg("kinds"),
        py::arg("make_result"));
  m.def("parts", &parts, py::arg("value"), py::arg("of_constructor_value"), py::arg("type_indices"),
        py::arg("make_result"));
  m.def("empty", &empty, py::arg("array_alloc"), py::arg("shape"), py::arg("code"), py::arg("bits"),
        py::arg("make_result"), py::arg("raise_error"));
}
