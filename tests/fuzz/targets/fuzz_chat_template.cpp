// A chat template from any bytes, parsed and rendered on a fixed conversation (tools, tool calls,
// list-valued content) with and without the generation prompt: rendered, or refused with a
// ds::Error, never another exception, a crash, a sanitizer report or unbounded memory.
#include <cstddef>
#include <cstdint>
#include <string>

#include "dstrain/engine/chat_template/chat_template.hpp"
#include "expect_named.hpp"

namespace {

const ds::chat_template::Json& conversation() {
  static const auto messages = ds::chat_template::Json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}, {"type": "image"}]},
    {"role": "assistant", "content": null, "tool_calls": [{"id": "call12345", "type": "function",
      "function": {"name": "get_weather", "arguments": {"city": "Paris", "days": 2, "x": 1.5}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "Sunny"},
    {"role": "assistant", "content": "<think>\nhot\n</think>\n\nIt is sunny. \u00e9\ud83d\ude00"}])");
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string source(reinterpret_cast<const char*>(data), size);
  expect_named([&] {
    const auto t = ds::chat_template::ChatTemplate::parse(source, "fuzz.jinja");
    for (bool prompt : {false, true}) {
      ds::chat_template::RenderOptions options;
      options.add_generation_prompt = prompt;
      options.bos_token = "<s>";
      options.eos_token = "</s>";
      options.tools = ds::chat_template::Json::parse(R"([{"type": "function", "function": {"name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}])");
      options.extra = {{"enable_thinking", prompt}};
      (void)t.render(conversation(), options);
    }
  });
  return 0;
}
