#include "dstrain/zero/init.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/distributed.hpp"
#include "dstrain/io/aio_settings.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "partition_file.hpp"

namespace ds::zero {
namespace {
thread_local Init* t_active = nullptr;

at::ScalarType model_dtype(const Config& config) {
  if (config.bf16().enabled) return at::kBFloat16;
  if (config.fp16().enabled) return at::kHalf;
  return at::kFloat;
}

// A chunk built onto NVMe: the context of its storage's DataPtr, recognized by its deleter (c10's
// pattern for storages that carry more than memory). The storage itself holds one element, the
// chunk's first, which is all a parameter with strides 0 can reach.
struct ChunkOnDisk {
  std::shared_ptr<PartitionFile> file;  // shared by the chunks: the folder goes with the last one
  int64_t offset;                       // bytes into the file
  int64_t numel;
  alignas(16) unsigned char first[16];
};

void delete_chunk_on_disk(void* context) { delete static_cast<ChunkOnDisk*>(context); }

const ChunkOnDisk* chunk_on_disk(const at::Tensor& param) {
  const c10::DataPtr& data = param.storage().data_ptr();
  return data.get_deleter() == &delete_chunk_on_disk ? static_cast<const ChunkOnDisk*>(data.get_context()) : nullptr;
}

// chunk, written to file, as a tensor of `sizes` with strides 0 over a one-element storage.
at::Tensor put_on_disk(const at::Tensor& chunk, at::IntArrayRef sizes, const std::shared_ptr<PartitionFile>& file) {
  const int64_t offset = file->append(chunk.data_ptr(), static_cast<int64_t>(chunk.nbytes()));
  auto* context = new ChunkOnDisk{file, offset, chunk.numel(), {}};
  std::memcpy(context->first, chunk.data_ptr(), chunk.element_size());
  c10::DataPtr data(context->first, context, &delete_chunk_on_disk, chunk.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), chunk.element_size(), std::move(data));
  return at::empty({0}, chunk.options()).set_(storage, 0, sizes, std::vector<int64_t>(sizes.size(), 0));
}
}  // namespace

Init::Init(const Config& config, std::shared_ptr<comm::Backend> group) {
  const ZeroConfig& zero = config.zero_optimization();
  if (zero.stage != 3) return;
  group_ = group ? std::move(group) : comm::init_distributed("mpi");
  if (group_->world_size() == 1) return;
  if (zero.offload_param.device == OffloadDevice::Nvme)
    file_ = std::make_shared<PartitionFile>(zero.offload_param.nvme_path, group_->rank(), io::aio_settings(config.aio()));
  enabled_ = true;
  dtype_ = model_dtype(config);
  persistence_threshold_ = zero.stage3_param_persistence_threshold;
  previous_ = t_active;
  t_active = this;
}

Init::~Init() {
  if (!enabled_) return;
  t_active = previous_;
  // Not when unwinding: the build failed, and the folder goes with the model being dropped.
  if (file_ && std::uncaught_exceptions() == 0)
    log::info("zero.Init: this rank's partition (", file_->bytes(), " bytes, chunks padded to 4 KiB) was built "
              "onto NVMe in ", file_->path(), " (offload_param); the engine moves it to its swap file");
}

Init* Init::active() { return t_active; }

void Init::partition(torch::nn::Module& module) {
  if (!enabled_) return;
  at::NoGradGuard no_grad;
  const int ranks = group_->world_size();
  for (at::Tensor& param : module.parameters()) {
    if (!param.requires_grad() || is_partitioned(param)) continue;
    at::Tensor whole = param.detach().to(dtype_).contiguous();
    group_->broadcast(whole, 0);
    const int64_t numel = whole.numel();
    const int64_t chunk = (numel + ranks - 1) / ranks;
    if (numel <= persistence_threshold_ || chunk == numel) {
      param.set_data(whole);
      continue;
    }
    at::Tensor mine = at::zeros({chunk}, whole.options());
    const int64_t begin = std::min<int64_t>(group_->rank() * chunk, numel);
    const int64_t valid = std::min<int64_t>(chunk, numel - begin);
    if (valid > 0) mine.narrow(0, 0, valid).copy_(whole.view({-1}).narrow(0, begin, valid));
    whole = at::Tensor();  // freed before the next parameter is broadcast
    param.set_data(file_ ? put_on_disk(mine, param.sizes(), file_)
                         : mine.as_strided(param.sizes(), std::vector<int64_t>(param.dim(), 0)));
  }
}

void partition_built(torch::nn::Module& module) {
  if (Init* init = Init::active()) init->partition(module);
}

bool is_partitioned(const at::Tensor& param) {
  if (param.numel() <= 1) return false;
  for (int64_t stride : param.strides())
    if (stride != 0) return false;
  return true;
}

at::Tensor partition_chunk(const at::Tensor& param) {
  if (!is_partitioned(param)) throw Error("partition_chunk: the parameter was not built partitioned");
  const at::TensorOptions options = param.options().requires_grad(false);
  if (const ChunkOnDisk* disk = chunk_on_disk(param)) {
    at::Tensor chunk = at::empty({disk->numel}, options);
    disk->file->read(disk->offset, chunk.data_ptr(), static_cast<int64_t>(chunk.nbytes()));
    return chunk;
  }
  const int64_t chunk = static_cast<int64_t>(param.storage().nbytes()) / param.element_size();
  return at::empty({0}, options).set_(param.storage(), 0, {chunk}, {1});
}

}  // namespace ds::zero
