#include "instruction_files.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdio>

#include "dstrain/engine/data/token_file.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the files are written in host order");

void write_file(const std::string& path, const std::vector<std::pair<const void*, size_t>>& parts) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) throw Error("cannot create file").with_path(path).with_errno(errno);
  bool ok = true;
  // An empty part (an empty split's data() may be null) is not passed to fwrite, which takes no null.
  for (const auto& [data, size] : parts) ok = ok && (size == 0 || std::fwrite(data, 1, size, file) == size);
  ok = ok && std::fflush(file) == 0 && ::fsync(::fileno(file)) == 0;
  const int err = errno;
  if (std::fclose(file) != 0 || !ok) {
    ::unlink(path.c_str());
    throw Error("write failed").with_path(path).with_errno(ok ? errno : err);
  }
}

}  // namespace

SplitWriter::~SplitWriter() {
  for (const auto& [temporary, final_path] : staged_) ::unlink(temporary.c_str());  // never a folder in the way (remove() would take an empty one)
}

void SplitWriter::stage(const std::string& prefix, const SplitData& split) {
  const auto tokens = static_cast<int64_t>(split.tokens.size());
  const auto documents = static_cast<int64_t>(split.doc_starts.size());
  const int32_t mask_header[2] = {kMaskMagic, kInstructionFileVersion};
  const int32_t docs_header[2] = {kDocsMagic, kInstructionFileVersion};

  std::string path = prefix + ".bin";
  staged_.emplace_back(path + ".tmp", path);
  data::write_token_file(staged_.back().first, split.tokens);

  path = prefix + ".mask";
  staged_.emplace_back(path + ".tmp", path);
  write_file(staged_.back().first, {{mask_header, sizeof mask_header},
                                    {&tokens, sizeof tokens},
                                    {split.mask.data(), split.mask.size()}});

  path = prefix + ".docs";
  staged_.emplace_back(path + ".tmp", path);
  write_file(staged_.back().first, {{docs_header, sizeof docs_header},
                                    {&tokens, sizeof tokens},
                                    {&documents, sizeof documents},
                                    {split.doc_starts.data(), split.doc_starts.size() * sizeof(int64_t)}});
}

void SplitWriter::commit() {
  for (const auto& [temporary, final_path] : staged_)
    if (std::rename(temporary.c_str(), final_path.c_str()) != 0)
      throw Error("cannot rename " + temporary + " into place").with_path(final_path).with_errno(errno);
  staged_.clear();
}

}  // namespace ds::app
