/* The bf16 GEMMs on AMX tiles (option bf16_gemm): a GEMM whose two operands are bf16
 * values under the contract (compute bf16, or compute fp32 on two bf16 operands) runs on
 * the CPU's AMX-BF16 unit instead of the fp32 FMA kernels.
 *
 * What changes against "round inputs to bf16, one fp32 FMA chain per element in K order"
 * (cpu_gemm_linear.c): the products are the same (a product of two bf16 values is exact
 * in fp32), and they accumulate in fp32, but
 *  - the order: TDPBF16PS adds each pair of products (K values 2p, 2p + 1) rounded once,
 *    and the sixteen pairs of one 32-value K chunk in an order of its own (measured on a
 *    Xeon, family 6 model 143: one pair agreed with "round(a0 b0 + a1 b1) + c" on all of
 *    512,000 elements; sixteen pairs agreed with no sequential chain on more than 36 %);
 *    chunks follow each other in K order. The bits therefore differ from the FMA kernels'
 *    by accumulation order, and they do not depend on the thread count, the blocking or
 *    the tile (each element is one tile lane's sum over K chunks in K order);
 *  - subnormals: the unit reads subnormal bf16 inputs as zero and flushes subnormal
 *    results to zero, whatever MXCSR says. `backend.cpu.subnormal_census` counts how
 *    often that would matter in a run (docs/SPEED.md has the counts of protocol A).
 *
 * Layout: op(A) is packed as bf16 in 16-row blocks, each K chunk of a block one tile
 * (16 rows x 32 values, 1 KiB); op(B) in 16-column blocks, each K chunk one tile in the
 * unit's pair-interleaved layout (row p holds columns 0..15's values at K 2p and 2p + 1).
 * M and N are padded to multiples of 32 and K to a multiple of 32 with zeros (a zero
 * product leaves the sum as it is). The product runs 32 x 32 blocks of C: four
 * accumulator tiles, two A tiles and two B tiles, over all of K; C is then written as
 * alpha acc (+ beta C). The pool cuts C into pieces of 32-row panels; packing is cut too. */
#define _GNU_SOURCE
#include "cpu_internal.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define CPU_HAVE_AMX_CODE 1
#endif

#define AMX_K 32          /* K values per tile (32 bf16 = 64 bytes a row) */
#define AMX_BLK 32        /* rows (and columns) of C per block: 2 x 2 tiles of 16 */
#define AMX_K_CHUNK 1024  /* K values loaded and rounded at a time while packing */
/* Columns of packed B a piece runs across before the next row panel: the B block
 * (columns x padded K x 2 bytes) stays at most this many bytes, in L2. */
#define AMX_B_BLOCK_BYTES (512 * 1024)
/* Pieces per thread: the pool hands them out as threads come free. */
#define AMX_PIECES_PER_THREAD 4

int cpu_amx_available(void)
{
#ifdef CPU_HAVE_AMX_CODE
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    if (!(d & (1u << 22)) || !(d & (1u << 24))) return 0;   /* AMX-BF16, AMX-TILE */
    /* Linux hands out the tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM,
     * XTILEDATA = 18); the permission is the process's, for all its threads. */
    return syscall(SYS_arch_prctl, 0x1023, 18) == 0;
#else
    return 0;
#endif
}

/* A GEMM on two bf16 operands under the contract, whose packing is worth it: each
 * operand is packed once (m k and k n values) for m n k products, so both m and n must
 * be at least AMX_MIN_MN. Smaller ones (attention's per-head products with the head
 * size as N: dV, dQ, dK, PV) stay on the FMA kernels. */
#ifndef AMX_MIN_MN
#define AMX_MIN_MN 128
#endif
int cpu_amx_sizes(const mpx_gemm *g) { return g->k > 0 && g->m >= AMX_MIN_MN && g->n >= AMX_MIN_MN; }

int cpu_amx_dims(const cpu_be *be, const mpx_gemm *g)
{
    return be->bf16_gemm == CPU_BF16_GEMM_AMX && !be->census && cpu_amx_sizes(g);
}

int cpu_amx_shape(const mpx_gemm *g)
{
    if (!cpu_amx_sizes(g)) return 0;
    if (g->compute == MPX_BF16) return 1;
    return g->compute == MPX_F32 && g->a.t == MPX_BF16 && g->b.t == MPX_BF16;
}

int cpu_amx_takes(const cpu_be *be, const mpx_gemm *g)
{
    return be->bf16_gemm == CPU_BF16_GEMM_AMX && !be->census && cpu_amx_shape(g);
}

static size_t pad_to(size_t x, size_t q) { return (x + q - 1) / q * q; }

static int subnormal32(float x)
{
    uint32_t u;
    memcpy(&u, &x, 4);
    return (u & 0x7F800000u) == 0 && (u & 0x7FFFFFu) != 0;
}

/* Subnormal values among n values of an operand at off (rounded to bf16 first when
 * `round`): the values the AMX unit would read as zero. */
static size_t census_row(const cpu_be *be, mpx_arg x, size_t off, size_t n, int round)
{
    float tmp[AMX_K_CHUNK];
    size_t k = 0;
    for (size_t i = 0; i < n; i += AMX_K_CHUNK) {
        size_t w = n - i < AMX_K_CHUNK ? n - i : AMX_K_CHUNK;
        cpu_load(be, x, off + i, w, tmp);
        if (round) cpu_round_inplace(be, tmp, w, MPX_BF16);
        for (size_t t = 0; t < w; t++) k += (size_t)subnormal32(tmp[t]);
    }
    return k;
}

void cpu_amx_census(cpu_be *be, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb, const float *C, int ldc)
{
    int ra = g->compute == MPX_BF16 && A.t != MPX_BF16, rb = g->compute == MPX_BF16 && B.t != MPX_BF16;
    size_t ar = (size_t)(g->trans_a ? g->k : g->m), ac = (size_t)(g->trans_a ? g->m : g->k);
    size_t br = (size_t)(g->trans_b ? g->n : g->k), bc = (size_t)(g->trans_b ? g->k : g->n);
    size_t in = 0, out = 0;
    for (size_t r = 0; r < ar; r++) in += census_row(be, A, r * (size_t)lda, ac, ra);
    for (size_t r = 0; r < br; r++) in += census_row(be, B, r * (size_t)ldb, bc, rb);
    for (int i = 0; i < g->m; i++)
        for (int j = 0; j < g->n; j++) out += (size_t)subnormal32(C[(size_t)i * (size_t)ldc + (size_t)j]);
    __atomic_fetch_add(&be->census_n[0], in, __ATOMIC_RELAXED);
    __atomic_fetch_add(&be->census_n[1], ar * ac + br * bc, __ATOMIC_RELAXED);
    __atomic_fetch_add(&be->census_n[2], out, __ATOMIC_RELAXED);
    __atomic_fetch_add(&be->census_n[3], (size_t)g->m * (size_t)g->n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&be->census_n[4], (size_t)1, __ATOMIC_RELAXED);
}

size_t cpu_amx_bytes(const mpx_gemm *g)
{
    size_t kp = pad_to((size_t)g->k, AMX_K);
    return (pad_to((size_t)g->m, AMX_BLK) + pad_to((size_t)g->n, AMX_BLK)) * kp * sizeof(uint16_t) + 64;
}

#ifdef CPU_HAVE_AMX_CODE

/* One GEMM item as the unit reads it. */
typedef struct amx {
    const cpu_be *be;
    const mpx_gemm *g;
    mpx_arg a, b;
    size_t lda, ldb;
    float *c;
    size_t ldc;
    int kk;                   /* K chunks */
    int mp, np;               /* padded M, N */
    uint16_t *apack, *bpack;  /* mp x kk*32 and np x kk*32 values */
    int exact;                /* fp32 operands that are bf16 values: their top halves, no rounding */
    cpu_amx_quant *qa, *qb;   /* the 8-bit GEMMs' quantisation of A and B while packing (NULL: none) */
} amx;

/* Values [off, off + n) of an operand as bf16 bits: copied when bf16, rounded to
 * nearest even by the backend's own store (cpu_store) otherwise; `tmp` holds n floats.
 * With a quantiser q: widened, quantised (per tensor, or MX blocks of 32 from off, which
 * then starts a block along K), and the quantised values' bits (bf16 values all). */
static void load_bits(amx *s, mpx_arg x, size_t off, size_t n, float *tmp, uint16_t *out, cpu_amx_quant *q,
                      mpx_quant_stats *st)
{
    mpx_arg h = mpx_a(out, MPX_BF16);
    if (q) {
        cpu_load(s->be, x, off, n, tmp);
        if (q->mx)
            for (size_t b = 0; b < n; b += MPX_MX_BLOCK)
                cpu_quantize_mx_block(s->be, q->f, q->qf, q->lut, tmp + b,
                                      n - b < MPX_MX_BLOCK ? (int)(n - b) : MPX_MX_BLOCK, st);
        else cpu_quantize(s->be, q->f, q->qf, q->lut, tmp, n, q->s, st);
        const uint32_t *u = (const uint32_t *)tmp;
        for (size_t i = 0; i < n; i++) out[i] = (uint16_t)(u[i] >> 16);
    } else if (x.t == MPX_BF16) {
        memcpy(out, (const uint16_t *)x.p + off, n * sizeof *out);
    } else if (x.t == MPX_F32 && s->exact) {
        const uint32_t *u = (const uint32_t *)x.p + off;
        for (size_t i = 0; i < n; i++) out[i] = (uint16_t)(u[i] >> 16);
    } else if (x.t == MPX_F32) {
        cpu_store(s->be, (const float *)x.p + off, h, 0, n);
    } else {
        cpu_load(s->be, x, off, n, tmp);
        cpu_store(s->be, tmp, h, 0, n);
    }
}

/* A packing piece's counts, added to its quantiser's once (NULL q: nothing). */
static void add_quant_stats(cpu_amx_quant *q, const mpx_quant_stats *st)
{
    if (!q) return;
    __atomic_fetch_add(&q->st.nonzero, st->nonzero, __ATOMIC_RELAXED);
    __atomic_fetch_add(&q->st.saturated, st->saturated, __ATOMIC_RELAXED);
    __atomic_fetch_add(&q->st.flushed, st->flushed, __ATOMIC_RELAXED);
}

/* Values [x0, x0 + n) of rows l and l + 1 of an operand (row stride ld; l + 1 = k: zeros)
 * as bf16 pairs: out[x] = row l's bits | row l + 1's bits << 16 (the unit's pair). */
static void load_pairs(amx *s, mpx_arg x, size_t ld, int l, int k, size_t x0, size_t n, float *tmp, uint16_t *h0,
                       uint16_t *h1, uint32_t *out, cpu_amx_quant *q, mpx_quant_stats *st)
{
    load_bits(s, x, (size_t)l * ld + x0, n, tmp, h0, q, st);
    if (l + 1 < k) load_bits(s, x, (size_t)(l + 1) * ld + x0, n, tmp, h1, q, st);
    else memset(h1, 0, n * sizeof *h1);
    for (size_t t = 0; t < n; t++) out[t] = (uint32_t)h0[t] | (uint32_t)h1[t] << 16;
}

/* A packing piece's stack: one chunk widened (tmp), as bf16 bits (h, and h1 for a pair's
 * second row), as pairs (pr); its quantisation counts. */
typedef struct pack_buf {
    float tmp[AMX_K_CHUNK];
    uint16_t h[AMX_K_CHUNK], h1[AMX_K_CHUNK];
    uint32_t pr[AMX_K_CHUNK];
    mpx_quant_stats qst;
} pack_buf;

/* Rows [r0, r1) of op(A) into their 16-row blocks: element (i, l) at
 * apack[((i / 16) kk + l / 32) 512 + (i % 16) 32 + l % 32]. */
static void pack_a_rows(void *vs, size_t r0, size_t r1)
{
    amx *s = vs;
    const mpx_gemm *g = s->g;
    pack_buf w;
    w.qst = (mpx_quant_stats){ 0 };
    size_t i1 = r1 < (size_t)g->m ? r1 : (size_t)g->m;
    if (!g->trans_a) {   /* row i of op(A) lies contiguous in A: 32 values at a time */
        for (size_t i = r0; i < i1; i++)
            for (int l0 = 0; l0 < g->k; l0 += AMX_K_CHUNK) {
                int n = g->k - l0 < AMX_K_CHUNK ? g->k - l0 : AMX_K_CHUNK;
                load_bits(s, s->a, i * s->lda + (size_t)l0, (size_t)n, w.tmp, w.h, s->qa, &w.qst);
                for (int q = 0; q < n; q += AMX_K) {
                    int len = n - q < AMX_K ? n - q : AMX_K, l = l0 + q;
                    uint16_t *d = s->apack + ((i / 16) * (size_t)s->kk + (size_t)(l / AMX_K)) * 512 + (i % 16) * 32;
                    memcpy(d, w.h + q, (size_t)len * 2);
                }
            }
    } else {   /* op(A) = A^T: rows l, l + 1 of A hold op(A)[r0 .. r1, l .. l + 1]: a pair per row of op(A) */
        for (int l = 0; l < g->k && r0 < i1; l += 2)
            for (size_t i0 = r0; i0 < i1; i0 += AMX_K_CHUNK) {
                size_t n = i1 - i0 < AMX_K_CHUNK ? i1 - i0 : AMX_K_CHUNK;
                load_pairs(s, s->a, s->lda, l, g->k, i0, n, w.tmp, w.h, w.h1, w.pr, s->qa, &w.qst);
                uint32_t *d = (uint32_t *)(s->apack + (size_t)(l / AMX_K) * 512 + (size_t)(l % AMX_K));
                for (size_t t = 0; t < n; t++) {
                    size_t i = i0 + t;
                    d[((i / 16) * (size_t)s->kk * 512 + (i % 16) * 32) / 2] = w.pr[t];
                }
            }
    }
    add_quant_stats(s->qa, &w.qst);
}

/* Columns [c0, c1) of op(B) into their 16-column blocks, pairs interleaved: element
 * (l, j) at bpack[((j / 16) kk + l / 32) 512 + ((l % 32) / 2) 32 + (j % 16) 2 + l % 2]. */
static void pack_b_cols(void *vs, size_t c0, size_t c1)
{
    amx *s = vs;
    const mpx_gemm *g = s->g;
    pack_buf w;
    w.qst = (mpx_quant_stats){ 0 };
    size_t j1 = c1 < (size_t)g->n ? c1 : (size_t)g->n;
    if (g->trans_b) {   /* column j of op(B) lies contiguous in B (its row j): its pairs are adjacent */
        for (size_t j = c0; j < j1; j++)
            for (int l0 = 0; l0 < g->k; l0 += AMX_K_CHUNK) {
                int n = g->k - l0 < AMX_K_CHUNK ? g->k - l0 : AMX_K_CHUNK;
                load_bits(s, s->b, j * s->ldb + (size_t)l0, (size_t)n, w.tmp, w.h, s->qb, &w.qst);
                if (n % 2) w.h[n] = 0;
                uint32_t *d = (uint32_t *)(s->bpack + (j / 16) * (size_t)s->kk * 512 + (j % 16) * 2);
                for (int t = 0; t < n; t += 2) {
                    int l = l0 + t;
                    uint32_t v;
                    memcpy(&v, w.h + t, 4);
                    d[((size_t)(l / AMX_K) * 512 + (size_t)((l % AMX_K) / 2) * 32) / 2] = v;
                }
            }
    } else {   /* rows l, l + 1 of B hold op(B)[l .. l + 1, c0 .. c1]: 16 columns' pairs are 64 contiguous bytes */
        for (int l = 0; l < g->k && c0 < j1; l += 2)
            for (size_t j0 = c0; j0 < j1; j0 += AMX_K_CHUNK) {
                size_t n = j1 - j0 < AMX_K_CHUNK ? j1 - j0 : AMX_K_CHUNK;
                load_pairs(s, s->b, s->ldb, l, g->k, j0, n, w.tmp, w.h, w.h1, w.pr, s->qb, &w.qst);
                uint16_t *d = s->bpack + (size_t)(l / AMX_K) * 512 + (size_t)((l % AMX_K) / 2) * 32;
                for (size_t t = 0; t < n;) {
                    size_t j = j0 + t, len = 16 - j % 16 < n - t ? 16 - j % 16 : n - t;
                    memcpy(d + (j / 16) * (size_t)s->kk * 512 + (j % 16) * 2, w.pr + t, len * 4);
                    t += len;
                }
            }
    }
    add_quant_stats(s->qb, &w.qst);
}

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

__attribute__((target("amx-tile"))) static void tiles_on(void)
{
    amx_cfg cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {   /* 16 rows of 64 bytes each: C 16 x 16 fp32, A 16 x 32 bf16, B 16 pairs x 16 */
        cfg.rows[t] = 16;
        cfg.colsb[t] = 64;
    }
    /* GCC 12's _tile_loadconfig does not tell the compiler that it reads all 64 bytes:
     * without this barrier the stores to colsb and rows were dropped (-O3) and the
     * instruction faulted on the palette's zero sizes */
    __asm__ __volatile__("" : : "r"(&cfg) : "memory");
    _tile_loadconfig(&cfg);
}

__attribute__((target("amx-tile"))) static void tiles_off(void) { _tile_release(); }

/* The 32 x 32 block of C at rows ib * 32, columns jb * 32: acc over all K chunks into
 * `out` (32 x 32 fp32, row stride 32). */
__attribute__((target("amx-tile,amx-bf16"))) static void block32(const amx *s, int ib, int jb, float *out)
{
    const size_t tile = 512, kk = (size_t)s->kk;
    const uint16_t *a0 = s->apack + (size_t)(2 * ib) * kk * tile, *a1 = a0 + kk * tile;
    const uint16_t *b0 = s->bpack + (size_t)(2 * jb) * kk * tile, *b1 = b0 + kk * tile;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (size_t q = 0; q < kk; q++) {
        _tile_loadd(4, a0 + q * tile, 64);
        _tile_loadd(6, b0 + q * tile, 64);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(7, b1 + q * tile, 64);
        _tile_dpbf16ps(1, 4, 7);
        _tile_loadd(5, a1 + q * tile, 64);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 128);
    _tile_stored(1, out + 16, 128);
    _tile_stored(2, out + 16 * 32, 128);
    _tile_stored(3, out + 16 * 32 + 16, 128);
}

typedef struct amx_job {
    amx *s;
    int panels_per_piece, nb;   /* 32-row panels per piece; 32-column blocks per B block */
} amx_job;

static void amx_pieces(void *vj, size_t begin, size_t end)
{
    const amx_job *j = vj;
    const amx *s = j->s;
    const mpx_gemm *g = s->g;
    const int panels = s->mp / AMX_BLK, cols = s->np / AMX_BLK;
    float out[AMX_BLK * AMX_BLK] __attribute__((aligned(64)));
    tiles_on();
    for (size_t p = begin; p < end; p++) {
        int ib0 = (int)p * j->panels_per_piece;
        int ib1 = ib0 + j->panels_per_piece < panels ? ib0 + j->panels_per_piece : panels;
        for (int jb0 = 0; jb0 < cols; jb0 += j->nb) {
            int jb1 = jb0 + j->nb < cols ? jb0 + j->nb : cols;
            for (int ib = ib0; ib < ib1; ib++)
                for (int jb = jb0; jb < jb1; jb++) {
                    block32(s, ib, jb, out);
                    int rows = g->m - ib * AMX_BLK < AMX_BLK ? g->m - ib * AMX_BLK : AMX_BLK;
                    int w = g->n - jb * AMX_BLK < AMX_BLK ? g->n - jb * AMX_BLK : AMX_BLK;
                    for (int r = 0; r < rows; r++) {
                        float *c = s->c + (size_t)(ib * AMX_BLK + r) * s->ldc + (size_t)(jb * AMX_BLK);
                        const float *o = out + r * AMX_BLK;
                        if (g->beta != 0.0f)
                            for (int q = 0; q < w; q++) c[q] = g->alpha * o[q] + g->beta * c[q];
                        else if (g->alpha != 1.0f)
                            for (int q = 0; q < w; q++) c[q] = g->alpha * o[q];
                        else memcpy(c, o, (size_t)w * sizeof(float));
                    }
                }
        }
    }
    tiles_off();
}

int cpu_amx_gemm(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb, float *C,
                 int ldc, void *buf, int exact, cpu_amx_quant *qa, cpu_amx_quant *qb)
{
    amx s = { .exact = exact, .qa = qa, .qb = qb, .be = be, .g = g, .a = A, .b = B, .lda = (size_t)lda,
              .ldb = (size_t)ldb, .c = C, .ldc = (size_t)ldc,
              .kk = (g->k + AMX_K - 1) / AMX_K, .mp = (int)pad_to((size_t)g->m, AMX_BLK),
              .np = (int)pad_to((size_t)g->n, AMX_BLK)};
    size_t kp = (size_t)s.kk * AMX_K, abytes = (size_t)s.mp * kp * 2, bytes = abytes + (size_t)s.np * kp * 2;
    if (!buf) {
        if (bytes > be->amx_ws_bytes) {
            free(be->amx_ws);
            be->amx_ws = aligned_alloc(64, pad_to(bytes, 64));
            be->amx_ws_bytes = be->amx_ws ? bytes : 0;
        }
        if (!(buf = be->amx_ws)) return -1;
    }
    uintptr_t at = ((uintptr_t)buf + 63) / 64 * 64;   /* a caller's buffer holds cpu_amx_bytes */
    s.apack = (uint16_t *)at;
    s.bpack = (uint16_t *)(at + abytes);
    /* zeros where M, N or K are padded */
    if (s.mp != g->m || (int)kp != g->k) memset(s.apack, 0, abytes);
    if (s.np != g->n || (int)kp != g->k) memset(s.bpack, 0, bytes - abytes);
    const int threads = pool ? be->threads : 1;
    if (threads > 1) {
        /* pieces of 64 rows (columns): a row of a transposed operand is read 64 values at a time */
        cpu_pool_run(pool, (size_t)g->m, 64, pack_a_rows, &s);
        cpu_pool_run(pool, (size_t)g->n, 64, pack_b_cols, &s);
    } else {
        pack_a_rows(&s, 0, (size_t)g->m);
        pack_b_cols(&s, 0, (size_t)g->n);
    }
    const int panels = s.mp / AMX_BLK, cols = s.np / AMX_BLK;
    int nb = (int)(AMX_B_BLOCK_BYTES / (kp * 2 * AMX_BLK));
    if (nb < 1) nb = 1;
    int pieces = threads > 1 ? AMX_PIECES_PER_THREAD * threads : 1;
    if (pieces > panels) pieces = panels;
    amx_job job = { &s, (panels + pieces - 1) / pieces, nb > cols ? cols : nb };
    pieces = (panels + job.panels_per_piece - 1) / job.panels_per_piece;
    if (pieces > 1) cpu_pool_run_pieces(pool, (size_t)pieces, 1, amx_pieces, &job);
    else amx_pieces(&job, 0, 1);
    return 0;
}

#else

int cpu_amx_gemm(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb, float *C,
                 int ldc, void *buf, int exact, cpu_amx_quant *qa, cpu_amx_quant *qb)
{
    (void)exact;
    (void)qa;
    (void)qb;
    (void)be; (void)pool; (void)g; (void)A; (void)lda; (void)B; (void)ldb; (void)C; (void)ldc; (void)buf;
    return -1;
}

#endif
