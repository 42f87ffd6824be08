#include "dstrain/engine/host_policy.hpp"

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <malloc.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <string>

#include "dstrain/runtime/rank_env.hpp"
#include "huge_page_allocator.hpp"

namespace ds {
namespace {

// glibc refuses a larger mmap threshold (HEAP_MAX_SIZE / 2 on 64-bit).
constexpr int kMmapThreshold = 32 << 20;
constexpr int kTrimThreshold = 1 << 30;

int cores_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
}

void set_blas_threads(int threads) {
  // LibTorch's set_num_threads reaches OpenMP and MKL; Debian's OpenBLAS runs its own pthreads.
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

HostPolicy apply() {
  HostPolicy policy;
  if (const char* omp = std::getenv("OMP_NUM_THREADS"); omp && std::atoi(omp) > 0) {
    policy.threads = std::atoi(omp);
    policy.threads_reason = "OMP_NUM_THREADS";
  } else {
    const int cores = cores_available();
    const long online = std::max(1L, sysconf(_SC_NPROCESSORS_ONLN));
    const int local = std::max(1, rank_env_from_environment().local_size);
    if (cores < online) {
      policy.threads = cores;
      policy.threads_reason = std::to_string(cores) + " cores this rank is bound to";
    } else {
      policy.threads = std::max(1, cores / local);
      policy.threads_reason = std::to_string(cores) + " cores / " + std::to_string(local) + " ranks on this node";
    }
  }
  at::set_num_threads(policy.threads);
  set_blas_threads(policy.threads);

  const char* tunables = std::getenv("GLIBC_TUNABLES");
  if (!tunables || std::string(tunables).find("glibc.malloc.") == std::string::npos)
    policy.malloc_tuned =
        mallopt(M_MMAP_THRESHOLD, kMmapThreshold) == 1 && mallopt(M_TRIM_THRESHOLD, kTrimThreshold) == 1;
  policy.huge_pages = install_huge_page_allocator();
  return policy;
}

}  // namespace

const HostPolicy& apply_host_policy() {
  static const HostPolicy policy = apply();
  return policy;
}

std::string describe(const HostPolicy& policy) {
  return "threads " + std::to_string(policy.threads) + " (" + policy.threads_reason + "), malloc " +
         (policy.malloc_tuned ? "keeps freed memory for reuse" : "as GLIBC_TUNABLES sets it") +
         (policy.huge_pages ? ", tensors of 2 MiB and more in huge pages" : "");
}

}  // namespace ds
