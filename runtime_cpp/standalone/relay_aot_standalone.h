/*!
 * \file relay_aot_standalone.h
 * \brief The runtime of a relay_aot standalone package: freestanding C++, no heap, no TVM.
 *
 * Generated code of the standalone profile (relay_aot/backends/standalone) includes only this
 * header. It needs no library but libc's memory functions: no malloc, no operator new, no
 * exceptions or RTTI, no threads or thread-local storage, no stdio. Everything is inline, so
 * two packages linked into one program share these definitions harmlessly.
 *
 * Values: a tensor is a pointer to its data (its shape is known at compile time, or, in a
 * program with ? dimensions, stored just before its data: see alloc_tensor); a 0-d tensor
 * of a numeric dtype is a native scalar, boxed into one element only where a value must be a
 * pointer; a tuple or constructor value is a cell (slot 0 the tag, then the fields); a closure a
 * cell whose slot 0 is its entry function, then its captures; a reference a one-slot cell.
 * Every cell and tensor the program makes comes from the package's arena (State), a bump
 * allocator reset at the start of each run. Errors are a message in State::error: the
 * generated code checks it after every step that can fail and returns, up to the entry point.
 */
#ifndef RELAY_AOT_STANDALONE_H_
#define RELAY_AOT_STANDALONE_H_

#include <stdint.h>
#include <string.h>

#include <algorithm>  // std::max and std::min of native scalar code (kernels/scalar_ops.py)
#include <cmath>
#include <limits>
#include <type_traits>  // std::make_unsigned_t of native scalar code's left shifts

namespace relay_aot_standalone {

/*! \brief Any value that is not a native scalar: tensor data, a cell, a closure. */
typedef void* Value;

/*! \brief A closure's uniform entry: the closure itself and its boxed arguments. */
typedef Value (*Entry)(Value self, const Value* args);

/*! \brief The state of one package: its arena and its error (a plain static: no thread pointer). */
struct State {
  const char* error;    //!< why the current run failed (nullptr: it has not)
  uint8_t* arena;       //!< the arena's first byte (aligned)
  uint32_t arena_size;  //!< its size in bytes
  uint32_t used;        //!< bytes in use
  uint32_t peak;        //!< the most bytes in use during the current (or last) run
  const char* stack_floor;  //!< the lowest frame address a run may reach
  char* message;        //!< a buffer for messages with numbers in them
  uint32_t message_size;
  Value* free_lists;    //!< per size class, the released blocks of that size (a chain)
};

/*! \brief Converts to the value-initialised object of any type: `return fail(...)` from anywhere. */
struct Failure {
  template <typename T>
  operator T() const { return T(); }
};

/*! \brief Record \p why as the run's error (the first error wins) and unwind. */
inline Failure fail(State& s, const char* why) {
  if (!s.error) s.error = why;
  return Failure();
}

/*! \brief Append the decimal digits of \p value to \p out (at most \p room bytes left). */
inline char* append_number(char* out, char* end, uint32_t value) {
  char digits[10];
  int n = 0;
  do {
    digits[n++] = static_cast<char>('0' + value % 10);
    value /= 10;
  } while (value);
  while (n && out < end) *out++ = digits[--n];
  return out;
}

inline char* append_text(char* out, char* end, const char* text) {
  while (*text && out < end) *out++ = *text++;
  return out;
}

/*! \brief Fail with a message saying how many more bytes the arena needed for \p nbytes. */
inline Failure out_of_arena(State& s, uint32_t nbytes, uint32_t missing) {
  if (s.error) return Failure();
  if (!s.message || s.message_size < 2) return fail(s, "out of workspace");
  char* out = s.message;
  char* end = s.message + s.message_size - 1;
  out = append_text(out, end, "out of workspace: an allocation of ");
  out = append_number(out, end, nbytes);
  out = append_text(out, end, " bytes needs at least ");
  out = append_number(out, end, missing);
  out = append_text(out, end, " more than the ");
  out = append_number(out, end, s.arena_size);
  out = append_text(out, end, "-byte workspace (give the package a larger --workspace-size, or a larger buffer)");
  *out = 0;
  return fail(s, s.message);
}

/*! \brief \p nbytes from the arena, aligned to \p align (a power of two); nullptr, with nothing
 *         recorded, when the arena is out (or the run has failed). */
inline Value bump(State& s, uint32_t nbytes, uint32_t align) {
  if (s.error) return nullptr;
  uint32_t start = (s.used + align - 1) & ~(align - 1);
  if (start > s.arena_size || nbytes > s.arena_size - start) return nullptr;
  s.used = start + nbytes;
  if (s.used > s.peak) s.peak = s.used;
  return s.arena + start;
}

/*! \brief \p nbytes from the arena, aligned to \p align; nullptr when out, with an error
 *         saying how many more bytes were needed. */
inline Value arena_alloc(State& s, uint32_t nbytes, uint32_t align) {
  Value block = bump(s, nbytes, align);
  if (!block && !s.error) {
    uint32_t start = (s.used + align - 1) & ~(align - 1);
    uint32_t over = start > s.arena_size ? start - s.arena_size + nbytes : nbytes - (s.arena_size - start);
    return out_of_arena(s, nbytes, over);
  }
  return block;
}

/*! \brief A block of size class \p c (\p nbytes): a released one, or a new one from the arena.
 *
 * Tensors that only kernels read are released at their last use (the emitter knows which), so
 * a loop's temporaries reuse a few blocks instead of growing the arena at every iteration. */
inline Value take_block(State& s, uint32_t c, uint32_t nbytes, uint32_t align) {
  Value block = s.free_lists[c];
  if (block && !s.error) {
    s.free_lists[c] = *static_cast<Value*>(block);
    return block;
  }
  return arena_alloc(s, nbytes < sizeof(Value) ? static_cast<uint32_t>(sizeof(Value)) : nbytes, align);
}

/*! \brief Release a block of size class \p c for the next take_block of that class. */
inline void give_block(State& s, uint32_t c, Value block) {
  *static_cast<Value*>(block) = s.free_lists[c];
  s.free_lists[c] = block;
}

/*! \brief Release a kernel's workspace: kernels free theirs in the reverse order of allocation,
 *         and nothing else allocates while a kernel runs, so freeing rolls the arena back. */
inline void workspace_free(State& s, void* data) {
  uint8_t* p = static_cast<uint8_t*>(data);
  if (p >= s.arena && p < s.arena + s.used) s.used = static_cast<uint32_t>(p - s.arena);
}

// -- tensors of a program with ? shapes ---------------------------------------------------
//
// In a program with ? dimensions every tensor carries its extents: int32 words just before its
// data (the value is still the pointer to the data), in a header whose size is a multiple of
// the alignment. TVM's kernels over ? dimensions take their extents as int32 parameters.

/*! \brief Bytes of the extents header of a tensor of rank \p rank (0 for a 0-d tensor). */
constexpr uint32_t header_bytes(int rank, uint32_t align) {
  return rank == 0 ? 0u : (static_cast<uint32_t>(rank) * 4u + align - 1u) & ~(align - 1u);
}

/*! \brief Extent \p dim of tensor \p t of rank \p rank. */
inline int32_t extent(Value t, int rank, int dim) { return static_cast<const int32_t*>(t)[dim - rank]; }

/*! \brief The first byte of the block of tensor \p t (its header's start). */
inline Value block_of(Value t, int rank, uint32_t align) {
  return static_cast<uint8_t*>(t) - header_bytes(rank, align);
}

/*! \brief Tensor \p rank extents \p dims in the block \p block: its data pointer (nullptr stays). */
inline Value with_extents(Value block, const int32_t* dims, int rank, uint32_t align) {
  if (!block) return nullptr;
  uint8_t* data = static_cast<uint8_t*>(block) + header_bytes(rank, align);
  for (int i = 0; i < rank; ++i) reinterpret_cast<int32_t*>(data)[i - rank] = dims[i];
  return data;
}

/*! \brief A new tensor of \p nbytes of data and extents \p dims from the arena. */
inline Value alloc_tensor(State& s, const int32_t* dims, int rank, uint32_t nbytes, uint32_t align) {
  uint32_t head = header_bytes(rank, align);
  if (nbytes > 0xffffffffu - head) return out_of_arena(s, nbytes, nbytes - s.arena_size);
  return with_extents(arena_alloc(s, head + nbytes, align), dims, rank, align);
}

/*! \brief A new tensor of static shape \p D... and \p nbytes of data. */
template <int32_t... D>
inline Value alloc_static(State& s, uint32_t nbytes, uint32_t align) {
  const int32_t dims[] = {D..., 0};
  return alloc_tensor(s, dims, sizeof...(D), nbytes, align);
}

/*! \brief A released block of size class \p c (or a new one) as a tensor of static shape \p D.... */
template <int32_t... D>
inline Value take_static(State& s, uint32_t c, uint32_t nbytes, uint32_t align) {
  const int32_t dims[] = {D..., 0};
  const uint32_t head = header_bytes(sizeof...(D), align);
  return with_extents(take_block(s, c, head + nbytes, align), dims, sizeof...(D), align);
}

/*! \brief A copy of the caller's \p nbytes at \p data as a tensor of static shape \p D.... */
template <int32_t... D>
inline Value copy_static(State& s, const void* data, uint32_t nbytes, uint32_t align) {
  Value t = alloc_static<D...>(s, nbytes, align);
  if (t && nbytes) memcpy(t, data, nbytes);
  return t;
}

/*! \brief Fail with "<kernel>: <what>" (in the message buffer, when there is one). */
inline Failure shape_error(State& s, const char* kernel, const char* what) {
  if (s.error) return Failure();
  if (!s.message || s.message_size < 2) return fail(s, what);
  char* end = s.message + s.message_size - 1;
  char* out = append_text(s.message, end, kernel);
  out = append_text(out, end, ": ");
  out = append_text(out, end, what);
  *out = 0;
  return fail(s, s.message);
}

/*!
 * \brief A new tensor of the shape a shape function computed for \p kernel's output, checked
 *        before anything is allocated or read: no negative extent, none beyond 32 bits (TVM's
 *        kernels take int32 extents), each equal to \p expected's where the type is static
 *        (nullptr: none is), and no more bytes than 32 bits count; nullptr with the error set.
 */
inline Value alloc_computed(State& s, const char* kernel, const int64_t* dims, int rank, uint32_t element_bytes,
                            const int32_t* expected, uint32_t align) {
  if (s.error) return nullptr;
  int32_t narrow[8];
  if (rank > 8) return shape_error(s, kernel, "a computed shape has more than 8 dimensions");
  bool empty = false;
  for (int i = 0; i < rank; ++i) {
    if (dims[i] < 0) return shape_error(s, kernel, "a shape computed at run time has a negative extent");
    if (dims[i] > 0x7fffffff) return shape_error(s, kernel, "a shape computed at run time has an extent beyond 32 bits");
    if (expected && dims[i] != expected[i]) {
      return shape_error(s, kernel, "a shape computed at run time disagrees with the static type");
    }
    narrow[i] = static_cast<int32_t>(dims[i]);
    empty = empty || dims[i] == 0;
  }
  uint64_t nbytes = empty ? 0 : element_bytes;
  for (int i = 0; i < rank && nbytes; ++i) {
    nbytes *= static_cast<uint64_t>(dims[i]);  // at most 2^32 * 2^31: no wrap before the test
    if (nbytes > 0xffffffffu) return shape_error(s, kernel, "a tensor computed at run time has more than 2^32 bytes");
  }
  return alloc_tensor(s, narrow, rank, static_cast<uint32_t>(nbytes), align);
}

/*! \brief Whether tensor \p t of rank \p rank has elements (no extent is 0). */
inline bool has_elements(Value t, int rank) {
  for (int i = 0; i < rank; ++i) {
    if (extent(t, rank, i) == 0) return false;
  }
  return true;
}

// -- scalars -----------------------------------------------------------------------------

/*! \brief The value of a 0-d tensor (bool is one byte). */
template <typename T>
inline T unbox(Value v) {
  return *static_cast<const T*>(v);
}
template <>
inline bool unbox<bool>(Value v) {
  return *static_cast<const uint8_t*>(v) != 0;
}

/*! \brief A new 0-d tensor holding \p value (nullptr when the arena is out). */
template <typename T>
inline Value box(State& s, T value) {
  Value v = arena_alloc(s, sizeof(T), alignof(T) < 4 ? 4 : alignof(T));
  if (v) *static_cast<T*>(v) = value;
  return v;
}
template <>
inline Value box<bool>(State& s, bool value) {
  Value v = arena_alloc(s, 1, 4);
  if (v) *static_cast<uint8_t*>(v) = value ? 1 : 0;
  return v;
}

/*! \brief A 0-d bool tensor's truth. */
inline bool truthy(Value v) { return *static_cast<const uint8_t*>(v) != 0; }

/*! \brief Set by integer division by zero in native scalar code; read and cleared right after. */
inline bool& zero_division_flag() {
  static bool flag = false;  // constant-initialised: no guard, no thread-safe static
  return flag;
}

inline bool zero_division() {
  bool was = zero_division_flag();
  zero_division_flag() = false;
  return was;
}

/*! \brief Relay `divide` on integers: truncating, like C (and TVM's kernels). */
template <typename T>
inline T int_div(T a, T b) {
  if (b == 0) {
    zero_division_flag() = true;
    return T(0);
  }
  if (std::numeric_limits<T>::is_signed && b == static_cast<T>(-1)) return static_cast<T>(T(0) - a);
  return static_cast<T>(a / b);
}

/*! \brief Relay `mod` on integers: the remainder of truncating division. */
template <typename T>
inline T int_mod(T a, T b) {
  if (b == 0) {
    zero_division_flag() = true;
    return T(0);
  }
  if (std::numeric_limits<T>::is_signed && b == static_cast<T>(-1)) return T(0);
  return static_cast<T>(a % b);
}

/*! \brief Relay `floor_divide` on integers. */
template <typename T>
inline T int_floor_div(T a, T b) {
  T q = int_div(a, b);
  if (std::numeric_limits<T>::is_signed && b != 0) {
    if (static_cast<T>(a - static_cast<T>(q * b)) != 0 && ((a < 0) != (b < 0))) q = static_cast<T>(q - 1);
  }
  return q;
}

/*! \brief Relay `floor_mod` on integers (the sign follows the divisor). */
template <typename T>
inline T int_floor_mod(T a, T b) {
  T r = int_mod(a, b);
  if (std::numeric_limits<T>::is_signed) {
    if (r != 0 && ((r < 0) != (b < 0))) r = static_cast<T>(r + b);
  }
  return r;
}

// -- cells: tuples, constructor values, closures, references --------------------------------

/*! \brief A cell of slot 0 \p head and then \p fields (nullptr when the arena is out). */
template <typename... F>
inline Value make_cell(State& s, Value head, F... fields) {
  Value* cell = static_cast<Value*>(arena_alloc(s, sizeof(Value) * (1 + sizeof...(F)), alignof(Value)));
  if (!cell) return nullptr;
  Value init[] = {head, static_cast<Value>(fields)...};
  for (unsigned i = 0; i <= sizeof...(F); ++i) cell[i] = init[i];
  return cell;
}

/*! \brief A tuple (tag 0) or constructor value (its tag) of \p fields. */
template <typename... F>
inline Value make_adt(State& s, intptr_t tag, F... fields) {
  return make_cell(s, reinterpret_cast<Value>(tag), fields...);
}

/*! \brief The constructor tag of a cell. */
inline int32_t tag(Value cell) { return static_cast<int32_t>(reinterpret_cast<intptr_t>(static_cast<Value*>(cell)[0])); }

/*! \brief Field \p i of a tuple or constructor value (capture \p i of a closure). */
inline Value field(Value cell, int i) { return static_cast<Value*>(cell)[1 + i]; }

/*! \brief The unit tuple (shared: it has no fields to write). */
inline Value unit() {
  static Value cell[1] = {nullptr};
  return cell;
}

/*! \brief A closure of \p entry over \p captures. */
template <typename... F>
inline Value make_closure(State& s, Entry entry, F... captures) {
  return make_cell(s, reinterpret_cast<Value>(entry), captures...);
}

/*! \brief Apply a closure through its uniform entry. */
inline Value call_closure(Value closure, const Value* args) {
  return reinterpret_cast<Entry>(static_cast<Value*>(closure)[0])(closure, args);
}

inline Value ref_new(State& s, Value value) {
  Value* cell = static_cast<Value*>(arena_alloc(s, sizeof(Value), alignof(Value)));
  if (cell) cell[0] = value;
  return cell;
}
inline Value ref_read(Value ref) { return static_cast<Value*>(ref)[0]; }
inline void ref_write(Value ref, Value value) { static_cast<Value*>(ref)[0] = value; }

/*! \brief A constant array as a tensor value (kernels never write their inputs). */
template <typename T>
inline Value constant(const T* data) {
  return const_cast<T*>(data);
}

}  // namespace relay_aot_standalone

#endif  // RELAY_AOT_STANDALONE_H_
