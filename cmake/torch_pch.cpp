// Anchor translation unit for the shared LibTorch precompiled header (cmake/torch_pch.hpp).
