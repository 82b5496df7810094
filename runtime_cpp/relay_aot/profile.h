/*!
 * \file relay_aot/profile.h
 * \brief Profiling: where a call of a compiled program spends its time.
 *
 * Only libraries built for profiling call anything here (`relay_aot.compile(..., profile=True)`,
 * `CompiledModule.profile`): their generated code opens a FunctionScope at the start of every
 * function, calls kernels through profiled_call_kernel, and counts what it allocates with
 * counted(). A plain library's generated code never names this header's functions, so its hot
 * paths are untouched (docs/performance.md, "Profiling your program").
 *
 * While a profile runs (start() to stop(), on one thread) the profiler keeps, per function, its
 * calls and its inclusive, exclusive (without the functions it calls) and self (without those
 * and without its kernels) time; per kernel, its calls and time; allocations by kind; and, up to
 * a cap, one trace event per function and kernel call, reserved when the call starts so that
 * the outermost calls are the ones kept. Aggregates take constant memory however deep the
 * program recurses. stop() returns everything as JSON text, which relay_aot/runtime/profiling.py
 * turns into TVM's profiling report and a Chrome trace. The Python backend drives the same
 * profiler through the _fastcall extension, so both backends aggregate alike.
 */
#ifndef RELAY_AOT_PROFILE_H_
#define RELAY_AOT_PROFILE_H_

#include <tvm/runtime/c_runtime_api.h>
#include <tvm/runtime/container/adt.h>
#include <tvm/runtime/container/string.h>
#include <tvm/runtime/ndarray.h>
#include <tvm/runtime/packed_func.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <string>
#include <vector>

#include "closure.h"
#include "entry.h"
#include "kernel.h"
#include "memory.h"
#include "ref.h"
#include "tensor.h"

namespace relay_aot {

/*! \brief Nanoseconds on the monotonic clock (the one Python's time.perf_counter_ns reads). */
inline int64_t profile_clock() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/*! \brief Kinds of allocation counted (the order of Profiler::allocations). */
enum class AllocKind : int { kTensor = 0, kAdt = 1, kClosure = 2, kRef = 3 };

/*! \brief The profile of the calls made on one thread between start() and stop(). */
class Profiler {
 public:
  /*! \brief Forget what was recorded; record calls of functions and kernels with these names. */
  void start(std::vector<std::string> functions, std::vector<std::string> kernels, int64_t max_events);

  bool active() const { return active_; }

  /*!
   * \brief Function \p id starts (called first thing in its body); whether it is recorded
   *        (then exit() must follow when it returns).
   */
  bool enter(int id) {
    if (!active_ || id < 0 || static_cast<size_t>(id) >= functions_.size()) return false;
    int64_t event = reserve_event(0, id);
    FunctionTotals& totals = functions_[id];
    ++totals.calls;
    ++totals.active;
    stack_.push_back(Frame{id, event, 0, 0, profile_clock()});
    return true;
  }

  /*!
   * \brief The innermost function recorded returns (or unwinds). Nothing happens when no profile
   *        runs, or when none did at its start (start() emptied the stack).
   */
  void exit() {
    if (!active_ || stack_.empty()) return;
    int64_t now = profile_clock();
    Frame frame = stack_.back();
    stack_.pop_back();
    int64_t duration = now - frame.start;
    FunctionTotals& totals = functions_[frame.id];
    totals.exclusive += duration - frame.callees;
    totals.self += duration - frame.callees - frame.kernels;
    // Only the outermost activation counts towards inclusive time: a recursive function's
    // nested calls are already inside it.
    if (--totals.active == 0) totals.inclusive += duration;
    finish_event(frame.event, frame.start, duration);
    if (stack_.empty()) {
      total_ += duration;
      ++top_calls_;
    } else {
      stack_.back().callees += duration;
    }
  }

  /*! \brief A call of kernel \p id that started at \p start (profile_clock()) just ended. */
  void kernel(int id, int64_t start) {
    if (!active_ || id < 0 || static_cast<size_t>(id) >= kernels_.size()) return;
    int64_t duration = profile_clock() - start;
    KernelTotals& totals = kernels_[id];
    ++totals.calls;
    totals.time += duration;
    if (!stack_.empty()) stack_.back().kernels += duration;
    finish_event(reserve_event(1, id), start, duration);
  }

  /*! \brief Count one allocation of \p bytes. */
  void allocation(AllocKind kind, int64_t bytes) {
    if (!active_) return;
    auto& a = allocations_[static_cast<int>(kind)];
    ++a.count;
    a.bytes += bytes;
  }

  /*! \brief Stop recording; everything recorded, as JSON (read by relay_aot/runtime/profiling.py). */
  std::string stop();

 private:
  struct FunctionTotals {
    uint64_t calls = 0;
    int64_t inclusive = 0;
    int64_t exclusive = 0;
    int64_t self = 0;
    uint64_t active = 0;  //!< activations on the stack now
  };
  struct KernelTotals {
    uint64_t calls = 0;
    int64_t time = 0;
  };
  struct Frame {
    int id;
    int64_t event;    //!< its trace event, or -1
    int64_t callees;  //!< time in the functions it called
    int64_t kernels;  //!< time in the kernels it called
    int64_t start;
  };
  struct Event {
    int kind;  //!< 0: function, 1: kernel
    int id;
    int64_t start;  //!< ns after start()
    int64_t duration;
  };
  struct Allocations {
    uint64_t count;
    int64_t bytes;
  };

  /*! \brief A trace event for a call starting now, or -1 past the cap (counted as dropped). */
  int64_t reserve_event(int kind, int id) {
    if (events_.size() >= max_events_) {
      if (max_events_ > 0) ++dropped_;
      return -1;
    }
    events_.push_back(Event{kind, id, 0, -1});
    return static_cast<int64_t>(events_.size()) - 1;
  }

  void finish_event(int64_t event, int64_t start, int64_t duration) {
    if (event < 0) return;
    events_[event].start = start - origin_;
    events_[event].duration = duration;
  }

  static std::string json_string(const std::string& text);

  bool active_ = false;
  std::vector<std::string> function_names_;
  std::vector<std::string> kernel_names_;
  std::vector<FunctionTotals> functions_;
  std::vector<KernelTotals> kernels_;
  Allocations allocations_[4] = {};
  std::vector<Frame> stack_;
  std::vector<Event> events_;
  size_t max_events_ = 0;
  uint64_t dropped_ = 0;
  int64_t total_ = 0;
  uint64_t top_calls_ = 0;
  int64_t origin_ = 0;
};

/*! \brief The calling thread's profiler. */
inline Profiler& profiler() {
  static thread_local Profiler instance;
  return instance;
}

/*! \brief Times one call of function \p id (generated code opens one at the start of each body). */
class FunctionScope {
 public:
  explicit FunctionScope(int id) : profiler_(profiler()), entered_(profiler_.enter(id)) {}
  ~FunctionScope() {
    if (entered_) profiler_.exit();
  }
  FunctionScope(const FunctionScope&) = delete;
  FunctionScope& operator=(const FunctionScope&) = delete;

 private:
  Profiler& profiler_;
  bool entered_;
};

/*! \brief call_kernel, timed as kernel \p id while a profile runs (a clock read costs tens of ns). */
template <typename... Tensors>
inline void profiled_call_kernel(int id, KernelFn fn, const char* name, Tensors... tensors) {
  Profiler& p = profiler();
  if (!p.active()) return call_kernel(fn, name, tensors...);
  int64_t start = profile_clock();
  call_kernel(fn, name, tensors...);
  p.kernel(id, start);
}

/*! \brief call_shape_function, timed as kernel \p id (the shape function's own entry). */
template <typename... Args>
inline void profiled_call_shape_function(int id, KernelFn fn, const char* name, std::initializer_list<DLTensor*> inputs,
                                         Args... args) {
  Profiler& p = profiler();
  if (!p.active()) return call_shape_function(fn, name, inputs, args...);
  int64_t start = profile_clock();
  call_shape_function(fn, name, inputs, args...);
  p.kernel(id, start);
}

/*! \brief A new tensor, counted (its block: header and data, as alloc_tensor allocates it). */
inline NDArray counted(NDArray tensor) {
  profiler().allocation(AllocKind::kTensor, static_cast<int64_t>(detail::block_capacity(
                                                 static_cast<const NDArray::Container*>(tensor.get()))));
  return tensor;
}

/*! \brief A new tuple or constructor value, counted. */
inline ADT counted(ADT adt) {
  profiler().allocation(AllocKind::kAdt,
                        static_cast<int64_t>(detail::rounded(sizeof(ADTObj) + adt.size() * sizeof(ObjectRef))));
  return adt;
}

/*! \brief A new reference cell, counted. */
inline Ref counted(Ref ref) {
  profiler().allocation(AllocKind::kRef, static_cast<int64_t>(sizeof(ArrayNode) + sizeof(ObjectRef)));
  return ref;
}

/*! \brief A new closure of generated class \p T, counted. */
template <typename T>
inline Closure counted_closure(Closure closure) {
  profiler().allocation(AllocKind::kClosure, static_cast<int64_t>(detail::rounded(sizeof(T))));
  return closure;
}

/*! \brief Function and kernel names of a profiled library (the order of their ids). */
struct ProfileNames {
  const char* const* functions;
  int num_functions;
  const char* const* kernels;
  int num_kernels;
};

/*!
 * \brief The exported `<model>__profile(command, max_events)`: command 1 starts a profile on the
 *        calling thread (keeping at most \p max_events trace events) and returns "", command 0
 *        stops it and returns what was recorded (JSON text).
 */
int packed_profile(TVMValue* args, int* type_codes, int num_args, TVMValue* ret, int* ret_type_code,
                   const ProfileNames& names);

}  // namespace relay_aot

#endif  // RELAY_AOT_PROFILE_H_
