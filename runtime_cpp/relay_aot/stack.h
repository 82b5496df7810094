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

#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <optional>
#include <string>
#include <utility>

#include "errors.h"

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

/*! \brief The most stack (all segments of one thread) a program may use, in bytes. */
inline size_t max_segment_bytes() {
  static const size_t limit = [] {
    const char* env = std::getenv("RELAY_AOT_MAX_STACK_MB");
    long long mb = env != nullptr ? std::atoll(env) : 4096;
    return static_cast<size_t>(mb > 0 ? mb : 4096) << 20;
  }();
  return limit;
}

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

/*! \brief Gives up the thread's claim on safe_range when it exits (before its stack is freed). */
struct RangeOwner {
  uint64_t range = 0;
  ~RangeOwner() {
    uint64_t expected = range;
    if (expected != 0) safe_range.compare_exchange_strong(expected, 0);
  }
};

}  // namespace detail

/*! \brief Find the lowest usable address of the calling thread's own stack (and its range). */
inline char* thread_stack_limit(uint64_t* range) {
  pthread_attr_t attr;
  void* base = nullptr;
  size_t size = 0;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    pthread_attr_getstack(&attr, &base, &size);
    pthread_attr_destroy(&attr);
  }
  if (base == nullptr || size < 4 * kStackMargin) {
    // Unknown bounds, or a small stack (threads may have 256 KiB): run every call of generated
    // code on a segment of its own, where the bounds are known.
    *range = 0;
    return reinterpret_cast<char*>(UINTPTR_MAX);
  }
  char* limit = static_cast<char*>(base) + kStackMargin;
  *range = detail::pack_range(reinterpret_cast<uintptr_t>(limit), reinterpret_cast<uintptr_t>(base) + size);
  return limit;
}

namespace detail {

/*! \brief stack_low's thread-local path, out of line: not on the stack safe_range describes. */
[[gnu::noinline]] inline bool stack_low_slow(uintptr_t frame) {
  StackState& state = stack_state();
  if (state.limit == nullptr) {
    uint64_t range = 0;
    state.limit = thread_stack_limit(&range);
    uint64_t none = 0;
    if (range != 0 && safe_range.load(std::memory_order_relaxed) == 0 && safe_range.compare_exchange_strong(none, range)) {
      static thread_local RangeOwner owner;
      owner.range = range;
    }
  }
  return frame < reinterpret_cast<uintptr_t>(state.limit);
}

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

/*! \brief A call to run on a new segment, with room for its result or exception. */
template <typename F>
struct SegmentCall {
  F* body;
  std::optional<decltype(std::declval<F&>()())> result;
  std::exception_ptr error;
  ucontext_t caller;
  ucontext_t callee;

  static void Run() {
    auto* self = static_cast<SegmentCall*>(stack_state().pending);
    try {
      self->result.emplace((*self->body)());
    } catch (...) {
      self->error = std::current_exception();
    }
    // Returning resumes `caller` through uc_link.
  }
};

}  // namespace detail

/*! \brief Run \p body on a fresh stack segment and return its result (or rethrow its exception). */
template <typename F>
auto on_new_stack(F&& body) -> decltype(body()) {
  StackState& state = stack_state();
  if (state.segment_bytes + kSegmentSize > max_segment_bytes()) {
    throw Error("RecursionDepthError",
                "the program recursed deeper than relay_aot's limit of " +
                    std::to_string(max_segment_bytes() >> 20) +
                    " MiB of stack (set RELAY_AOT_MAX_STACK_MB to change it)");
  }
  void* memory = mmap(nullptr, kSegmentSize, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_STACK, -1, 0);
  if (memory == MAP_FAILED) {
    throw Error("RecursionDepthError", "could not map another stack segment for deep recursion");
  }
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  mprotect(memory, page, PROT_NONE);  // a guard page: overflow faults instead of corrupting

  using Body = std::remove_reference_t<F>;
  detail::SegmentCall<Body> call{&body, std::nullopt, nullptr, {}, {}};
  getcontext(&call.callee);
  call.callee.uc_stack.ss_sp = memory;
  call.callee.uc_stack.ss_size = kSegmentSize;
  call.callee.uc_link = &call.caller;
  makecontext(&call.callee, &detail::SegmentCall<Body>::Run, 0);

  char* saved_limit = state.limit;
  state.limit = static_cast<char*>(memory) + page + kStackMargin;
  state.segment_bytes += kSegmentSize;
  state.pending = &call;
  swapcontext(&call.caller, &call.callee);
  state.limit = saved_limit;
  state.segment_bytes -= kSegmentSize;
  munmap(memory, kSegmentSize);

  if (call.error) std::rethrow_exception(call.error);
  return std::move(*call.result);
}

}  // namespace relay_aot

#endif  // RELAY_AOT_STACK_H_
