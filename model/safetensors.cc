#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "kernels/elementwise/bf16.h"
#include "nlohmann/json.hpp"

namespace strata::model {
namespace {

absl::Status ErrnoStatus(int err, const std::string& what) {
  std::string msg = absl::StrCat(what, ": ", std::strerror(err));
  if (err == ENOENT) return absl::NotFoundError(msg);
  if (err == EACCES || err == EPERM) return absl::PermissionDeniedError(msg);
  return absl::InternalError(msg);
}

bool ParseDType(const std::string& s, DType* d) {
  if (s == "F32") *d = DType::kF32;
  else if (s == "F16") *d = DType::kF16;
  else if (s == "BF16") *d = DType::kBF16;
  else return false;
  return true;
}

}  // namespace

const char* DTypeName(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
  }
  return "?";
}

int DTypeBytes(DType d) { return d == DType::kF32 ? 4 : 2; }

int64_t TensorView::elements() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus(errno, absl::StrCat("cannot open ", path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int err = errno;
    close(fd);
    return ErrnoStatus(err, absl::StrCat("cannot stat ", path));
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  f->map_bytes_ = static_cast<size_t>(st.st_size);
  if (f->map_bytes_ < 8) {
    close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path, ": shorter than the 8-byte header length"));
  }
  void* p = mmap(nullptr, f->map_bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  close(fd);
  if (p == MAP_FAILED) return ErrnoStatus(errno, absl::StrCat("cannot map ", path));
  f->map_ = p;
  absl::Status parsed = f->Parse(absl::Span<const std::byte>(static_cast<const std::byte*>(p), f->map_bytes_));
  if (!parsed.ok()) return parsed;
  return f;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::FromMemory(absl::Span<const std::byte> bytes,
                                                                             const std::string& name) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = name;
  absl::Status parsed = f->Parse(bytes);
  if (!parsed.ok()) return parsed;
  return f;
}

absl::Status SafetensorsFile::Parse(absl::Span<const std::byte> bytes) {
  const std::string& path = path_;
  auto bad = [&path](const std::string& why) { return absl::InvalidArgumentError(absl::StrCat(path, ": ", why)); };
  if (bytes.size() < 8) return bad("shorter than the 8-byte header length");
  const std::byte* base = bytes.data();
  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, base,
              8);  // little-endian on every platform strata builds for
  if (header_bytes > bytes.size() - 8) return bad("header length runs past the end of the file");
  const std::string header(reinterpret_cast<const char*>(base + 8), static_cast<size_t>(header_bytes));
  nlohmann::json j = nlohmann::json::parse(header, nullptr, false);
  if (j.is_discarded() || !j.is_object()) return bad("header is not a JSON object");
  const uint64_t data_begin = 8 + header_bytes;
  const uint64_t data_bytes = bytes.size() - data_begin;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") continue;
    const nlohmann::json& t = it.value();
    auto tensor_bad = [&](const std::string& why) { return bad(absl::StrCat("tensor ", it.key(), ": ", why)); };
    if (!t.is_object()) return tensor_bad("entry is not an object");
    TensorView v;
    auto dtype = t.find("dtype");
    if (dtype == t.end() || !dtype->is_string()) return tensor_bad("no dtype");
    if (!ParseDType(dtype->get<std::string>(), &v.dtype)) {
      return tensor_bad(absl::StrCat("dtype ", dtype->get<std::string>(), " is not supported (F32, F16, BF16 are)"));
    }
    auto shape = t.find("shape");
    if (shape == t.end() || !shape->is_array()) return tensor_bad("no shape");
    for (const auto& d : *shape) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0) return tensor_bad("shape holds a bad dimension");
      v.shape.push_back(d.get<int64_t>());
    }
    auto off = t.find("data_offsets");
    if (off == t.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return tensor_bad("data_offsets is not [begin, end]");
    }
    const uint64_t b = (*off)[0].get<uint64_t>(), e = (*off)[1].get<uint64_t>();
    if (b > e || e > data_bytes) return tensor_bad("data_offsets lie outside the file");
    if (static_cast<uint64_t>(v.elements()) * static_cast<uint64_t>(DTypeBytes(v.dtype)) != e - b) {
      return tensor_bad("byte size does not match shape and dtype");
    }
    v.bytes = absl::Span<const std::byte>(base + data_begin + b, static_cast<size_t>(e - b));
    tensors_.emplace(it.key(), std::move(v));
  }
  return absl::OkStatus();
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr) munmap(map_, map_bytes_);
}

const TensorView* SafetensorsFile::Find(const std::string& name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

float Bf16ToFloat(uint16_t v) { return kernels::Bf16ToFloat(v); }
uint16_t FloatToBf16(float f) { return kernels::FloatToBf16(f); }

float F16ToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const int exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ff;
  float out;
  if (exp == 0) {
    out = std::ldexp(static_cast<float>(mant), -24);  // zero or subnormal
  } else if (exp == 31) {
    out = mant == 0 ? INFINITY : NAN;
  } else {
    out = std::ldexp(static_cast<float>(mant | 0x400), exp - 25);
  }
  uint32_t bits;
  std::memcpy(&bits, &out, 4);
  bits |= sign;
  std::memcpy(&out, &bits, 4);
  return out;
}

uint16_t FloatToF16(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000);
  const float a = std::fabs(f);
  if (std::isnan(f)) return static_cast<uint16_t>(sign | 0x7e00);
  if (a >= 65520.0f) return static_cast<uint16_t>(sign | 0x7c00);  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {
    // Subnormal: units of 2^-24, rounded to nearest even.
    const float units = a * 16777216.0f;
    return static_cast<uint16_t>(sign | static_cast<uint16_t>(std::nearbyint(units)));
  }
  int e = 0;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits: mantissa in [1024, 2048).
  float scaled = std::nearbyint(m * 2048.0f);
  if (scaled >= 2048.0f) {
    scaled /= 2;
    ++e;
  }
  const int exp = e - 1 + 15;
  if (exp >= 31) return static_cast<uint16_t>(sign | 0x7c00);
  return static_cast<uint16_t>(sign | (exp << 10) | (static_cast<uint16_t>(scaled) & 0x3ff));
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<TensorToWrite>& tensors) {
  nlohmann::json header = nlohmann::json::object();
  uint64_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    if (n != static_cast<int64_t>(t.values.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", t.name, " has ", t.values.size(), " values for a shape of ", n));
    }
    const uint64_t bytes = static_cast<uint64_t>(n) * static_cast<uint64_t>(DTypeBytes(t.dtype));
    header[t.name] = {{"dtype", DTypeName(t.dtype)}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8,
              ' ');  // align the data to 8 bytes, as HF does
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return ErrnoStatus(errno, absl::StrCat("cannot write ", path));
  const uint64_t n = text.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const TensorToWrite& t : tensors) {
    if (t.dtype == DType::kF32) {
      out.write(reinterpret_cast<const char*>(t.values.data()), static_cast<std::streamsize>(t.values.size() * 4));
      continue;
    }
    std::vector<uint16_t> half(t.values.size());
    for (size_t i = 0; i < half.size(); ++i) {
      half[i] = t.dtype == DType::kBF16 ? FloatToBf16(t.values[i]) : FloatToF16(t.values[i]);
    }
    out.write(reinterpret_cast<const char*>(half.data()), static_cast<std::streamsize>(half.size() * 2));
  }
  out.flush();
  if (!out) return absl::DataLossError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace strata::model
