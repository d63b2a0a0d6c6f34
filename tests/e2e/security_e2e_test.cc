// Security end to end: TLS and mutual TLS on the gRPC port (a plaintext client and a
// client without a certificate are refused), API keys from a file reloaded on SIGHUP and
// from the environment, admin keys acting across tenants where others get
// PERMISSION_DENIED, and no key in the server's log.
#include <grpcpp/grpcpp.h>
#include <signal.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "storage/testing/temp_dir.h"
#include "strata/v1/cache.grpc.pb.h"
#include "strata/v1/chat.grpc.pb.h"
#include "tests/e2e/server_process.h"

namespace strata {
namespace {

using testing::ServerProcess;

std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A one-token chat on `channel` with `key` (empty: none); the final status.
grpc::Status Chat(const std::shared_ptr<grpc::Channel>& channel, const std::string& key,
                  const std::string& session = "s") {
  auto stub = v1::ChatService::NewStub(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!key.empty()) ctx.AddMetadata("authorization", "Bearer " + key);
  v1::ChatRequest r;
  r.set_session_id(session);
  r.set_max_new_tokens(1);
  r.add_token_ids(72);
  r.add_token_ids(105);
  auto reader = stub->Chat(&ctx, r);
  v1::ChatEvent e;
  while (reader->Read(&e)) {
  }
  return reader->Finish();
}

std::shared_ptr<grpc::Channel> Plain(const std::string& target) {
  return grpc::CreateChannel(target, grpc::InsecureChannelCredentials());
}

class SecurityE2eTest : public ::testing::Test {
 protected:
  // A CA, a server certificate for 127.0.0.1/localhost and a client certificate, by openssl.
  void MakeCertificates() {
    const std::string d = dir_;
    const std::string script = absl::StrCat(
        "set -e; cd ", d, "; exec >openssl.log 2>&1;",
        "openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.pem -days 1 -subj /CN=strata-test-ca;",
        "openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj /CN=localhost;",
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\nextendedKeyUsage=serverAuth\\n' > server.ext;",
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out server.pem -days 1 "
        "-extfile server.ext;",
        "openssl req -newkey rsa:2048 -nodes -keyout client.key -out client.csr -subj /CN=gateway;",
        "printf 'extendedKeyUsage=clientAuth\\n' > client.ext;",
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out client.pem -days 1 "
        "-extfile client.ext");
    ASSERT_EQ(std::system(("bash -c \"" + script + "\"").c_str()), 0) << Read(d + "/openssl.log");
  }
  std::shared_ptr<grpc::Channel> Tls(const std::string& target, bool with_client_cert) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = Read(dir_ + "/ca.pem");
    if (with_client_cert) {
      ssl.pem_private_key = Read(dir_ + "/client.key");
      ssl.pem_cert_chain = Read(dir_ + "/client.pem");
    }
    return grpc::CreateChannel(target, grpc::SslCredentials(ssl));
  }
  storage::testing::TempDir tmp_{"strata-security-e2e"};
  std::string dir_ = tmp_.path();
};

TEST_F(SecurityE2eTest, TlsServesEncryptedAndRefusesPlaintext) {
  MakeCertificates();
  auto server = ServerProcess::Start({"--device=cpu", "--tls_cert=" + dir_ + "/server.pem",
                                      "--tls_key=" + dir_ + "/server.key"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Chat(Tls((*server)->target(), false), "").ok());
  const grpc::Status plain = Chat(Plain((*server)->target()), "");
  EXPECT_EQ(plain.error_code(), grpc::StatusCode::UNAVAILABLE) << plain.error_message();
}

TEST_F(SecurityE2eTest, MutualTlsNeedsAClientCertificateTheCaSigned) {
  MakeCertificates();
  auto server = ServerProcess::Start({"--device=cpu", "--tls_cert=" + dir_ + "/server.pem",
                                      "--tls_key=" + dir_ + "/server.key", "--tls_client_ca=" + dir_ + "/ca.pem"});
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_TRUE(Chat(Tls((*server)->target(), true), "").ok());
  EXPECT_FALSE(Chat(Tls((*server)->target(), false), "").ok()) << "a client without a certificate";
  EXPECT_FALSE(Chat(Plain((*server)->target()), "").ok());
  // Bad TLS flags stop the server at start with the reason.
  auto half = ServerProcess::Start({"--device=cpu", "--tls_cert=" + dir_ + "/server.pem"});
  ASSERT_FALSE(half.ok());
  EXPECT_NE(std::string(half.status().message()).find("--tls_key"), std::string::npos) << half.status();
}

TEST_F(SecurityE2eTest, ApiKeysFromAFileAreReloadedOnSighupAndStayOutOfTheLog) {
  const std::string file = dir_ + "/keys";
  std::ofstream(file) << "# tenants\nsecret-one=alpha\n";
  setenv("STRATA_API_KEYS", "secret-env=beta", 1);
  auto server = ServerProcess::Start({"--device=cpu", "--api_keys_file=" + file});
  unsetenv("STRATA_API_KEYS");
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = Plain((*server)->target());
  EXPECT_TRUE(Chat(channel, "secret-one").ok());
  EXPECT_TRUE(Chat(channel, "secret-env").ok()) << "the key from STRATA_API_KEYS";
  EXPECT_EQ(Chat(channel, "secret-two").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(Chat(channel, "").error_code(), grpc::StatusCode::UNAUTHENTICATED);

  // Rotated: the new key works and the old one no longer does.
  std::ofstream(file) << "secret-two=alpha\n";
  ASSERT_EQ(kill((*server)->pid(), SIGHUP), 0);
  bool rotated = false;
  for (int i = 0; i < 100 && !rotated; ++i) {
    rotated = Chat(channel, "secret-two").ok();
    if (!rotated) absl::SleepFor(absl::Milliseconds(50));
  }
  EXPECT_TRUE(rotated);
  EXPECT_EQ(Chat(channel, "secret-one").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  // A broken file on reload leaves the keys as they were (and the server up).
  std::ofstream(file) << "not a key entry\n";
  ASSERT_EQ(kill((*server)->pid(), SIGHUP), 0);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_TRUE(Chat(channel, "secret-two").ok());
  const std::string log = Read((*server)->log_path());
  EXPECT_NE(log.find("API keys stay as they were"), std::string::npos) << log;
  for (const char* key : {"secret-one", "secret-two", "secret-env"}) {
    EXPECT_EQ(log.find(key), std::string::npos) << "the log shows the key " << key;
  }
}

TEST_F(SecurityE2eTest, AdminKeysActAcrossTenantsOthersGetPermissionDenied) {
  auto server = ServerProcess::Start({"--device=cpu", "--api_keys=ka=alpha,kb=beta,kops=ops:admin"});
  ASSERT_TRUE(server.ok()) << server.status();
  auto channel = Plain((*server)->target());
  ASSERT_TRUE(Chat(channel, "ka", "alpha-session").ok());
  auto cache = v1::CacheService::NewStub(channel);
  auto get = [&](const std::string& key, const std::string& tenant) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer " + key);
    v1::GetSessionRequest r;
    r.set_session_id("alpha-session");
    r.set_tenant(tenant);
    v1::SessionInfo info;
    return cache->GetSession(&ctx, r, &info);
  };
  EXPECT_TRUE(get("ka", "").ok());
  EXPECT_TRUE(get("ka", "alpha").ok()) << "naming one's own tenant";
  EXPECT_EQ(get("kb", "alpha").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(get("kb", "").error_code(), grpc::StatusCode::NOT_FOUND) << "beta has no such session";
  EXPECT_TRUE(get("kops", "alpha").ok()) << "an admin key reads another tenant's session";
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer kb");
    v1::ListSessionsRequest r;
    r.set_tenant("alpha");
    v1::ListSessionsResponse resp;
    EXPECT_EQ(cache->ListSessions(&ctx, r, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer kops");
    v1::ListSessionsRequest r;
    r.set_tenant("alpha");
    v1::ListSessionsResponse resp;
    ASSERT_TRUE(cache->ListSessions(&ctx, r, &resp).ok());
    ASSERT_EQ(resp.sessions_size(), 1);
    EXPECT_EQ(resp.sessions(0).session_id(), "alpha-session");
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer kb");
    v1::DropSessionRequest r;
    r.set_session_id("alpha-session");
    r.set_tenant("alpha");
    v1::DropSessionResponse resp;
    EXPECT_EQ(cache->DropSession(&ctx, r, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_TRUE(get("ka", "").ok()) << "a refused drop dropped it";
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer kops");
    v1::DropSessionRequest r;
    r.set_session_id("alpha-session");
    r.set_tenant("alpha");
    v1::DropSessionResponse resp;
    EXPECT_TRUE(cache->DropSession(&ctx, r, &resp).ok());
    EXPECT_EQ(get("ka", "").error_code(), grpc::StatusCode::NOT_FOUND);
  }
  {
    grpc::ClientContext ctx;
    ctx.AddMetadata("authorization", "Bearer kb");
    v1::StatsRequest r;
    r.set_tenant("alpha");
    v1::StatsResponse resp;
    EXPECT_EQ(cache->Stats(&ctx, r, &resp).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  }
}

}  // namespace
}  // namespace strata
