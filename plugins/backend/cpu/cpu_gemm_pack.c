/* The GEMM kernels' packing moves (cpu_gemm_small.c's B panels, cpu_gemm_linear.c's A and
 * B panels): cpu_transpose_into (8 x 8 blocks in AVX registers, then 4 x 4 and 2 x 4 in
 * SSE), its 16-bit form that widens as it goes, and the linear kernel's row-order
 * packing. They only move (and exactly widen) values: no arithmetic on them. */
#include "cpu_internal.h"

#include <string.h>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__SSE__)
#include <xmmintrin.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
/* cpu_transpose_into's 8 x 8 blocks in AVX registers, for rows [0, rows / 8 * 8); returns
 * the rows done. The shuffles only move values. */
__attribute__((target("avx"))) static int transpose8_avx(const float *src, size_t src_ld, int rows, int cols,
                                                          float *dst, size_t dst_ld)
{
    int r = 0;
    for (; r + 8 <= rows; r += 8) {
        const float *s0 = src + (size_t)r * src_ld;
        int c = 0;
        for (; c + 8 <= cols; c += 8) {
            __m256 x[8], t[8], u[8];
            for (int q = 0; q < 8; q++) x[q] = _mm256_loadu_ps(s0 + (size_t)q * src_ld + (size_t)c);
            for (int q = 0; q < 8; q += 2) {
                t[q] = _mm256_unpacklo_ps(x[q], x[q + 1]);
                t[q + 1] = _mm256_unpackhi_ps(x[q], x[q + 1]);
            }
            for (int q = 0; q < 8; q += 4) {
                u[q] = _mm256_shuffle_ps(t[q], t[q + 2], 0x44);
                u[q + 1] = _mm256_shuffle_ps(t[q], t[q + 2], 0xEE);
                u[q + 2] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0x44);
                u[q + 3] = _mm256_shuffle_ps(t[q + 1], t[q + 3], 0xEE);
            }
            float *d = dst + (size_t)c * dst_ld + (size_t)r;
            for (int q = 0; q < 4; q++) {
                _mm256_storeu_ps(d + (size_t)q * dst_ld, _mm256_permute2f128_ps(u[q], u[q + 4], 0x20));
                _mm256_storeu_ps(d + (size_t)(q + 4) * dst_ld, _mm256_permute2f128_ps(u[q], u[q + 4], 0x31));
            }
        }
        for (; c < cols; c++)
            for (int q = 0; q < 8; q++) dst[(size_t)c * dst_ld + (size_t)(r + q)] = s0[(size_t)q * src_ld + (size_t)c];
    }
    return r;
}
#endif

/* dst[c dst_ld + r] = src[r src_ld + c], r < rows, c < cols: in 8 x 8 blocks (with AVX),
 * then 4 x 4 and 2 x 4 blocks. */
void cpu_transpose_into(const cpu_be *be, const float *src, size_t src_ld, int rows, int cols, float *dst,
                           size_t dst_ld)
{
    int r = 0;
#if defined(__x86_64__) || defined(__i386__)
    if (be->has_avx2) r = transpose8_avx(src, src_ld, rows, cols, dst, dst_ld);
#else
    (void)be;
#endif
#if defined(__SSE__)
    for (; r + 4 <= rows; r += 4) {
        const float *s0 = src + (size_t)r * src_ld;
        int c = 0;
        for (; c + 4 <= cols; c += 4) {
            __m128 x0 = _mm_loadu_ps(s0 + c), x1 = _mm_loadu_ps(s0 + src_ld + c);
            __m128 x2 = _mm_loadu_ps(s0 + 2 * src_ld + c), x3 = _mm_loadu_ps(s0 + 3 * src_ld + c);
            _MM_TRANSPOSE4_PS(x0, x1, x2, x3);
            float *d = dst + (size_t)c * dst_ld + (size_t)r;
            _mm_storeu_ps(d, x0);
            _mm_storeu_ps(d + dst_ld, x1);
            _mm_storeu_ps(d + 2 * dst_ld, x2);
            _mm_storeu_ps(d + 3 * dst_ld, x3);
        }
        for (; c < cols; c++)
            for (int q = 0; q < 4; q++) dst[(size_t)c * dst_ld + (size_t)(r + q)] = s0[(size_t)q * src_ld + (size_t)c];
    }
    /* two rows left (AVX2's 6-row A panels): 2 x 4 blocks, each column's pair stored at once */
    for (; r + 2 <= rows; r += 2) {
        const float *s0 = src + (size_t)r * src_ld, *s1 = s0 + src_ld;
        int c = 0;
        for (; c + 4 <= cols; c += 4) {
            __m128 x0 = _mm_loadu_ps(s0 + c), x1 = _mm_loadu_ps(s1 + c);
            __m128 lo = _mm_unpacklo_ps(x0, x1), hi = _mm_unpackhi_ps(x0, x1);   /* (r c, r+1 c) pairs */
            float *d = dst + (size_t)c * dst_ld + (size_t)r;
            _mm_storel_pi((__m64 *)d, lo);
            _mm_storeh_pi((__m64 *)(d + dst_ld), lo);
            _mm_storel_pi((__m64 *)(d + 2 * dst_ld), hi);
            _mm_storeh_pi((__m64 *)(d + 3 * dst_ld), hi);
        }
        for (; c < cols; c++) {
            dst[(size_t)c * dst_ld + (size_t)r] = s0[c];
            dst[(size_t)c * dst_ld + (size_t)r + 1] = s1[c];
        }
    }
#endif
    for (; r < rows; r++)
        for (int c = 0; c < cols; c++) dst[(size_t)c * dst_ld + (size_t)r] = src[(size_t)r * src_ld + (size_t)c];
}

/* K values per chunk when a 16-bit operand is widened into a stack buffer before its
 * transpose (32 rows x LIN_WIDEN floats = 8 KiB). */
#define LIN_WIDEN 64

/* Floats of one row read at a time by the row-order packing (cpu_pack_rows): a stack buffer
 * for a 16-bit row's widened values. */
#define LIN_ROW_FLOATS 1024

/* cpu_transpose_into from a 16-bit source (src element (r, c) at off + r src_ld + c): each
 * chunk of LIN_WIDEN columns is widened, rows x chunk, then transposed. */
void cpu_transpose_widen(const cpu_be *be, mpx_arg src, size_t off, size_t src_ld, int rows, int cols, float *dst,
                         size_t dst_ld)
{
    float tmp[32 * LIN_WIDEN];
    for (int c0 = 0; c0 < cols; c0 += LIN_WIDEN) {
        int cw = cols - c0 < LIN_WIDEN ? cols - c0 : LIN_WIDEN;
        for (int r = 0; r < rows; r++) cpu_load(be, src, off + (size_t)r * src_ld + (size_t)c0, (size_t)cw, tmp + r * LIN_WIDEN);
        cpu_transpose_into(be, tmp, LIN_WIDEN, rows, cw, dst + (size_t)c0 * dst_ld, dst_ld);
    }
}

/* Rows of the source packed together by cpu_pack_rows: each panel then receives
 * LIN_PACK_ROWS x w consecutive floats at a time. */
#define LIN_PACK_ROWS 8

/* Row-order packing, shared by op(A) = A^T and an op(B) with contiguous rows: row l
 * (l < kc) of the source holds n consecutive panel columns from element first + l ld
 * (fp32 at f32, else the 16-bit `a16` widened LIN_ROW_FLOATS values at a time). Each row
 * is read once, in order, LIN_PACK_ROWS rows at a time, w values of each to each panel:
 * panel q starts at dst + q w kc, its row l at + l w, its columns past n zero. (A panel
 * at a time went down the rows w values at a time: a cache miss, or a widening call, per
 * 24 or 64 bytes; a row at a time stored w values into every panel in turn, panels
 * w kc floats apart: a store miss, and often a TLB miss, per 48 or 128 bytes.) */
void cpu_pack_rows(const cpu_be *be, const float *f32, mpx_arg a16, size_t first, size_t ld, int kc, int n, int w,
                   float *dst)
{
    float tmp[LIN_PACK_ROWS * LIN_ROW_FLOATS];
    const int step = LIN_ROW_FLOATS / w * w;
    for (int c0 = 0; c0 < n; c0 += step) {
        int c1 = n - c0 < step ? n : c0 + step;
        for (int l0 = 0; l0 < kc; l0 += LIN_PACK_ROWS) {
            int lb = kc - l0 < LIN_PACK_ROWS ? kc - l0 : LIN_PACK_ROWS;
            const float *src[LIN_PACK_ROWS];
            for (int t = 0; t < lb; t++) {
                size_t at = first + (size_t)(l0 + t) * ld + (size_t)c0;
                if (f32) {
                    src[t] = f32 + at;
                } else {
                    cpu_load(be, a16, at, (size_t)(c1 - c0), tmp + t * LIN_ROW_FLOATS);
                    src[t] = tmp + t * LIN_ROW_FLOATS;
                }
            }
            for (int q = c0; q < c1; q += w) {
                float *d = dst + (size_t)q * (size_t)kc + (size_t)l0 * w;
                int cols = c1 - q < w ? c1 - q : w;
                for (int t = 0; t < lb; t++, d += w) {
                    const float *sr = src[t] + (q - c0);
                    /* the tile widths whole: copies of a size known here (vector moves) */
                    if (cols == 12 && w == 12) memcpy(d, sr, 12 * sizeof(float));
                    else if (cols == 32 && w == 32) memcpy(d, sr, 32 * sizeof(float));
                    else {
                        for (int j = 0; j < cols; j++) d[j] = sr[j];
                        for (int j = cols; j < w; j++) d[j] = 0.0f;
                    }
                }
            }
        }
    }
}
