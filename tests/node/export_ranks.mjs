// Writes js-tiktoken's o200k_base and cl100k_base rank tables in the standard tiktoken file
// format (`base64(token bytes) rank` per line) so k3serve's C++ loader reads the very same data
// the independent implementation uses. Usage: node export_ranks.mjs OUTDIR
import fs from "node:fs";
import path from "node:path";
import o200k from "js-tiktoken/ranks/o200k_base";
import cl100k from "js-tiktoken/ranks/cl100k_base";

const out = process.argv[2];
if (!out) {
  console.error("usage: node export_ranks.mjs OUTDIR");
  process.exit(2);
}
fs.mkdirSync(out, { recursive: true });
for (const [name, ranks] of [["o200k_base", o200k], ["cl100k_base", cl100k]]) {
  // js-tiktoken's compact form: lines "! <offset> <b64> <b64> ..." (ranks offset, offset+1, ...).
  const pairs = [];
  for (const line of ranks.bpe_ranks.split("\n")) {
    if (!line) continue;
    const [, offsetStr, ...tokens] = line.split(" ");
    const offset = Number.parseInt(offsetStr, 10);
    tokens.forEach((t, i) => pairs.push([offset + i, t]));
  }
  pairs.sort((a, b) => a[0] - b[0]);
  const file = path.join(out, `${name}.tiktoken`);
  fs.writeFileSync(file, pairs.map(([r, t]) => `${t} ${r}`).join("\n") + "\n");
  console.log(`${file}: ${pairs.length} ranks`);
}
