#include "kernels/gemm/cublas.h"

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "base/mutex.h"
#include "kernels/cuda_check.h"

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

namespace strata::kernels {

namespace internal {

namespace {

// cuBLAS is loaded with dlopen when the first product runs, not linked: cuBLASLt holds
// ~94 KB of static TLS, and a library linked at start puts its TLS in every thread's
// stack, so threads made with small stacks (Debian's civetweb, which serves /metrics,
// asks for 100 KB) fail to start with EINVAL. Loaded later, the TLS is allocated per
// thread on demand instead.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  // cublasGemmEx is overloaded in C++: the C signature, spelled out.
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = nullptr;
  decltype(&cublasGetStatusString) status_string = nullptr;
  std::string error;
  // cublasLt, for tuned shapes (its library is cuBLAS's own dependency). Null when absent:
  // products then run cublasGemmEx untuned.
  decltype(&cublasLtCreate) lt_create = nullptr;
  decltype(&cublasLtMatmulDescCreate) lt_desc_create = nullptr;
  decltype(&cublasLtMatmulDescSetAttribute) lt_desc_set = nullptr;
  decltype(&cublasLtMatrixLayoutCreate) lt_layout_create = nullptr;
  decltype(&cublasLtMatmulPreferenceCreate) lt_pref_create = nullptr;
  decltype(&cublasLtMatmulPreferenceSetAttribute) lt_pref_set = nullptr;
  decltype(&cublasLtMatmulPreferenceDestroy) lt_pref_destroy = nullptr;
  decltype(&cublasLtMatmulAlgoGetHeuristic) lt_heuristic = nullptr;
  decltype(&cublasLtMatmul) lt_matmul = nullptr;
  bool has_lt() const {
    return lt_create && lt_desc_create && lt_desc_set && lt_layout_create && lt_pref_create && lt_pref_set &&
           lt_pref_destroy && lt_heuristic && lt_matmul;
  }
};

template <typename F>
void Bind(void* lib, const char* name, F* f) {
  *f = reinterpret_cast<F>(dlsym(lib, name));
}

const Cublas& LoadCublas() {
  static const Cublas* cublas = [] {
    auto* c = new Cublas();
    void* lib = nullptr;
    for (const char* name : {"libcublas.so." STRATA_CUBLAS_SOVERSION, "libcublas.so"}) {
      if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lib == nullptr) {
      const char* why = dlerror();
      c->error = absl::StrCat("cannot load cuBLAS (libcublas.so." STRATA_CUBLAS_SOVERSION "): ", why ? why : "?");
      return c;
    }
    Bind(lib, "cublasCreate_v2", &c->create);
    Bind(lib, "cublasSetStream_v2", &c->set_stream);
    Bind(lib, "cublasGemmEx", &c->gemm_ex);
    Bind(lib, "cublasGetStatusString", &c->status_string);
    if (!c->create || !c->set_stream || !c->gemm_ex || !c->status_string) {
      c->error = "the cuBLAS library lacks cublasCreate_v2, cublasSetStream_v2, cublasGemmEx or cublasGetStatusString";
      return c;
    }
    void* lt = nullptr;
    for (const char* name : {"libcublasLt.so." STRATA_CUBLAS_SOVERSION, "libcublasLt.so"}) {
      if ((lt = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
    }
    if (lt != nullptr) {
      Bind(lt, "cublasLtCreate", &c->lt_create);
      Bind(lt, "cublasLtMatmulDescCreate", &c->lt_desc_create);
      Bind(lt, "cublasLtMatmulDescSetAttribute", &c->lt_desc_set);
      Bind(lt, "cublasLtMatrixLayoutCreate", &c->lt_layout_create);
      Bind(lt, "cublasLtMatmulPreferenceCreate", &c->lt_pref_create);
      Bind(lt, "cublasLtMatmulPreferenceSetAttribute", &c->lt_pref_set);
      Bind(lt, "cublasLtMatmulPreferenceDestroy", &c->lt_pref_destroy);
      Bind(lt, "cublasLtMatmulAlgoGetHeuristic", &c->lt_heuristic);
      Bind(lt, "cublasLtMatmul", &c->lt_matmul);
    }
    return c;
  }();
  return *cublas;
}

absl::StatusOr<bool> Capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capturing));
  return capturing != cudaStreamCaptureStatusNone;
}

// Making a handle allocates device memory, which a stream being captured into a graph
// cannot do (it would invalidate the capture): refused there, with a clear status.
absl::Status RefuseUnderCapture(cudaStream_t stream, const char* what) {
  absl::StatusOr<bool> capturing = Capturing(stream);
  if (!capturing.ok() || !*capturing) return capturing.status();
  return absl::FailedPreconditionError(
      absl::StrCat("this thread's first ", what, " product cannot be inside a CUDA graph capture (run one before)"));
}

// One handle per thread (cuBLAS handles are not meant to be shared across threads).
absl::StatusOr<cublasHandle_t> ThreadHandle(cudaStream_t stream) {
  const Cublas& cublas = LoadCublas();
  if (!cublas.error.empty()) return absl::FailedPreconditionError(cublas.error);
  thread_local cublasHandle_t handle = nullptr;
  if (handle == nullptr) {
    if (absl::Status s = RefuseUnderCapture(stream, "cuBLAS"); !s.ok()) return s;
    const cublasStatus_t created = cublas.create(&handle);
    if (created != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return absl::InternalError(absl::StrCat("cublasCreate: ", cublas.status_string(created)));
    }
  }
  return handle;
}

absl::StatusOr<cublasLtHandle_t> ThreadLtHandle(cudaStream_t stream) {
  const Cublas& cublas = LoadCublas();
  thread_local cublasLtHandle_t handle = nullptr;
  if (handle == nullptr) {
    if (absl::Status s = RefuseUnderCapture(stream, "cublasLt"); !s.ok()) return s;
    if (const cublasStatus_t created = cublas.lt_create(&handle); created != CUBLAS_STATUS_SUCCESS) {
      handle = nullptr;
      return absl::InternalError(absl::StrCat("cublasLtCreate: ", cublas.status_string(created)));
    }
  }
  return handle;
}

absl::Status CublasError(const char* call, const MatMulBf16Params& p, cublasStatus_t s) {
  return absl::InternalError(absl::StrCat(call, " (bf16, ", p.rows, "x", p.in_dim, "x", p.out_dim,
                                          "): ", LoadCublas().status_string(s)));
}

// A shape's kept choice: cublasGemmEx's default, or a cublasLt algorithm with the
// descriptors it was chosen for (made once, kept for the process: a few hundred bytes).
struct Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  MatMulTuning report{};  // report.cublaslt: the algorithm runs, else the default
};

using ShapeKey = std::tuple<int, int, int, int>;  // device, rows, in_dim, out_dim

struct Plans {
  Mutex mu;
  std::map<ShapeKey, std::unique_ptr<Plan>> by_shape ABSL_GUARDED_BY(mu);
};

Plans& ProcessPlans() {
  static Plans* plans = new Plans();
  return *plans;
}

const Plan* FindPlan(const ShapeKey& key) {
  Plans& plans = ProcessPlans();
  MutexLock lock(&plans.mu);
  auto it = plans.by_shape.find(key);
  return it == plans.by_shape.end() ? nullptr : it->second.get();
}

// Row-major out[rows][out] is column-major (out x rows): out = W^T(col) * X(col), where
// row-major w[out][in] is column-major (in x out) and x[rows][in] is (in x rows).
absl::Status RunDefault(cublasHandle_t handle, const MatMulBf16Params& p) {
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t s = LoadCublas().gemm_ex(handle, CUBLAS_OP_T, CUBLAS_OP_N, p.out_dim, p.rows, p.in_dim, &one,
                                                p.w, CUDA_R_16BF, p.in_dim, p.x, CUDA_R_16BF, p.in_dim, &zero, p.out,
                                                CUDA_R_32F, p.out_dim, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
  return s == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : CublasError("cublasGemmEx", p, s);
}

absl::Status RunLt(cublasLtHandle_t handle, const Plan& plan, const cublasLtMatmulAlgo_t& algo,
                   const MatMulBf16Params& p, cudaStream_t stream) {
  const float one = 1.0f, zero = 0.0f;
  const cublasStatus_t s = LoadCublas().lt_matmul(handle, plan.desc, &one, p.w, plan.a, p.x, plan.b, &zero, p.out,
                                                  plan.c, p.out, plan.c, &algo, nullptr, 0, stream);
  return s == CUBLAS_STATUS_SUCCESS ? absl::OkStatus() : CublasError("cublasLtMatmul", p, s);
}

// The descriptors of the product and cublasLt's candidates for it (no workspace, no split-K
// reduction: each output element is summed by one thread block, the same way every call).
absl::Status LtCandidates(const Cublas& cublas, cublasLtHandle_t handle, const MatMulBf16Params& p, Plan* plan,
                          std::vector<cublasLtMatmulAlgo_t>* algos) {
  cublasStatus_t s = cublas.lt_desc_create(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  const cublasOperation_t transposed = CUBLAS_OP_T, plain = CUBLAS_OP_N;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublas.lt_desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transposed, sizeof(transposed));
  }
  if (s == CUBLAS_STATUS_SUCCESS) s = cublas.lt_desc_set(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &plain, sizeof(plain));
  if (s == CUBLAS_STATUS_SUCCESS) s = cublas.lt_layout_create(&plan->a, CUDA_R_16BF, p.in_dim, p.out_dim, p.in_dim);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublas.lt_layout_create(&plan->b, CUDA_R_16BF, p.in_dim, p.rows, p.in_dim);
  if (s == CUBLAS_STATUS_SUCCESS) s = cublas.lt_layout_create(&plan->c, CUDA_R_32F, p.out_dim, p.rows, p.out_dim);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLt descriptors", p, s);
  cublasLtMatmulPreference_t pref = nullptr;
  if (s = cublas.lt_pref_create(&pref); s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLt preference", p, s);
  const size_t no_workspace = 0;
  const uint32_t no_reduction = CUBLASLT_REDUCTION_SCHEME_NONE;
  s = cublas.lt_pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &no_workspace, sizeof(no_workspace));
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublas.lt_pref_set(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &no_reduction, sizeof(no_reduction));
  }
  constexpr int kCandidates = 8;
  cublasLtMatmulHeuristicResult_t found[kCandidates] = {};
  int count = 0;
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublas.lt_heuristic(handle, plan->desc, plan->a, plan->b, plan->c, plan->c, pref, kCandidates, found, &count);
  }
  cublas.lt_pref_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS) return CublasError("cublasLtMatmulAlgoGetHeuristic", p, s);
  for (int i = 0; i < count; ++i) {
    if (found[i].state == CUBLAS_STATUS_SUCCESS) algos->push_back(found[i].algo);
  }
  return absl::OkStatus();
}

// Times the default and the candidates on the caller's operands (interleaved rounds, the
// median of each), and records the kept choice for the shape. The stream is idle when it
// returns; `out` holds some candidate's result (the caller runs the kept one after).
absl::Status Tune(cublasHandle_t handle, const MatMulBf16Params& p, const ShapeKey& key, cudaStream_t stream) {
  const Cublas& cublas = LoadCublas();
  auto plan = std::make_unique<Plan>();
  plan->report = MatMulTuning{std::get<0>(key), p.rows, p.in_dim, p.out_dim, false, 0, 0, 0};
  std::vector<cublasLtMatmulAlgo_t> algos;
  absl::StatusOr<cublasLtHandle_t> lt = absl::FailedPreconditionError("no cublasLt");
  if (cublas.has_lt()) {
    lt = ThreadLtHandle(stream);
    if (lt.ok()) {
      if (absl::Status s = LtCandidates(cublas, *lt, p, plan.get(), &algos); !s.ok()) algos.clear();
    }
  }
  STRATA_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));  // the operands are ready
  cudaEvent_t start = nullptr, stop = nullptr;
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  STRATA_CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  // Candidate i (0: the default) once, in milliseconds.
  auto time_once = [&](size_t i) -> absl::StatusOr<float> {
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
    if (absl::Status s = i == 0 ? RunDefault(handle, p) : RunLt(*lt, *plan, algos[i - 1], p, stream); !s.ok()) {
      return s;
    }
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float ms = 0;
    STRATA_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
    return ms;
  };
  constexpr int kRounds = 7;
  const size_t n = algos.size() + 1;
  std::vector<std::vector<float>> times(n);
  absl::Status status = absl::OkStatus();
  for (int round = -1; round < kRounds && status.ok(); ++round) {  // round -1 warms each up
    for (size_t i = 0; i < n && status.ok(); ++i) {
      absl::StatusOr<float> ms = time_once(i);
      status = ms.status();
      if (ms.ok() && round >= 0) times[i].push_back(*ms);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  if (!status.ok()) return status;
  auto median = [](std::vector<float> v) {
    std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
    return static_cast<double>(v[v.size() / 2]);
  };
  const double default_us = 1e3 * median(times[0]);
  double best_us = default_us;
  size_t best = 0;
  for (size_t i = 1; i < n; ++i) {
    if (const double us = 1e3 * median(times[i]); us < best_us) {
      best_us = us;
      best = i;
    }
  }
  plan->report.default_us = default_us;
  plan->report.candidates = static_cast<int>(algos.size());
  if (best > 0 && best_us < default_us * (1.0 - kMatMulTuneMargin)) {
    plan->algo = algos[best - 1];
    plan->report.cublaslt = true;
    plan->report.chosen_us = best_us;
  } else {
    plan->report.chosen_us = default_us;
  }
  Plans& plans = ProcessPlans();
  MutexLock lock(&plans.mu);
  plans.by_shape.emplace(key, std::move(plan));  // another thread's, if it got there first, stays
  return absl::OkStatus();
}

}  // namespace

absl::Status CublasMatMulBf16(const MatMulBf16Params& p, cudaStream_t stream) {
  auto handle = ThreadHandle(stream);
  if (!handle.ok()) return handle.status();
  const Cublas& cublas = LoadCublas();
  if (cublasStatus_t s = cublas.set_stream(*handle, stream); s != CUBLAS_STATUS_SUCCESS) {
    return absl::InternalError(absl::StrCat("cublasSetStream: ", cublas.status_string(s)));
  }
  if (!p.tune) return RunDefault(*handle, p);
  int device = 0;
  STRATA_CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const ShapeKey key{device, p.rows, p.in_dim, p.out_dim};
  const Plan* plan = FindPlan(key);
  if (plan == nullptr) {
    absl::StatusOr<bool> capturing = Capturing(stream);
    if (!capturing.ok()) return capturing.status();
    if (!*capturing) {
      if (absl::Status s = Tune(*handle, p, key, stream); !s.ok()) return s;
      plan = FindPlan(key);
    }
  }
  if (plan != nullptr && plan->report.cublaslt) {
    auto lt = ThreadLtHandle(stream);
    if (!lt.ok()) return lt.status();
    return RunLt(*lt, *plan, plan->algo, p, stream);
  }
  return RunDefault(*handle, p);
}

}  // namespace internal

std::vector<MatMulTuning> TunedMatMuls() {
  std::vector<MatMulTuning> out;
  internal::Plans& plans = internal::ProcessPlans();
  MutexLock lock(&plans.mu);
  for (const auto& [key, plan] : plans.by_shape) out.push_back(plan->report);
  return out;
}

}  // namespace strata::kernels
