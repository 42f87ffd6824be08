// A whole file read into memory: tokenizer files and the documents to encode.
#pragma once

#include <string>

namespace ds::tokenizer {

// Throws ds::Error with the path and errno when the file cannot be opened or read.
std::string read_text_file(const std::string& path);

}  // namespace ds::tokenizer
