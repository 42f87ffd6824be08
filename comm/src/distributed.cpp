#include "dstrain/comm/distributed.hpp"

#include <exception>

#include "dstrain/comm/mpi_backend.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#ifdef DSTRAIN_WITH_NCCL
#include "dstrain/comm/nccl_backend.hpp"
#endif

namespace ds::comm {
namespace {

// The name the world was initialized with (job.hpp holds the world itself).
std::string g_world_name;

[[noreturn]] void abort_on_terminate() {
  std::string what = "std::terminate called";
  if (std::exception_ptr current = std::current_exception()) {
    try {
      std::rethrow_exception(current);
    } catch (const std::exception& e) {
      what = std::string("uncaught exception: ") + e.what();
    } catch (...) {
      what = "uncaught exception of unknown type";
    }
  }
  abort_job(what);
}

std::shared_ptr<Backend> make_backend(const std::string& name, std::chrono::milliseconds timeout) {
  if (name == "mpi") return std::make_shared<MpiBackend>(/*cuda_aware=*/false, timeout);
#ifdef DSTRAIN_WITH_NCCL
  if (name == "nccl") return std::make_shared<NcclBackend>();
#else
  if (name == "nccl") throw Error("backend 'nccl' needs dstrain built with CUDA and NCCL (DSTRAIN_WITH_NCCL is off)");
#endif
  throw Error("unknown communication backend '" + name + "' (expected mpi or nccl)");
}

}  // namespace

std::shared_ptr<Backend> init_distributed(const std::string& backend_name, std::chrono::milliseconds timeout) {
  if (is_initialized()) {
    if (backend_name != g_world_name)
      throw Error("init_distributed('" + backend_name + "') after the world was initialized with '" + g_world_name +
                  "'");
    return world_group();
  }
  if (timeout.count() <= 0) throw Error(log::concat("init_distributed: the timeout must be positive, got ", timeout.count(), " ms"));
  std::shared_ptr<Backend> group = make_backend(backend_name, timeout);
  g_world_name = backend_name;
  log::set_rank(group->rank());
  std::set_terminate(abort_on_terminate);
  set_world(group);
  return group;
}

int get_rank() { return world().rank(); }
int get_world_size() { return world().world_size(); }

void all_reduce(const at::Tensor& tensor, ReduceOp op) { world().all_reduce(tensor, op); }
void all_gather(const std::vector<at::Tensor>& outputs, const at::Tensor& input) { world().all_gather(outputs, input); }
void reduce_scatter(const at::Tensor& output, const std::vector<at::Tensor>& inputs, ReduceOp op) {
  world().reduce_scatter(output, inputs, op);
}
void broadcast(const at::Tensor& tensor, int src) { world().broadcast(tensor, src); }
void send(const at::Tensor& tensor, int dst, int tag) { world().send(tensor, dst, tag); }
void recv(const at::Tensor& tensor, int src, int tag) { world().recv(tensor, src, tag); }
void barrier() { world().barrier(); }

}  // namespace ds::comm
