// The whole public API of dstrain. Each part also has its own header, e.g. <dstrain/io/aio_handle.hpp>.
#pragma once

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/memory.hpp"
#include "dstrain/runtime/timers.hpp"

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/distributed.hpp"
#include "dstrain/comm/mpi_backend.hpp"

#include "dstrain/io/aio_handle.hpp"
#include "dstrain/io/swap_folder.hpp"
#include "dstrain/io/swap_preflight.hpp"

#include "dstrain/pipe/executor.hpp"
#include "dstrain/pipe/grid.hpp"
#include "dstrain/pipe/partition.hpp"
#include "dstrain/pipe/schedule.hpp"

#include "dstrain/zero/gathered_parameters.hpp"
#include "dstrain/zero/init.hpp"
#include "dstrain/zero/linear.hpp"
#include "dstrain/zero/module.hpp"
#include "dstrain/zero/module_call.hpp"
#include "dstrain/zero/param_status.hpp"

#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/checkpoint_schedule.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/pipeline_engine.hpp"
