// A small Markdown renderer that builds DOM nodes and never parses HTML: every piece of text
// becomes a text node, so nothing the model writes (a <script>, an onerror attribute) can turn
// into markup. Covered: fenced and indented code, headings, lists, block quotes, paragraphs,
// inline code, bold, italic, and links whose target is http(s) or mailto (others stay text).

const SAFE_URL = /^(https?:\/\/|mailto:)/i;

function el(tag, cls) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  return e;
}

// Inline spans: `code`, **bold**, *italic* / _italic_, [text](url). Anything else is text.
// Underscores emphasise only between word boundaries (snake_case and a.__b stay text), as in
// CommonMark.
const INLINE = /`([^`]+)`|\*\*([^*\s](?:[^*]*[^*\s])?)\*\*|(?<!\w)__([^_\s](?:[^_]*[^_\s])?)__(?!\w)|\*([^*\s](?:[^*]*[^*\s])?)\*|(?<!\w)_([^_\s](?:[^_]*[^_\s])?)_(?!\w)|\[([^\]]+)\]\(([^)\s]+)\)/g;

export function renderInline(text, parent) {
  let last = 0;
  for (const m of text.matchAll(INLINE)) {
    if (m.index > last) parent.append(document.createTextNode(text.slice(last, m.index)));
    if (m[1] !== undefined) {
      const c = el('code');
      c.textContent = m[1];
      parent.append(c);
    } else if (m[2] !== undefined || m[3] !== undefined) {
      const b = el('strong');
      renderInline(m[2] ?? m[3], b);
      parent.append(b);
    } else if (m[4] !== undefined || m[5] !== undefined) {
      const i = el('em');
      renderInline(m[4] ?? m[5], i);
      parent.append(i);
    } else if (SAFE_URL.test(m[7])) {
      const a = el('a');
      a.href = m[7];
      a.rel = 'noopener noreferrer nofollow';
      a.target = '_blank';
      renderInline(m[6], a);
      parent.append(a);
    } else {
      parent.append(document.createTextNode(m[0])); // an unsafe link stays visible, inert
    }
    last = m.index + m[0].length;
  }
  if (last < text.length) parent.append(document.createTextNode(text.slice(last)));
}

/// Renders `text` into `root` (cleared first).
export function renderMarkdown(text, root) {
  root.replaceChildren();
  const lines = String(text).replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  let para = [];
  const flush = () => {
    if (!para.length) return;
    const p = el('p');
    para.forEach((line, k) => {
      if (k) p.append(el('br'));
      renderInline(line, p);
    });
    root.append(p);
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      flush();
      const body = [];
      for (++i; i < lines.length && !lines[i].trim().startsWith(fence[1]); ++i) body.push(lines[i]);
      ++i; // the closing fence (or the end of an unfinished stream)
      const pre = el('pre');
      const code = el('code');
      if (fence[2]) code.dataset.lang = fence[2];
      code.textContent = body.join('\n');
      pre.append(code);
      root.append(pre);
      continue;
    }
    const h = line.match(/^(#{1,6})\s+(.*)$/);
    if (h) {
      flush();
      const e = el('h' + Math.min(6, h[1].length + 2));
      renderInline(h[2], e);
      root.append(e);
      ++i;
      continue;
    }
    const li = line.match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
    if (li) {
      flush();
      const ordered = /\d/.test(li[1]);
      const list = el(ordered ? 'ol' : 'ul');
      while (i < lines.length) {
        const m = lines[i].match(/^\s*([-*+]|\d+[.)])\s+(.*)$/);
        if (!m || /\d/.test(m[1]) !== ordered) break;
        const item = el('li');
        renderInline(m[2], item);
        list.append(item);
        ++i;
      }
      root.append(list);
      continue;
    }
    if (/^>\s?/.test(line)) {
      flush();
      const q = el('blockquote');
      const inner = [];
      for (; i < lines.length && /^>\s?/.test(lines[i]); ++i) inner.push(lines[i].replace(/^>\s?/, ''));
      renderMarkdown(inner.join('\n'), q);
      root.append(q);
      continue;
    }
    if (/^ {4}|\t/.test(line) && !para.length) {
      const body = [];
      for (; i < lines.length && (/^ {4}|\t/.test(lines[i]) || (lines[i] === '' && /^ {4}|\t/.test(lines[i + 1] ?? ''))); ++i)
        body.push(lines[i].replace(/^ {4}|\t/, ''));
      const pre = el('pre');
      const code = el('code');
      code.textContent = body.join('\n');
      pre.append(code);
      root.append(pre);
      continue;
    }
    if (line.trim() === '') flush();
    else para.push(line);
    ++i;
  }
  flush();
}
