// Whole-row kernels of the sampler over a vocabulary of logits: maximum,
// argmax and the exponentiated weights of a draw. Written with eight-lane
// vector types that compile to AVX2 where the CPU has it (picked at run time)
// and to two SSE halves elsewhere; each lane does the same IEEE operations as
// the scalar tail (ISO C: no contraction into FMAs), so results do not depend
// on the path taken.
#include "engine/sampler_row.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

// The eight-lane helpers are always inlined, so no call passes a vector
// (at any optimization level) and the ABI note about 32-byte vectors without
// AVX does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

typedef float vf8 __attribute__((vector_size(32)));
typedef int32_t vi8 __attribute__((vector_size(32)));

#define EXP_SHIFTER 12582912.0f // 1.5 * 2^23: adding it rounds to an integer
#define EXP_SHIFTER_BITS 0x4B400000
#define EXP_MIN -87.0f // exp(-87) is still a normal float
#define LOG2E 1.44269504f
#define LN2_HI 0.693145752f
#define LN2_LO 1.42860677e-6f

// exp(r) for |r| <= ln2 / 2: Taylor polynomial of degree 6, Horner's order.
#define EXP_POLY(r)                                                                                \
    (1.0f +                                                                                        \
     (r) * (1.0f + (r) * (0.5f + (r) * (0.166666672f +                                             \
                                        (r) * (0.0416666716f +                                     \
                                               (r) * (0.00833333377f + (r)*0.00138888892f))))))

// exp(x) for x <= 0 to about 1 ulp, 0 below EXP_MIN (and for -inf):
// x = n ln2 + r, 2^n put in the exponent bits (n >= -126: a normal float).
static inline __attribute__((always_inline)) float exp_nonpos(float x)
{
    float xc = x < EXP_MIN ? EXP_MIN : x;
    float t = xc * LOG2E + EXP_SHIFTER;
    float n = t - EXP_SHIFTER;
    int32_t bits;
    memcpy(&bits, &t, sizeof bits);
    bits = (bits - EXP_SHIFTER_BITS + 127) * (1 << 23);
    float r = (xc - n * LN2_HI) - n * LN2_LO;
    float p = EXP_POLY(r), scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < EXP_MIN ? 0.0f : p * scale;
}

static inline __attribute__((always_inline)) vf8 vf8_set1(float x)
{
    return (vf8){x, x, x, x, x, x, x, x};
}

static inline __attribute__((always_inline)) vf8 vf8_load(const float *p)
{
    vf8 v;
    memcpy(&v, p, sizeof v);
    return v;
}

// a where mask, else b (mask lanes all ones or all zeros).
static inline __attribute__((always_inline)) vf8 vf8_select(vi8 mask, vf8 a, vf8 b)
{
    return (vf8)((mask & (vi8)a) | (~mask & (vi8)b));
}

// exp_nonpos() on eight lanes, the same operations in the same order.
static inline __attribute__((always_inline)) vf8 vf8_exp_nonpos(vf8 x)
{
    vi8 low = x < vf8_set1(EXP_MIN);
    vf8 xc = vf8_select(low, vf8_set1(EXP_MIN), x);
    vf8 t = xc * LOG2E + EXP_SHIFTER;
    vf8 n = t - EXP_SHIFTER;
    vi8 bits = ((vi8)t - EXP_SHIFTER_BITS + 127) << 23;
    vf8 r = (xc - n * LN2_HI) - n * LN2_LO;
    vf8 p = EXP_POLY(r) * (vf8)bits;
    return vf8_select(low, vf8_set1(0.0f), p);
}

// ---- maximum and argmax ----

// Four vectors a step, each into its own running maximum: one running
// maximum would make every step wait on the last one's compare and select.
// The maximum is exact whatever the order, so the result does not change.
#define ROW_LANES 32

static inline __attribute__((always_inline)) float row_max_body(const float *x, int n)
{
    vf8 m[4] = {vf8_set1(-INFINITY), vf8_set1(-INFINITY), vf8_set1(-INFINITY), vf8_set1(-INFINITY)};
    int i = 0;
    for (; i + ROW_LANES <= n; i += ROW_LANES)
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            vf8 v = vf8_load(x + i + 8 * a);
            m[a] = vf8_select(v > m[a], v, m[a]);
        }
    for (; i + 8 <= n; i += 8) {
        vf8 v = vf8_load(x + i);
        m[0] = vf8_select(v > m[0], v, m[0]);
    }
    float best = -INFINITY;
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
        for (int j = 0; j < 8; j++)
            best = m[a][j] > best ? m[a][j] : best;
    for (; i < n; i++)
        best = x[i] > best ? x[i] : best;
    return best;
}

// One pass: each lane keeps its largest value and the first index where it
// saw it (a strict compare, and a lane's indices only grow); the first index
// of the largest value is then the least index among the lanes that hold it.
// NaN never compares greater, so it is ignored, as in row_max_body().
static inline __attribute__((always_inline)) int32_t row_argmax_body(const float *x, int n)
{
    vf8 m[4];
    vi8 at[4], step = {0, 1, 2, 3, 4, 5, 6, 7};
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++) {
        m[a] = vf8_set1(-INFINITY);
        at[a] = (vi8){0} - 1;
    }
    int i = 0;
    for (; i + ROW_LANES <= n; i += ROW_LANES)
#pragma GCC unroll 4
        for (int a = 0; a < 4; a++) {
            vf8 v = vf8_load(x + i + 8 * a);
            vi8 gt = v > m[a];
            m[a] = vf8_select(gt, v, m[a]);
            at[a] = (gt & (step + (i + 8 * a))) | (~gt & at[a]);
        }
    for (; i + 8 <= n; i += 8) {
        vf8 v = vf8_load(x + i);
        vi8 gt = v > m[0];
        m[0] = vf8_select(gt, v, m[0]);
        at[0] = (gt & (step + i)) | (~gt & at[0]);
    }
    float best = -INFINITY;
    int32_t best_at = -1;
#pragma GCC unroll 4
    for (int a = 0; a < 4; a++)
        for (int j = 0; j < 8; j++)
            if (m[a][j] > best || (m[a][j] == best && best_at >= 0 && at[a][j] < best_at)) {
                best = m[a][j];
                best_at = at[a][j];
            }
    for (; i < n; i++)
        if (x[i] > best) {
            best = x[i];
            best_at = i;
        }
    if (best_at >= 0)
        return best_at;
    // Nothing above -inf: the first -inf, as the largest value there is
    // (0 when the row is all NaN).
    for (int32_t j = 0; j < n; j++)
        if (x[j] == -INFINITY)
            return j;
    return 0;
}

// ---- weights ----

static inline __attribute__((always_inline)) double weights_body(const float *x, int n, float scale,
                                                                 float vmax, float *w, double *bsum)
{
    vf8 vs = vf8_set1(scale), vm = vf8_set1(vmax);
    int n_full = n / SAMPLER_BLOCK;
    double total = 0;
    for (int b = 0; b <= n_full; b++) {
        int i0 = b * SAMPLER_BLOCK, i1 = b < n_full ? i0 + SAMPLER_BLOCK : n;
        if (i0 == i1)
            break;
        // Eight double lanes per block, combined in a fixed order.
        double lane[8] = {0};
        if (b < n_full) {
            for (int i = i0; i < i1; i += 8) {
                vf8 e = vf8_exp_nonpos(vf8_load(x + i) * vs - vm);
                memcpy(w + i, &e, sizeof e);
                for (int j = 0; j < 8; j++)
                    lane[j] += (double)e[j];
            }
        } else {
            for (int i = i0; i < i1; i++) {
                w[i] = exp_nonpos(x[i] * scale - vmax);
                lane[(i - i0) % 8] += (double)w[i];
            }
        }
        bsum[b] = ((lane[0] + lane[1]) + (lane[2] + lane[3])) +
                  ((lane[4] + lane[5]) + (lane[6] + lane[7]));
        total += bsum[b];
    }
    return total;
}

// ---- dispatch ----

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define SAMPLER_ROW_AVX2 1
__attribute__((target("avx2"))) static float row_max_avx2(const float *x, int n)
{
    return row_max_body(x, n);
}

__attribute__((target("avx2"))) static double weights_avx2(const float *x, int n, float scale,
                                                           float vmax, float *w, double *bsum)
{
    return weights_body(x, n, scale, vmax, w, bsum);
}

__attribute__((target("avx2"))) static int32_t row_argmax_avx2(const float *x, int n)
{
    return row_argmax_body(x, n);
}

static bool has_avx2(void)
{
    return __builtin_cpu_supports("avx2");
}
#endif

float sampler_row_max(const float *x, int n)
{
#ifdef SAMPLER_ROW_AVX2
    if (has_avx2())
        return row_max_avx2(x, n);
#endif
    return row_max_body(x, n);
}

int32_t sampler_row_argmax(const float *x, int n)
{
#ifdef SAMPLER_ROW_AVX2
    if (has_avx2())
        return row_argmax_avx2(x, n);
#endif
    return row_argmax_body(x, n);
}

double sampler_row_weights(const float *x, int n, float scale, float vmax, float *w, double *bsum)
{
#ifdef SAMPLER_ROW_AVX2
    if (has_avx2())
        return weights_avx2(x, n, scale, vmax, w, bsum);
#endif
    return weights_body(x, n, scale, vmax, w, bsum);
}
