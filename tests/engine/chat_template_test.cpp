// Chat templates against jinja2 set up as Hugging Face sets it up (chat_template/reference.py,
// run with Debian's /usr/bin/python3 and python3-jinja2): every template of chat_template/
// templates/ on every conversation of chat_template/conversations.json, with and without the
// generation prompt, must render the same text and the same {% generation %} spans, or fail where
// jinja2 fails (with raise_exception's message). Then what is outside the subset must be refused
// naming its line and column, and Hugging Face folders must be read as transformers reads them.
#include <catch2/catch.hpp>

#include "dstrain/engine/chat_template/chat_template.hpp"
#include "dstrain/runtime/error.hpp"

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using ds::chat_template::ChatTemplate;
using ds::chat_template::Json;
using ds::chat_template::RenderOptions;

namespace {

const fs::path kDir = fs::path(DSTRAIN_SOURCE_DIR) / "tests/engine/chat_template";
const char* const kPython = "/usr/bin/python3";

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool have_reference() {
  return std::system((std::string(kPython) + " -c 'import jinja2' 2>/dev/null").c_str()) == 0;
}

// A scratch folder, removed with its contents at the end of the test.
struct Scratch {
  fs::path dir;
  Scratch() {
    std::string t = (fs::temp_directory_path() / "chat_template_test.XXXXXX").string();
    dir = mkdtemp(t.data());
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
};

// Every conversation twice: without and with add_generation_prompt.
Json make_cases() {
  Json cases = Json::array();
  for (const auto& conv : Json::parse(slurp(kDir / "conversations.json"))) {
    for (bool prompt : {false, true}) {
      Json c = conv;
      c["add_generation_prompt"] = prompt;
      c["bos_token"] = "<s>";
      c["eos_token"] = "</s>";
      cases.push_back(c);
    }
  }
  return cases;
}

Json run_reference(const fs::path& templ, const fs::path& cases_file) {
  const std::string cmd = std::string(kPython) + " " + (kDir / "reference.py").string() + " " + templ.string() + " " +
                          cases_file.string();
  FILE* pipe = popen(cmd.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, pipe)) > 0) out.append(buf, n);
  REQUIRE(pclose(pipe) == 0);
  return Json::parse(out);
}

RenderOptions options_of(const Json& c) {
  RenderOptions o;
  o.add_generation_prompt = c.value("add_generation_prompt", false);
  if (c.contains("bos_token")) o.bos_token = c["bos_token"].get<std::string>();
  if (c.contains("eos_token")) o.eos_token = c["eos_token"].get<std::string>();
  if (c.contains("tools")) o.tools = c["tools"];
  if (c.contains("extra")) o.extra = c["extra"];
  return o;
}

// Renders each case and compares it with jinja2's result; returns how many cases were compared.
size_t compare_with_reference(const fs::path& templ, const Json& cases) {
  Scratch scratch;
  const fs::path cases_file = scratch.dir / "cases.json";
  std::ofstream(cases_file) << cases.dump();
  const Json expected = run_reference(templ, cases_file);
  INFO("template " << templ.filename().string());
  REQUIRE(expected.is_array());
  REQUIRE(expected.size() == cases.size());
  const ChatTemplate t = ChatTemplate::parse(slurp(templ), templ.filename().string());
  for (size_t i = 0; i < cases.size(); ++i) {
    const Json& want = expected[i];
    INFO("case " << i << " (" << cases[i].value("name", "") << ", add_generation_prompt="
                 << cases[i].value("add_generation_prompt", false) << ")");
    if (!want["error"].is_null()) {
      INFO("jinja2 failed with " << want["error"].get<std::string>());
      std::string message;
      try {
        t.render(cases[i]["messages"], options_of(cases[i]));
      } catch (const ds::Error& e) {
        message = e.what();
      }
      REQUIRE_FALSE(message.empty());
      const std::string err = want["error"].get<std::string>();
      if (err.rfind("raise_exception: ", 0) == 0) CHECK(message.find(err) != std::string::npos);
      continue;
    }
    ds::chat_template::Rendered got;
    try {
      got = t.render(cases[i]["messages"], options_of(cases[i]));
    } catch (const ds::Error& e) {
      FAIL("jinja2 renders it, we fail: " << e.what());
    }
    CHECK(got.text == want["text"].get<std::string>());
    Json spans = Json::array();
    for (const auto& s : got.generation) spans.push_back({s.begin, s.end});
    CHECK(spans == want["generation"]);
  }
  return cases.size();
}

std::string error_of(const std::string& source, const Json& messages = Json::array(), const Json& extra = Json::object()) {
  try {
    RenderOptions o;
    o.extra = extra;
    ChatTemplate::parse(source, "t.jinja").render(messages, o);
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("family-style templates render as jinja2 renders them", "[chat_template]") {
  if (!have_reference()) FAIL("/usr/bin/python3 has no jinja2: apt-get install python3-jinja2 (scripts/run.sh does)");
  const Json cases = make_cases();
  size_t templates = 0, compared = 0;
  for (const auto& entry : fs::directory_iterator(kDir / "templates")) {
    if (entry.path().extension() != ".jinja") continue;
    compared += compare_with_reference(entry.path(), cases);
    ++templates;
  }
  CHECK(templates >= 7);
  CHECK(compared >= templates * 20);
}

TEST_CASE("errors name the template's line and column", "[chat_template]") {
  CHECK(error_of("hello\n  {{ x | frobnicate }}").find("t.jinja line 2 column 10: unknown filter 'frobnicate'") != std::string::npos);
  CHECK(error_of("{% if x is shiny %}{% endif %}").find("line 1 column 12: unknown test 'shiny'") != std::string::npos);
  CHECK(error_of("a\nb\n{% include 'x' %}").find("line 3 column 4: the 'include' tag is not supported") != std::string::npos);
  CHECK(error_of("{% raw %}x{% endraw %}").find("line 1 column 1: the raw tag") != std::string::npos);
  CHECK(error_of("{{ (1, 2) }}").find("line 1 column 6: tuples are not supported") != std::string::npos);
  CHECK(error_of("{% for x in y %}").find("expected 'endfor'") != std::string::npos);
  CHECK(error_of("{% break %}").find("line 1 column 4: 'break' outside of a for loop") != std::string::npos);
  CHECK(error_of("{{ 'a' ").find("line 1 column 1: unexpected end of template") != std::string::npos);
  CHECK(error_of("{# open").find("line 1 column 1: missing end of comment tag") != std::string::npos);
  CHECK(error_of("x\n{{ messages|map('upper') }}", Json::array({"a"})).find("line 2 column 13: printing a generator") != std::string::npos);
  CHECK(error_of("{{ 1 + 'a' }}").find("line 1 column 6:") != std::string::npos);
  CHECK(error_of("{{ 'x' % 2 }}").find("printf-style") != std::string::npos);
  CHECK(error_of("{{ [].append(1) }}").find("list.append() is not supported") != std::string::npos);
  CHECK(error_of("{{ nothing.attr }}").find("line 1 column 11: 'nothing' is undefined") != std::string::npos);
  CHECK(error_of("\n\n   {{- raise_exception('Roles must alternate: ' ~ 3) }}")
            .find("t.jinja line 3 column 8: raise_exception: Roles must alternate: 3") != std::string::npos);
  CHECK(error_of("{{ 9223372036854775807 + 1 }}").find("beyond 64 bits") != std::string::npos);
  CHECK(error_of(std::string("{{ '\xff' }}")).find("not valid UTF-8") != std::string::npos);
}

TEST_CASE("Hugging Face folders: chat_template as a string, a list, chat_template.jinja, an override", "[chat_template]") {
  if (!have_reference()) FAIL("/usr/bin/python3 has no jinja2");
  Scratch scratch;
  const fs::path dir = scratch.dir;
  const std::string source = "{{ bos_token }}{% for m in messages %}[{{ m.role }}]{{ m.content }}{{ eos_token }}{% endfor %}";
  const Json messages = Json::parse(R"([{"role": "user", "content": "hi"}])");
  auto render = [&](const ChatTemplate& t) { return t.render(messages, RenderOptions{}).text; };

  std::ofstream(dir / "tokenizer_config.json")
      << Json{{"chat_template", source}, {"bos_token", "<B>"}, {"eos_token", {{"content", "<E>"}, {"lstrip", false}}}}.dump();
  CHECK(render(ChatTemplate::from_hf_folder(dir.string())) == "<B>[user]hi<E>");

  std::ofstream(dir / "tokenizer_config.json")
      << Json{{"chat_template", Json::array({{{"name", "tool_use"}, {"template", "T"}}, {{"name", "default"}, {"template", source}}})},
              {"eos_token", "<E>"}}.dump();
  const ChatTemplate listed = ChatTemplate::from_hf_folder(dir.string());
  CHECK(render(listed) == "[user]hi<E>");  // no bos_token: undefined, printed empty
  CHECK(listed.name().find("[default]") != std::string::npos);

  std::ofstream(dir / "chat_template.jinja") << "J{{ messages|length }}";
  CHECK(render(ChatTemplate::from_hf_folder(dir.string())) == "J1");
  std::ofstream(dir / "override.jinja") << "O{{ eos_token }}";
  CHECK(render(ChatTemplate::from_hf_folder(dir.string(), (dir / "override.jinja").string())) == "O<E>");

  fs::remove(dir / "chat_template.jinja");
  std::ofstream(dir / "tokenizer_config.json") << R"({"eos_token": 5, "chat_template": "x"})";
  try {
    ChatTemplate::from_hf_folder(dir.string());
    FAIL("a numeric eos_token was accepted");
  } catch (const ds::Error& e) {
    CHECK(e.key() == "eos_token");
    CHECK(e.path() == (dir / "tokenizer_config.json").string());
  }
  std::ofstream(dir / "tokenizer_config.json") << R"({"bos_token": "<s>"})";
  CHECK_THROWS_WITH(ChatTemplate::from_hf_folder(dir.string()), Catch::Contains("no chat template"));
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": [{"name": "rag", "template": "x"}]})";
  CHECK_THROWS_WITH(ChatTemplate::from_hf_folder(dir.string()), Catch::Contains("no template named \"default\""));
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": "{% if %}"})";
  CHECK_THROWS_WITH(ChatTemplate::from_hf_folder(dir.string()), Catch::Contains("tokenizer_config.json:chat_template line 1 column"));
  std::ofstream(dir / "tokenizer_config.json") << R"({"chat_template": )";
  CHECK_THROWS_WITH(ChatTemplate::from_hf_folder(dir.string()), Catch::Contains("not valid JSON"));
}
