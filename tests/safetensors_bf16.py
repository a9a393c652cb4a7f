#!/usr/bin/env python3
"""Round a safetensors checkpoint's F32 tensors to BF16 (nearest even; NaN stays NaN),
for make device-study: the MiniLM-L6 checkpoint is 91 MB in fp32 and 45 MB in bf16, and
a device machine takes 64 MiB of files. Standard library only.

  python3 tests/safetensors_bf16.py SRC.safetensors DST.safetensors

The header keeps every tensor's name and shape; F32 tensors become BF16, others are
copied as they are; __metadata__ gains "mpx_rounded_from": the source's SHA-256. mpx's
bert-qa model notes in run.json that a run from such a file starts from 16-bit-rounded
weights."""
import array
import hashlib
import json
import struct
import sys


def to_bf16(raw: bytes) -> bytes:
    a = array.array("I")
    a.frombytes(raw)
    if sys.byteorder != "little":
        a.byteswap()
    out = array.array("H", bytes(2 * len(a)))
    for i, u in enumerate(a):
        if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
            out[i] = (u >> 16) | 0x0040  # a NaN stays a (quiet) NaN
        else:
            out[i] = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16) & 0xFFFF
    if sys.byteorder != "little":
        out.byteswap()
    return out.tobytes()


def main(src: str, dst: str) -> None:
    with open(src, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    meta = dict(header.pop("__metadata__", {}) or {})
    meta["mpx_rounded_from"] = hashlib.sha256(blob).hexdigest()
    out_header, chunks, off = {"__metadata__": meta}, [], 0
    for name in sorted(header, key=lambda k: header[k]["data_offsets"][0]):
        t = header[name]
        b, e = t["data_offsets"]
        raw = data[b:e]
        if t["dtype"] == "F32":
            raw = to_bf16(raw)
            t = dict(t, dtype="BF16")
        out_header[name] = dict(t, data_offsets=[off, off + len(raw)])
        chunks.append(raw)
        off += len(raw)
    h = json.dumps(out_header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    with open(dst, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h)
        for c in chunks:
            f.write(c)


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    main(sys.argv[1], sys.argv[2])
