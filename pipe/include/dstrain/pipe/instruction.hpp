// One instruction of a pipeline schedule: what a stage does next (load a micro-batch, compute,
// exchange with a neighbour, reduce gradients, step the optimizer) and, for the ops that touch a
// pipeline buffer, which one. Mirrors DeepSpeed's PipeInstruction classes.
#pragma once

#include <iosfwd>
#include <string>

namespace ds::pipe {

enum class Op {
  LoadMicroBatch,
  ForwardPass,
  BackwardPass,
  SendActivation,
  RecvActivation,
  SendGrad,
  RecvGrad,
  ReduceTiedGrads,
  ReduceGrads,
  OptimizerStep,
};

// The enumerator's name, which is also DeepSpeed's class name: "ForwardPass".
std::string to_string(Op op);

// True for the ops that act on a pipeline buffer (DeepSpeed's BufferOpInstruction family): loads,
// passes and point-to-point exchanges. The reductions and the optimizer step act on the model.
bool is_buffer_op(Op op);

struct Instruction {
  Op op;
  int buffer_id = -1;  // -1 exactly on the ops that are not buffer ops
};

bool operator==(const Instruction& a, const Instruction& b);
bool operator!=(const Instruction& a, const Instruction& b);

// DeepSpeed's repr: "ForwardPass(buffer_id=1)", "OptimizerStep()".
std::string to_string(const Instruction& instruction);
std::ostream& operator<<(std::ostream& out, const Instruction& instruction);

}  // namespace ds::pipe
