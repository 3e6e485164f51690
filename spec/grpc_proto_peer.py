# The Python side of spec/grpc_proto_spec.lua: python3-grpcio and
# python3-protobuf with stubs that Debian's protoc generated (--python_out,
# --grpc_out with grpc_python_plugin) from spec/proto/golden.proto and
# cohost's health and reflection .proto files, into the directory given
# first. Nothing here was written against cohost: it checks what it gets
# against its own golden messages, built with the generated classes.
#
#   grpc_proto_peer.py STUBS server          serves golden.Golden, prints its port
#   grpc_proto_peer.py STUBS client PORT     calls a golden.Golden server per case
#   grpc_proto_peer.py STUBS watch PORT SVC  Health.Watch, a line per status
#   grpc_proto_peer.py STUBS check PORT SVC...  Health.Check, a line per service
#   grpc_proto_peer.py STUBS reflect PORT    server reflection, a line per finding
import math
import sys

stubs = sys.argv[1]
sys.path.insert(0, stubs)
import grpc  # noqa: E402

# The generated grpc/health/... and grpc/reflection/... packages sit beside
# grpcio's own grpc package: one import path for both.
grpc.__path__.append(stubs + "/grpc")

from concurrent import futures  # noqa: E402
from google.protobuf import descriptor, descriptor_pb2, descriptor_pool  # noqa: E402
from google.protobuf import struct_pb2  # noqa: E402
import golden_pb2 as g  # noqa: E402
import golden_pb2_grpc as gg  # noqa: E402
import leaf_pb2  # noqa: E402

BIG = 8 * 1024 * 1024
OPTIONS = [("grpc.max_receive_message_length", BIG), ("grpc.max_send_message_length", BIG)]


# -- The golden messages (spec/grpc_proto_spec.lua has the same as Lua tables)

def cases():
    out = {}
    out["extremes"] = g.All(
        case="extremes",
        scalars=g.Scalars(
            d=1.7976931348623157e308, f=3.4028234663852886e38, i32=-2**31, i64=-2**63,
            u32=2**32 - 1, u64=2**64 - 1, s32=-2**31, s64=2**63 - 1, fx32=2**32 - 1,
            fx64=2**64 - 1, sfx32=-2**31, sfx64=-2**63, b=True, s="héllo ✓ 𝄞",
            by=b"\x00\xff\x01", color=g.MINUS),
        packed64=[-1, 2**53, -2**53, 2**53 + 1, 2**63 - 1],
        unpacked32=[0, 1, 2**32 - 1],
        zigzags=[-2**31, 2**31 - 1, -1, 0],
        fixeds=[0, 2**64 - 1],
        bools=[True, False, True],
        colors=[g.RED, g.MINUS, g.COLOR_UNSPECIFIED])
    out["floats"] = g.All(
        case="floats",
        scalars=g.Scalars(d=math.nan, f=math.nan),
        list=[g.Scalars(d=-0.0), g.Scalars(), g.Scalars(f=-0.0), g.Scalars(d=math.inf, f=-math.inf)],
        doubles=[math.nan, -0.0, 0.0, 5e-324, -math.inf])
    out["empty_vs_unset"] = g.All(
        case="empty_vs_unset", note="", empty_msg=g.Scalars(), names=["", "x", ""],
        blobs=[b"", b"\x00"], list=[g.Scalars(), g.Scalars(s="x")])
    out["maps"] = g.All(
        case="maps",
        inners={
            "a": g.Inner(leaves={1: leaf_pb2.Leaf(name="x", weight=-5),
                                 -2**62: leaf_pb2.Leaf(name="neg")},
                         colors=[g.RED, g.MINUS]),
            "b": g.Inner(),
        },
        by_id={2**64 - 1: "max", 0: "zero", 7: ""},
        flags={True: g.RED, False: g.MINUS})
    out["oneof_text"] = g.All(case="oneof_text", text="t")
    out["oneof_nested"] = g.All(case="oneof_nested", nested=g.Scalars(i32=5))
    out["oneof_number0"] = g.All(case="oneof_number0", number=0)
    meta = struct_pb2.Struct()
    meta.update({"k": "v", "n": 1.5, "l": [True, None]})
    out["wkt"] = g.All(
        case="wkt",
        at={"seconds": 1700000000, "nanos": 123},
        took={"seconds": -5, "nanos": -500},
        any={"type_url": "type.googleapis.com/golden.leaf.Leaf",
             "value": leaf_pb2.Leaf(name="in any").SerializeToString()},
        meta=meta,
        wrapped={"value": 0},
        nothing={},
        leaf=leaf_pb2.Leaf(name="top", weight=2**62))
    out["unknown_enum"] = g.All(
        case="unknown_enum", scalars=g.Scalars(color=42), colors=[g.RED, 7, g.MINUS],
        flags={True: 99})
    out["big"] = g.All(case="big", big=bytes(range(256)) * 16384)
    return out


CASES = cases()


# -- Comparing messages: NaN equals NaN, and -0.0 is not 0.0

def same_scalar(x, y):
    if isinstance(x, float) or isinstance(y, float):
        if math.isnan(x) and math.isnan(y):
            return True
        return x == y and math.copysign(1, x) == math.copysign(1, y)
    return x == y and type(x) == type(y)


def diff_value(fd, x, y, path):
    if fd.type == descriptor.FieldDescriptor.TYPE_MESSAGE:
        return diff(x, y, path)
    if not same_scalar(x, y):
        return "%s: %r != %r" % (path, x, y)
    return ""


def diff(a, b, path="message"):
    """'' when b equals a, else where they differ first."""
    fa = dict((f.name, (f, v)) for f, v in a.ListFields())
    fb = dict((f.name, v) for f, v in b.ListFields())
    if sorted(fa) != sorted(fb):
        return "%s: fields %s != %s" % (path, sorted(fa), sorted(fb))
    for name, (fd, va) in sorted(fa.items()):
        vb, p = fb[name], path + "." + name
        if fd.label == descriptor.FieldDescriptor.LABEL_REPEATED:
            if fd.message_type is not None and fd.message_type.GetOptions().map_entry:
                if sorted(va.keys()) != sorted(vb.keys()):
                    return "%s: keys %r != %r" % (p, sorted(va.keys()), sorted(vb.keys()))
                vfd = fd.message_type.fields_by_name["value"]
                for k in va:
                    d = diff_value(vfd, va[k], vb[k], "%s[%r]" % (p, k))
                    if d:
                        return d
            else:
                if len(va) != len(vb):
                    return "%s: %d elements != %d" % (p, len(va), len(vb))
                for i in range(len(va)):
                    d = diff_value(fd, va[i], vb[i], "%s[%d]" % (p, i + 1))
                    if d:
                        return d
        else:
            d = diff_value(fd, va, vb, p)
            if d:
                return d
    return ""


def verdict(msg):
    want = CASES.get(msg.case)
    if want is None:
        return g.Verdict(ok=False, diff="no case " + msg.case)
    d = diff(want, msg)
    return g.Verdict(message=want, ok=d == "", diff=d)


# -- server: golden.Golden

class Golden(gg.GoldenServicer):
    def Check(self, req, ctx):
        return verdict(req)

    def Repeat(self, req, ctx):
        for _ in range(3):
            yield CASES[req.case]

    def Collect(self, it, ctx):
        seen, bad = [], ""
        for m in it:
            seen.append(m.case)
            bad = bad or verdict(m).diff
        return g.Verdict(ok=bad == "", diff=bad, message=g.All(case=",".join(seen)))

    def Chat(self, it, ctx):
        for m in it:
            v = verdict(m)
            yield g.All(case=("ok:" if v.ok else "bad:") + m.case + ":" + v.diff)


def serve():
    s = grpc.server(futures.ThreadPoolExecutor(max_workers=4), options=OPTIONS)
    gg.add_GoldenServicer_to_server(Golden(), s)
    port = s.add_insecure_port("127.0.0.1:0")
    s.start()
    print(port, flush=True)
    s.wait_for_termination(120)


# -- client: golden.Golden on a cohost server

def client(port):
    ch = grpc.insecure_channel("127.0.0.1:" + port, options=OPTIONS)
    stub = gg.GoldenStub(ch)
    for name, want in CASES.items():
        v = stub.Check(want, timeout=20)
        d = v.diff if not v.ok else diff(want, v.message)
        print("check %s: %s" % (name, d or "ok"), flush=True)
    got = list(stub.Repeat(CASES["maps"], timeout=20))
    d = "" if len(got) == 3 else "%d messages" % len(got)
    for m in got:
        d = d or diff(CASES["maps"], m)
    print("repeat: %s" % (d or "ok"), flush=True)
    v = stub.Collect(iter([CASES["extremes"], CASES["wkt"], CASES["floats"]]), timeout=20)
    print("collect: %s" % ((v.diff if not v.ok else "") or v.message.case), flush=True)
    answers = [m.case for m in stub.Chat(iter([CASES["oneof_text"], CASES["unknown_enum"]]), timeout=20)]
    print("chat: %s" % " ".join(answers), flush=True)


# -- Health checking and reflection

def health():
    from grpc.health.v1 import health_pb2, health_pb2_grpc
    return health_pb2, health_pb2_grpc


def watch(port, service):
    health_pb2, health_pb2_grpc = health()
    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel("127.0.0.1:" + port))
    try:
        for r in stub.Watch(health_pb2.HealthCheckRequest(service=service)):
            print(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status), flush=True)
        print("end", flush=True)
    except grpc.RpcError as e:
        print("error %s" % e.code().name, flush=True)


def check(port, services):
    health_pb2, health_pb2_grpc = health()
    stub = health_pb2_grpc.HealthStub(grpc.insecure_channel("127.0.0.1:" + port))
    for service in services:
        try:
            r = stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            print(health_pb2.HealthCheckResponse.ServingStatus.Name(r.status), flush=True)
        except grpc.RpcError as e:
            print("error %s %s" % (e.code().name, e.details()), flush=True)


def reflect(port):
    from grpc.reflection.v1alpha import reflection_pb2 as rp, reflection_pb2_grpc as rpg
    stub = rpg.ServerReflectionStub(grpc.insecure_channel("127.0.0.1:" + port))

    def ask(**kw):
        return list(stub.ServerReflectionInfo(iter([rp.ServerReflectionRequest(**kw)]), timeout=10))[0]

    names = [s.name for s in ask(list_services="").list_services_response.service]
    print("services: " + " ".join(names), flush=True)
    # Every service's file and what it imports, into a pool of our own: a
    # file added before what it imports would not build, so retry.
    pool, protos = descriptor_pool.DescriptorPool(), {}
    for name in names:
        for b in ask(file_containing_symbol=name).file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto.FromString(b)
            protos[fd.name] = fd
    added = set()
    while len(added) < len(protos):
        progress = False
        for fname, fd in protos.items():
            if fname not in added and all(d in added for d in fd.dependency):
                pool.Add(fd)
                added.add(fname)
                progress = True
        if not progress:
            print("unresolved: " + " ".join(sorted(set(protos) - added)), flush=True)
            return
    print("files: " + " ".join(sorted(added)), flush=True)
    for name in names:
        svc = pool.FindServiceByName(name)
        print("methods %s: %s" % (name, " ".join(
            "%s(%s%s)%s%s" % (m.name, "stream " if m.client_streaming else "", m.input_type.full_name,
                              " stream " if m.server_streaming else " ", m.output_type.full_name)
            for m in svc.methods)), flush=True)
    r = ask(file_by_filename="grpc/health/v1/health.proto")
    fd = descriptor_pb2.FileDescriptorProto.FromString(r.file_descriptor_response.file_descriptor_proto[0])
    print("by filename: %s %s" % (fd.name, fd.package), flush=True)
    r = ask(file_containing_symbol="no.Such")
    print("unknown symbol: %d %s" % (r.error_response.error_code, r.error_response.error_message), flush=True)
    r = ask(file_containing_symbol=names[-1] + "." + svc.methods[0].name)
    print("by method: %d files" % len(r.file_descriptor_response.file_descriptor_proto), flush=True)


if __name__ == "__main__":
    mode = sys.argv[2]
    if mode == "server":
        serve()
    elif mode == "client":
        client(sys.argv[3])
    elif mode == "watch":
        watch(sys.argv[3], sys.argv[4])
    elif mode == "check":
        check(sys.argv[3], sys.argv[4:])
    elif mode == "reflect":
        reflect(sys.argv[3])
