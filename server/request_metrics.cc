#include "server/request_metrics.h"

#include <string>

#include "server/status_map.h"

namespace strata::server {
namespace {

class CountingInterceptor final : public grpc::experimental::Interceptor {
 public:
  CountingInterceptor(std::string method, metrics::Family<metrics::Counter>* family)
      : method_(std::move(method)), family_(family) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(grpc::experimental::InterceptionHookPoints::PRE_SEND_STATUS)) {
      family_->WithLabels({{"method", method_}, {"code", GrpcCodeName(methods->GetSendStatus().error_code())}})
          .Increment();
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  metrics::Family<metrics::Counter>* family_;
};

class CountingFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit CountingFactory(metrics::Registry& registry)
      : family_(&registry.AddCounter("strata_requests_total", "gRPC calls answered, by method and final status code.")) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(grpc::experimental::ServerRpcInfo* info) override {
    // "/strata.v1.ChatService/Chat" -> "strata.v1.ChatService/Chat"
    std::string method = info->method() != nullptr ? info->method() : "unknown";
    if (!method.empty() && method[0] == '/') method.erase(0, 1);
    return new CountingInterceptor(std::move(method), family_);
  }

 private:
  metrics::Family<metrics::Counter>* family_;
};

}  // namespace

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> RequestMetricsInterceptor(
    metrics::Registry& registry) {
  return std::make_unique<CountingFactory>(registry);
}

}  // namespace strata::server
