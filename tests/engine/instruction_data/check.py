#!/usr/bin/python3
"""dstrain-tokenize on instruction datasets against an independent reference.

The reference renders each conversation with jinja2 set up as transformers sets it up
(../chat_template/reference.py), takes the ids of the rendered text from tokenizers.js
(../hf_tokenizer/reference.mjs, installed by the hf_tokenizer fixture), and finds the targets as
transformers' return_assistant_tokens_mask does: every token that overlaps an assistant span (the
{% generation %} spans, else each assistant turn's rendering past the conversation before it with
the generation prompt), found from the tokens' bytes. A token that crosses a span's edge means the
record must be skipped. Tokens, mask and document offsets must equal the files exactly.
Then bad input: each skipped record named by file and line (or array index), the summary,
truncation, and nothing written when nothing can be.

Usage: check.py DSTRAIN_TOKENIZE SOURCE_DIR HF_FIXTURE_OUT WORK_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys

tokenize, source, fixture, work = sys.argv[1:5]
here = os.path.join(source, "tests", "engine", "instruction_data")
sys.path.insert(0, os.path.join(source, "tests", "engine", "chat_template"))
import reference  # noqa: E402  (jinja2 as Hugging Face sets it up)

failures = []


def check(condition, message):
    if not condition:
        failures.append(message)
        print("FAIL:", message)


def tokenizer_folder(name, template_file, base="qwen2"):
    """The hf_tokenizer fixture's `base` folder (qwen2: <|im_start|>, <|im_end|>, <|endoftext|>;
    llama3: <|begin_of_text|> and the header tokens) with `template_file` as its chat_template."""
    out = os.path.join(work, name)
    os.makedirs(out, exist_ok=True)
    shutil.copy(os.path.join(fixture, "files", base, "tokenizer.json"), out)
    config = json.load(open(os.path.join(fixture, "files", base, "tokenizer_config.json")))
    config["chat_template"] = open(os.path.join(here, template_file), encoding="utf-8").read()
    json.dump(config, open(os.path.join(out, "tokenizer_config.json"), "w"))
    return out


def byte_decoder():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Reference:
    def __init__(self, folder):
        self.folder = folder
        tok = json.load(open(os.path.join(folder, "tokenizer.json")))
        config = json.load(open(os.path.join(folder, "tokenizer_config.json")))
        self.pieces = {}
        decode = byte_decoder()
        for token, id_ in tok["model"]["vocab"].items():
            self.pieces[id_] = bytes(decode[c] for c in token)
        for added in tok["added_tokens"]:
            self.pieces[added["id"]] = added["content"].encode()
            if added["content"] == config["eos_token"]:
                self.eos = added["id"]
        self.config = config
        self.env = reference.environment()
        self.template = self.env.from_string(config["chat_template"])

    def render(self, messages, add_generation_prompt, extra):
        case = {"messages": messages, "add_generation_prompt": add_generation_prompt, "extra": extra,
                "bos_token": self.config.get("bos_token"), "eos_token": self.config.get("eos_token")}
        out = reference.render(self.env, self.template, case)
        if out["error"]:
            raise ValueError(out["error"])
        return out

    def encode(self, texts):
        path = os.path.join(work, "texts.json")
        json.dump(texts, open(path, "w"))
        out = subprocess.run(["node", os.path.join(source, "tests", "engine", "hf_tokenizer", "reference.mjs"),
                              os.path.join(fixture, "npm"), self.folder, path], check=True, capture_output=True)
        return json.loads(out.stdout)["encode"]

    def document(self, text, spans, ids):
        """The mask of `ids` (text's): tokens overlapping a span are targets; None when a token
        crosses a span's edge."""
        starts, at = [], 0
        for id_ in ids:
            starts.append(at)
            at += len(self.pieces[id_])
        assert at == len(text.encode()), "the reference's token bytes do not spell the text"
        mask = [0] * len(ids)
        for begin, end in spans:
            for t, id_ in enumerate(ids):
                first, last = starts[t], starts[t] + len(self.pieces[id_])
                if first < begin < last or first < end < last:
                    return None
                if first < end and last > begin:
                    mask[t] = 1
        return mask


def to_messages(record):
    if "messages" in record:
        return record["messages"]
    if "conversations" in record:
        roles = {"human": "user", "gpt": "assistant", "system": "system"}
        return [{"role": roles[m["from"]], "content": m["value"]} for m in record["conversations"]]
    if "instruction" in record:
        user = record["instruction"] + ("\n\n" + record["input"] if record.get("input") else "")
        return [{"role": "user", "content": user}, {"role": "assistant", "content": record["output"]}]
    return None


def expected(ref, records, extra, valid_fraction):
    """(train, val): each (tokens, mask, doc starts)."""
    plans = []  # (text, spans, tail ids)
    for record in records:
        messages = to_messages(record)
        if messages is None and isinstance(record["prompt"], list):
            # TRL: the prompt rendered with the generation prompt; all that follows is the completion.
            head = ref.render(record["prompt"], True, extra)["text"]
            text = ref.render(record["prompt"] + record["completion"], False, extra)["text"]
            assert text.startswith(head)
            plans.append((text, [(len(head.encode()), len(text.encode()))], []))
            continue
        if messages is None:
            text = record["prompt"] + record["completion"]
            eos = [] if record["completion"].endswith(ref.config["eos_token"]) else [ref.eos]
            plans.append((text, [(len(record["prompt"].encode()), len(text.encode()))], eos))
            continue
        whole = ref.render(messages, False, extra)
        spans = whole["generation"]
        if not spans:
            for k, m in enumerate(messages):
                if m["role"] == "assistant":
                    head = ref.render(messages[:k], True, extra)["text"]
                    tail = ref.render(messages[:k + 1], False, extra)["text"]
                    spans.append((len(head.encode()), len(tail.encode())))
        plans.append((whole["text"], spans, []))
    all_ids = ref.encode([text for text, _, _ in plans])
    splits = {"train": ([], [], []), "val": ([], [], [])}
    j = 0
    for (text, spans, tail), ids in zip(plans, all_ids):
        mask = ref.document(text, spans, ids)
        if mask is None:
            continue
        ids, mask = ids + tail, mask + [1] * len(tail)
        split = splits["val" if int((j + 1) * valid_fraction) > int(j * valid_fraction) else "train"]
        j += 1
        split[2].append(len(split[0]))
        split[0].extend(ids)
        split[1].extend(mask)
    return splits


def read_split(prefix):
    data = open(prefix + ".bin", "rb").read()
    header = struct.unpack("<256i", data[:1024])
    assert header[:2] == (20240520, 1) and len(data) == 1024 + 2 * header[2], prefix + ".bin"
    tokens = list(struct.unpack("<%dH" % header[2], data[1024:]))
    data = open(prefix + ".mask", "rb").read()
    magic, version, count = struct.unpack("<iiq", data[:16])
    assert (magic, version, count) == (0x4B53414D, 1, len(tokens)) and len(data) == 16 + count, prefix + ".mask"
    mask = list(data[16:])
    data = open(prefix + ".docs", "rb").read()
    magic, version, count, documents = struct.unpack("<iiqq", data[:24])
    assert (magic, version, count) == (0x53434F44, 1, len(tokens)) and len(data) == 24 + 8 * documents, prefix + ".docs"
    return tokens, mask, list(struct.unpack("<%dq" % documents, data[24:]))


def run(args):
    return subprocess.run([tokenize] + args, capture_output=True, text=True)


def write_jsonl(name, records):
    path = os.path.join(work, name)
    with open(path, "w", encoding="utf-8") as f:
        for r in records:
            f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return path


MESSAGES = [
    {"messages": [{"role": "user", "content": "Hello, who are you?"},
                  {"role": "assistant", "content": "I'm the quick brown fox."}]},
    {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Numbers: 1234?"},
                  {"role": "assistant", "content": "42 is the answer."},
                  {"role": "user", "content": [{"type": "text", "text": "Café "}, {"type": "text", "text": "naïve?"}]},
                  {"role": "assistant", "content": [{"type": "text", "text": "Déjà vu, façade: 日本語 🦊."}]}]},
    {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "\nthere"}]},
    {"messages": [{"role": "user", "content": "It's the dog's bone, isn't it?"},
                  {"role": "assistant", "content": "They'll say we've done it."}]},
]
SHAREGPT = [
    {"conversations": [{"from": "system", "value": "Training runs."}, {"from": "human", "value": "Tokenizers?"},
                       {"from": "gpt", "value": "Split text into pieces."}]},
    {"conversations": [{"from": "human", "value": "Merge pairs"}, {"from": "gpt", "value": "most frequent first"},
                       {"from": "human", "value": "and then?"}, {"from": "gpt", "value": "Repeat."}]},
]
ALPACA = [
    {"instruction": "Say hello.", "input": "", "output": "Hello world!"},
    {"instruction": "Translate", "input": "résumé", "output": "CV, résumé."},
    {"instruction": "Count", "input": "1 2 3", "output": "3"},
]
PROMPT_COMPLETION = [
    {"prompt": "The quick brown", "completion": " fox jumps over the lazy dog."},
    {"prompt": "Hello", "completion": " world"},
    {"prompt": "Numbers:", "completion": " 1234567890"},
    # " world" is one token across the completion's edge: skipped, and said.
    {"prompt": "Hello ", "completion": "world!"},
    # Ends with the EOS already: not appended again (TRL's add_eos).
    {"prompt": "Hello", "completion": " there<|endoftext|>"},
]
CONVERSATIONAL_PROMPT_COMPLETION = [
    {"prompt": [{"role": "user", "content": "What is 42?"}], "completion": [{"role": "assistant", "content": "The answer."}]},
    {"prompt": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}],
     "completion": [{"role": "assistant", "content": "Hello, world."}]},
]


def test_shapes():
    extra = {"system_name": "Quokka"}
    for template in ("generation.jinja", "turns.jinja"):
        folder = tokenizer_folder("tok_" + template.split(".")[0], template)
        ref = Reference(folder)
        for name, records, fraction in (("messages", MESSAGES, 0.3), ("sharegpt", SHAREGPT, 0.5),
                                        ("alpaca", ALPACA, 0.0), ("prompt_completion", PROMPT_COMPLETION, 0.4),
                                        ("conversational_prompt_completion", CONVERSATIONAL_PROMPT_COMPLETION, 0.0)):
            what = "%s with %s" % (name, template)
            data = write_jsonl(name + ".jsonl", records)
            prefix = os.path.join(work, "out", name)
            got = run(["--tokenizer", "hf:" + folder, "--input", data, "--out", prefix, "--valid-fraction",
                       str(fraction), "--template-arg", "system_name=" + json.dumps(extra["system_name"])])
            check(got.returncode == 0, "%s: exit %d: %s" % (what, got.returncode, got.stderr))
            if got.returncode != 0:
                continue
            want = expected(ref, records, extra, fraction)
            for split in ("train", "val"):
                tokens, mask, docs = read_split(prefix + "_" + split)
                check(tokens == want[split][0], "%s %s: tokens %s != %s" % (what, split, tokens, want[split][0]))
                check(mask == want[split][1], "%s %s: mask %s != %s" % (what, split, mask, want[split][1]))
                check(docs == want[split][2], "%s %s: documents %s != %s" % (what, split, docs, want[split][2]))
            check(any(want["train"][1]) and not all(want["train"][1]), what + ": the mask is trivial")
            if name == "prompt_completion":
                check("line 4: a token crosses the boundary of a target" in got.stderr, what + ": " + got.stderr)
        # Several inputs: one stream of documents, split by their position in it.
        inputs = [os.path.join(work, n + ".jsonl") for n in ("messages", "sharegpt", "alpaca")]
        got = run(["--tokenizer", "hf:" + folder, "--input"] + inputs +
                  ["--out", os.path.join(work, "out", "several"), "--valid-fraction", "0.25",
                   "--template-arg", "system_name=" + json.dumps(extra["system_name"])])
        check(got.returncode == 0, "several inputs: " + got.stderr)
        if got.returncode == 0:
            want = expected(ref, MESSAGES + SHAREGPT + ALPACA, extra, 0.25)
            for split in ("train", "val"):
                check(read_split(os.path.join(work, "out", "several_" + split)) == want[split],
                      "several inputs, %s: files differ" % split)
        # A JSON array of the same records reads the same; the column map renames fields.
        renamed = [{"question": r["prompt"], "answer": r["completion"]} for r in PROMPT_COMPLETION]
        path = os.path.join(work, "renamed.json")
        json.dump(renamed, open(path, "w"))
        got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", os.path.join(work, "out", "renamed"),
                   "--valid-fraction", "0", "--column-map", "prompt=question", "--column-map", "completion=answer",
                   "--format", "prompt_completion"])
        check(got.returncode == 0, "column map: " + got.stderr)
        if got.returncode == 0:
            want = expected(ref, PROMPT_COMPLETION, extra, 0.0)
            check(read_split(os.path.join(work, "out", "renamed_train")) == want["train"], "column map: files differ")


def test_llama3():
    """A template that writes the BOS itself, on a tokenizer whose post-processor would add one:
    written once."""
    folder = tokenizer_folder("tok_llama3", "llama3.jinja", "llama3")
    ref = Reference(folder)
    bos = [t["id"] for t in json.load(open(os.path.join(folder, "tokenizer.json")))["added_tokens"]
           if t["content"] == "<|begin_of_text|>"][0]
    records = SHAREGPT + ALPACA + CONVERSATIONAL_PROMPT_COMPLETION + PROMPT_COMPLETION[:3]
    path = os.path.join(work, "llama3.json")
    json.dump(records, open(path, "w"))
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", os.path.join(work, "out", "llama3"),
               "--valid-fraction", "0"])
    check(got.returncode == 0, "llama3: " + got.stderr)
    if got.returncode == 0:
        want = expected(ref, records, {}, 0.0)
        tokens, mask, docs = read_split(os.path.join(work, "out", "llama3_train"))
        check((tokens, mask, docs) == want["train"], "llama3: files differ")
        check(tokens[0] == bos and tokens[1] != bos and tokens.count(bos) == len(SHAREGPT + ALPACA) + 2,
              "llama3: one BOS per conversation")


def test_bad_input():
    folder = os.path.join(work, "tok_generation")
    lines = [
        json.dumps(MESSAGES[0]),
        json.dumps({"messages": [{"role": "user"}, {"role": "assistant", "content": "x"}]}),
        json.dumps({"messages": [{"role": "tool", "content": "x"}, {"role": "assistant", "content": "y"}]}),
        json.dumps({"messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": ""}]}),
        '{"prompt": "caf\xff", "completion": "x"}',
        '{"messages": [',
        "",
        json.dumps({"text": "no known fields"}),
    ]
    path = os.path.join(work, "bad.jsonl")
    with open(path, "wb") as f:
        f.write("\n".join(lines).replace("\xff", "\udcff").encode("utf-8", "surrogateescape") + b"\n")
    prefix = os.path.join(work, "out", "bad")
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", prefix, "--valid-fraction", "0"])
    check(got.returncode == 0, "bad input: exit %d %s" % (got.returncode, got.stderr))
    for line, words in ((2, 'has no "content"'), (3, "raise_exception: Unknown role: tool"),
                        (4, "an assistant turn is empty"), (5, "invalid UTF-8"), (6, "not valid JSON"),
                        (8, "no known fields")):
        check("%s line %d: " % (path, line) in got.stderr and words in got.stderr,
              "bad input line %d (%s) not reported: %s" % (line, words, got.stderr))
    check("skipped 6 of 7 records" in got.stderr, "bad input summary: " + got.stderr)
    check(read_split(prefix + "_train")[2] == [0], "bad input: one document kept")

    # A JSON array names the index.
    path = os.path.join(work, "bad.json")
    json.dump([MESSAGES[0], {"messages": "not a list"}], open(path, "w"))
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", prefix + "_array"])
    check("%s index 1: " % path in got.stderr, "array index not named: " + got.stderr)

    # Too long: skipped and counted, or cut with the lost targets said.
    path = write_jsonl("long.jsonl", MESSAGES[:2])
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", prefix + "_skip", "--valid-fraction", "0",
               "--max-length", "30", "--on-too-long", "skip"])
    check(got.returncode != 0 and "line 1: " in got.stderr and "line 2: " in got.stderr and "too long" in got.stderr
          and not os.path.exists(prefix + "_skip_train.bin"), "too long, skip: " + got.stderr)
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", prefix + "_cut", "--valid-fraction", "0",
               "--max-length", "30"])
    check(got.returncode == 0 and "line 2: truncated" in got.stderr and "truncated 2 documents" in got.stderr,
          "too long, truncate: " + got.stderr)
    if got.returncode == 0:
        ref = Reference(folder)
        whole = expected(ref, MESSAGES[:2], {}, 0.0)["train"]
        tokens, mask, docs = read_split(prefix + "_cut_train")
        want_tokens = whole[0][:30] + whole[0][whole[2][1]:whole[2][1] + 30]
        check(tokens == want_tokens and docs == [0, 30], "truncated files differ")

    # A file that cannot be written (a folder in the way of PREFIX_val.docs's temporary file):
    # nothing at the final paths, no temporary file left.
    path = write_jsonl("ok.jsonl", MESSAGES[:1])
    blocked = os.path.join(work, "blocked")
    os.makedirs(blocked + "_val.docs.tmp")
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", blocked])
    check(got.returncode != 0 and "blocked_val.docs.tmp" in got.stderr
          and sorted(n for n in os.listdir(work) if n.startswith("blocked")) == ["blocked_val.docs.tmp"],
          "a failed write must leave nothing: %s %s" % (got.stderr, os.listdir(work)))
    # A tokenizer without a chat template: an error for the whole run, unless --chat-template gives one.
    bare = os.path.join(fixture, "files", "qwen2")
    got = run(["--tokenizer", "hf:" + bare, "--input", path, "--out", os.path.join(work, "out", "bare")])
    check(got.returncode != 0 and "--chat-template" in got.stderr and "skipped" not in got.stderr,
          "no chat template: " + got.stderr)
    got = run(["--tokenizer", "hf:" + bare, "--input", path, "--out", os.path.join(work, "out", "bare"),
               "--chat-template", os.path.join(here, "generation.jinja"), "--valid-fraction", "0"])
    check(got.returncode == 0 and read_split(os.path.join(work, "out", "bare_train")) ==
          expected(Reference(folder), MESSAGES[:1], {}, 0.0)["train"], "--chat-template FILE: " + got.stderr)
    # Instruction data and text documents are not mixed.
    text = os.path.join(work, "doc.txt")
    open(text, "w").write("plain text")
    got = run(["--tokenizer", "hf:" + folder, "--input", path, text, "--out", os.path.join(work, "out", "mixed")])
    check(got.returncode != 0 and "mixes instruction data" in got.stderr, "mixed inputs: " + got.stderr)

    # Nothing written when nothing can be; no temporary files left.
    path = write_jsonl("none.jsonl", [{"text": "x"}])
    got = run(["--tokenizer", "hf:" + folder, "--input", path, "--out", os.path.join(work, "out", "none")])
    check(got.returncode != 0 and not [n for n in os.listdir(os.path.join(work, "out")) if n.startswith("none")],
          "nothing must be written: " + got.stderr)


def main():
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(os.path.join(work, "out"))
    test_shapes()
    test_llama3()
    test_bad_input()
    if failures:
        print("%d failures" % len(failures))
        sys.exit(1)
    print("all instruction data checks passed")


if __name__ == "__main__":
    main()
