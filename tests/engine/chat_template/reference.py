#!/usr/bin/python3
"""Renders chat templates with jinja2 set up as Hugging Face's apply_chat_template sets it up.

The environment restates transformers' _compile_jinja_template (src/transformers/utils/
chat_template_utils.py): ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
extensions=[AssistantTracker, loopcontrols]), its own tojson filter (json.dumps, no HTML escaping,
keys unsorted), raise_exception and strftime_now globals; the variables are the ones
apply_chat_template passes (special tokens, messages, tools, documents=None,
add_generation_prompt, then the caller's kwargs).

Usage: reference.py TEMPLATE CASES.json  -> JSON list on stdout, one entry per case:
  {"text": str, "generation": [[begin, end], ...] (UTF-8 byte offsets), "error": null}
  or {"error": "raise_exception: MESSAGE" | "other: TYPE: MESSAGE"}.
A template that does not compile prints {"compile_error": "..."} instead.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment


class Raised(Exception):
    pass


class AssistantTracker(Extension):
    # As transformers' AssistantTracker: {% generation %} bodies are rendered through a call
    # block, and the span of their output in the rendered text is recorded.
    tags = {"generation"}

    def __init__(self, environment):
        super().__init__(environment)
        environment.extend(tracker=self)
        self.blocks = None
        self.spans = None

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_generation_support"), [], [], body).set_lineno(lineno)

    @jinja2.pass_eval_context
    def _generation_support(self, context, caller):
        rv = caller()
        # HF's is_active(): `rendered_blocks or generation_indices`, so a generation block that
        # opens the output, before anything was rendered, is not recorded. Kept, as HF keeps it.
        if self.blocks or self.spans:
            start = len("".join(self.blocks))
            self.spans.append((start, start + len(rv)))
        return rv


def raise_exception(message):
    raise Raised(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def strftime_now(format):
    return datetime.now().strftime(format)


def environment():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render(env, template, case):
    variables = {}
    for key in ("bos_token", "eos_token"):
        if case.get(key) is not None:
            variables[key] = case[key]
    variables.update(messages=case["messages"], tools=case.get("tools"), documents=None,
                     add_generation_prompt=case.get("add_generation_prompt", False))
    variables.update(case.get("extra", {}))
    tracker = env.tracker
    tracker.blocks, tracker.spans = [], []
    try:
        for block in template.generate(**variables):
            tracker.blocks.append(block)
        text = "".join(tracker.blocks)
        # Code point offsets, as HF counts them, turned into UTF-8 byte offsets.
        spans = [[len(text[:b].encode()), len(text[:e].encode())] for b, e in tracker.spans]
        return {"text": text, "generation": spans, "error": None}
    except Raised as e:
        return {"error": "raise_exception: " + str(e)}
    except Exception as e:  # noqa: BLE001 - any other failure only has to be an error on our side too
        return {"error": "other: %s: %s" % (type(e).__name__, e)}
    finally:
        tracker.blocks = tracker.spans = None


def main():
    source = open(sys.argv[1], encoding="utf-8").read()
    cases = json.load(open(sys.argv[2], encoding="utf-8"))
    env = environment()
    try:
        template = env.from_string(source)
    except jinja2.TemplateSyntaxError as e:
        json.dump({"compile_error": "line %d: %s" % (e.lineno, e.message)}, sys.stdout)
        return
    json.dump([render(env, template, case) for case in cases], sys.stdout, ensure_ascii=False)


if __name__ == "__main__":
    main()
