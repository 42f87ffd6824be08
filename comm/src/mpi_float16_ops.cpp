#include "mpi_float16_ops.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

namespace ds::comm {
namespace {

struct Add { float operator()(float a, float b) const { return a + b; } };
struct Maximum { float operator()(float a, float b) const { return std::max(a, b); } };
struct Minimum { float operator()(float a, float b) const { return std::min(a, b); } };

// An MPI_User_function: inout[i] = combine(in[i], inout[i]).
template <class T, class Combine>
void combine(void* in, void* inout, int* len, MPI_Datatype*) {
  const T* a = static_cast<const T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) b[i] = T(Combine()(float(a[i]), float(b[i])));
}

template <class T>
Float16Ops create_for() {
  Float16Ops ops{};
  MPI_Op_create(&combine<T, Add>, /*commute=*/1, &ops[kFloat16Sum]);
  MPI_Op_create(&combine<T, Maximum>, 1, &ops[kFloat16Max]);
  MPI_Op_create(&combine<T, Minimum>, 1, &ops[kFloat16Min]);
  return ops;
}

}  // namespace

Float16Ops create_bfloat16_ops() { return create_for<c10::BFloat16>(); }
Float16Ops create_float16_ops() { return create_for<c10::Half>(); }

void free_float16_ops(Float16Ops& ops) {
  for (MPI_Op& op : ops) MPI_Op_free(&op);
}

}  // namespace ds::comm
