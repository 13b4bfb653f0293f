/* Causal conv1d on CUDA against the CPU kernel: forward, final states and every gradient,
 * over K = 1 … 16, the edge shapes, both layouts and odd strides, misaligned views, f32,
 * bf16 and f16; and bitwise-repeatable gradients. Skipped without a GPU. */
#include "cuda_util.h"
#include "kernels/conv1d.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

typedef enum { LAYOUT_CHANNEL_FIRST, LAYOUT_CHANNEL_LAST, LAYOUT_STRIDED, LAYOUT_MISALIGNED } layout;
static const char *const layout_names[] = {"channel-first", "channel-last", "strided", "misaligned"};

typedef struct {
    int64_t B, C, L, K;
    layout lay;
    tg_dtype dtype;
    bool bias, silu, initial, final;
    bool strided_weight; /* the weight a transposed view of a (K, C) tensor: strides (1, C) */
} conv_case;

/* A CPU (B, C, L) tensor of random values in the asked layout, as a gradient-requiring leaf. */
static tg_tensor *x_in_layout(tg_tape *tape, const conv_case *cc)
{
    int64_t B = cc->B, C = cc->C, L = cc->L, shape[3] = {B, C, L};
    tg_tensor *x;
    switch (cc->lay) {
    case LAYOUT_CHANNEL_LAST: {
        tg_tensor *base = tt_randn(tape, cc->dtype, 3, (int64_t[]){B, L, C});
        x = tg_view(tape, base, 3, shape, (int64_t[]){L * C, 1, C}, 0);
        break;
    }
    case LAYOUT_STRIDED: /* every other step, channels and batch swapped in memory */
        return tt_strided_leaf(tape, cc->dtype, 3, shape);
    case LAYOUT_MISALIGNED: { /* rows padded by one element and starting one element in */
        tg_tensor *base = tt_randn(tape, cc->dtype, 1, (int64_t[]){B * C * (L + 1) + 1});
        x = tg_view(tape, base, 3, shape, (int64_t[]){C * (L + 1), L + 1, 1}, 1);
        break;
    }
    default: x = tt_randn(tape, cc->dtype, 3, shape);
    }
    cr_assert_eq(tg_set_requires_grad(x, true), TG_OK);
    return x;
}

/* The (C, K) weight as a gradient-requiring leaf: contiguous, or a transposed view. */
static tg_tensor *weight_leaf(tg_tape *tape, const conv_case *cc)
{
    if (!cc->strided_weight) return tt_leaf(tape, cc->dtype, 2, (int64_t[]){cc->C, cc->K});
    tg_tensor *base = tt_randn(tape, cc->dtype, 2, (int64_t[]){cc->K, cc->C});
    tg_tensor *w = tg_view(tape, base, 2, (int64_t[]){cc->C, cc->K}, (int64_t[]){1, cc->C}, 0);
    cr_assert(w, "%s", tg_last_error());
    cr_assert_eq(tg_set_requires_grad(w, true), TG_OK);
    return w;
}

static void describe(const conv_case *cc, char *buf, size_t size)
{
    snprintf(buf, size, "B=%lld C=%lld L=%lld K=%lld %s %s%s%s%s%s%s", (long long)cc->B, (long long)cc->C,
             (long long)cc->L, (long long)cc->K, layout_names[cc->lay], tg_dtype_name(cc->dtype),
             cc->bias ? " bias" : "", cc->silu ? " silu" : "", cc->initial ? " initial" : "", cc->final ? " final" : "",
             cc->strided_weight ? " transposed weight" : "");
}

/* Runs the conv on the given inputs and backward from out (and final states) with the given
 * output gradients. inputs: x, w, bias, init; grads: dout, dfinal. */
/* Whether a failed CUDA conv may be a forced kernel refusing the call (then run gives NULL). */
static bool refusal_expected;

static bool refused(void)
{
    cr_assert(refusal_expected && strstr(tg_last_error(), "cannot take"), "%s", tg_last_error());
    return true;
}

static tg_tensor *run(tg_tape *tape, const conv_case *cc, tg_tensor *const *in, tg_tensor *const *grads,
                      tg_tensor **final_states)
{
    tg_causal_conv1d_options opt = {cc->bias ? in[2] : NULL, cc->initial ? in[3] : NULL,
                                    cc->silu ? TG_ACT_SILU : TG_ACT_NONE, cc->final ? final_states : NULL};
    tg_tensor *out = tg_causal_conv1d(tape, in[0], in[1], &opt);
    if (!out && refused()) return NULL;
    /* loss = Σ out·dout (+ Σ final·dfinal): its gradient seeds both outputs at once */
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, out, grads[0]));
    if (cc->final) loss = tg_add(tape, loss, tg_sum_all(tape, tg_mul(tape, *final_states, grads[1])));
    cr_assert(loss, "%s", tg_last_error());
    if (tg_backward(tape, loss) != TG_OK && refused()) return NULL;
    return out;
}

/* What a case is checked on: the output, the final states and the four input gradients. */
enum { R_OUT, R_FINAL, R_DX, R_DWEIGHT, R_DBIAS, R_DINITIAL, N_RESULTS };
static const char *const result_names[N_RESULTS] = {"out", "final states", "dx", "dweight", "dbias", "dinitial"};

/* Runs the case (run above) and lists its results; NULL for those the case does not make. */
static void run_case(tg_tape *tape, const conv_case *cc, tg_tensor *const *in, tg_tensor *const *grads,
                     tg_tensor **results)
{
    tg_tensor *final_states = NULL;
    results[R_OUT] = run(tape, cc, in, grads, &final_states);
    if (!results[R_OUT]) return; /* refused */
    results[R_FINAL] = cc->final && cc->K > 1 ? final_states : NULL;
    for (int i = 0; i < 4; i++) {
        bool used = i < 2 || (i == 2 && cc->bias) || (i == 3 && cc->initial && cc->K > 1);
        results[R_DX + i] = used ? in[i]->grad : NULL;
    }
}

/* For every result, Σ|term| of the sums that make its elements (cu_assert_within_terms):
 * the case run again on the CPU, in f64, on the absolute values of the inputs and of the
 * output gradients, with no activation. Every term of out or of a gradient is then replaced
 * by its magnitude, except for SiLU: |silu(z)| ≤ |z| and |silu'(z)| ≤ 1.1, so the factor
 * 1.5 covers it with room for the slope being taken at a z that has its own rounding. */
static void term_magnitudes(tg_tape *tape, conv_case cc, tg_tensor *const *in, tg_tensor *const *grads,
                            tg_tensor **terms)
{
    tg_tensor *abs_in[4], *abs_grads[2];
    for (int i = 0; i < 4; i++) {
        abs_in[i] = tt_f64_copy(tape, in[i], true);
        cr_assert_eq(tg_set_requires_grad(abs_in[i], true), TG_OK, "%s", tg_last_error());
    }
    for (int i = 0; i < 2; i++) abs_grads[i] = tt_f64_copy(tape, grads[i], true);
    const double slope = cc.silu ? 1.5 : 1.0;
    cc.dtype = TG_F64;
    cc.silu = false;
    run_case(tape, &cc, abs_in, abs_grads, terms);
    for (int r = 0; r < N_RESULTS; r++)
        if (terms[r] && slope != 1.0) terms[r] = tg_scale(tape, terms[r], slope);
}

/* Each result is held to its dtype's tolerance relative to the magnitude of its terms, not
 * only to its own size: with C = 1 dbias is one sum of B·L terms, and with L = 1 dx is
 * w·g + dfinal, and either can land near zero, where the kernel's float32 rounding is
 * legitimately a large relative error. A wrong result still misses by whole terms: a wrong
 * tap or a shift by one step by thousands of times the float32 limit, and even one step
 * left out of every row's sums by several times it at the longest rows here. */
/* check_case's work; false (nothing checked) when a forced kernel refused the call. */
static bool try_case(conv_case cc)
{
    char what[160], item[200];
    describe(&cc, what, sizeof what);
    tg_tape *tape = tg_tape_create();
    tg_tensor *cpu[4] = {x_in_layout(tape, &cc), weight_leaf(tape, &cc), tt_leaf(tape, cc.dtype, 1, (int64_t[]){cc.C}),
                         tt_leaf(tape, cc.dtype, 3, (int64_t[]){cc.B, cc.C, cc.K - 1})};
    tg_tensor *gcpu[2] = {tt_randn(tape, cc.dtype, 3, (int64_t[]){cc.B, cc.C, cc.L}),
                          tt_randn(tape, cc.dtype, 3, (int64_t[]){cc.B, cc.C, cc.K - 1})};
    tg_tensor *gpu[4], *ggpu[2];
    for (int i = 0; i < 4; i++) gpu[i] = tt_cuda_twin(tape, cpu[i], i == 0 || (i == 1 && cc.strided_weight));
    for (int i = 0; i < 2; i++) ggpu[i] = tt_cuda_twin(tape, gcpu[i], false);

    tg_tensor *on_cpu[N_RESULTS], *on_gpu[N_RESULTS], *terms[N_RESULTS];
    run_case(tape, &cc, cpu, gcpu, on_cpu);
    run_case(tape, &cc, gpu, ggpu, on_gpu);
    if (!on_gpu[R_OUT]) {
        tg_tape_free(tape);
        return false;
    }
    term_magnitudes(tape, cc, cpu, gcpu, terms);
    cr_assert_eq(on_gpu[R_OUT]->device, TG_DEVICE_CUDA);
    if (cc.lay == LAYOUT_CHANNEL_LAST && cc.C > 1 && cc.L > 1)
        cr_assert_eq(on_gpu[R_OUT]->strides[1], 1, "%s: layout kept", what);
    for (int r = 0; r < N_RESULTS; r++) {
        if (!on_cpu[r]) continue;
        snprintf(item, sizeof item, "%s: %s", what, result_names[r]);
        cu_assert_within_terms(tape, item, on_gpu[r], on_cpu[r], terms[r]);
    }
    tg_tape_free(tape);
    return true;
}

static void check_case(conv_case cc) { cr_assert(try_case(cc)); }

static conv_case random_case(tg_dtype dtype)
{
    return (conv_case){
        tt_randint(1, 3), tt_randint(1, 70), tt_randint(1, 600), tt_randint(1, 16), (layout)tt_randint(0, 3), dtype,
        tt_randint(0, 1), tt_randint(0, 1),  tt_randint(0, 1),   tt_randint(0, 1)};
}

Test(cuda_conv1d, every_width_from_1_to_16)
{
    tt_require_cuda();
    for (int64_t K = 1; K <= 16; K++)
        for (int lay = 0; lay < 2; lay++)
            check_case((conv_case){2, 5, 37 + K, K, (layout)lay, TG_F32, true, true, true, true});
}

/* bf16 rows at every K (from K = 5 on the tensor-core kernels): lengths that end inside a
 * 16-step segment, rows of several spans, rows shorter than K, aligned and misaligned. */
Test(cuda_conv1d, bf16_rows_at_every_width)
{
    tt_require_cuda();
    for (int64_t K = 1; K <= 16; K++)
        for (int lay = 0; lay < 4; lay += 3) {
            check_case((conv_case){2, 5, 37 + K, K, (layout)lay, TG_BF16, true, true, true, true});
            check_case((conv_case){1, 3, 4096 + 16 * K + 5, K, (layout)lay, TG_BF16, K % 2 == 0, K % 3 != 0, K % 4 == 0,
                                   true});
            check_case((conv_case){3, 2, K > 1 ? K - 1 : 1, K, (layout)lay, TG_BF16, true, true, true, true});
        }
}

/* f32 channel-first rows at K = 9 … 16 with SiLU, where the float backward shares each span's
 * g among its threads through shared memory and the block's last lanes build the K − 1 steps
 * after the span: rows of several 1024-step spans ending inside a span and inside a vector,
 * rows of exactly one span (staged whole), aligned and misaligned, with and without initial
 * states. */
Test(cuda_conv1d, f32_rows_with_silu_at_wide_widths)
{
    tt_require_cuda();
    for (int64_t K = 9; K <= 16; K++)
        for (int lay = 0; lay < 4; lay += 3) {
            check_case(
                (conv_case){2, 3, 3 * 1024 + 64 * K + 3, K, (layout)lay, TG_F32, K % 2 == 0, true, K % 3 == 0, true});
            check_case((conv_case){4, 2, 1024, K, (layout)lay, TG_F32, true, true, false, K % 2 == 1});
        }
}

/* Channel-last 16-bit data with C a multiple of 8 at every K (the stream kernels: each warp
 * walks a segment of steps through a ring of chunks): the seams between segments, a row
 * ending inside a chunk, rows shorter than K, warps wholly and partly inside C, both 16-bit
 * types. */
Test(cuda_conv1d, channel_last_16bit_at_every_width)
{
    tt_require_cuda();
    for (int64_t K = 1; K <= 16; K++) {
        check_case((conv_case){2, 8, 37 + K, K, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true});
        check_case((conv_case){1, 72, 1000 + 16 * K + 3, K, LAYOUT_CHANNEL_LAST, K % 2 ? TG_F16 : TG_BF16, K % 2 == 0,
                               K % 3 != 0, true, true});
        check_case((conv_case){3, 8, K > 1 ? K - 1 : 1, K, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true});
    }
}

/* bf16 channel-last data at K = 9 … 16 (the backward on tensor cores: blocks of 32 channels
 * walk segments of 128-step tiles, dx 16 steps behind g): C not a multiple of 32 (blocks
 * whose last warps have no channels), rows ending inside a tile and within 16 steps of a
 * segment's end, rows shorter than a tile and than K, the segments' seams, and a grid large
 * enough that its segments are several tiles long (the rings wrap). */
Test(cuda_conv1d, channel_last_bf16_at_wide_widths)
{
    tt_require_cuda();
    for (int64_t K = 9; K <= 16; K++) {
        check_case((conv_case){2, 40, 700 + K, K, LAYOUT_CHANNEL_LAST, TG_BF16, K % 2 == 0, K % 3 != 0, K % 4 == 0,
                               K % 2 == 1});
        check_case(
            (conv_case){1, 96, 2560 - 16 + K % 3, K, LAYOUT_CHANNEL_LAST, TG_BF16, true, K % 2 == 0, true, false});
        check_case((conv_case){3, 8, K % 2 ? 130 : K - 3, K, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true});
    }
    check_case((conv_case){4, 512, 9 * 512 + 37, 16, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true});
    check_case((conv_case){4, 512, 9 * 512 - 5, 12, LAYOUT_CHANNEL_LAST, TG_BF16, false, false, false, false});
}

Test(cuda_conv1d, edge_shapes)
{
    tt_require_cuda();
    const int64_t edges[][4] = {
        /* B  C  L  K */
        {1, 1, 1, 1},    {1, 1, 1, 4}, {1, 1, 2, 4},  {1, 3, 3, 8},      {1, 1, 15, 16},
        {3, 1, 1000, 4}, {1, 9, 1, 3}, {2, 33, 7, 2}, {1, 130, 5000, 4}, {4, 64, 2049, 3},
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (int lay = 0; lay < 4; lay++)
            check_case((conv_case){edges[e][0], edges[e][1], edges[e][2], edges[e][3], (layout)lay, TG_F32,
                                   tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1)});
}

Test(cuda_conv1d, random_cases_f32_bf16_f16)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F16};
    for (int d = 0; d < 3; d++)
        for (int r = 0; r < 12; r++) check_case(random_case(dtypes[d]));
}

Test(cuda_conv1d, long_rows_and_many_channels)
{
    tt_require_cuda();
    const tg_dtype dtypes[2] = {TG_F32, TG_BF16};
    for (int d = 0; d < 2; d++)
        for (int lay = 0; lay < 2; lay++) {
            check_case((conv_case){2, 96, 8192 + 3, 4, (layout)lay, dtypes[d], true, true, false, false});
            check_case((conv_case){1, 1536, 300, 8, (layout)lay, dtypes[d], true, true, true, true});
            /* short rows, many of them: a backward block walks several rows of its channel */
            check_case((conv_case){12, 40, 2048, 4, (layout)lay, dtypes[d], true, true, true, true});
        }
}

/* Short aligned channel-first rows whose length is whole 16-byte vectors, without initial
 * states: the backward stages each row as one bulk copy per tensor and writes the zeros
 * around it once per block, and a block walks all B rows of its channel, more rows than it
 * has buffers, so every buffer is filled again. Rows shorter than a block's span and exactly
 * one span; the float and (bf16, K ≥ 5) tensor-core backwards; with and without the final
 * states' gradient. */
Test(cuda_conv1d, rows_staged_whole)
{
    tt_require_cuda();
    const tg_dtype dtypes[3] = {TG_F32, TG_BF16, TG_F16};
    for (int d = 0; d < 3; d++) {
        check_case((conv_case){6, 7, 2048, 4, LAYOUT_CHANNEL_FIRST, dtypes[d], true, true, false, true});
        check_case((conv_case){5, 9, 1000, 8, LAYOUT_CHANNEL_FIRST, dtypes[d], true, true, false, false});
        check_case((conv_case){7, 3, 64, 3, LAYOUT_CHANNEL_FIRST, dtypes[d], false, true, false, true});
        check_case((conv_case){5, 4, 4096, 16, LAYOUT_CHANNEL_FIRST, dtypes[d], true, false, false, true});
    }
    /* Enough channels that a backward block takes its channel's whole list of 12 or 20 rows
     * (more than the usual 8 spans per block) on GPUs of about 40 to 150 SMs (an H200 has
     * 132): 1200 warps in all, one block per channel resident at once. */
    check_case((conv_case){20, 600, 1024, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true});
    check_case((conv_case){12, 300, 1024, 3, LAYOUT_CHANNEL_FIRST, TG_F32, false, true, false, false});
}

/* Rows shorter than a warp's steps (L a multiple of a thread's steps, under 256 in f32 and
 * 512 in 16-bit data) go side by side, R rows to a block in the forward and to a span in the
 * backward: B not a multiple of R leaves the last group short, several spans per block reuse
 * its buffers, several blocks per channel sum their partials (150 rows of 256 steps: 19 spans
 * of 8 rows), at L = 8 (f32) or 16 (16-bit) a block holds up to 128 rows of one thread each,
 * rows of 3 or 5 threads leave the last threads of a block idle and cross warps, and bf16 at
 * K >= 5 takes the float backward. With initial states the forward still goes side by side
 * (the backward then one row to a span). Rows of a warp's steps or more stay one to a span. */
Test(cuda_conv1d, short_rows_side_by_side)
{
    tt_require_cuda();
    const conv_case cases[] = {
        {50, 3, 128, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
        {150, 4, 256, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
        {7, 5, 256, 16, LAYOUT_CHANNEL_FIRST, TG_F16, false, true, false, true},
        {9, 6, 96, 3, LAYOUT_CHANNEL_FIRST, TG_BF16, true, false, false, false},
        {300, 2, 16, 2, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
        {260, 3, 8, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
        /* wide halos: fewer rows to a span, so the buffers fit 48 KB */
        {200, 2, 16, 16, LAYOUT_CHANNEL_FIRST, TG_F16, true, true, false, true},
        {150, 2, 8, 16, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
        {45, 3, 48, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true},
        {70, 2, 48, 3, LAYOUT_CHANNEL_FIRST, TG_BF16, false, true, false, true},
        {33, 3, 40, 8, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
        {20, 4, 128, 8, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
        {6, 3, 256, 16, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true},
        {40, 3, 64, 8, LAYOUT_CHANNEL_FIRST, TG_F16, true, true, true, false},
        /* a warp's steps or more: one row to a span (the forward takes rows of a warp's
         * steps side by side where it would take them one to a block: f32, 16-bit at K <= 2) */
        {50, 3, 256, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
        {13, 2, 256, 8, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, true, false},
        {9, 3, 512, 2, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
        {33, 4, 1024, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
        {7, 5, 512, 16, LAYOUT_CHANNEL_FIRST, TG_F16, false, true, false, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i]);
}

/* Short 16-bit rows (one pass of the direct forward): from K = 3 on a forward block takes 2
 * or 4 rows of its channel in turn when the rows are aligned and their length a multiple of
 * 16 steps, so B that is not a multiple of the group leaves the last group short; other rows
 * take the one-row path. With the history of initial states. */
Test(cuda_conv1d, short_16bit_rows_in_groups)
{
    tt_require_cuda();
    const int64_t widths[4] = {3, 4, 8, 16}, batches[4] = {1, 3, 5, 9};
    for (int k = 0; k < 4; k++) {
        const tg_dtype dtype = k % 2 ? TG_F16 : TG_BF16;
        check_case((conv_case){batches[k], 6, 16 * tt_randint(1, 128), widths[k], LAYOUT_CHANNEL_FIRST, dtype, true,
                               true, true, tt_randint(0, 1)});
        check_case((conv_case){batches[k], 6, tt_randint(1, 2048), widths[k], LAYOUT_MISALIGNED, dtype, true, true,
                               true, tt_randint(0, 1)});
    }
}

/* The grouped forward's grid has a row of blocks per group of rows, at most 65535 of them:
 * 131070 rows of 2 to a block fill it, 131071 take the one-row path instead (rows of a warp's
 * steps, 512 in 16-bit data: shorter ones go side by side). */
Test(cuda_conv1d, grouped_forward_at_the_grid_limit)
{
    tt_require_cuda();
    check_case((conv_case){131070, 1, 512, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, false});
    check_case((conv_case){131071, 1, 512, 3, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true});
}

/* The kernels read the taps through the weight's strides: a transposed weight (strides 1, C)
 * on every path (grouped and one-row forward, row, tensor-core, stream and tile backward). */
Test(cuda_conv1d, weights_as_a_transposed_view)
{
    tt_require_cuda();
    const conv_case cases[] = {
        {3, 6, 512, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true, true},
        {2, 5, 700, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true, true},
        {2, 4, 4096 + 48, 8, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, false, true},
        {3, 5, 256, 16, LAYOUT_CHANNEL_FIRST, TG_F16, false, true, true, true, true},
        {2, 64, 300, 8, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true, true},
        {2, 7, 100, 3, LAYOUT_STRIDED, TG_F32, true, false, true, true, true},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) check_case(cases[i]);
}

/* A channel's spans split over several blocks, whose dw and dbias partials a second kernel
 * adds up: a thread per output up to 8 blocks, a warp per output beyond. Spans are 1024 steps
 * in f32 and 2048 in 16-bit data (K <= 4), 8 to a block, so B * ceil(L / span) spans make 2, 3,
 * 8, 9 and 33 blocks per channel here. The bf16 tensor-core backward (K = 8) sizes its blocks to
 * the waves it fills: 3 blocks per channel on an H200. */
Test(cuda_conv1d, weight_sums_from_several_blocks)
{
    tt_require_cuda();
    const int64_t batches[5] = {4, 6, 16, 18, 33}, lengths[5] = {3000, 3000, 4000, 4000, 8000};
    for (int i = 0; i < 5; i++) {
        check_case((conv_case){batches[i], 3, lengths[i], 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, tt_randint(0, 1),
                               true});
        check_case((conv_case){batches[i], 3, 2 * lengths[i], 3, LAYOUT_CHANNEL_FIRST, TG_BF16, tt_randint(0, 1), true,
                               false, true});
    }
    check_case((conv_case){6, 8, 4 * 4096, 8, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true});
}

/* Long, 16-byte aligned 16-bit rows (from K = 5 on the staged forward's case, at K = 3 the
 * direct one's): the history enters the first span of each row, and the last span of a row
 * is partly past its end. */
Test(cuda_conv1d, long_aligned_16bit_rows_with_states)
{
    tt_require_cuda();
    const tg_dtype dtypes[2] = {TG_BF16, TG_F16};
    const int64_t widths[3] = {3, 8, 16};
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 3; k++)
            check_case((conv_case){2, 24, 8192 + 8 * tt_randint(1, 300), widths[k], LAYOUT_CHANNEL_FIRST, dtypes[d],
                                   tt_randint(0, 1), tt_randint(0, 1), true, true});
}

/* Aligned f32 rows at K = 5–16 (from K = 9 on the staged forward's case, from full blocks of
 * 1024 steps on): rows of one block's steps, of a few blocks' ending inside a span, and of
 * more than 8192 steps; the history enters each row's first span. */
Test(cuda_conv1d, aligned_f32_rows_at_wide_widths)
{
    tt_require_cuda();
    for (int64_t K = 5; K <= 16; K++) {
        check_case((conv_case){3, 4, 1024, K, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, true, K % 2 == 0});
        check_case((conv_case){2, 5, 1024 * tt_randint(1, 6) + 4 * tt_randint(1, 255), K, LAYOUT_CHANNEL_FIRST, TG_F32,
                               tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1), true});
        check_case((conv_case){2, 3, 8192 + 4 * tt_randint(1, 700), K, LAYOUT_CHANNEL_FIRST, TG_F32, true,
                               tt_randint(0, 1), true, tt_randint(0, 1)});
    }
}

/* The bf16 tensor-core backward (K ≥ 5), and the f32 one at K = 9–16 with SiLU, size their
 * grids to whole waves of resident blocks, so a block may take more spans than a row has: on
 * an H200 each bf16 block here takes its channel's 12 spans of 4096 steps across all 4 rows,
 * and each f32 block 12 of its 36 spans of 1024 steps, the last span of each row partly past
 * its end. */
Test(cuda_conv1d, backward_blocks_across_rows)
{
    tt_require_cuda();
    check_case((conv_case){4, 300, 8200, 8, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true});
    check_case((conv_case){3, 200, 4096 * 3 + 24, 16, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true});
    check_case((conv_case){4, 300, 8200, 16, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, true, true});
    check_case((conv_case){2, 150, 4096 * 3 + 20, 12, LAYOUT_CHANNEL_FIRST, TG_F32, false, true, false, true});
}

/* 64-bit indexing: bf16 tensors of more than 2^31 elements (6 GB and 4 GB), channel-first
 * (the third channel's row starts at element 2^31) and channel-last (steps from 2^28 on lie
 * past it). x and dout are zero except in windows of steps, one near the start and one past
 * element 2^31; the zeros cut each window off, so that around it the big problem is a small
 * one the CPU solves (in f64, rounded to bf16 once): out and dx are checked there, dw and
 * dbias against the windows' sum. */
typedef struct {
    int64_t B, C, L, K;
    layout lay;
    int64_t starts[2]; /* the windows' first steps */
} big_case;

enum { kWindow = 300 };

/* t (CPU, f64) rounded to bf16. */
static tg_tensor *rounded_to_bf16(tg_tape *tape, const tg_tensor *t)
{
    tg_tensor *r = tg_empty(tape, TG_BF16, TG_DEVICE_CPU, t->ndim, t->shape);
    cr_assert_eq(tg_copy(r, t), TG_OK, "%s", tg_last_error());
    return r;
}

/* A zero-filled bf16 (B, C, L) tensor on the GPU in the case's layout. */
static tg_tensor *zeros_on_gpu(tg_tape *tape, const big_case *bc)
{
    const int64_t shape[3] = {bc->B, bc->C, bc->L};
    if (bc->lay != LAYOUT_CHANNEL_LAST) return tg_zeros(tape, TG_BF16, TG_DEVICE_CUDA, 3, shape);
    const int64_t base_shape[3] = {bc->B, bc->L, bc->C}, strides[3] = {bc->L * bc->C, 1, bc->C};
    return tg_view(tape, tg_zeros(tape, TG_BF16, TG_DEVICE_CUDA, 3, base_shape), 3, shape, strides, 0);
}

static void check_big_case(const big_case *bc)
{
    const int64_t B = bc->B, C = bc->C, L = bc->L, K = bc->K, H = K - 1;
    const int64_t len = kWindow + 4 * H; /* the small problem: [start − 2H, start + window + 2H) */
    char what[128];
    snprintf(what, sizeof what, "B=%lld C=%lld L=%lld K=%lld %s bf16", (long long)B, (long long)C, (long long)L,
             (long long)K, layout_names[bc->lay]);
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = zeros_on_gpu(tape, bc), *dout = zeros_on_gpu(tape, bc);
    cr_assert(x && dout, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_set_requires_grad(x, true), TG_OK, "%s", tg_last_error());
    tg_tensor *w_cpu = tt_leaf(tape, TG_BF16, 2, (int64_t[]){C, K}),
              *bias_cpu = tt_leaf(tape, TG_BF16, 1, (int64_t[]){C});
    tg_tensor *w = tt_cuda_twin(tape, w_cpu, false), *bias = tt_cuda_twin(tape, bias_cpu, false);
    tg_tensor *w64 = tt_f64_copy(tape, w_cpu, false), *bias64 = tt_f64_copy(tape, bias_cpu, false);
    cr_assert_eq(tg_set_requires_grad(w64, true), TG_OK);
    cr_assert_eq(tg_set_requires_grad(bias64, true), TG_OK);

    /* The windows' values, and the small problems that hold them. */
    tg_tensor *x_small[2], *dout_small[2];
    for (int k = 0; k < 2; k++) {
        const int64_t window_shape[3] = {B, C, kWindow}, small_shape[3] = {B, C, len};
        tg_tensor *xw = tt_randn(tape, TG_BF16, 3, window_shape), *dw = tt_randn(tape, TG_BF16, 3, window_shape);
        const int64_t start = bc->starts[k];
        cr_assert_eq(tg_copy(tg_slice(tape, x, 2, start, start + kWindow, 1), xw), TG_OK, "%s", tg_last_error());
        cr_assert_eq(tg_copy(tg_slice(tape, dout, 2, start, start + kWindow, 1), dw), TG_OK, "%s", tg_last_error());
        x_small[k] = tg_zeros(tape, TG_F64, TG_DEVICE_CPU, 3, small_shape);
        dout_small[k] = tg_zeros(tape, TG_F64, TG_DEVICE_CPU, 3, small_shape);
        cr_assert_eq(tg_copy(tg_slice(tape, x_small[k], 2, 2 * H, 2 * H + kWindow, 1), xw), TG_OK);
        cr_assert_eq(tg_copy(tg_slice(tape, dout_small[k], 2, 2 * H, 2 * H + kWindow, 1), dw), TG_OK);
        cr_assert_eq(tg_set_requires_grad(x_small[k], true), TG_OK);
    }

    tg_causal_conv1d_options opt = {bias, NULL, TG_ACT_SILU, NULL}, opt_cpu = {bias64, NULL, TG_ACT_SILU, NULL};
    tg_tensor *out = tg_causal_conv1d(tape, x, w, &opt);
    cr_assert(out, "%s: %s", what, tg_last_error());
    cr_assert_eq(tg_backward_with_grad(tape, out, dout), TG_OK, "%s: %s", what, tg_last_error());
    for (int k = 0; k < 2; k++) { /* the CPU's dw and dbias add up over both windows */
        tg_tensor *out_small = tg_causal_conv1d(tape, x_small[k], w64, &opt_cpu);
        cr_assert_eq(tg_backward_with_grad(tape, out_small, dout_small[k]), TG_OK, "%s", tg_last_error());
        const int64_t first = bc->starts[k] - 2 * H;
        char item[200];
        snprintf(item, sizeof item, "%s: out around step %lld", what, (long long)bc->starts[k]);
        cu_assert_close(tape, item, tg_slice(tape, out, 2, first, first + len, 1), rounded_to_bf16(tape, out_small));
        snprintf(item, sizeof item, "%s: dx around step %lld", what, (long long)bc->starts[k]);
        cu_assert_close(tape, item, tg_slice(tape, x->grad, 2, first, first + len, 1),
                        rounded_to_bf16(tape, x_small[k]->grad));
    }
    char item[200];
    snprintf(item, sizeof item, "%s: dweight", what);
    cu_assert_close(tape, item, w->grad, rounded_to_bf16(tape, w64->grad));
    snprintf(item, sizeof item, "%s: dbias", what);
    cu_assert_close(tape, item, bias->grad, rounded_to_bf16(tape, bias64->grad));
    tg_tape_free(tape);
}

Test(cuda_conv1d, tensors_beyond_2_31_elements)
{
    tt_require_cuda();
    /* About 35 GB at once (x, its gradient, out, dout, the backward's dx): skipped on a GPU
     * with less. */
    tg_tensor *probe = tg_tensor_new(TG_BF16, TG_DEVICE_CUDA, 1, (int64_t[]){(int64_t)18 << 30});
    if (!probe) cr_skip_test("needs about 36 GB of GPU memory");
    tg_tensor_free(probe);
    cr_assert_eq(tg_memory_empty_cache(), TG_OK);
    const int64_t L_first = (int64_t)1 << 30, L_last = ((int64_t)1 << 28) + 4096;
    const big_case cases[] = {
        {1, 3, L_first, 4, LAYOUT_CHANNEL_FIRST, {100, L_first - 2000}},
        {1, 3, L_first, 8, LAYOUT_CHANNEL_FIRST, {5000, L_first - 777}},
        {1, 8, L_last, 4, LAYOUT_CHANNEL_LAST, {64, L_last - 2000}},
        /* K > 4 channel-last: backward segments of 512 steps, the first window across the
         * boundary at step 512 */
        {1, 8, L_last, 8, LAYOUT_CHANNEL_LAST, {480, L_last - 2000}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        check_big_case(&cases[i]);
        cr_assert_eq(tg_memory_empty_cache(), TG_OK);
    }
}

#ifdef TG_HAVE_CUDA
/* A CUDA channel-last (B, C, L) view of a (B, L, C + pad) buffer whose every value is
 * `fill`; the buffer goes to *base. */
static tg_tensor *padded_channel_last(tg_tape *tape, tg_dtype dtype, int64_t B, int64_t C, int64_t L, int64_t pad,
                                      double fill, tg_tensor **base)
{
    *base = tg_empty(tape, dtype, TG_DEVICE_CUDA, 3, (int64_t[]){B, L, C + pad});
    cr_assert(*base && tg_fill(*base, fill) == TG_OK, "%s", tg_last_error());
    tg_tensor *t = tg_view(tape, *base, 3, (int64_t[]){B, C, L}, (int64_t[]){L * (C + pad), 1, C + pad}, 0);
    cr_assert(t, "%s", tg_last_error());
    return t;
}

/* The kernels' entry points, given channel-last outputs (out, dx) whose steps are not
 * 16-byte aligned (rows of C + 4 16-bit or C + 2 f32 values), give bit for bit what they give into aligned
 * ones, and write nothing between the rows: the channel-last kernels store whole 16-byte
 * pieces only where the output takes them. Through the op the outputs are always aligned. */
Test(cuda_conv1d, outputs_whose_steps_are_not_16_byte_aligned)
{
    tt_require_cuda();
    const struct {
        tg_dtype dtype;
        int64_t K;
    } cases[] = {{TG_BF16, 4}, {TG_BF16, 8}, {TG_F16, 3}, {TG_BF16, 16}, {TG_F32, 8}, {TG_F32, 16}};
    const double fill = 7.0;
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const tg_dtype dtype = cases[i].dtype;
        const int64_t B = 2, C = 128, L = 1500, K = cases[i].K;
        conv_case cc = {B, C, L, K, LAYOUT_CHANNEL_LAST, dtype, true, true, false, false};
        char what[160];
        describe(&cc, what, sizeof what);
        tg_tape *tape = tg_tape_create();
        tg_tensor *x = tt_cuda_twin(tape, x_in_layout(tape, &cc), true);
        tg_tensor *dout = tt_cuda_twin(tape, x_in_layout(tape, &cc), true);
        tg_tensor *w = tt_cuda_twin(tape, tt_leaf(tape, dtype, 2, (int64_t[]){C, K}), false);
        tg_tensor *bias = tt_cuda_twin(tape, tt_leaf(tape, dtype, 1, (int64_t[]){C}), false);
        const tg_conv1d_args args = {x, w, bias, NULL, TG_ACT_SILU};
        tg_tensor *out[2], *dx[2], *dw[2], *db[2], *out_base[2], *dx_base[2];
        for (int padded = 0; padded < 2; padded++) {
            const int64_t pad = !padded ? 0 : dtype == TG_F32 ? 2 : 4;
            out[padded] = padded_channel_last(tape, dtype, B, C, L, pad, fill, &out_base[padded]);
            dx[padded] = padded_channel_last(tape, dtype, B, C, L, pad, fill, &dx_base[padded]);
            dw[padded] = tg_empty(tape, dtype, TG_DEVICE_CUDA, 2, (int64_t[]){C, K});
            db[padded] = tg_empty(tape, dtype, TG_DEVICE_CUDA, 1, (int64_t[]){C});
            cr_assert_eq(tg_cuda_causal_conv1d_fwd(&args, out[padded], NULL), TG_OK, "%s: %s", what, tg_last_error());
            cr_assert_eq(tg_cuda_causal_conv1d_bwd(&args, dout, NULL, dx[padded], dw[padded], db[padded], NULL), TG_OK,
                         "%s: %s", what, tg_last_error());
        }
        cr_assert(cu_bitwise_equal(tape, out[0], out[1]), "%s: out differs with unaligned steps", what);
        cr_assert(cu_bitwise_equal(tape, dx[0], dx[1]), "%s: dx differs with unaligned steps", what);
        cr_assert(cu_bitwise_equal(tape, dw[0], dw[1]) && cu_bitwise_equal(tape, db[0], db[1]), "%s: dw or dbias",
                  what);
        tg_tensor *padding[2] = {cu_host(tape, out_base[1]), cu_host(tape, dx_base[1])};
        const int64_t row_length = out_base[1]->shape[2];
        for (int p = 0; p < 2; p++)
            for (int64_t row = 0; row < B * L; row++)
                for (int64_t c = C; c < row_length; c++)
                    cr_assert_eq(tg_get_flat(padding[p], row * row_length + c), fill, "%s: %s written between rows",
                                 what, p ? "dx" : "out");
        tg_tape_free(tape);
    }
}
#endif

/* Two backward passes give bitwise-equal weight and bias gradients (no atomics): f32 at K = 4
 * in both layouts, and bf16 channel-last at K = 16 (on tensor cores). */
Test(cuda_conv1d, gradients_are_bitwise_repeatable)
{
    tt_require_cuda();
    enum { C = 64, MOST_K = 16 };
    const struct {
        layout lay;
        tg_dtype dtype;
        int64_t K;
    } configs[] = {
        {LAYOUT_CHANNEL_FIRST, TG_F32, 4}, {LAYOUT_CHANNEL_LAST, TG_F32, 4}, {LAYOUT_CHANNEL_LAST, TG_BF16, 16}};
    for (size_t ci = 0; ci < sizeof configs / sizeof configs[0]; ci++) {
        tg_tape *tape = tg_tape_create();
        const int64_t B = 4, L = 3000, K = configs[ci].K;
        const tg_dtype dtype = configs[ci].dtype;
        conv_case cc = {B, C, L, K, configs[ci].lay, dtype, true, true, false, false};
        tg_tensor *x = tt_cuda_twin(tape, x_in_layout(tape, &cc), true);
        tg_tensor *w = tt_cuda_twin(tape, tt_leaf(tape, dtype, 2, (int64_t[]){C, K}), false);
        tg_tensor *bias = tt_cuda_twin(tape, tt_leaf(tape, dtype, 1, (int64_t[]){C}), false);
        tg_tensor *dout = tt_cuda_twin(tape, tt_randn(tape, dtype, 3, (int64_t[]){B, C, L}), false);
        float first[C * MOST_K + C], again[C * MOST_K + C];
        for (int run_index = 0; run_index < 2; run_index++) {
            tg_zero_grad(w);
            tg_zero_grad(bias);
            tg_tensor *out = tg_causal_conv1d(tape, x, w, &(tg_causal_conv1d_options){bias, NULL, TG_ACT_SILU, NULL});
            cr_assert_eq(tg_backward_with_grad(tape, out, dout), TG_OK, "%s", tg_last_error());
            float *dst = run_index ? again : first;
            tg_copy_to_host(w->grad, dst, TG_F32);
            tg_copy_to_host(bias->grad, dst + C * K, TG_F32);
        }
        for (int i = 0; i < C * K + C; i++)
            cr_assert_eq(first[i], again[i], "%s %s K=%lld: gradient %d differs", layout_names[configs[ci].lay],
                         tg_dtype_name(dtype), (long long)K, i);
        tg_tape_free(tape);
    }
}

/* The 16-bit backward takes SiLU's slope from a hardware tanh (kernels/cuda/conv1d/common.cuh,
 * scaled_gradient). Its dx must still be silu'(z)·dout to within one step of the storage type
 * (or 2^-14 near zero), element by element, over z from −24 to 24: through the row kernels
 * (channel-first) and the stream kernels (channel-last), at K = 1, 4, 8 and 16 (bf16
 * channel-last: on tensor cores, g rounded to bf16). The one tap at
 * look-back 0 is 1, so z = x and dx = silu'(x)·dout exactly; the reference is in double. */
Test(cuda_conv1d, silu_slope_of_the_16bit_backward_within_a_step)
{
    tt_require_cuda();
    enum { B = 2, C = 64, L = 1024, N = B * C * L };
    static float z[N], dout[N], dx[N];
    const tg_dtype dtypes[2] = {TG_BF16, TG_F16};
    const double step[2] = {0x1p-7, 0x1p-10}; /* relative spacing of bf16, f16 values */
    const int64_t widths[4] = {1, 4, 8, 16};
    for (int di = 0; di < 2; di++)
        for (int wi = 0; wi < 4; wi++)
            for (int lay = 0; lay < 2; lay++) {
                tg_tape *tape = tg_tape_create();
                const tg_dtype dtype = dtypes[di];
                const int64_t K = widths[wi];
                for (int i = 0; i < N; i++) z[i] = (float)(-24.0 + 48.0 * i / (N - 1));
                conv_case cc = {B, C, L, K, (layout)lay, dtype, false, true, false, false};
                tg_tensor *x = x_in_layout(tape, &cc); /* random, then the sweep over it */
                cr_assert_eq(tg_copy_from_host(x, z, TG_F32), TG_OK, "%s", tg_last_error());
                tg_tensor *w = tg_zeros(tape, dtype, TG_DEVICE_CPU, 2, (int64_t[]){C, K});
                for (int64_t c = 0; c < C; c++) tg_set(w, (int64_t[]){c, K - 1}, 1.0);
                tg_tensor *d = tt_randn(tape, dtype, 3, (int64_t[]){B, C, L});
                tg_tensor *xg = tt_cuda_twin(tape, x, true), *wg = tt_cuda_twin(tape, w, false);
                tg_tensor *dg = tt_cuda_twin(tape, d, false);
                tg_tensor *out =
                    tg_causal_conv1d(tape, xg, wg, &(tg_causal_conv1d_options){NULL, NULL, TG_ACT_SILU, NULL});
                cr_assert(out, "%s", tg_last_error());
                cr_assert_eq(tg_backward_with_grad(tape, out, dg), TG_OK, "%s", tg_last_error());
                /* z and dout as stored (rounded to the dtype), dx in logical (B, C, L) order */
                cr_assert_eq(tg_copy_to_host(x, z, TG_F32), TG_OK);
                cr_assert_eq(tg_copy_to_host(d, dout, TG_F32), TG_OK);
                cr_assert_eq(tg_copy_to_host(xg->grad, dx, TG_F32), TG_OK, "%s", tg_last_error());
                for (int i = 0; i < N; i++) {
                    const double s = 1.0 / (1.0 + exp(-(double)z[i]));
                    const double want = s * (1.0 + z[i] * (1.0 - s)) * dout[i];
                    cr_assert(fabs(dx[i] - want) <= step[di] * fabs(want) + 0x1p-14,
                              "%s %s K=%lld: dx at z = %.6g, dout = %.6g is %.9g, silu'(z)·dout = %.9g",
                              tg_dtype_name(dtype), layout_names[lay], (long long)K, z[i], dout[i], dx[i], want);
                }
                tg_tape_free(tape);
            }
}

Test(cuda_conv1d, mixed_devices_are_rejected)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *w = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *xg = tt_cuda_twin(tape, x, false);
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, xg, w, NULL), "tg_causal_conv1d", "devices", "cuda", "cpu", NULL);
    tg_tensor *w17 = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 2, (int64_t[]){3, 17}), false);
    s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_causal_conv1d(tape, xg, w17, NULL), "tg_causal_conv1d", "K up to 16", NULL);
    tg_tape_free(tape);
}

/* ---- the selection table (kernels/cuda/conv1d.cu) ---------------------------------------------- */

static const tg_conv1d_pass passes[2] = {TG_CONV1D_FORWARD, TG_CONV1D_BACKWARD};
static const char *const pass_names[2] = {"forward", "backward"};

/* A shape for each row of the table, and the kernels the table gives it. With a moved
 * threshold a shape reaches another kernel, and the test says which: then move the shape, so
 * that no kernel is left untested. */
Test(cuda_conv1d, every_kernel_is_reached)
{
    tt_require_cuda();
    const struct {
        conv_case cc;
        tg_conv1d_kernel kernels[2]; /* forward, backward */
    } table[] = {
        {{2, 3, 1024, 16, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
         {TG_CONV1D_ROW_STAGED, TG_CONV1D_ROW_STAGED}},
        {{8, 3, 32, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
         {TG_CONV1D_ROW_SIDE_BY_SIDE, TG_CONV1D_ROW_SIDE_BY_SIDE}},
        {{5, 6, 512, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
         {TG_CONV1D_ROW_GROUPED, TG_CONV1D_ROW_STAGED}},
        {{2, 3, 1000, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, true, true},
         {TG_CONV1D_ROW_DIRECT, TG_CONV1D_ROW_STAGED}},
        {{2, 3, 1024, 8, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, true},
         {TG_CONV1D_ROW_GROUPED, TG_CONV1D_ROW_TENSOR_CORES}},
        {{2, 64, 300, 16, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true},
         {TG_CONV1D_STREAM_TENSOR_CORES, TG_CONV1D_STREAM_TENSOR_CORES}},
        {{2, 64, 300, 4, LAYOUT_CHANNEL_LAST, TG_F32, true, true, true, true}, {TG_CONV1D_STREAM, TG_CONV1D_STREAM}},
        {{2, 5, 40, 4, LAYOUT_STRIDED, TG_F32, true, true, true, true}, {TG_CONV1D_TILE, TG_CONV1D_TILE}},
    };
    bool reached[2][TG_CONV1D_KERNELS] = {{false}};
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        char what[160];
        describe(&table[i].cc, what, sizeof what);
        check_case(table[i].cc);
        for (int p = 0; p < 2; p++) {
            const tg_conv1d_kernel ran = tg_cuda_conv1d_last_kernel(passes[p]);
            cr_expect_eq(ran, table[i].kernels[p], "%s: the %s ran %s, the table says %s", what, pass_names[p],
                         tg_conv1d_kernel_name(ran), tg_conv1d_kernel_name(table[i].kernels[p]));
            reached[p][ran] = true;
        }
    }
    for (int p = 0; p < 2; p++)
        for (int k = 1; k < TG_CONV1D_KERNELS; k++)
            if (tg_conv1d_pass_has(passes[p], (tg_conv1d_kernel)k))
                cr_expect(reached[p][k], "no shape reaches the %s kernel %s", pass_names[p],
                          tg_conv1d_kernel_name((tg_conv1d_kernel)k));
}

/* Every kernel forced onto every shape of a pool that it can take (at least two each), and
 * held to the CPU there: shapes the table gives other kernels, so each kernel is also checked
 * beyond the region it is chosen for. */
Test(cuda_conv1d, every_kernel_forced_is_correct)
{
    tt_require_cuda();
    const conv_case pool[] = {
        {2, 3, 32, 4, LAYOUT_CHANNEL_FIRST, TG_F32, true, true, false, true},
        {2, 3, 1024, 16, LAYOUT_CHANNEL_FIRST, TG_F32, true, false, false, true},
        {3, 4, 512, 4, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, false, false},
        {2, 3, 2048, 8, LAYOUT_CHANNEL_FIRST, TG_BF16, false, true, false, true},
        {1, 2, 2048, 16, LAYOUT_CHANNEL_FIRST, TG_BF16, true, true, true, true},
        {4, 2, 64, 8, LAYOUT_CHANNEL_FIRST, TG_F16, true, true, false, true},
        {2, 3, 100, 4, LAYOUT_MISALIGNED, TG_BF16, true, true, true, false},
        {2, 64, 300, 4, LAYOUT_CHANNEL_LAST, TG_F32, true, true, true, true},
        {2, 64, 300, 8, LAYOUT_CHANNEL_LAST, TG_F16, false, true, false, true},
        {2, 64, 300, 16, LAYOUT_CHANNEL_LAST, TG_BF16, true, true, true, true},
        {1, 32, 64, 12, LAYOUT_CHANNEL_LAST, TG_F16, true, true, false, true},
        {1, 32, 200, 10, LAYOUT_CHANNEL_LAST, TG_BF16, true, false, true, true},
        {2, 5, 40, 3, LAYOUT_STRIDED, TG_F32, true, true, true, true},
    };
    refusal_expected = true;
    for (int p = 0; p < 2; p++)
        for (int k = 1; k < TG_CONV1D_KERNELS; k++) {
            const tg_conv1d_kernel kernel = (tg_conv1d_kernel)k;
            if (!tg_conv1d_pass_has(passes[p], kernel)) continue;
            tg_cuda_conv1d_force_kernel(passes[p], kernel);
            int taken = 0;
            for (size_t i = 0; i < sizeof pool / sizeof pool[0]; i++) {
                if (!try_case(pool[i])) continue;
                taken++;
                cr_expect_eq(tg_cuda_conv1d_last_kernel(passes[p]), kernel, "%s forced to %s ran %s", pass_names[p],
                             tg_conv1d_kernel_name(kernel),
                             tg_conv1d_kernel_name(tg_cuda_conv1d_last_kernel(passes[p])));
            }
            cr_expect(taken >= 2, "the %s kernel %s took %d of the pool's shapes", pass_names[p],
                      tg_conv1d_kernel_name(kernel), taken);
            tg_cuda_conv1d_force_kernel(passes[p], TG_CONV1D_AUTO);
        }
}

/* A forced kernel that cannot take a call refuses it, naming itself and the reason, and
 * writes nothing: the tape and the inputs' gradients are as before. */
Test(cuda_conv1d, a_forced_kernel_refuses_what_it_cannot_take)
{
    tt_require_cuda();
    tg_tape *tape = tg_tape_create();
    tg_tensor *x = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 3, (int64_t[]){2, 8, 64}), false);
    tg_tensor *w = tt_cuda_twin(tape, tt_randn(tape, TG_F32, 2, (int64_t[]){8, 4}), false);
    cr_assert_eq(tg_set_requires_grad(x, true), TG_OK);
    const size_t nodes = tg_tape_node_count(tape);
    tg_cuda_conv1d_force_kernel(TG_CONV1D_FORWARD, TG_CONV1D_STREAM);
    cr_assert_null(tg_causal_conv1d(tape, x, w, NULL));
    cr_assert(strstr(tg_last_error(), "tg_causal_conv1d") && strstr(tg_last_error(), "stream") &&
                  strstr(tg_last_error(), "channel-last"),
              "%s", tg_last_error());
    cr_assert_eq(tg_tape_node_count(tape), nodes);
    tg_cuda_conv1d_force_kernel(TG_CONV1D_FORWARD, TG_CONV1D_AUTO);
    tg_cuda_conv1d_force_kernel(TG_CONV1D_BACKWARD, TG_CONV1D_ROW_TENSOR_CORES);
    tg_tensor *out = tg_causal_conv1d(tape, x, w, NULL);
    cr_assert(out, "%s", tg_last_error());
    cr_assert_neq(tg_backward(tape, tg_sum_all(tape, out)), TG_OK);
    cr_assert(strstr(tg_last_error(), "row-tensor-cores") && strstr(tg_last_error(), "bf16"), "%s", tg_last_error());
    const tg_tensor *dx = cu_host(tape, x->grad);
    for (int64_t i = 0; i < tg_numel(dx); i++) cr_assert_eq(((const float *)tg_data(dx))[i], 0.0f, "dx written");
    tg_tape_free(tape);
}
