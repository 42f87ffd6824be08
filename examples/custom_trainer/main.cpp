// A custom trainer: your own model and data, dstrain's engine (ZeRO stage 3 per config.json).
//   mpirun -np 2 custom_trainer config.json
// The model learns y = sin(x0) + x1 * x2 from random inputs; every rank draws its own samples.
#include <dstrain/dstrain.hpp>
#include <torch/torch.h>

#include <cstdio>

// Submodules whose parameters ZeRO-3 should manage derive from ds::zero::Module and are called
// through ds::zero::call; plain LibTorch layers inside them belong to them.
struct BlockImpl : ds::zero::Module {
  BlockImpl(int64_t in, int64_t out) : linear(register_module("linear", torch::nn::Linear(in, out))) {}
  at::Tensor forward(const at::Tensor& x) { return torch::gelu(linear(x)); }
  torch::nn::Linear linear;
};
TORCH_MODULE(Block);

struct RegressorImpl : ds::zero::Module {
  RegressorImpl()
      : hidden1(register_module("hidden1", Block(3, 64))),
        hidden2(register_module("hidden2", Block(64, 64))),
        head(register_module("head", torch::nn::Linear(64, 1))) {}
  at::Tensor forward(const at::Tensor& x) {
    at::Tensor h = ds::zero::call(hidden1, x);
    h = ds::zero::call(hidden2, h);
    return head(h).squeeze(-1);
  }
  Block hidden1, hidden2;
  torch::nn::Linear head;
};
TORCH_MODULE(Regressor);

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: custom_trainer CONFIG.json\n");
    return 2;
  }
  const int code = ds::comm::run_or_abort([&] {
    auto world = ds::comm::init_distributed("mpi");
    torch::manual_seed(0);
    Regressor model;
    auto engine = ds::initialize(model, ds::Config::from_file(argv[1]), world);
    torch::manual_seed(100 + world->rank());  // each rank its own data
    double first = 0, last = 0;
    for (int step = 0; step < 60; ++step) {
      double loss_sum = 0;
      for (int micro = 0; micro < engine->gradient_accumulation_steps(); ++micro) {
        at::Tensor x = torch::randn({engine->train_micro_batch_size_per_gpu(), 3});
        at::Tensor y = torch::sin(x.select(1, 0)) + x.select(1, 1) * x.select(1, 2);
        at::Tensor loss = torch::mse_loss(engine->forward(x), y);
        engine->backward(loss);
        engine->step();
        loss_sum += loss.item<double>();
      }
      at::Tensor mean = torch::tensor({loss_sum / engine->gradient_accumulation_steps()}, torch::kDouble);
      world->all_reduce(mean, ds::comm::ReduceOp::Avg);
      (step == 0 ? first : last) = mean.item<double>();
    }
    if (world->rank() == 0)
      std::printf("custom_trainer: ZeRO stage %d on %d ranks, loss %.4f -> %.4f\n", engine->zero_stage(),
                  world->world_size(), first, last);
    return last < 0.5 * first ? 0 : 1;
  });
  ds::comm::finalize();
  return code;
}
