# The Python peer of make bench's gRPC section: python3 echo_server.py
# STUBS PORT, STUBS the directory protoc wrote echo_pb2*.py into. grpcio's
# server with a pool of one worker thread.
import sys
from concurrent import futures

sys.path.insert(0, sys.argv[1])
import grpc  # noqa: E402
import echo_pb2  # noqa: E402
import echo_pb2_grpc  # noqa: E402


class Echo(echo_pb2_grpc.EchoServicer):
    def Echo(self, req, ctx):
        return echo_pb2.EchoMsg(id=req.id, stamp=req.stamp, flag=req.flag, score=req.score, text=req.text)


s = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
echo_pb2_grpc.add_EchoServicer_to_server(Echo(), s)
s.add_insecure_port("127.0.0.1:" + sys.argv[2])
s.start()
s.wait_for_termination()
