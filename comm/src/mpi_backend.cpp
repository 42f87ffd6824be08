#include "dstrain/comm/mpi_backend.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <functional>
#include <sstream>
#include <utility>

#include "dstrain/comm/job.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "mpi_backend_impl.hpp"
#include "mpi_checked_call.hpp"
#include "mpi_errors.hpp"
#include "mpi_float16_ops.hpp"
#include "mpi_multi_node_defaults.hpp"
#include "mpi_tcp_ring.hpp"
#include "mpi_watchdog.hpp"
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
    if (spans_several_nodes())
      for (const auto& [name, value] : apply_multi_node_defaults())
        log::info("the job spans several nodes: Open MPI's ", name, " = ", value, " (OMPI_MCA_", name,
                  " or mpirun --mca chooses otherwise; docs/multi-node.md)");
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided);
    if (provided < MPI_THREAD_SERIALIZED)
      log::warn("MPI provides thread level ", provided, " only; dstrain calls MPI from one thread at a time");
    // What dstrain brought up it takes down: a program that returns from main without finalize()
    // must not look to mpirun like a rank that died.
    std::atexit([] { finalize(); });
    // Open MPI reports an error of a nonblocking collective's request (a truncation when ranks
    // disagree on sizes) on MPI_COMM_WORLD, whose default handler would kill the job first.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
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

// A tensor too large for MPI's int counts, or "".
std::string count_problem(const at::Tensor& t, const std::string& role) {
  if (!t.defined() || t.numel() <= INT_MAX) return "";
  return log::concat(role, " has ", t.numel(), " elements, more than an MPI count can hold (", INT_MAX, ")");
}

// A reduction split into pieces of at most kPieceBytes. Open MPI's nonblocking reductions allocate a
// temporary as large as their message; above glibc's mmap threshold (32 MiB under the engine's
// host policy) that is a fresh mapping, page-faulted in on every call: a 100 MB allreduce of 2
// ranks took ~400 ms in one call and ~35 ms in pieces (docs/comm.md).
class Pieces {
 public:
  static constexpr int64_t kPieceBytes = int64_t{8} << 20;
  Pieces(int64_t numel, int64_t element_size)
      : numel_(numel), piece_(std::max<int64_t>(1, kPieceBytes / element_size)) {}
  int size() const { return static_cast<int>(std::max<int64_t>(1, (numel_ + piece_ - 1) / piece_)); }
  int64_t begin(int piece) const { return piece * piece_; }
  int count(int piece) const { return static_cast<int>(std::min(piece_, numel_ - begin(piece))); }

 private:
  int64_t numel_;
  int64_t piece_;
};

// Below this a collective is latency, not bandwidth: the ring's 2(N-1) hops, each a thread waking
// on a loaded node, took 3-21 ms to all-reduce 8 bytes at 4 x 1, Open MPI 0.4-3 ms (docs/comm.md).
constexpr int64_t kRingMinBytes = int64_t{64} << 10;

int64_t numel_or_missing(const at::Tensor& t) { return t.defined() ? t.numel() : -1; }
int64_t bytes_of(const at::Tensor& t) { return t.defined() ? t.numel() * static_cast<int64_t>(t.element_size()) : 0; }
int64_t bytes_of(const std::vector<at::Tensor>& tensors) {
  int64_t bytes = 0;
  for (const at::Tensor& t : tensors) bytes += bytes_of(t);
  return bytes;
}
int64_t dtype_or_missing(const at::Tensor& t) { return t.defined() ? static_cast<int64_t>(t.scalar_type()) : -1; }

}  // namespace

class MpiWork final : public Work {
 public:
  // ring_job: set when the data call hands the bytes to the group's TCP ring.
  MpiWork(MpiBackend::Impl& group, std::shared_ptr<CheckedCall> call, std::function<void()> finish,
          std::shared_ptr<TcpRing::Job> ring_job = nullptr)
      : group_(group), call_(std::move(call)), finish_(std::move(finish)), ring_job_(std::move(ring_job)) {}
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
    group_.finish(*call_);
    if (ring_job_) group_.wait(*ring_job_, *call_);
    finish_();
  }
  // Posts the group's calls whose checks have agreed and polls this one: each MPI call also runs
  // Open MPI's progress engine, which advances every collective in flight by the rounds it can.
  bool test() override {
    if (done_) return true;
    group_.advance();
    return call_->complete() && (!ring_job_ || ring_job_->done());
  }

 private:
  MpiBackend::Impl& group_;
  std::shared_ptr<CheckedCall> call_;
  std::function<void()> finish_;
  std::shared_ptr<TcpRing::Job> ring_job_;
  bool done_ = false;
};

MpiBackend::MpiBackend(bool cuda_aware, std::chrono::milliseconds timeout)
    : MpiBackend(std::make_unique<Impl>(duplicate_world(), cuda_aware, nullptr, "world")) {
  if (timeout.count() <= 0) throw Error(log::concat("MpiBackend: the timeout must be positive, got ", timeout.count(), " ms"));
  impl_->watchdog_ = std::make_shared<Watchdog>(timeout);
  impl_->watchdog_->register_group(impl_->id_, &impl_->posted_calls_);
}

MpiBackend::MpiBackend(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MpiBackend::~MpiBackend() = default;

int MpiBackend::rank() const { return impl_->rank_; }
int MpiBackend::world_size() const { return impl_->world_size_; }
bool MpiBackend::cuda_aware() const { return impl_->cuda_aware_; }

MpiBackend::Impl::Impl(MPI_Comm comm, bool cuda_aware, std::shared_ptr<Watchdog> watchdog, std::string label)
    : comm_(comm), watchdog_(std::move(watchdog)), label_(std::move(label)), id_(fnv1a(label_.data(), label_.size())),
      cuda_aware_(cuda_aware) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  MPI_Comm_rank(comm_, &rank_);
  MPI_Comm_size(comm_, &world_size_);
  MPI_Comm_dup(comm_, &check_comm_);
  MPI_Comm_set_errhandler(check_comm_, MPI_ERRORS_RETURN);
  MPI_Group group, world_group;
  MPI_Comm_group(comm_, &group);
  MPI_Comm_group(MPI_COMM_WORLD, &world_group);
  std::vector<int> ranks(world_size_);
  for (int r = 0; r < world_size_; ++r) ranks[r] = r;
  world_ranks_.resize(world_size_);
  MPI_Group_translate_ranks(group, world_size_, ranks.data(), world_group, world_ranks_.data());
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  for (int r = 0; r < world_size_; ++r)
    if (r != rank_) peers_.push_back(world_ranks_[r]);
  if (watchdog_) watchdog_->register_group(id_, &posted_calls_);
  bfloat16_ops_ = create_bfloat16_ops();
  float16_ops_ = create_float16_ops();
  ring_ = tcp_ring_for(comm_, label_);
}

MpiBackend::Impl::~Impl() {
  if (watchdog_) watchdog_->unregister_group(id_);
  if (mpi_finalized()) return;  // MPI_Finalize already released everything
  free_float16_ops(bfloat16_ops_);
  free_float16_ops(float16_ops_);
  MPI_Comm_free(&check_comm_);
  MPI_Comm_free(&comm_);
}

void MpiBackend::Impl::check_usable(const char* collective) const {
  if (!unusable_.empty())
    throw Error(std::string(collective) + ": group " + label_ + " is unusable since an earlier call failed: " +
                unusable_)
        .with_rank(rank_);
}

std::shared_ptr<CheckedCall> MpiBackend::Impl::begin(const char* collective, const std::vector<int64_t>& values,
                                               std::string description, const std::string& problem) {
  check_usable(collective);
  auto call = std::make_shared<CheckedCall>(collective, ++posted_calls_, values, std::move(description), problem,
                                            check_comm_);
  queued_.push_back(call);
  if (problem.empty()) return call;
  finish(*call);  // throws: the check fails the call on every rank
  throw Error(std::string(collective) + ": " + problem).with_rank(rank_);
}

void MpiBackend::Impl::post(CheckedCall& call, CheckedCall::Post data_call, const char* mpi_call, int pieces) {
  call.set_post(std::move(data_call), mpi_call, pieces);
  advance();
}

void MpiBackend::Impl::advance() {
  while (!queued_.empty() && queued_.front()->check_complete()) {
    CheckedCall& call = *queued_.front();
    std::string failure = call.disagreement();
    if (!failure.empty()) {
      if (unusable_.empty() && !call.every_rank_problem()) unusable_ = failure;
    } else if (!unusable_.empty()) {
      failure = std::string(call.collective()) + ": group " + label_ + " is unusable since an earlier call failed: " +
                unusable_;
    } else {
      failure = call.post();
      if (!failure.empty()) unusable_ = failure;  // the data call is in an unknown state on the other ranks
    }
    if (!failure.empty()) call.fail(failure);
    queued_.pop_front();
  }
}

void MpiBackend::Impl::finish(CheckedCall& call) {
  watchdog_->wait({call.collective(), id_, &label_, call.number(), &peers_}, [&] {
    advance();
    return call.complete();
  });
  if (!call.failure().empty()) throw Error(call.failure()).with_rank(rank_);
}

void MpiBackend::Impl::wait(MPI_Request& request, const std::string& what, int64_t call, const std::vector<int>& peers,
                      const char* mpi_call) {
  int rc = MPI_SUCCESS;
  watchdog_->wait({what, id_, &label_, call, &peers}, [&] {
    int flag = 0;
    rc = MPI_Test(&request, &flag, MPI_STATUS_IGNORE);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  check_mpi(rc, mpi_call);
}

void MpiBackend::Impl::wait(TcpRing::Job& job, const CheckedCall& call) {
  watchdog_->wait({std::string(call.collective()) + " over the TCP ring", id_, &label_, call.number(), &peers_},
                  [&] { return job.wait_for(std::chrono::milliseconds(10)); });
  if (job.failure().empty()) return;
  if (unusable_.empty()) unusable_ = job.failure();
  throw Error(job.failure()).with_rank(rank_);
}

bool MpiBackend::Impl::on_ring(const at::Tensor& buffer, ReduceOp op) const {
  return ring_ && buffer.defined() && (!buffer.is_cuda() || !cuda_aware_) &&
         (buffer.scalar_type() == at::kFloat || buffer.scalar_type() == at::kDouble) &&
         (op == ReduceOp::Sum || op == ReduceOp::Avg) && bytes_of(buffer) >= kRingMinBytes;
}

std::shared_ptr<TcpRing::Job> MpiBackend::Impl::post_on_ring(CheckedCall& call, const at::Tensor& buffer,
                                                              TcpRing::Kind kind) {
  auto job = std::make_shared<TcpRing::Job>(
      buffer.data_ptr(), buffer.numel(),
      buffer.scalar_type() == at::kDouble ? TcpRing::Type::Float64 : TcpRing::Type::Float32, kind);
  post(call,
       [ring = ring_.get(), job](int, MPI_Request* request) {
         *request = MPI_REQUEST_NULL;
         ring->submit(job);
         return MPI_SUCCESS;
       },
       "TcpRing");
  return job;
}

bool MpiBackend::Impl::reachable(const at::Tensor& tensor) const {
  return tensor.is_cpu() || (cuda_aware_ && tensor.is_cuda());
}

MPI_Op MpiBackend::Impl::mpi_op(ReduceOp op, at::ScalarType dtype) const {
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

void MpiBackend::all_reduce(const at::Tensor& tensor, ReduceOp op) { all_reduce_async(tensor, op)->wait(); }

std::unique_ptr<Work> MpiBackend::all_reduce_async(at::Tensor tensor, ReduceOp op) {
  const bool on_ring = impl_->on_ring(tensor, op);
  const auto timing =
      comms_logger_->begin("all_reduce", bytes_of(tensor), on_ring ? "TCP ring" : "MPI_Iallreduce (8 MiB pieces)");
  auto call = impl_->begin("all_reduce", {numel_or_missing(tensor), dtype_or_missing(tensor), on_ring},
                           shape_of(tensor),
                           first_problem({tensor_problem(tensor, "tensor"), op_problem(op, tensor),
                                          count_problem(tensor, "tensor")}));
  auto staged = std::make_shared<StagedTensor>(tensor, impl_->reachable(tensor));
  const auto dtype = tensor.scalar_type();
  const int world = world_size();
  auto finish = [staged, op, world, logger = comms_logger_, timing] {
    if (op == ReduceOp::Avg) staged->tensor().div_(world);
    staged->copy_back();
    logger->end(timing, world);
  };
  if (on_ring) {
    auto job = impl_->post_on_ring(*call, staged->tensor(), TcpRing::Kind::AllReduce);
    return std::make_unique<MpiWork>(*impl_, std::move(call), std::move(finish), std::move(job));
  }
  const Pieces pieces(tensor.numel(), tensor.element_size());
  impl_->post(*call,
       [this, staged, pieces, type = mpi_type(dtype), mpi_reduce = impl_->mpi_op(op, dtype),
        element_size = tensor.element_size()](int piece, MPI_Request* request) {
         return MPI_Iallreduce(MPI_IN_PLACE, static_cast<char*>(staged->data()) + pieces.begin(piece) * element_size,
                               pieces.count(piece), type, mpi_reduce, impl_->comm_, request);
       },
       "MPI_Iallreduce", pieces.size());
  return std::make_unique<MpiWork>(*impl_, std::move(call), std::move(finish));
}

namespace {

// The arguments of a collective over one tensor per rank (all_gather's outputs, reduce_scatter's
// inputs) against this rank's one tensor (the input, the output): as many as ranks, each of its
// dtype, this rank's the same size, and a total an MPI count can hold. `problem` is what the
// caller found first; the first problem found is kept.
struct PerRankTensors {
  struct List {
    const char* noun;  // "output": named "outputs[r]", "N output tensors"
    const std::vector<at::Tensor>& tensors;
  };
  struct Mine {
    const char* noun;  // "input"
    const at::Tensor& tensor;
  };

  PerRankTensors(List list, Mine mine, const char* slot, int rank, int world, std::string first)
      : problem(std::move(first)), values(world + 1, -1) {
    const std::vector<at::Tensor>& tensors = list.tensors;
    const std::string name = std::string(list.noun) + "s", other = std::string(" but the ") + mine.noun + " is ";
    if (problem.empty() && static_cast<int>(tensors.size()) != world)
      problem = log::concat("got ", tensors.size(), " ", list.noun, " tensors for ", world, " ranks");
    for (int r = 0; r < world && r < static_cast<int>(tensors.size()); ++r) {
      values[r] = numel_or_missing(tensors[r]);
      if (problem.empty() && (!tensors[r].defined() || tensors[r].scalar_type() != mine.tensor.scalar_type()))
        problem = log::concat(name, "[", r, "] is ", shape_of(tensors[r]), other, shape_of(mine.tensor));
      if (problem.empty()) total += tensors[r].numel();
    }
    values[world] = dtype_or_missing(mine.tensor);
    if (problem.empty() && tensors[rank].numel() != mine.tensor.numel())
      problem = log::concat(name, "[", rank, "] (", slot, ") is ", shape_of(tensors[rank]), other, shape_of(mine.tensor));
    if (problem.empty() && total > INT_MAX)
      problem = log::concat("the ", name, " hold ", total, " elements, more than an MPI count can hold (", INT_MAX, ")");
  }

  std::string problem;          // empty when the arguments are good
  std::vector<int64_t> values;  // each rank's numel, then this rank's dtype: what the ranks must agree on
  int64_t total = 0;            // the elements of all the per-rank tensors
};

}  // namespace

void MpiBackend::all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) {
  const auto timing = comms_logger_->begin("all_gather", bytes_of(outputs), "MPI_Iallgatherv");
  const PerRankTensors checked({"output", outputs}, {"input", input}, "this rank's slot", rank(), world_size(),
                               tensor_problem(input, "input"));
  const int64_t total = checked.total;
  auto call = impl_->begin("all_gather", checked.values, "input " + shape_of(input), checked.problem);

  std::vector<int> counts(world_size()), displacements(world_size());
  for (int r = 0, offset = 0; r < world_size(); ++r) {
    displacements[r] = offset;
    counts[r] = static_cast<int>(outputs[r].numel());
    offset += counts[r];
  }
  StagedTensor in(input, impl_->reachable(input));
  const auto device = impl_->reachable(input) ? input.device() : at::Device(at::kCPU);
  at::Tensor gathered = at::empty({total}, input.options().device(device));
  const MPI_Datatype type = mpi_type(input.scalar_type());
  impl_->post(*call,
       [&](int, MPI_Request* request) {
         return MPI_Iallgatherv(in.data(), counts[rank()], type, gathered.data_ptr(), counts.data(),
                                displacements.data(), type, impl_->comm_, request);
       },
       "MPI_Iallgatherv");
  impl_->finish(*call);
  for (int r = 0; r < world_size(); ++r)
    outputs[r].copy_(gathered.narrow(0, displacements[r], counts[r]).view(outputs[r].sizes()));
  comms_logger_->end(timing, world_size());
}

namespace {

std::string gather_into_problem(const at::Tensor& output, const at::Tensor& input, int world) {
  std::string problem = first_problem({tensor_problem(input, "input"), tensor_problem(output, "output")});
  if (problem.empty() && output.scalar_type() != input.scalar_type())
    problem = "output is " + shape_of(output) + " but the input is " + shape_of(input);
  if (problem.empty() && output.numel() != world * input.numel())
    problem = log::concat("output has ", output.numel(), " elements, not world size ", world, " x input's ",
                          input.numel());
  return first_problem({problem, count_problem(output, "output")});
}

}  // namespace

void MpiBackend::all_gather_into(const at::Tensor& output, const at::Tensor& input) {
  all_gather_into_async(output, input)->wait();
}

std::unique_ptr<Work> MpiBackend::all_gather_into_async(at::Tensor output, at::Tensor input) {
  const std::string problem = gather_into_problem(output, input, world_size());
  const bool on_ring = problem.empty() && impl_->on_ring(output, ReduceOp::Sum);
  const auto timing = comms_logger_->begin("all_gather_into", bytes_of(output), on_ring ? "TCP ring" : "MPI_Iallgather");
  auto call = impl_->begin("all_gather_into", {numel_or_missing(input), dtype_or_missing(input), on_ring},
                           "input " + shape_of(input), problem);
  auto out = std::make_shared<StagedTensor>(output, impl_->reachable(output));
  if (on_ring) {
    // This rank's segment of the output holds its input; the ring passes every segment around.
    out->tensor().view({-1}).narrow(0, rank() * input.numel(), input.numel()).copy_(input.reshape({-1}));
    auto job = impl_->post_on_ring(*call, out->tensor(), TcpRing::Kind::AllGather);
    return std::make_unique<MpiWork>(*impl_, std::move(call),
                                     [out, logger = comms_logger_, timing, world = world_size()] {
                                       out->copy_back();
                                       logger->end(timing, world);
                                     },
                                     std::move(job));
  }
  // In place (the input is this rank's segment of the output, as torch's all_gather_into_tensor
  // allows): MPI forbids the two buffers to overlap unless the input is MPI_IN_PLACE; a staged
  // output was copied from the output, this segment included.
  const bool in_place = problem.empty() && input.is_contiguous() && output.is_contiguous() &&
                        input.is_alias_of(output) &&
                        static_cast<const char*>(input.data_ptr()) ==
                            static_cast<const char*>(output.data_ptr()) + rank() * input.nbytes();
  auto in = in_place ? nullptr : std::make_shared<StagedTensor>(input, impl_->reachable(input));
  const MPI_Datatype type = mpi_type(input.scalar_type());
  const int count = static_cast<int>(input.numel());
  impl_->post(*call,
       [this, in, out, type, count](int, MPI_Request* request) {
         return MPI_Iallgather(in ? in->data() : MPI_IN_PLACE, count, type, out->data(), count, type, impl_->comm_,
                               request);
       },
       "MPI_Iallgather");
  return std::make_unique<MpiWork>(*impl_, std::move(call),
                                   [in, out, logger = comms_logger_, timing, world = world_size()] {
                                     out->copy_back();
                                     logger->end(timing, world);
                                   });
}

void MpiBackend::reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op) {
  const auto timing = comms_logger_->begin("reduce_scatter", bytes_of(inputs), "MPI_Ireduce_scatter");
  const PerRankTensors checked({"input", inputs}, {"output", output}, "this rank's part", rank(), world_size(),
                               first_problem({tensor_problem(output, "output"), op_problem(op, output)}));
  auto call = impl_->begin("reduce_scatter", checked.values, "output " + shape_of(output), checked.problem);

  std::vector<int> counts(world_size());
  std::vector<at::Tensor> flat_inputs;
  const auto device = impl_->reachable(output) ? output.device() : at::Device(at::kCPU);
  for (int r = 0; r < world_size(); ++r) {
    counts[r] = static_cast<int>(inputs[r].numel());
    flat_inputs.push_back(inputs[r].reshape({-1}).to(device));
  }
  const at::Tensor concatenated = at::cat(flat_inputs);
  StagedTensor out(output, impl_->reachable(output));
  const auto dtype = output.scalar_type();
  impl_->post(*call,
       [&](int, MPI_Request* request) {
         return MPI_Ireduce_scatter(concatenated.data_ptr(), out.data(), counts.data(), mpi_type(dtype),
                                    impl_->mpi_op(op, dtype), impl_->comm_, request);
       },
       "MPI_Ireduce_scatter");
  impl_->finish(*call);
  if (op == ReduceOp::Avg) out.tensor().div_(world_size());
  out.copy_back();
  comms_logger_->end(timing, world_size());
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
  return first_problem({problem, count_problem(input, "input")});
}

}  // namespace

void MpiBackend::reduce_scatter_into(const at::Tensor& output, const at::Tensor& input, ReduceOp op) {
  reduce_scatter_into_async(output, input, op)->wait();
}

std::unique_ptr<Work> MpiBackend::reduce_scatter_into_async(at::Tensor output, at::Tensor input, ReduceOp op) {
  const std::string problem = scatter_into_problem(output, input, op, world_size());
  const bool on_ring = problem.empty() && impl_->on_ring(input, op);
  const auto timing = comms_logger_->begin("reduce_scatter_into", bytes_of(input),
                                           on_ring ? "TCP ring" : "MPI_Ireduce to each rank (8 MiB pieces)");
  auto call = impl_->begin("reduce_scatter_into", {numel_or_missing(output), dtype_or_missing(output), on_ring},
                           "output " + shape_of(output), problem);
  auto out = std::make_shared<StagedTensor>(output, impl_->reachable(output));
  const int world = world_size();
  if (on_ring) {
    // The ring sums in place, so it works on a copy: the caller's input stays as it was.
    at::Tensor sums = input.to(at::kCPU).reshape({-1}).clone();
    auto job = impl_->post_on_ring(*call, sums, TcpRing::Kind::ReduceScatter);
    return std::make_unique<MpiWork>(
        *impl_, std::move(call),
        [sums, out, op, world, rank = rank(), logger = comms_logger_, timing] {
          const int64_t n = out->tensor().numel();
          out->tensor().view({-1}).copy_(sums.narrow(0, rank * n, n));
          if (op == ReduceOp::Avg) out->tensor().div_(world);
          out->copy_back();
          logger->end(timing, world);
        },
        std::move(job));
  }
  auto in = std::make_shared<StagedTensor>(input, impl_->reachable(input));
  const auto dtype = output.scalar_type();
  // Each rank's part is reduced to it by its own reduces, piece by piece: one reduce-scatter of the
  // whole buffer would allocate a temporary that large (see Pieces).
  const Pieces pieces(output.numel(), output.element_size());
  impl_->post(*call,
       [this, in, out, pieces, world, part = output.numel(), type = mpi_type(dtype), mpi_reduce = impl_->mpi_op(op, dtype),
        element_size = output.element_size()](int piece, MPI_Request* request) {
         const int root = piece % world;
         const int64_t offset = pieces.begin(piece / world) * element_size;
         return MPI_Ireduce(static_cast<char*>(in->data()) + root * part * element_size + offset,
                            static_cast<char*>(out->data()) + offset, pieces.count(piece / world), type, mpi_reduce,
                            root, impl_->comm_, request);
       },
       "MPI_Ireduce", pieces.size() * world);
  return std::make_unique<MpiWork>(*impl_, std::move(call), [in, out, op, world, logger = comms_logger_, timing] {
                                     if (op == ReduceOp::Avg) out->tensor().div_(world);
                                     out->copy_back();
                                     logger->end(timing, world);
                                   });
}

void MpiBackend::broadcast(const at::Tensor& tensor, int src) {
  const auto timing = comms_logger_->begin("broadcast", bytes_of(tensor), "MPI_Ibcast");
  std::string problem = first_problem({tensor_problem(tensor, "tensor"), count_problem(tensor, "tensor")});
  if (problem.empty() && (src < 0 || src >= world_size()))
    problem = log::concat("source rank ", src, " is outside the group of ", world_size());
  auto call = impl_->begin("broadcast", {numel_or_missing(tensor), dtype_or_missing(tensor), src}, shape_of(tensor), problem);
  StagedTensor staged(tensor, impl_->reachable(tensor));
  impl_->post(*call,
       [&](int, MPI_Request* request) {
         return MPI_Ibcast(staged.data(), static_cast<int>(tensor.numel()), mpi_type(tensor.scalar_type()), src,
                           impl_->comm_, request);
       },
       "MPI_Ibcast");
  impl_->finish(*call);
  staged.copy_back();
  comms_logger_->end(timing, world_size());
}

namespace {

void check_peer(const char* what, int peer, int rank, int world) {
  if (peer < 0 || peer >= world || peer == rank)
    throw Error(log::concat(what, ": peer rank ", peer, " is not another rank of the group of ", world)).with_rank(rank);
}

}  // namespace

// Point-to-point calls cannot agree with their peer beforehand; what can be checked locally is, and
// the receiver checks the size that arrived.
void MpiBackend::send(const at::Tensor& tensor, int dst, int tag) {
  if (auto problem = tensor_problem(tensor, "tensor"); !problem.empty()) throw Error("send: " + problem).with_rank(rank());
  check_peer("send", dst, rank(), world_size());
  impl_->check_usable("send");
  const auto timing = comms_logger_->begin("send", bytes_of(tensor), "MPI_Isend");
  StagedTensor staged(tensor, impl_->reachable(tensor));
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Isend(staged.data(), mpi_count(tensor.numel(), "send tensor"), mpi_type(tensor.scalar_type()), dst,
                      tag, impl_->comm_, &request),
            "MPI_Isend");
  impl_->wait(request, log::concat("send to rank ", dst, " (tag ", tag, ")"), 0, {impl_->world_ranks_[dst]}, "MPI_Isend");
  comms_logger_->end(timing, world_size());
}

void MpiBackend::recv(const at::Tensor& tensor, int src, int tag) {
  if (auto problem = tensor_problem(tensor, "tensor"); !problem.empty()) throw Error("recv: " + problem).with_rank(rank());
  check_peer("recv", src, rank(), world_size());
  impl_->check_usable("recv");
  const auto timing = comms_logger_->begin("recv", bytes_of(tensor), "MPI_Irecv");
  StagedTensor staged(tensor, impl_->reachable(tensor));
  const MPI_Datatype type = mpi_type(tensor.scalar_type());
  const int expected = mpi_count(tensor.numel(), "recv tensor");
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Irecv(staged.data(), expected, type, src, tag, impl_->comm_, &request), "MPI_Irecv");
  MPI_Status status;
  int rc = MPI_SUCCESS;
  const std::vector<int> peer{impl_->world_ranks_[src]};
  impl_->watchdog_->wait({log::concat("recv from rank ", src, " (tag ", tag, ")"), impl_->id_, &impl_->label_, 0, &peer}, [&] {
    int flag = 0;
    rc = MPI_Test(&request, &flag, &status);
    return flag != 0 || rc != MPI_SUCCESS;
  });
  if (rc != MPI_SUCCESS) {
    int error_class = 0;
    MPI_Error_class(rc, &error_class);
    if (error_class == MPI_ERR_TRUNCATE)
      throw Error(log::concat("recv: rank ", src, " sent more than the ", expected, " elements of ", shape_of(tensor)))
          .with_rank(rank());
    check_mpi(rc, "MPI_Irecv");
  }
  int received = 0;
  MPI_Get_count(&status, type, &received);
  if (received != expected)
    throw Error(log::concat("recv: rank ", src, " sent ", received, " elements, expected the ", expected, " of ",
                            shape_of(tensor)))
        .with_rank(rank());
  staged.copy_back();
  comms_logger_->end(timing, world_size());
}

// Checked like the other collectives (nothing to compare) so that it takes its place in the queue:
// posted before the data calls of earlier calls, it would match different calls on different ranks.
void MpiBackend::barrier() {
  const auto timing = comms_logger_->begin("barrier", 0, "MPI_Ibarrier");
  auto call = impl_->begin("barrier", {}, "", "");
  impl_->post(*call, [this](int, MPI_Request* request) { return MPI_Ibarrier(impl_->comm_, request); }, "MPI_Ibarrier");
  impl_->finish(*call);
  comms_logger_->end(timing, world_size());
}

std::shared_ptr<Backend> MpiBackend::split(int color, int key) {
  // MPI_Comm_split blocks without a timeout: a watched barrier first makes sure every rank is there.
  barrier();
  const std::string label = log::concat(impl_->label_, "/", ++impl_->splits_, ":", color);
  MPI_Comm sub;
  check_mpi(MPI_Comm_split(impl_->comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub), "MPI_Comm_split");
  if (sub == MPI_COMM_NULL) return nullptr;
  std::shared_ptr<MpiBackend> group(new MpiBackend(std::make_unique<Impl>(sub, cuda_aware(), impl_->watchdog_, label)));
  group->comms_logger_ = comms_logger_;
  return group;
}

void MpiBackend::abort(const std::string& message) { abort_job(message); }

}  // namespace ds::comm
