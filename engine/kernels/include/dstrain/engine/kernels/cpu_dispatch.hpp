// Loops compiled twice, for AVX2 with FMA and for baseline x86-64, the better one picked once at
// load time: Debian's LibTorch and this project are built for baseline x86-64, where the compiler
// vectorizes a loop 4 floats wide at most.
//
//   DS_BODY void scale_range_body(float* x, int64_t n, float a) { for (...) x[i] *= a; }
//   DS_DISPATCH(scale_range, (float* x, int64_t n, float a), (x, n, a))   // defines scale_range()
#pragma once

#if defined(__GNUC__) && defined(__x86_64__)
#define DS_FAST_TARGET __attribute__((target("avx2,fma")))
#define DS_HAS_FAST_TARGET (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
#else
#define DS_FAST_TARGET
#define DS_HAS_FAST_TARGET false
#endif
#define DS_BODY inline __attribute__((always_inline))

// NAME(args) runs NAME_body(args) compiled for the best target this CPU has.
#define DS_DISPATCH(name, params, args)                                   \
  DS_FAST_TARGET auto name##_fast params { return name##_body args; }     \
  auto name##_baseline params { return name##_body args; }                \
  auto name params {                                                      \
    static const bool fast = DS_HAS_FAST_TARGET;                          \
    return fast ? name##_fast args : name##_baseline args;                \
  }
