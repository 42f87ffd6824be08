#!/usr/bin/env bash
# `dstrain template` end to end: a Hugging Face folder written here (tokenizer_config.json with a
# chat_template string and an AddedToken eos_token; then chat_template.jinja; then --chat-template),
# JSONL conversations on stdin; each printed line must be the JSON string jinja2 renders
# (reference.py, set up as Hugging Face sets it up). Then bad input must name its line.
# Usage: template_command_test.sh DSTRAIN SOURCE_DIR WORK
set -euo pipefail
dstrain=$1 src=$2 work=$3
here=$src/tests/engine/chat_template
py=/usr/bin/python3
rm -rf "$work"; mkdir -p "$work/hf"

# The folder: qwen_style.jinja as tokenizer_config.json's chat_template, tokens as transformers writes them.
$py - "$here/templates/qwen_style.jinja" "$work/hf/tokenizer_config.json" <<'PY'
import json, sys
config = {"chat_template": open(sys.argv[1], encoding="utf-8").read(), "bos_token": None,
          "eos_token": {"content": "<|im_end|>", "lstrip": False, "normalized": False, "rstrip": False, "single_word": False}}
json.dump(config, open(sys.argv[2], "w"), indent=2)
PY
# Every conversation of conversations.json that renders, as JSONL with its tools.
$py - "$here/conversations.json" "$work/in.jsonl" <<'PY'
import json, sys
with open(sys.argv[2], "w") as out:
    for c in json.load(open(sys.argv[1], encoding="utf-8")):
        if c["name"] in ("content as parts", "no messages"):
            continue  # these fail in the template, on purpose; checked below
        record = {"messages": c["messages"]}
        if "tools" in c:
            record["tools"] = c["tools"]
        out.write(json.dumps(record, ensure_ascii=False) + "\n")
    out.write("\n")  # a blank line is skipped
PY

# Renders in.jsonl with jinja2 as `dstrain template` was asked to: TEMPLATE then extra variables.
expect() {
  $py - "$work/in.jsonl" "$work/cases.json" "$2" <<'PY'
import json, sys
extra = json.loads(sys.argv[3])
prompt = extra.pop("__prompt")
cases = []
for line in open(sys.argv[1], encoding="utf-8"):
    if line.strip():
        r = json.loads(line)
        cases.append({"messages": r["messages"], "tools": r.get("tools"), "add_generation_prompt": prompt,
                      "eos_token": "<|im_end|>", "extra": extra})
json.dump(cases, open(sys.argv[2], "w"))
PY
  $py "$here/reference.py" "$1" "$work/cases.json" | $py -c '
import json, sys
for r in json.load(sys.stdin):
    assert r["error"] is None, r
    print(json.dumps(r["text"], ensure_ascii=False))' > "$work/expected.txt"
}

check() {  # check NAME: expected.txt against got.txt
  if ! cmp -s "$work/expected.txt" "$work/got.txt"; then
    echo "FAIL: $1"; diff "$work/expected.txt" "$work/got.txt" | head -20; exit 1
  fi
  echo "ok: $1 ($(wc -l < "$work/got.txt") conversations)"
}

"$dstrain" template --tokenizer "hf:$work/hf" < "$work/in.jsonl" > "$work/got.txt"
expect "$here/templates/qwen_style.jinja" '{"__prompt": false}'
check "tokenizer_config.json's chat_template"

"$dstrain" template --tokenizer "hf:$work/hf" --add-generation-prompt --arg enable_thinking=false \
  --arg 'date_string="26 Jul 2024"' < "$work/in.jsonl" > "$work/got.txt"
expect "$here/templates/qwen_style.jinja" '{"__prompt": true, "enable_thinking": false, "date_string": "26 Jul 2024"}'
check "--add-generation-prompt --arg"

cp "$here/templates/mistral_style.jinja" "$work/hf/chat_template.jinja"
grep -v "Weather\|Two calls\|Find dstrain\|narrator\|\"one\"" "$work/in.jsonl" > "$work/in2.jsonl"; mv "$work/in2.jsonl" "$work/in.jsonl"
"$dstrain" template --tokenizer "hf:$work/hf" < "$work/in.jsonl" > "$work/got.txt"
expect "$here/templates/mistral_style.jinja" '{"__prompt": false}'
check "chat_template.jinja before tokenizer_config.json"

"$dstrain" template --tokenizer "hf:$work/hf" --chat-template "$here/templates/control.jinja" < "$work/in.jsonl" > "$work/got.txt"
expect "$here/templates/control.jinja" '{"__prompt": false}'
check "--chat-template"

fails() {  # fails NAME EXPECTED-MESSAGE INPUT [ARGS...]: must exit non-zero, print nothing, name the input
  local name=$1 message=$2 input=$3; shift 3
  [ $# -gt 0 ] || set -- --tokenizer "hf:$work/hf"
  if printf '%s' "$input" | "$dstrain" template "$@" > "$work/out.txt" 2> "$work/err.txt"; then
    echo "FAIL: $name succeeded"; exit 1
  fi
  grep -qF -- "$message" "$work/err.txt" || { echo "FAIL: $name: expected '$message' in:"; cat "$work/err.txt"; exit 1; }
  [ ! -s "$work/out.txt" ] || { echo "FAIL: $name printed output"; exit 1; }
  echo "ok: $name"
}
good='{"messages": [{"role": "user", "content": "hi"}]}'
fails "a line that is not JSON" "stdin line 2: not a JSON object" "$good"$'\n''{"messages": ['
fails "no messages" "stdin line 1: no \"messages\" list" '{"msgs": []}'
fails "roles that do not alternate" "stdin line 3: chat template $work/hf/chat_template.jinja line 20 column 17: raise_exception: After the optional system message, roles must alternate" \
  "$good"$'\n\n''{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}'
fails "an --arg that is not JSON" "the value of enable_thinking is not JSON" "$good" --tokenizer "hf:$work/hf" --arg enable_thinking=nope
fails "not an hf: tokenizer" "expected hf:DIR" "$good" --tokenizer spm:x.model
echo "all dstrain template checks passed"
