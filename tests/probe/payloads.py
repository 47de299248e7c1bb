"""Seeded random requests for any message of proto/, built from its descriptor.

Every field is left unset or drawn from values that break servers: extreme and negative integers,
NaN and infinities, empty, long and non-ASCII strings, random repeated lengths, unknown enum
values. Senders come from other jobs, tasks and incarnations; tensor and shape fields are often
coherent enough to reach deep validation. Shapes whose element count is huge are kept to those a
correct server refuses at once (their count, or its int64 wrap-around, is tiny or past 2^40), so
the probe never asks for memory a correct server would spend.
"""

import math
import struct

from google.protobuf.descriptor import FieldDescriptor as F

from probe import wire

INT32 = [0, 1, -1, 2, 7, 2**31 - 1, -2**31, 1024, 65536]
INT64 = INT32 + [2**32, 2**40, 2**62, 2**63 - 1, -2**63, 274177, 67280421310721]
DOUBLES = [0.0, -0.0, 1.0, -1.0, 1e-300, 1e308, -1e308, math.nan, math.inf, -math.inf, 0.5, 30.0]
JOBS = ["worker", "worker", "ps", "chief", "nobody", "", "WORKER", "evaluator", "x" * 2000]
KINDS = ["", "zeros", "constant", "uniform", "normal", "truncated_normal", "glorot_uniform",
         "async", "sync", "ssp", "sgd", "adam", "momentum", "ftrl", "cosine", "step", "none",
         "fixed:2", "fixed:0", "fixed:-1", "fixed:99999999999", "min_bytes:1", "max_bytes:0",
         "max_bytes:nan", "\x00", "unknown"]
SAFE_ELEMENTS = 1 << 22
MAX_DATA_ELEMENTS = 4096  # random tensors carry at most this much data, to keep requests quick
HUGE_ELEMENTS = 1 << 40


def _wrap64(x):
    x &= (1 << 64) - 1
    return x - (1 << 64) if x >= 1 << 63 else x


def safe_shape(dims):
    """True if no correct or wrapping element count would make a server allocate much."""
    true = 1
    for d in dims:
        true *= d
    if any(d < 0 for d in dims) or true <= SAFE_ELEMENTS:
        return True
    wrapped = _wrap64(true)
    return true > HUGE_ELEMENTS and (wrapped <= SAFE_ELEMENTS or wrapped > 1 << 61)


class Generator:
    """Draws requests; `names` are real variable and table names, `senders` real senders to reuse.

    The senders passed in must not include the chief's incarnation: a request the chief could
    have sent is legitimate, so only the probe's own worker sender is real among them.
    """

    def __init__(self, rng, names, shapes, senders, data_dirs):
        self.rng, self.names, self.shapes = rng, list(names), list(shapes)
        self.senders, self.data_dirs = list(senders), list(data_dirs)

    # --- scalars ---------------------------------------------------------------------------

    def length(self):
        r = self.rng.random()
        if r < 0.6:
            return self.rng.randint(0, 3)
        if r < 0.9:
            return self.rng.randint(4, 20)
        if r < 0.99:
            return self.rng.randint(21, 200)
        return self.rng.choice([1000, 65536, 65537])

    def int_value(self, bits, signed=True):
        r = self.rng.random()
        if r < 0.5:
            v = self.rng.choice(INT64 if bits == 64 else INT32)
        elif r < 0.8:
            v = self.rng.randint(-5, 100)
        else:
            v = self.rng.getrandbits(bits)
        if not signed:
            return v % (1 << bits)
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        return v if lo <= v <= hi else _wrap64(v) if bits == 64 else (v & 0x7fffffff)

    def double(self):
        if self.rng.random() < 0.7:
            return self.rng.choice(DOUBLES)
        return struct.unpack("<d", struct.pack("<Q", self.rng.getrandbits(64)))[0]

    def text(self, field):
        r = self.rng.random()
        if field in ("name", "names", "variable", "table") and r < 0.7:
            return self.rng.choice(self.names + ["", "probe/absent", "dense0/kernel/part_0"])
        if field == "job":
            return self.rng.choice(JOBS)
        if field == "data" and r < 0.5:
            return self.rng.choice(self.data_dirs)
        if field in ("kind", "mode", "partitioner") and r < 0.7:
            return self.rng.choice(KINDS)
        if r < 0.85:
            n = self.rng.choice([0, 1, 5, 40, 1025, 70000])
            return "".join(chr(self.rng.choice([0x41, 0x7a, 0x2f, 0xe9, 0x4e2d, 0x1f600, 0]))
                           for _ in range(n))
        return self.rng.choice(["pstrain/start", "probe/end", "../../etc/passwd", "%s%n", " "])

    def raw(self, n=None):
        n = self.rng.choice([0, 1, 3, 16, 100, 1000]) if n is None else n
        return bytes(self.rng.getrandbits(8) for _ in range(n))

    # --- structured fields -----------------------------------------------------------------

    def shape(self):
        if self.shapes and self.rng.random() < 0.4:
            return list(self.rng.choice(self.shapes))
        while True:
            dims = [self.rng.choice([0, 1, 2, 3, 10, 784, -1, 2**31, 2**32, 2**62, 2**63 - 1,
                                     274177, 67280421310721])
                    for _ in range(self.rng.choice([0, 1, 1, 2, 2, 3, 33, 100]))]
            if safe_shape(dims):
                return dims

    def sender(self, msg):
        r = self.rng.random()
        if r < 0.3 and self.senders:
            msg.CopyFrom(self.rng.choice(self.senders))
        elif r < 0.5 and self.senders:  # a real task with another incarnation
            s = self.rng.choice(self.senders)
            msg.CopyFrom(wire.sender(s.job, s.task, self.int_value(64, signed=False)))
        elif r < 0.9:
            msg.CopyFrom(wire.sender(self.rng.choice(JOBS), self.int_value(32),
                                     self.int_value(64, signed=False)))
        # else: left empty

    def tensor(self, msg):
        if self.rng.random() < 0.6:
            shape = self.shape()
            n = 1
            for d in shape:
                n *= d
            msg.dtype = self.rng.choice([1, 1, 1, 0, 7, -1])
            msg.shape.extend(shape)
            count = n if 0 <= n <= MAX_DATA_ELEMENTS else self.rng.choice([0, 1])
            if self.rng.random() < 0.2:
                count = max(0, count + self.rng.choice([-1, 1]))
            floats = [self.rng.choice([0.0, 1.0, -2.5, math.nan, math.inf]) if
                      self.rng.random() < 0.05 else 0.0 for _ in range(min(count, 64))]
            data = struct.pack("<%df" % len(floats), *floats)
            msg.data = data + bytes(4 * count - len(data))
        else:
            self.fill(msg, depth=2)

    def fill(self, msg, depth=0):
        for f in msg.DESCRIPTOR.fields:
            if self.rng.random() < 0.3:
                continue
            repeated = f.label == F.LABEL_REPEATED
            count = self.length() if repeated else 1
            if f.type == F.TYPE_MESSAGE:
                if depth > 3:
                    continue
                for _ in range(min(count, 40)):
                    sub = getattr(msg, f.name).add() if repeated else getattr(msg, f.name)
                    self.message_field(sub, depth + 1)
                continue
            if f.name == "shape" and repeated:
                getattr(msg, f.name).extend(self.shape())
                continue
            if f.type == F.TYPE_STRING and count > 200:  # long lists: names, quickly drawn
                values = [self.rng.choice(self.names + ["probe/absent"]) for _ in range(count)]
            else:
                values = [self.scalar(f) for _ in range(count)]
            if repeated:
                getattr(msg, f.name).extend(values)
            else:
                setattr(msg, f.name, values[0])

    def message_field(self, msg, depth):
        name = msg.DESCRIPTOR.full_name
        if name == "pstrain.Sender":
            self.sender(msg)
        elif name == "pstrain.TensorProto":
            self.tensor(msg)
        else:
            self.fill(msg, depth)
            if name == "pstrain.Placement" and self.rng.random() < 0.5:
                msg.variable = self.rng.choice(self.names + ["dense0/kernel", "dense0/bias"])

    def scalar(self, f):
        t = f.type
        if t in (F.TYPE_INT32, F.TYPE_SINT32, F.TYPE_SFIXED32):
            return self.int_value(32)
        if t in (F.TYPE_INT64, F.TYPE_SINT64, F.TYPE_SFIXED64):
            return self.int_value(64)
        if t in (F.TYPE_UINT32, F.TYPE_FIXED32):
            return self.int_value(32, signed=False)
        if t in (F.TYPE_UINT64, F.TYPE_FIXED64):
            return self.int_value(64, signed=False)
        if t in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
            return self.double()
        if t == F.TYPE_BOOL:
            return self.rng.random() < 0.5
        if t == F.TYPE_ENUM:
            return self.rng.choice([0, 1, 7, -1, 2**31 - 1])
        if t == F.TYPE_STRING:
            return self.text(f.name)
        if t == F.TYPE_BYTES:
            return self.raw()
        raise TypeError("field %s has type %d" % (f.full_name, t))

    def request(self, cls):
        """A random instance of `cls`, or (one time in ten) raw bytes, or a damaged encoding."""
        r = self.rng.random()
        if r < 0.07:
            return self.raw()
        msg = cls()
        if hasattr(msg, "sender"):
            self.sender(msg.sender)
        self.fill(msg)
        if r < 0.1:  # a real encoding with one byte changed or cut short
            data = bytearray(msg.SerializeToString())
            if data:
                at = self.rng.randrange(len(data))
                if self.rng.random() < 0.5:
                    data[at] ^= 1 << self.rng.randrange(8)
                else:
                    del data[at:]
            return bytes(data)
        return msg
