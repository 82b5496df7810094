/*!
 * \file relay_aot/ref.h
 * \brief Relay references (RefCreate, RefRead, RefWrite): a mutable cell holding one value.
 *
 * A cell is a one-element runtime.Array written in place. Using TVM's own container (rather
 * than a new object type) lets any TVM client -- Python included -- read a returned reference
 * with `ref[0]`, with no type registration and no extra exported functions.
 */
#ifndef RELAY_AOT_REF_H_
#define RELAY_AOT_REF_H_

#include <tvm/runtime/container/array.h>
#include <tvm/runtime/object.h>

#include <utility>
#include <vector>

#include "memory.h"

namespace relay_aot {

using tvm::runtime::ArrayNode;
using tvm::runtime::ObjectRef;

/*! \brief A Relay reference value: a one-element array whose element is its contents. */
class Ref : public ObjectRef {
 public:
  TVM_DEFINE_OBJECT_REF_METHODS(Ref, ObjectRef, ArrayNode);
};

namespace detail {

/*! \brief Frees \p cell's memory (TVM's allocator made it). */
inline void delete_cell(Object* cell) { SimpleObjAllocator::ArrayHandler<ArrayNode, ObjectRef>::Deleter()(cell); }

/*!
 * \brief Free reference cells of the calling thread, emptied, for the next `ref(value)`.
 *
 * A gradient program makes a cell for every intermediate value of every step and drops them
 * all when the call returns; allocating each from the heap (TVM's allocator) cost as much as
 * the cell's own work. A cell dies with its count at zero and its type and deleter set, so it
 * is reused as it is: only its element changes.
 */
struct CellCache {
  std::vector<ArrayNode*> cells;
  ~CellCache() {
    for (ArrayNode* cell : cells) delete_cell(cell);
  }
};

/*! \brief Cells kept per thread: a whole call's worth for the programs of the benchmarks. */
constexpr size_t kCachedCells = 4096;

inline CellCache& cell_cache() { return per_thread<CellCache>(); }

/*! \brief The one element of \p cell, writable (Array's copy-on-write and index check bypassed). */
inline ObjectRef& cell_element(const ArrayNode* cell) { return *const_cast<ObjectRef*>(cell->begin()); }

inline void recycle_cell(Object* obj) {
  auto* cell = static_cast<ArrayNode*>(obj);
  cell_element(cell) = ObjectRef();  // its contents die here (queued if this is a nested deletion)
  std::vector<ArrayNode*>& cells = cell_cache().cells;
  if (cells.size() < kCachedCells) {
    cells.push_back(cell);
    return;
  }
  delete_cell(obj);
}

inline void free_cell(Object* obj) { release(obj, &recycle_cell); }

}  // namespace detail

/*! \brief `ref(value)` */
inline Ref ref_new(ObjectRef value) {
  std::vector<ArrayNode*>& cells = detail::cell_cache().cells;
  if (!cells.empty()) {
    ArrayNode* cell = cells.back();
    cells.pop_back();
    detail::cell_element(cell) = std::move(value);
    return own<Ref>(cell);  // a cached cell died with its count at zero
  }
  auto cell = ArrayNode::CreateRepeated(1, ObjectRef());
  detail::cell_element(cell.get()) = std::move(value);
  ObjectAccess::Set(cell.get(), &detail::free_cell);
  return Ref(std::move(cell));
}

/*! \brief `!ref` */
inline ObjectRef ref_read(const Ref& ref) { return detail::cell_element(ref.get()); }

/*! \brief `ref := value` (cells are mutable by definition). */
inline void ref_write(const Ref& ref, ObjectRef value) { detail::cell_element(ref.get()) = std::move(value); }

}  // namespace relay_aot

#endif  // RELAY_AOT_REF_H_
