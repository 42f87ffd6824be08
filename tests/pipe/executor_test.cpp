// The executor on toy stages (y = tanh(x * w) + x / 2, one weight vector per stage, mean squared
// error on the last) against the same chain computed whole on one process: every stage count that
// divides the world, several micro-batch counts, two batches (so the update is checked too).
#include <catch2/catch.hpp>

#include <torch/torch.h>

#include <set>
#include <string>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/pipe/executor.hpp"
#include "dstrain/pipe/grid.hpp"

namespace {

constexpr int kRows = 3;
constexpr int kWidth = 6;
constexpr double kLr = 0.1;

at::Tensor toy_input(int replica, int micro_batch) {
  return torch::sin(torch::arange(kRows * kWidth, torch::kDouble).view({kRows, kWidth}) * 0.7 + micro_batch +
                    10 * replica);
}

at::Tensor toy_label(int replica, int micro_batch) {
  return torch::cos(torch::arange(kRows * kWidth, torch::kDouble).view({kRows, kWidth}) * 0.3 + 2 * micro_batch +
                    replica);
}

at::Tensor initial_weight(int stage) { return 1 + 0.1 * torch::cos(torch::arange(kWidth, torch::kDouble) + stage); }

at::Tensor layer(const at::Tensor& x, const at::Tensor& w) { return torch::tanh(x * w) + 0.5 * x; }

at::Tensor mse(const at::Tensor& output, const at::Tensor& labels) { return (output - labels).pow(2).mean(); }

class ToyStage final : public ds::pipe::Stage {
 public:
  ToyStage(int stage, int replica, int micro_batches)
      : weight(initial_weight(stage).requires_grad_(true)), replica_(replica), micro_batches_(micro_batches) {}

  at::Tensor load_inputs(int micro_batch) override {
    events.push_back("inputs " + std::to_string(micro_batch));
    return toy_input(replica_, micro_batch);
  }
  at::Tensor load_labels(int micro_batch) override {
    events.push_back("labels " + std::to_string(micro_batch));
    return toy_label(replica_, micro_batch);
  }
  at::Tensor forward(const at::Tensor& input) override {
    events.push_back("forward");
    return layer(input, weight);
  }
  at::Tensor loss(const at::Tensor& output, const at::Tensor& labels) override { return mse(output, labels); }
  void backward(const at::Tensor& loss) override {
    events.push_back("backward");
    (loss / micro_batches_).backward();
  }
  void backward(const at::Tensor& output, const at::Tensor& output_grad) override {
    events.push_back("backward");
    torch::autograd::backward({output}, {output_grad});
  }
  void reduce_tied_grads() override { events.push_back("ReduceTiedGrads"); }
  void reduce_grads() override { events.push_back("ReduceGrads"); }
  void optimizer_step() override {
    events.push_back("OptimizerStep");
    torch::NoGradGuard no_grad;
    stepped_grad = weight.grad().clone();
    weight.sub_(kLr * weight.grad());
    weight.mutable_grad().zero_();
  }

  at::Tensor weight;
  at::Tensor stepped_grad;
  std::vector<std::string> events;

 private:
  int replica_;
  int micro_batches_;
};

// The whole chain on one process: the mean loss of a batch and every stage's gradient, then the
// same update the toy stages make.
struct Reference {
  explicit Reference(int stages) {
    for (int s = 0; s < stages; ++s) weights.push_back(initial_weight(s));
  }

  double train_batch(int replica, int micro_batches) {
    for (at::Tensor& w : weights) w = w.detach().requires_grad_(true);
    at::Tensor total = torch::zeros({}, torch::kDouble);
    double loss_sum = 0;
    for (int k = 0; k < micro_batches; ++k) {
      at::Tensor loss = mse(forward(toy_input(replica, k)), toy_label(replica, k));
      loss_sum += loss.item<double>();
      total = total + loss / micro_batches;
    }
    total.backward();
    grads.clear();
    for (at::Tensor& w : weights) {
      grads.push_back(w.grad().clone());
      w = (w - kLr * w.grad()).detach();
    }
    return loss_sum / micro_batches;
  }

  double eval_batch(int replica, int micro_batches) {
    torch::NoGradGuard no_grad;
    double loss_sum = 0;
    for (int k = 0; k < micro_batches; ++k)
      loss_sum += mse(forward(toy_input(replica, k)), toy_label(replica, k)).item<double>();
    return loss_sum / micro_batches;
  }

  at::Tensor forward(at::Tensor x) const {
    for (const at::Tensor& w : weights) x = layer(x, w);
    return x;
  }

  std::vector<at::Tensor> weights;
  std::vector<at::Tensor> grads;
};

std::vector<std::string> expected_events(const ds::pipe::PipelineGrid& grid, int micro_batches) {
  std::vector<std::string> events;
  for (int k = 0; k < micro_batches; ++k) {
    if (grid.is_first_stage()) events.push_back("inputs " + std::to_string(k));
    if (grid.is_last_stage()) events.push_back("labels " + std::to_string(k));
  }
  return events;
}

}  // namespace

TEST_CASE("the executor trains a pipeline as one process would", "[mpi][pipe][executor]") {
  auto world = ds::comm::init_distributed("mpi");
  for (int stages = 1; stages <= world->world_size(); ++stages) {
    if (world->world_size() % stages != 0) continue;
    const ds::pipe::PipelineGrid grid(world->world_size(), stages, world->rank());
    auto pipe_group = world->split(grid.replica(), grid.stage());
    for (int micro_batches : {1, 2, 3, 5, 8}) {
      INFO(stages << " stages, stage " << grid.stage() << ", replica " << grid.replica() << ", " << micro_batches
                  << " micro-batches");
      ToyStage stage(grid.stage(), grid.replica(), micro_batches);
      ds::pipe::PipelineExecutor executor(stage, *pipe_group);
      Reference reference(stages);
      for (int batch = 0; batch < 2; ++batch) {
        stage.events.clear();
        const double loss = executor.train_batch(micro_batches);
        const double expected = reference.train_batch(grid.replica(), micro_batches);
        REQUIRE(loss == Approx(expected).epsilon(1e-12));
        REQUIRE(torch::allclose(stage.stepped_grad, reference.grads[grid.stage()], 1e-12, 1e-14));
        REQUIRE(torch::allclose(stage.weight, reference.weights[grid.stage()], 1e-12, 1e-14));

        // Loads in micro-batch order, one forward and one backward per micro-batch, and the batch's
        // model-wide steps last, in the schedule's order.
        std::vector<std::string> loads;
        int forwards = 0, backwards = 0;
        for (const std::string& e : stage.events) {
          if (e.rfind("inputs", 0) == 0 || e.rfind("labels", 0) == 0) loads.push_back(e);
          forwards += e == "forward";
          backwards += e == "backward";
        }
        CHECK(loads == expected_events(grid, micro_batches));
        CHECK(forwards == micro_batches);
        CHECK(backwards == micro_batches);
        REQUIRE(stage.events.size() >= 3);
        CHECK(std::vector<std::string>(stage.events.end() - 3, stage.events.end()) ==
              std::vector<std::string>{"ReduceTiedGrads", "ReduceGrads", "OptimizerStep"});
      }

      // Every op of the schedule is timed under its name, and nothing else.
      std::set<std::string> timed, scheduled;
      for (const auto& [name, ms] : executor.timers().elapsed_all_ms()) timed.insert(name);
      for (const ds::pipe::Step& step : ds::pipe::TrainSchedule(micro_batches, stages, grid.stage()))
        for (const ds::pipe::Instruction& instruction : step) scheduled.insert(to_string(instruction.op));
      CHECK(timed == scheduled);

      // Evaluation: the same loss as the reference, no backward, no update.
      stage.events.clear();
      const at::Tensor before = stage.weight.detach().clone();
      REQUIRE(executor.eval_batch(micro_batches) ==
              Approx(reference.eval_batch(grid.replica(), micro_batches)).epsilon(1e-12));
      CHECK(torch::equal(stage.weight.detach(), before));
      for (const std::string& e : stage.events) CHECK(e != "backward");
    }
  }
}
