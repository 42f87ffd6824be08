#include "pipeline_simulator.hpp"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>

namespace pipe_test {

using ds::pipe::Instruction;
using ds::pipe::Op;
using ds::pipe::Step;

namespace {

// What one pipeline buffer holds: the input of one micro-batch (loaded or received), then its
// output, then the gradient that comes back for it.
struct Slot {
  int micro_batch = -1;  // -1: never used
  bool forwarded = false;
  bool activation_sent = false;
  bool grad_received = false;
  bool backwarded = false;
  bool grad_sent = false;
};

class Simulation {
 public:
  Simulation(const std::vector<std::vector<Step>>& streams, int micro_batches, Mode mode)
      : streams_(streams), micro_batches_(micro_batches), mode_(mode), stages_(static_cast<int>(streams.size())),
        slots_(stages_), labels_(stages_), records_(stages_) {
    for (StageRecord& record : records_) {
      record.forward_steps.resize(micro_batches);
      record.backward_steps.resize(micro_batches);
    }
  }

  std::vector<StageRecord> run() {
    const size_t num_steps = streams_.front().size();
    for (int stage = 0; stage < stages_; ++stage) {
      if (streams_[stage].size() != num_steps) {
        throw std::logic_error("stage " + std::to_string(stage) + " has " + std::to_string(streams_[stage].size()) +
                               " steps, stage 0 has " + std::to_string(num_steps));
      }
    }
    for (step_ = 0; step_ < static_cast<int>(num_steps); ++step_) run_step();
    return records_;
  }

 private:
  const Step& step_of(int stage) const { return streams_[stage][step_]; }

  // Runs every stage's instructions of the current step until all are done; an exchange waits
  // until both sides have reached it. No progress with work left is a deadlock.
  void run_step() {
    std::vector<size_t> next(stages_, 0);
    bool progress = true;
    while (progress) {
      progress = false;
      for (int stage = 0; stage < stages_; ++stage) {
        while (next[stage] < step_of(stage).size()) {
          const Instruction& instruction = step_of(stage)[next[stage]];
          if (!is_exchange(instruction.op)) {
            execute_local(stage, instruction);
            ++next[stage];
            progress = true;
            continue;
          }
          const int partner = stage + (instruction.op == Op::SendActivation || instruction.op == Op::RecvGrad ? 1 : -1);
          if (partner < 0 || partner >= stages_) fail(stage, instruction, "no neighbour to exchange with");
          if (next[partner] >= step_of(partner).size()) break;
          const Instruction& other = step_of(partner)[next[partner]];
          if (other.op != counterpart(instruction.op)) break;
          const bool sends = instruction.op == Op::SendActivation || instruction.op == Op::SendGrad;
          if (sends) {
            receive(partner, other, send(stage, instruction));
          } else {
            receive(stage, instruction, send(partner, other));
          }
          ++next[stage];
          ++next[partner];
          progress = true;
        }
      }
    }
    for (int stage = 0; stage < stages_; ++stage) {
      if (next[stage] < step_of(stage).size()) {
        fail(stage, step_of(stage)[next[stage]], "deadlock: the neighbour never reaches the matching exchange");
      }
    }
  }

  static bool is_exchange(Op op) {
    return op == Op::SendActivation || op == Op::RecvActivation || op == Op::SendGrad || op == Op::RecvGrad;
  }

  static Op counterpart(Op op) {
    switch (op) {
      case Op::SendActivation: return Op::RecvActivation;
      case Op::RecvActivation: return Op::SendActivation;
      case Op::SendGrad: return Op::RecvGrad;
      default: return Op::SendGrad;
    }
  }

  bool is_first(int stage) const { return stage == 0; }
  bool is_last(int stage) const { return stage == stages_ - 1; }

  // A buffer may take a new micro-batch once nothing more will be read from it: in training after
  // the backward pass and the gradient's send, in inference after the forward pass and the send.
  bool released(int stage, const Slot& slot) const {
    if (slot.micro_batch < 0) return true;
    if (mode_ == Mode::Training) return slot.backwarded && (is_first(stage) || slot.grad_sent);
    return slot.forwarded && (is_last(stage) || slot.activation_sent);
  }

  void occupy(int stage, const Instruction& instruction, int micro_batch) {
    Slot& slot = slots_[stage][instruction.buffer_id];
    if (!released(stage, slot)) {
      fail(stage, instruction, "overwrites micro-batch " + std::to_string(slot.micro_batch) + " before it is done");
    }
    slot = Slot{micro_batch};
    update_in_flight(stage);
  }

  Slot& held(int stage, const Instruction& instruction) {
    auto it = slots_[stage].find(instruction.buffer_id);
    if (it == slots_[stage].end() || released(stage, it->second)) fail(stage, instruction, "buffer holds nothing");
    return it->second;
  }

  void execute_local(int stage, const Instruction& instruction) {
    StageRecord& record = records_[stage];
    switch (instruction.op) {
      case Op::LoadMicroBatch: {
        if (!is_first(stage) && !is_last(stage)) fail(stage, instruction, "a middle stage loads data");
        if (std::max(record.inputs_loaded, record.labels_loaded) == micro_batches_) {
          fail(stage, instruction, "loads more than " + std::to_string(micro_batches_) + " micro-batches");
        }
        if (is_first(stage)) occupy(stage, instruction, record.inputs_loaded++);
        if (is_last(stage)) {
          if (labels_[stage].count(instruction.buffer_id)) fail(stage, instruction, "overwrites unused labels");
          labels_[stage][instruction.buffer_id] = record.labels_loaded++;
        }
        return;
      }
      case Op::ForwardPass: {
        Slot& slot = held(stage, instruction);
        if (slot.forwarded) fail(stage, instruction, "forwards a buffer twice");
        if (is_last(stage)) {
          auto label = labels_[stage].find(instruction.buffer_id);
          if (label == labels_[stage].end() || label->second != slot.micro_batch) {
            fail(stage, instruction, "the labels in this buffer are not micro-batch " + std::to_string(slot.micro_batch) + "'s");
          }
          labels_[stage].erase(label);
        }
        slot.forwarded = true;
        record.forward_steps.at(slot.micro_batch).push_back(step_);
        update_in_flight(stage);
        return;
      }
      case Op::BackwardPass: {
        if (mode_ == Mode::Inference) fail(stage, instruction, "backward in an inference schedule");
        Slot& slot = held(stage, instruction);
        if (!slot.forwarded || slot.backwarded) fail(stage, instruction, "backward without a forward, or twice");
        if (!is_last(stage) && !slot.grad_received) fail(stage, instruction, "backward before the gradient arrived");
        slot.backwarded = true;
        record.backward_steps.at(slot.micro_batch).push_back(step_);
        update_in_flight(stage);
        return;
      }
      default: {  // ReduceTiedGrads, ReduceGrads, OptimizerStep
        if (mode_ == Mode::Inference) fail(stage, instruction, "model update in an inference schedule");
        for (int micro_batch = 0; micro_batch < micro_batches_; ++micro_batch) {
          if (record.backward_steps[micro_batch].empty()) {
            fail(stage, instruction, "before the backward of micro-batch " + std::to_string(micro_batch));
          }
        }
        record.model_ops.push_back({step_, instruction.op});
        return;
      }
    }
  }

  // Returns the micro-batch whose activation or gradient leaves.
  int send(int stage, const Instruction& instruction) {
    Slot& slot = held(stage, instruction);
    if (instruction.op == Op::SendActivation) {
      if (!slot.forwarded || slot.activation_sent) fail(stage, instruction, "sends an activation not computed, or twice");
      slot.activation_sent = true;
      ++records_[stage].activations_sent;
    } else {
      if (!slot.backwarded || slot.grad_sent) fail(stage, instruction, "sends a gradient not computed, or twice");
      slot.grad_sent = true;
      ++records_[stage].grads_sent;
    }
    update_in_flight(stage);
    return slot.micro_batch;
  }

  void receive(int stage, const Instruction& instruction, int micro_batch) {
    if (instruction.op == Op::RecvActivation) {
      occupy(stage, instruction, micro_batch);
      ++records_[stage].activations_received;
      return;
    }
    Slot& slot = held(stage, instruction);
    if (slot.micro_batch != micro_batch || !slot.activation_sent || slot.grad_received) {
      fail(stage, instruction, "gradient of micro-batch " + std::to_string(micro_batch) +
                                   " arrives in the buffer of micro-batch " + std::to_string(slot.micro_batch));
    }
    slot.grad_received = true;
    ++records_[stage].grads_received;
  }

  void update_in_flight(int stage) {
    int in_flight = 0;
    for (const auto& entry : slots_[stage]) in_flight += released(stage, entry.second) ? 0 : 1;
    records_[stage].peak_in_flight = std::max(records_[stage].peak_in_flight, in_flight);
  }

  [[noreturn]] void fail(int stage, const Instruction& instruction, const std::string& why) const {
    std::ostringstream out;
    out << "stage " << stage << ", step " << step_ << ", " << instruction << ": " << why;
    throw std::logic_error(out.str());
  }

  const std::vector<std::vector<Step>>& streams_;
  const int micro_batches_;
  const Mode mode_;
  const int stages_;
  std::vector<std::map<int, Slot>> slots_;   // per stage, by buffer id
  std::vector<std::map<int, int>> labels_;   // per stage, buffer id -> micro-batch of its labels
  std::vector<StageRecord> records_;
  int step_ = 0;
};

}  // namespace

std::vector<StageRecord> simulate_pipeline(const std::vector<std::vector<Step>>& streams, int micro_batches,
                                           Mode mode) {
  return Simulation(streams, micro_batches, mode).run();
}

}  // namespace pipe_test
