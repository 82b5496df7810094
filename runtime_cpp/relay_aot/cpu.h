/*!
 * \file relay_aot/cpu.h
 * \brief The CPU a library's kernels were compiled for, checked against the CPU that runs them.
 *
 * TVM compiles kernels for the target's CPU (`llvm -mcpu=... -mattr=...`): on a CPU without one
 * of its instruction sets, the first kernel call would die of SIGILL. Every library records the
 * LLVM names of the features its target enables that a CPU may lack (`avx2`, `avx512f`, ...);
 * the entries (`packed_entry`, the C API's `run`) call `require_cpu` before any generated code
 * runs, which raises `CpuFeatureError` naming the missing ones instead.
 *
 * Detection follows LLVM's `sys::getHostCPUFeatures` (the `cpuid` bits, and the registers the
 * OS saves, from `xgetbv`), so a library built for the host (relay_aot's default target) passes
 * on the machine that built it; tests/test_target.py compares the two on every feature.
 *
 * All C++ of a library, this included, is compiled for the architecture's baseline (no
 * `-march`): only the kernels use the target's instructions, and the check runs before them.
 */
#ifndef RELAY_AOT_CPU_H_
#define RELAY_AOT_CPU_H_

#include <atomic>
#include <string>
#include <utility>
#include <vector>

namespace relay_aot {

/*! \brief What a library's kernels need of the CPU (generated: one per library, in entry.cc). */
struct CpuRequirement {
  const char* target;             //!< the TVM target the kernels were compiled for
  const char* const* features;    //!< LLVM names of the CPU features that target enables
  int count;                      //!< number of \p features
  mutable std::atomic<int> ok;    //!< 1 once this CPU was found to have them all
};

/*! \brief The LLVM feature names this runtime detects, each with whether this CPU has it. */
std::vector<std::pair<std::string, bool>> cpu_features();

/*!
 * \brief Why code compiled for \p target, using \p features, cannot run on this CPU: the
 *        message naming the missing features, or "" when it can. A name this runtime does not
 *        know counts as missing (it cannot be checked).
 */
std::string cpu_mismatch(const char* target, const char* const* features, int count);

/*! \brief Raise CpuFeatureError with cpu_mismatch's message (never returns when it is not ""). */
void check_cpu(const CpuRequirement& cpu);

/*! \brief Raise CpuFeatureError unless this CPU has what \p cpu needs (checked once, then a load). */
inline void require_cpu(const CpuRequirement& cpu) {
  if (cpu.ok.load(std::memory_order_acquire) != 1) check_cpu(cpu);
}

}  // namespace relay_aot

#endif  // RELAY_AOT_CPU_H_
