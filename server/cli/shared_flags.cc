#include "server/cli/shared_flags.h"

#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/string_view.h"
#include "kernels/attention/decode.h"
#include "kernels/attention/relay.h"

// --cuda_decode_kernel's values: auto, cuda, tensor.
namespace strata::kernels {
bool AbslParseFlag(absl::string_view text, DecodeKernel* kernel, std::string* error) {
  if (text == "auto") {
    *kernel = DecodeKernel::kAuto;
  } else if (text == "cuda") {
    *kernel = DecodeKernel::kCudaCores;
  } else if (text == "tensor") {
    *kernel = DecodeKernel::kTensorCores;
  } else {
    *error = "expected auto, cuda or tensor";
    return false;
  }
  return true;
}
std::string AbslUnparseFlag(DecodeKernel kernel) {
  return kernel == DecodeKernel::kCudaCores ? "cuda" : kernel == DecodeKernel::kTensorCores ? "tensor" : "auto";
}
}  // namespace strata::kernels

ABSL_FLAG(int, port, 7070, "serve: gRPC port (0: pick a free one); chat: port to call when --target is empty");
ABSL_FLAG(std::string, target, "", "chat, bench: server address host:port (chat default: 127.0.0.1:--port)");
ABSL_FLAG(std::string, api_key, "", "chat, bench: API key to send");
ABSL_FLAG(uint64_t, seed, 1,
          "bench: seed of the workload (lengths, timing and token IDs); chat: the sampler's seed (the same seed "
          "and conversation give the same answer)");
ABSL_FLAG(std::string, model, "",
          "serve, logits, ppl: a Hugging Face model directory (config.json + *.safetensors; Llama, Mistral, Qwen2), "
          "or random:NAME for deterministic random weights of a named shape (builtin, llama3-8b, llama3-1b, qwen3-8b, qwen2.5-7b; "
          "made on the device; random:builtin is the small random model with the byte tokenizer); empty: the built-in "
          "model, trained on the King James Bible");
ABSL_FLAG(std::string, device, "auto",
          "serve, logits, ppl: cuda, cpu, or auto (cuda when strata was built with CUDA and a GPU is visible)");
ABSL_FLAG(double, kv_memory_fraction, 0.85,
          "serve, logits, ppl: share of the GPU memory left after the weights that the paged KV pool takes");

ABSL_FLAG(bool, cuda_share_prefixes, true,
          "serve: on the GPU, sessions on a shared system prompt share its KV pages (off: the GPU computes "
          "shared prompts inline per session)");
ABSL_FLAG(bool, cuda_relay_attention, true,
          "serve: on the GPU, decodes of sessions on one shared system prompt read its KV once per step as a "
          "group (relay attention); off, each session reads the shared pages itself");
ABSL_FLAG(int64_t, cuda_relay_beside_min_tokens, -1,
          "serve: on the GPU, relay attention's system part runs on a second stream beside the rows' decode where "
          "the rows' own tokens (rows x longest context) reach this many (32768: the kernel's measured rule, "
          "kernels/attention/relay.h); -1 never: end to end it measured slower (docs/BENCHMARKS.md)");
ABSL_FLAG(int64_t, cuda_relay_chained_min_tokens, strata::kernels::kRelayChainedOnTensorCores,
          "serve: on a Hopper GPU, relay attention's system part runs first on the wgmma form and the rows' decode "
          "as its programmatic dependent on the same stream, where the rows' own tokens (rows x longest context) "
          "reach this many (kernels/attention/relay.h); -1: where the decode runs on the tensor cores (the H200: "
          "faster there, docs/BENCHMARKS.md); -2: never");

ABSL_FLAG(strata::kernels::DecodeKernel, cuda_decode_kernel, strata::kernels::DecodeKernel::kAuto,
          "serve: on the GPU, the kernel of decode steps' attention (relay's context part included): auto (the "
          "measured rule, kernels/attention/decode.h), cuda (CUDA cores) or tensor (tensor cores)");

ABSL_FLAG(bool, cuda_prefill_key_splits, true,
          "serve: on the GPU, prompt chunks with few new tokens over a long history (a returning turn) split "
          "their keys across the SMs; off, one block per query tile reads every key");

ABSL_FLAG(bool, cuda_split_uneven_rows, true,
          "serve: on the GPU, decode rows of unequal length split their keys into parts no longer than the "
          "rows' mean (one long row among short ones is not left to one block a head); off, parts sized for "
          "the longest row alone");

ABSL_FLAG(int, cuda_kv_read_buffer_layers, 16,
          "serve: on the GPU, layers of stored KV the read buffer holds while a cached history loads layer by "
          "layer (each up to --cuda_kv_read_group_tokens tokens)");
ABSL_FLAG(int64_t, cuda_kv_read_group_tokens, 4096,
          "serve: on the GPU, most tokens of one layer's stored KV moved through the read buffer at a time");

ABSL_FLAG(int64_t, cuda_kv_read_copy_bytes, int64_t{8} << 20,
          "serve: on the GPU, about the bytes one DMA of a loading history moves (whole layers of a chunk)");

ABSL_FLAG(int, cuda_kv_save_direct_blocks, 8,
          "serve: on the GPU, a write-back's gather writes the pinned host tier through its device mapping with "
          "this many blocks (KV read once from HBM); 0: it gathers into device staging and a DMA copies that out");

ABSL_FLAG(bool, cuda_skinny_matmul, true,
          "serve: on the GPU, linear layers of up to 16 rows (decode steps) run on strata's skinny tensor-core "
          "kernel; false: cuBLAS for every product");

ABSL_FLAG(bool, cuda_tune_matmuls, true,
          "serve: on the GPU, decode steps' cuBLAS products (17+ sequences) run the fastest of cuBLAS's default and "
          "cublasLt's candidates, timed once per batch size; false: cuBLAS's default");

namespace strata::server::cli {

std::string TargetFromFlags() {
  std::string target = absl::GetFlag(FLAGS_target);
  if (target.empty()) target = "127.0.0.1:" + std::to_string(absl::GetFlag(FLAGS_port));
  return target;
}

engine::ServedModelOptions ServedModelFromFlags() {
  engine::ServedModelOptions o;
  o.model = absl::GetFlag(FLAGS_model);
  o.backend.device = absl::GetFlag(FLAGS_device);
  o.backend.cuda.kv_memory_fraction = absl::GetFlag(FLAGS_kv_memory_fraction);
  o.backend.cuda.share_prefixes = absl::GetFlag(FLAGS_cuda_share_prefixes);
  o.backend.cuda.relay_attention = absl::GetFlag(FLAGS_cuda_relay_attention);
  o.backend.cuda.relay_beside_min_tokens = absl::GetFlag(FLAGS_cuda_relay_beside_min_tokens);
  o.backend.cuda.relay_chained_min_tokens = absl::GetFlag(FLAGS_cuda_relay_chained_min_tokens);
  o.backend.cuda.prefill_key_splits = absl::GetFlag(FLAGS_cuda_prefill_key_splits);
  o.backend.cuda.split_uneven_rows = absl::GetFlag(FLAGS_cuda_split_uneven_rows);
  o.backend.cuda.decode_kernel = absl::GetFlag(FLAGS_cuda_decode_kernel);
  o.backend.cuda.kv_read_buffer_layers = absl::GetFlag(FLAGS_cuda_kv_read_buffer_layers);
  o.backend.cuda.kv_read_group_tokens = absl::GetFlag(FLAGS_cuda_kv_read_group_tokens);
  o.backend.cuda.kv_read_copy_bytes = absl::GetFlag(FLAGS_cuda_kv_read_copy_bytes);
  o.backend.cuda.kv_save_direct_blocks = absl::GetFlag(FLAGS_cuda_kv_save_direct_blocks);
  o.backend.cuda.skinny_matmul = absl::GetFlag(FLAGS_cuda_skinny_matmul);
  o.backend.cuda.tune_matmuls = absl::GetFlag(FLAGS_cuda_tune_matmuls);
  return o;
}

}  // namespace strata::server::cli
