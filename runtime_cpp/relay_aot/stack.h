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
 * released when the call returns. The check is one thread-local load and one comparison.
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

/*! \brief Find the lowest usable address of the calling thread's own stack. */
inline char* thread_stack_limit() {
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
    return reinterpret_cast<char*>(UINTPTR_MAX);
  }
  return static_cast<char*>(base) + kStackMargin;
}

namespace detail {

/*! \brief stack_low's rare case, out of line: the thread's first check, or a stack really low. */
[[gnu::noinline]] inline bool stack_low_slow(uintptr_t frame) {
  StackState& state = stack_state();
  if (state.limit == nullptr) state.limit = thread_stack_limit();
  return frame < reinterpret_cast<uintptr_t>(state.limit);
}

}  // namespace detail

/*!
 * \brief Whether the current function should continue on a new stack segment.
 *
 * Every call of generated code runs this, so it is one thread-local load and one comparison:
 * subtracting one makes a limit not known yet (null) the largest address, so "not known yet"
 * and "below the limit" both take the out-of-line path (fib(20): two thread-local accesses per
 * call cost as much as the rest of the call).
 */
inline bool stack_low() {
  uintptr_t frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  uintptr_t limit = reinterpret_cast<uintptr_t>(stack_state().limit);
  return frame - 1 < limit - 1 && detail::stack_low_slow(frame);
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
