// The benchmark programs fib, list_scalars and list_tensors written by hand in C++, over the
// value representation relay_aot's generated code uses (TVM's runtime objects): a List is a
// chain of runtime.ADT cells with Relay's constructor tags, Cons holding (head, tail) as fields
// laid out after the ADTObj; an element is an NDArray (a 0-d int32 tensor for list_scalars, a
// float32 tensor for list_tensors). list_tensors calls the same fused TVM kernels as relay_aot
// (their addresses come from relay_aot's library of the same workload: see __init__.py).
//
// What a competent programmer does and a compiler of Relay cannot assume: loops instead of
// recursion (build from the tail, map into a vector then link the cells from the back, fold in
// a loop), the mapped and folded functions inlined, scalars unboxed in locals, and objects
// allocated from per-size free lists, each object one block (an NDArray's header and data
// together, a 0-d tensor's element in the header's padding). Every object is still a real TVM
// object with TVM's atomic reference count: the floor for this representation, not for the
// best one.
//
// A tensor's header is made as relay_aot makes it (relay_aot/tensor.h's ContainerAccess: a copy of
// a prototype, as TVM's constructors malloc an empty shape first); that is the representation.
//
// Built with relay_aot's compiler flags into a library that leaves TVM's symbols undefined (it
// is loaded into a process that already has libtvm.so); each program is exported in TVM's
// packed C convention, like a relay_aot library's @main.
#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/container/shape_tuple.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>

#include <relay_aot/tensor.h>  // only how to make a tensor header: the representation's, shared

#include <cstdint>
#include <cstdlib>
#include <exception>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

int TVMAPIHandleException(const std::exception& e);  // libtvm's: records e as the last error

namespace {

using tvm::runtime::ADTObj;
using tvm::runtime::NDArray;
using tvm::runtime::Object;
using tvm::runtime::ObjectRef;
using tvm::runtime::ShapeTuple;
using tvm::runtime::TVMArgs;
using tvm::runtime::TVMRetValue;

constexpr DLDevice kCPU{kDLCPU, 0};
constexpr DLDataType kInt32{kDLInt, 32, 1};
constexpr DLDataType kFloat32{kDLFloat, 32, 1};
constexpr size_t kAlign = 64;  // TVM's kernels expect 64-byte aligned data

// ---- allocation: one free list per block size, per thread ----------------------------------

struct FreeBlock {
  FreeBlock* next;
};

// Blocks of one size; blocks freed go back on the list (never to malloc: a benchmark's lists are
// rebuilt at every call).
class FreeList {
 public:
  explicit FreeList(size_t bytes) : bytes_(bytes) {}
  void* take() {
    if (head_ == nullptr) {
      void* block = std::aligned_alloc(kAlign, bytes_);
      if (block == nullptr) throw std::bad_alloc();
      return block;
    }
    FreeBlock* block = head_;
    head_ = block->next;
    return block;
  }
  void give(void* block) { head_ = new (block) FreeBlock{head_}; }

 private:
  size_t bytes_;
  FreeBlock* head_ = nullptr;
};

constexpr size_t round_up(size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }
constexpr size_t kTensorHeader = round_up(sizeof(NDArray::Container));
constexpr size_t kCellBytes = round_up(sizeof(ADTObj) + 2 * sizeof(ObjectRef));

FreeList& cells() {
  static thread_local FreeList list(kCellBytes);
  return list;
}

// 0-d tensors keep their element in the header block's padding (one 128-byte block); others
// have the header, then the data, 64-byte aligned. Every tensor of one run has the same size.
size_t data_bytes(const DLTensor& t) { return tvm::runtime::GetDataSize(t); }
bool data_in_header(const DLTensor& t) { return t.ndim == 0 && data_bytes(t) <= kTensorHeader - sizeof(NDArray::Container); }

FreeList& tensors(const DLTensor& t) {
  static thread_local FreeList scalars(kTensorHeader);
  static thread_local size_t vector_bytes = 0;
  static thread_local FreeList* vectors = nullptr;
  if (data_in_header(t)) return scalars;
  if (vectors == nullptr || vector_bytes != data_bytes(t)) {  // one size at a time (leaks the old list: fine here)
    vectors = new FreeList(kTensorHeader + round_up(data_bytes(t)));
    vector_bytes = data_bytes(t);
  }
  return *vectors;
}

// Object's header fields are protected: reached through a subclass.
struct Header : Object {
  static void init(Object* obj, uint32_t type_index, FDeleter deleter) {
    static_cast<Header*>(obj)->type_index_ = type_index;
    static_cast<Header*>(obj)->deleter_ = deleter;
  }
  static int32_t use_count(const Object* obj) {
    return static_cast<const Header*>(obj)->ref_counter_.load(std::memory_order_relaxed);
  }
};

// A reference taking over a new object: one increment (0 -> 1), where TVM's constructors from an
// ObjectPtr take two and a decrement (relay_aot/memory.h's adopt).
template <typename Ref>
Ref own(Object* obj) {
  return relay_aot::adopt<Ref>(obj);
}

// ---- tensors ---------------------------------------------------------------------------------

void free_tensor(Object* obj) {
  auto* tensor = static_cast<NDArray::Container*>(obj);
  FreeList& list = tensors(tensor->dl_tensor);
  tensor->~Container();
  list.give(tensor);
}

// A new uninitialised CPU tensor of `shape` (shared by all tensors of a run) in one block.
NDArray new_tensor(const ShapeTuple& shape, DLDataType dtype) {
  DLTensor probe{nullptr, kCPU, static_cast<int>(shape.size()), dtype, const_cast<int64_t*>(shape.data()), nullptr, 0};
  void* block = tensors(probe).take();
  char* data = static_cast<char*>(block) + (data_in_header(probe) ? sizeof(NDArray::Container) : kTensorHeader);
  NDArray::Container* tensor = relay_aot::detail::ContainerAccess::make(block, data, shape, dtype);
  tensor->SetDeleter(&free_tensor);
  return own<NDArray>(tensor);
}

NDArray box(int32_t value) {
  NDArray out = new_tensor(relay_aot::scalar_shape(), kInt32);
  *static_cast<int32_t*>(out->data) = value;
  return out;
}

int32_t unbox(const ObjectRef& scalar) {
  return *static_cast<const int32_t*>(static_cast<const NDArray::Container*>(scalar.get())->dl_tensor.data);
}

DLTensor* dl(const ObjectRef& tensor) {
  return &static_cast<NDArray::Container*>(const_cast<Object*>(tensor.get()))->dl_tensor;
}

// ---- lists -----------------------------------------------------------------------------------

int32_t cons_tag = 0, nil_tag = 0;  // Relay's tags of the Prelude's List constructors (set from Python)

ObjectRef* fields(ADTObj* cell) { return reinterpret_cast<ObjectRef*>(reinterpret_cast<char*>(cell) + sizeof(ADTObj)); }

const ObjectRef& head(const ObjectRef& cell) { return fields(static_cast<ADTObj*>(const_cast<Object*>(cell.get())))[0]; }
const ObjectRef& tail(const ObjectRef& cell) { return fields(static_cast<ADTObj*>(const_cast<Object*>(cell.get())))[1]; }
bool is_cons(const ObjectRef& cell) { return static_cast<const ADTObj*>(cell.get())->tag == cons_tag; }

// Frees a cell and, in a loop, every following cell it held the last reference to: a long list
// is freed without recursing once per cell.
void free_cells(Object* obj) {
  auto* cell = static_cast<ADTObj*>(obj);
  while (cell != nullptr) {
    ObjectRef* f = fields(cell);
    ADTObj* next = nullptr;
    if (cell->size == 2) {
      f[0].~ObjectRef();
      Object* rest = const_cast<Object*>(f[1].get());
      if (Header::use_count(rest) == 1) {
        next = static_cast<ADTObj*>(rest);  // its last reference is ours: free it here, next
      } else {
        f[1].~ObjectRef();
      }
    }
    cell->size = 0;
    cell->~ADTObj();
    cells().give(cell);
    cell = next;
  }
}

ADTObj* new_cell(int32_t tag) {
  auto* cell = new (cells().take()) ADTObj();
  Header::init(cell, ADTObj::RuntimeTypeIndex(), &free_cells);
  cell->tag = tag;
  cell->size = 0;
  return cell;
}

ObjectRef nil() { return own<ObjectRef>(new_cell(nil_tag)); }

ObjectRef cons(ObjectRef&& value, ObjectRef&& rest) {
  ADTObj* cell = new_cell(cons_tag);
  new (fields(cell)) ObjectRef(std::move(value));
  new (fields(cell) + 1) ObjectRef(std::move(rest));
  cell->size = 2;
  return own<ObjectRef>(cell);
}

// The list of `values`, in order: cells linked from the back.
template <typename Value>
ObjectRef list_of(std::vector<Value>& values) {
  ObjectRef list = nil();
  for (size_t i = values.size(); i-- > 0;) list = cons(std::move(values[i]), std::move(list));
  return list;
}

// ---- the programs ----------------------------------------------------------------------------

int32_t fib(int32_t n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }

int32_t list_scalars(int32_t n) {
  ObjectRef xs = nil();  // @build(n) = [n, n-1, ..., 1]
  for (int32_t i = 1; i <= n; ++i) xs = cons(box(i), std::move(xs));
  std::vector<NDArray> mapped;  // @map(fn (x) { x * 3 + 1 }, xs)
  for (const ObjectRef* cell = &xs; is_cons(*cell); cell = &tail(*cell)) mapped.push_back(box(unbox(head(*cell)) * 3 + 1));
  ObjectRef ys = list_of(mapped);
  int32_t acc = 0;  // @foldl(fn (acc, y) { acc + y }, 0, ys)
  for (const ObjectRef* cell = &ys; is_cons(*cell); cell = &tail(*cell)) acc += unbox(head(*cell));
  return acc;
}

// The fused kernels of list_tensors, relay_aot's (TVM's packed C signature).
using Kernel = int (*)(TVMValue*, int*, int, TVMValue*, int*, void*);
Kernel k_zeros, k_cast_multiply, k_tanh_multiply_add, k_add;

template <typename... Tensors>
void call(Kernel kernel, Tensors... tensors) {
  TVMValue values[] = {TVMValue{.v_handle = tensors}...};
  int codes[] = {(static_cast<void>(tensors), kTVMDLTensorHandle)...};
  TVMValue ret;
  int ret_code = kTVMNullptr;
  if (kernel(values, codes, sizeof...(Tensors), &ret, &ret_code, nullptr) != 0) {
    throw std::runtime_error(std::string("kernel failed: ") + TVMGetLastError());
  }
}

NDArray list_tensors(const NDArray& x, int32_t n) {
  ShapeTuple shape = x.Shape();
  ObjectRef xs = nil();  // @build(x, n) = [x * n, ..., x * 1]
  for (int32_t i = 1; i <= n; ++i) {
    NDArray t = new_tensor(shape, kFloat32);
    DLTensor scalar{&i, kCPU, 0, kInt32, nullptr, nullptr, 0};
    call(k_cast_multiply, &scalar, dl(x), dl(t));
    xs = cons(std::move(t), std::move(xs));
  }
  std::vector<NDArray> mapped;  // @map(fn (t) { tanh(t) + t * 0.5 }, xs)
  for (const ObjectRef* cell = &xs; is_cons(*cell); cell = &tail(*cell)) {
    NDArray u = new_tensor(shape, kFloat32);
    call(k_tanh_multiply_add, dl(head(*cell)), dl(u));
    mapped.push_back(std::move(u));
  }
  ObjectRef ys = list_of(mapped);
  NDArray acc = new_tensor(shape, kFloat32);  // @foldl(fn (acc, y) { acc + y }, zeros, ys)
  call(k_zeros, dl(acc));
  for (const ObjectRef* cell = &ys; is_cons(*cell); cell = &tail(*cell)) {
    NDArray sum = new_tensor(shape, kFloat32);
    call(k_add, dl(acc), dl(head(*cell)), dl(sum));
    acc = std::move(sum);
  }
  return acc;
}

// ---- entry points ------------------------------------------------------------------------------

const DLTensor* tensor_arg(const TVMArgs& args, int i, DLDataType dtype, int ndim) {
  const DLTensor* t = args[i];
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != 1 || t->ndim != ndim ||
      t->device.device_type != kDLCPU) {
    throw std::invalid_argument("argument " + std::to_string(i) + " has the wrong dtype, rank or device");
  }
  return t;
}

int32_t int_arg(const TVMArgs& args, int i) {
  const DLTensor* t = tensor_arg(args, i, kInt32, 0);
  return *reinterpret_cast<const int32_t*>(static_cast<const char*>(t->data) + t->byte_offset);
}

template <typename Body>
int entry(TVMValue* values, int* codes, int count, int arity, TVMValue* ret, int* ret_code, Body body) {
  try {
    if (count != arity) throw std::invalid_argument("expected " + std::to_string(arity) + " arguments");
    TVMRetValue rv;
    rv = body(TVMArgs(values, codes, count));
    rv.MoveToCHost(ret, ret_code);
    return 0;
  } catch (const std::exception& e) {
    return TVMAPIHandleException(e);
  }
}

}  // namespace

#define HAND_EXPORT extern "C" __attribute__((visibility("default"))) int
#define HAND_PACKED TVMValue *values, int *codes, int count, TVMValue *ret, int *ret_code, void*

HAND_EXPORT hand_fib(HAND_PACKED) {
  return entry(values, codes, count, 1, ret, ret_code, [](const TVMArgs& args) { return box(fib(int_arg(args, 0))); });
}

HAND_EXPORT hand_list_scalars(HAND_PACKED) {
  return entry(values, codes, count, 1, ret, ret_code,
               [](const TVMArgs& args) { return box(list_scalars(int_arg(args, 0))); });
}

HAND_EXPORT hand_list_tensors(HAND_PACKED) {
  return entry(values, codes, count, 2, ret, ret_code, [](const TVMArgs& args) {
    if (k_add == nullptr) throw std::logic_error("hand_list_tensors: hand_bind_kernels was not called");
    NDArray x = args[0];
    tensor_arg(args, 0, kFloat32, 1);
    return list_tensors(x, int_arg(args, 1));
  });
}

// hand_bind_list(cons_tag, nil_tag): Relay's tags of the List constructors in the module.
HAND_EXPORT hand_bind_list(HAND_PACKED) {
  return entry(values, codes, count, 2, ret, ret_code, [](const TVMArgs& args) {
    cons_tag = static_cast<int32_t>(static_cast<int64_t>(args[0]));
    nil_tag = static_cast<int32_t>(static_cast<int64_t>(args[1]));
    return 0;
  });
}

// hand_bind_kernels(zeros, cast_multiply, tanh_multiply_add, add): addresses of relay_aot's
// fused kernels of list_tensors.
HAND_EXPORT hand_bind_kernels(HAND_PACKED) {
  return entry(values, codes, count, 4, ret, ret_code, [](const TVMArgs& args) {
    Kernel* kernels[] = {&k_zeros, &k_cast_multiply, &k_tanh_multiply_add, &k_add};
    for (int i = 0; i < 4; ++i) *kernels[i] = reinterpret_cast<Kernel>(static_cast<intptr_t>(static_cast<int64_t>(args[i])));
    return 0;
  });
}
