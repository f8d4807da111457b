"""A small safetensors reader and writer over NumPy (CHECKPOINT.md §3), independent of the engine's.

Reading parses the 8-byte little-endian header length and the JSON header with the standard
library, checks the structural rules the oracle relies on (offsets inside the data section, byte
counts matching dtype × shape, no overlaps), and returns tensors as NumPy views of a read-only
memory map, so large fixtures cost nothing until a tensor is used.  Values are returned in their
stored dtype (bf16 as uint16 bits); widening is the caller's business (numerics.py).

Writing exists for the oracle's own fixture generator and for tests that build broken files; it
writes to a temporary name and renames, so a crash never leaves a half-written file behind.
"""
import json
import mmap
import os
import struct

import numpy as np

# dtype name -> (numpy dtype of the stored bytes, item size)
DTYPES = {
    "F64": (np.float64, 8), "F32": (np.float32, 4), "F16": (np.uint16, 2), "BF16": (np.uint16, 2),
    "I64": (np.int64, 8), "I32": (np.int32, 4), "I16": (np.int16, 2), "I8": (np.int8, 1),
    "U64": (np.uint64, 8), "U32": (np.uint32, 4), "U16": (np.uint16, 2), "U8": (np.uint8, 1),
    "BOOL": (np.uint8, 1), "F8_E4M3": (np.uint8, 1), "F8_E5M2": (np.uint8, 1), "F8_E8M0": (np.uint8, 1),
    "F4": (np.uint8, 1),   # 4-bit floats, two per byte: see packed_bytes()
}


def packed_bytes(dtype, numel):
    """Bytes that `numel` elements of `dtype` occupy (F4: two elements per byte; None if odd)."""
    if dtype == "F4":
        return numel // 2 if numel % 2 == 0 else None
    return numel * DTYPES[dtype][1]
HEADER_LIMIT = 100_000_000


class FormatError(Exception):
    """A file that violates CHECKPOINT.md §3; the message names the file, tensor and rule."""


class TensorInfo:
    __slots__ = ("name", "dtype", "shape", "begin", "end")

    def __init__(self, name, dtype, shape, begin, end):
        self.name, self.dtype, self.shape, self.begin, self.end = name, dtype, tuple(shape), begin, end


class SafeTensorsFile:
    """One safetensors file (or the in-memory concatenation of its split parts)."""

    def __init__(self, path, data=None):
        self.path = path
        if data is None:
            with open(path, "rb") as fh:
                size = os.fstat(fh.fileno()).st_size
                if size < 8:
                    raise FormatError(f"{path}: file of {size} bytes is shorter than the 8-byte header length")
                self._buf = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
        else:
            self._buf = data
        size = len(self._buf)
        (n,) = struct.unpack("<Q", self._buf[:8])
        if n > HEADER_LIMIT or 8 + n > size:
            raise FormatError(f"{path}: header length {n} exceeds limit {HEADER_LIMIT} or file size {size}")
        try:
            header = json.loads(bytes(self._buf[8:8 + n]).decode("utf-8"),
                                object_pairs_hook=_no_duplicates(path))
        except (ValueError, UnicodeDecodeError) as e:
            raise FormatError(f"{path}: header is not valid JSON: {e}") from None
        if not isinstance(header, dict):
            raise FormatError(f"{path}: header is not a JSON object")
        self.data_start = 8 + n
        self.data_size = size - self.data_start
        self.metadata = header.pop("__metadata__", None) or {}
        self.tensors = {}
        ranges = []
        for name, d in header.items():
            try:
                dt, shape, (b, e) = d["dtype"], [int(s) for s in d["shape"]], d["data_offsets"]
            except (KeyError, TypeError, ValueError):
                raise FormatError(f"{path}: {name}: entry needs dtype, shape and data_offsets") from None
            if dt not in DTYPES:
                raise FormatError(f"{path}: {name}: unknown dtype {dt!r}")
            numel = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if b > e or e - b != packed_bytes(dt, numel):
                raise FormatError(f"{path}: {name}: data_offsets [{b}, {e}] do not hold {numel} x {dt}")
            if e > self.data_size:
                raise FormatError(f"{path}: {name}: range end {e} beyond data section of {self.data_size} bytes")
            self.tensors[name] = TensorInfo(name, dt, shape, b, e)
            ranges.append((b, e, name))
        ranges.sort()
        for (b0, e0, n0), (b1, e1, n1) in zip(ranges, ranges[1:]):
            if b1 < e0 and e1 > b1:
                raise FormatError(f"{path}: tensors {n0} and {n1} overlap")

    def __contains__(self, name):
        return name in self.tensors

    def info(self, name):
        return self.tensors[name]

    def get(self, name):
        """The tensor as a NumPy array of its stored dtype (a read-only view where possible)."""
        t = self.tensors[name]
        npdt, size = DTYPES[t.dtype]
        off = self.data_start + t.begin
        count = (t.end - t.begin) // size
        if off % size:  # unaligned: copy (the format does not guarantee alignment)
            raw = np.frombuffer(bytes(self._buf[off:off + t.end - t.begin]), dtype=np.dtype(npdt).newbyteorder("<"))
        else:
            raw = np.frombuffer(self._buf, dtype=np.dtype(npdt).newbyteorder("<"), count=count, offset=off)
        if t.dtype == "F4":   # the bytes as [..., last / 2], two E2M1 codes per byte (low nibble first)
            return raw.reshape(tuple(t.shape[:-1]) + (t.shape[-1] // 2,))
        return raw.reshape(t.shape)


def _no_duplicates(path):
    def hook(pairs):
        d = {}
        for k, v in pairs:
            if k in d:
                raise FormatError(f"{path}: duplicate key {k!r} in header")
            d[k] = v
        return d
    return hook


def write(path, tensors, metadata=None, align=8):
    """Write {name: (dtype_name, ndarray)} in insertion order.  The header is padded with spaces so
    that the data section starts at a multiple of `align`; each tensor starts at a multiple of its
    item size (the only padding between tensors, so naturally aligned data stays contiguous)."""
    entries, blobs, off = {}, [], 0
    for name, (dt, arr) in tensors.items():
        npdt, size = DTYPES[dt]
        a = np.ascontiguousarray(arr).astype(np.dtype(npdt).newbyteorder("<"), copy=False)
        pad = (-off) % size
        if pad:
            blobs.append(b"\0" * pad)
            off += pad
        b = a.tobytes()
        entries[name] = {"dtype": dt, "shape": list(a.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    head = {}
    if metadata:
        head["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    head.update(entries)
    hj = json.dumps(head, separators=(",", ":")).encode()
    hj += b" " * ((-(8 + len(hj))) % align)
    tmp = path + ".tmp"
    with open(tmp, "wb") as fh:
        fh.write(struct.pack("<Q", len(hj)))
        fh.write(hj)
        for b in blobs:
            fh.write(b)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
