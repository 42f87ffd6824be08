// Global-norm gradient clipping, DeepSpeed's gradient_clipping (torch.nn.utils.clip_grad_norm_):
// every gradient is multiplied by one coefficient computed from the norm of all of them together.
#pragma once

namespace ds {

// What to multiply every gradient by, given their global L2 norm: max_norm / (norm + 1e-6) when
// that is below 1, else 1 (no clipping). max_norm <= 0 turns clipping off (always 1).
double clip_coefficient(double norm, double max_norm);

}  // namespace ds
