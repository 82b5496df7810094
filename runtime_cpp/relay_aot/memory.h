/*!
 * \file relay_aot/memory.h
 * \brief Objects made by generated code are destroyed iteratively, never recursively.
 *
 * Freeing the head of a 200,000-element list drops its tail, which drops its tail, ... -- with
 * TVM's default deleters that is 200,000 nested destructor calls and a stack overflow, wherever
 * the last reference happens to die (in generated code, in Python, in TVM). Every ADT, closure
 * and reference cell the generated code allocates gets a deleter that, when called while another
 * such deletion is already running on the thread, only queues the object; the outermost deletion
 * drains the queue in a loop. The real deleter (TVM's allocator's) still frees each object.
 */
#ifndef RELAY_AOT_MEMORY_H_
#define RELAY_AOT_MEMORY_H_

#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/container/array.h>
#include <tvm/runtime/memory.h>
#include <tvm/runtime/object.h>

#include <pthread.h>

#include <atomic>
#include <cstdlib>
#include <initializer_list>
#include <new>
#include <utility>
#include <vector>

namespace relay_aot {

using tvm::runtime::ADT;
using tvm::runtime::ADTObj;
using tvm::runtime::Object;
using tvm::runtime::ObjectRef;
using tvm::runtime::SimpleObjAllocator;

namespace detail {

/*!
 * \brief The calling thread's instance of \p T (a cache of free blocks or cells, a queue),
 *        reached by one thread without a thread-local access.
 *
 * In a shared library a thread_local is reached through a TLS descriptor call, twice for one
 * with a constructor (its guard, then itself), and the call is the slow, dynamic kind in every
 * library loaded after static TLS room ran out (about 512 bytes: the second model a process
 * loads). Allocation and deletion reach these at every object, which cost a model loaded
 * second 15% of a gradient program's time. The first thread to ask owns a process-wide
 * instance, recognised by pthread_self() (a read of the thread pointer); a thread id is unique
 * among live threads, so the instance is never used by two at once. Other threads have their
 * own thread_local one. The process-wide instance is never destroyed: no destructor runs at
 * exit after TVM is gone.
 */
template <typename T>
T& per_thread() {
  static std::atomic<pthread_t> owner{0};
  alignas(T) static unsigned char shared[sizeof(T)];
  pthread_t self = pthread_self();
  pthread_t current = owner.load(std::memory_order_acquire);
  if (current == self) return *reinterpret_cast<T*>(shared);
  if (current == 0 && owner.compare_exchange_strong(current, self, std::memory_order_acq_rel)) {
    return *new (shared) T();
  }
  static thread_local T local;
  return local;
}

/*! \brief Gives a reference class \p T the pointer it holds (its data_ is protected). */
template <typename T>
struct Adopted : T {
  explicit Adopted(tvm::runtime::ObjectPtr<Object>&& ptr) { this->data_ = std::move(ptr); }
};

}  // namespace detail

/*!
 * \brief A new reference of class \p T to \p obj: one reference-count increment.
 *
 * TVM's reference classes take their ObjectPtr by value and copy it into place, so
 * ``T(GetObjectPtr(obj))`` costs an increment, a second increment and a decrement -- three
 * atomic operations where one is needed. Every tensor, tuple and field access pays it, so it
 * shows on list-heavy programs.
 */
template <typename T>
inline T adopt(const Object* obj) {
  return T(detail::Adopted<T>(tvm::runtime::GetObjectPtr<Object>(const_cast<Object*>(obj))));
}

namespace detail {

/*! \brief Alignment of every block (tensor data must be 64-byte aligned for TVM's kernels). */
constexpr size_t kAlignment = 64;

/*! \brief Blocks larger than this are not cached (large tensors are rare and costly to keep). */
constexpr size_t kMaxCachedBlock = size_t(1) << 20;
/*!
 * \brief Bytes of free blocks kept per thread, and distinct sizes kept. A program that builds a
 *        list of 1,000 boxed scalars frees them all at once and builds it again on the next call:
 *        the cache must hold a whole list's worth, not a handful.
 */
constexpr size_t kCachedBytes = size_t(16) << 20;
constexpr size_t kCachedSizes = 32;

/*! \brief Free blocks of one size. */
struct SizeClass {
  size_t bytes;
  std::vector<void*> blocks;
};

/*! \brief The calling thread's cache of free blocks. */
class BlockCache {
 public:
  ~BlockCache();

  void* Take(size_t bytes) {
    for (SizeClass& c : classes_) {
      if (c.bytes == bytes && !c.blocks.empty()) {
        void* block = c.blocks.back();
        c.blocks.pop_back();
        cached_bytes_ -= bytes;
        return block;
      }
    }
    void* block = std::aligned_alloc(kAlignment, bytes);
    if (block == nullptr) throw std::bad_alloc();
    return block;
  }

  /*! \brief Keep \p block (of \p bytes) for a later Take, or free it (out of line: deleters call it). */
  void Give(void* block, size_t bytes);

 private:
  std::vector<SizeClass> classes_;
  size_t cached_bytes_ = 0;
};

inline BlockCache& block_cache() { return per_thread<BlockCache>(); }

/*! \brief Bytes of a block holding \p bytes, rounded up to the alignment. */
constexpr size_t rounded(size_t bytes) { return (bytes + kAlignment - 1) / kAlignment * kAlignment; }

/*!
 * \brief Bytes of a block for \p bytes of tensor data: the alignment up to 1 KiB, then a
 *        quarter of the power of two below: sizes that differ a little (a tensor one row longer
 *        than at the last step) share a block size, so the cache serves them, for at most a
 *        quarter more memory.
 */
inline size_t bucketed(size_t bytes) {
  if (bytes <= 1024) return rounded(bytes);
  size_t step = size_t(1) << (63 - __builtin_clzll(static_cast<unsigned long long>(bytes)) - 2);
  return (bytes + step - 1) / step * step;
}

}  // namespace detail

/*! \brief Objects waiting to be freed by the deletion running on this thread. */
struct DeletionQueue {
  bool draining = false;
  std::vector<std::pair<Object*, Object::FDeleter>> pending;
};

inline DeletionQueue& deletion_queue() { return detail::per_thread<DeletionQueue>(); }

/*! \brief Free \p obj with \p real_deleter, without nesting inside another such deletion
 *         (out of line: deleters, called through pointers, are its only callers). */
void release(Object* obj, Object::FDeleter real_deleter);

/*! \brief The deleter installed on objects allocated through \p Handler. */
template <typename Handler>
void iterative_deleter(Object* obj) {
  release(obj, Handler::Deleter());
}

/*! \brief An object's deleter, type and reference count (protected in Object; reached through a subclass). */
struct ObjectAccess : Object {
  static int32_t UseCount(const Object* obj) {
    return static_cast<const ObjectAccess*>(obj)->ref_counter_.load(std::memory_order_relaxed);
  }
  static void Set(const Object* obj, Object::FDeleter deleter) {
    static_cast<ObjectAccess*>(const_cast<Object*>(obj))->deleter_ = deleter;
  }
  static void SetType(const Object* obj, uint32_t type_index) {
    static_cast<ObjectAccess*>(const_cast<Object*>(obj))->type_index_ = type_index;
  }
  static void SetFirstCount(const Object* obj) {
    static_cast<ObjectAccess*>(const_cast<Object*>(obj))->ref_counter_.store(1, std::memory_order_relaxed);
  }
};

/*!
 * \brief The first reference to \p fresh, an object just made here (count 0, seen by no other
 *        thread): its count is set with a plain store, where adopt's increment is atomic. Every
 *        tensor, tuple, closure and reference cell a program makes starts this way.
 */
template <typename T>
inline T own(Object* fresh) {
  ObjectAccess::SetFirstCount(fresh);
  T out;
  *reinterpret_cast<Object**>(&out) = fresh;  // a reference is one pointer (see view in values.h)
  return out;
}

namespace detail {

/*! \brief The fields of an ADT, stored right after it (as TVM's InplaceArrayBase lays them out). */
inline ObjectRef* adt_fields(ADTObj* adt) {
  return reinterpret_cast<ObjectRef*>(reinterpret_cast<char*>(adt) + sizeof(ADTObj));
}

/*! \brief The deleters of ADTs (out of line: only their addresses are taken). */
void free_adt(Object* obj);
void free_adt_iteratively(Object* obj);

/*!
 * \brief An empty ADT with \p tag in a block from the thread's cache, with room for \p count
 *        fields; the caller constructs them in order, counting them in `size`.
 */
inline ADTObj* new_adt(int32_t tag, size_t count) {
  void* block = block_cache().Take(rounded(sizeof(ADTObj) + count * sizeof(ObjectRef)));
  auto* adt = new (block) ADTObj();
  adt->tag = tag;
  adt->size = 0;
  ObjectAccess::SetType(adt, ADTObj::RuntimeTypeIndex());
  ObjectAccess::Set(adt, &free_adt_iteratively);
  return adt;
}

}  // namespace detail

/*!
 * \brief A tuple (tag 0) or constructor value, made in a block from the thread's cache.
 *
 * The layout is TVM's own (ADTObj followed by its fields), so every TVM client reads it as a
 * runtime.ADT; only allocation and deletion differ. Fields are forwarded: a moved local is
 * handed over without a reference-count increment.
 */
template <typename... Fields>
inline ADT make_adt(int32_t tag, Fields&&... fields) {
  ADTObj* adt = detail::new_adt(tag, sizeof...(Fields));
  ObjectRef* slots = detail::adt_fields(adt);
  ((new (slots + adt->size) ObjectRef(std::forward<Fields>(fields)), ++adt->size), ...);
  return own<ADT>(adt);
}

/*!
 * \brief A tuple or constructor value whose number of fields is known only at run time (the
 *        values relay_aot builds from Python, see relay_aot/runtime/_fastcall.cc).
 */
inline ADT make_adt_of(int32_t tag, std::vector<ObjectRef> fields) {
  ADTObj* adt = detail::new_adt(tag, fields.size());
  ObjectRef* slots = detail::adt_fields(adt);
  for (ObjectRef& field : fields) {
    new (slots + adt->size) ObjectRef(std::move(field));
    ++adt->size;
  }
  return own<ADT>(adt);
}

}  // namespace relay_aot

#endif  // RELAY_AOT_MEMORY_H_
