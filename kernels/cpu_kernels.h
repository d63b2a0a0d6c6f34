// fp32 CPU kernels: the specification every other implementation (CUDA, bf16) is checked
// against, and the kernels the CPU engine runs.
//
// Determinism contract. Every output element is computed from its own inputs only, by the
// same sequence of IEEE float operations whatever else is in the call: the number of rows or
// queries, the row's index, how a run of queries is split across calls. So a token's K/V and
// logits computed during decode (one row at a time) are bit-identical to the same token
// computed inside a large prefill, and cached and recomputed answers agree token for token.
// Concretely:
//   - A dot product over n elements (MatMulWT, the scores of Attention) keeps 16 partial
//     sums: lane l accumulates x[k]*w[k] for k = l, l+16, ... below n rounded down to 16, in
//     increasing k, as a rounded multiply followed by a rounded add (never fused). The lanes
//     are reduced pairwise, lane l += lane l+8, then l += l+4, l += l+2, l += l+1, and the
//     remaining n % 16 products are added one at a time in increasing k.
//   - RmsNorm's sum of squares uses the same pattern with w = x.
//   - Attention sums over keys in increasing key order (see Attention).
// The library is compiled with -ffp-contract=off; the vector width a CPU offers changes the
// speed only, never the result (exp, log, sin and cos come from the C library: results are
// the same bits across machines that share it). No function here allocates per element, takes locks or keeps
// state: all are safe to call from several threads on disjoint outputs.
//
// Preconditions (violating one is undefined behaviour; these are hot-path kernels with no
// error channel): pointers are non-null where a value is read or written, sizes are >= 0,
// buffers hold the sizes stated, and outputs do not overlap inputs except where stated.
#ifndef STRATA_KERNELS_CPU_KERNELS_H_
#define STRATA_KERNELS_CPU_KERNELS_H_

#include <cstdint>
#include <vector>

namespace strata::kernels {

// Root-mean-square layer norm of each row:
//   y[r][i] = (x[r][i] * (1 / sqrt(mean_i(x[r][i]^2) + eps))) * weight[i]
// x and y are [rows][dim]; weight is [dim]. x and y may be the same buffer.
void RmsNorm(const float* x, const float* weight, float* y, int rows, int dim, float eps);

// The residual add fused with the next RmsNorm: residual += x (elementwise, [rows][dim]),
// then y = RmsNorm(residual). y may alias x; neither may alias residual.
void AddRmsNorm(const float* x, float* residual, const float* weight, float* y, int rows, int dim, float eps);

// out[r][j] = dot(x[r], w[j]) + (bias ? bias[j] : 0)
// x is [rows][in_dim], w is [out_dim][in_dim] row-major (the Hugging Face Linear layout),
// bias is [out_dim] or null, out is [rows][out_dim] and must not overlap x, w or bias.
// out[r][j] depends only on x[r], w[j] and bias[j] (see the determinism contract).
void MatMulWT(const float* x, const float* w, const float* bias, float* out, int rows, int in_dim,
              int out_dim);

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

// out[i] = silu(gate[i]) * up[i], silu(g) = g / (1 + exp(-g)). out may be gate or up.
void SwiGlu(const float* gate, const float* up, float* out, int64_t n);

// out[r] = table[ids[r]]: copies rows of dim floats. Every id must be a valid row of table.
void Embed(const float* table, const int32_t* ids, int rows, int dim, float* out);

// Causal grouped-query attention of a run of new queries against one sequence's contiguous
// keys and values. Query head h reads KV head h / (num_heads / num_kv_heads); num_heads must
// be a positive multiple of num_kv_heads.
struct AttentionParams {
  const float* q;  // [num_queries][num_heads][head_dim]
  const float* k;  // key row t at k + t * kv_row_stride, laid [num_kv_heads][head_dim]
  const float* v;  // value rows, same layout and stride as k
  float* out;      // [num_queries][num_heads][head_dim]; must not overlap q, k or v
  float* lse;      // null, or [num_queries][num_heads]: natural-log log-sum-exp of the
                   // scaled scores of the keys the query saw
  int num_queries, num_heads, num_kv_heads, head_dim;
  int64_t kv_row_stride;  // floats between consecutive key (and value) rows
  int first_query_pos;    // >= 0; query i sits at position first_query_pos + i and sees
                          // keys [0, first_query_pos + i]
  float scale;            // multiplies each score; usually 1/sqrt(head_dim)
};

// For each query i and head h, with keys t in [0, first_query_pos + i]:
//   s_t = dot(q, k_t) * scale          (dot in the 16-lane pattern above)
//   m = max_t s_t; e_t = exp(s_t - m); sum = sum_t e_t (in increasing t)
//   out[d] = (sum_t e_t * v_t[d], in increasing t) / sum;   lse = m + log(sum)
// The result for a query depends only on its own q, its position and the keys and values it
// sees, so queries may be computed together or in any split (advancing first_query_pos)
// with bit-identical results. Allocates one scratch buffer per call.
void Attention(const AttentionParams& p);

// Merges two partial attentions over disjoint key sets of the same queries (FlashInfer's
// merge_state). o1, o2 and o are [rows][heads][head_dim]; lse1, lse2 and lse are
// [rows][heads]. With m = max(lse1, lse2), a1 = exp(lse1 - m), a2 = exp(lse2 - m):
//   o = (o1*a1 + o2*a2) / (a1 + a2);   lse = m + log(a1 + a2)
// i.e. o = a*o1 + (1-a)*o2 with a = 1/(1 + exp(lse2 - lse1)). A part with lse = -inf is an
// empty part; if both are empty, o = 0 and lse = -inf. o and lse may alias o1/lse1 or
// o2/lse2 (same offsets).
void MergeAttentionStates(const float* o1, const float* lse1, const float* o2, const float* lse2,
                          float* o, float* lse, int rows, int heads, int head_dim);

// A paged KV pool (FlashInfer's NHD layout, bf16 stored as uint16_t): page p holds
// page_size tokens, token slot i of page p at (p * page_size + i) * kv_heads * head_dim,
// laid [kv_heads][head_dim]; k_pages and v_pages share the layout. Sequence b owns pages
// indices[indptr[b] .. indptr[b+1]) in order; its last page holds last_page_len[b] tokens
// (1..page_size), every other page is full. K is stored rotated (RoPE applied).
struct PagedKv {
  const uint16_t* k_pages;
  const uint16_t* v_pages;
  int page_size, kv_heads, head_dim;
  const int32_t* indptr;         // [batch + 1]
  const int32_t* indices;        // [indptr[batch]]
  const int32_t* last_page_len;  // [batch]
};

// bf16 <-> fp32 (bf16 stored as uint16_t): widening is exact; narrowing rounds to nearest,
// ties to even (NaN stays NaN).
float Bf16ToFloat(uint16_t v);
uint16_t FloatToBf16(float f);

// Places n tokens' KV into a paged pool in one pass: token i's K row k_raw[i]
// ([kv_heads][head_dim] fp32, before RoPE, as the session cache stores it) is rotated for
// positions[i] exactly as ApplyRope with inv_freq does, then stored bf16 with its V row
// v[i] at pool slot slots[i] (page * page_size + offset; rows of kv_heads * head_dim).
void PlaceKvPaged(const float* k_raw, const float* v, const int32_t* positions, const int64_t* slots, int n,
                  int kv_heads, int head_dim, const float* inv_freq, uint16_t* k_pages, uint16_t* v_pages);

// Tokens of sequence b in a PagedKv.
int64_t PagedSequenceLength(const PagedKv& kv, int b);

// Decode attention over a paged pool: one query per sequence, q [batch][num_heads][head_dim]
// (fp32, rotated), against every token of its sequence; out [batch][num_heads][head_dim],
// lse [batch][num_heads] (may be null). The specification: the sequence's K and V widened
// to fp32 and gathered into contiguous rows, then Attention() with the query at the last
// position.
void PagedDecodeAttention(const float* q, const PagedKv& kv, int batch, int num_heads, float scale, float* out,
                          float* lse);

// Prefill attention over a paged pool: the new tokens of sequence b are query rows
// [qo_indptr[b], qo_indptr[b+1]) of q ([rows][num_heads][head_dim]), the last tokens of the
// sequence (their KV already in the pool); each sees the sequence's tokens up to its own
// position (causal). out and lse as PagedDecodeAttention. Specification: gather, then
// Attention() with first_query_pos = length - new tokens.
void PagedPrefillAttention(const float* q, const PagedKv& kv, const int32_t* qo_indptr, int batch, int num_heads,
                           float scale, float* out, float* lse);

// Picks the next token from logits[vocab] (finite, or -inf for excluded tokens; at least one
// finite). temperature <= 0: the argmax, lowest index on ties; u is ignored. Otherwise, in
// double precision, p = softmax(logits / temperature). With 0 < top_p < 1 the kept set is the
// smallest run of most probable tokens (ties to the lower index) whose mass >= top_p, in
// that order; otherwise every token is kept, in index order. The kept probabilities are
// renormalised and the first kept token whose cumulative probability exceeds u is returned
// (u in [0, 1); the last kept token if rounding leaves none).
int32_t SampleToken(const float* logits, int vocab, float temperature, float top_p, double u);

}  // namespace strata::kernels

#endif  // STRATA_KERNELS_CPU_KERNELS_H_
