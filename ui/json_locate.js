// Where things are in a JSON text, for the spec editor: scanJson() checks the
// syntax (a SyntaxError-like {message, offset} on the first fault) and maps
// every value's path, written as the server writes `error.param`
// (`agents[1].prompt`, `stages[2].max_rounds`), to the offset of its key (or
// of the value, for array elements); locate() turns a path into a position,
// falling back to the nearest enclosing path the text has.

export class JsonFault extends Error {
  constructor(message, offset) {
    super(message);
    this.offset = offset;
  }
}

export function scanJson(text) {
  const where = new Map();
  let i = 0;
  const fail = (msg) => {
    throw new JsonFault(i >= text.length ? `${msg} (the text ended)` : `${msg}, found '${text[i]}'`, i);
  };
  // After a value, neither ',' nor the closing bracket: the fault is placed where the comma is missing.
  const missingComma = (end, close) => {
    if (i >= text.length) fail(`expected ',' or '${close}'`);
    throw new JsonFault(`expected ',' or '${close}' here, before '${text[i]}'`, end);
  };
  const ws = () => {
    while (i < text.length && ' \t\r\n'.includes(text[i])) ++i;
  };
  const str = () => {
    if (text[i] !== '"') fail('expected a string');
    const start = i++;
    while (i < text.length && text[i] !== '"') {
      if (text[i] === '\\') ++i;
      else if (text[i] === '\n') fail('a string cannot hold a raw line break');
      ++i;
    }
    if (i >= text.length) { i = start; fail('unterminated string'); }
    ++i;
    return JSON.parse(text.slice(start, i));
  };
  const value = (path) => {
    ws();
    if (!where.has(path)) where.set(path, i);
    const c = text[i];
    if (c === '{') {
      ++i;
      ws();
      if (text[i] === '}') { ++i; return; }
      for (;;) {
        ws();
        const keyAt = i;
        const key = str();
        const sub = path ? `${path}.${key}` : key;
        where.set(sub, keyAt);
        ws();
        if (text[i] !== ':') fail(`expected ':' after the key "${key}"`);
        ++i;
        value(sub);
        const end = i;
        ws();
        if (text[i] === ',') { ++i; continue; }
        if (text[i] === '}') { ++i; return; }
        missingComma(end, '}');
      }
    }
    if (c === '[') {
      ++i;
      ws();
      if (text[i] === ']') { ++i; return; }
      for (let n = 0; ; ++n) {
        value(`${path}[${n}]`);
        const end = i;
        ws();
        if (text[i] === ',') { ++i; continue; }
        if (text[i] === ']') { ++i; return; }
        missingComma(end, ']');
      }
    }
    if (c === '"') { str(); return; }
    const m = /^(?:-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 64));
    if (!m) fail('expected a value');
    i += m[0].length;
  };
  value('');
  ws();
  if (i < text.length) fail('unexpected text after the JSON value');
  return where;
}

// {line, column} (1-based) of an offset.
export function lineColumn(text, offset) {
  const before = text.slice(0, offset);
  const line = before.split('\n').length;
  return { line, column: offset - before.lastIndexOf('\n') };
}

// The offset for a server `param` path in `text`, or null.
export function locate(text, param) {
  let where;
  try {
    where = scanJson(text);
  } catch {
    return null;
  }
  let p = param ?? '';
  for (;;) {
    if (where.has(p)) return where.get(p);
    const cut = Math.max(p.lastIndexOf('.'), p.lastIndexOf('['));
    if (cut <= 0) return where.get('') ?? null;
    p = p.slice(0, cut);
  }
}
