// ds::io::preallocate: reserves a file's blocks before it is written, as fio does by default
// (fallocate=native). An O_DIRECT write into blocks that are already reserved only converts them
// to written; into a hole, the file system must first find and allocate them, inside the write.
//
//   ds::io::preallocate(path, bytes);   // the file exists, is at least `bytes` long, blocks reserved
#pragma once

#include <cstdint>
#include <string>

namespace ds::io {

// Creates the file if missing and reserves [0, bytes) with fallocate, growing the file to `bytes`
// if it is shorter (reserved blocks read as zeros; bytes already written stay). Returns true when
// the blocks are reserved. Where the file system has no fallocate (EOPNOTSUPP: NFSv3, some FUSE)
// it returns false and warns once per process: the blocks are then allocated as they are written.
// posix_fallocate is not the fallback: there glibc emulates it by writing every block, the cost
// preallocating is meant to save. Any other failure (ENOSPC, EDQUOT, EIO) is a ds::Error with the
// path, the length and errno.
bool preallocate(const std::string& path, int64_t bytes);
// The same on a file already open for writing; `path` names it in errors and the warning.
bool preallocate(int fd, const std::string& path, int64_t bytes);

}  // namespace ds::io
