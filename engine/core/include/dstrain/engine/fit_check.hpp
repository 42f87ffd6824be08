// Before the built-in GPT is built: a config that cannot run on this node is refused, naming what
// to change, instead of an allocator's failure minutes later (a billion layers would allocate for
// half a minute, then die with a bare std::bad_alloc) or a swap file that fills the disk mid-step:
//   memory  the predicted peak (ds::MemoryPlan, after the planner chose what the user left unset)
//           over this rank's budget: the setting behind the largest share, the limit's path, the
//           bytes needed and the budget's;
//   disk    each nvme_path (offload on NVMe) must hold the swap files of every rank of this node at
//           their largest (while the model is built, Init's build file too): a writable folder on
//           a disk that takes O_DIRECT, not in memory (tmpfs), with the room; the path, the bytes
//           needed and the bytes free (io::check_swap_path).
// Both run before anything is written, so a refused run leaves the disk and the checkpoints as
// they were.
#pragma once

#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds {

// ds::Error naming the key and the path; returns when the peak fits (or no limit is known) and
// the disks hold the swap files. `world` is the data-parallel world size; the ranks on this node
// share the node's limits and disks.
void refuse_unless_fits(const Config& config, const models::GPTConfig& gpt, int world);

}  // namespace ds
