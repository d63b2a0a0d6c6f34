// Parsing of incoming strata.v1 requests with a clear status.
//
// gRPC answers INTERNAL when a request does not parse; for strata a request that does
// not parse (malformed bytes, or a string field that is not valid UTF-8) is the caller's
// error, so it is INVALID_ARGUMENT with the message type named. This header is
// force-included into the generated service code (proto/CMakeLists.txt), so every
// handler of every strata.v1 method uses these traits.
#ifndef STRATA_PROTO_REQUEST_TRAITS_H_
#define STRATA_PROTO_REQUEST_TRAITS_H_

#include <grpcpp/impl/codegen/proto_utils.h>

#include <string>

#include "strata/v1/batch.pb.h"
#include "strata/v1/cache.pb.h"
#include "strata/v1/chat.pb.h"
#include "strata/v1/system_prompts.pb.h"

namespace strata::proto {
// Whether the last request this thread parsed did not parse. A streaming handler's Read
// parses on the handler's own thread and returns false for a message that does not parse
// as for the client's half-close: this tells the two apart.
inline thread_local bool last_request_malformed = false;

// The status of a request of message type `type` that does not parse.
inline grpc::Status MalformedRequest(const char* type) {
  return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                      std::string("request is not a valid ") + type +
                          ": malformed protobuf, wrong field types, or a string field that is not valid UTF-8");
}
}  // namespace strata::proto

#define STRATA_STRICT_REQUEST_TRAITS(Type)                                                  \
  template <>                                                                               \
  class grpc::SerializationTraits<Type, void> {                                             \
   public:                                                                                  \
    static grpc::Status Serialize(const grpc::protobuf::MessageLite& msg,                  \
                                  grpc::ByteBuffer* bb, bool* own_buffer) {                 \
      return grpc::GenericSerialize<grpc::ProtoBufferWriter, Type>(msg, bb, own_buffer);  \
    }                                                                                       \
    static grpc::Status Deserialize(grpc::ByteBuffer* buffer,                               \
                                    grpc::protobuf::MessageLite* msg) {                     \
      grpc::Status s = grpc::GenericDeserialize<grpc::ProtoBufferReader, Type>(buffer, msg); \
      strata::proto::last_request_malformed = !s.ok();                                      \
      if (s.ok()) return s;                                                                 \
      return strata::proto::MalformedRequest(#Type);                                        \
    }                                                                                       \
  };

STRATA_STRICT_REQUEST_TRAITS(strata::v1::ChatRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::GetSessionRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::DropSessionRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::ListSessionsRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::PrefetchRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::StatsRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::FlushRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::RegisterSystemPromptRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::DropSystemPromptRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::ListSystemPromptsRequest)
STRATA_STRICT_REQUEST_TRAITS(strata::v1::BatchRequest)

#undef STRATA_STRICT_REQUEST_TRAITS

#endif  // STRATA_PROTO_REQUEST_TRAITS_H_
