// Model output to HTML: markdown rendered by marked, then sanitised by
// DOMPurify. Output is untrusted: raw HTML in it is shown as text (never
// parsed), images become links (nothing is loaded), links open in a new tab
// without a referrer, and only http(s)/mailto URLs survive. The server's CSP
// (script-src 'self', no remote loads) is the second wall behind this one.
import { Marked } from './vendor/marked.esm.js';

const ESC = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' };
export const escapeHtml = (s) => String(s).replace(/[&<>"']/g, (c) => ESC[c]);

const marked = new Marked({
  gfm: true,
  breaks: true,
  renderer: {
    html(token) {
      return escapeHtml(token.raw ?? token.text ?? '');
    },
    image(token) {
      return `<a href="${escapeHtml(token.href ?? '')}">${escapeHtml(token.text || token.href || 'image')}</a>`;
    },
  },
});

const PURIFY = {
  FORBID_TAGS: ['style', 'img', 'svg', 'math', 'form', 'input', 'button', 'textarea', 'select', 'iframe', 'object',
    'embed', 'video', 'audio', 'source', 'link', 'meta', 'base'],
  FORBID_ATTR: ['style', 'srcset', 'src'],
  ALLOWED_URI_REGEXP: /^(?:https?:|mailto:)/i,
};

let hooked = false;
function purify() {
  const p = globalThis.DOMPurify;
  if (!p) throw new Error('DOMPurify did not load');
  if (!hooked) {
    p.addHook('afterSanitizeAttributes', (node) => {
      if (node.tagName === 'A') {
        node.setAttribute('target', '_blank');
        node.setAttribute('rel', 'noopener noreferrer nofollow');
      }
    });
    hooked = true;
  }
  return p;
}

// Sanitised HTML for a markdown text.
export function renderMarkdown(text) {
  return purify().sanitize(marked.parse(text ?? '', { async: false }), PURIFY);
}

// Renders markdown into `el` and gives every code block a copy button.
export function setMarkdown(el, text) {
  el.innerHTML = renderMarkdown(text);
  for (const pre of el.querySelectorAll('pre')) {
    const b = document.createElement('button');
    b.type = 'button';
    b.className = 'copy-code';
    b.textContent = 'copy';
    b.addEventListener('click', () => copyText(pre.querySelector('code')?.textContent ?? pre.textContent, b));
    pre.appendChild(b);
  }
}

// Copies to the clipboard; `button` shows that it worked.
export async function copyText(text, button) {
  try {
    await navigator.clipboard.writeText(text);
  } catch {
    const ta = document.createElement('textarea');
    ta.value = text;
    document.body.appendChild(ta);
    ta.select();
    document.execCommand('copy');
    ta.remove();
  }
  if (button) {
    const was = button.textContent;
    button.textContent = 'copied';
    setTimeout(() => { button.textContent = was; }, 1200);
  }
}
