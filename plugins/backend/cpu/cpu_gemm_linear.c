/* The one-matrix fp32 GEMMs (the linear layers' forward, input and weight gradients, and
 * every other unbatched product of the backend): packed, cache-blocked, register-tiled in
 * AVX-512 (or AVX2), with the attention kernel's contract (cpu_gemm_small.c):
 *   acc = +0; for l = 0 .. K-1 in order: acc = fmaf(opA[i, l], opB[l, j], acc);
 *   C[i, j] = alpha * acc                      (beta = 0: C is not read)
 *   C[i, j] = alpha * acc + beta * C[i, j]     (otherwise; each product and the sum rounded)
 * One FMA chain per element: the bits depend neither on the ISA path, the tile, the
 * blocking nor the thread count (test_cpu_ops checks all four against a scalar loop).
 * K is cut into blocks only when beta = 0: the running sum of a block is stored in C as
 * the fp32 value it is and the next block continues the chain from it, so a cut K is
 * the same chain; with beta != 0 C must keep its value until the end, and K is not cut.
 *
 * Layout (row-major C, vectors along N): op(A) is packed into panels of MR rows (for each
 * l, MR consecutive values, the rows past M zero), op(B) into panels of NR columns (for
 * each l, NR consecutive values, the columns past N zero). All of op(B) is packed first,
 * by every thread together, into one buffer the pieces share. Then C is cut into pieces,
 * up to LIN_PIECES_PER_THREAD a thread, along M (along N when M has fewer row tiles than
 * there are threads), which the threads take as they come free, each into the A buffer of
 * the slot it holds; each piece runs, outermost first: K blocks (KC) -> pack the piece's rows of A
 * (an fp32 op(A) = A is read where it lies, but for a last partial MR-row panel) ->
 * column blocks (NC: KC x NC of packed B, kept in L2) -> MR-row panels (one A panel,
 * MR x KC, kept in L1) -> NR-column panels -> the MR x NR tile in registers. The moves
 * the packing is made of (transposes, widening, row-order packing) are in cpu_gemm_pack.c. */
#include "cpu_internal.h"
#include "cpu_simd.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* K per block (the A panel MR x KC floats in L1) and the B block's size in floats (L2). */
#ifndef LIN_KC_MAX
#define LIN_KC_MAX 768
#endif
#ifndef LIN_B_BLOCK_FLOATS
#define LIN_B_BLOCK_FLOATS (256 * 1024)
#endif
/* Pieces of C per thread: the pool hands them out as threads come free, so a thread
 * slowed down (another process, a hypervisor's other guest, a late wake-up) leaves its
 * share to the others instead of holding the call until it is done. A piece keeps at
 * least LIN_MIN_PIECE_TILES row (or column) tiles: each piece reads all of the packed B
 * once per K block, and thinner pieces would make that the bound. */
#ifndef LIN_PIECES_PER_THREAD
#define LIN_PIECES_PER_THREAD 8
#endif
#ifndef LIN_MIN_PIECE_TILES
#define LIN_MIN_PIECE_TILES 4
#endif

/* The tile loop asks for the B panel's cache lines this many K steps ahead (1.5 KiB at
 * 12 x 32): the panel streams from L2, and the hardware prefetcher alone left the
 * FMAs waiting. A prefetch changes no result. On a Xeon (family 6 model 167, 2 threads,
 * a throw-away driver alternating builds), 1152 x 3072 x 768 X W^T went from 310-319 to
 * 326-337 GFLOP/s (best of 20 calls, four rounds) and 768 x 768 x 1152 A^T B from 265-281
 * to 296-305; 6 to 20 steps ahead measured about the same, KC 256 or 384 and B blocks of
 * 128 K or 512 K floats no better. */
/* 0: every A panel packed (as before session 21), for comparisons */
#ifndef LIN_A_IN_PLACE
#define LIN_A_IN_PLACE 1
#endif

#ifndef LIN_PREFETCH_AHEAD
#define LIN_PREFETCH_AHEAD 12
#endif

enum { LIN_FIRST = 1, LIN_LAST = 2 };

/* acc over kc values of an A panel (ap: l * MR + r; or r * lda + l, read in place) and a
 * B panel (bp: l * NR + j) into the MR x NR tile at c (row stride ldc): acc starts at +0
 * (LIN_FIRST) or at c's stored running sum; on LIN_LAST c = alpha * acc (+ beta * c when
 * beta != 0) (+ bias[j] when bias is not NULL, beta then 0: the sum rounded once more, as
 * bias_add after the store), else c = acc. */
typedef void (*lin_kernel)(int kc, const float *ap, size_t lda, const float *bp, float *c, size_t ldc, int mode,
                           float alpha, float beta, const float *bias);

/* Where the tile's A value (r, l) is: in a packed panel (A_ROWS = 0: ap[l MR + r], lda
 * unused) or, A_ROWS = 1, where an fp32 op(A) = A lies (row r at ap + r lda, its K values
 * contiguous), which then needs no packing. The tile's FMAs take the same values in the
 * same order either way, so the bits are the same. Only rows are read in place: an
 * op(A) = A^T read in place (K value l of the tile's rows at ap + l lda) was 1.2 to 2.3x
 * slower than packed, its lines lda apart falling into a few L1 sets (on a Xeon, family 6
 * model 167: 768 x 768 x 1152 A^T B and 3072 x 768 x 1152, calls alternated with the
 * packed build in one process, operands cold); rows in place took 0.93 to 1.01x the
 * packed time on the linear layers' six other shapes, bits identical. */
#define LIN_A(A_ROWS, R, ap, lda, r, l) ((A_ROWS) ? (ap)[(size_t)(r) * (lda) + (l)] : (ap)[(size_t)(l) * (R) + (r)])
#define LIN_TILE(NAME, A_ROWS, R, NV, TARGET, VEC, W, ZERO, LOAD, SET1, FMA, MUL, ADD, STORE)                      \
    __attribute__((target(TARGET))) static void NAME(int kc, const float *restrict ap, size_t lda,                 \
                                                     const float *restrict bp, float *c, size_t ldc, int mode,     \
                                                     float alpha, float beta, const float *bias)                   \
    {                                                                                                              \
        VEC acc[R][NV];                                                                                            \
        (void)lda;                                                                                                 \
        if (mode & LIN_FIRST) {                                                                                    \
            for (int r = 0; r < (R); r++)                                                                          \
                for (int v = 0; v < (NV); v++) acc[r][v] = ZERO();                                                 \
        } else {                                                                                                   \
            for (int r = 0; r < (R); r++)                                                                          \
                for (int v = 0; v < (NV); v++) acc[r][v] = LOAD(c + (size_t)r * ldc + (size_t)(v * (W)));          \
        }                                                                                                          \
        for (int l = 0; l < kc; l++, bp += (NV) * (W)) {                                                           \
            VEC bv[NV];                                                                                            \
            for (int q = 0; q < (NV) * (W); q += 16)                                                               \
                __builtin_prefetch(bp + LIN_PREFETCH_AHEAD * (NV) * (W) + q, 0, 3);                               \
            for (int v = 0; v < (NV); v++) bv[v] = LOAD(bp + v * (W));                                             \
            for (int r = 0; r < (R); r++) {                                                                        \
                VEC av = SET1(LIN_A(A_ROWS, R, ap, lda, r, l));                                                    \
                for (int v = 0; v < (NV); v++) acc[r][v] = FMA(av, bv[v], acc[r][v]);                              \
            }                                                                                                      \
        }                                                                                                          \
        if (!(mode & LIN_LAST)) {                                                                                  \
            for (int r = 0; r < (R); r++)                                                                          \
                for (int v = 0; v < (NV); v++) STORE(c + (size_t)r * ldc + (size_t)(v * (W)), acc[r][v]);          \
            return;                                                                                                \
        }                                                                                                          \
        VEC al = SET1(alpha), bt = SET1(beta);                                                                     \
        for (int r = 0; r < (R); r++)                                                                              \
            for (int v = 0; v < (NV); v++) {                                                                       \
                float *p = c + (size_t)r * ldc + (size_t)(v * (W));                                                \
                VEC x = MUL(al, acc[r][v]);                                                                        \
                if (beta != 0.0f) x = ADD(x, MUL(bt, LOAD(p)));                                                    \
                if (bias) x = ADD(x, LOAD(bias + v * (W)));                                                        \
                STORE(p, x);                                                                                       \
            }                                                                                                      \
    }

#if defined(__x86_64__) || defined(__i386__)
#define LIN_TILE_P(NAME, ...) LIN_TILE(NAME, 0, __VA_ARGS__)
#define LIN_TILE_R(NAME, ...) LIN_TILE(NAME, 1, __VA_ARGS__)
CPU_TILE(LIN_TILE_P, lin512_12x2, 12, 2, CPU_ISA_AVX512)
CPU_TILE(LIN_TILE_R, lin512_12x2_r, 12, 2, CPU_ISA_AVX512)
CPU_TILE(LIN_TILE_P, lin256_6x2, 6, 2, CPU_ISA_AVX2)
CPU_TILE(LIN_TILE_R, lin256_6x2_r, 6, 2, CPU_ISA_AVX2)
#endif

/* Tile geometry of an ISA level (cpu_small_gemm_level): MR rows, NR columns; the kernel
 * on packed A panels and the one reading A's rows in place. */
typedef struct lin_isa { int mr, nr; lin_kernel fn, fn_rows; } lin_isa;

static int lin_isa_of(int level, lin_isa *out)
{
#if defined(__x86_64__) || defined(__i386__)
    /* 12 x 32 (24 of the 32 zmm registers accumulate) was the fastest of 8 x 48, 12 x 32,
     * 14 x 32 and 6 x 64 on bert-base's and MiniLM's shapes on a Xeon with AVX-512 */
    if (level >= 2) { *out = (lin_isa){ 12, 32, lin512_12x2, lin512_12x2_r }; return 0; }
    if (level == 1) { *out = (lin_isa){ 6, 16, lin256_6x2, lin256_6x2_r }; return 0; }
#endif
    (void)level; (void)out;
    return -1;
}

/* One GEMM: opA[i, l] = a[i a_rs + l a_ks], opB[l, j] = b[l b_ks + j b_cs]; an fp16 or
 * bf16 operand (at, bt) is widened (exactly) while it is packed. */
typedef struct lin {
    const cpu_be *be;
    int m, n, k;
    float alpha, beta;
    const float *a, *b;
    mpx_arg at, bt;   /* the operands as stored: a/b are their pointers when fp32 */
    mpx_arg ct;       /* C as stored: fp16/bf16 only when K is one block (c is then unused) */
    size_t a_rs, a_ks, b_ks, b_cs;
    float *c;
    size_t ldc;
    int kc;      /* K per block */
    int nc;      /* columns per B block, a multiple of NR */
    int np;      /* N rounded up to NR */
    float *bpack;   /* all of op(B), packed: K block kb at kb KC np, its panel jp at + jp NR kc */
    lin_isa isa;
    const float *bias;   /* N fp32 values added on C's last store (NULL: none) */
} lin;

static int ceil_to(int x, int q) { return (x + q - 1) / q * q; }

/* Rows [i0, i0 + mc) of op(A), K values [p0, p0 + kc), as MR-row panels. */
static void pack_a(const lin *g, int i0, int mc, int p0, int kc, float *dst)
{
    const int mr = g->isa.mr;
    if (g->a_ks != 1) {   /* op(A) = A^T: row p0 + l of A holds op(A)[i0 .., l] contiguously */
        cpu_pack_rows(g->be, g->at.t == MPX_F32 ? g->a : NULL, g->at, (size_t)p0 * g->a_ks + (size_t)i0, g->a_ks, kc,
                      mc, mr, dst);
        return;
    }
    for (int ir = 0; ir < mc; ir += mr) {
        float *d = dst + (size_t)ir * (size_t)kc;
        int rows = mc - ir < mr ? mc - ir : mr;
        if (g->at.t != MPX_F32) {   /* 16-bit: widened on the way */
            size_t first = (size_t)(i0 + ir) * g->a_rs + (size_t)p0 * g->a_ks;
            cpu_transpose_widen(g->be, g->at, first, g->a_rs, rows, kc, d, (size_t)mr);
        } else {   /* rows of A contiguous: transposed in blocks */
            cpu_transpose_into(g->be, g->a + (size_t)(i0 + ir) * g->a_rs + (size_t)p0, g->a_rs, rows, kc, d, (size_t)mr);
        }
        if (rows < mr)
            for (int l = 0; l < kc; l++)
                for (int r = rows; r < mr; r++) d[(size_t)l * mr + r] = 0.0f;
    }
}

/* Panel jp of K block kb of op(B) into g->bpack. */
static void pack_b_panel(const lin *g, int kb, int jp)
{
    const int nr = g->isa.nr, p0 = kb * g->kc, kc = g->k - p0 < g->kc ? g->k - p0 : g->kc, j0 = jp * nr;
    float *d = g->bpack + (size_t)kb * (size_t)g->kc * (size_t)g->np + (size_t)j0 * (size_t)kc;
    int w = g->n - j0 < nr ? g->n - j0 : nr;
    if (g->bt.t != MPX_F32) {   /* op(B) = B^T, 16-bit: widened on the way */
        cpu_transpose_widen(g->be, g->bt, (size_t)p0 * g->b_ks + (size_t)j0 * g->b_cs, g->b_cs, w, kc, d, (size_t)nr);
    } else {              /* op(B) = B^T (rows of op(B) contiguous go through pack_b_rows) */
        cpu_transpose_into(g->be, g->b + (size_t)j0 * g->b_cs + (size_t)p0, g->b_cs, w, kc, d, (size_t)nr);
    }
    if (w < nr)
        for (int l = 0; l < kc; l++)
            for (int j = w; j < nr; j++) d[(size_t)l * nr + j] = 0.0f;
}

/* Panels [jp0, jp1) of K block kb of an op(B) whose rows are contiguous (b_cs = 1). */
static void pack_b_rows(const lin *g, int kb, int jp0, int jp1)
{
    const int nr = g->isa.nr, p0 = kb * g->kc, kc = g->k - p0 < g->kc ? g->k - p0 : g->kc;
    const int j0 = jp0 * nr, j1 = jp1 * nr < g->n ? jp1 * nr : g->n;
    float *blk = g->bpack + (size_t)kb * (size_t)g->kc * (size_t)g->np;
    cpu_pack_rows(g->be, g->bt.t == MPX_F32 ? g->b : NULL, g->bt, (size_t)p0 * g->b_ks + (size_t)j0, g->b_ks, kc,
                  j1 - j0, nr, blk + (size_t)j0 * (size_t)kc);
}

static void pack_b_panels(void *vg, size_t begin, size_t end)
{
    const lin *g = vg;
    size_t per_block = (size_t)(g->np / g->isa.nr);
    if (g->b_cs == 1) {
        for (size_t u = begin; u < end;) {   /* the range's panels, K block by K block */
            size_t kb = u / per_block, last = (kb + 1) * per_block < end ? (kb + 1) * per_block : end;
            pack_b_rows(g, (int)kb, (int)(u % per_block), (int)(last - kb * per_block));
            u = last;
        }
        return;
    }
    for (size_t u = begin; u < end; u++) pack_b_panel(g, (int)(u / per_block), (int)(u % per_block));
}

/* A tile at the edge of C (rows x cols of MR x NR): through a full tile on the stack.
 * The A panel is packed (fn, lda unused) or read where it lies (fn_rows, rows = MR). */
static void edge_tile(const lin *g, lin_kernel fn, int kc, const float *ap, size_t lda, const float *bp, float *c,
                      int rows, int cols, int mode, const float *bias)
{
    float t[16 * 64], bt[64];   /* MR x NR of every ISA's tile fits; NR bias values */
    const int nr = g->isa.nr;
    memset(t, 0, sizeof t);
    if (!(mode & LIN_FIRST) || g->beta != 0.0f)
        for (int r = 0; r < rows; r++) memcpy(t + (size_t)r * nr, c + (size_t)r * g->ldc, (size_t)cols * sizeof(float));
    if (bias && cols < nr) {   /* the kernel reads NR values */
        memset(bt, 0, sizeof bt);
        memcpy(bt, bias, (size_t)cols * sizeof(float));
        bias = bt;
    }
    fn(kc, ap, lda, bp, t, (size_t)nr, mode, g->alpha, g->beta, bias);
    for (int r = 0; r < rows; r++) memcpy(c + (size_t)r * g->ldc, t + (size_t)r * nr, (size_t)cols * sizeof(float));
}

/* A tile of a 16-bit C (K in one block): computed in an fp32 tile on the stack (C read
 * widened first when beta != 0), then rounded into C, which is what the gemm op's fp32
 * C buffer and its conversion afterwards gave, without the trip through memory. */
static void tile_16(const lin *g, lin_kernel fn, int kc, const float *ap, size_t lda, const float *bp, int i, int j,
                    int rows, int cols)
{
    float t[16 * 64];
    const int nr = g->isa.nr;
    if (g->beta != 0.0f)
        for (int r = 0; r < rows; r++) cpu_load(g->be, g->ct, (size_t)(i + r) * g->ldc + (size_t)j, (size_t)cols, t + (size_t)r * nr);
    /* no bias: gemm_bias takes an fp32 C only */
    fn(kc, ap, lda, bp, t, (size_t)nr, LIN_FIRST | LIN_LAST, g->alpha, g->beta, NULL);
    for (int r = 0; r < rows; r++) cpu_store(g->be, t + (size_t)r * nr, g->ct, (size_t)(i + r) * g->ldc + (size_t)j, (size_t)cols);
}

/* Floats of packing buffer a piece of mc rows needs: its A rows of one K block. */
static size_t piece_floats(const lin *g, int mc) { return (size_t)ceil_to(mc, g->isa.mr) * (size_t)g->kc; }

/* Whether op(A)'s rows are read in place: fp32, op(A) = A (rows contiguous). */
static int a_in_place(const lin *g) { return LIN_A_IN_PLACE && g->at.t == MPX_F32 && g->a_ks == 1; }

/* C[i0 .. i1) x [j0 .. j1) (j0, j1 multiples of NR or j1 = N), every K block, from the
 * packed B; `abuf` holds piece_floats(i1 - i0). With a_in_place, whole MR-row panels of A
 * are read where they lie and only a last, partial panel is packed (the kernel reads MR
 * rows). */
static void lin_piece(const lin *g, int i0, int i1, int j0, int j1, float *abuf)
{
    const int mr = g->isa.mr, nr = g->isa.nr, mc = i1 - i0, in_place_a = a_in_place(g);
    for (int p0 = 0; p0 < g->k; p0 += g->kc) {
        int kc = g->k - p0 < g->kc ? g->k - p0 : g->kc;
        int mode = (p0 == 0 ? LIN_FIRST : 0) | (p0 + kc == g->k ? LIN_LAST : 0);
        const float *bblock = g->bpack + (size_t)p0 * (size_t)g->np;   /* K block p0 / KC */
        const int whole = in_place_a ? mc / mr * mr : 0;   /* rows read in place */
        if (whole < mc) pack_a(g, i0 + whole, mc - whole, p0, kc, abuf + (size_t)whole * (size_t)kc);
        for (int jc = j0; jc < j1; jc += g->nc) {
            int je = j1 - jc < g->nc ? j1 : jc + g->nc;
            for (int ir = 0; ir < mc; ir += mr) {
                int rows = mc - ir < mr ? mc - ir : mr;
                const int in_place = ir < whole;
                const lin_kernel fn = in_place ? g->isa.fn_rows : g->isa.fn;
                const float *ap = in_place ? g->a + (size_t)(i0 + ir) * g->a_rs + (size_t)p0
                                           : abuf + (size_t)ir * (size_t)kc;
                float *crow = g->ct.t == MPX_F32 ? g->c + (size_t)(i0 + ir) * g->ldc : NULL;
                for (int j = jc; j < je; j += nr) {
                    int cols = je - j < nr ? je - j : nr;
                    const float *bp = bblock + (size_t)j * (size_t)kc;
                    const float *bias = g->bias && (mode & LIN_LAST) ? g->bias + j : NULL;
                    if (!crow) tile_16(g, fn, kc, ap, g->a_rs, bp, i0 + ir, j, rows, cols);
                    else if (rows == mr && cols == nr)
                        fn(kc, ap, g->a_rs, bp, crow + j, g->ldc, mode, g->alpha, g->beta, bias);
                    else edge_tile(g, fn, kc, ap, g->a_rs, bp, crow + j, rows, cols, mode, bias);
                }
            }
        }
    }
}

typedef struct lin_job {
    const lin *g;
    int by_rows, per, dim;   /* pieces of `per` rows (or columns) along dim */
    void **bufs;             /* one A buffer per slot */
    _Atomic int *taken;      /* slot i's buffer is in use (NULL: one slot, no pool) */
    int slots;
} lin_job;

static void lin_pieces(void *vj, size_t begin, size_t end)
{
    const lin_job *j = vj;
    int slot = 0;
    if (j->taken)   /* at most `slots` callers at once (the pool's threads): one is free */
        while (atomic_exchange(&j->taken[slot], 1)) slot = (slot + 1) % j->slots;
    for (size_t p = begin; p < end; p++) {
        int lo = (int)p * j->per, hi = lo + j->per < j->dim ? lo + j->per : j->dim;
        if (j->by_rows) lin_piece(j->g, lo, hi, 0, j->g->n, j->bufs[slot]);
        else lin_piece(j->g, 0, j->g->m, lo, hi, j->bufs[slot]);
    }
    if (j->taken) atomic_store(&j->taken[slot], 0);
}

/* Buffer `slot` of the backend's linear-GEMM buffers of at least `floats`, 64-byte aligned. */
static float *lin_buf(cpu_be *be, int slot, size_t floats)
{
    size_t bytes = (floats * sizeof(float) + 63) / 64 * 64;
    if (bytes > be->lin_ws_bytes[slot]) {
        free(be->lin_ws[slot]);
        be->lin_ws[slot] = aligned_alloc(64, bytes);
        be->lin_ws_bytes[slot] = be->lin_ws[slot] ? bytes : 0;
    }
    return be->lin_ws[slot];
}

int cpu_linear_gemm_cuts_k(const mpx_gemm *g) { return g->beta == 0.0f && g->k > LIN_KC_MAX; }

int cpu_linear_gemm(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb,
                    mpx_arg C, int ldc)
{
    return cpu_linear_gemm_bias(be, pool, g, A, lda, B, ldb, C, ldc, NULL);
}

int cpu_linear_gemm_bias(cpu_be *be, cpu_pool *pool, const mpx_gemm *g, mpx_arg A, int lda, mpx_arg B, int ldb,
                         mpx_arg C, int ldc, const float *bias)
{
    if (C.t != MPX_F32 && cpu_linear_gemm_cuts_k(g)) return -1;   /* the running sums need fp32 */
    if (bias && (C.t != MPX_F32 || g->beta != 0.0f)) return -1;
    lin s = { .be = be, .m = g->m, .n = g->n, .k = g->k, .alpha = g->alpha, .beta = g->beta, .a = A.p, .b = B.p,
              .at = A, .bt = B, .ct = C, .bias = bias,
              .a_rs = g->trans_a ? 1 : (size_t)lda, .a_ks = g->trans_a ? (size_t)lda : 1,
              .b_ks = g->trans_b ? 1 : (size_t)ldb, .b_cs = g->trans_b ? (size_t)ldb : 1, .c = C.t == MPX_F32 ? C.p : NULL,
              .ldc = (size_t)ldc };
    if (lin_isa_of(be->linear_gemm, &s.isa)) return -1;
    /* K blocks of equal size (one when beta != 0: C keeps its value to the end) */
    int nk = g->beta != 0.0f ? 1 : (g->k + LIN_KC_MAX - 1) / LIN_KC_MAX;
    s.kc = (g->k + nk - 1) / nk;
    nk = (g->k + s.kc - 1) / s.kc;
    s.np = ceil_to(g->n, s.isa.nr);
    s.nc = LIN_B_BLOCK_FLOATS / s.kc / s.isa.nr * s.isa.nr;
    if (s.nc < s.isa.nr) s.nc = s.isa.nr;
    /* pieces along M (each packs its own rows of A; all share the packed B), along N when
     * M has fewer row tiles than there are threads */
    int threads = pool ? be->threads : 1, mt = (g->m + s.isa.mr - 1) / s.isa.mr, nt = s.np / s.isa.nr;
    int by_rows = mt >= threads || mt >= nt, dim = by_rows ? g->m : g->n, unit = by_rows ? s.isa.mr : s.isa.nr;
    int units = by_rows ? mt : nt, most = units / LIN_MIN_PIECE_TILES > threads ? units / LIN_MIN_PIECE_TILES : threads;
    int want = threads > 1 ? LIN_PIECES_PER_THREAD * threads : 1;
    int pieces = want < most ? want : most;
    if (pieces > units) pieces = units;
    int per = (units + pieces - 1) / pieces * unit;
    pieces = (dim + per - 1) / per;
    int slots = pieces < threads ? pieces : threads;   /* pieces running at once */
    size_t need = piece_floats(&s, by_rows ? per : g->m), bfloats = (size_t)nk * (size_t)s.kc * (size_t)s.np;
    void *local = NULL, *one[1];
    void **bufs = one;
    if (pool) {
        /* the backend's buffers, grown here on the calling thread: one per thread, then B
         * (without a pool the caller may be one of several threads: buffers of its own) */
        for (int p = 0; p < slots; p++)
            if (!lin_buf(be, p, need)) return -1;
        if (!(s.bpack = lin_buf(be, be->threads, bfloats))) return -1;
        bufs = be->lin_ws;
    } else {
        size_t bytes = ((need + bfloats) * sizeof(float) + 63) / 64 * 64;
        if (!(local = aligned_alloc(64, bytes))) return -1;
        one[0] = local;
        s.bpack = (float *)local + need;
    }
    size_t panels = (size_t)nk * (size_t)(s.np / s.isa.nr);
    if (pool && threads > 1 && panels > 1) cpu_pool_run(pool, panels, (panels + 4 * (size_t)threads - 1) / (4 * (size_t)threads), pack_b_panels, &s);
    else pack_b_panels(&s, 0, panels);
    lin_job job = { &s, by_rows, per, dim, bufs, NULL, 1 };
    if (pieces > 1) {
        for (int i = 0; i < slots; i++) atomic_store(&be->lin_taken[i], 0);
        job.taken = be->lin_taken;
        job.slots = slots;
        cpu_pool_run_pieces(pool, (size_t)pieces, 1, lin_pieces, &job);
    } else lin_pieces(&job, 0, 1);
    free(local);
    return 0;
}
