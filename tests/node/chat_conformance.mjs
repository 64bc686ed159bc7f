// Kimi Linear chat rendering vs an independent renderer: each conversation of the corpus is
// rendered by @huggingface/jinja from tests/node/chat/k2_instruct.jinja (written from the spec's
// rules for the HF K2-Instruct template as transformers renders it) and tokenized with specials
// recognised, and rendered by `k3 render --ids`; the token ids must be equal.
// usage: node chat_conformance.mjs K3_BINARY MODEL_DIR
import { Template } from '@huggingface/jinja';
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const [k3, model] = process.argv.slice(2);
const here = dirname(fileURLToPath(import.meta.url));
const template = new Template(readFileSync(join(here, 'chat', 'k2_instruct.jinja'), 'utf8'));
const corpus = JSON.parse(readFileSync(join(here, 'chat', 'k2_corpus.json'), 'utf8'));

// The Kimi tokenizer deep-sorts tool declarations before rendering.
const deepSort = (v) => Array.isArray(v) ? v.map(deepSort)
  : v && typeof v === 'object' ? Object.fromEntries(Object.keys(v).sort().map((k) => [k, deepSort(v[k])])) : v;

let failed = 0;
for (const c of corpus) {
  const { name, ...request } = c;
  // OpenAI's `developer` role is the system role (k3serve maps it; the template knows only system).
  const messages = request.messages.map((m) => (m.role === 'developer' ? { ...m, role: 'system' } : m));
  const text = template.render({
    messages,
    tools: request.tools && request.tools.length ? deepSort(request.tools) : undefined,
    add_generation_prompt: request.add_generation_prompt ?? true,
  });
  const ref = execFileSync(k3, ['tokenize', '--model', model, '--special'], { input: text }).toString().trim();
  const ours = execFileSync(k3, ['render', '--model', model, '--ids'], { input: JSON.stringify(request) }).toString().trim();
  if (ref === ours) {
    console.log(`ok   ${name} (${ours.split(' ').length} tokens)`);
  } else {
    failed++;
    const a = ref.split(' '), b = ours.split(' ');
    let i = 0;
    while (i < a.length && a[i] === b[i]) i++;
    const shown = execFileSync(k3, ['render', '--model', model], { input: JSON.stringify(request) }).toString();
    console.log(`FAIL ${name}: ids differ at ${i} (reference ${a.length}, k3 ${b.length})\n  reference: ${JSON.stringify(text)}\n  k3:        ${JSON.stringify(shown.slice(0, -1))}`);
  }
}
process.exit(failed ? 1 : 0);
