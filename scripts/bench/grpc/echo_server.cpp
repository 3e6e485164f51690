// The C++ peer of make bench's gRPC section, on Debian's libgrpc++ and the
// service protoc's grpc_cpp_plugin generates from echo.proto:
//   echo_server PORT sync|callback
// sync: the synchronous API, one completion queue with one polling
// thread (NUM_CQS, MIN_POLLERS and MAX_POLLERS 1) and a resource quota of
// at most 2 threads for it (the poller and the one that takes a call when
// the poller hands over). callback: the callback API, handlers on
// gRPC-core's own threads. Either way gRPC-core keeps a few threads of its
// own (timers, an executor): the bench pins the whole process to one CPU
// and counts the CPU time of all its threads.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>
#include <grpcpp/resource_quota.h>

#include "echo.grpc.pb.h"

static void copy(const benchpb::EchoMsg *req, benchpb::EchoMsg *res)
{
  res->set_id(req->id());
  res->set_stamp(req->stamp());
  res->set_flag(req->flag());
  res->set_score(req->score());
  res->set_text(req->text());
}

class SyncEcho final : public benchpb::Echo::Service {
  grpc::Status Echo(grpc::ServerContext *, const benchpb::EchoMsg *req, benchpb::EchoMsg *res) override
  {
    copy(req, res);
    return grpc::Status::OK;
  }
};

class CallbackEcho final : public benchpb::Echo::CallbackService {
  grpc::ServerUnaryReactor *Echo(grpc::CallbackServerContext *ctx, const benchpb::EchoMsg *req,
                                 benchpb::EchoMsg *res) override
  {
    copy(req, res);
    grpc::ServerUnaryReactor *r = ctx->DefaultReactor();
    r->Finish(grpc::Status::OK);
    return r;
  }
};

int main(int argc, char **argv)
{
  if (argc != 3 || (strcmp(argv[2], "sync") != 0 && strcmp(argv[2], "callback") != 0)) {
    fprintf(stderr, "usage: %s PORT sync|callback\n", argv[0]);
    return 2;
  }
  std::string addr = std::string("127.0.0.1:") + argv[1];
  SyncEcho sync_svc;
  CallbackEcho cb_svc;
  grpc::ServerBuilder b;
  b.AddListeningPort(addr, grpc::InsecureServerCredentials());
  if (strcmp(argv[2], "sync") == 0) {
    b.RegisterService(&sync_svc);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::NUM_CQS, 1);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MIN_POLLERS, 1);
    b.SetSyncServerOption(grpc::ServerBuilder::SyncServerOption::MAX_POLLERS, 1);
    if (getenv("QUOTA")) {
      grpc::ResourceQuota quota("echo");
      quota.SetMaxThreads(atoi(getenv("QUOTA")));
      b.SetResourceQuota(quota);
    }
  } else {
    b.RegisterService(&cb_svc);
  }
  std::unique_ptr<grpc::Server> server = b.BuildAndStart();
  if (!server) {
    fprintf(stderr, "cannot listen on %s\n", addr.c_str());
    return 1;
  }
  server->Wait();
  return 0;
}
