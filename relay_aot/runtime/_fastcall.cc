// relay_aot.runtime._fastcall: relay_aot's C++ runtime, reachable from Python.
//
// 1. Calls without TVM's ctypes FFI. TVM's Python FFI costs several microseconds per call, and
//    converting a numpy argument with tvm.nd.array tens more: for a small program that is most
//    of a call. An `Entry` (a library's entry symbol, bound once) packs Python arguments
//    straight into TVM's packed calling convention and calls it: numpy arrays as DLTensors
//    viewing their data (the entry copies them into tensors it owns and checks them), Python
//    and numpy numbers as numbers, TVM objects by handle. Anything else makes it return
//    NotImplemented, and relay_aot converts the arguments in Python instead. `call_packed` does the same for any PackedFunc
//    (the Python backend's kernel calls).
//
// 2. The same checks and rules compiled code applies, for values converted in Python: the
//    checks of runtime_cpp/relay_aot/check.h against a type table built from the same
//    description the C++ emitter prints (relay_aot/ir/typetable.py), the rule for numbers
//    passed for 0-d tensors (scalar_of_dtype) and TVM's integer semantics of 0-d arithmetic
//    (int_div, ...; the Python backend's scalar code calls them). One implementation, one
//    wording of every message, on both backends.
//
// 3. The runtime values relay_aot builds in Python (the Python backend's results, converted
//    arguments) are made by make_adt_of, whose deleter frees fields without recursion: TVM's
//    own ADT frees them recursively, and dropping a list of a few hundred thousand cells made
//    in Python overflowed the C stack. `parts` reads an ADT or the interpreter's
//    ConstructorValue in one call.
//
// 4. The profiler of compiled code (runtime_cpp/relay_aot/profile.h): the Python backend's code
//    printed for profiling records its calls there, so both backends aggregate and report alike.
//
// 5. The CPU check of compiled code (runtime_cpp/relay_aot/cpu.h): relay_aot.load refuses a
//    library compiled for a CPU this one is not, and the Python backend its kernels, with the
//    message the library's entries give.
//
// Results become Python objects through TVM's own ctypes return converters (make_result), or
// for tensors as those make them (NDArrayResults), so they are exactly what the ctypes FFI
// returns; errors raised here become the Python classes TVM's FFI would use for the same error
// kind (make_error).

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <structmember.h>

#include <relay_aot/runtime.h>
#include <tvm/runtime/c_backend_api.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <string>
#include <vector>

namespace py = pybind11;
using relay_aot::Kind;
using tvm::runtime::ADTObj;
using relay_aot::TypeDesc;
using relay_aot::AxisDesc;
using relay_aot::SharedExtentDesc;
using tvm::runtime::NDArray;
using tvm::runtime::Object;
using tvm::runtime::ObjectRef;
using tvm::runtime::TVMRetValue;

namespace {

/*!
 * \brief Turns an error's kind and message into the Python exception TVM's FFI would raise.
 *        Never freed: a static py::object would be released after the interpreter is gone.
 */
py::object* make_error = nullptr;

/*!
 * \brief The pointer inside a TVM object's ctypes handle (a c_void_p, or for NDArrays a ctypes
 *        pointer): ctypes instances expose their storage, the pointer itself, as a buffer.
 */
void* handle_of(const py::handle& obj) {
  static PyObject* const name = PyUnicode_InternFromString("handle");  // attr("handle") hashes a new string
  py::object handle = py::reinterpret_steal<py::object>(PyObject_GetAttr(obj.ptr(), name));
  if (!handle) throw py::error_already_set();
  Py_buffer view;
  if (PyObject_GetBuffer(handle.ptr(), &view, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  void* pointer = nullptr;
  if (view.len == static_cast<Py_ssize_t>(sizeof(void*))) std::memcpy(&pointer, view.buf, sizeof(void*));
  PyBuffer_Release(&view);
  return pointer;
}

/*! \brief Whether a Python NDArray is a view: a bare DLTensor, which owns nothing (NDArray.is_view). */
bool is_view(const py::handle& array) {
  static PyObject* const name = PyUnicode_InternFromString("is_view");
  py::object view = py::reinterpret_steal<py::object>(PyObject_GetAttr(array.ptr(), name));
  if (!view) throw py::error_already_set();
  const int truth = PyObject_IsTrue(view.ptr());
  if (truth < 0) throw py::error_already_set();
  return truth == 1;
}

/*! \brief The Python classes of TVM's FFI that hold objects (see fastcall.KINDS). */
struct Kinds {
  py::handle ndarray, packed_func, object, numpy_generic, excluded;
  explicit Kinds(const py::tuple& kinds)
      : ndarray(kinds[0]), packed_func(kinds[1]), object(kinds[2]), numpy_generic(kinds[3]),
        excluded(kinds.size() > 4 ? kinds[4] : py::handle(py::tuple())) {}
};

/*! \brief A new reference to the object a Python TVM object holds; null for None. */
ObjectRef object_of(const py::handle& value, const Kinds& kinds) {
  if (value.is_none()) return ObjectRef();
  if (py::isinstance(value, kinds.ndarray)) {
    auto* tensor = static_cast<TVMArrayHandle>(handle_of(value));
    if (is_view(value)) {  // a bare DLTensor (an argument of a callback): copy it
      return NDArray::NewFromDLTensor(tensor, tensor->device);
    }
    // NDArray::FFIDataFromHandle (protected): the handle is the container's DLTensor.
    return NDArray(tvm::runtime::GetObjectPtr<Object>(
        static_cast<NDArray::Container*>(reinterpret_cast<NDArray::ContainerBase*>(tensor))));
  }
  if (py::isinstance(value, kinds.packed_func) || py::isinstance(value, kinds.object)) {
    return ObjectRef(tvm::runtime::GetObjectPtr<Object>(static_cast<Object*>(handle_of(value))));
  }
  throw py::type_error("expected a TVM object, got a " + std::string(py::str(value.get_type().attr("__name__"))));
}

/*! \brief The pointer a ctypes pointer object holds, replaced by \p replacement unless null. */
void* swap_pointer(PyObject* pointer, int flags, void* replacement) {
  Py_buffer view;
  if (PyObject_GetBuffer(pointer, &view, flags) != 0) throw py::error_already_set();
  void* old = nullptr;
  const bool fits = view.len == static_cast<Py_ssize_t>(sizeof(void*));
  if (fits) {
    std::memcpy(&old, view.buf, sizeof(void*));
    if (replacement != nullptr) std::memcpy(view.buf, &replacement, sizeof(void*));
  }
  PyBuffer_Release(&view);
  if (!fits) throw py::type_error("a ctypes handle is not a pointer");
  return old;
}

/*! \brief The offset of the plain member slot \p name (``__slots__``) in instances of \p type, or -1. */
Py_ssize_t member_offset(const py::object& type, const py::object& name) {
  PyObject* slot = _PyType_Lookup(reinterpret_cast<PyTypeObject*>(type.ptr()), name.ptr());  // borrowed
  if (slot == nullptr || !Py_IS_TYPE(slot, &PyMemberDescr_Type)) return -1;
  return reinterpret_cast<PyMemberDescrObject*>(slot)->d_member->offset;
}

/*!
 * \brief Makes the tvm.nd.NDArray of a returned array handle without running Python code:
 *        what TVM's return converter (_ndarray._make_array) makes when no subclass of NDArray
 *        is registered, at a tenth of its cost (half a microsecond a call, a small model's
 *        kernels' time). Set once from fastcall.py; never freed (see make_error).
 */
struct NDArrayResults {
  py::object ndarray;       // tvm.nd.NDArray
  py::object handle_type;   // TVMArrayHandle, the ctypes pointer type of NDArray.handle
  py::object registry;      // the globals of tvm._ffi._ctypes.ndarray
  py::object plain;         // its _TVM_ND_CLS while only NDArray itself is registered
  py::object registry_name = py::str("_TVM_ND_CLS"), class_name = py::str("_CLASS_NDARRAY");
  py::object handle_name = py::str("handle"), is_view_name = py::str("is_view");
  py::object no_args = py::tuple();

  /*! \brief Whether the return converter would make a plain NDArray (no subclass registered since). */
  bool applies() const {
    PyObject* classes = PyDict_GetItemWithError(registry.ptr(), registry_name.ptr());
    PyObject* cls = PyDict_GetItemWithError(registry.ptr(), class_name.ptr());
    if (classes == nullptr || cls != ndarray.ptr()) {
      PyErr_Clear();
      return false;
    }
    const int equal = PyObject_RichCompareBool(classes, plain.ptr(), Py_EQ);
    if (equal < 0) PyErr_Clear();
    return equal == 1;
  }

  /*!
   * \brief Offsets of NDArrayBase's ``__slots__`` (handle, is_view) in an instance, or -1 where
   *        they are not plain member slots: writing them directly skips setattr's lookups (a
   *        trivial program's call 1.06 -> 0.96 us).
   */
  Py_ssize_t handle_offset = -1, is_view_offset = -1;

  void find_slots() {
    handle_offset = member_offset(ndarray, handle_name);
    is_view_offset = member_offset(ndarray, is_view_name);
    if (handle_offset < 0 || is_view_offset < 0) handle_offset = is_view_offset = -1;
  }

  /*! \brief ``array.<name> = value``: into its member slot where found, else by setattr. */
  void set(const py::object& array, Py_ssize_t offset, const py::object& name, PyObject* value) const {
    if (offset < 0) {
      if (PyObject_SetAttr(array.ptr(), name.ptr(), value) != 0) throw py::error_already_set();
      return;
    }
    PyObject** slot = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(array.ptr()) + offset);
    Py_INCREF(value);
    Py_XSETREF(*slot, value);
  }

  /*!
   * \brief Results nobody holds any more, kept to hold the next results: a new NDArray costs its
   *        creation, a ctypes pointer and, when dropped, its Python ``__del__`` calling
   *        ``TVMArrayFree`` through ctypes, together a third of a small program's call from
   *        Python. Only small results are kept (kPooledBytes: a dropped result's memory
   *        stays allocated until its object is reused), in a ring of kPool.
   */
  static constexpr int kPool = 4;
  static constexpr int64_t kPooledBytes = 64 * 1024;
  PyObject* pool[kPool] = {};
  int pool_next = 0;

  static PyObject** slot(PyObject* array, Py_ssize_t offset) {
    return reinterpret_cast<PyObject**>(reinterpret_cast<char*>(array) + offset);
  }

  /*!
   * \brief Whether nothing but the pool can see \p array: no other reference to it or to its
   *        ctypes handle (``out.handle``, ``.contents`` and casts hold one), no weak reference,
   *        no attribute set on it, still owning its tensor.
   */
  bool unseen(PyObject* array) const {
    if (Py_REFCNT(array) != 1) return false;
    PyObject* handle = *slot(array, handle_offset);
    if (handle == nullptr || Py_REFCNT(handle) != 1 || Py_TYPE(handle) != reinterpret_cast<PyTypeObject*>(handle_type.ptr()) ||
        *slot(array, is_view_offset) != Py_False) {
      return false;
    }
    PyTypeObject* type = Py_TYPE(array);
    if (type->tp_weaklistoffset > 0 && *slot(array, type->tp_weaklistoffset) != nullptr) return false;
    if (type->tp_dictoffset != 0) {
      PyObject* dict = PyObject_GenericGetDict(array, nullptr);
      if (dict == nullptr) {
        PyErr_Clear();
        return false;
      }
      const bool empty = PyDict_Check(dict) && PyDict_GET_SIZE(dict) == 0;
      Py_DECREF(dict);
      if (!empty) return false;
    }
    return true;
  }

  /*! \brief A pooled NDArray nobody else sees, now owning \p handle (poolable); null if there is none. */
  py::object reuse(void* handle) {
    for (PyObject* array : pool) {
      if (array == nullptr || !unseen(array)) continue;
      auto result = py::reinterpret_borrow<py::object>(array);  // first: a deleter run below may call back in
      void* old = swap_pointer(*slot(array, handle_offset), PyBUF_WRITABLE, handle);
      TVMArrayFree(static_cast<TVMArrayHandle>(old));  // what its __del__ would have done
      return result;
    }
    return py::object();
  }

  /*! \brief Whether a result owning \p handle may be pooled: its tensor is small. */
  bool poolable(void* handle) const {
    if (handle_offset < 0 || is_view_offset < 0) return false;
    const auto* tensor = static_cast<const DLTensor*>(handle);
    int64_t bytes = (tensor->dtype.bits * tensor->dtype.lanes + 7) / 8;
    for (int i = 0; i < tensor->ndim && bytes <= kPooledBytes; ++i) bytes *= tensor->shape[i];
    return bytes <= kPooledBytes;
  }

  /*! \brief Keep \p array (a new result, poolable) in the pool. */
  void keep(const py::object& array) {
    PyObject* evicted = pool[pool_next];
    pool[pool_next] = array.inc_ref().ptr();
    pool_next = (pool_next + 1) % kPool;
    Py_XDECREF(evicted);  // may run its __del__: last, with the pool consistent
  }

  /*! \brief The NDArray owning \p handle (a reference the caller gives up, even on error). */
  py::object make(void* handle) {
    if (!poolable(handle)) return make_new(handle);
    try {
      py::object reused = reuse(handle);
      if (reused) return reused;
    } catch (...) {
      TVMArrayFree(static_cast<TVMArrayHandle>(handle));
      throw;
    }
    py::object array = make_new(handle);
    keep(array);
    return array;
  }

  /*! \brief A new NDArray owning \p handle (a reference the caller gives up, even on error). */
  py::object make_new(void* handle) const {
    auto* type = reinterpret_cast<PyTypeObject*>(ndarray.ptr());
    try {
      py::object array = py::reinterpret_steal<py::object>(type->tp_new(type, no_args.ptr(), nullptr));
      if (!array) throw py::error_already_set();
      // is_view until the handle is in place: NDArray.__del__ frees the handle of a non-view only
      set(array, is_view_offset, is_view_name, Py_True);
      py::object pointer = handle_type();
      swap_pointer(pointer.ptr(), PyBUF_WRITABLE, handle);
      set(array, handle_offset, handle_name, pointer.ptr());
      set(array, is_view_offset, is_view_name, Py_False);
      return array;
    } catch (...) {
      TVMArrayFree(static_cast<TVMArrayHandle>(handle));
      throw;
    }
  }
};
NDArrayResults* ndarray_results = nullptr;

/*!
 * \brief Makes the Python object of a returned runtime ADT (tuples and constructor values): a
 *        fastcall.ADTResult, TVM's ADT class whose fields the extension reads (TVM's own reads
 *        each through three calls of its ctypes FFI: 5 us an element, 16 us to unpack a pair),
 *        while TVM's registry gives runtime ADTs that class. Set once from fastcall.py; never
 *        freed (see make_error).
 */
struct ADTResults {
  py::object adt;          // tvm.runtime.container.ADT
  py::object result;       // fastcall.ADTResult, its subclass
  py::object handle_type;  // ObjectHandle (ctypes.c_void_p)
  py::object registry;     // tvm._ffi._ctypes.object.OBJECT_TYPE: Python classes by type index
  py::object index = py::int_(ADTObj::RuntimeTypeIndex());
  Py_ssize_t handle_offset = -1;

  /*! \brief Whether \p handle is a runtime ADT that TVM's FFI would return as a plain ADT. */
  bool applies(void* handle) const {
    if (handle_offset < 0 || static_cast<const Object*>(handle)->type_index() != ADTObj::RuntimeTypeIndex()) return false;
    PyObject* cls = PyDict_GetItemWithError(registry.ptr(), index.ptr());  // borrowed
    if (cls == nullptr) PyErr_Clear();
    return cls == adt.ptr();
  }

  /*! \brief The ADTResult owning \p handle (a reference the caller gives up, even on error). */
  py::object make(void* handle) const {
    auto* type = reinterpret_cast<PyTypeObject*>(result.ptr());
    try {
      py::object object = py::reinterpret_steal<py::object>(type->tp_new(type, py::tuple().ptr(), nullptr));
      if (!object) throw py::error_already_set();
      py::object pointer = handle_type();
      swap_pointer(pointer.ptr(), PyBUF_WRITABLE, handle);
      PyObject** slot = reinterpret_cast<PyObject**>(reinterpret_cast<char*>(object.ptr()) + handle_offset);
      Py_XSETREF(*slot, pointer.release().ptr());
      return object;
    } catch (...) {
      TVMObjectFree(handle);
      throw;
    }
  }
};
ADTResults* adt_results = nullptr;

/*! \brief A packed return value as TVM's ctypes FFI returns it (the Python object owns it). */
py::object result_of(int code, TVMValue value, const py::object& make_result) {
  if (code == kTVMNDArrayHandle && ndarray_results != nullptr && ndarray_results->applies()) {
    return ndarray_results->make(value.v_handle);
  }
  if (code == kTVMObjectHandle && adt_results != nullptr && adt_results->applies(value.v_handle)) {
    return adt_results->make(value.v_handle);
  }
  return make_result(code, value.v_int64);
}

/*! \brief \p value as TVM's Python FFI returns it (the Python object owns the reference). */
py::object to_python(ObjectRef value, const py::object& make_result) {
  if (!value.defined()) return py::none();
  TVMRetValue rv;
  rv = std::move(value);
  TVMValue out;
  int code;
  rv.MoveToCHost(&out, &code);
  return result_of(code, out, make_result);
}

// --- 1. calls -----------------------------------------------------------------------------------

/*! \brief The DLPack dtype of a numpy array, or false if it has none relay_aot uses. */
bool dtype_of(const py::array& array, DLDataType* out) {
  py::dtype dtype = array.dtype();
  const char kind = dtype.kind();
  const auto bits = static_cast<uint8_t>(8 * dtype.itemsize());
  if (dtype.byteorder() == '>') return false;  // big-endian data
  switch (kind) {
    case 'b': *out = {kDLUInt, 1, 1}; return true;  // numpy bool: one byte per element, TVM's uint1
    case 'i': *out = {kDLInt, bits, 1}; return true;
    case 'u': *out = {kDLUInt, bits, 1}; return true;
    case 'f': *out = {kDLFloat, bits, 1}; return true;
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

/*! \brief A dtype as one number (code, bits, lanes), as fastcall.dtype_key encodes them. */
int64_t dtype_key(DLDataType dtype) {
  return static_cast<int64_t>(dtype.code) | (static_cast<int64_t>(dtype.bits) << 8) | (static_cast<int64_t>(dtype.lanes) << 16);
}

/*!
 * \brief Pack \p args into \p packed; false if one cannot be passed directly: a value of a class
 *        in kinds.excluded, or an array (numpy or TVM) whose dtype is not \p expected's entry
 *        for it (a dtype_key; -1 or a missing entry: any dtype).
 */
bool pack_args(const py::tuple& args, const Kinds& kinds, Packed& packed, const std::vector<int64_t>& expected = {}) {
  const size_t count = args.size();
  auto unexpected = [&expected](size_t i, DLDataType dtype) {
    return i < expected.size() && expected[i] >= 0 && expected[i] != dtype_key(dtype);
  };
  packed.values.resize(count);
  packed.codes.resize(count);
  packed.tensors.reserve(count);
  packed.shapes.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    py::handle arg = args[i];
    TVMValue& value = packed.values[i];
    int& code = packed.codes[i];
    if (py::isinstance(arg, kinds.ndarray)) {  // first: the common argument
      value.v_handle = handle_of(arg);
      if (unexpected(i, static_cast<DLTensor*>(value.v_handle)->dtype)) return false;
      code = is_view(arg) ? kTVMDLTensorHandle : kTVMNDArrayHandle;
    } else if (py::isinstance(arg, kinds.numpy_generic) || py::isinstance<py::array>(arg)) {
      // First: np.float64 is a Python float too, but keeps its dtype here (checked by the entry).
      py::array array = py::reinterpret_borrow<py::object>(arg);
      if (!py::isinstance<py::array>(arg)) {
        array = py::array::ensure(arg);  // a numpy scalar: a 0-d array of its dtype
        packed.keep_alive.push_back(array);
      }
      DLDataType dtype;
      if (!array || !dtype_of(array, &dtype) || !(array.flags() & py::array::c_style) || unexpected(i, dtype)) {
        return false;
      }
      packed.shapes.emplace_back(array.shape(), array.shape() + array.ndim());
      packed.tensors.push_back(DLTensor{const_cast<void*>(array.data()), DLDevice{kDLCPU, 0},
                                        static_cast<int32_t>(array.ndim()), dtype, packed.shapes.back().data(),
                                        nullptr, 0});
      value.v_handle = &packed.tensors.back();
      code = kTVMDLTensorHandle;
    } else if (PyObject_IsInstance(arg.ptr(), kinds.excluded.ptr()) == 1) {
      return false;  // converted in Python (the interpreter's values)
    } else if (PyBool_Check(arg.ptr())) {
      value.v_int64 = arg.ptr() == Py_True ? 1 : 0;
      code = kTVMArgBool;
    } else if (PyLong_Check(arg.ptr())) {
      int overflow = 0;
      long long number = PyLong_AsLongLongAndOverflow(arg.ptr(), &overflow);
      if (overflow != 0) return false;
      value.v_int64 = number;
      code = kDLInt;
    } else if (PyFloat_Check(arg.ptr())) {
      value.v_float64 = PyFloat_AS_DOUBLE(arg.ptr());
      code = kDLFloat;
    } else if (py::isinstance(arg, kinds.packed_func)) {
      value.v_handle = handle_of(arg);
      code = kTVMPackedFuncHandle;
    } else if (py::isinstance(arg, kinds.object)) {
      value.v_handle = handle_of(arg);
      code = kTVMObjectHandle;
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
  return result_of(ret_code, ret, make_result);
}

/*!
 * \brief Pack \p args, run \p invoke(values, codes, count, ret, ret_code) without the GIL, and
 *        convert its result: what both calls below share.
 */
template <typename Invoke>
py::object call_with(const py::tuple& args, const Kinds& kinds, const py::object& make_result,
                     const py::object& raise_error, Invoke invoke, const std::vector<int64_t>& expected = {}) {
  Packed packed;
  if (!pack_args(args, kinds, packed, expected)) return py::reinterpret_borrow<py::object>(Py_NotImplemented);
  TVMValue ret;
  ret.v_int64 = 0;
  int ret_code = kTVMNullptr;
  int status;
  {
    // Compiled code may run long, and may call back into Python (functions passed to the
    // program): let other threads run meanwhile.
    py::gil_scoped_release release;
    status = invoke(packed.values.data(), packed.codes.data(), static_cast<int>(packed.values.size()), &ret, &ret_code);
  }
  return finish(status, ret, ret_code, make_result, raise_error);
}

/*! \brief Set the Python exception of a relay_aot error ("Kind: message", errors.h): the class TVM's FFI uses. */
void set_error(const relay_aot::Error& error) {
  std::string text = error.what();
  size_t colon = text.find(": ");
  py::object exc = (*make_error)(text.substr(0, colon), colon == std::string::npos ? text : text.substr(colon + 2));
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(exc.ptr())), exc.ptr());
}

/*!
 * \brief A library's packed entry point, bound once to what every call of it passes (a
 *        CompiledModule calls it): converting those on each call cost as much as a small model's
 *        kernels.
 */
class Entry {
 public:
  /*!
   * \param address The packed C function (the library's entry symbol).
   * \param kinds Python classes (NDArray, PackedFunc, Object) of TVM's FFI, numpy's scalar base,
   *        and the classes left to Python.
   * \param expected Per argument, the dtype_key its array must have to go straight in (-1: any).
   * \param make_result A function (type_code, value_bits) -> Python object (TVM's return converters).
   * \param raise_error A function raising the Python exception for TVM's last error.
   */
  Entry(uintptr_t address, py::tuple kinds, std::vector<int64_t> expected, py::object make_result, py::object raise_error)
      : entry_(reinterpret_cast<TVMBackendPackedCFunc>(address)), kinds_tuple_(std::move(kinds)), kinds_(kinds_tuple_),
        expected_(std::move(expected)), make_result_(std::move(make_result)), raise_error_(std::move(raise_error)) {}

  /*! \brief The result of the entry on \p args, or NotImplemented if one cannot be passed directly. */
  py::object Call(const py::tuple& args) const {
    auto entry = entry_;
    return call_with(
        args, kinds_, make_result_, raise_error_,
        [entry](TVMValue* values, int* codes, int count, TVMValue* ret, int* ret_code) {
          return entry(values, codes, count, ret, ret_code, nullptr);
        },
        expected_);
  }

 private:
  TVMBackendPackedCFunc entry_;
  py::tuple kinds_tuple_;  // owns what kinds_ borrows
  Kinds kinds_;
  std::vector<int64_t> expected_;
  py::object make_result_, raise_error_;
};

/*! \brief Call a TVM PackedFunc (by its handle) through TVM's C API: the Python backend's kernel calls. */
py::object call_packed(uintptr_t handle, const py::tuple& args, const py::tuple& kinds, const py::object& make_result,
                       const py::object& raise_error) {
  auto func = reinterpret_cast<TVMFunctionHandle>(handle);
  return call_with(args, Kinds(kinds), make_result, raise_error,
                   [func](TVMValue* values, int* codes, int count, TVMValue* ret, int* ret_code) {
                     return TVMFuncCall(func, values, codes, count, ret, ret_code);
                   });
}

/*! \brief A new, uninitialised CPU tensor (compiled code's allocator: one block, recycled per thread). */
py::object empty(const std::vector<int64_t>& shape, int code, int bits, const py::object& make_result) {
  tvm::runtime::ShapeTuple shape_tuple(shape);
  return to_python(relay_aot::alloc_tensor(shape_tuple, DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1}),
                   make_result);
}

constexpr const char* kEntryCapsule = "relay_aot._fastcall.Entry";

/*!
 * \brief ``entry(args)`` of a bound entry (\p capsule holds the Entry): a plain C function of
 *        CPython's, not pybind11's dispatcher, which cost a tenth of a small model's call in
 *        matching overloads and converting the argument.
 */
PyObject* call_bound(PyObject* capsule, PyObject* args) {
  try {
    auto* entry = static_cast<const Entry*>(PyCapsule_GetPointer(capsule, kEntryCapsule));
    if (entry == nullptr) return nullptr;
    if (!PyTuple_Check(args)) {
      PyErr_SetString(PyExc_TypeError, "a bound entry takes the tuple of the arguments");
      return nullptr;
    }
    return entry->Call(py::reinterpret_borrow<py::tuple>(args)).release().ptr();
  } catch (py::error_already_set& e) {
    e.restore();
  } catch (py::builtin_exception& e) {
    e.set_error();
  } catch (const relay_aot::Error& e) {
    set_error(e);
  } catch (const std::exception& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
  }
  return nullptr;
}

PyMethodDef bound_entry_def = {"entry", call_bound, METH_O, "Call the library's entry on the tuple of the arguments."};

/*! \brief The Entry as a Python function of the argument tuple (NotImplemented: convert them in Python). */
py::object bind_entry(uintptr_t address, py::tuple kinds, std::vector<int64_t> expected, py::object make_result,
                      py::object raise_error) {
  auto* entry = new Entry(address, std::move(kinds), std::move(expected), std::move(make_result), std::move(raise_error));
  py::capsule owner(entry, kEntryCapsule, [](PyObject* capsule) {
    delete static_cast<Entry*>(PyCapsule_GetPointer(capsule, kEntryCapsule));
  });
  PyObject* function = PyCFunction_New(&bound_entry_def, owner.ptr());
  if (function == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(function);
}

/*!
 * \brief The base of relay_aot.CompiledModule: its call, in C. ``module(*args)`` calls the
 *        bound entry in ``_direct`` (where set and not None), falling back to the Python method
 *        ``_converted_call(args)`` when it returns NotImplemented; without one it calls
 *        ``_call(args)``. A ``__call__`` written in Python was a third of a small model's call
 *        from Python (0.17 us).
 */
struct DispatchObject {
  PyObject_HEAD
  PyObject* direct;
};

int dispatch_traverse(PyObject* self, visitproc visit, void* arg) {
  Py_VISIT(reinterpret_cast<DispatchObject*>(self)->direct);
  return 0;
}

int dispatch_clear(PyObject* self) {
  Py_CLEAR(reinterpret_cast<DispatchObject*>(self)->direct);
  return 0;
}

void dispatch_dealloc(PyObject* self) {
  PyObject_GC_UnTrack(self);
  dispatch_clear(self);
  Py_TYPE(self)->tp_free(self);
}

PyObject* dispatch_call(PyObject* self, PyObject* args, PyObject* kwargs) {
  if (kwargs != nullptr && PyDict_GET_SIZE(kwargs) != 0) {
    PyErr_SetString(PyExc_TypeError, "a compiled program takes no keyword arguments");
    return nullptr;
  }
  static PyObject* const converted_call = PyUnicode_InternFromString("_converted_call");
  static PyObject* const call = PyUnicode_InternFromString("_call");
  PyObject* direct = reinterpret_cast<DispatchObject*>(self)->direct;
  if (direct == nullptr || direct == Py_None) return PyObject_CallMethodOneArg(self, call, args);
  PyObject* result = PyCFunction_Check(direct) && PyCFunction_GET_FUNCTION(direct) == call_bound
                         ? call_bound(PyCFunction_GET_SELF(direct), args)
                         : PyObject_CallOneArg(direct, args);
  if (result != Py_NotImplemented) return result;
  Py_DECREF(result);
  return PyObject_CallMethodOneArg(self, converted_call, args);
}

PyMemberDef dispatch_members[] = {
    {"_direct", T_OBJECT, offsetof(DispatchObject, direct), 0,
     "The bound entry called first (returning NotImplemented for arguments converted in Python), or None."},
    {nullptr, 0, 0, 0, nullptr},
};

PyTypeObject dispatch_type = [] {
  PyTypeObject type{PyVarObject_HEAD_INIT(nullptr, 0)};
  type.tp_name = "relay_aot._fastcall.Dispatch";
  type.tp_basicsize = sizeof(DispatchObject);
  type.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC;
  type.tp_doc = "The call of a compiled program, in C (the base of relay_aot.CompiledModule).";
  type.tp_traverse = dispatch_traverse;
  type.tp_clear = dispatch_clear;
  type.tp_dealloc = dispatch_dealloc;
  type.tp_call = dispatch_call;
  type.tp_members = dispatch_members;
  type.tp_new = PyType_GenericNew;
  return type;
}();

// --- 2. checks and rules ----------------------------------------------------------------------

/*! \brief shape.h's check of a shape a shape function computed (\p expected: the static shape, or None). */
void check_computed_shape(const std::string& kernel, const std::vector<int64_t>& dims, const py::object& expected) {
  std::vector<int64_t> static_shape;
  if (!expected.is_none()) static_shape = expected.cast<std::vector<int64_t>>();
  relay_aot::check_computed_shape(kernel.c_str(), dims.data(), static_cast<int>(dims.size()),
                                  expected.is_none() ? nullptr : static_shape.data());
}

/*!
 * \brief check.h's check of the named dimensions entry arguments share: \p extents are rows
 *        (name, [(param, path, axis), ...]) of relay_aot.ir.SharedExtent, \p values the converted
 *        arguments, \p names the parameters' names.
 */
void check_shared_extents(const py::list& values, const py::list& extents, const std::vector<std::string>& names,
                          const py::tuple& kinds) {
  Kinds k(kinds);
  std::vector<ObjectRef> objects;
  for (py::handle value : values) objects.push_back(object_of(value, k));
  std::vector<const char*> name_texts;
  for (const std::string& name : names) name_texts.push_back(name.c_str());
  // Every array the descriptors point to is sized before it is filled: no pointer moves.
  const size_t count = extents.size();
  std::vector<std::string> group_names(count);
  std::vector<std::vector<AxisDesc>> axes(count);
  std::vector<std::vector<std::vector<int>>> paths(count);
  std::vector<SharedExtentDesc> descs(count);
  for (size_t g = 0; g < count; ++g) {
    py::tuple row = extents[g].cast<py::tuple>();
    group_names[g] = row[0].cast<std::string>();
    py::list rows = row[1].cast<py::list>();
    paths[g].resize(rows.size());
    axes[g].resize(rows.size());
    for (size_t a = 0; a < rows.size(); ++a) {
      py::tuple axis = rows[a].cast<py::tuple>();
      paths[g][a] = axis[1].cast<std::vector<int>>();
      const int param = axis[0].cast<int>();
      if (param < 0 || static_cast<size_t>(param) >= objects.size() || param >= static_cast<int>(names.size())) {
        throw py::index_error("a shared extent names no parameter");
      }
      axes[g][a] = AxisDesc{param, static_cast<int>(paths[g][a].size()), paths[g][a].data(), axis[2].cast<int>()};
    }
    descs[g] = SharedExtentDesc{group_names[g].c_str(), static_cast<int>(rows.size()), axes[g].data()};
  }
  relay_aot::check_shared_extents(objects.data(), descs.data(), static_cast<int>(count), name_texts.data());
}

/*!
 * \brief A type table (check.h's TypeDesc array) built from the rows of relay_aot/ir/typetable.py,
 *        owning every array and string its descriptors point to.
 */
class TypeTable {
 public:
  explicit TypeTable(const py::list& rows) {
    descs_.reserve(rows.size());
    for (py::handle row : rows) descs_.push_back(Descriptor(row));
  }

  /*! \brief Check \p value (a TVM object or None) against type \p type (check.h's check_value). */
  void Check(const py::handle& value, int type, const std::string& what, const py::tuple& kinds) const {
    CheckIndex(type);
    relay_aot::check_value(object_of(value, Kinds(kinds)), type, descs_.data(), what);
  }

  /*! \brief Raise check.h's error for a value that has no runtime form, described as \p got. */
  void Mismatch(int type, const std::string& what, const std::string& got) const {
    CheckIndex(type);
    relay_aot::raise_type_error(what + ": expected " + descs_[type].text + ", got " + got);
  }

  /*! \brief A number passed for a 0-d tensor of type \p type, as that tensor (scalar_of_dtype). */
  py::object Scalar(const py::handle& number, int type, const std::string& what, const py::object& make_result) const {
    CheckIndex(type);
    const TypeDesc& desc = descs_[type];
    if (desc.kind != Kind::kTensor || desc.ndim != 0) Mismatch(type, what, "a number");
    relay_aot::NumberKind kind = relay_aot::NumberKind::kFloat;
    double real = 0;
    int64_t integer = 0;
    if (PyBool_Check(number.ptr())) {
      kind = relay_aot::NumberKind::kBool;
      integer = number.ptr() == Py_True;
    } else if (PyLong_Check(number.ptr())) {
      kind = relay_aot::NumberKind::kInt;
      int overflow = 0;
      integer = PyLong_AsLongLongAndOverflow(number.ptr(), &overflow);
      if (overflow != 0) {
        unsigned long long big = PyLong_AsUnsignedLongLong(number.ptr());
        if (PyErr_Occurred() || desc.dtype.code != kDLUInt || desc.dtype.bits != 64) {
          PyErr_Clear();
          throw relay_aot::Error("ArgumentValueError", what + ": the number does not fit in dtype " +
                                                   tvm::runtime::DLDataType2String(desc.dtype));
        }
        return to_python(relay_aot::box(static_cast<uint64_t>(big)), make_result);
      }
    } else {
      real = PyFloat_AsDouble(number.ptr());
      if (PyErr_Occurred()) throw py::error_already_set();
    }
    return to_python(relay_aot::scalar_of_dtype(desc.dtype, kind, real, integer, what.c_str()), make_result);
  }

 private:
  void CheckIndex(int type) const {
    if (type < 0 || static_cast<size_t>(type) >= descs_.size()) throw py::index_error("no such type in the table");
  }

  const char* Text(const std::string& text) { return texts_.emplace_back(text).c_str(); }

  const int* Ints(const py::handle& values, int* count) {
    std::vector<int>& stored = ints_.emplace_back(values.cast<std::vector<int>>());
    *count = static_cast<int>(stored.size());
    return stored.empty() ? nullptr : stored.data();
  }

  TypeDesc Descriptor(const py::handle& row) {
    const std::string kind = row.attr("kind").cast<std::string>();
    TypeDesc desc{Kind::kAny, Text(row.attr("text").cast<std::string>()), DLDataType{kDLInt, 0, 0}, 0, nullptr,
                  0, nullptr, 0, nullptr};
    if (kind == "tensor") {
      desc.kind = Kind::kTensor;
      desc.dtype = tvm::runtime::String2DLDataType(row.attr("dtype").cast<std::string>());
      std::vector<int64_t>& shape = shapes_.emplace_back(row.attr("shape").cast<std::vector<int64_t>>());
      desc.ndim = static_cast<int>(shape.size());
      desc.shape = shape.empty() ? nullptr : shape.data();
    } else if (kind == "tuple" || kind == "ref") {
      desc.kind = kind == "tuple" ? Kind::kTuple : Kind::kRef;
      desc.fields = Ints(row.attr("fields"), &desc.num_fields);
    } else if (kind == "adt") {
      desc.kind = Kind::kAdt;
      std::vector<relay_aot::CtorDesc>& ctors = ctors_.emplace_back();
      for (py::handle ctor : row.attr("ctors")) {
        relay_aot::CtorDesc c{ctor.attr("tag").cast<int32_t>(), 0, nullptr, Text(ctor.attr("name").cast<std::string>())};
        c.fields = Ints(ctor.attr("fields"), &c.num_fields);
        ctors.push_back(c);
      }
      desc.num_ctors = static_cast<int>(ctors.size());
      desc.ctors = ctors.data();
    } else if (kind == "func") {
      desc.kind = Kind::kFunc;
    }
    return desc;
  }

  std::vector<TypeDesc> descs_;
  // Deques: what their elements own never moves as more are added.
  std::deque<std::string> texts_;
  std::deque<std::vector<int>> ints_;
  std::deque<std::vector<int64_t>> shapes_;
  std::deque<std::vector<relay_aot::CtorDesc>> ctors_;
};

/*! \brief Relay integer division and modulo on 0-d values of dtype (code, bits): scalar.h's. */
template <typename T>
py::int_ integer_op(int op, T a, T b) {
  switch (op) {
    case 0: return py::int_(relay_aot::int_div(a, b));
    case 1: return py::int_(relay_aot::int_mod(a, b));
    case 2: return py::int_(relay_aot::int_floor_div(a, b));
    default: return py::int_(relay_aot::int_floor_mod(a, b));
  }
}

py::int_ integer(int op, int code, int bits, const py::int_& a, const py::int_& b) {
  if (code == kDLUInt) {
    switch (bits) {
      case 8: return integer_op<uint8_t>(op, a.cast<uint8_t>(), b.cast<uint8_t>());
      case 16: return integer_op<uint16_t>(op, a.cast<uint16_t>(), b.cast<uint16_t>());
      case 32: return integer_op<uint32_t>(op, a.cast<uint32_t>(), b.cast<uint32_t>());
      default: return integer_op<uint64_t>(op, a.cast<uint64_t>(), b.cast<uint64_t>());
    }
  }
  switch (bits) {
    case 8: return integer_op<int8_t>(op, a.cast<int8_t>(), b.cast<int8_t>());
    case 16: return integer_op<int16_t>(op, a.cast<int16_t>(), b.cast<int16_t>());
    case 32: return integer_op<int32_t>(op, a.cast<int32_t>(), b.cast<int32_t>());
    default: return integer_op<int64_t>(op, a.cast<int64_t>(), b.cast<int64_t>());
  }
}

// --- 3. values made and read in Python --------------------------------------------------------

/*! \brief A new runtime.ADT (a tuple when \p tag is 0) of TVM objects \p fields; see the top. */
py::object make_adt(int32_t tag, const py::list& fields, const py::tuple& kinds, const py::object& make_result) {
  Kinds k(kinds);
  std::vector<ObjectRef> objects;
  objects.reserve(fields.size());
  for (py::handle field : fields) objects.push_back(object_of(field, k));
  return to_python(relay_aot::make_adt_of(tag, std::move(objects)), make_result);
}

/*! \brief The interpreter's relay.ConstructorValue (its class is in src/relay/backend/interpreter.cc only). */
struct ConstructorValueObj : Object {
  int32_t tag;
  tvm::runtime::Array<ObjectRef> fields;
  ObjectRef constructor;
};

/*!
 * \brief (tag, [fields]) of a runtime.ADT (\p of_constructor_value false) or of the interpreter's
 *        ConstructorValue, read in one call instead of three FFI calls per field.
 */
py::tuple parts(const py::handle& value, bool of_constructor_value, const py::object& make_result) {
  const auto* obj = static_cast<const Object*>(handle_of(value));
  int32_t tag;
  py::list out;
  if (of_constructor_value) {
    const auto* cv = static_cast<const ConstructorValueObj*>(obj);
    tag = cv->tag;
    for (const ObjectRef& field : cv->fields) out.append(to_python(field, make_result));
  } else {
    const auto* adt = static_cast<const ADTObj*>(obj);
    tag = adt->tag;
    for (uint32_t i = 0; i < adt->size; ++i) out.append(to_python((*adt)[i], make_result));
  }
  return py::make_tuple(tag, out);
}

/*! \brief The runtime ADT a Python ADT holds. */
const ADTObj& adt_of(const py::handle& value) { return *static_cast<const ADTObj*>(handle_of(value)); }

/*! \brief Field \p index of the runtime ADT \p value (negative: from the end), as sequences index. */
py::object adt_field(const py::handle& value, int64_t index, const py::object& make_result) {
  const ADTObj& adt = adt_of(value);
  const int64_t size = adt.size;
  if (index < 0) index += size;
  if (index < 0 || index >= size) throw py::index_error("ADT index out of range");
  return to_python(adt[static_cast<size_t>(index)], make_result);
}

}  // namespace

PYBIND11_MODULE(_fastcall, m) {
  m.doc() = "relay_aot's C++ runtime from Python: fast calls, the checks of compiled code, values made in Python.";
  py::register_exception_translator([](std::exception_ptr error) {
    try {
      if (error) std::rethrow_exception(error);
    } catch (const relay_aot::Error& e) {
      set_error(e);
    }
  });
  if (PyType_Ready(&dispatch_type) != 0) throw py::error_already_set();
  Py_INCREF(&dispatch_type);
  m.add_object("Dispatch", reinterpret_cast<PyObject*>(&dispatch_type));
  m.def("set_error_maker", [](py::object maker) { make_error = new py::object(std::move(maker)); });
  m.def("set_ndarray_results", [](py::object ndarray, py::object handle_type, py::dict registry, py::dict plain) {
    ndarray_results = new NDArrayResults{std::move(ndarray), std::move(handle_type), std::move(registry), std::move(plain)};
    ndarray_results->find_slots();
  }, py::arg("ndarray"), py::arg("handle_type"), py::arg("registry"), py::arg("plain"));
  m.def("set_adt_results", [](py::object adt, py::object result, py::object handle_type, py::dict registry) {
    adt_results = new ADTResults{std::move(adt), std::move(result), std::move(handle_type), std::move(registry)};
    adt_results->handle_offset = member_offset(adt_results->result, py::str("handle"));
  }, py::arg("adt"), py::arg("result"), py::arg("handle_type"), py::arg("registry"));
  m.def("adt_field", &adt_field, py::arg("value"), py::arg("index"), py::arg("make_result"));
  m.def("adt_size", [](const py::handle& value) { return static_cast<int64_t>(adt_of(value).size); }, py::arg("value"));
  m.def("adt_tag", [](const py::handle& value) { return static_cast<int64_t>(adt_of(value).tag); }, py::arg("value"));
  m.def("bind_entry", &bind_entry, py::arg("address"), py::arg("kinds"), py::arg("expected"), py::arg("make_result"),
        py::arg("raise_error"));
  m.def("call_packed", &call_packed, py::arg("handle"), py::arg("args"), py::arg("kinds"), py::arg("make_result"),
        py::arg("raise_error"));
  m.def("empty", &empty, py::arg("shape"), py::arg("code"), py::arg("bits"), py::arg("make_result"));
  m.def("check_shared_extents", &check_shared_extents, py::arg("values"), py::arg("extents"), py::arg("names"),
        py::arg("kinds"));
  m.def("check_computed_shape", &check_computed_shape, py::arg("kernel"), py::arg("dims"), py::arg("expected"));
  m.def("make_adt", &make_adt, py::arg("tag"), py::arg("fields"), py::arg("kinds"), py::arg("make_result"));
  m.def("parts", &parts, py::arg("value"), py::arg("of_constructor_value"), py::arg("make_result"));
  m.def("integer", &integer, py::arg("op"), py::arg("code"), py::arg("bits"), py::arg("a"), py::arg("b"));
  // The profiler of compiled code (profile.h), driven by the Python backend's profiled code.
  m.def("profile_start", [](std::vector<std::string> functions, std::vector<std::string> kernels, int64_t max_events) {
    relay_aot::profiler().start(std::move(functions), std::move(kernels), max_events);
  });
  m.def("profile_stop", [] { return relay_aot::profiler().stop(); });
  m.def("profile_enter", [](int id) { relay_aot::profiler().enter(id); });
  m.def("profile_exit", [] { relay_aot::profiler().exit(); });
  m.def("profile_clock", &relay_aot::profile_clock);
  m.def("profile_kernel", [](int id, int64_t start) { relay_aot::profiler().kernel(id, start); });
  // The CPU check of compiled code (cpu.h), for libraries loaded from Python and the Python backend.
  m.def("cpu_features", &relay_aot::cpu_features);
  m.def("cpu_mismatch", [](const std::string& target, const std::vector<std::string>& features) {
    std::vector<const char*> names;
    for (const std::string& f : features) names.push_back(f.c_str());
    return relay_aot::cpu_mismatch(target.c_str(), names.data(), static_cast<int>(names.size()));
  }, py::arg("target"), py::arg("features"));
  py::class_<TypeTable>(m, "TypeTable")
      .def(py::init<const py::list&>(), py::arg("rows"))
      .def("check", &TypeTable::Check, py::arg("value"), py::arg("type"), py::arg("what"), py::arg("kinds"))
      .def("mismatch", &TypeTable::Mismatch, py::arg("type"), py::arg("what"), py::arg("got"))
      .def("scalar", &TypeTable::Scalar, py::arg("number"), py::arg("type"), py::arg("what"), py::arg("make_result"));
}
