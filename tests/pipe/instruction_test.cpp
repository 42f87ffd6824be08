#include <catch2/catch.hpp>

#include <sstream>

#include "dstrain/pipe/instruction.hpp"

using ds::pipe::Instruction;
using ds::pipe::Op;

TEST_CASE("Op names are DeepSpeed's instruction class names", "[pipe]") {
  CHECK(to_string(Op::LoadMicroBatch) == "LoadMicroBatch");
  CHECK(to_string(Op::ForwardPass) == "ForwardPass");
  CHECK(to_string(Op::BackwardPass) == "BackwardPass");
  CHECK(to_string(Op::SendActivation) == "SendActivation");
  CHECK(to_string(Op::RecvActivation) == "RecvActivation");
  CHECK(to_string(Op::SendGrad) == "SendGrad");
  CHECK(to_string(Op::RecvGrad) == "RecvGrad");
  CHECK(to_string(Op::ReduceTiedGrads) == "ReduceTiedGrads");
  CHECK(to_string(Op::ReduceGrads) == "ReduceGrads");
  CHECK(to_string(Op::OptimizerStep) == "OptimizerStep");
}

TEST_CASE("Buffer ops are DeepSpeed's BufferOpInstruction subclasses", "[pipe]") {
  for (Op op : {Op::LoadMicroBatch, Op::ForwardPass, Op::BackwardPass, Op::SendActivation, Op::RecvActivation,
                Op::SendGrad, Op::RecvGrad}) {
    CHECK(is_buffer_op(op));
  }
  for (Op op : {Op::ReduceTiedGrads, Op::ReduceGrads, Op::OptimizerStep}) CHECK_FALSE(is_buffer_op(op));
}

TEST_CASE("Instructions compare by op and buffer and print as DeepSpeed's repr", "[pipe]") {
  CHECK(Instruction{Op::ForwardPass, 1} == Instruction{Op::ForwardPass, 1});
  CHECK(Instruction{Op::ForwardPass, 1} != Instruction{Op::ForwardPass, 0});
  CHECK(Instruction{Op::ForwardPass, 1} != Instruction{Op::BackwardPass, 1});
  CHECK(Instruction{Op::ReduceGrads}.buffer_id == -1);

  std::ostringstream out;
  out << Instruction{Op::RecvGrad, 2} << " " << Instruction{Op::OptimizerStep};
  CHECK(out.str() == "RecvGrad(buffer_id=2) OptimizerStep()");
}
