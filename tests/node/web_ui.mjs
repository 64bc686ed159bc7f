// End-to-end test of the web playground in a real headless Chromium (puppeteer-core driving
// Debian's chromium) against real `k3 serve` processes on the demo model (random weights):
//   node web_ui.mjs <chromium> <base URL> <base URL with --api-key> <key> <screenshot.png>
// Checks: no console errors, streaming into the page, the thinking block opening and then
// collapsing, stop cancelling on the server (/metrics), settings reaching the server, tool calls
// with a tool result sent back (and reasoning_content echoed), regenerate and edit, model output
// with <script>, an onerror image and links shown inert, and an API-key server (401 shown
// without the key, working with it, the key never in a URL).
import puppeteer from 'puppeteer-core';

const [chromium, base, keyBase, apiKey, shot] = process.argv.slice(2);
let failures = 0;
function check(cond, what) {
  if (cond) console.log('ok   ' + what);
  else { console.log('FAIL ' + what); failures++; }
}

async function metric(url, name, label = '') {
  const t = await (await fetch(url + '/metrics')).text();
  let sum = 0;
  for (const line of t.split('\n'))
    if (line.startsWith(name + '{') && line.includes(label)) sum += Number(line.slice(line.lastIndexOf(' ') + 1));
  return sum;
}

async function setField(page, id, value) {
  await page.evaluate((id, value) => {
    const e = document.getElementById(id);
    if (e.type === 'checkbox') e.checked = value;
    else e.value = value;
    e.dispatchEvent(new Event('change'));
  }, id, value);
}

async function waitIdle(page, timeout = 60000) {
  await page.waitForFunction(() => !document.getElementById('send').disabled && document.getElementById('stop').disabled, { timeout });
}

async function send(page, text) {
  await page.click('#input', { clickCount: 3 });
  await page.type('#input', text);
  await page.click('#send');
}

const lastAssistant = (page) => page.evaluate(() => {
  const all = document.querySelectorAll('#messages .msg.assistant');
  const m = all[all.length - 1];
  if (!m) return null;
  const t = m.querySelector('details.thinking');
  return {
    body: m.querySelector('.body').textContent,
    thinking: t ? { open: t.open, text: t.querySelector('.text').textContent } : null,
    figures: [...m.querySelectorAll('.figures')].map((f) => f.textContent).join(' | '),
    calls: [...m.querySelectorAll('.toolcall')].map((c) => ({ name: c.querySelector('.name').textContent, args: c.querySelector('pre').textContent })),
  };
});

const browser = await puppeteer.launch({
  executablePath: chromium,
  headless: true,
  args: ['--no-sandbox', '--disable-gpu', '--disable-dev-shm-usage', '--no-first-run'],
});
try {
  // ---- the page loads cleanly -----------------------------------------------------------------
  const page = await browser.newPage();
  await page.setViewport({ width: 1280, height: 900 });
  const errors = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(m.text()); });
  page.on('pageerror', (e) => errors.push(String(e)));
  const requests = [];
  page.on('request', (r) => {
    if (r.url().endsWith('/v1/chat/completions') && r.method() === 'POST') requests.push(JSON.parse(r.postData()));
  });
  const res = await page.goto(base + '/', { waitUntil: 'load' });
  check(res.status() === 200, 'GET / is 200');
  check((res.headers()['content-security-policy'] || '').includes("script-src 'self'"), 'the page carries a strict CSP');
  await page.waitForFunction(() => document.querySelectorAll('#model option').length > 0, { timeout: 20000 });
  check(await page.$eval('#model', (s) => s.value) === 'Kimi-K3', 'the model list comes from /v1/models');
  await page.waitForFunction(() => /running \d/.test(document.getElementById('status').textContent), { timeout: 10000 });
  check(true, 'the status strip shows /metrics figures');
  check(!(await page.$eval('#image-picker', (e) => e.hidden)), 'the image picker shows for a model with a vision tower');

  // ---- a reply streams into the page, thinking shown then collapsed --------------------------
  // The demo model has random weights, so every sampled request carries a fixed seed: what it
  // writes (how long it thinks, whether it ends early) is then the same on every run.
  await setField(page, 'seed', '20261203');
  await setField(page, 'thinking', true);
  await setField(page, 'max_tokens', '160');
  await setField(page, 'temperature', '1');
  // The page repaints a streaming reply once per animation frame, and 160 tokens of the demo model
  // can arrive within one frame: the download is throttled for this reply so that it spans many
  // frames, and a MutationObserver sees every repaint (polling could miss the live state).
  const cdp = await page.createCDPSession();
  await cdp.send('Network.enable');
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: 16384, uploadThroughput: -1 });
  await page.evaluate(() => {
    window.__sawLiveThinking = false;
    new MutationObserver(() => {
      const t = document.querySelector('#messages .msg.assistant details.thinking');
      if (!document.getElementById('stop').disabled && t && t.open && t.querySelector('.text').textContent.length > 0)
        window.__sawLiveThinking = true;
    }).observe(document.getElementById('messages'), { subtree: true, childList: true, characterData: true, attributes: true });
  });
  await send(page, 'Hello there');
  await page.waitForFunction(() => window.__sawLiveThinking, { timeout: 30000 });
  check(true, 'reasoning streams into an open thinking block while the request runs');
  await waitIdle(page);
  await cdp.send('Network.emulateNetworkConditions', { offline: false, latency: 0, downloadThroughput: -1, uploadThroughput: -1 });
  let a = await lastAssistant(page);
  check(a && a.thinking && !a.thinking.open && a.thinking.text.length > 0, 'the thinking block collapses when the reply ends');
  check(/completion \d+/.test(a.figures) && /TTFT \d+ ms/.test(a.figures) && /prompt \d+/.test(a.figures), 'per-reply figures: ' + a.figures);
  check(requests.at(-1).stream === true && requests.at(-1).thinking.type === 'enabled' && requests.at(-1).seed === 20261203,
        'the request streams with thinking on and the seed set');

  // ---- an attached image goes out as an image_url part and is answered ------------------------
  {
    const { deflateSync } = await import('node:zlib');
    const { writeFileSync } = await import('node:fs');
    const { tmpdir } = await import('node:os');
    const crcT = Array.from({ length: 256 }, (_, n) => { let c = n; for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1; return c >>> 0; });
    const crc = (b) => { let c = 0xffffffff; for (const x of b) c = crcT[(c ^ x) & 0xff] ^ (c >>> 8); return (c ^ 0xffffffff) >>> 0; };
    const chunk = (t, d) => { const td = Buffer.concat([Buffer.from(t), d]); const l = Buffer.alloc(4); l.writeUInt32BE(d.length); const c = Buffer.alloc(4); c.writeUInt32BE(crc(td)); return Buffer.concat([l, td, c]); };
    const w = 40, h = 30, raw = Buffer.alloc((w * 3 + 1) * h);
    for (let i = 0; i < raw.length; i++) if (i % (w * 3 + 1)) raw[i] = (i * 13) & 255;
    const ihdr = Buffer.alloc(13); ihdr.writeUInt32BE(w, 0); ihdr.writeUInt32BE(h, 4); ihdr[8] = 8; ihdr[9] = 2;
    const file = `${tmpdir()}/k3-web-ui-${process.pid}.png`;
    writeFileSync(file, Buffer.concat([Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]), chunk('IHDR', ihdr), chunk('IDAT', deflateSync(raw)), chunk('IEND', Buffer.alloc(0))]));
    const input = await page.$('#image');
    await input.uploadFile(file);
    await page.waitForFunction(() => document.querySelectorAll('#attachments img').length === 1, { timeout: 10000 });
    await setField(page, 'max_tokens', '8');
    await send(page, 'What is in this picture?');
    await waitIdle(page);
    const sent = requests.at(-1).messages.at(-1);
    check(Array.isArray(sent.content) && sent.content.some((p) => p.type === 'image_url' && p.image_url.url.startsWith('data:image/png;base64,')),
      'the attached image is sent as an image_url data URL');
    const shown = await page.evaluate(() => { const u = document.querySelectorAll('#messages .msg.user'); return u[u.length - 1].querySelectorAll('img').length; });
    check(shown === 1, 'the user turn shows the attached image');
    a = await lastAssistant(page);
    check(a && /prompt \d+/.test(a.figures), 'the image turn is answered: ' + (a && a.figures));
  }

  // ---- stop cancels on the server --------------------------------------------------------------
  // The demo model has random weights: sampled at temperature 1 it may end its reply by itself at
  // any token, and under load that can land before the Stop click. So for this one request the
  // test adds ignore_eos to the page's body (the page itself has no such setting): the reply can
  // then end only by Stop or after 6000 tokens, seconds later.
  const abortsBefore = await metric(base, 'k3:request_success_total', 'finished_reason="abort"');
  await page.setRequestInterception(true);
  const addIgnoreEos = (r) => {
    if (r.isInterceptResolutionHandled()) return;
    if (r.url().endsWith('/v1/chat/completions') && r.method() === 'POST')
      r.continue({ postData: JSON.stringify({ ...JSON.parse(r.postData()), ignore_eos: true }) });
    else r.continue();
  };
  page.on('request', addIgnoreEos);
  await setField(page, 'max_tokens', '6000');
  await send(page, 'Tell me a long story');
  await page.waitForFunction(() => {
    const all = document.querySelectorAll('#messages .msg.assistant');
    const m = all[all.length - 1];
    return !document.getElementById('stop').disabled && m &&
           (m.querySelector('.body').textContent.length + (m.querySelector('details.thinking .text')?.textContent.length || 0)) > 20;
  }, { timeout: 30000 });
  await page.click('#stop');
  await waitIdle(page, 10000);
  page.off('request', addIgnoreEos);
  await page.setRequestInterception(false);
  let aborted = false;
  for (let i = 0; i < 100 && !aborted; i++) {
    aborted = (await metric(base, 'k3:request_success_total', 'finished_reason="abort"')) > abortsBefore &&
              (await metric(base, 'k3:num_requests_running')) === 0;
    if (!aborted) await new Promise((r) => setTimeout(r, 100));
  }
  check(aborted, 'stop: the server counts an aborted request and frees the slot (/metrics)');
  a = await lastAssistant(page);
  check(a.figures.includes('stopped'), 'the stopped reply says so');

  // ---- settings reach the server -------------------------------------------------------------
  await page.click('#clear');
  await setField(page, 'system', 'You are terse.');
  await setField(page, 'thinking', false);
  await setField(page, 'temperature', '0');
  await setField(page, 'max_tokens', '6');
  await setField(page, 'top_k', '5');
  await send(page, 'ping');
  await waitIdle(page);
  a = await lastAssistant(page);
  const sent = requests.at(-1);
  check(sent.temperature === 0 && sent.max_tokens === 6 && sent.top_k === 5 && sent.thinking.type === 'disabled' &&
        sent.messages[0].role === 'system' && sent.messages[0].content === 'You are terse.', 'the request carries the settings');
  check(/completion 6\b/.test(a.figures), 'max_tokens took effect on the server (completion 6)');
  // The same request straight to the server gives the same greedy text: the page sent exactly it.
  const direct = await (await fetch(base + '/v1/chat/completions', {
    method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ model: 'Kimi-K3', messages: [{ role: 'system', content: 'You are terse.' }, { role: 'user', content: 'ping' }],
                           temperature: 0, max_tokens: 6, top_k: 5, thinking: { type: 'disabled' } }),
  })).json();
  const rendered = await page.evaluate(async (text) => {
    const { renderMarkdown } = await import('/ui/markdown.js');
    const d = document.createElement('div');
    renderMarkdown(text, d);
    return d.textContent;
  }, direct.choices[0].message.content || '');
  check(rendered === a.body, 'the page shows what the server generates for those settings');

  // ---- tool calls, a tool result, reasoning echoed back ---------------------------------------
  await page.click('#clear');
  await setField(page, 'system', '');
  await setField(page, 'temperature', '1');
  await setField(page, 'top_k', '0');
  await setField(page, 'max_tokens', '400');
  await setField(page, 'thinking', true);
  await setField(page, 'effort', 'low');
  await setField(page, 'tools', JSON.stringify([{ type: 'function', function: { name: 'get_weather', parameters: {
    type: 'object', properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 3 } },
    required: ['city', 'days'], additionalProperties: false } } }]));
  await setField(page, 'tool_choice', 'required');
  await send(page, 'Weather in Paris?');
  await waitIdle(page);
  a = await lastAssistant(page);
  const call = a.calls[0];
  let args = null;
  try { args = JSON.parse(call.args); } catch { /* checked below */ }
  check(call && call.name === 'get_weather()' && args && typeof args.city === 'string' && Number.isInteger(args.days),
        'a forced tool call is shown with pretty JSON arguments');
  check(requests.at(-1).reasoning_effort === 'low', 'thinking effort is sent');
  await page.type('.tool-result', 'sunny, 21 C');
  await setField(page, 'tool_choice', 'none');
  await page.click('.send-tools');
  await waitIdle(page);
  const follow = requests.at(-1);
  const asst = follow.messages.find((m) => m.role === 'assistant');
  const tool = follow.messages.find((m) => m.role === 'tool');
  check(asst && asst.tool_calls && asst.tool_calls[0].function.name === 'get_weather', 'the assistant turn goes back with its tool call');
  check(asst && typeof asst.reasoning_content === 'string' && asst.reasoning_content.length > 0, 'reasoning_content is echoed back in history');
  check(tool && tool.content === 'sunny, 21 C' && tool.tool_call_id === asst.tool_calls[0].id, 'the tool result is sent with its call id');
  const toolShown = await page.$$eval('#messages .msg.tool', (l) => l.length);
  check(toolShown === a.calls.length && follow.messages.filter((m) => m.role === 'tool').length === a.calls.length,
        `a tool result is sent and shown for each of the ${a.calls.length} calls (${toolShown} shown)`);

  // ---- regenerate and edit ---------------------------------------------------------------------
  const countBefore = await page.$$eval('#messages .msg', (l) => l.length);
  await page.click('#regenerate');
  await waitIdle(page);
  check(await page.$$eval('#messages .msg', (l) => l.length) === countBefore, 'regenerate replaces the last reply');
  await page.click('#messages .msg.user .edit');
  check(await page.$eval('#input', (e) => e.value) === 'Weather in Paris?' && await page.$$eval('#messages .msg', (l) => l.length) === 0,
        'edit puts the message back in the composer and drops what followed');

  // ---- untrusted output stays inert ------------------------------------------------------------
  await page.click('#clear');
  await setField(page, 'tools', '');
  await setField(page, 'thinking', false);
  const evil = '<script>window.__pwned=1</script><img src=x onerror="window.__pwned=2"> [bad](javascript:window.__pwned=3) [good](https://example.com/docs) **bold**';
  await setField(page, 'schema', JSON.stringify({ type: 'object', properties: { t: { const: evil } }, required: ['t'], additionalProperties: false }));
  await send(page, 'go');
  await waitIdle(page);
  a = await lastAssistant(page);
  const dom = await page.evaluate(() => {
    const all = document.querySelectorAll('#messages .msg.assistant .body');
    const b = all[all.length - 1];
    return {
      scripts: b.querySelectorAll('script').length,
      imgs: b.querySelectorAll('img').length,
      links: [...b.querySelectorAll('a')].map((x) => ({ href: x.getAttribute('href'), rel: x.rel })),
      strong: b.querySelectorAll('strong').length,
      pwned: window.__pwned,
    };
  });
  check(a.body.includes('<script>window.__pwned=1</script>'), 'the <script> text is shown as text: ' + a.body.slice(0, 300));
  check(dom.scripts === 0 && dom.imgs === 0 && dom.pwned === undefined, 'no script or image element comes from model output, nothing ran');
  check(dom.links.length === 1 && dom.links[0].href === 'https://example.com/docs' && dom.links[0].rel.includes('noopener'),
        'only the https link is a link (rel=noopener), javascript: stays text');
  check(dom.strong === 1, 'markdown renders (bold)');
  await setField(page, 'schema', '');

  await page.screenshot({ path: shot, fullPage: false });
  console.log('screenshot: ' + shot);
  check(errors.length === 0, 'no console errors' + (errors.length ? ': ' + errors.join(' | ') : ''));

  // ---- an API-key server ----------------------------------------------------------------------
  const kp = await browser.newPage();
  const urls = [];
  kp.on('request', (r) => urls.push(r.url()));
  await kp.goto(keyBase + '/', { waitUntil: 'load' });
  await kp.waitForFunction(() => !document.getElementById('error').hidden, { timeout: 20000 });
  const msg401 = await kp.$eval('#error', (e) => e.textContent);
  check(msg401.startsWith('401') && msg401.includes('API key'), 'without the key the page shows the 401 message: ' + msg401);
  await setField(kp, 'max_tokens', '8');
  await kp.type('#api_key', apiKey);
  await kp.$eval('#api_key', (e) => e.dispatchEvent(new Event('change')));
  await kp.waitForFunction(() => document.querySelectorAll('#model option').length > 0 && document.getElementById('error').hidden, { timeout: 20000 });
  await send(kp, 'hi');
  await waitIdle(kp);
  const ka = await lastAssistant(kp);
  check(ka && /completion \d+/.test(ka.figures), 'with the key the chat works');
  check(await kp.evaluate(() => localStorage.getItem('k3.apiKey')) === apiKey, 'the key is kept in local storage');
  check(urls.every((u) => !u.includes(apiKey)), 'the key never appears in a URL');
} finally {
  await browser.close();
}
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
