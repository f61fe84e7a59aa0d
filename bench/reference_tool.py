#!/usr/bin/env python3
"""Reads a fixture's reference.safetensors without numpy.
  ids REF            prints input_ids comma-separated
  compare REF F32    compares raw float32 logits [n, V] with REF's logits:
                     max |a - ref| / max |ref| and the argmax agreement per position
"""
import json, struct, sys

def tensors(path):
    with open(path, 'rb') as f:
        n = struct.unpack('<Q', f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == '__metadata__':
            continue
        lo, hi = e['data_offsets']
        fmt = {'F32': 'f', 'I64': 'q'}[e['dtype']]
        out[name] = (e['shape'], struct.unpack('<%d%s' % ((hi - lo) // struct.calcsize(fmt), fmt), data[lo:hi]))
    return out

def main():
    cmd, ref = sys.argv[1], tensors(sys.argv[2])
    if cmd == 'ids':
        print(','.join(str(i) for i in ref['input_ids'][1]))
        return
    (n, V), want = ref['logits']
    with open(sys.argv[3], 'rb') as f:
        raw = f.read()
    got = struct.unpack('<%df' % (len(raw) // 4), raw)
    if len(got) != n * V:
        sys.exit('expected %d x %d logits, got %d values' % (n, V, len(got)))
    err = max(abs(a - b) for a, b in zip(got, want)) / max(abs(b) for b in want)
    agree = sum(
        max(range(V), key=lambda j: got[i * V + j]) == max(range(V), key=lambda j: want[i * V + j]) for i in range(n))
    print('relative error %.3g, argmax agrees at %d/%d positions' % (err, agree, n))

main()
