#include "base/metrics_exposer.h"

#include <civetweb.h>

#include <cstring>
#include <functional>
#include <mutex>
#include <string>

#include "absl/strings/str_cat.h"

namespace strata::metrics {
namespace {

// Answers GET (and HEAD: the headers alone) with `content_type`, `extra_headers` (each
// ending in CRLF) and what `body` makes; any other method with 405.
int Respond(mg_connection* conn, const char* content_type, const char* extra_headers,
            const std::function<std::string()>& body) {
  const mg_request_info* info = mg_get_request_info(conn);
  if (std::strcmp(info->request_method, "GET") != 0 && std::strcmp(info->request_method, "HEAD") != 0) {
    mg_printf(conn, "HTTP/1.1 405 Method Not Allowed\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    return 405;
  }
  std::string text = body();
  mg_printf(conn,
            "HTTP/1.1 200 OK\r\nContent-Type: %s\r\n%s"
            "Content-Length: %zu\r\nConnection: close\r\n\r\n",
            content_type, extra_headers, text.size());
  if (std::strcmp(info->request_method, "GET") == 0) mg_write(conn, text.data(), text.size());
  return 200;
}

int HandleMetrics(mg_connection* conn, void* data) {
  const auto* registry = static_cast<const Registry*>(data);
  return Respond(conn, "text/plain; version=0.0.4; charset=utf-8", "", [registry] { return registry->Serialize(); });
}

int HandlePage(mg_connection* conn, void* data) {
  const auto* page = static_cast<const HttpPage*>(data);
  // A status page is read live: a browser must not show a cached copy.
  return Respond(conn, page->content_type.c_str(), "Cache-Control: no-store\r\n", page->body);
}

int HandleNotFound(mg_connection* conn, void*) {
  mg_printf(conn, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
  return 404;
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(const std::string& address,
                                                                      const Registry* registry,
                                                                      std::vector<HttpPage> pages) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  const char* options[] = {"listening_ports", address.c_str(), "num_threads", "2", nullptr};
  mg_callbacks callbacks{};
  // civetweb logs why a start failed through this callback (on this thread, inside
  // mg_start); the status below says it instead of a log line.
  static thread_local std::string start_error;
  start_error.clear();
  callbacks.log_message = [](const mg_connection*, const char* message) {
    start_error = message;
    return 1;
  };
  mg_context* ctx = mg_start(&callbacks, nullptr, options);
  if (ctx == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve /metrics on ", address, ": ",
                                               start_error.empty() ? "address in use or invalid" : start_error));
  }
  // civetweb takes a handler whose URI equals the path, else the first, in the order they
  // were set, whose pattern matches: the exact paths ('$'), then "/**", every path, for the
  // 404s (as a pattern, not the URI "/", which would win the page at "/").
  mg_set_request_handler(ctx, "/metrics$", HandleMetrics, const_cast<Registry*>(registry));
  std::vector<std::unique_ptr<HttpPage>> owned;
  for (HttpPage& page : pages) {
    if (page.path == "/metrics" || page.path.empty() || page.path[0] != '/') continue;
    owned.push_back(std::make_unique<HttpPage>(std::move(page)));
    mg_set_request_handler(ctx, (owned.back()->path + "$").c_str(), HandlePage, owned.back().get());
  }
  mg_set_request_handler(ctx, "/**", HandleNotFound, nullptr);
  mg_server_port ports[1];
  int n = mg_get_server_ports(ctx, 1, ports);
  int port = n > 0 ? ports[0].port : 0;
  return std::unique_ptr<MetricsExposer>(new MetricsExposer(ctx, port, std::move(owned)));
}

MetricsExposer::~MetricsExposer() { mg_stop(ctx_); }

}  // namespace strata::metrics
