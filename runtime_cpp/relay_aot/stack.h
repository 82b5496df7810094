/*!
 * \file relay_aot/stack.h
 * \brief Deep recursion: grow the C++ stack in segments instead of overflowing it.
 *
 * Relay programs recurse over data (a list of 200,000 elements is summed by 200,000 nested
 * calls), far deeper than a thread's stack allows (8 MiB; a Python thread may have less).
 * Every generated function that calls another starts with `if (stack_low()) return
 * on_new_stack(...)`: when the
 * current stack has less than a safety margin left, the call continues on a fresh segment
 * (an mmap'ed region, committed page by page as it is touched) via ucontext, and the segment is
 * released when the call returns. The check is one load and one comparison (see safe_range).
 *
 * The total size of all segments of a thread is bounded (RELAY_AOT_MAX_STACK_MB, default
 * 4096): deeper recursion raises RecursionDepthError instead of crashing. Exceptions thrown on a
 * segment are caught there and rethrown on the caller's stack.
 */
#ifndef RELAY_AOT_STACK_H_
#define RELAY_AOT_STACK_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace relay_aot {

/*! \brief Room left on a stack below which calls move to a new segment. */
constexpr size_t kStackMargin = size_t(1) << 20;
/*! \brief Size of one stack segment (virtual; pages are committed when touched). */
constexpr size_t kSegmentSize = size_t(256) << 20;

/*! \brief Per-thread stack bookkeeping. */
struct StackState {
  char* limit = nullptr;   //!< below this address, the current stack is too full
  size_t segment_bytes = 0;  //!< bytes of segments in use by this thread
  void* pending = nullptr;   //!< the call a new segment is about to run
};

inline StackState& stack_state() {
  static thread_local StackState state;
  return state;
}

/*! \brief The most stack (all segments of one thread) a program may use, in bytes
 *         (RELAY_AOT_MAX_STACK_MB, read once). */
size_t max_segment_bytes();

namespace detail {

constexpr int kPageBits = 12;
constexpr int kLengthBits = 28;  // up to 1 TiB of stack

/*!
 * \brief The range [limit, top) of one thread's own stack, packed in one word (the limit's page
 *        number, then the length in pages; 0: none), read without synchronisation.
 *
 * A frame inside it is on that thread's stack above its limit, whichever thread asks (thread
 * stacks do not overlap), so most checks are a load and a comparison: no thread-local access,
 * which in a shared library is a call through a TLS descriptor and costs as much as a small
 * function's body. The first thread to check owns it until it exits (then another may take
 * it); other threads, and calls on segments, take the thread-local path.
 */
inline std::atomic<uint64_t> safe_range{0};

inline uint64_t pack_range(uintptr_t limit, uintptr_t top) {
  uint64_t pages = (top - limit) >> kPageBits;
  if (pages >= (uint64_t(1) << kLengthBits)) return 0;
  return (static_cast<uint64_t>(limit >> kPageBits) << kLengthBits) | pages;
}

/*! \brief Whether \p frame is inside the packed range \p range. */
inline bool in_range(uintptr_t frame, uint64_t range) {
  uintptr_t low = static_cast<uintptr_t>(range >> kLengthBits) << kPageBits;
  uintptr_t length = static_cast<uintptr_t>(range & ((uint64_t(1) << kLengthBits) - 1)) << kPageBits;
  return frame - low < length;
}

}  // namespace detail

/*! \brief Find the lowest usable address of the calling thread's own stack (and its range). */
char* thread_stack_limit(uint64_t* range);

namespace detail {

/*! \brief stack_low's thread-local path, out of line: not on the stack safe_range describes. */
bool stack_low_slow(uintptr_t frame);

}  // namespace detail

/*!
 * \brief Whether the current function should continue on a new stack segment.
 *
 * Every call of generated code runs this: on the stack of the thread that owns safe_range it is
 * one load and one comparison; elsewhere, one thread-local load and one comparison more.
 */
inline bool stack_low() {
  uintptr_t frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  return !detail::in_range(frame, detail::safe_range.load(std::memory_order_relaxed)) && detail::stack_low_slow(frame);
}

namespace detail {

/*!
 * \brief Call \p run(\p frame) on a fresh stack segment; rethrow here what it throws.
 *
 * Out of line, so that each generated function's on_new_stack is a few instructions: the
 * segment's mapping and context switch are the same for all of them.
 */
void run_on_segment(void (*run)(void*), void* frame);

}  // namespace detail

/*!
 * \brief Run \p body on a fresh stack segment and return its result (or rethrow its exception).
 *
 * Instantiated once per generated function that calls others, so it is kept small to compile:
 * every result type of generated code (an object reference or a native scalar) has a default
 * value that the result overwrites, so no std::optional is needed.
 */
template <typename F>
auto on_new_stack(F&& body) -> decltype(body()) {
  using Body = std::remove_reference_t<F>;
  using Result = decltype(body());
  struct Frame {
    Body* body;
    Result result;
  } frame{&body, Result()};
  detail::run_on_segment([](void* p) {
    auto* f = static_cast<Frame*>(p);
    f->result = (*f->body)();
  }, &frame);
  return std::move(frame.result);
}

}  // namespace relay_aot

#endif  // RELAY_AOT_STACK_H_
