/* The attention GEMMs: batched products whose inner or outer size is a head's (K or N at
 * most CPU_SMALL_MAX: QK^T and dP = dctx V^T have K = head size; PV, dV, dQ and dK have
 * N = head size). OpenBLAS's kernels reach ~60 % of their large-GEMM rate on these
 * shapes; this one register-blocks them in AVX-512 (or AVX2) registers.
 *
 * The arithmetic, exactly (test_cpu_ops checks it bit for bit against a scalar loop):
 *   acc = +0; for l = 0 .. K-1 in order: acc = fmaf(opA[i, l], opB[l, j], acc);
 *   C[i, j] = alpha * acc                      (beta = 0: C is not read)
 *   C[i, j] = alpha * acc + beta * C[i, j]     (otherwise; each product and the sum rounded)
 * One FMA chain per element, whatever the vector width, the blocking or the thread count:
 * the AVX-512 and AVX2 paths give the same bits, as does the loop above on any CPU with
 * neither (where OpenBLAS keeps these shapes, and the bits are OpenBLAS's).
 *
 * op(B) is packed into a zero-padded K x Np panel (Np a multiple of a tile's width), so
 * every tile loads whole vectors; rows past M repeat row M-1 and are not stored. */
#include "cpu_internal.h"
#include "cpu_simd.h"

#include <stdlib.h>
#include <string.h>

/* The tile loop asks for op(B)'s row this many K steps ahead: with K = seq (PV and the
 * gradients) the panel streams from L2. A prefetch changes no result. */
#define SMALL_PREFETCH_AHEAD 8

/* C = alpha op(A) op(B) + beta C over fp32 operands, one batch item. */
typedef struct small_gemm {
    int m, n, k;
    float alpha, beta;
    const float *a;
    size_t a_rs, a_ks;   /* opA[i, l] = a[i a_rs + l a_ks] */
    const float *bp;     /* the packed panel: opB[l, j] = bp[l np + j], zero for j >= n */
    int np;
    float *c;
    int ldc;
} small_gemm;

/* Stores a tile's accumulators t[r][0 .. w) (rows i0.., columns j0..) with the
 * epilogue, element by element: the partial tiles at the edges of C. */
static void store_partial(const small_gemm *s, int i0, int j0, int rows, int w, const float *t, int tw)
{
    for (int r = 0; r < rows && i0 + r < s->m; r++)
        for (int j = 0; j < w && j0 + j < s->n; j++) {
            float *c = &s->c[(size_t)(i0 + r) * (size_t)s->ldc + (size_t)(j0 + j)];
            float v = s->alpha * t[r * tw + j];
            *c = s->beta == 0.0f ? v : v + s->beta * *c;
        }
}

/* One kernel per ISA and tile shape: R rows x NV vectors of W lanes, every index a
 * compile-time constant so the R x NV accumulators stay in registers. */
#define SMALL_TILE(NAME, R, NV, TARGET, VEC, W, ZERO, LOAD, SET1, FMA, MUL, ADD, STORE)                      \
    __attribute__((target(TARGET))) static void NAME(const small_gemm *s)                                      \
    {                                                                                                          \
        const int tw = (NV) * (W);                                                                             \
        for (int j0 = 0; j0 < s->n; j0 += tw)                                                                  \
            for (int i0 = 0; i0 < s->m; i0 += (R)) {                                                           \
                const float *arow[R];                                                                          \
                for (int r = 0; r < (R); r++)                                                                  \
                    arow[r] = s->a + (size_t)(i0 + r < s->m ? i0 + r : s->m - 1) * s->a_rs;                    \
                VEC acc[R][NV];                                                                                \
                for (int r = 0; r < (R); r++)                                                                  \
                    for (int v = 0; v < (NV); v++) acc[r][v] = ZERO();                                         \
                const float *b = s->bp + j0;                                                                   \
                for (int l = 0; l < s->k; l++, b += s->np) {                                                   \
                    VEC bv[NV];                                                                                \
                    for (int v = 0; v < (NV); v++)                                                             \
                        __builtin_prefetch(b + (size_t)SMALL_PREFETCH_AHEAD * (size_t)s->np + v * (W), 0, 3);   \
                    for (int v = 0; v < (NV); v++) bv[v] = LOAD(b + v * (W));                                  \
                    for (int r = 0; r < (R); r++) {                                                            \
                        VEC av = SET1(arow[r][(size_t)l * s->a_ks]);                                           \
                        for (int v = 0; v < (NV); v++) acc[r][v] = FMA(av, bv[v], acc[r][v]);                  \
                    }                                                                                          \
                }                                                                                              \
                if (i0 + (R) <= s->m && j0 + tw <= s->n) {                                                     \
                    VEC al = SET1(s->alpha), be = SET1(s->beta);                                               \
                    for (int r = 0; r < (R); r++) {                                                            \
                        float *c = s->c + (size_t)(i0 + r) * (size_t)s->ldc + (size_t)j0;                     \
                        for (int v = 0; v < (NV); v++) {                                                       \
                            VEC x = MUL(al, acc[r][v]);                                                        \
                            if (s->beta != 0.0f) x = ADD(x, MUL(be, LOAD(c + v * (W))));                       \
                            STORE(c + v * (W), x);                                                             \
                        }                                                                                      \
                    }                                                                                          \
                } else {                                                                                       \
                    float t[(R) * (NV) * (W)];                                                                 \
                    for (int r = 0; r < (R); r++)                                                              \
                        for (int v = 0; v < (NV); v++) STORE(t + r * tw + v * (W), acc[r][v]);                 \
                    store_partial(s, i0, j0, R, tw, t, tw);                                                    \
                }                                                                                              \
            }                                                                                                  \
    }

#if defined(__x86_64__) || defined(__i386__)
CPU_TILE(SMALL_TILE, tile512_8x1, 8, 1, CPU_ISA_AVX512)
CPU_TILE(SMALL_TILE, tile512_12x2, 12, 2, CPU_ISA_AVX512)
CPU_TILE(SMALL_TILE, tile512_4x3, 4, 3, CPU_ISA_AVX512)
CPU_TILE(SMALL_TILE, tile512_6x4, 6, 4, CPU_ISA_AVX512)
CPU_TILE(SMALL_TILE, tile256_4x2, 4, 2, CPU_ISA_AVX2)
CPU_TILE(SMALL_TILE, tile256_3x4, 3, 4, CPU_ISA_AVX2)
#endif

int cpu_small_gemm_level(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 1;
#endif
    return 0;
}

int cpu_small_gemm_fits(const cpu_be *be, const mpx_gemm *g)
{
    return be->small_gemm > 0 && g->batch > 1 && g->k > 0 && (g->k <= CPU_SMALL_MAX || g->n <= CPU_SMALL_MAX);
}

/* The tile for this width and ISA, and its width in floats. */
typedef void (*tile_fn)(const small_gemm *s);
static tile_fn pick_tile(int level, int n, int *tw)
{
#if defined(__x86_64__) || defined(__i386__)
    if (level >= 2) {
        int nv = (n + 15) / 16;
        if (nv <= 1) return *tw = 16, tile512_8x1;
        if (nv == 2) return *tw = 32, tile512_12x2;
        if (nv == 3) return *tw = 48, tile512_4x3;
        return *tw = 64, tile512_6x4;
    }
    if (level == 1) {
        if (n <= 16) return *tw = 16, tile256_4x2;
        return *tw = 32, tile256_3x4;
    }
#endif
    (void)level; (void)n;
    *tw = 0;
    return NULL;
}

size_t cpu_small_gemm_panel_floats(const cpu_be *be, const mpx_gemm *g)
{
    int tw = 0;
    if (!pick_tile(be->small_gemm, g->n, &tw)) return 0;
    return (size_t)g->k * (size_t)((g->n + tw - 1) / tw * tw);
}

int cpu_small_gemm(const cpu_be *be, const mpx_gemm *g, const float *A, int lda, const float *B, int ldb,
                   float *C, int ldc, float *panel)
{
    int tw = 0;
    tile_fn tile = pick_tile(be->small_gemm, g->n, &tw);
    if (!tile) return -1;
    const int K = g->k, N = g->n, np = (N + tw - 1) / tw * tw;
    float *bp = panel ? panel : malloc((size_t)K * (size_t)np * sizeof(float));
    if (!bp) return -1;
    if (g->trans_b) cpu_transpose_into(be, B, (size_t)ldb, N, K, bp, (size_t)np);
    for (int l = 0; l < K; l++) {
        float *row = bp + (size_t)l * (size_t)np;
        if (!g->trans_b) memcpy(row, B + (size_t)l * (size_t)ldb, (size_t)N * sizeof(float));
        memset(row + N, 0, (size_t)(np - N) * sizeof(float));
    }
    small_gemm s = { .m = g->m, .n = N, .k = K, .alpha = g->alpha, .beta = g->beta, .a = A,
                     .a_rs = g->trans_a ? 1 : (size_t)lda, .a_ks = g->trans_a ? (size_t)lda : 1,
                     .bp = bp, .np = np, .c = C, .ldc = ldc };
    tile(&s);
    if (bp != panel) free(bp);
    return 0;
}
