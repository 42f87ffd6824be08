// What the trainer reports after each optimizer step, the same for data-parallel and pipeline
// training: one JSON line per step in --metrics (rank 0), a progress bar with rate and ETA when the
// user watches a terminal (progress.hpp), a log line every steps_per_print steps and at the last
// (with the ETA), and the final training loss; after an evaluation, the held-out loss and its
// perplexity (val_loss, val_ppl) in the step's line and a log line of their own. Memory figures are the
// largest over the ranks (step() is collective): peak RSS (VmHWM), the RSS each rank had before the
// model existed (the baseline: LibTorch, MPI, the program) and the activation bytes of a forward.
// The NVMe swap figures are rank 0's (docs/offload.md), and so are the CPU seconds, user and
// system, of the step (all threads; page faults and MPI's kernel-assisted copies are system time).
// The config's monitors (tensorboard, csv_monitor: docs/monitoring.md) get the step's events on rank 0,
// at x = the samples trained so far, as DeepSpeed's.
// With flops_profiler on, the model's TFLOP/s and MFU are in every step's line ("tflops", "mfu")
// and in the printed one; with comms_logger on, rank 0 prints the collectives' summary (DeepSpeed's
// log_summary) at each printed step and writes it as a line of its own, {"step": N, "comms": [...]}.
#pragma once

#include <cstdint>
#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/monitor/monitor_set.hpp"
#include "progress.hpp"

namespace ds::app {

struct StepFigures {
  int64_t step = 0;  // optimizer steps done
  double loss = 0;   // mean over the global batch
  double lr = 0;
  double grad_norm = 0;
  double seconds = 0;  // wall time of the step
  int train_batch_size = 0;
  ModelStateBytes bytes;  // rank 0's
  io::SwapStats swap;  // rank 0's NVMe swap (optimizer and parameters) during the step (zeros without offload)
  int64_t activation_bytes = 0;  // this rank's most over the step's forwards (allocated_bytes() rise)
  std::optional<std::map<std::string, double>> breakdown_ms;  // with wall_clock_breakdown
  std::optional<double> val_loss;  // after an evaluation: the mean held-out loss over all ranks
  std::optional<double> loss_scale;  // fp16's current loss scale
  std::optional<double> tflops;  // with flops_profiler: model TFLOP/s of all ranks (profiler/flops_profiler.hpp)
  std::optional<double> mfu;     // with flops_profiler: model FLOPs utilisation, a fraction
  std::optional<int64_t> gpu_max_allocated;  // on a GPU: the CUDA allocator's peak bytes (rank 0's)
};

class TrainReport {
 public:
  // metrics_path: "" for none. Throws ds::Error when rank 0 cannot open it, and step() when a line
  // cannot be written. baseline_rss_bytes:
  // this rank's RSS before the model was built. progress: whether rank 0 draws the bar. monitor_blocks:
  // the config's top-level blocks (Config::untyped()), whose monitors are opened here.
  TrainReport(comm::Backend& world, int64_t baseline_rss_bytes, const std::string& metrics_path, ProgressMode progress,
              int64_t steps, int steps_per_print, int64_t block_size, const nlohmann::json& monitor_blocks);

  void step(const StepFigures& figures);

 private:
  void write_line(const nlohmann::json& line, int64_t step);
  // DeepSpeed's log_summary of world_'s comms logger (rank 0), in the log and in --metrics.
  void report_comms(int64_t step);

  comm::Backend& world_;
  int64_t baseline_rss_bytes_;
  int64_t steps_;
  int print_every_;
  int64_t block_size_;
  double cpu_user_seconds_ = 0;    // this process's CPU time at the end of the previous step
  double cpu_system_seconds_ = 0;
  bool interactive_;
  std::optional<ProgressBar> bar_;  // from the first step this run reports (a resumed run starts late)
  std::ofstream metrics_;
  std::string metrics_path_;
  monitor::MonitorSet monitors_;
};

}  // namespace ds::app
