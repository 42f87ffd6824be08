#include "dstrain/engine/optim/gradient_clipping.hpp"

namespace ds {

double clip_coefficient(double norm, double max_norm) {
  if (max_norm <= 0) return 1;
  // The epsilon keeps a zero norm finite, as torch.nn.utils.clip_grad_norm_ does.
  const double coefficient = max_norm / (norm + 1e-6);
  return coefficient < 1 ? coefficient : 1;
}

}  // namespace ds
