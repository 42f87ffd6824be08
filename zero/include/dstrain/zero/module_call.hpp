// ds::zero::call: how a model calls its submodules so that ZeRO stage 3 can act around them.
//
// LibTorch's nn::Module has no forward/backward hooks, so a model written for dstrain calls each
// submodule whose parameters ZeRO-3 should manage through ds::zero::call(child, args...) instead
// of child->forward(args...). Outside an engine's forward (no hooks active) it is a plain call.
// Inside, the active ModuleHooks gathers the child's parameters before its forward, sees every
// tensor it returns (to hook its backward and detect parameters escaping as outputs), and
// releases what the child no longer needs.
//
// A forward may return a tensor, a container of tensors, any struct, or nothing. For a struct of
// your own, declare in its namespace:  void for_each_tensor(MyOutput&, const ds::zero::TensorFn&);
#pragma once

#include <torch/nn/module.h>

#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dstrain/zero/param_status.hpp"

namespace ds::zero {

using TensorFn = std::function<void(at::Tensor&)>;

inline void for_each_tensor(at::Tensor& tensor, const TensorFn& fn) { fn(tensor); }
template <class T> void for_each_tensor(std::vector<T>& values, const TensorFn& fn);
template <class K, class V> void for_each_tensor(std::map<K, V>& values, const TensorFn& fn);
template <class K, class V> void for_each_tensor(std::unordered_map<K, V>& values, const TensorFn& fn);
template <class A, class B> void for_each_tensor(std::pair<A, B>& value, const TensorFn& fn);
template <class... T> void for_each_tensor(std::tuple<T...>& value, const TensorFn& fn);

template <class T> void for_each_tensor(std::vector<T>& values, const TensorFn& fn) {
  for (auto& value : values) for_each_tensor(value, fn);
}
template <class K, class V> void for_each_tensor(std::map<K, V>& values, const TensorFn& fn) {
  for (auto& entry : values) for_each_tensor(entry.second, fn);
}
template <class K, class V> void for_each_tensor(std::unordered_map<K, V>& values, const TensorFn& fn) {
  for (auto& entry : values) for_each_tensor(entry.second, fn);
}
template <class A, class B> void for_each_tensor(std::pair<A, B>& value, const TensorFn& fn) {
  for_each_tensor(value.first, fn);
  for_each_tensor(value.second, fn);
}
template <class... T> void for_each_tensor(std::tuple<T...>& value, const TensorFn& fn) {
  std::apply([&](auto&... element) { (for_each_tensor(element, fn), ...); }, value);
}

// What an engine does around submodule calls. ZeRO-3 implements it; nothing else needs to.
class ModuleHooks {
 public:
  virtual ~ModuleHooks() = default;
  // call() runs it just before module's forward.
  virtual void pre_forward(torch::nn::Module& module) = 0;
  // call() runs it just after module's forward returned; outputs points at every tensor of the
  // return value, which hooks may replace in place (or register autograd hooks on).
  virtual void post_forward(torch::nn::Module& module, const std::vector<at::Tensor*>& outputs) = 0;
  // What param_status() and external_parameter_count() (param_status.hpp) answer inside a forward.
  // Hooks that partition nothing (stages 1-2's SliceGather) keep these: every parameter is whole.
  virtual ParamStatus status(const at::Tensor& /*param*/) const { return ParamStatus::Available; }
  virtual size_t external_parameter_count(const torch::nn::Module& /*module*/) const { return 0; }

  // The hooks active on this thread, like LibTorch's grad mode: set only for the duration of an
  // engine's forward by an ActiveHooks guard.
  static ModuleHooks* active();
};

class ActiveHooks {
 public:
  explicit ActiveHooks(ModuleHooks* hooks);
  ~ActiveHooks();
  ActiveHooks(const ActiveHooks&) = delete;
  ActiveHooks& operator=(const ActiveHooks&) = delete;

 private:
  ModuleHooks* previous_;
};

namespace detail {
template <class M> torch::nn::Module& as_module(std::shared_ptr<M>& module) { return *module; }
template <class H> auto as_module(H& holder) -> decltype(*holder.ptr(), std::declval<torch::nn::Module&>()) {
  return *holder.ptr();
}
}  // namespace detail

template <class Module, class... Args>
decltype(auto) call(Module& module, Args&&... args) {
  using Result = decltype(module->forward(std::forward<Args>(args)...));
  ModuleHooks* hooks = ModuleHooks::active();
  if (!hooks) return module->forward(std::forward<Args>(args)...);
  torch::nn::Module& self = detail::as_module(module);
  hooks->pre_forward(self);
  if constexpr (std::is_void_v<Result>) {
    module->forward(std::forward<Args>(args)...);
    hooks->post_forward(self, {});
  } else {
    Result result = module->forward(std::forward<Args>(args)...);
    std::vector<at::Tensor*> outputs;
    for_each_tensor(result, [&](at::Tensor& tensor) { outputs.push_back(&tensor); });
    hooks->post_forward(self, outputs);
    return result;
  }
}

}  // namespace ds::zero
