#include "consistency_check.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::app {
namespace {

constexpr int64_t kHostBytes = 64;

uint32_t executable_crc32c() {
  const char* path = "/proc/self/exe";
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot read this program's executable to check the build").with_path(path).with_errno(errno);
  std::vector<char> chunk(1 << 20);
  uint32_t crc = 0;
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0)
    crc = io::crc32c(crc, chunk.data(), static_cast<size_t>(in.gcount()));
  if (in.bad()) throw Error("reading this program's executable failed").with_path(path).with_errno(errno);
  return crc;
}

std::string host_name() {
  char name[kHostBytes] = {};
  // A name longer than the buffer is cut; enough to tell the nodes apart.
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown-host";
  return name;
}

std::string hex(int64_t crc) {
  char text[16];
  std::snprintf(text, sizeof text, "%08x", static_cast<uint32_t>(crc));
  return text;
}

}  // namespace

void check_same_build_and_config(comm::Backend& world, const std::string& effective_config, c10::Device device) {
  const int n = world.world_size();
  const auto on_device = torch::TensorOptions().device(device);
  // Per rank: [build crc, config crc], then the host name's bytes.
  const torch::Tensor mine =
      torch::tensor({static_cast<int64_t>(executable_crc32c()),
                     static_cast<int64_t>(io::crc32c(0, effective_config.data(), effective_config.size()))},
                    torch::kInt64);
  torch::Tensor host = torch::zeros({kHostBytes}, torch::kUInt8);
  const std::string name = host_name();
  std::memcpy(host.data_ptr<uint8_t>(), name.data(), name.size());
  torch::Tensor hashes = torch::empty({2 * n}, on_device.dtype(torch::kInt64));
  torch::Tensor hosts = torch::empty({kHostBytes * n}, on_device.dtype(torch::kUInt8));
  world.all_gather_into(hashes, mine.to(device));
  world.all_gather_into(hosts, host.to(device));
  hashes = hashes.cpu();
  hosts = hosts.cpu();
  const auto* h = hashes.data_ptr<int64_t>();
  auto host_of = [&](int r) { return std::string(reinterpret_cast<const char*>(hosts.data_ptr<uint8_t>()) + r * kHostBytes); };

  std::string differences;
  for (int r = 1; r < n; ++r) {
    std::vector<std::string> what;
    if (h[2 * r] != h[0]) what.push_back("build (executable crc32c " + hex(h[2 * r]) + ", rank 0's " + hex(h[0]) + ")");
    if (h[2 * r + 1] != h[1])
      what.push_back("config (effective config crc32c " + hex(h[2 * r + 1]) + ", rank 0's " + hex(h[1]) + ")");
    if (what.empty()) continue;
    differences += "; rank " + std::to_string(r) + " on host " + host_of(r) + " differs in its " + what[0];
    if (what.size() == 2) differences += " and its " + what[1];
  }
  if (!differences.empty())
    throw Error("not every rank runs rank 0's build and config (rank 0 on host " + host_of(0) + ")" + differences +
                ": run the same dstrain executable with the same config and --set on every node");
  log::info("start check: ", n, " ranks run the same build (executable crc32c ", hex(h[0]), ") and config (crc32c ",
            hex(h[1]), ")");
}

}  // namespace ds::app
