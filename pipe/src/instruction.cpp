#include "dstrain/pipe/instruction.hpp"

#include <ostream>

namespace ds::pipe {

std::string to_string(Op op) {
  switch (op) {
    case Op::LoadMicroBatch: return "LoadMicroBatch";
    case Op::ForwardPass: return "ForwardPass";
    case Op::BackwardPass: return "BackwardPass";
    case Op::SendActivation: return "SendActivation";
    case Op::RecvActivation: return "RecvActivation";
    case Op::SendGrad: return "SendGrad";
    case Op::RecvGrad: return "RecvGrad";
    case Op::ReduceTiedGrads: return "ReduceTiedGrads";
    case Op::ReduceGrads: return "ReduceGrads";
    case Op::OptimizerStep: return "OptimizerStep";
  }
  return "Op(" + std::to_string(static_cast<int>(op)) + ")";
}

bool is_buffer_op(Op op) {
  return op != Op::ReduceTiedGrads && op != Op::ReduceGrads && op != Op::OptimizerStep;
}

bool operator==(const Instruction& a, const Instruction& b) {
  return a.op == b.op && a.buffer_id == b.buffer_id;
}

bool operator!=(const Instruction& a, const Instruction& b) { return !(a == b); }

std::string to_string(const Instruction& instruction) {
  std::string args = is_buffer_op(instruction.op) ? "buffer_id=" + std::to_string(instruction.buffer_id) : "";
  return to_string(instruction.op) + "(" + args + ")";
}

std::ostream& operator<<(std::ostream& out, const Instruction& instruction) {
  return out << to_string(instruction);
}

}  // namespace ds::pipe
