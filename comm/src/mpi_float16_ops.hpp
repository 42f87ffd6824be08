// MPI reduction operators for bfloat16 and float16, which MPI has no types for: elements travel as
// 16-bit words and are combined as numbers (widened to float, combined, rounded back), never as bytes.
#pragma once

#include <mpi.h>

#include <array>

namespace ds::comm {

// Positions in the arrays below.
enum Float16OpIndex { kFloat16Sum = 0, kFloat16Max = 1, kFloat16Min = 2 };
using Float16Ops = std::array<MPI_Op, 3>;

Float16Ops create_bfloat16_ops();
Float16Ops create_float16_ops();
void free_float16_ops(Float16Ops& ops);

}  // namespace ds::comm
