// ds::remove_tree: removes a file or a folder with everything in it, as std::filesystem::remove_all,
// without following symbolic links. A path that does not exist is not an error; anything that
// cannot be removed is a ds::Error naming the path and errno.
//
// Why not std::filesystem::remove_all: LibTorch 2.x wheels (pip's, the CUDA builds) export their own
// copy of it, which the dynamic linker binds ahead of libstdc++'s, and it jumps to address 0. Code
// of ours that removes trees uses this instead (docs/gpu.md).
#pragma once

#include <string>

namespace ds {

void remove_tree(const std::string& path);

}  // namespace ds
