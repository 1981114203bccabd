"""A minimal safetensors reader and writer for F32 tensors (NumPy), enough for canzona's
optimizer-state files without the safetensors package."""
import json
import struct


def load(path):
    """(tensors, metadata): every tensor as a NumPy array of its shape."""
    import numpy as np

    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 8:
        raise ValueError(f"{path}: not a safetensors file")
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    base = 8 + n
    tensors = {}
    for name, t in header.items():
        if t["dtype"] != "F32":
            raise ValueError(f"{path}: tensor {name!r} is {t['dtype']}; only F32 is read")
        b, e = t["data_offsets"]
        tensors[name] = np.frombuffer(data[base + b:base + e], dtype="<f4").reshape(t["shape"]).copy()
    return tensors, meta


def save(path, tensors, metadata):
    """Writes F32 tensors (anything NumPy can turn into float32) and string metadata."""
    import numpy as np

    header, blobs, off = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(np.asarray(tensors[name], dtype="<f4"))
        header[name] = {"dtype": "F32", "shape": list(a.shape), "data_offsets": [off, off + a.nbytes]}
        blobs.append(a.tobytes())
        off += a.nbytes
    header["__metadata__"] = dict(metadata)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
