#include "train_report.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/memory.hpp"

namespace ds::app {
namespace {

double seconds(const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; }

// DeepSpeed's event names where it has the figure, the same style for dstrain's others.
std::vector<monitor::Event> monitor_events(const StepFigures& f, double samples_per_sec, double peak_rss_mb) {
  std::vector<monitor::Event> events = {{"Train/Samples/train_loss", f.loss},
                                        {"Train/Samples/lr", f.lr},
                                        {"Train/Samples/grad_norm", f.grad_norm},
                                        {"Train/Samples/samples_per_sec", samples_per_sec},
                                        {"Train/Samples/peak_rss_mb", peak_rss_mb}};
  if (f.loss_scale) events.push_back({"Train/Samples/loss_scale", *f.loss_scale});
  if (f.breakdown_ms)
    for (const auto& [name, ms] : *f.breakdown_ms) events.push_back({"Train/Samples/elapsed_time_ms_" + name, ms});
  if (f.val_loss) {
    events.push_back({"Eval/Samples/val_loss", *f.val_loss});
    events.push_back({"Eval/Samples/val_ppl", std::exp(*f.val_loss)});
  }
  return events;
}

}  // namespace

TrainReport::TrainReport(comm::Backend& world, int64_t baseline_rss_bytes, const std::string& metrics_path,
                         ProgressMode progress, int64_t steps, int steps_per_print, int64_t block_size,
                         const nlohmann::json& monitor_blocks)
    : world_(world),
      baseline_rss_bytes_(baseline_rss_bytes),
      steps_(steps),
      print_every_(std::max(1, steps_per_print)),
      block_size_(block_size),
      interactive_(world.rank() == 0 && draws_progress(progress)),
      metrics_path_(metrics_path),
      monitors_(monitor_blocks, world.rank()) {
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  cpu_user_seconds_ = seconds(usage.ru_utime);
  cpu_system_seconds_ = seconds(usage.ru_stime);
  if (world.rank() == 0 && !metrics_path.empty()) {
    metrics_.open(metrics_path, std::ios::app);
    if (!metrics_) throw Error("cannot open metrics file").with_path(metrics_path).with_errno(errno);
  }
  for (const std::string& destination : monitors_.destinations()) log::info("monitor: ", destination);
}

void TrainReport::step(const StepFigures& f) {
  const double samples_per_sec = f.train_batch_size / f.seconds;
  at::Tensor memory = at::tensor({static_cast<double>(process_memory().peak_rss_bytes),
                                  static_cast<double>(baseline_rss_bytes_), static_cast<double>(f.activation_bytes)},
                                 at::kDouble);
  world_.all_reduce(memory, comm::ReduceOp::Max);
  const double peak_rss_mb = memory[0].item<double>() / 1e6;
  rusage usage{};
  ::getrusage(RUSAGE_SELF, &usage);
  const double user = seconds(usage.ru_utime) - cpu_user_seconds_, system = seconds(usage.ru_stime) - cpu_system_seconds_;
  cpu_user_seconds_ += user;
  cpu_system_seconds_ += system;
  nlohmann::json line = {{"step", f.step},
                         {"loss", f.loss},
                         {"lr", f.lr},
                         {"grad_norm", f.grad_norm},
                         {"samples_per_sec", samples_per_sec},
                         {"tokens_per_sec", samples_per_sec * block_size_},
                         {"peak_rss_mb", peak_rss_mb},
                         {"baseline_rss_mb", memory[1].item<double>() / 1e6},
                         {"activation_mb", memory[2].item<double>() / 1e6},
                         {"param_bytes", f.bytes.parameters},
                         {"grad_bytes", f.bytes.gradients},
                         {"optimizer_bytes", f.bytes.optimizer},
                         {"nvme_read_bytes", f.swap.read_bytes},
                         {"nvme_write_bytes", f.swap.write_bytes},
                         {"nvme_read_seconds", f.swap.read_seconds},
                         {"nvme_write_seconds", f.swap.write_seconds},
                         {"nvme_wait_seconds", f.swap.wait_seconds},
                         {"cpu_user_seconds", user},
                         {"cpu_system_seconds", system}};
  if (f.breakdown_ms) line["breakdown_ms"] = *f.breakdown_ms;
  if (f.val_loss) {
    line["val_loss"] = *f.val_loss;
    line["val_ppl"] = std::exp(*f.val_loss);
  }
  if (f.tflops) line["tflops"] = *f.tflops;
  if (f.mfu) line["mfu"] = *f.mfu;
  if (f.gpu_max_allocated) line["gpu_max_allocated_mb"] = *f.gpu_max_allocated / 1e6;
  write_line(line, f.step);
  if (!monitors_.empty())
    monitors_.write_events(f.step * f.train_batch_size, monitor_events(f, samples_per_sec, peak_rss_mb));
  // The step's own time counts, so the first rate is already a measured one.
  if (!bar_) {
    using Clock = std::chrono::steady_clock;
    const auto step_time = std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(f.seconds));
    bar_.emplace(f.step - 1, steps_, "steps", Clock::now() - step_time);
  }
  char loss_text[32];
  std::snprintf(loss_text, sizeof loss_text, "loss %.4f", f.loss);
  if (interactive_) bar_->draw(f.step, loss_text);
  if (f.step % print_every_ == 0 || f.step == steps_) {
    char text[512];
    std::snprintf(text, sizeof text,
                  "step %lld | loss %.4f | lr %.3e | %.1f samples/s | model state %.1f MB (params %.1f, grads %.1f, "
                  "optim %.1f) | peak rss %.0f MB",
                  static_cast<long long>(f.step), f.loss, f.lr, samples_per_sec, f.bytes.total() / 1e6,
                  f.bytes.parameters / 1e6, f.bytes.gradients / 1e6, f.bytes.optimizer / 1e6, peak_rss_mb);
    if (interactive_) bar_->finish();
    if (f.swap.read_bytes + f.swap.write_bytes > 0) {
      // Bytes over the time the transfers were in flight: the rate the disk delivered to them.
      const size_t used = std::strlen(text);
      std::snprintf(text + used, sizeof text - used, " | swap read %.2f GB/s, write %.2f GB/s, waited %.3f s",
                    f.swap.read_seconds > 0 ? f.swap.read_bytes / f.swap.read_seconds / 1e9 : 0.0,
                    f.swap.write_seconds > 0 ? f.swap.write_bytes / f.swap.write_seconds / 1e9 : 0.0,
                    f.swap.wait_seconds);
    }
    if (f.tflops && f.mfu) {
      const size_t used = std::strlen(text);
      std::snprintf(text + used, sizeof text - used, " | %.3f TFLOPS | MFU %.1f%%", *f.tflops, *f.mfu * 100);
    }
    if (f.step < steps_) {
      const size_t used = std::strlen(text);
      std::snprintf(text + used, sizeof text - used, " | ETA %s", bar_->time_left(f.step).c_str());
    }
    log::info(text);
    if (world_.comms_logger().enabled()) report_comms(f.step);
  }
  if (f.val_loss) {
    if (interactive_) bar_->finish();
    char val_line[96];
    std::snprintf(val_line, sizeof val_line, "step %lld | val loss %.4f | val ppl %.2f", static_cast<long long>(f.step),
                  *f.val_loss, std::exp(*f.val_loss));
    log::info(val_line);
  }
  if (f.step == steps_) {
    char final_line[96];
    std::snprintf(final_line, sizeof final_line, "final training loss %.4f after %lld steps", f.loss,
                  static_cast<long long>(f.step));
    log::info(final_line);
  }
}

void TrainReport::write_line(const nlohmann::json& line, int64_t step) {
  if (!metrics_.is_open()) return;
  errno = 0;
  metrics_ << line.dump() << '\n' << std::flush;
  // A lost metrics line is a failed run (a full disk must not look like success).
  if (!metrics_)
    throw Error("cannot write the metrics line of step " + std::to_string(step)).with_path(metrics_path_).with_errno(errno);
}

void TrainReport::report_comms(int64_t step) {
  if (world_.rank() != 0) return;
  const std::vector<comm::CommSummaryRow> rows = world_.comms_logger().summary();
  log::info("comms summary at step ", step, " (rank 0, since the start):");
  std::istringstream table(comm::format_comms_summary(rows));
  for (std::string each; std::getline(table, each);) log::info(each);
  nlohmann::json comms = nlohmann::json::array();
  for (const comm::CommSummaryRow& row : rows)
    comms.push_back({{"op", row.op},
                     {"bytes", row.bytes},
                     {"count", row.count},
                     {"total_ms", row.total_seconds * 1e3},
                     {"avg_ms", row.average_ms()},
                     {"algbw_gbps", row.algbw_gbps},
                     {"busbw_gbps", row.busbw_gbps},
                     {"algorithm", row.algorithm}});
  write_line({{"step", step}, {"comms", comms}}, step);
}

}  // namespace ds::app
