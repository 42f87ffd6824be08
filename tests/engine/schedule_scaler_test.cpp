#include <catch2/catch.hpp>

#include <cmath>

#include "dstrain/engine/optim/loss_scaler.hpp"
#include "dstrain/engine/optim/lr_schedule.hpp"

TEST_CASE("WarmupDecayLR follows DeepSpeed's formula", "[engine][lr]") {
  ds::SchedulerConfig config;
  config.type = ds::SchedulerType::WarmupDecayLR;
  config.warmup_min_lr = 0.0;
  config.warmup_max_lr = 0.01;
  config.warmup_num_steps = 10;
  config.total_num_steps = 110;
  ds::LrSchedule schedule(config, 0.5);
  REQUIRE(schedule.lr(0) == Approx(0.0));                                  // log(1) = 0
  REQUIRE(schedule.lr(4) == Approx(0.01 * std::log(5.0) / std::log(10.0)));
  REQUIRE(schedule.lr(10) == Approx(0.01));                                // (110-10)/(110-10)
  REQUIRE(schedule.lr(60) == Approx(0.005));
  REQUIRE(schedule.lr(200) == Approx(0.0));
  config.warmup_type = "linear";
  REQUIRE(ds::LrSchedule(config, 0.5).lr(5) == Approx(0.005));
}

TEST_CASE("WarmupLR defaults its peak to the optimizer's lr", "[engine][lr]") {
  ds::SchedulerConfig config;
  config.type = ds::SchedulerType::WarmupLR;
  config.warmup_num_steps = 100;
  ds::LrSchedule schedule(config, 0.02);
  REQUIRE(schedule.lr(1000) == Approx(0.02));
  REQUIRE(schedule.lr(9) == Approx(0.02 * std::log(10.0) / std::log(100.0)));
}

TEST_CASE("OneCycle rises, falls, then decays", "[engine][lr]") {
  ds::SchedulerConfig config;
  config.type = ds::SchedulerType::OneCycle;
  config.cycle_min_lr = 0.1;
  config.cycle_max_lr = 1.0;
  config.cycle_first_step_size = 10;
  config.cycle_second_step_size = 10;
  config.decay_step_size = 5;
  config.decay_lr_rate = 0.5;
  ds::LrSchedule schedule(config, 0.0);
  REQUIRE(schedule.lr(4) == Approx(0.1 + 0.9 * 0.5));   // iteration 5 of a 10-step rise
  REQUIRE(schedule.lr(9) == Approx(1.0));
  REQUIRE(schedule.lr(14) == Approx(0.1 + 0.9 * 0.5));  // halfway down
  REQUIRE(schedule.lr(24) == Approx(0.1 / (1 + 0.5 * 1.0)));  // 5 steps past the cycle: one decay interval
}

TEST_CASE("dynamic loss scaler: back-off with hysteresis, growth after a clean window", "[engine][fp16]") {
  ds::Fp16Config config;
  config.enabled = true;
  config.initial_scale_power = 4;  // 16
  config.loss_scale_window = 3;
  config.hysteresis = 2;
  config.min_loss_scale = 2;
  ds::LossScaler scaler(config);
  REQUIRE(scaler.scale() == 16);
  REQUIRE_FALSE(scaler.update(true));  // first overflow: hysteresis absorbs it
  REQUIRE(scaler.scale() == 16);
  REQUIRE_FALSE(scaler.update(true));  // second: back off
  REQUIRE(scaler.scale() == 8);
  REQUIRE(scaler.update(false));       // iteration 2, last overflow 1: 1 % 3 != 0
  REQUIRE(scaler.update(false));
  REQUIRE(scaler.scale() == 8);
  REQUIRE(scaler.update(false));       // 3 clean steps since the overflow: grow
  REQUIRE(scaler.scale() == 16);
  for (int i = 0; i < 10; ++i) scaler.update(true);
  REQUIRE(scaler.scale() == 2);        // never below min_loss_scale
}

TEST_CASE("static loss scale never moves", "[engine][fp16]") {
  ds::Fp16Config config;
  config.enabled = true;
  config.loss_scale = 128;
  ds::LossScaler scaler(config);
  REQUIRE_FALSE(scaler.update(true));
  REQUIRE(scaler.update(false));
  REQUIRE(scaler.scale() == 128);
}
