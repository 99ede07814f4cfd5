// The CBLAS GEMM entry points of OpenBLAS (third_party/openblas.BUILD), declared here so that only
// the runtime package is needed. TANDEM_HAS_BLAS is defined when the build links OpenBLAS; the
// sanitizer builds on clang's OpenMP runtime do not (OpenBLAS brings GCC's), and fall back to Eigen.
#pragma once

#ifdef TANDEM_HAS_BLAS
extern "C" {
enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112 };
void cblas_sgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha,
                 const float* a, int lda, const float* b, int ldb, float beta, float* c, int ldc);
void cblas_dgemm(CBLAS_ORDER order, CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha,
                 const double* a, int lda, const double* b, int ldb, double beta, double* c, int ldc);
// The kernel family OpenBLAS runs ("Haswell", "Cooperlake", ...): its own detection, or what
// OPENBLAS_CORETYPE forces.
char* openblas_get_corename(void);
}
#endif
