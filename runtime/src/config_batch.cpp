// The batch rule: train_batch_size == micro * accumulation * dp_world_size. What needs no world
// size is checked when the config is read; resolve_batch() derives the rest as DeepSpeed does,
// except that a size that does not divide is an error here, where DeepSpeed would floor it.
#include <climits>
#include <cstdint>
#include <string>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds {
namespace {

constexpr const char* kTrain = "train_batch_size";
constexpr const char* kMicro = "train_micro_batch_size_per_gpu";
constexpr const char* kAccumulation = "gradient_accumulation_steps";

// Each factor fits an int, but three of them may not fit an int64: saturate, so that the
// comparison with train_batch_size fails instead of wrapping.
int64_t times(int64_t a, int64_t b) {
  int64_t product = 0;
  return __builtin_mul_overflow(a, b, &product) ? INT64_MAX : product;
}

std::string named(const char* key, int64_t value) { return std::string(key) + " " + std::to_string(value); }

// "train_batch_size 30 is not divisible by train_micro_batch_size_per_gpu 4 * ... (= 8)".
Error not_divisible(int64_t train, const std::string& factors, int64_t product) {
  return Error(named(kTrain, train) + " is not divisible by " + factors + " (= " + std::to_string(product) + ")")
      .with_key(kTrain);
}

}  // namespace

void Config::check_batch_keys() const {
  if (!given_train_batch_size_ && !given_micro_batch_size_)
    throw Error(std::string("neither ") + kTrain + " nor " + kMicro + " is given; at least one is required")
        .with_key(kTrain);
  if (!given_train_batch_size_ || (!given_micro_batch_size_ && !given_accumulation_steps_)) return;
  int64_t product = 1;
  std::string factors;
  if (given_micro_batch_size_) {
    product *= *given_micro_batch_size_;
    factors = named(kMicro, *given_micro_batch_size_);
  }
  if (given_accumulation_steps_) {
    product *= *given_accumulation_steps_;
    factors += (factors.empty() ? "" : " * ") + named(kAccumulation, *given_accumulation_steps_);
  }
  if (*given_train_batch_size_ % product != 0) throw not_divisible(*given_train_batch_size_, factors, product);
}

void Config::resolve_batch(int dp_world_size) {
  if (dp_world_size < 1)
    throw Error("data-parallel world size must be >= 1, got " + std::to_string(dp_world_size)).with_key(kTrain);
  const std::string world = "data-parallel world size " + std::to_string(dp_world_size);
  int64_t train = given_train_batch_size_.value_or(0);
  int64_t micro = given_micro_batch_size_.value_or(0);
  int64_t accumulation = given_accumulation_steps_.value_or(1);
  if (given_train_batch_size_ && given_micro_batch_size_ && !given_accumulation_steps_) {
    int64_t per_step = times(micro, dp_world_size);
    if (train % per_step != 0) throw not_divisible(train, named(kMicro, micro) + " * " + world, per_step);
    accumulation = train / per_step;
  } else if (given_train_batch_size_ && !given_micro_batch_size_) {
    int64_t per_micro = times(accumulation, dp_world_size);
    if (train % per_micro != 0)
      throw not_divisible(train, (given_accumulation_steps_ ? named(kAccumulation, accumulation) + " * " : "") + world,
                          per_micro);
    micro = train / per_micro;
  } else if (!given_train_batch_size_) {
    train = times(times(micro, accumulation), dp_world_size);
    if (train > INT_MAX)
      throw Error(named(kMicro, micro) + " * " + named(kAccumulation, accumulation) + " * " + world +
                  " overflows " + kTrain)
          .with_key(kTrain);
  }
  if (train != times(times(micro, accumulation), dp_world_size))
    throw Error(named(kTrain, train) + " != " + named(kMicro, micro) + " * " + named(kAccumulation, accumulation) +
                " * " + world +
                (is_auto(kMicro) && is_auto(kAccumulation)
                     ? " (Hugging Face's mode: the batch is the world x dstrain.per_device_train_batch_size x "
                       "dstrain.gradient_accumulation_steps; write train_batch_size \"auto\")"
                     : ""))
        .with_key(kTrain);
  dp_world_size_ = dp_world_size;
  train_batch_size_ = static_cast<int>(train);
  micro_batch_size_ = static_cast<int>(micro);
  accumulation_steps_ = static_cast<int>(accumulation);
  log_derived_autos();
}

// The batch keys written "auto" that the batch rule derived (those from the dstrain block were
// logged when the config was read).
void Config::log_derived_autos() const {
  // The engine, the memory planner and the trainer's checks each resolve their own copy of the
  // config: the same resolution is logged once per process.
  static std::string last_logged;
  const std::string resolution = log::concat(train_batch_size_, " ", micro_batch_size_, " ", accumulation_steps_, " ",
                                             dp_world_size_, " ", is_auto(kTrain), is_auto(kMicro), is_auto(kAccumulation));
  if (resolution == last_logged) return;
  last_logged = resolution;
  const std::string rule = log::concat("(micro ", micro_batch_size_, " x accumulation ", accumulation_steps_, " x ",
                                       dp_world_size_, dp_world_size_ == 1 ? " rank)" : " ranks)");
  if (is_auto(kTrain) && !given_train_batch_size_)
    log::info("config: ", kTrain, " \"auto\" -> ", train_batch_size_, " ", rule);
  if (is_auto(kMicro) && !given_micro_batch_size_)
    log::info("config: ", kMicro, " \"auto\" -> ", micro_batch_size_, " (the batch rule: ", kTrain, " ",
              train_batch_size_, " / (accumulation ", accumulation_steps_, " x ", dp_world_size_, "))");
  if (is_auto(kAccumulation) && !given_accumulation_steps_)
    log::info("config: ", kAccumulation, " \"auto\" -> ", accumulation_steps_, " (the batch rule)");
}

namespace {

int resolved(int value, bool is_resolved, const char* key) {
  if (!is_resolved)
    throw Error("not known until resolve_batch(dp_world_size) has run").with_key(key);
  return value;
}

}  // namespace

int Config::dp_world_size() const { return resolved(dp_world_size_, batch_resolved(), "dp_world_size"); }
int Config::train_batch_size() const { return resolved(train_batch_size_, batch_resolved(), kTrain); }
int Config::train_micro_batch_size_per_gpu() const { return resolved(micro_batch_size_, batch_resolved(), kMicro); }
int Config::gradient_accumulation_steps() const {
  return resolved(accumulation_steps_, batch_resolved(), kAccumulation);
}

}  // namespace ds
