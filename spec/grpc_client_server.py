# The python3-grpcio server of spec/grpc_client_spec.lua: bytes in and out
# (no serializers); prints its port once bound.
import grpc, sys, time
from concurrent import futures
def echo(req, ctx): return req
def notfound(req, ctx): ctx.abort(grpc.StatusCode.NOT_FOUND, 'x')
def slow(req, ctx):
    time.sleep(3)
    return req
def rep(req, ctx):
    for _ in range(3): yield req
def total(it, ctx): return b"".join(it)
s = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
s.add_generic_rpc_handlers((grpc.method_handlers_generic_handler('pkg.Svc', {
  'Echo': grpc.unary_unary_rpc_method_handler(echo),
  'Slow': grpc.unary_unary_rpc_method_handler(slow),
  'NotFound': grpc.unary_unary_rpc_method_handler(notfound),
  'Repeat': grpc.unary_stream_rpc_method_handler(rep),
  'Join': grpc.stream_unary_rpc_method_handler(total)}),))
port = s.add_insecure_port('127.0.0.1:0')
s.start(); print(port, flush=True)
s.wait_for_termination(60)
