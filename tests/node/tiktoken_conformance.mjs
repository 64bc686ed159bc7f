// Conformance: k3serve's tokenizer vs js-tiktoken (an independent implementation) on o200k_base
// and cl100k_base. Every case must give identical ids, token for token.
// Usage: node tiktoken_conformance.mjs K3_BINARY RANK_DIR CORPUS_FILE
import fs from "node:fs";
import path from "node:path";
import { spawnSync } from "node:child_process";
import { Tiktoken } from "js-tiktoken/lite";
import o200k from "js-tiktoken/ranks/o200k_base";
import cl100k from "js-tiktoken/ranks/cl100k_base";

const [k3, rankDir, corpusFile] = process.argv.slice(2);
const corpus = fs.readFileSync(corpusFile, "utf8");
const cases = corpus.split("\n\n").filter((s) => s.length > 0);
cases.push(corpus);                                   // everything at once
cases.push("");                                       // empty input
cases.push(" ".repeat(300) + "x" + "\n".repeat(50));  // whitespace runs
cases.push("abcdefg".repeat(300));  // one 2,100-byte piece: our long-piece (heap) BPE path; js-tiktoken
                                    // is O(n²) here, so longer pieces are checked in the C++ tests
cases.push("9".repeat(1000) + " " + "!?".repeat(700)); // digit groups and a long punctuation run
cases.push("😀".repeat(200) + "中".repeat(300));        // long multi-byte runs

let failures = 0, checked = 0, tokens = 0;
for (const [name, ranks, pattern] of [["o200k_base", o200k, "o200k"], ["cl100k_base", cl100k, "cl100k"]]) {
  const enc = new Tiktoken(ranks);
  const rankFile = path.join(rankDir, `${name}.tiktoken`);
  for (const [i, text] of cases.entries()) {
    const want = enc.encode(text);
    const r = spawnSync(k3, ["tokenize", "--tiktoken", rankFile, "--pattern", pattern], { input: text, maxBuffer: 1 << 28 });
    if (r.status !== 0) {
      console.error(`${name} case ${i}: k3 tokenize failed: ${r.stderr}`);
      failures++;
      continue;
    }
    const line = r.stdout.toString().trim();
    const got = line.length ? line.split(" ").map(Number) : [];
    checked++;
    tokens += want.length;
    const n = Math.max(want.length, got.length);
    for (let j = 0; j < n; j++) {
      if (want[j] !== got[j]) {
        console.error(`${name} case ${i}: first difference at token ${j}: js-tiktoken ${want[j]} ` +
          `(${JSON.stringify(enc.decode([want[j] ?? 0]))}) vs k3 ${got[j]}; lengths ${want.length} / ${got.length}`);
        failures++;
        break;
      }
    }
    // Round trip through k3's decoder too.
    const d = spawnSync(k3, ["tokenize", "--tiktoken", rankFile, "--pattern", pattern, "--decode"], { input: got.join(" ") });
    if (d.stdout.toString() !== text) {
      console.error(`${name} case ${i}: decode(encode(text)) != text`);
      failures++;
    }
  }
}
console.log(`tiktoken conformance: ${checked} cases, ${tokens} tokens compared, ${failures} failures`);
process.exit(failures ? 1 : 0);
