// Loads a DeepSpeed config and all-reduces one tensor across the ranks of `mpirun -np N embed X.json`.
#include <dstrain/dstrain.hpp>
#include <torch/torch.h>

#include <iostream>

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: embed CONFIG.json\n";
    return 2;
  }
  const int code = ds::comm::run_or_abort([&] {
    auto world = ds::comm::init_distributed("mpi");
    ds::Config config = ds::Config::from_file(argv[1]);
    config.resolve_batch(world->world_size());
    at::Tensor value = torch::full({4}, double(world->rank() + 1));
    world->all_reduce(value);
    const double expected = world->world_size() * (world->world_size() + 1) / 2.0;
    if (world->rank() == 0)
      std::cout << "embed: " << world->world_size() << " ranks, train_batch_size " << config.train_batch_size()
                << ", all_reduce sum " << value[0].item<double>() << " (expected " << expected << ")\n";
    return value.eq(expected).all().item<bool>() ? 0 : 1;
  });
  ds::comm::finalize();
  return code;
}
