// The seconds this process has had reads, and writes, in flight on any RawAioHandle. Two handles
// that read at once (the optimizer's and the parameters' swappers) count those seconds once, so
// bytes over a difference of two readings is the rate the device gave the process.
#pragma once

namespace ds::io {

// Since the process started: the union of every read request's time from queueing to its last
// piece done (writes: the same for write requests).
double reading_seconds();
double writing_seconds();

}  // namespace ds::io
