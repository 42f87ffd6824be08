// The folder a monitor writes into: created with its parents, as DeepSpeed's os.makedirs.
#pragma once

#include <string>

namespace ds::monitor {

// ds::Error with the path and errno when it cannot be created (or is a file).
void create_folder(const std::string& path);

}  // namespace ds::monitor
