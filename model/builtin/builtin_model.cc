#include "model/builtin/builtin_model.h"

// The files' bytes, placed in .rodata by the assembler. STRATA_BUILTIN_DIR is
// the source directory; STRATA_BUILTIN_SHA256 (the files' hash, set by CMake)
// is only here so that a new model.safetensors changes this file's compile
// line: ccache hashes the preprocessed source, which .incbin's bytes are not
// part of.
#ifndef STRATA_BUILTIN_DIR
#error "STRATA_BUILTIN_DIR must name model/builtin (set by model/CMakeLists.txt)"
#endif
static_assert(sizeof(STRATA_BUILTIN_SHA256) > 1, "STRATA_BUILTIN_SHA256 must be set by CMake");

asm(".pushsection .rodata\n"
    ".balign 64\n"
    "strata_builtin_safetensors_begin:\n"
    ".incbin \"" STRATA_BUILTIN_DIR
    "/model.safetensors\"\n"
    "strata_builtin_safetensors_end:\n"
    ".balign 8\n"
    "strata_builtin_config_begin:\n"
    ".incbin \"" STRATA_BUILTIN_DIR
    "/config.json\"\n"
    "strata_builtin_config_end:\n"
    ".popsection\n");

extern "C" {
extern const std::byte strata_builtin_safetensors_begin[];
extern const std::byte strata_builtin_safetensors_end[];
extern const char strata_builtin_config_begin[];
extern const char strata_builtin_config_end[];
}

namespace strata::model {

absl::string_view BuiltinConfigJson() {
  return absl::string_view(strata_builtin_config_begin,
                           static_cast<size_t>(strata_builtin_config_end - strata_builtin_config_begin));
}

absl::Span<const std::byte> BuiltinSafetensors() {
  return absl::Span<const std::byte>(
      strata_builtin_safetensors_begin,
      static_cast<size_t>(strata_builtin_safetensors_end - strata_builtin_safetensors_begin));
}

absl::StatusOr<ModelWeights> BuiltinWeights() {
  return ModelWeights::FromMemory(BuiltinConfigJson(), BuiltinSafetensors(), "the built-in model");
}

}  // namespace strata::model
