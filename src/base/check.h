// CACHET_CHECK: for invariants cachet itself guarantees. A failure is a bug in cachet, never bad input.
#pragma once

#include <cstdio>
#include <cstdlib>

#define CACHET_CHECK(cond)                                                                   \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond);          \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#define CACHET_CHECK_MSG(cond, ...)                                                          \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: CHECK failed: %s: ", __FILE__, __LINE__, #cond);          \
      std::fprintf(stderr, __VA_ARGS__);                                                     \
      std::fputc('\n', stderr);                                                              \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)
