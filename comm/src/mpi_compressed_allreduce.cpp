// MpiBackend::compressed_allreduce: DeepSpeed's 1-bit allreduce with error feedback
// (deepspeed/runtime/comm/mpi.py), the arithmetic in onebit_kernels, the bytes through MPI:
//
//   worker:  x = pad(buffer) + worker_error; s = ‖x‖/√n; worker_error = x − s·sign(x)
//   phase 1: chunk j of sign(x) (n/8/world bytes) and s go to rank j      (MPI_Ialltoall, MPI_Iallgather)
//   server:  c = Σ_j s_j/world · sign_j + server_error over this rank's chunk;
//            t = ‖c‖/√m; server_error = c − t·sign(c)
//   phase 2: every rank's sign(c) chunk and t go to every rank           (MPI_Iallgather ×2)
//   result:  chunk j = t_j · sign(c_j), trimmed to the buffer's length
#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

#include "dstrain/comm/mpi_backend.hpp"
#include "dstrain/comm/onebit_kernels.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "mpi_backend_impl.hpp"
#include "mpi_checked_call.hpp"
#include "mpi_errors.hpp"
#include "staged_tensor.hpp"

namespace ds::comm {
namespace {

std::string float32_problem(const at::Tensor& t, const char* role) {
  if (!t.defined()) return std::string(role) + " is an undefined tensor";
  if (t.scalar_type() != at::kFloat)
    return std::string(role) + " has dtype " + c10::toString(t.scalar_type()) + "; compressed_allreduce needs float32";
  return "";
}

}  // namespace

at::Tensor MpiBackend::compressed_allreduce(at::Tensor buffer, at::Tensor worker_error, at::Tensor server_error,
                                            int /*local_rank: DeepSpeed's GPU for cupy; the kernels here run on the CPU*/) {
  const auto timing = comms_logger_->begin(
      "compressed_allreduce", buffer.defined() ? buffer.numel() * int64_t{4} : 0,
      "1-bit: MPI_Ialltoall of signs, MPI_Iallgather of scales, of server signs, of server scales");
  std::string problem;
  for (auto [tensor, role] : {std::pair{&buffer, "buffer"}, {&worker_error, "worker_error"}, {&server_error, "server_error"}})
    if (problem.empty()) problem = float32_problem(*tensor, role);
  if (problem.empty()) {
    try {
      const auto layout = onebit::checked_layout(buffer.numel(), worker_error.numel(), server_error.numel(), world_size());
      mpi_count(layout.chunk_bytes(), "compressed_allreduce chunk");
    } catch (const Error& e) {
      problem = e.message();
    }
  }
  const int64_t numel = buffer.defined() ? buffer.numel() : -1;
  auto call = impl_->begin("compressed_allreduce", {numel}, log::concat("a buffer of ", numel, " values"), problem);
  const onebit::Layout layout =
      onebit::checked_layout(buffer.numel(), worker_error.numel(), server_error.numel(), world_size());

  StagedTensor staged_worker_error(worker_error, worker_error.is_cpu());
  StagedTensor staged_server_error(server_error, server_error.is_cpu());
  const int world = world_size();
  const int chunk_bytes = mpi_count(layout.chunk_bytes(), "compressed_allreduce chunk");
  // x is the padded buffer: the buffer itself when it is a contiguous CPU array of the padded length
  // (updated in place, as DeepSpeed does), else a padded copy in the scratch.
  StagedTensor staged_buffer(buffer, buffer.is_cpu());
  const bool in_place = layout.padded == layout.numel;
  // Scratch, in order: the padded copy (if any), the packed signs sent, received, and served.
  const int64_t copy_bytes = in_place ? 0 : layout.padded * 4;
  const int64_t scratch_bytes = copy_bytes + 2 * (layout.padded / 8) + chunk_bytes;
  if (!impl_->compression_scratch_.defined() || impl_->compression_scratch_.numel() < scratch_bytes)
    impl_->compression_scratch_ = at::empty({scratch_bytes}, at::kByte);
  uint8_t* const scratch = impl_->compression_scratch_.data_ptr<uint8_t>();
  float* const values = in_place ? staged_buffer.tensor().data_ptr<float>() : reinterpret_cast<float*>(scratch);
  uint8_t* const packed = scratch + copy_bytes;
  uint8_t* const received = packed + layout.padded / 8;
  uint8_t* const server_packed = received + layout.padded / 8;
  if (!in_place) {
    std::copy_n(staged_buffer.tensor().data_ptr<float>(), layout.numel, values);
    std::fill(values + layout.numel, values + layout.padded, 0.0f);
  }

  const float worker_scale = onebit::compress_with_feedback(
      values, staged_worker_error.tensor().data_ptr<float>(), layout.padded, packed);
  std::vector<float> worker_scales(world);
  impl_->post(*call,
       [&](int, MPI_Request* request) {
         return MPI_Ialltoall(packed, chunk_bytes, MPI_BYTE, received, chunk_bytes, MPI_BYTE, impl_->comm_, request);
       },
       "MPI_Ialltoall");
  impl_->finish(*call);
  // The later phases are part of the same call, its arguments already checked; no other call of
  // the group is queued behind it, since this rank begins none before returning.
  MPI_Request* request = call->request();
  const auto phase = [&](int rc, const char* mpi_call) {
    check_mpi(rc, mpi_call);
    impl_->wait(*request, "compressed_allreduce", call->number(), impl_->peers_, mpi_call);
  };
  phase(MPI_Iallgather(&worker_scale, 1, MPI_FLOAT, worker_scales.data(), 1, MPI_FLOAT, impl_->comm_, request),
        "MPI_Iallgather");

  // DeepSpeed scales each worker's scale by 1/world before summing: the same float operations here.
  std::vector<float> weights(world);
  const float inverse_world = static_cast<float>(1.0 / world);
  for (int j = 0; j < world; ++j) weights[j] = worker_scales[j] * inverse_world;
  const float server_scale = onebit::compress_sum_with_feedback(
      received, weights.data(), world, staged_server_error.tensor().data_ptr<float>(), layout.chunk, server_packed);

  std::vector<float> server_scales(world);
  phase(MPI_Iallgather(server_packed, chunk_bytes, MPI_BYTE, received, chunk_bytes, MPI_BYTE, impl_->comm_, request),
        "MPI_Iallgather");
  phase(MPI_Iallgather(&server_scale, 1, MPI_FLOAT, server_scales.data(), 1, MPI_FLOAT, impl_->comm_, request),
        "MPI_Iallgather");
  for (int j = 0; j < world; ++j)
    onebit::unpack_signs(received + int64_t{j} * chunk_bytes, layout.chunk, server_scales[j],
                         values + j * layout.chunk);

  staged_worker_error.copy_back();
  staged_server_error.copy_back();
  if (values != buffer.data_ptr())
    buffer.copy_(at::from_blob(values, {layout.numel}, at::kFloat).view(buffer.sizes()));
  comms_logger_->end(timing, world);
  return buffer;
}

}  // namespace ds::comm
