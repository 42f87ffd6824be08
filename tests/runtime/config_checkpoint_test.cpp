// The "checkpoint" block: DeepSpeed's keys, typed; use_node_local_storage acts, the others are
// accepted and named as not acted on.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"

using Catch::Matchers::Contains;
using nlohmann::json;

namespace {

ds::Config read(const json& checkpoint) {
  return ds::Config::from_json({{"train_batch_size", 8}, {"checkpoint", checkpoint}});
}

std::string error_of(const json& checkpoint) {
  try {
    read(checkpoint);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "(no ds::Error thrown)";
}

}  // namespace

TEST_CASE("checkpoint: DeepSpeed's defaults when the block is absent", "[config]") {
  const ds::Config config = ds::Config::from_json({{"train_batch_size", 8}});
  CHECK_FALSE(config.checkpoint().use_node_local_storage);
  CHECK(config.checkpoint().tag_validation == "Warn");
  CHECK_FALSE(config.checkpoint().load_universal);
  CHECK(config.keys_not_acted_on().empty());
}

TEST_CASE("checkpoint.use_node_local_storage is read, kept in to_json, and acts", "[config]") {
  const ds::Config config = read({{"use_node_local_storage", true}});
  CHECK(config.checkpoint().use_node_local_storage);
  CHECK(config.to_json()["checkpoint"]["use_node_local_storage"] == true);
  CHECK(ds::Config::from_json(config.to_json()).checkpoint().use_node_local_storage);
  CHECK(config.keys_not_acted_on().empty());
  CHECK_THAT(error_of({{"use_node_local_storage", "yes"}}), Contains("checkpoint.use_node_local_storage"));
}

TEST_CASE("checkpoint: the keys not acted on are named, tag_validation one of three", "[config]") {
  const ds::Config config = read({{"tag_validation", "fail"}, {"load_universal", true}, {"parallel_write", {{"pipeline_stage", true}}}});
  CHECK(config.checkpoint().tag_validation == "Fail");
  CHECK(config.checkpoint().parallel_write == json({{"pipeline_stage", true}}));
  CHECK(config.keys_not_acted_on() ==
        std::vector<std::string>{"checkpoint.tag_validation", "checkpoint.load_universal", "checkpoint.parallel_write"});
  CHECK_THAT(error_of({{"tag_validation", "Sometimes"}}), Contains("checkpoint.tag_validation"));
  CHECK_THAT(read({{"no_such_key", 1}}).warnings().at(0), Contains("checkpoint.no_such_key"));
}
