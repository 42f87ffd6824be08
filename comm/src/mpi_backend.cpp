#include "dstrain/comm/mpi_backend.hpp"

#include <ATen/ATen.h>

#include <functional>
#include <sstream>
#include <utility>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "mpi_errors.hpp"
#include "mpi_float16_ops.hpp"
#include "staged_tensor.hpp"

namespace ds::comm {
namespace {

bool mpi_finalized() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  return finalized != 0;
}

MPI_Comm duplicate_world() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED)
      log::warn("MPI provides thread level ", provided, " only; dstrain calls MPI from one thread at a time");
  } else if (mpi_finalized()) {
    throw Error("MpiBackend created after MPI was finalized");
  }
  MPI_Comm comm;
  MPI_Comm_dup(MPI_COMM_WORLD, &comm);
  return comm;
}

bool supported(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: case at::kDouble: case at::kBFloat16: case at::kHalf:
    case at::kLong: case at::kInt: case at::kByte:
      return true;
    default:
      return false;
  }
}

MPI_Datatype mpi_type(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat: return MPI_FLOAT;
    case at::kDouble: return MPI_DOUBLE;
    case at::kBFloat16: case at::kHalf: return MPI_UINT16_T;  // reduced by the float16 ops
    case at::kLong: return MPI_INT64_T;
    case at::kInt: return MPI_INT32_T;
    case at::kByte: return MPI_UINT8_T;
    default: throw Error(std::string("dtype ") + c10::toString(dtype) + " is not supported by MpiBackend");
  }
}

std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "undefined";
  std::ostringstream out;
  out << c10::toString(t.scalar_type()) << t.sizes();
  return out.str();
}

// What is wrong with a tensor argument for MPI, or "".
std::string tensor_problem(const at::Tensor& t, const std::string& role) {
  if (!t.defined()) return role + " is an undefined tensor";
  if (!supported(t.scalar_type()))
    return role + " has dtype " + c10::toString(t.scalar_type()) +
           " (supported: float32, float64, bfloat16, float16, int64, int32, uint8)";
  return "";
}

std::string op_problem(ReduceOp op, const at::Tensor& t) {
  if (op == ReduceOp::Avg && t.defined() && !at::isFloatingType(t.scalar_type()))
    return std::string("avg is defined for floating-point tensors only, not ") + c10::toString(t.scalar_type());
  return "";
}

std::string first_problem(std::initializer_list<std::string> problems) {
  for (const auto& p : problems)
    if (!p.empty()) return p;
  return "";
}

int64_t numel_or_missing(const at::Tensor& t) { return t.defined() ? t.numel() : -1; }
int64_t dtype_or_missing(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1; }

class MpiWork final : public Work {
 public:
  MpiWork(MPI_Request request, std::function<void()> finish) : request_(request), finish_(std::move(finish)) {}
  // MPI may still be writing into the tensors: an unwaited handle waits before it lets them go.
  ~MpiWork() override {
    if (done_) return;
    try {
      wait();
    } catch (const std::exception& e) {
      log::error("asynchronous collective failed: ", e.what());
    }
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    check_mpi(MPI_Wait(&request_, MPI_STATUS_IGNORE), "MPI_Wait");
    finish_();
  }

 private:
  MPI_Request request_;
  std::function<void()> finish_;
  bool done_ = false;
};

}  // namespace

MpiBackend::MpiBackend(bool cuda_aware) : MpiBackend(duplicate_world(), cuda_aware) {}

MpiBackend::MpiBackend(MPI_Comm comm, bool cuda_aware) : comm_(comm), cuda_aware_(cuda_aware) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  bfloat16_ops_ = create_bfloat16_ops();
  float16_ops_ = create_float16_ops();
}

MpiBackend::~MpiBackend() {
  if (mpi_finalized()) return;  // MPI_Finalize already released everything
  free_float16_ops(bfloat16_ops_);
  free_float16_ops(float16_ops_);
  MPI_Comm_free(&comm_);
}

void MpiBackend::agree(const char* collective, std::vector<int64_t> values, const std::string& description,
                       const std::string& problem) const {
  // One MAX-allreduce answers both questions: max(v) == -max(-v) iff all ranks agree on v.
  const size_t n = values.size();
  std::vector<int64_t> local(2 * n + 1), global(2 * n + 1);
  for (size_t i = 0; i < n; ++i) {
    local[i] = values[i];
    local[n + i] = -values[i];
  }
  local[2 * n] = problem.empty() ? 0 : 1;
  check_mpi(MPI_Allreduce(local.data(), global.data(), static_cast<int>(local.size()), MPI_INT64_T, MPI_MAX, comm_),
            "MPI_Allreduce");
  if (!problem.empty()) throw Error(std::string(collective) + ": " + problem).with_rank(rank_);
  if (global[2 * n] != 0)
    throw Error(std::string(collective) + ": another rank passed invalid arguments (see its error); this rank passed " +
                description)
        .with_rank(rank_);
  for (size_t i = 0; i < n; ++i)
    if (global[i] != -global[n + i])
      throw Error(std::string(collective) + ": ranks pass tensors of different sizes or dtypes; this rank passed " +
                  description)
          .with_rank(rank_);
}

bool MpiBackend::reachable(const at::Tensor& tensor) const {
  return tensor.is_cpu() || (cuda_aware_ && tensor.is_cuda());
}

MPI_Op MpiBackend::mpi_op(ReduceOp op, at::ScalarType dtype) const {
  const bool float16 = dtype == at::kBFloat16 || dtype == at::kHalf;
  const auto& ops = dtype == at::kBFloat16 ? bfloat16_ops_ : float16_ops_;
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg: return float16 ? ops[kFloat16Sum] : MPI_SUM;
    case ReduceOp::Max: return float16 ? ops[kFloat16Max] : MPI_MAX;
    case ReduceOp::Min: return float16 ? ops[kFloat16Min] : MPI_MIN;
  }
  throw Error("unknown reduce op");
}

void MpiBackend::all_reduce(const at::Tensor& tensor, ReduceOp op) {
  agree("all_reduce", {numel_or_missing(tensor), dtype_or_missing(tensor)}, shape_of(tensor),
        first_problem({tensor_problem(tensor, "tensor"), op_problem(op, tensor)}));
  StagedTensor staged(tensor, reachable(tensor));
  const auto dtype = tensor.scalar_type();
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, staged.data(), mpi_count(tensor.numel(), "all_reduce tensor"), mpi_type(dtype),
                          mpi_op(op, dtype), comm_),
            "MPI_Allreduce");
  if (op == ReduceOp::Avg) staged.tensor().div_(world_size_);
  staged.copy_back();
}

std::unique_ptr<Work> MpiBackend::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  agree("all_reduce_async", {numel_or_missing(tensor), dtype_or_missing(tensor)}, shape_of(tensor),
        first_problem({tensor_problem(tensor, "tensor"), op_problem(op, tensor)}));
  auto staged = std::make_shared<StagedTensor>(tensor, reachable(tensor));
  const auto dtype = tensor.scalar_type();
  MPI_Request request;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, staged->data(), mpi_count(tensor.numel(), "all_reduce tensor"),
                           mpi_type(dtype), mpi_op(op, dtype), comm_, &request),
            "MPI_Iallreduce");
  const int world = world_size_;
  return std::make_unique<MpiWork>(request, [staged, op, world] {
    if (op == ReduceOp::Avg) staged->tensor().div_(world);
    staged->copy_back();
  });
}

void MpiBackend::all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  std::string problem = tensor_problem(input, "input");
  if (problem.empty() && static_cast<int>(outputs.size()) != world_size_)
    problem = log::concat("got ", outputs.size(), " output tensors for ", world_size_, " ranks");
  std::vector<int64_t> values(world_size_ + 1, -1);
  for (int r = 0; r < world_size_ && r < static_cast<int>(outputs.size()); ++r) {
    values[r] = numel_or_missing(outputs[r]);
    if (problem.empty() && (!outputs[r].defined() || outputs[r].scalar_type() != input.scalar_type()))
      problem = log::concat("outputs[", r, "] is ", shape_of(outputs[r]), " but the input is ", shape_of(input));
  }
  values[world_size_] = dtype_or_missing(input);
  if (problem.empty() && outputs[rank_].numel() != input.numel())
    problem = log::concat("outputs[", rank_, "] (this rank's slot) is ", shape_of(outputs[rank_]), " but the input is ",
                          shape_of(input));
  agree("all_gather", values, "input " + shape_of(input), problem);

  std::vector<int> counts(world_size_), displacements(world_size_);
  int64_t total = 0;
  for (int r = 0; r < world_size_; ++r) {
    displacements[r] = mpi_count(total, "all_gather output");
    counts[r] = mpi_count(outputs[r].numel(), "all_gather output");
    total += outputs[r].numel();
  }
  mpi_count(total, "all_gather output");
  StagedTensor in(input, reachable(input));
  const auto device = reachable(input) ? input.device() : at::Device(at::kCPU);
  at::Tensor gathered = at::empty({total}, input.options().device(device));
  const MPI_Datatype type = mpi_type(input.scalar_type());
  check_mpi(MPI_Allgatherv(in.data(), counts[rank_], type, gathered.data_ptr(), counts.data(), displacements.data(),
                           type, comm_),
            "MPI_Allgatherv");
  for (int r = 0; r < world_size_; ++r)
    outputs[r].copy_(gathered.narrow(0, displacements[r], counts[r]).view(outputs[r].sizes()));
}

namespace {

std::string gather_into_problem(const at::Tensor& output, const at::Tensor& input, int world) {
  std::string problem = first_problem({tensor_problem(input, "input"), tensor_problem(output, "output")});
  if (problem.empty() && output.scalar_type() != input.scalar_type())
    problem = "output is " + shape_of(output) + " but the input is " + shape_of(input);
  if (problem.empty() && output.numel() != world * input.numel())
    problem = log::concat("output has ", output.numel(), " elements, not world size ", world, " x input's ",
                          input.numel());
  return problem;
}

}  // namespace

void MpiBackend::all_gather_into(const at::Tensor& output, const at::Tensor& input) {
  agree("all_gather_into", {numel_or_missing(input), dtype_or_missing(input)}, "input " + shape_of(input),
        gather_into_problem(output, input, world_size_));
  StagedTensor in(input, reachable(input)), out(output, reachable(output));
  const MPI_Datatype type = mpi_type(input.scalar_type());
  const int count = mpi_count(input.numel(), "all_gather_into input");
  mpi_count(output.numel(), "all_gather_into output");
  check_mpi(MPI_Allgather(in.data(), count, type, out.data(), count, type, comm_), "MPI_Allgather");
  out.copy_back();
}

std::unique_ptr<Work> MpiBackend::all_gather_into_async(at::Tensor output, at::Tensor input) {
  agree("all_gather_into_async", {numel_or_missing(input), dtype_or_missing(input)}, "input " + shape_of(input),
        gather_into_problem(output, input, world_size_));
  auto in = std::make_shared<StagedTensor>(input, reachable(input));
  auto out = std::make_shared<StagedTensor>(output, reachable(output));
  const MPI_Datatype type = mpi_type(input.scalar_type());
  const int count = mpi_count(input.numel(), "all_gather_into input");
  mpi_count(output.numel(), "all_gather_into output");
  MPI_Request request;
  check_mpi(MPI_Iallgather(in->data(), count, type, out->data(), count, type, comm_, &request), "MPI_Iallgather");
  return std::make_unique<MpiWork>(request, [in, out] { out->copy_back(); });
}

void MpiBackend::reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op) {
  std::string problem = first_problem({tensor_problem(output, "output"), op_problem(op, output)});
  if (problem.empty() && static_cast<int>(inputs.size()) != world_size_)
    problem = log::concat("got ", inputs.size(), " input tensors for ", world_size_, " ranks");
  std::vector<int64_t> values(world_size_ + 1, -1);
  for (int r = 0; r < world_size_ && r < static_cast<int>(inputs.size()); ++r) {
    values[r] = numel_or_missing(inputs[r]);
    if (problem.empty() && (!inputs[r].defined() || inputs[r].scalar_type() != output.scalar_type()))
      problem = log::concat("inputs[", r, "] is ", shape_of(inputs[r]), " but the output is ", shape_of(output));
  }
  values[world_size_] = dtype_or_missing(output);
  if (problem.empty() && inputs[rank_].numel() != output.numel())
    problem = log::concat("inputs[", rank_, "] (this rank's part) is ", shape_of(inputs[rank_]), " but the output is ",
                          shape_of(output));
  agree("reduce_scatter", values, "output " + shape_of(output), problem);

  std::vector<int> counts(world_size_);
  std::vector<at::Tensor> flat_inputs;
  const auto device = reachable(output) ? output.device() : at::Device(at::kCPU);
  for (int r = 0; r < world_size_; ++r) {
    counts[r] = mpi_count(inputs[r].numel(), "reduce_scatter input");
    flat_inputs.push_back(inputs[r].reshape({-1}).to(device));
  }
  const at::Tensor concatenated = at::cat(flat_inputs);
  mpi_count(concatenated.numel(), "reduce_scatter input");
  StagedTensor out(output, reachable(output));
  const auto dtype = output.scalar_type();
  check_mpi(MPI_Reduce_scatter(concatenated.data_ptr(), out.data(), counts.data(), mpi_type(dtype), mpi_op(op, dtype),
                               comm_),
            "MPI_Reduce_scatter");
  if (op == ReduceOp::Avg) out.tensor().div_(world_size_);
  out.copy_back();
}

namespace {

std::string scatter_into_problem(const at::Tensor& output, const at::Tensor& input, ReduceOp op, int world) {
  std::string problem =
      first_problem({tensor_problem(input, "input"), tensor_problem(output, "output"), op_problem(op, output)});
  if (problem.empty() && output.scalar_type() != input.scalar_type())
    problem = "output is " + shape_of(output) + " but the input is " + shape_of(input);
  if (problem.empty() && input.numel() != world * output.numel())
    problem = log::concat("input has ", input.numel(), " elements, not world size ", world, " x output's ",
                          output.numel());
  return problem;
}

}  // namespace

void MpiBackend::reduce_scatter_into(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  agree("reduce_scatter_into", {numel_or_missing(output), dtype_or_missing(output)}, "output " + shape_of(output),
        scatter_into_problem(output, input, op, world_size_));
  StagedTensor in(input, reachable(input)), out(output, reachable(output));
  const auto dtype = output.scalar_type();
  mpi_count(input.numel(), "reduce_scatter_into input");
  check_mpi(MPI_Reduce_scatter_block(in.data(), out.data(), mpi_count(output.numel(), "reduce_scatter_into output"),
                                     mpi_type(dtype), mpi_op(op, dtype), comm_),
            "MPI_Reduce_scatter_block");
  if (op == ReduceOp::Avg) out.tensor().div_(world_size_);
  out.copy_back();
}

std::unique_ptr<Work> MpiBackend::reduce_scatter_into_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  agree("reduce_scatter_into_async", {numel_or_missing(output), dtype_or_missing(output)},
        "output " + shape_of(output), scatter_into_problem(output, input, op, world_size_));
  auto in = std::make_shared<StagedTensor>(input, reachable(input));
  auto out = std::make_shared<StagedTensor>(output, reachable(output));
  const auto dtype = output.scalar_type();
  mpi_count(input.numel(), "reduce_scatter_into input");
  MPI_Request request;
  check_mpi(MPI_Ireduce_scatter_block(in->data(), out->data(), mpi_count(output.numel(), "reduce_scatter_into output"),
                                      mpi_type(dtype), mpi_op(op, dtype), comm_, &request),
            "MPI_Ireduce_scatter_block");
  const int world = world_size_;
  return std::make_unique<MpiWork>(request, [in, out, op, world] {
    if (op == ReduceOp::Avg) out->tensor().div_(world);
    out->copy_back();
  });
}

void MpiBackend::broadcast(const at::Tensor& tensor, int src) {
  std::string problem = tensor_problem(tensor, "tensor");
  if (problem.empty() && (src < 0 || src >= world_size_))
    problem = log::concat("source rank ", src, " is outside the group of ", world_size_);
  agree("broadcast", {numel_or_missing(tensor), dtype_or_missing(tensor), src}, shape_of(tensor), problem);
  StagedTensor staged(tensor, reachable(tensor));
  check_mpi(MPI_Bcast(staged.data(), mpi_count(tensor.numel(), "broadcast tensor"), mpi_type(tensor.scalar_type()), src,
                      comm_),
            "MPI_Bcast");
  staged.copy_back();
}

namespace {

void check_peer(const char* what, int peer, int rank, int world) {
  if (peer < 0 || peer >= world || peer == rank)
    throw Error(log::concat(what, ": peer rank ", peer, " is not another rank of the group of ", world)).with_rank(rank);
}

}  // namespace

// Point-to-point calls cannot agree with their peer beforehand; what can be checked locally is.
void MpiBackend::send(const at::Tensor& tensor, int dst, int tag) {
  if (auto problem = tensor_problem(tensor, "tensor"); !problem.empty()) throw Error("send: " + problem).with_rank(rank_);
  check_peer("send", dst, rank_, world_size_);
  StagedTensor staged(tensor, reachable(tensor));
  check_mpi(MPI_Send(staged.data(), mpi_count(tensor.numel(), "send tensor"), mpi_type(tensor.scalar_type()), dst, tag,
                     comm_),
            "MPI_Send");
}

void MpiBackend::recv(const at::Tensor& tensor, int src, int tag) {
  if (auto problem = tensor_problem(tensor, "tensor"); !problem.empty()) throw Error("recv: " + problem).with_rank(rank_);
  check_peer("recv", src, rank_, world_size_);
  StagedTensor staged(tensor, reachable(tensor));
  const MPI_Datatype type = mpi_type(tensor.scalar_type());
  const int expected = mpi_count(tensor.numel(), "recv tensor");
  MPI_Status status;
  const int rc = MPI_Recv(staged.data(), expected, type, src, tag, comm_, &status);
  if (rc != MPI_SUCCESS) {
    int error_class = 0;
    MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE)
      throw Error(log::concat("recv: rank ", src, " sent more than the ", expected, " elements of ", shape_of(tensor)))
          .with_rank(rank_);
    check_mpi(rc, "MPI_Recv");
  }
  int received = 0;
  MPI_Get_count(&status, type, &received);
  if (received != expected)
    throw Error(log::concat("recv: rank ", src, " sent ", received, " elements, expected the ", expected, " of ",
                            shape_of(tensor)))
        .with_rank(rank_);
  staged.copy_back();
}

void MpiBackend::barrier() { check_mpi(MPI_Barrier(comm_), "MPI_Barrier"); }

std::shared_ptr<Backend> MpiBackend::split(int color, int key) {
  MPI_Comm sub;
  check_mpi(MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
  if (sub == MPI_COMM_NULL) return nullptr;
  return std::shared_ptr<Backend>(new MpiBackend(sub, cuda_aware_));
}

void MpiBackend::abort(const std::string& message) { abort_job(message); }

}  // namespace ds::comm
