// The session's ID as call metadata, for proxies that route a session's turns to one
// replica by consistent hash (deploy/nginx). strata's clients send it with every Chat;
// the server checks that it equals the request's session_id when present.
#ifndef STRATA_SERVER_SESSION_HEADER_H_
#define STRATA_SERVER_SESSION_HEADER_H_

namespace strata::server {

inline constexpr char kSessionHeader[] = "x-session-id";

}  // namespace strata::server

#endif  // STRATA_SERVER_SESSION_HEADER_H_
