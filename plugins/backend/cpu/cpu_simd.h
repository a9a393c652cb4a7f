/* What the register-tile GEMM kernels (cpu_gemm_small.c, cpu_gemm_linear.c) take per ISA,
 * in their macros' order after NAME, R and NV: target, vector type, lanes, then zero,
 * load, broadcast, FMA, multiply, add and store. CPU_TILE(KERNEL, NAME, R, NV, ISA)
 * instantiates KERNEL with one ISA's list. */
#ifndef MPX_CPU_SIMD_H
#define MPX_CPU_SIMD_H

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define CPU_ISA_AVX512 "avx512f", __m512, 16, _mm512_setzero_ps, _mm512_loadu_ps, _mm512_set1_ps, _mm512_fmadd_ps, \
                       _mm512_mul_ps, _mm512_add_ps, _mm512_storeu_ps
#define CPU_ISA_AVX2 "avx2,fma", __m256, 8, _mm256_setzero_ps, _mm256_loadu_ps, _mm256_set1_ps, _mm256_fmadd_ps, \
                     _mm256_mul_ps, _mm256_add_ps, _mm256_storeu_ps
/* The ISA list is expanded into its eleven arguments before KERNEL sees them. */
#define CPU_TILE_(KERNEL, ...) KERNEL(__VA_ARGS__)
#define CPU_TILE(KERNEL, NAME, R, NV, ISA) CPU_TILE_(KERNEL, NAME, R, NV, ISA)
#endif

#endif
