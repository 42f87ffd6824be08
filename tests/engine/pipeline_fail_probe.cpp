// A two-stage GPT pipeline whose last stage (rank 1) fails while loading the labels of step k
// (`pipeline_fail_probe k`), in the middle of the schedule, while stage 0 waits on it. Run by
// tests/comm/expect_abort.cmake, which checks that the job ends quickly, non-zero, with rank 1's
// message: a dead stage must never leave its neighbour hanging.
#include <string>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/data/synthetic_source.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
#include "dstrain/runtime/error.hpp"

namespace {

class FailingSource final : public ds::data::SyntheticSource {
 public:
  explicit FailingSource(int64_t failing_step) : SyntheticSource(64, 16, 1), failing_step_(failing_step) {}

  void sample(int64_t step, int64_t index, int64_t* tokens) const override {
    if (step == failing_step_ && ds::comm::get_rank() == 1)
      throw ds::Error("deliberate failure on rank 1: pipeline stage 1 at step " + std::to_string(step)).with_rank(1);
    SyntheticSource::sample(step, index, tokens);
  }

 private:
  int64_t failing_step_;
};

}  // namespace

int main(int argc, char** argv) {
  const int64_t failing_step = argc > 1 ? std::stoll(argv[1]) : 2;
  return ds::comm::run_or_abort([&] {
    auto world = ds::comm::init_distributed("mpi");
    const ds::Config config = ds::Config::from_json({
        {"train_micro_batch_size_per_gpu", 2},
        {"gradient_accumulation_steps", 4},
        {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 1e-3}}}}},
        {"pipeline", {{"stages", 2}}},
    });
    const auto model = ds::models::GPTConfig::from_json(
        {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 16}, {"block_size", 16}, {"vocab_size", 64}});
    ds::PipelineEngine engine(model, config, world);
    FailingSource source(failing_step);
    for (int64_t step = 0; step <= failing_step + 2; ++step) engine.train_batch(source);
    ds::comm::finalize();
    return 0;
  });
}
