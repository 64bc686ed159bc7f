// Conformance of `k3 serve` with the official OpenAI SDK (npm `openai`).
// usage: node openai_conformance.mjs BASE_URL API_KEY MODEL
import OpenAI from 'openai';

const [base, key, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base, apiKey: key, maxRetries: 0 });
let failed = 0;
const check = (name, ok, info = '') => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ' ' + info}`);
  if (!ok) failed++;
};

// models
const models = await client.models.list();
check('models.list', models.data.length === 1 && models.data[0].id === model, JSON.stringify(models.data));

// chat, non-streaming
const c = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 8, temperature: 0,
});
check('chat.completions.create', c.object === 'chat.completion' && c.choices[0].message.role === 'assistant' &&
  c.usage.completion_tokens === 8 && c.choices[0].finish_reason === 'length', JSON.stringify(c));

// chat, streaming with usage
const stream = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 6, temperature: 0, stream: true,
  stream_options: { include_usage: true },
});
let chunks = 0, finish = null, usage = null, role = null;
for await (const ch of stream) {
  chunks++;
  if (ch.choices.length && ch.choices[0].delta.role) role = ch.choices[0].delta.role;
  if (ch.choices.length && ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  if (ch.usage) usage = ch.usage;
}
check('chat stream + include_usage', role === 'assistant' && finish === 'length' && usage && usage.completion_tokens === 6,
  JSON.stringify({ chunks, role, finish, usage }));

// logprobs through the SDK
const lp = await client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 3, temperature: 0, logprobs: true, top_logprobs: 2,
});
check('chat logprobs', lp.choices[0].logprobs.content.length === 3 &&
  lp.choices[0].logprobs.content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2), JSON.stringify(lp.choices[0].logprobs));

// n > 1
const nn = await client.chat.completions.create({ model, messages: [{ role: 'user', content: 'Hello' }], max_tokens: 2, n: 2 });
check('chat n=2', nn.choices.length === 2 && nn.choices[1].index === 1 && nn.usage.completion_tokens === 4, JSON.stringify(nn.usage));

// completions
const t = await client.completions.create({ model, prompt: 'Hello', max_tokens: 5, temperature: 0 });
check('completions.create', t.object === 'text_completion' && t.usage.completion_tokens === 5, JSON.stringify(t));
const ts = await client.completions.create({ model, prompt: 'Hello', max_tokens: 3, temperature: 0, stream: true });
let tn = 0;
for await (const ch of ts) tn++;
check('completions stream', tn >= 2, String(tn));

// errors come back as typed SDK errors with status and the OpenAI error body
async function expectError(name, fn, status, param) {
  try {
    await fn();
    check(name, false, 'no error');
  } catch (e) {
    check(name, e instanceof OpenAI.APIError && e.status === status && (param === undefined || e.param === param),
      `${e.status} ${e.param} ${e.message}`);
  }
}
await expectError('404 unknown model', () => client.chat.completions.create({
  model: 'nope', messages: [{ role: 'user', content: 'x' }] }), 404, 'model');
await expectError('400 bad field', () => client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'x' }], temperature: 'hot' }), 400, 'temperature');
await expectError('400 context length', () => client.chat.completions.create({
  model, messages: [{ role: 'user', content: 'x' }], max_tokens: 1000000 }), 400, 'max_tokens');
await expectError('400 image part', () => client.chat.completions.create({
  model, messages: [{ role: 'user', content: [{ type: 'text', text: 'What is in this image?' },
    { type: 'image_url', image_url: { url: 'https://example.com/photo.jpg' } }] }] }), 400);
// An image as a data URL through the SDK (a 32×24 RGB PNG made here): answered, and the usage
// counts its media block.
{
  const { deflateSync } = await import('node:zlib');
  const crcTable = Array.from({ length: 256 }, (_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c >>> 0; });
  const crc = (buf) => { let c = 0xffffffff; for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
  const chunk = (type, data) => { const t = Buffer.concat([Buffer.from(type), data]); const len = Buffer.alloc(4); len.writeUInt32BE(data.length); const c = Buffer.alloc(4); c.writeUInt32BE(crc(t)); return Buffer.concat([len, t, c]); };
  const w = 32, h = 24, raw = Buffer.alloc((w * 3 + 1) * h);
  for (let y = 0; y < h; y++) for (let x = 0; x < w * 3; x++) raw[y * (w * 3 + 1) + 1 + x] = (x * 7 + y * 3) & 255;
  const ihdr = Buffer.alloc(13); ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
  const png = Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]);
  const models = await client.models.list();
  const vision = models.data.some((m) => m.capabilities && m.capabilities.vision);
  const text = await client.chat.completions.create({ model, max_tokens: 2, temperature: 0, messages: [{ role: 'user', content: 'What is in this image?' }] });
  try {
    const r = await client.chat.completions.create({ model, max_tokens: 2, temperature: 0, messages: [{ role: 'user', content: [
      { type: 'text', text: 'What is in this image?' },
      { type: 'image_url', image_url: { url: 'data:image/png;base64,' + png.toString('base64'), detail: 'high' } }] }] });
    // 32×24 pads to 56×28: 2×1 merged tokens, plus begin/content/end and the "image 32x24" text.
    check('image data URL (SDK)', vision && r.choices.length === 1 && r.usage.prompt_tokens > text.usage.prompt_tokens + 2 + 3,
      `${r.usage.prompt_tokens} vs text ${text.usage.prompt_tokens}`);
  } catch (e) {
    check('image data URL (SDK)', false, `${e.status} ${e.message}`);
  }
}
// A 64 MB body over the 8 MiB limit: the 413 must reach Node's fetch (the SDK's transport) as a
// response, not as a socket error while it is still sending (the server lingers before closing).
{
  let status = 0, body = null, err = '';
  try {
    const r = await fetch(`${base}/chat/completions`, {
      method: 'POST', headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${key}` },
      body: '{"messages":[{"role":"user","content":"' + 'x'.repeat(64 << 20) + '"}]}',
    });
    status = r.status;
    body = await r.json();
  } catch (e) {
    err = String(e.cause ?? e);
  }
  check('64 MB body: 413 through fetch', status === 413 && body?.error?.code === 'body_too_large', `${status} ${err}`);
}
const bad = new OpenAI({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
await expectError('401 wrong key', () => bad.models.list(), 401);

process.exit(failed ? 1 : 0);
