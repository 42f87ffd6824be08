#include "dstrain/runtime/error.hpp"

#include <cstring>
#include <sstream>

namespace ds {

Error::Error(std::string message) : message_(std::move(message)) { format(); }

Error& Error::with_key(std::string key) { key_ = std::move(key); format(); return *this; }
Error& Error::with_path(std::string path) { path_ = std::move(path); format(); return *this; }
Error& Error::with_offset(int64_t offset) { offset_ = offset; format(); return *this; }
Error& Error::with_length(int64_t length) { length_ = length; format(); return *this; }
Error& Error::with_rank(int rank) { rank_ = rank; format(); return *this; }
Error& Error::with_errno(int errnum) { errnum_ = errnum; format(); return *this; }

void Error::format() {
  std::ostringstream out;
  if (key_) out << "config key '" << *key_ << "': ";
  out << message_;
  std::ostringstream context;
  const char* sep = "";
  auto field = [&](const char* name, const auto& value) {
    context << sep << name << "=" << value;
    sep = ", ";
  };
  if (path_) field("path", *path_);
  if (offset_) field("offset", *offset_);
  if (length_) field("length", *length_);
  if (rank_) field("rank", *rank_);
  if (errnum_) field("errno", std::to_string(*errnum_) + " (" + std::strerror(*errnum_) + ")");
  if (!context.str().empty()) out << " [" << context.str() << "]";
  formatted_ = out.str();
}

}  // namespace ds
