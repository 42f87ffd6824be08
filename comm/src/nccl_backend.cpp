// NcclBackend: collectives are enqueued on the caller's current CUDA stream (as c10d's NCCL process
// group does with its own streams), so they are ordered with the computation around them; barrier()
// and the point where a staged copy is written back are the only host synchronizations. CPU tensors
// (a loss to average, a flag to agree on) are staged through this rank's GPU, as MpiBackend stages
// CUDA tensors through the host: callers need not know the transport.
#include "dstrain/comm/nccl_backend.hpp"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include "dstrain/comm/job.hpp"
#include "dstrain/comm/mpi_backend.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/comm/onebit_tensor_ops.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/rank_env.hpp"
#include "staged_tensor.hpp"

namespace ds::comm {
namespace {

void check_nccl(ncclResult_t result, const char* call) {
  if (result != ncclSuccess)
    throw Error(std::string(call) + " failed: " + ncclGetErrorString(result)).with_rank(log::rank());
}

void check_cuda(cudaError_t result, const char* call) {
  if (result != cudaSuccess)
    throw Error(std::string(call) + " failed: " + cudaGetErrorString(result)).with_rank(log::rank());
}

ncclDataType_t nccl_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return ncclFloat32;
    case at::kDouble: return ncclFloat64;
    case at::kBFloat16: return ncclBfloat16;
    case at::kHalf: return ncclFloat16;
    case at::kLong: return ncclInt64;
    case at::kInt: return ncclInt32;
    case at::kByte: return ncclUint8;
    default: throw Error(std::string("dtype ") + c10::toString(dtype) + " is not supported by NcclBackend");
  }
}

ncclRedOp_t nccl_op(ReduceOp op, at::ScalarType dtype) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg:
      if (!at::isFloatingType(dtype))
        throw Error(std::string("avg is defined for floating-point tensors only, not ") + c10::toString(dtype));
      return ncclAvg;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Min: return ncclMin;
  }
  throw Error("unknown reduce op");
}

void check_cuda_tensor(const at::Tensor& t, const char* role) {
  if (!t.defined() || !t.is_cuda())
    throw Error(std::string("NcclBackend: ") + role + " must be a CUDA tensor").with_rank(log::rank());
}

// A recorded call is timed to the end of its transfer: the host waits for the stream once the call
// is enqueued (as DeepSpeed's comms timers synchronize), which a call not recorded never does.
void end_recorded(CommsLogger& logger, const CommsLogger::Timing& timing, cudaStream_t stream, int world) {
  if (!timing.op) return;
  check_cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  logger.end(timing, world);
}

int64_t bytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// An operation enqueued on a stream; wait() makes the caller's current stream wait for it.
class NcclWork final : public Work {
 public:
  NcclWork(cudaStream_t stream, std::vector<std::shared_ptr<StagedTensor>> keep, bool copy_back_last)
      : keep_(std::move(keep)), copy_back_last_(copy_back_last) {
    check_cuda(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(done_, stream), "cudaEventRecord");
  }
  ~NcclWork() override { cudaEventDestroy(done_); }
  void wait() override {
    check_cuda(cudaStreamWaitEvent(c10::cuda::getCurrentCUDAStream().stream(), done_, 0), "cudaStreamWaitEvent");
    if (copy_back_last_ && !keep_.empty()) keep_.back()->copy_back();
    keep_.clear();
  }

 private:
  cudaEvent_t done_;
  std::vector<std::shared_ptr<StagedTensor>> keep_;  // the tensors stay alive until waited for
  bool copy_back_last_;
};

}  // namespace

struct NcclBackend::State {
  std::shared_ptr<MpiBackend> bootstrap;  // the same ranks over MPI: unique id exchange, split, abort
  ncclComm_t comm = nullptr;
  int device = 0;

  explicit State(std::shared_ptr<MpiBackend> group) : bootstrap(std::move(group)) {
    int devices = 0;
    check_cuda(cudaGetDeviceCount(&devices), "cudaGetDeviceCount");
    if (devices == 0) throw Error("NcclBackend: no CUDA device").with_rank(bootstrap->rank());
    const RankEnv env = rank_env_from_environment();
    // NCCL refuses two ranks on one GPU ("invalid usage"); say so, and what works instead.
    if (env.local_size > devices)
      throw Error(log::concat("NcclBackend: ", env.local_size, " ranks on this node share ", devices,
                              " GPU(s), and NCCL takes one rank per GPU; start at most ", devices,
                              " ranks per node, or use the MPI backend (dstrain.backend \"mpi\"), which stages CUDA "
                              "tensors through host memory"))
          .with_rank(bootstrap->rank());
    device = env.local_rank % devices;
    check_cuda(cudaSetDevice(device), "cudaSetDevice");
    ncclUniqueId id;
    if (bootstrap->rank() == 0) check_nccl(ncclGetUniqueId(&id), "ncclGetUniqueId");
    const at::Tensor id_bytes = at::from_blob(&id, {int64_t(sizeof(id))}, at::kByte);
    bootstrap->broadcast(id_bytes, 0);
    check_nccl(ncclCommInitRank(&comm, bootstrap->world_size(), id, bootstrap->rank()), "ncclCommInitRank");
  }
  ~State() {
    if (comm) ncclCommDestroy(comm);
  }

  cudaStream_t stream() const { return c10::cuda::getCurrentCUDAStream(device).stream(); }
  at::Device gpu() const { return at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(device)); }
};

NcclBackend::NcclBackend() : NcclBackend(std::make_unique<State>(std::make_shared<MpiBackend>(false))) {}
NcclBackend::NcclBackend(std::unique_ptr<State> state) : state_(std::move(state)) {}
NcclBackend::~NcclBackend() = default;

int NcclBackend::rank() const { return state_->bootstrap->rank(); }
int NcclBackend::world_size() const { return state_->bootstrap->world_size(); }

void NcclBackend::all_reduce(const at::Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }

std::unique_ptr<Work> NcclBackend::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("all_reduce", bytes_of(tensor), "ncclAllReduce");
  auto staged = std::make_shared<StagedTensor>(tensor, state_->gpu());
  check_nccl(ncclAllReduce(staged->data(), staged->data(), tensor.numel(), nccl_type(tensor.scalar_type()),
                           nccl_op(op, tensor.scalar_type()), state_->comm, state_->stream()),
             "ncclAllReduce");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  return std::make_unique<NcclWork>(state_->stream(), std::vector{staged}, true);
}

void NcclBackend::all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  if (static_cast<int>(outputs.size()) != world_size())
    throw Error(log::concat("all_gather: got ", outputs.size(), " outputs for ", world_size(), " ranks"));
  if (outputs[rank()].numel() != input.numel())
    throw Error("all_gather: this rank's output slot and input differ in size").with_rank(rank());
  c10::cuda::CUDAGuard guard(state_->device);
  int64_t total_bytes = 0;
  for (const auto& output : outputs) total_bytes += bytes_of(output);
  const auto timing = comms_logger_->begin("all_gather", total_bytes, "ncclBroadcast from each rank, grouped");
  // Unequal sizes: one broadcast per source rank, grouped into one NCCL launch.
  const at::Tensor in = input.to(state_->gpu()).contiguous();
  std::vector<StagedTensor> staged;
  for (const auto& output : outputs) {
    staged.emplace_back(output, state_->gpu());
  }
  const ncclDataType_t type = nccl_type(input.scalar_type());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < world_size(); ++r)
    check_nccl(ncclBroadcast(r == rank() ? in.data_ptr() : nullptr, staged[r].data(), outputs[r].numel(), type, r,
                             state_->comm, state_->stream()),
               "ncclBroadcast");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  for (const auto& s : staged) s.copy_back();
}

void NcclBackend::all_gather_into(const at::Tensor& output, const at::Tensor& input) {
  all_gather_into_async(output, input)->wait();
}

std::unique_ptr<Work> NcclBackend::all_gather_into_async(at::Tensor output, at::Tensor input) {
  if (output.numel() != world_size() * input.numel())
    throw Error(log::concat("all_gather_into: output has ", output.numel(), " elements, not world size ",
                            world_size(), " x input's ", input.numel()));
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("all_gather_into", bytes_of(output), "ncclAllGather");
  auto in = std::make_shared<StagedTensor>(input, state_->gpu());
  auto out = std::make_shared<StagedTensor>(output, state_->gpu());
  check_nccl(ncclAllGather(in->data(), out->data(), input.numel(), nccl_type(input.scalar_type()), state_->comm,
                           state_->stream()),
             "ncclAllGather");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  return std::make_unique<NcclWork>(state_->stream(), std::vector{in, out}, true);
}

void NcclBackend::reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op) {
  if (static_cast<int>(inputs.size()) != world_size())
    throw Error(log::concat("reduce_scatter: got ", inputs.size(), " inputs for ", world_size(), " ranks"));
  if (inputs[rank()].numel() != output.numel())
    throw Error("reduce_scatter: this rank's input part and output differ in size").with_rank(rank());
  c10::cuda::CUDAGuard guard(state_->device);
  int64_t total_bytes = 0;
  for (const auto& input : inputs) total_bytes += bytes_of(input);
  const auto timing = comms_logger_->begin("reduce_scatter", total_bytes, "ncclReduce to each rank, grouped");
  // Unequal sizes: one reduce per destination rank, grouped into one NCCL launch.
  StagedTensor out(output, state_->gpu());
  std::vector<at::Tensor> in;
  for (const auto& input : inputs) {
    in.push_back(input.to(state_->gpu()).contiguous());
  }
  const ncclDataType_t type = nccl_type(output.scalar_type());
  const ncclRedOp_t nop = nccl_op(op, output.scalar_type());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int r = 0; r < world_size(); ++r)
    check_nccl(ncclReduce(in[r].data_ptr(), r == rank() ? out.data() : nullptr, in[r].numel(), type, nop, r,
                          state_->comm, state_->stream()),
               "ncclReduce");
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  out.copy_back();
}

void NcclBackend::reduce_scatter_into(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  reduce_scatter_into_async(output, input, op)->wait();
}

std::unique_ptr<Work> NcclBackend::reduce_scatter_into_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  if (input.numel() != world_size() * output.numel())
    throw Error(log::concat("reduce_scatter_into: input has ", input.numel(), " elements, not world size ",
                            world_size(), " x output's ", output.numel()));
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("reduce_scatter_into", bytes_of(input), "ncclReduceScatter");
  auto in = std::make_shared<StagedTensor>(input, state_->gpu());
  auto out = std::make_shared<StagedTensor>(output, state_->gpu());
  check_nccl(ncclReduceScatter(in->data(), out->data(), output.numel(), nccl_type(output.scalar_type()),
                               nccl_op(op, output.scalar_type()), state_->comm, state_->stream()),
             "ncclReduceScatter");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  return std::make_unique<NcclWork>(state_->stream(), std::vector{in, out}, true);
}

void NcclBackend::broadcast(const at::Tensor& tensor, int src) {
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("broadcast", bytes_of(tensor), "ncclBroadcast");
  StagedTensor staged(tensor, state_->gpu());
  check_nccl(ncclBroadcast(staged.data(), staged.data(), tensor.numel(), nccl_type(tensor.scalar_type()), src,
                           state_->comm, state_->stream()),
             "ncclBroadcast");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  staged.copy_back();
}

void NcclBackend::send(const at::Tensor& tensor, int dst, int /*tag: NCCL matches by order*/) {
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("send", bytes_of(tensor), "ncclSend");
  const at::Tensor in = tensor.to(state_->gpu()).contiguous();
  check_nccl(ncclSend(in.data_ptr(), in.numel(), nccl_type(in.scalar_type()), dst, state_->comm, state_->stream()),
             "ncclSend");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
}

void NcclBackend::recv(const at::Tensor& tensor, int src, int /*tag*/) {
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("recv", bytes_of(tensor), "ncclRecv");
  StagedTensor staged(tensor, state_->gpu());
  check_nccl(ncclRecv(staged.data(), tensor.numel(), nccl_type(tensor.scalar_type()), src, state_->comm,
                      state_->stream()),
             "ncclRecv");
  end_recorded(*comms_logger_, timing, state_->stream(), world_size());
  staged.copy_back();
}

void NcclBackend::barrier() {
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin("barrier", 0, "ncclAllReduce of one value, then stream synchronize");
  const at::Tensor token = at::zeros({1}, at::TensorOptions().device(at::kCUDA, state_->device));
  all_reduce(token);
  check_cuda(cudaStreamSynchronize(state_->stream()), "cudaStreamSynchronize");
  comms_logger_->end(timing, world_size());
}

std::shared_ptr<Backend> NcclBackend::split(int color, int key) {
  std::shared_ptr<Backend> group = state_->bootstrap->split(color, key);
  if (!group) return nullptr;
  std::shared_ptr<NcclBackend> nccl_group(
      new NcclBackend(std::make_unique<State>(std::static_pointer_cast<MpiBackend>(group))));
  nccl_group->comms_logger_ = comms_logger_;
  return nccl_group;
}

// The algorithm of mpi_compressed_allreduce.cpp with the arithmetic of onebit_tensor_ops on the GPU:
// an all-to-all of the packed sign chunks (grouped sends and receives), then an all-gather of the
// servers' chunks.
at::Tensor NcclBackend::compressed_allreduce(at::Tensor buffer, at::Tensor worker_error, at::Tensor server_error,
                                             int /*local_rank: this backend's device was chosen at start*/) {
  for (const at::Tensor* t : {&buffer, &worker_error, &server_error}) {
    check_cuda_tensor(*t, "compressed_allreduce argument");
    if (t->scalar_type() != at::kFloat) throw Error("compressed_allreduce needs float32 tensors").with_rank(rank());
  }
  const onebit::Layout layout =
      onebit::checked_layout(buffer.numel(), worker_error.numel(), server_error.numel(), world_size());
  c10::cuda::CUDAGuard guard(state_->device);
  const auto timing = comms_logger_->begin(
      "compressed_allreduce", bytes_of(buffer),
      "1-bit: grouped ncclSend/ncclRecv of signs, ncclAllGather of scales, of server signs, of server scales");
  const int world = world_size();
  const cudaStream_t stream = state_->stream();
  const int64_t chunk_bytes = layout.chunk_bytes();

  StagedTensor staged_worker_error(worker_error, true), staged_server_error(server_error, true);
  at::Tensor x = buffer.reshape({-1}).contiguous();
  if (layout.padded != layout.numel) x = at::constant_pad_nd(x, {0, layout.padded - layout.numel});
  auto [worker_scale, packed] = onebit::compress_with_feedback(x, staged_worker_error.tensor());

  at::Tensor received = at::empty({world, chunk_bytes}, packed.options());
  at::Tensor worker_scales = at::empty({world}, worker_scale.options());
  check_nccl(ncclGroupStart(), "ncclGroupStart");
  for (int j = 0; j < world; ++j) {
    check_nccl(ncclSend(packed.data_ptr<uint8_t>() + j * chunk_bytes, chunk_bytes, ncclUint8, j, state_->comm, stream),
               "ncclSend");
    check_nccl(ncclRecv(received[j].data_ptr(), chunk_bytes, ncclUint8, j, state_->comm, stream), "ncclRecv");
  }
  check_nccl(ncclGroupEnd(), "ncclGroupEnd");
  check_nccl(ncclAllGather(worker_scale.data_ptr(), worker_scales.data_ptr(), 1, ncclFloat32, state_->comm, stream),
             "ncclAllGather");

  // DeepSpeed scales each worker's scale by 1/world before summing the decoded chunks.
  const at::Tensor compensated = onebit::unpack_signs(received, worker_scales.mul(1.0 / world)).sum(0);
  auto [server_scale, server_packed] = onebit::compress_with_feedback(compensated, staged_server_error.tensor());

  at::Tensor gathered = at::empty({world, chunk_bytes}, server_packed.options());
  at::Tensor server_scales = at::empty({world}, server_scale.options());
  check_nccl(ncclAllGather(server_packed.data_ptr(), gathered.data_ptr(), chunk_bytes, ncclUint8, state_->comm, stream),
             "ncclAllGather");
  check_nccl(ncclAllGather(server_scale.data_ptr(), server_scales.data_ptr(), 1, ncclFloat32, state_->comm, stream),
             "ncclAllGather");
  const at::Tensor result = onebit::unpack_signs(gathered, server_scales).view({-1});
  end_recorded(*comms_logger_, timing, stream, world);

  staged_worker_error.copy_back();
  staged_server_error.copy_back();
  buffer.copy_(result.narrow(0, 0, layout.numel).view(buffer.sizes()));
  return buffer;
}

void NcclBackend::abort(const std::string& message) {
  ncclCommAbort(state_->comm);
  state_->comm = nullptr;
  abort_job(message);
}

}  // namespace ds::comm
