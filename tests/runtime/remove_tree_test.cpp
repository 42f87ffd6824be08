// ds::remove_tree against what std::filesystem sees afterwards.
#include <catch2/catch.hpp>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace fs = std::filesystem;

namespace {

fs::path fresh_folder(const std::string& name) {
  const fs::path folder = fs::temp_directory_path() / (name + "." + std::to_string(::getpid()));
  fs::create_directories(folder);
  return folder;
}

void write(const fs::path& path) { std::ofstream(path) << "bytes"; }

}  // namespace

TEST_CASE("remove_tree removes a folder and everything in it, never what links point to", "[runtime]") {
  const fs::path outside = fresh_folder("dstrain-remove-outside");
  write(outside / "kept");
  const fs::path tree = fresh_folder("dstrain-remove-tree");
  fs::create_directories(tree / "a" / "b" / "c");
  write(tree / "top");
  write(tree / "a" / "b" / "c" / "deep");
  fs::create_directory_symlink(outside, tree / "a" / "link");

  ds::remove_tree(tree.string());
  CHECK_FALSE(fs::exists(tree));
  CHECK(fs::exists(outside / "kept"));

  write(outside / "file");
  ds::remove_tree((outside / "file").string());  // a plain file
  CHECK_FALSE(fs::exists(outside / "file"));
  ds::remove_tree((outside / "missing").string());  // nothing there: not an error
  ds::remove_tree(outside.string());
  CHECK_FALSE(fs::exists(outside));
}

TEST_CASE("remove_tree names the path it cannot remove", "[runtime]") {
  const fs::path folder = fresh_folder("dstrain-remove-error");
  write(folder / "file");
  const std::string below_a_file = (folder / "file" / "x").string();
  CHECK_THROWS_WITH(ds::remove_tree(below_a_file), Catch::Contains("path=" + below_a_file) && Catch::Contains("errno"));
  ds::remove_tree(folder.string());
}
