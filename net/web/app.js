// The k3serve playground: a chat page over the server's own OpenAI-compatible API.
// Streams /v1/chat/completions (fetch + SSE), shows K3's reasoning channel as a collapsible
// block, renders tool calls and takes tool results, and reports per-reply figures. Model output
// is untrusted: it reaches the page only as text nodes (markdown.js builds DOM, never HTML).
import { renderMarkdown } from './markdown.js';

const $ = (id) => document.getElementById(id);
const SETTINGS = ['system', 'thinking', 'effort', 'temperature', 'top_p', 'top_k', 'min_p', 'max_tokens', 'seed', 'tools',
                  'tool_choice', 'schema'];

const state = {
  history: [],      // {role, content, reasoning, tool_calls, images, figures, tool_call_id}
  controller: null, // the in-flight request's AbortController
  images: [],       // data URLs waiting to be sent
  vision: new Set(),
};

// ---- settings and the API key (local storage; the key never goes into a URL) ----------------

function loadSettings() {
  let saved = {};
  try { saved = JSON.parse(localStorage.getItem('k3.settings') || '{}'); } catch { saved = {}; }
  for (const k of SETTINGS) {
    const e = $(k);
    if (!(k in saved)) continue;
    if (e.type === 'checkbox') e.checked = !!saved[k];
    else e.value = saved[k];
  }
  $('api_key').value = localStorage.getItem('k3.apiKey') || '';
}

function saveSettings() {
  const out = {};
  for (const k of SETTINGS) {
    const e = $(k);
    out[k] = e.type === 'checkbox' ? e.checked : e.value;
  }
  localStorage.setItem('k3.settings', JSON.stringify(out));
}

function headers() {
  const h = { 'Content-Type': 'application/json' };
  const key = $('api_key').value.trim();
  if (key) h.Authorization = 'Bearer ' + key;
  return h;
}

async function errorText(res) {
  let msg = res.statusText;
  try {
    const j = await res.json();
    if (j && j.error && j.error.message) msg = j.error.message;
  } catch { /* not JSON */ }
  let text = `${res.status}: ${msg}`;
  if (res.status === 401) text += ' Enter the server\'s key under Settings → API key.';
  return text;
}

function showError(text) {
  const e = $('error');
  e.textContent = text;
  e.hidden = !text;
}

// ---- models and the status strip -----------------------------------------------------------

async function loadModels() {
  const sel = $('model');
  try {
    const res = await fetch('/v1/models', { headers: headers() });
    if (!res.ok) throw new Error(await errorText(res));
    const j = await res.json();
    const keep = sel.value || localStorage.getItem('k3.model');
    sel.replaceChildren();
    state.vision.clear();
    for (const m of j.data || []) {
      const o = document.createElement('option');
      o.value = o.textContent = m.id;
      sel.append(o);
      if (m.capabilities && m.capabilities.vision) state.vision.add(m.id);
    }
    if (keep && [...sel.options].some((o) => o.value === keep)) sel.value = keep;
    showError('');
  } catch (e) {
    showError(e.message);
  }
  updateImagePicker();
}

function updateImagePicker() {
  $('image-picker').hidden = !state.vision.has($('model').value);
}

function metricValue(text, name) {
  const re = new RegExp('^' + name.replace(/[:]/g, '\\:') + '\\{[^}]*\\} ([0-9.eE+-]+)$', 'm');
  const m = text.match(re);
  return m ? Number(m[1]) : null;
}

async function pollStatus() {
  if (!document.hidden) {
    try {
      const res = await fetch('/metrics');
      if (res.ok) {
        const t = await res.text();
        const run = metricValue(t, 'k3:num_requests_running');
        const wait = metricValue(t, 'k3:num_requests_waiting');
        const kv = metricValue(t, 'k3:kv_cache_usage_perc');
        const kdaUsed = metricValue(t, 'k3:kda_state_slots_used');
        const kdaAll = metricValue(t, 'k3:kda_state_slots_total');
        const parts = [`running ${run ?? '–'}`, `waiting ${wait ?? '–'}`];
        if (kv !== null) parts.push(`KV ${(kv * 100).toFixed(1)} %`);
        if (kdaAll) parts.push(`KDA ${kdaUsed}/${kdaAll}`);
        $('status').textContent = parts.join(' · ');
      }
    } catch { $('status').textContent = 'server unreachable'; }
  }
  setTimeout(pollStatus, 2000);
}

// ---- the conversation ------------------------------------------------------------------------

function apiMessages() {
  const out = [];
  const sys = $('system').value.trim();
  if (sys) out.push({ role: 'system', content: sys });
  for (const m of state.history) {
    if (m.role === 'user') {
      if (m.images && m.images.length) {
        out.push({ role: 'user', content: [{ type: 'text', text: m.content },
                                           ...m.images.map((url) => ({ type: 'image_url', image_url: { url } }))] });
      } else {
        out.push({ role: 'user', content: m.content });
      }
    } else if (m.role === 'assistant') {
      const a = { role: 'assistant', content: m.content };
      // K3 expects its reasoning back on earlier turns (the chat template re-renders it).
      if (m.reasoning) a.reasoning_content = m.reasoning;
      if (m.tool_calls.length) a.tool_calls = m.tool_calls.map((c) => ({ id: c.id, type: 'function', function: { name: c.name, arguments: c.arguments } }));
      out.push(a);
    } else if (m.role === 'tool') {
      out.push({ role: 'tool', tool_call_id: m.tool_call_id, content: m.content });
    }
  }
  return out;
}

function numberField(id) {
  const v = $(id).value.trim();
  return v === '' ? null : Number(v);
}

function buildRequest() {
  const req = { model: $('model').value, messages: apiMessages(), stream: true, stream_options: { include_usage: true } };
  const maxTokens = numberField('max_tokens');
  if (maxTokens) req.max_tokens = maxTokens;
  for (const k of ['temperature', 'top_p']) {
    const v = numberField(k);
    if (v !== null) req[k] = v;
  }
  const topK = numberField('top_k');
  if (topK) req.top_k = topK;
  const minP = numberField('min_p');
  if (minP) req.min_p = minP;
  const seed = numberField('seed');
  if (seed !== null) req.seed = seed;
  req.thinking = { type: $('thinking').checked ? 'enabled' : 'disabled' };
  if ($('thinking').checked && $('effort').value) req.reasoning_effort = $('effort').value;
  const tools = $('tools').value.trim();
  if (tools) {
    try { req.tools = JSON.parse(tools); } catch (e) { throw new Error('Settings → tools is not valid JSON: ' + e.message); }
    req.tool_choice = $('tool_choice').value;
  }
  const schema = $('schema').value.trim();
  if (schema) {
    let s;
    try { s = JSON.parse(schema); } catch (e) { throw new Error('Settings → response format is not valid JSON: ' + e.message); }
    req.response_format = { type: 'json_schema', json_schema: { name: 'response', schema: s, strict: true } };
  }
  return req;
}

// ---- rendering -------------------------------------------------------------------------------

function button(label, onClick, cls) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = label;
  if (cls) b.className = cls;
  b.addEventListener('click', onClick);
  return b;
}

function pretty(args) {
  try { return JSON.stringify(JSON.parse(args), null, 2); } catch { return args; }
}

function figuresText(f) {
  if (!f) return '';
  const parts = [];
  if (f.prompt !== undefined) parts.push(`prompt ${f.prompt}`);
  if (f.cached) parts.push(`cached ${f.cached}`);
  if (f.completion !== undefined) parts.push(`completion ${f.completion}`);
  if (f.ttft !== undefined) parts.push(`TTFT ${Math.round(f.ttft)} ms`);
  if (f.tps) parts.push(`${f.tps.toFixed(1)} tok/s`);
  if (f.finish) parts.push(f.finish);
  return parts.join(' · ');
}

function renderEntry(m, index) {
  const box = m.el || document.createElement('div');
  m.el = box;
  box.className = 'msg ' + m.role;
  box.dataset.index = index;
  box.replaceChildren();
  const who = document.createElement('div');
  who.className = 'who';
  who.append(document.createTextNode(m.role === 'tool' ? `tool result (${m.name || m.tool_call_id})` : m.role));
  if (m.role === 'user' && !state.controller) who.append(button('Edit', () => editFrom(index), 'edit'));
  box.append(who);
  if (m.role === 'assistant' && (m.reasoning || m.streaming && $('thinking').checked && !m.content && !m.tool_calls.length)) {
    const d = m.thinkingEl || document.createElement('details');
    m.thinkingEl = d;
    d.className = 'thinking';
    d.open = !!m.streaming && !m.content && !m.tool_calls.length;
    d.replaceChildren();
    const s = document.createElement('summary');
    s.textContent = m.streaming && !m.content && !m.tool_calls.length ? 'Thinking…' : 'Thought';
    const t = document.createElement('div');
    t.className = 'text';
    t.textContent = m.reasoning;
    d.append(s, t);
    box.append(d);
  }
  if (m.images) for (const url of m.images) {
    const img = document.createElement('img');
    img.className = 'attached';
    img.src = url;
    img.alt = 'attached image';
    box.append(img);
  }
  const body = document.createElement('div');
  body.className = 'body';
  if (m.role === 'assistant') renderMarkdown(m.content, body);
  else body.textContent = m.content;
  box.append(body);
  if (m.role === 'assistant' && m.tool_calls.length) {
    const answered = new Set(state.history.filter((x) => x.role === 'tool').map((x) => x.tool_call_id));
    const pending = [];
    for (const c of m.tool_calls) {
      const tc = document.createElement('div');
      tc.className = 'toolcall';
      const name = document.createElement('div');
      name.className = 'name';
      name.textContent = c.name + '()';
      const pre = document.createElement('pre');
      pre.textContent = pretty(c.arguments);
      tc.append(name, pre);
      if (!m.streaming && !answered.has(c.id)) {
        const ta = document.createElement('textarea');
        ta.rows = 2;
        ta.placeholder = `result of ${c.name}`;
        ta.className = 'tool-result';
        tc.append(ta);
        pending.push([c, ta]);
      }
      box.append(tc);
    }
    if (pending.length && index === state.history.length - 1)
      box.append(button('Send tool results', () => {
        for (const [c, ta] of pending) state.history.push({ role: 'tool', tool_call_id: c.id, name: c.name, content: ta.value });
        renderAll();
        generate();
      }, 'send-tools'));
  }
  if (m.error) {
    const e = document.createElement('div');
    e.className = 'figures';
    e.textContent = m.error;
    box.append(e);
  }
  const fig = figuresText(m.figures);
  if (fig) {
    const f = document.createElement('div');
    f.className = 'figures';
    f.textContent = fig;
    box.append(f);
  }
  return box;
}

function renderAll() {
  const list = $('messages');
  list.replaceChildren(...state.history.map((m, i) => { m.el = null; m.thinkingEl = null; return renderEntry(m, i); }));
  updateButtons();
}

function nearBottom() {
  const l = $('messages');
  return l.scrollHeight - l.scrollTop - l.clientHeight < 80;
}

function updateButtons() {
  const busy = !!state.controller;
  $('send').disabled = busy;
  $('stop').disabled = !busy;
  $('regenerate').disabled = busy || !state.history.some((m) => m.role === 'assistant');
}

// ---- requests --------------------------------------------------------------------------------

async function generate() {
  let req;
  try { req = buildRequest(); } catch (e) { showError(e.message); return; }
  saveSettings();
  showError('');
  const m = { role: 'assistant', content: '', reasoning: '', tool_calls: [], streaming: true, figures: null };
  state.history.push(m);
  const ctl = new AbortController();
  state.controller = ctl;
  $('messages').append(renderEntry(m, state.history.length - 1));
  updateButtons();
  const t0 = performance.now();
  let tFirst = null, usage = null, finish = null, pending = false;
  const repaint = () => {
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      const stick = nearBottom();
      renderEntry(m, state.history.indexOf(m));
      if (stick) $('messages').scrollTop = $('messages').scrollHeight;
    });
  };
  try {
    const res = await fetch('/v1/chat/completions', { method: 'POST', headers: headers(), body: JSON.stringify(req), signal: ctl.signal });
    if (!res.ok) throw new Error(await errorText(res));
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += dec.decode(value, { stream: true });
      let cut;
      while ((cut = buf.indexOf('\n\n')) >= 0) {
        const event = buf.slice(0, cut);
        buf = buf.slice(cut + 2);
        for (const line of event.split('\n')) {
          if (!line.startsWith('data: ')) continue; // SSE comments (": ping") and other fields
          const data = line.slice(6);
          if (data === '[DONE]') continue;
          const j = JSON.parse(data);
          if (j.error) throw new Error(j.error.message || 'stream error');
          if (j.usage) usage = j.usage;
          const ch = j.choices && j.choices[0];
          if (!ch) continue;
          const d = ch.delta || {};
          if (tFirst === null && (d.content || d.reasoning_content || d.tool_calls)) tFirst = performance.now();
          if (d.reasoning_content) m.reasoning += d.reasoning_content;
          if (d.content) m.content += d.content;
          for (const tc of d.tool_calls || []) {
            const c = m.tool_calls[tc.index] || (m.tool_calls[tc.index] = { id: '', name: '', arguments: '' });
            if (tc.id) c.id = tc.id;
            if (tc.function && tc.function.name) c.name += tc.function.name;
            if (tc.function && tc.function.arguments) c.arguments += tc.function.arguments;
          }
          if (ch.finish_reason) finish = ch.finish_reason;
        }
        repaint();
      }
    }
  } catch (e) {
    if (e.name === 'AbortError') finish = 'stopped';
    else {
      m.error = e.message;
      showError(e.message);
    }
  } finally {
    const tEnd = performance.now();
    m.streaming = false;
    state.controller = null;
    m.figures = { finish };
    if (usage) {
      m.figures.prompt = usage.prompt_tokens;
      m.figures.completion = usage.completion_tokens;
      m.figures.cached = usage.prompt_tokens_details && usage.prompt_tokens_details.cached_tokens;
    }
    if (tFirst !== null) {
      m.figures.ttft = tFirst - t0;
      const n = usage ? usage.completion_tokens : null;
      if (n > 1 && tEnd > tFirst) m.figures.tps = (n - 1) / ((tEnd - tFirst) / 1000);
    }
    if (!m.content && !m.reasoning && !m.tool_calls.length && m.error) {
      state.history.splice(state.history.indexOf(m), 1); // nothing to keep: the error is shown above
    }
    renderAll();
    $('messages').scrollTop = $('messages').scrollHeight;
  }
}

function send(ev) {
  ev.preventDefault();
  if (state.controller) return;
  const text = $('input').value;
  if (!text.trim() && !state.images.length) return;
  state.history.push({ role: 'user', content: text, images: state.images.length ? state.images : undefined });
  state.images = [];
  $('attachments').replaceChildren();
  $('attachments').hidden = true;
  $('input').value = '';
  renderAll();
  generate();
}

function editFrom(index) {
  if (state.controller) return;
  const m = state.history[index];
  $('input').value = m.content;
  state.images = m.images || [];
  state.history.length = index;
  renderAll();
  $('input').focus();
}

function regenerate() {
  if (state.controller) return;
  while (state.history.length && state.history[state.history.length - 1].role === 'assistant') state.history.pop();
  renderAll();
  if (state.history.length) generate();
}

function clearChat() {
  if (state.controller) state.controller.abort();
  state.history = [];
  showError('');
  renderAll();
}

function pickImages(ev) {
  for (const f of ev.target.files) {
    const r = new FileReader();
    r.onload = () => {
      state.images.push(r.result);
      const img = document.createElement('img');
      img.className = 'attached';
      img.src = r.result;
      img.alt = f.name;
      $('attachments').append(img);
      $('attachments').hidden = false;
    };
    r.readAsDataURL(f);
  }
  ev.target.value = '';
}

// ---- wiring ------------------------------------------------------------------------------------

loadSettings();
$('composer').addEventListener('submit', send);
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) send(e);
});
$('stop').addEventListener('click', () => state.controller && state.controller.abort());
$('regenerate').addEventListener('click', regenerate);
$('clear').addEventListener('click', clearChat);
$('image').addEventListener('change', pickImages);
$('model').addEventListener('change', () => { localStorage.setItem('k3.model', $('model').value); updateImagePicker(); });
for (const k of SETTINGS) $(k).addEventListener('change', saveSettings);
$('api_key').addEventListener('change', () => {
  localStorage.setItem('k3.apiKey', $('api_key').value.trim());
  loadModels();
});
$('toggle-settings').addEventListener('click', () => {
  const hidden = $('settings').classList.toggle('hidden');
  $('toggle-settings').setAttribute('aria-expanded', String(!hidden));
});
renderAll();
loadModels();
pollStatus();
