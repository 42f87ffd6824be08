// The LibTorch headers that dstrain's torch-using sources share. Parsed once per build.
#pragma once
#include <torch/torch.h>
