// SafetensorsFile: a .safetensors file (Hugging Face's tensor format), memory-mapped or
// already in memory (the built-in model's weights are linked into the binary).
//
// Format: 8 bytes little-endian N, then N bytes of JSON mapping each tensor name to
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the
// header; an optional "__metadata__" entry is ignored), then the tensor bytes. Open()
// checks every entry (known dtype, offsets inside the file, size = product(shape) x
// element size) so a view handed out is always in bounds.
//
// Thread-safe after Open (read-only).
#ifndef STRATA_MODEL_SAFETENSORS_H_
#define STRATA_MODEL_SAFETENSORS_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace strata::model {

enum class DType { kF32, kF16, kBF16 };
const char* DTypeName(DType d);  // "F32", "F16", "BF16" (as in the file)
int DTypeBytes(DType d);

struct TensorView {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  absl::Span<const std::byte> bytes;  // into the mapping; valid while the file is open
  int64_t elements() const;
};

class SafetensorsFile {
 public:
  // NotFound when the file does not exist; InvalidArgument naming the file and the
  // problem when it is not a valid safetensors file (truncated header, bad JSON, an
  // unknown dtype, offsets outside the data, a size that does not match the shape).
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::string& path);
  // The same checks over bytes already in memory, which must outlive the result; `name`
  // stands for the path in messages.
  static absl::StatusOr<std::unique_ptr<SafetensorsFile>> FromMemory(absl::Span<const std::byte> bytes,
                                                                     const std::string& name);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  // Null when the file has no tensor of that name.
  const TensorView* Find(const std::string& name) const;
  const std::map<std::string, TensorView>& tensors() const { return tensors_; }

 private:
  SafetensorsFile() = default;
  // Reads the header and the tensor views over `bytes` (path_ set for messages).
  absl::Status Parse(absl::Span<const std::byte> bytes);
  std::string path_;
  void* map_ = nullptr;
  size_t map_bytes_ = 0;
  std::map<std::string, TensorView> tensors_;
};

// A tensor to write: fp32 values stored as `dtype` (F16/BF16 rounded to nearest even).
struct TensorToWrite {
  std::string name;
  std::vector<int64_t> shape;
  DType dtype = DType::kF32;
  absl::Span<const float> values;
};

// Writes a safetensors file (for tests and tools). InvalidArgument when a tensor's values
// do not match its shape; the errno's status when the file cannot be written.
absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors);

// Element conversions.
float Bf16ToFloat(uint16_t v);
float F16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);
uint16_t FloatToF16(float f);

}  // namespace strata::model

#endif  // STRATA_MODEL_SAFETENSORS_H_
