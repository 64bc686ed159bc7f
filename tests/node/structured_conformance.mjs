// Structured outputs through the official OpenAI SDK against `k3 serve` on random-weight demo
// models: tools whose parameters are arbitrary JSON Schemas (the vendor-verifier kind: anyOf,
// $defs with recursion, additionalProperties, enums, number bounds and formats, nested arrays,
// patterns) with the call forced, and response_format json_schema, at temperature 1 over several
// seeds — every call's arguments validate (ajv, with ajv-formats), streamed and not, and the
// streamed deltas concatenate to exactly the non-streamed arguments.
// usage: node structured_conformance.mjs K3_BASE_URL KIMI_LINEAR_BASE_URL
import OpenAI from 'openai';
import Ajv from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

const [k3Url, klUrl] = process.argv.slice(2);
const k3 = new OpenAI({ baseURL: k3Url, apiKey: 'x', maxRetries: 0 });
const kl = new OpenAI({ baseURL: klUrl, apiKey: 'x', maxRetries: 0 });
const ajv = new Ajv({ strict: false, allErrors: true });
addFormats(ajv);
let failed = 0;
const check = (name, ok, info = '') => {
  console.log(`${ok ? 'ok  ' : 'FAIL'} ${name}${ok ? '' : ' ' + info}`);
  if (!ok) failed++;
};

const schemas = {
  flat: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer', minimum: 1, maximum: 14 }, metric: { type: 'boolean' } },
    required: ['city', 'days'], additionalProperties: false },
  anyOf: { type: 'object', properties: { target: { anyOf: [{ type: 'string', format: 'email' }, { type: 'integer', minimum: 0 }] },
    note: { type: ['string', 'null'] } }, required: ['target', 'note'], additionalProperties: false },
  defs_recursive: { $defs: { node: { type: 'object', properties: { name: { type: 'string', maxLength: 8 },
    children: { type: 'array', items: { $ref: '#/$defs/node' }, maxItems: 2 } }, required: ['name'], additionalProperties: false } },
    type: 'object', properties: { tree: { $ref: '#/$defs/node' } }, required: ['tree'], additionalProperties: false },
  additional: { type: 'object', properties: { id: { type: 'string', format: 'uuid' } }, required: ['id'],
    additionalProperties: { type: 'number', exclusiveMinimum: 0, exclusiveMaximum: 100 } },
  enums: { type: 'object', properties: { unit: { enum: ['C', 'F', 'K'] }, level: { enum: [1, 2, 3, null] }, mode: { const: 'fast' } },
    required: ['unit', 'level', 'mode'], additionalProperties: false },
  numbers: { type: 'object', properties: { ratio: { type: 'number', minimum: -1, maximum: 1 }, count: { type: 'integer', minimum: -5, maximum: 5000 },
    price: { type: 'number', exclusiveMinimum: 0 } }, required: ['ratio', 'count', 'price'], additionalProperties: false },
  nested_arrays: { type: 'object', properties: { grid: { type: 'array', minItems: 1, maxItems: 3,
    items: { type: 'array', items: { type: 'integer', minimum: 0, maximum: 9 }, minItems: 1, maxItems: 3 } } }, required: ['grid'], additionalProperties: false },
  formats: { type: 'object', properties: { when: { type: 'string', format: 'date-time' }, day: { type: 'string', format: 'date' },
    code: { type: 'string', pattern: '^[A-Z]{3}-\\d{3}$' } }, required: ['when', 'day', 'code'], additionalProperties: false },
  allOf: { allOf: [{ type: 'object', properties: { a: { type: 'string', minLength: 2 } }, required: ['a'] },
    { properties: { b: { type: 'array', prefixItems: [{ type: 'string' }, { type: 'boolean' }], items: false } }, required: ['b'] }] },
  free_object: { type: 'object' },
};

const tool = (name, parameters) => ({ type: 'function', function: { name, description: `the ${name} tool`, parameters } });
const msgs = [{ role: 'user', content: 'Call the tool.' }];

async function callArgs(client, model, body) {
  const r = await client.chat.completions.create({ model, ...body });
  return { finish: r.choices[0].finish_reason, calls: r.choices[0].message.tool_calls ?? [], content: r.choices[0].message.content };
}
// The server's prefix cache: the first request of a prompt prefills it whole, later ones restore
// a checkpoint inside it and prefill the rest — the same values to fp32 rounding, not bit for bit,
// which a temperature-1 sampler may turn into a different token. A one-token request first puts
// the prompt's checkpoints in place, so that the non-streamed and the streamed request compared
// below both restore the same one and must agree exactly.
async function warmCache(client, model, body) {
  await client.chat.completions.create({ model, ...body, max_tokens: 1 });
}

async function streamArgs(client, model, body) {
  const s = await client.chat.completions.create({ model, ...body, stream: true });
  const calls = [];
  let content = '', finish = null;
  for await (const ch of s) {
    if (!ch.choices.length) continue;
    const d = ch.choices[0].delta;
    if (d.content) content += d.content;
    for (const tc of d.tool_calls ?? []) {
      if (tc.id) calls[tc.index] = { id: tc.id, function: { name: tc.function.name, arguments: tc.function.arguments ?? '' } };
      else calls[tc.index].function.arguments += tc.function.arguments ?? '';
    }
    if (ch.choices[0].finish_reason) finish = ch.choices[0].finish_reason;
  }
  return { finish, calls, content };
}

for (const [name, schema] of Object.entries(schemas)) {
  const validate = ajv.compile(schema);
  for (const seed of [1, 2]) {
    const body = { messages: msgs, tools: [tool(name, schema)], tool_choice: 'required', temperature: 1, seed, max_tokens: 400,
      thinking: { type: 'disabled' } };
    await warmCache(k3, 'Kimi-K3', body);
    const plain = await callArgs(k3, 'Kimi-K3', body);
    const streamed = await streamArgs(k3, 'Kimi-K3', body);
    let ok = plain.calls.length >= 1 && plain.finish === 'tool_calls';
    let why = `finish ${plain.finish}, ${plain.calls.length} calls`;
    for (const c of plain.calls) {
      let v;
      try { v = JSON.parse(c.function.arguments); } catch (e) { ok = false; why = `unparsable ${c.function.arguments}`; break; }
      if (c.function.name !== name || !validate(v)) { ok = false; why = `${c.function.arguments} ${JSON.stringify(validate.errors)}`; break; }
    }
    check(`K3 tool ${name} seed ${seed}: arguments validate`, ok, why);
    const same = streamed.calls.length === plain.calls.length &&
      streamed.calls.every((c, i) => c.function.arguments === plain.calls[i].function.arguments && c.function.name === plain.calls[i].function.name);
    check(`K3 tool ${name} seed ${seed}: streamed deltas = non-streamed arguments`, same,
      JSON.stringify({ plain: plain.calls.map((c) => c.function.arguments), streamed: streamed.calls.map((c) => c.function.arguments) }));
  }
}

// Thinking on: the think channel stays free; the call after it still validates.
{
  const body = { messages: msgs, tools: [tool('flat', schemas.flat)], tool_choice: 'required', temperature: 1, seed: 9, max_tokens: 500 };
  const r = await k3.chat.completions.create({ model: 'Kimi-K3', ...body });
  const c = r.choices[0].message.tool_calls ?? [];
  check('K3 thinking on: reasoning, then a valid call', c.length >= 1 && ajv.validate(schemas.flat, JSON.parse(c[0].function.arguments)) &&
    typeof r.choices[0].message.reasoning_content === 'string', JSON.stringify(r.choices[0].message).slice(0, 300));
}

// response_format json_schema: the content validates.
for (const name of ['flat', 'defs_recursive', 'numbers', 'formats']) {
  const validate = ajv.compile(schemas[name]);
  for (const seed of [1, 2]) {
    const body = { messages: [{ role: 'user', content: 'Answer in JSON.' }], temperature: 1, seed, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name, schema: schemas[name], strict: true } } };
    await warmCache(k3, 'Kimi-K3', body);
    const plain = await callArgs(k3, 'Kimi-K3', body);
    const streamed = await streamArgs(k3, 'Kimi-K3', body);
    let ok = true, v;
    try { v = JSON.parse(plain.content); ok = validate(v); } catch (e) { ok = false; }
    check(`K3 response_format ${name} seed ${seed}: content validates`, ok, plain.content);
    check(`K3 response_format ${name} seed ${seed}: streamed = non-streamed`, streamed.content === plain.content, streamed.content);
  }
}
{
  const r = await callArgs(k3, 'Kimi-K3', { messages: msgs, temperature: 1, seed: 4, max_tokens: 300, response_format: { type: 'json_object' } });
  let obj = null;
  try { obj = JSON.parse(r.content); } catch (e) { /* reported below */ }
  check('K3 response_format json_object: one JSON object', obj !== null && typeof obj === 'object' && !Array.isArray(obj), r.content);
}

// Named tool choice, parallel_tool_calls false, none.
{
  const tools = [tool('flat', schemas.flat), tool('enums', schemas.enums)];
  const r = await callArgs(k3, 'Kimi-K3', { messages: msgs, tools, tool_choice: { type: 'function', function: { name: 'enums' } },
    temperature: 1, seed: 5, max_tokens: 400, thinking: { type: 'disabled' } });
  check('K3 named tool choice: exactly one call of it', r.calls.length === 1 && r.calls[0].function.name === 'enums' &&
    ajv.validate(schemas.enums, JSON.parse(r.calls[0].function.arguments)), JSON.stringify(r.calls));
  const one = await callArgs(k3, 'Kimi-K3', { messages: msgs, tools, tool_choice: 'required', parallel_tool_calls: false,
    temperature: 1, seed: 6, max_tokens: 400, thinking: { type: 'disabled' } });
  check('K3 parallel_tool_calls false: one call', one.calls.length === 1, JSON.stringify(one.calls));
  let none = 0;
  for (const seed of [1, 2, 3]) {
    const n = await callArgs(k3, 'Kimi-K3', { messages: msgs, tools, tool_choice: 'none', temperature: 1, seed, max_tokens: 120,
      thinking: { type: 'disabled' } });
    none += n.calls.length;
  }
  check('K3 tool_choice none: never a call', none === 0);
  const klr = await callArgs(kl, 'kimi-linear', { messages: msgs, tools, tool_choice: { type: 'function', function: { name: 'flat' } },
    temperature: 1, seed: 7, max_tokens: 400 });
  check('Kimi Linear named tool choice: one valid call', klr.calls.length === 1 && klr.calls[0].function.name === 'flat' &&
    ajv.validate(schemas.flat, JSON.parse(klr.calls[0].function.arguments)), JSON.stringify(klr.calls));
  const klreq = await callArgs(kl, 'kimi-linear', { messages: msgs, tools: [tool('nested_arrays', schemas.nested_arrays)],
    tool_choice: 'required', temperature: 1, seed: 8, max_tokens: 400 });
  check('Kimi Linear required: valid calls', klreq.calls.length >= 1 &&
    klreq.calls.every((c) => ajv.validate(schemas.nested_arrays, JSON.parse(c.function.arguments))), JSON.stringify(klreq.calls));
}

// A schema that cannot be enforced is a 400 naming the keyword's path; max_tokens inside a value.
try {
  await k3.chat.completions.create({ model: 'Kimi-K3', messages: msgs, tool_choice: 'required',
    tools: [tool('bad', { type: 'object', properties: { x: { type: 'string', not: { const: 'y' } } } })] });
  check('unenforceable schema: 400', false, 'accepted');
} catch (e) {
  check('unenforceable schema: 400 naming the keyword', e.status === 400 && e.param === 'tools[0].function.parameters.properties.x.not' &&
    /not/.test(e.message), `${e.status} ${e.param} ${e.message}`);
}
{
  const r = await callArgs(k3, 'Kimi-K3', { messages: msgs, tools: [tool('flat', schemas.flat)], tool_choice: 'required', temperature: 1,
    seed: 3, max_tokens: 12, thinking: { type: 'disabled' } });
  check('max_tokens inside the constrained value: finish_reason length, no error', r.finish === 'length', JSON.stringify(r));
}

process.exit(failed ? 1 : 0);
