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

#include <initializer_list>
#include <utility>
#include <vector>

namespace relay_aot {

using tvm::runtime::Object;
using tvm::runtime::SimpleObjAllocator;

/*! \brief Objects waiting to be freed by the deletion running on this thread. */
struct DeletionQueue {
  bool draining = false;
  std::vector<std::pair<Object*, Object::FDeleter>> pending;
};

inline DeletionQueue& deletion_queue() {
  static thread_local DeletionQueue queue;
  return queue;
}

/*! \brief Free \p obj with \p real_deleter, without nesting inside another such deletion. */
inline void release(Object* obj, Object::FDeleter real_deleter) {
  DeletionQueue& queue = deletion_queue();
  if (queue.draining) {
    queue.pending.emplace_back(obj, real_deleter);
    return;
  }
  queue.draining = true;
  real_deleter(obj);
  while (!queue.pending.empty()) {
    auto next = queue.pending.back();
    queue.pending.pop_back();
    next.second(next.first);
  }
  queue.draining = false;
}

/*! \brief The deleter installed on objects allocated through \p Handler. */
template <typename Handler>
void iterative_deleter(Object* obj) {
  release(obj, Handler::Deleter());
}

/*! \brief Replace an object's deleter (Object::deleter_ is protected; this reaches it legally). */
struct DeleterAccess : Object {
  static void Set(const Object* obj, Object::FDeleter deleter) {
    static_cast<DeleterAccess*>(const_cast<Object*>(obj))->deleter_ = deleter;
  }
};

/*! \brief A tuple (tag 0) or constructor value. */
inline ADT make_adt(int32_t tag, std::initializer_list<ObjectRef> fields) {
  ADT adt(tag, fields);
  DeleterAccess::Set(adt.get(), &iterative_deleter<SimpleObjAllocator::ArrayHandler<ADTObj, ObjectRef>>);
  return adt;
}

/*! \brief A new object of class \p T (a generated closure class). */
template <typename T, typename... Args>
inline tvm::runtime::ObjectPtr<T> make_iterative(Args&&... args) {
  auto ptr = tvm::runtime::make_object<T>(std::forward<Args>(args)...);
  DeleterAccess::Set(ptr.get(), &iterative_deleter<SimpleObjAllocator::Handler<T>>);
  return ptr;
}

}  // namespace relay_aot

#endif  // RELAY_AOT_MEMORY_H_
