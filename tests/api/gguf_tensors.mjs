// Where each tensor of a GGUF file lies: a minimal reader of the header
// (metadata skipped, tensor directory read) for tests that inject storage
// faults on one tensor's bytes. Returns [{ name, begin, end }] in file order,
// absolute byte offsets; a tensor ends where the next begins (or at the file's end).
import { readFileSync, statSync } from 'node:fs';

export function ggufTensors(path) {
  const b = readFileSync(path);
  let p = 0;
  const u32 = () => { const v = b.readUInt32LE(p); p += 4; return v; };
  const u64 = () => { const v = Number(b.readBigUInt64LE(p)); p += 8; return v; };
  const str = () => { const n = u64(); const s = b.toString('utf8', p, p + n); p += n; return s; };
  const size = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
  let alignment = 32;
  const skip = (type) => {
    if (type === 8) return str();
    if (type === 9) {
      const t = u32(), n = u64();
      for (let i = 0; i < n; ++i) skip(t);
      return null;
    }
    if (!(type in size)) throw new Error(`gguf: unknown type ${type}`);
    const v = type === 4 ? b.readUInt32LE(p) : null;
    p += size[type];
    return v;
  };
  if (b.toString('latin1', 0, 4) !== 'GGUF') throw new Error(`${path}: not GGUF`);
  p = 4;
  u32();  // version
  const nTensors = u64(), nKv = u64();
  for (let i = 0; i < nKv; ++i) {
    const key = str(), type = u32();
    const v = skip(type);
    if (key === 'general.alignment' && v) alignment = v;
  }
  const tensors = [];
  for (let i = 0; i < nTensors; ++i) {
    const name = str(), nDims = u32();
    for (let d = 0; d < nDims; ++d) u64();
    u32();  // type
    tensors.push({ name, offset: u64() });
  }
  const data = Math.ceil(p / alignment) * alignment;
  const fileSize = statSync(path).size;
  const sorted = [...tensors].sort((a, c) => a.offset - c.offset);
  return sorted.map((t, i) => ({
    name: t.name, begin: data + t.offset, end: i + 1 < sorted.length ? data + sorted[i + 1].offset : fileSize,
  }));
}
