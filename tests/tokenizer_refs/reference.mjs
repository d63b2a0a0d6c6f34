// Runs the npm reference implementations for strata's tokenizer tests and benchmark.
//   node reference.mjs REFS_DIR JOB.json OUT.json
// JOB.json: {"tasks": [...]}, each task one of
//   {"name", "kind": "encode",   "dir", "texts": [...]}         @huggingface/tokenizers, no special tokens added
//   {"name", "kind": "llama3js", "texts": [...]}                 llama3-tokenizer-js, no bos/eos
//   {"name", "kind": "render",   "template", "bos_token", "eos_token", "conversations": [[{role, content}]]}
//                                                                @huggingface/jinja, add_generation_prompt
//   {"name", "kind": "bench",    "dir" | "llama3js": true, "corpus_file", "seconds"}
// OUT.json maps each task's name to its result (ids per text, rendered texts, or
// {"bytes", "seconds", "mb_per_s", "tokens"}).
import fs from 'node:fs';
import path from 'node:path';
import { createRequire } from 'node:module';
import { pathToFileURL } from 'node:url';

const [, , refsDir, jobFile, outFile] = process.argv;
const require = createRequire(path.join(path.resolve(refsDir), 'package.json'));
const load = async (name) => import(pathToFileURL(require.resolve(name)).href);

const { Tokenizer } = require('@huggingface/tokenizers');
const { Template } = require('@huggingface/jinja');
let llama3js = null;
const llama3 = async () => {
  if (llama3js === null) llama3js = (await load('llama3-tokenizer-js')).default;
  return llama3js;
};
const hfTokenizer = (dir) =>
  new Tokenizer(JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8')),
                JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')));

const job = JSON.parse(fs.readFileSync(jobFile, 'utf8'));
const out = {};
for (const task of job.tasks) {
  if (task.kind === 'encode') {
    const t = hfTokenizer(task.dir);
    out[task.name] = task.texts.map((s) => t.encode(s, { add_special_tokens: false }).ids);
  } else if (task.kind === 'llama3js') {
    const t = await llama3();
    out[task.name] = task.texts.map((s) => t.encode(s, { bos: false, eos: false }));
  } else if (task.kind === 'render') {
    const tpl = new Template(task.template);
    out[task.name] = task.conversations.map((messages) =>
      tpl.render({ messages, bos_token: task.bos_token, eos_token: task.eos_token, add_generation_prompt: true }));
  } else if (task.kind === 'bench') {
    // Encode the corpus line by line (as a chat server encodes messages), repeated until
    // `seconds` have passed; the first pass warms caches and is not timed.
    const lines = fs.readFileSync(task.corpus_file, 'utf8').split('\n');
    const bytes = Buffer.byteLength(lines.join('\n'), 'utf8');
    let encode;
    if (task.llama3js) {
      const t = await llama3();
      encode = (s) => t.encode(s, { bos: false, eos: false }).length;
    } else {
      const t = hfTokenizer(task.dir);
      encode = (s) => t.encode(s, { add_special_tokens: false }).ids.length;
    }
    let tokens = 0;
    for (const s of lines) tokens += encode(s);
    let passes = 0;
    const start = process.hrtime.bigint();
    let seconds = 0;
    do {
      for (const s of lines) encode(s);
      ++passes;
      seconds = Number(process.hrtime.bigint() - start) / 1e9;
    } while (seconds < task.seconds);
    out[task.name] = { bytes: bytes * passes, seconds, mb_per_s: (bytes * passes) / seconds / 1e6, tokens };
  } else {
    throw new Error(`unknown task kind ${task.kind}`);
  }
}
fs.writeFileSync(outFile, JSON.stringify(out));
