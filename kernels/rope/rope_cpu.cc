#include "kernels/rope/rope_cpu.h"

#include <cstddef>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <vector>

namespace strata::kernels {

void ApplyRope(float* x, const int32_t* positions, int rows, int heads, int head_dim,
               const float* inv_freq) {
  const int half = head_dim / 2;
  std::vector<float> cos_sin(2 * static_cast<size_t>(half));
  float* cs = cos_sin.data();
  float* sn = cs + half;
  for (int r = 0; r < rows; ++r) {
    const float pos = static_cast<float>(positions[r]);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[i];
      cs[i] = std::cos(angle);
      sn[i] = std::sin(angle);
    }
    for (int h = 0; h < heads; ++h) {
      float* xh = x + (static_cast<int64_t>(r) * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = xh[i], b = xh[i + half];
        xh[i] = a * cs[i] - b * sn[i];
        xh[i + half] = b * cs[i] + a * sn[i];
      }
    }
  }
}

std::vector<float> RopeInvFreq(int head_dim, float theta, const RopeScaling& scaling) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    inv_freq[i] = 1.0f / std::pow(theta, exponent);
  }
  if (!scaling.llama3) return inv_freq;
  const float old_len = static_cast<float>(scaling.original_max_position);
  const float low_freq_wavelen = old_len / scaling.low_freq_factor;
  const float high_freq_wavelen = old_len / scaling.high_freq_factor;
  for (float& f : inv_freq) {
    const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
    if (wavelen < high_freq_wavelen) continue;
    if (wavelen > low_freq_wavelen) {
      f = f / scaling.factor;
      continue;
    }
    const float smooth = (old_len / wavelen - scaling.low_freq_factor) /
                         (scaling.high_freq_factor - scaling.low_freq_factor);
    f = (1 - smooth) * f / scaling.factor + smooth * f;
  }
  return inv_freq;
}

}  // namespace strata::kernels
