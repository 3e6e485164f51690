# make bench's protobuf section, Python's side: python3 codec.py STUBS N
# RUNS BYTES -> "roundtrip_s=... encode_s=... decode_s=... backend=..."
# (medians of RUNS runs of N each, per second of CPU time): python3-
# protobuf's SerializeToString and ParseFromString into a new message, of
# record.proto's Record as codec.lua encoded it (BYTES, a file).
import sys
import time

sys.path.insert(0, sys.argv[1])
from google.protobuf.internal import api_implementation  # noqa: E402
import record_pb2  # noqa: E402

N, RUNS = int(sys.argv[2]), int(sys.argv[3])
data = open(sys.argv[4], "rb").read()
r = record_pb2.Record()
r.ParseFromString(data)
Record = record_pb2.Record


def rate(fn):
    fn(N // 10)
    rates = []
    for _ in range(RUNS):
        t0 = time.process_time()
        fn(N)
        rates.append(N / (time.process_time() - t0))
    rates.sort()
    return rates[(RUNS + 1) // 2 - 1]


def roundtrip(n):
    for _ in range(n):
        m = Record()
        m.ParseFromString(r.SerializeToString())


def encode(n):
    for _ in range(n):
        r.SerializeToString()


def decode(n):
    for _ in range(n):
        m = Record()
        m.ParseFromString(data)


rt, enc, dec = rate(roundtrip), rate(encode), rate(decode)
assert Record.FromString(r.SerializeToString()) == r
print("roundtrip_s=%.0f encode_s=%.0f decode_s=%.0f backend=%s" % (rt, enc, dec, api_implementation.Type()))
