// The "checkpoint" block's keys (DeepSpeed's checkpoint config).
#include "config_sections.hpp"

namespace ds::config_detail {

template <class V>
void visit(V& v, CheckpointConfig& c) {
  v.field("tag_validation", c.tag_validation, std::vector<std::string>{"Ignore", "Warn", "Fail"});
  v.field("load_universal", c.load_universal);
  v.field("use_node_local_storage", c.use_node_local_storage);
  v.field("parallel_write", c.parallel_write);
  v.field("writer", c.writer);
}

template void visit(Reader&, CheckpointConfig&);
template void visit(Writer&, CheckpointConfig&);

}  // namespace ds::config_detail
