#include "dstrain/engine/profiler/model_profile_report.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>
#include <vector>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::profiler {
namespace {

// "1.23 M", "456.79 G": DeepSpeed's number_to_string.
std::string si(double value, const char* unit = "") {
  static const std::pair<double, const char*> scales[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "K"}};
  char text[48];
  for (const auto& [scale, prefix] : scales)
    if (value >= scale) {
      std::snprintf(text, sizeof text, "%.2f %s%s", value / scale, prefix, unit);
      return text;
    }
  std::snprintf(text, sizeof text, *unit ? "%.2f %s" : "%.2f", value, unit);
  return text;
}

std::string duration(double seconds) {
  char text[32];
  if (seconds <= 0) return "not measured";
  if (seconds >= 1) std::snprintf(text, sizeof text, "%.2f s", seconds);
  else if (seconds >= 1e-3) std::snprintf(text, sizeof text, "%.2f ms", seconds * 1e3);
  else std::snprintf(text, sizeof text, "%.2f us", seconds * 1e6);
  return text;
}

std::string percent(double part, double whole) {
  char text[16];
  std::snprintf(text, sizeof text, "%.2f%%", whole > 0 ? 100 * part / whole : 0.0);
  return text;
}

double rate(double flops, double seconds) { return seconds > 0 ? flops / seconds : 0; }

void line(std::ostringstream& out, const std::string& label, const std::string& value) {
  char text[192];
  std::snprintf(text, sizeof text, "%-72s%s\n", (label + ":").c_str(), value.c_str());
  out << text;
}

// Every module at each depth, the root at 0.
void collect(const ModuleProfile& module, int depth, std::vector<std::vector<const ModuleProfile*>>& by_depth) {
  if (static_cast<int>(by_depth.size()) <= depth) by_depth.resize(depth + 1);
  by_depth[depth].push_back(&module);
  for (const ModuleProfile& child : module.children) collect(child, depth + 1, by_depth);
}

// {'Block': '1.20 M', ...}: the top `count` types at one depth, summed per type, by `value`.
template <class Value>
std::string top_types(const std::vector<const ModuleProfile*>& modules, int count, Value value, const char* unit) {
  std::map<std::string, double> per_type;
  for (const ModuleProfile* module : modules) per_type[module->type] += value(*module);
  std::vector<std::pair<std::string, double>> sorted(per_type.begin(), per_type.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text = "{";
  for (int i = 0; i < count && i < static_cast<int>(sorted.size()); ++i)
    text += (i ? ", '" : "'") + sorted[i].first + "': '" + si(sorted[i].second, unit) + "'";
  return text + "}";
}

void tree(std::ostringstream& out, const ModuleProfile& module, const ModuleProfile& root, int depth, int max_depth,
          const std::string& indent) {
  const std::string stats = si(static_cast<double>(module.params)) + " = " + percent(module.params, root.params) +
                            " Params, " + si(module.macs(), "MACs") + " = " + percent(module.flops, root.flops) +
                            " MACs, " + si(module.flops, "FLOPs") + " fwd" +
                            (module.flops_counted ? "" : " (its own FLOPs not counted)");
  const std::string head = indent + (module.name.empty() ? "" : "(" + module.name + "): ") + module.type + "(";
  const bool expand = !module.children.empty() && (max_depth < 0 || depth < max_depth);
  if (!expand) {
    out << head << stats << ")\n";
    return;
  }
  out << head << "\n" << indent << "  " << stats << ",\n";
  for (const ModuleProfile& child : module.children) tree(out, child, root, depth + 1, max_depth, indent + "  ");
  out << indent << ")\n";
}

}  // namespace

std::string format_model_profile(const ModuleProfile& model, const StepProfile& step,
                                 const FlopsProfilerSettings& settings) {
  const double gas = std::max(1, step.gradient_accumulation);
  const double fwd_flops = model.flops;  // one forward of one micro-batch
  const double fwd_latency = step.forward_seconds / gas;
  const double bwd_latency = step.backward_seconds / gas;
  const double hardware_factor = 3 + settings.recompute_fwd_factor;
  const double model_flops_per_second = rate(3 * fwd_flops * gas, step.iteration_seconds);
  std::ostringstream out;
  out << "\n-------------------------- DeepSpeed Flops Profiler --------------------------\n"
      << "Profile Summary at step " << step.step
      << (step.stages > 1 ? " of pipeline stage " + std::to_string(step.stage) + " of " + std::to_string(step.stages)
                          : std::string())
      << ":\n"
      << "Notations:\n"
      << "data parallel size (dp_size), model parallel size (mp_size),\n"
      << "number of parameters (params), number of multiply-accumulate operations (MACs),\n"
      << "number of floating-point operations (flops), floating-point operations per second (FLOPS),\n"
      << "fwd latency (forward propagation latency), bwd latency (backward propagation latency),\n"
      << "step (weights update latency), iter latency (sum of fwd, bwd and step latency),\n"
      << "MFU (model FLOPs utilisation: 3 * fwd flops per step over the measured GEMM peak)\n\n";
  line(out, "world size", std::to_string(step.world_size));
  line(out, "data parallel size", std::to_string(step.data_parallel_size));
  line(out, "model parallel size", "1");
  if (step.stages > 1) {
    line(out, "pipeline parallel size", std::to_string(step.stages));
    line(out, "pipeline stage (its layers)", std::to_string(step.stage) + " (" + step.layers + ")");
  }
  line(out, "batch size per rank", std::to_string(step.micro_batch));
  line(out, "params per rank", si(static_cast<double>(model.params)));
  if (step.stages == 1) line(out, "params of model = params per rank * mp_size", si(static_cast<double>(model.params)));
  line(out, "fwd MACs per rank", si(model.macs(), "MACs"));
  line(out, "fwd flops per rank", si(fwd_flops));
  if (step.stages > 1) line(out, "fwd flops of model = sum of the stages' fwd flops", si(step.model_fwd_flops));
  else line(out, "fwd flops of model = fwd flops per rank * mp_size", si(fwd_flops));
  const std::vector<std::string> uncounted = uncounted_modules(model);
  if (!uncounted.empty()) {
    std::string names;
    for (const std::string& name : uncounted) names += (names.empty() ? "" : ", ") + name;
    line(out, "FLOPs not counted (params only)", names);
  }
  line(out, "fwd latency", duration(fwd_latency));
  if (fwd_latency > 0)
    line(out, "fwd FLOPS per rank = fwd flops per rank / fwd latency", si(rate(fwd_flops, fwd_latency), "FLOPS"));
  line(out, "bwd latency", duration(bwd_latency));
  if (bwd_latency > 0)
    line(out, "bwd FLOPS per rank = 2 * fwd flops per rank / bwd latency",
         si(rate(2 * fwd_flops, bwd_latency), "FLOPS"));
  char label[96];
  std::snprintf(label, sizeof label, "fwd+bwd FLOPS per rank = %g * fwd flops per rank / (fwd+bwd latency)",
                hardware_factor);
  if (fwd_latency > 0 && bwd_latency > 0)
    line(out, label, si(rate(hardware_factor * fwd_flops, fwd_latency + bwd_latency), "FLOPS"));
  line(out, "step latency", duration(step.step_seconds));
  line(out, "iter latency", duration(step.iteration_seconds));
  std::snprintf(label, sizeof label, "FLOPS per rank = %g * fwd flops per rank * %g / iter latency", hardware_factor,
                gas);
  line(out, label, si(rate(hardware_factor * fwd_flops * gas, step.iteration_seconds), "FLOPS"));
  line(out, "samples/second",
       si(rate(static_cast<double>(step.micro_batch) * gas * step.data_parallel_size, step.iteration_seconds)));
  line(out, "GEMM peak per rank (measured, torch::mm)", si(step.peak_flops, "FLOPS"));
  line(out, "MFU = 3 * fwd flops per rank * gas / iter latency / GEMM peak",
       percent(model_flops_per_second, step.peak_flops));
  if (step.stages > 1)
    line(out, "MFU of the pipeline = all ranks' flops / (ranks * peak * iter latency)",
         percent(step.pipeline_mfu, 1));

  std::vector<std::vector<const ModuleProfile*>> by_depth;
  collect(model, 0, by_depth);
  const int deepest = settings.module_depth < 0 ? static_cast<int>(by_depth.size()) - 1
                                                : std::min<int>(settings.module_depth, static_cast<int>(by_depth.size()) - 1);
  out << "\n----------------------------- Aggregated Profile per rank -----------------------------\n"
      << "Top " << settings.top_modules << " modules in terms of params and MACs at different model depths:\n";
  for (int depth = 0; depth <= deepest; ++depth) {
    out << "depth " << depth << ":\n"
        << "    params      - "
        << top_types(by_depth[depth], settings.top_modules, [](const ModuleProfile& m) { return double(m.params); }, "")
        << "\n"
        << "    MACs        - "
        << top_types(by_depth[depth], settings.top_modules, [](const ModuleProfile& m) { return m.macs(); }, "MACs")
        << "\n";
  }
  if (settings.detailed) {
    out << "\n------------------------------ Detailed Profile per rank ------------------------------\n"
        << "Each module profile is listed after its name in the following order:\n"
        << "params, percentage of total params, MACs, percentage of total MACs, fwd flops\n"
        << "(fwd latency per module is not measured: LibTorch's C++ modules have no forward hooks)\n\n";
    tree(out, model, model, 0, settings.module_depth, "");
  }
  out << "------------------------------------------------------------------------------";
  return out.str();
}

void emit_model_profile(const std::string& text, const FlopsProfilerSettings& settings) {
  if (settings.output_file.empty()) {
    std::istringstream lines(text);
    for (std::string each; std::getline(lines, each);) log::info(each);
    return;
  }
  errno = 0;
  std::ofstream file(settings.output_file, std::ios::trunc);
  file << text << '\n' << std::flush;
  if (!file)
    throw Error("cannot write the flops profile").with_key("flops_profiler.output_file").with_path(settings.output_file).with_errno(errno);
  log::info("flops profile written to ", settings.output_file);
}

}  // namespace ds::profiler
