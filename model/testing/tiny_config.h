// A tiny Llama shape for the model's tests: two layers, GQA 2:1, head_dim 16, QKV bias.
#ifndef STRATA_MODEL_TESTING_TINY_CONFIG_H_
#define STRATA_MODEL_TESTING_TINY_CONFIG_H_

#include "model/model_config.h"

namespace strata::model::testing {

inline ModelConfig TinyConfig() {
  ModelConfig c = ModelConfig::Builtin();
  c.hidden_size = 64;
  c.num_layers = 2;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 16;
  c.intermediate_size = 96;
  c.max_context = 256;
  c.qkv_bias = true;
  return c;
}

}  // namespace strata::model::testing

#endif  // STRATA_MODEL_TESTING_TINY_CONFIG_H_
