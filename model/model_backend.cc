#include "model/model_backend.h"

namespace strata::model {

storage::ChunkLayout ChunkLayoutFor(const ModelBackend& backend, int chunk_tokens) {
  return storage::ChunkLayout{
      .layers = backend.config().num_layers, .chunk_tokens = chunk_tokens, .row_bytes = backend.kv_row_bytes()};
}

}  // namespace strata::model
