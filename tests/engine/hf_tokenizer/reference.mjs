// The reference: Hugging Face's tokenizers.js (@huggingface/tokenizers, installed by setup.sh into
// the build folder, never used by the product) on one tokenizer folder and a JSON array of texts.
// Usage: node reference.mjs NODE_MODULES_PARENT DIR TEXTS.json
// Prints {"encode": [[ids]...], "encode_special": [...], "decode": [text...], "decode_skip": [...]}:
// the ids without and with special tokens, and the decoding of encode_special's ids as they are
// and with special tokens skipped.
import { readFileSync } from "node:fs";
import path from "node:path";
import { pathToFileURL } from "node:url";

const [prefix, dir, textsPath] = process.argv.slice(2);
const module = path.join(prefix, "node_modules", "@huggingface", "tokenizers", "dist", "tokenizers.mjs");
const { Tokenizer } = await import(pathToFileURL(module).href);
const read = (name) => JSON.parse(readFileSync(path.join(dir, name), "utf8"));
const tokenizer = new Tokenizer(read("tokenizer.json"), read("tokenizer_config.json"));
const texts = JSON.parse(readFileSync(textsPath, "utf8"));
const out = { encode: [], encode_special: [], decode: [], decode_skip: [] };
for (const text of texts) {
  out.encode.push(tokenizer.encode(text, { add_special_tokens: false }).ids);
  const ids = tokenizer.encode(text, { add_special_tokens: true }).ids;
  out.encode_special.push(ids);
  // tokenizers.js refuses an empty list; the empty decoding is "".
  out.decode.push(ids.length ? tokenizer.decode(ids, { skip_special_tokens: false }) : "");
  out.decode_skip.push(ids.length ? tokenizer.decode(ids, { skip_special_tokens: true }) : "");
}
process.stdout.write(JSON.stringify(out));
