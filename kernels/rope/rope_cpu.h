// CPU rotary position embedding (the specification of rope/rope.h's device kernels, and what
// the CPU engine runs) and the rotary frequencies both backends compute once per model.
// Determinism contract and preconditions: kernels/cpu_dot.h.
#ifndef STRATA_KERNELS_ROPE_ROPE_CPU_H_
#define STRATA_KERNELS_ROPE_ROPE_CPU_H_

#include <cstdint>
#include <vector>

namespace strata::kernels {

// Rotary position embedding, in place, Hugging Face Llama "rotate_half" convention. x is
// [rows][heads][head_dim] with head_dim even; positions is [rows]; inv_freq is [head_dim/2]
// (see RopeInvFreq). For each row r, head h and i < half = head_dim/2:
//   angle = float(positions[r]) * inv_freq[i]        (float multiply)
//   a = x[i], b = x[i + half]
//   x[i] = a*cos(angle) - b*sin(angle);  x[i + half] = b*cos(angle) + a*sin(angle)
void ApplyRope(float* x, const int32_t* positions, int rows, int heads, int head_dim,
               const float* inv_freq);

// Frequency scaling of the Hugging Face `rope_type: "llama3"` rule; llama3 = false means no
// scaling ("default" rope). Field names follow the model's config.json rope_scaling block
// (original_max_position is original_max_position_embeddings).
struct RopeScaling {
  bool llama3 = false;
  float factor = 8;
  float low_freq_factor = 1;
  float high_freq_factor = 4;
  int original_max_position = 8192;
};

// Returns the head_dim/2 rotary inverse frequencies inv_freq[i] = 1 / theta^(2i/head_dim),
// computed in float like Hugging Face. With scaling.llama3, each is then rescaled by the HF
// llama3 rule: with wavelen = 2*pi/inv_freq,
//   wavelen < original_max_position / high_freq_factor: unchanged;
//   wavelen > original_max_position / low_freq_factor:  inv_freq / factor;
//   otherwise, with s = (original_max_position / wavelen - low_freq_factor) /
//                       (high_freq_factor - low_freq_factor):
//     (1 - s) * inv_freq / factor + s * inv_freq.
// head_dim must be even and positive.
std::vector<float> RopeInvFreq(int head_dim, float theta, const RopeScaling& scaling);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_ROPE_ROPE_CPU_H_
