/* Selective scan: values against a naive sequential reference, gradient checks of every
 * input over edge shapes and feature mixes (gate, skip, delta bias and softplus, initial
 * and final states, strided inputs, several chunks), piecewise processing with states,
 * independence of the chunk size, determinism, f32 vs f64, and the bad-input matrix. */
#include "test_util.h"

#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

typedef struct {
    bool z, Dv, bias, softplus, initial, final;
    bool final_only; /* the loss reads only the final state (no gradient reaches out) */
} features;

typedef struct {
    int64_t B, D, N, L, chunk;
    bool strided;
    features f;
} scan_case;

typedef struct {
    tg_tensor *u, *delta, *A, *Bm, *Cm, *Dv, *z, *bias, *init;
} scan_inputs;

/* t ← scale·t + shift, element by element (any layout). */
static void affine(tg_tensor *t, double scale, double shift)
{
    for (int64_t i = 0; i < tg_numel(t); i++) tg_set_flat(t, i, scale * tg_get_flat(t, i) + shift);
}

static tg_tensor *input_leaf(tg_tape *tape, tg_dtype dtype, bool strided, int ndim, const int64_t *shape)
{
    return strided ? tt_strided_leaf(tape, dtype, ndim, shape) : tt_leaf(tape, dtype, ndim, shape);
}

/* Random inputs in the ranges a Mamba layer sees: A < 0 (decaying states), moderate dt. */
static scan_inputs make_inputs(tg_tape *tape, tg_dtype dtype, const scan_case *c)
{
    const int64_t bdl[3] = {c->B, c->D, c->L}, bnl[3] = {c->B, c->N, c->L}, bdn[3] = {c->B, c->D, c->N};
    scan_inputs in = {0};
    in.u = input_leaf(tape, dtype, c->strided, 3, bdl);
    in.delta = input_leaf(tape, dtype, c->strided, 3, bdl);
    if (c->f.softplus)
        affine(in.delta, 0.5, -0.5);
    else /* dt > 0 as softplus would give: a negative dt with A < 0 makes the states explode */
        for (int64_t i = 0; i < tg_numel(in.delta); i++)
            tg_set_flat(in.delta, i, 0.1 + 0.4 * fabs(tg_get_flat(in.delta, i)));
    in.A = input_leaf(tape, dtype, c->strided, 2, (int64_t[]){c->D, c->N});
    for (int64_t i = 0; i < tg_numel(in.A); i++) tg_set_flat(in.A, i, -0.2 - fabs(tg_get_flat(in.A, i)));
    in.Bm = input_leaf(tape, dtype, c->strided, 3, bnl);
    in.Cm = input_leaf(tape, dtype, c->strided, 3, bnl);
    if (c->f.Dv) in.Dv = tt_leaf(tape, dtype, 1, &c->D);
    if (c->f.z) in.z = input_leaf(tape, dtype, c->strided, 3, bdl);
    if (c->f.bias) affine(in.bias = tt_leaf(tape, dtype, 1, &c->D), 0.05, 0.0);
    if (c->f.initial) in.init = input_leaf(tape, dtype, c->strided, 3, bdn);
    return in;
}

static tg_tensor *run_scan(tg_tape *tape, const scan_inputs *in, const scan_case *c, tg_tensor **final_state)
{
    tg_selective_scan_options opt = {in->Dv, in->z, in->bias, c->f.softplus, in->init, final_state, c->chunk};
    return tg_selective_scan(tape, in->u, in->delta, in->A, in->Bm, in->Cm, &opt);
}

/* ---- the naive reference: every state of a row kept, one step after another -------------- */

static double get3(const tg_tensor *t, int64_t i, int64_t j, int64_t k) { return tg_get(t, (int64_t[]){i, j, k}); }
static double get1(const tg_tensor *t, int64_t i) { return t ? tg_get(t, (int64_t[]){i}) : 0.0; }

/* out (B·D·L, row-major) and final (B·D·N) by the definition. */
static void reference(const scan_inputs *in, const scan_case *c, double *out, double *final)
{
    const int64_t B = c->B, D = c->D, N = c->N, L = c->L;
    double *h = malloc(sizeof(double) * (size_t)((L + 1) * N)); /* h[(t+1)·N + n] = state after step t */
    cr_assert(h);
    for (int64_t b = 0; b < B; b++)
        for (int64_t d = 0; d < D; d++) {
            for (int64_t n = 0; n < N; n++) h[n] = in->init ? get3(in->init, b, d, n) : 0.0;
            for (int64_t t = 0; t < L; t++) {
                double v = get3(in->delta, b, d, t) + get1(in->bias, d);
                double dt = c->f.softplus ? log(1.0 + exp(v)) : v, u = get3(in->u, b, d, t);
                double y = get1(in->Dv, d) * u;
                for (int64_t n = 0; n < N; n++) {
                    double a = tg_get(in->A, (int64_t[]){d, n});
                    h[(t + 1) * N + n] = exp(dt * a) * h[t * N + n] + dt * get3(in->Bm, b, n, t) * u;
                    y += get3(in->Cm, b, n, t) * h[(t + 1) * N + n];
                }
                if (in->z) {
                    double z = get3(in->z, b, d, t);
                    y *= z / (1.0 + exp(-z));
                }
                out[(b * D + d) * L + t] = y;
            }
            for (int64_t n = 0; n < N; n++) final[(b * D + d) * N + n] = h[L * N + n];
        }
    free(h);
}

static void assert_close(double got, double want, double tol, const char *what, const char *name, int64_t i)
{
    cr_assert(fabs(got - want) <= tol * (1.0 + fabs(want)), "%s: %s[%lld] = %.17g, want %.17g (seed %llu)", what, name,
              (long long)i, got, want, (unsigned long long)tt_seed());
}

/* Output and final state of one call against the reference. */
static void check_values(tg_tape *tape, const scan_inputs *in, const scan_case *c, const char *what)
{
    tg_tensor *final_state = NULL;
    tg_tensor *out = run_scan(tape, in, c, &final_state);
    cr_assert(out && final_state, "%s: %s", what, tg_last_error());
    double *want_out = malloc(sizeof(double) * (size_t)(c->B * c->D * c->L));
    double *want_final = malloc(sizeof(double) * (size_t)(c->B * c->D * c->N));
    cr_assert(want_out && want_final);
    reference(in, c, want_out, want_final);
    for (int64_t i = 0; i < tg_numel(out); i++) assert_close(tg_get_flat(out, i), want_out[i], 1e-12, what, "out", i);
    for (int64_t i = 0; i < tg_numel(final_state); i++)
        assert_close(tg_get_flat(final_state, i), want_final[i], 1e-12, what, "final", i);
    free(want_out);
    free(want_final);
}

/* ---- gradient checks ------------------------------------------------------------------------ */

/* The gradcheck inputs: u, delta, A, Bm, Cm, [Dv], [z], [bias], [initial], then the loss
 * weights: w_out (unless final_only) and w_final (when the loss reads the final state). */
static int pack(const scan_inputs *in, tg_tensor **list)
{
    int n = 0;
    tg_tensor *all[9] = {in->u, in->delta, in->A, in->Bm, in->Cm, in->Dv, in->z, in->bias, in->init};
    for (int i = 0; i < 9; i++)
        if (all[i] || i < 5) list[n++] = all[i];
    return n;
}

static scan_inputs unpack(tg_tensor *const *list, const features *f, int *next)
{
    scan_inputs in = {list[0], list[1], list[2], list[3], list[4], NULL, NULL, NULL, NULL};
    int i = 5;
    if (f->Dv) in.Dv = list[i++];
    if (f->z) in.z = list[i++];
    if (f->bias) in.bias = list[i++];
    if (f->initial) in.init = list[i++];
    *next = i;
    return in;
}

static tg_tensor *scan_loss(tg_tape *tape, tg_tensor *const *list, int n, void *user)
{
    (void)n;
    const scan_case *c = user;
    int i;
    scan_inputs in = unpack(list, &c->f, &i);
    tg_tensor *final_state = NULL;
    tg_tensor *out = run_scan(tape, &in, c, c->f.final ? &final_state : NULL);
    if (!out) return NULL;
    if (c->f.final_only) return tg_sum_all(tape, tg_mul(tape, final_state, list[i]));
    tg_tensor *loss = tg_sum_all(tape, tg_mul(tape, out, list[i++]));
    if (c->f.final) loss = tg_add(tape, loss, tg_sum_all(tape, tg_mul(tape, final_state, list[i])));
    return loss;
}

static void describe(const scan_case *c, char *buf, size_t size)
{
    snprintf(buf, size, "scan B=%lld D=%lld N=%lld L=%lld chunk=%lld%s%s%s%s%s%s%s%s", (long long)c->B, (long long)c->D,
             (long long)c->N, (long long)c->L, (long long)c->chunk, c->strided ? " strided" : "", c->f.z ? " z" : "",
             c->f.Dv ? " Dv" : "", c->f.bias ? " bias" : "", c->f.softplus ? " softplus" : "",
             c->f.initial ? " initial" : "", c->f.final ? " final" : "", c->f.final_only ? " final-only" : "");
}

/* Values against the reference, then the gradient check of every input. */
static void check_case(scan_case c)
{
    if (c.f.final_only) c.f.final = true;
    char what[200];
    describe(&c, what, sizeof what);
    tg_tape *tape = tg_tape_create();
    scan_inputs in = make_inputs(tape, TG_F64, &c);
    check_values(tape, &in, &c, what);
    tg_tape_reset(tape);

    in = make_inputs(tape, TG_F64, &c);
    tg_tensor *list[12];
    int n = pack(&in, list);
    if (!c.f.final_only) list[n++] = tt_randn(tape, TG_F64, 3, (int64_t[]){c.B, c.D, c.L});
    if (c.f.final) list[n++] = tt_randn(tape, TG_F64, 3, (int64_t[]){c.B, c.D, c.N});
    tt_gradcheck(what, scan_loss, list, n, &c, NULL);
    tg_tape_free(tape);
}

static features random_features(void)
{
    return (features){tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 1),     tt_randint(0, 1),
                      tt_randint(0, 1), tt_randint(0, 1), tt_randint(0, 5) == 0};
}

Test(scan, edge_grid_gradcheck)
{
    const int64_t edges[][5] = {
        /* B  D  N  L  chunk */
        {1, 1, 1, 1, 3},  /* L = 1 */
        {2, 2, 3, 1, 1},  /* L = 1, chunk 1 */
        {1, 2, 2, 7, 3},  /* L not a multiple of the chunk */
        {2, 1, 3, 8, 4},  /* L a multiple of the chunk */
        {1, 3, 2, 5, 1},  /* one step per chunk */
        {2, 2, 1, 6, 64}, /* one chunk longer than L */
        {1, 1, 4, 10, 3}, /* several chunks, N = 4 */
        {3, 2, 2, 4, 0},  /* the default chunk */
    };
    for (size_t e = 0; e < sizeof edges / sizeof edges[0]; e++)
        for (int strided = 0; strided < 2; strided++)
            check_case((scan_case){edges[e][0], edges[e][1], edges[e][2], edges[e][3], edges[e][4], strided,
                                   random_features()});
}

Test(scan, every_feature_combination)
{
    for (int mask = 0; mask < 64; mask++) {
        features f = {mask & 1, mask & 2, mask & 4, mask & 8, mask & 16, mask & 32, false};
        check_case((scan_case){tt_randint(1, 2), tt_randint(1, 2), tt_randint(1, 3), tt_randint(1, 7), tt_randint(1, 4),
                               tt_randint(0, 1), f});
    }
}

Test(scan, gradient_from_final_state_only)
{
    for (int r = 0; r < 4; r++) {
        features f = random_features();
        f.final_only = true;
        check_case((scan_case){tt_randint(1, 2), tt_randint(1, 3), tt_randint(1, 3), tt_randint(1, 9), tt_randint(1, 4),
                               tt_randint(0, 1), f});
    }
}

Test(scan, random_shapes_gradcheck)
{
    for (int r = 0; r < 8; r++)
        check_case((scan_case){tt_randint(1, 3), tt_randint(1, 3), tt_randint(1, 4), tt_randint(1, 12),
                               tt_randint(1, 5), tt_randint(0, 1), random_features()});
}

/* ---- identities ------------------------------------------------------------------------------ */

/* Every gradient (and the output) of one pass with the given chunk, as host arrays. */
typedef struct {
    double *values[11];
    int64_t counts[11];
} pass_result;

static void free_pass(pass_result *p)
{
    for (int i = 0; i < 11; i++) free(p->values[i]);
}

static double *host_copy(const tg_tensor *t, int64_t *count)
{
    *count = tg_numel(t);
    double *v = malloc(sizeof(double) * (size_t)*count);
    cr_assert(v);
    cr_assert_eq(tg_copy_to_host(t, v, TG_F64), TG_OK, "%s", tg_last_error());
    return v;
}

static pass_result full_pass(tg_tape *tape, scan_inputs *in, scan_case c, tg_tensor *w, tg_tensor *wf)
{
    tg_tensor *leaves[9] = {in->u, in->delta, in->A, in->Bm, in->Cm, in->Dv, in->z, in->bias, in->init};
    for (int i = 0; i < 9; i++)
        if (leaves[i]) tg_zero_grad(leaves[i]);
    tg_tensor *final_state = NULL;
    tg_tensor *out = run_scan(tape, in, &c, &final_state);
    cr_assert(out, "%s", tg_last_error());
    tg_tensor *loss =
        tg_add(tape, tg_sum_all(tape, tg_mul(tape, out, w)), tg_sum_all(tape, tg_mul(tape, final_state, wf)));
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());
    pass_result p;
    p.values[0] = host_copy(out, &p.counts[0]);
    p.values[1] = host_copy(final_state, &p.counts[1]);
    for (int i = 0; i < 9; i++) {
        p.values[2 + i] = NULL;
        p.counts[2 + i] = 0;
        if (leaves[i]) p.values[2 + i] = host_copy(leaves[i]->grad, &p.counts[2 + i]);
    }
    return p;
}

/* Chunk 1, 3, 64 and the default recompute the same states: same output and gradients. */
Test(scan, chunk_size_does_not_change_results)
{
    tg_tape *tape = tg_tape_create();
    scan_case c = {tt_randint(1, 3),
                   tt_randint(1, 3),
                   tt_randint(1, 4),
                   tt_randint(5, 40),
                   1,
                   tt_randint(0, 1),
                   {true, true, true, true, true, true, false}};
    scan_inputs in = make_inputs(tape, TG_F64, &c);
    tg_tensor *w = tt_randn(tape, TG_F64, 3, (int64_t[]){c.B, c.D, c.L});
    tg_tensor *wf = tt_randn(tape, TG_F64, 3, (int64_t[]){c.B, c.D, c.N});
    pass_result base = full_pass(tape, &in, c, w, wf);
    const int64_t chunks[] = {3, 64, 0, c.L - 1};
    for (size_t k = 0; k < sizeof chunks / sizeof chunks[0]; k++) {
        c.chunk = chunks[k];
        pass_result p = full_pass(tape, &in, c, w, wf);
        for (int i = 0; i < 11; i++)
            for (int64_t j = 0; j < p.counts[i]; j++)
                cr_assert(fabs(p.values[i][j] - base.values[i][j]) <= 1e-12 * (1.0 + fabs(base.values[i][j])),
                          "chunk %lld vs 1: result %d[%lld]: %.17g vs %.17g (L=%lld, seed %llu)", (long long)c.chunk, i,
                          (long long)j, p.values[i][j], base.values[i][j], (long long)c.L,
                          (unsigned long long)tt_seed());
        free_pass(&p);
    }
    free_pass(&base);
    tg_tape_free(tape);
}

/* Steps [t0, t0 + len) of x, (B, ·, len): a recorded slice, so gradients reach x. */
static tg_tensor *steps(tg_tape *tape, tg_tensor *x, int64_t t0, int64_t len)
{
    tg_tensor *piece = tg_slice(tape, x, 2, t0, t0 + len, 1);
    cr_assert(piece, "%s", tg_last_error());
    return piece;
}

/* Two pieces, carrying final → initial state, give one pass's output, final state and
 * gradients (the gradient of the carried state flows back into the first piece). */
Test(scan, pieces_with_states_match_one_pass)
{
    tg_tape *tape = tg_tape_create();
    scan_case c = {tt_randint(1, 3),
                   tt_randint(1, 3),
                   tt_randint(1, 4),
                   tt_randint(2, 20),
                   tt_randint(1, 4),
                   false,
                   {true, true, true, true, tt_randint(0, 1), true, false}};
    int64_t L1 = tt_randint(1, c.L - 1);
    scan_inputs in = make_inputs(tape, TG_F64, &c);
    tg_tensor *w = tt_randn(tape, TG_F64, 3, (int64_t[]){c.B, c.D, c.L});
    tg_tensor *wf = tt_randn(tape, TG_F64, 3, (int64_t[]){c.B, c.D, c.N});
    pass_result whole = full_pass(tape, &in, c, w, wf);

    tg_tensor *leaves[9] = {in.u, in.delta, in.A, in.Bm, in.Cm, in.Dv, in.z, in.bias, in.init};
    for (int i = 0; i < 9; i++)
        if (leaves[i]) tg_zero_grad(leaves[i]);
    scan_inputs first = in, second = in;
    tg_tensor **fields[] = {&first.u, &first.delta, &first.Bm, &first.Cm, &first.z};
    tg_tensor **fields2[] = {&second.u, &second.delta, &second.Bm, &second.Cm, &second.z};
    for (int i = 0; i < 5; i++) {
        *fields2[i] = steps(tape, *fields[i], L1, c.L - L1);
        *fields[i] = steps(tape, *fields[i], 0, L1);
    }
    tg_tensor *carry = NULL, *final_state = NULL;
    tg_tensor *out1 = run_scan(tape, &first, &c, &carry);
    second.init = carry;
    tg_tensor *out2 = run_scan(tape, &second, &c, &final_state);
    cr_assert(out1 && out2, "%s", tg_last_error());
    tg_tensor *loss = tg_add(tape, tg_sum_all(tape, tg_mul(tape, out1, steps(tape, w, 0, L1))),
                             tg_sum_all(tape, tg_mul(tape, out2, steps(tape, w, L1, c.L - L1))));
    loss = tg_add(tape, loss, tg_sum_all(tape, tg_mul(tape, final_state, wf)));
    cr_assert_eq(tg_backward(tape, loss), TG_OK, "%s", tg_last_error());

    char what[200];
    describe(&c, what, sizeof what);
    for (int64_t b = 0; b < c.B; b++)
        for (int64_t d = 0; d < c.D; d++)
            for (int64_t t = 0; t < c.L; t++) {
                double piece = t < L1 ? get3(out1, b, d, t) : get3(out2, b, d, t - L1);
                assert_close(piece, whole.values[0][(b * c.D + d) * c.L + t], 1e-12, what, "out", t);
            }
    for (int64_t i = 0; i < whole.counts[1]; i++)
        assert_close(tg_get_flat(final_state, i), whole.values[1][i], 1e-12, what, "final", i);
    for (int k = 0; k < 9; k++)
        for (int64_t i = 0; leaves[k] && i < whole.counts[2 + k]; i++)
            assert_close(tg_get_flat(leaves[k]->grad, i), whole.values[2 + k][i], 1e-12, what, "grad", k * 1000 + i);
    free_pass(&whole);
    tg_tape_free(tape);
}

/* Without any input requiring a gradient nothing is recorded (no chunk states kept) and
 * the values are the same. */
Test(scan, inference_records_nothing)
{
    tg_tape *tape = tg_tape_create();
    scan_case c = {2, 3, 2, 9, 4, false, {true, true, true, true, true, true, false}};
    scan_inputs in = make_inputs(tape, TG_F64, &c);
    tg_tensor *leaves[9] = {in.u, in.delta, in.A, in.Bm, in.Cm, in.Dv, in.z, in.bias, in.init};
    for (int i = 0; i < 9; i++) tg_set_requires_grad(leaves[i], false);
    size_t nodes = tg_tape_node_count(tape);
    check_values(tape, &in, &c, "no grad");
    cr_assert_eq(tg_tape_node_count(tape), nodes);
    tg_tape_free(tape);
}

/* The sums over d (dBm, dCm) and over b, t (dA, dDv, dbias) run in a fixed order. */
Test(scan, backward_is_deterministic)
{
    tg_tape *tape = tg_tape_create();
    scan_case c = {3, 8, 4, 70, 16, false, {true, true, true, true, false, false, false}};
    scan_inputs in = make_inputs(tape, TG_F32, &c);
    tg_tensor *dout = tt_randn(tape, TG_F32, 3, (int64_t[]){c.B, c.D, c.L});
    float first[3 * 4 * 70], again[3 * 4 * 70], dA1[32], dA2[32];
    for (int run = 0; run < 2; run++) {
        tg_zero_grad(in.Bm);
        tg_zero_grad(in.A);
        tg_tensor *out = run_scan(tape, &in, &c, NULL);
        cr_assert_eq(tg_backward_with_grad(tape, out, dout), TG_OK, "%s", tg_last_error());
        tg_copy_to_host(in.Bm->grad, run ? again : first, TG_F32);
        tg_copy_to_host(in.A->grad, run ? dA2 : dA1, TG_F32);
    }
    for (int i = 0; i < 3 * 4 * 70; i++) cr_assert_eq(first[i], again[i], "dBm[%d] differs between runs", i);
    for (int i = 0; i < 32; i++) cr_assert_eq(dA1[i], dA2[i], "dA[%d] differs between runs", i);
    tg_tape_free(tape);
}

/* The batch rows are split over CPU threads: 1, 2, 3 or more threads give the same bits
 * for the output, the final state and every gradient (the double path of f64 and the
 * float path of the storage dtypes; D up to 40 crosses the float path's groups of 16
 * channels). */
static void thread_count_changes_nothing(tg_dtype dtype)
{
    tg_tape *tape = tg_tape_create();
    scan_case c = {tt_randint(4, 9),
                   tt_randint(2, 40),
                   tt_randint(1, 17),
                   tt_randint(20, 90),
                   tt_randint(4, 30),
                   tt_randint(0, 1),
                   {true, true, true, true, true, true, false}};
    scan_inputs in = make_inputs(tape, dtype, &c);
    tg_tensor *w = tt_randn(tape, dtype, 3, (int64_t[]){c.B, c.D, c.L});
    tg_tensor *wf = tt_randn(tape, dtype, 3, (int64_t[]){c.B, c.D, c.N});
    tg_set_num_threads(1);
    pass_result base = full_pass(tape, &in, c, w, wf);
    const int threads[] = {2, 3, (int)c.B, (int)c.B + 5};
    for (size_t k = 0; k < sizeof threads / sizeof threads[0]; k++) {
        tg_set_num_threads(threads[k]);
        cr_assert_eq(tg_num_threads(), threads[k]);
        pass_result p = full_pass(tape, &in, c, w, wf);
        for (int i = 0; i < 11; i++)
            for (int64_t j = 0; j < p.counts[i]; j++)
                cr_assert(p.values[i][j] == base.values[i][j] || (isnan(p.values[i][j]) && isnan(base.values[i][j])),
                          "%d threads vs 1: result %d[%lld]: %.17g vs %.17g (B=%lld)", threads[k], i, (long long)j,
                          p.values[i][j], base.values[i][j], (long long)c.B);
        free_pass(&p);
    }
    tg_set_num_threads(0);
    cr_assert_geq(tg_num_threads(), 1);
    free_pass(&base);
    tg_tape_free(tape);
}

Test(scan, results_do_not_depend_on_the_thread_count) { thread_count_changes_nothing(TG_F64); }
Test(scan, f32_results_do_not_depend_on_the_thread_count) { thread_count_changes_nothing(TG_F32); }
Test(scan, bf16_results_do_not_depend_on_the_thread_count) { thread_count_changes_nothing(TG_BF16); }

/* A storage dtype against f64 runs on the same inputs (rounded to that dtype first), so
 * only the rounding of results and saved states is measured, not the conditioning of
 * the sums: output, final state and every gradient. */
static void check_case_against_f64(tg_dtype dtype, double tol, bool strided)
{
    tg_tape *tape = tg_tape_create();
    /* D to 40: whole and partial groups of the float path's 16 channels; L to 80: whole and
     * partial blocks of 16 steps */
    scan_case c = {tt_randint(1, 3),
                   tt_randint(1, 40),
                   tt_randint(1, 8),
                   tt_randint(1, 80),
                   tt_randint(1, 16),
                   strided,
                   {true, true, true, true, true, true, false}};
    scan_inputs low = make_inputs(tape, dtype, &c), in64;
    tg_tensor **lows[9] = {&low.u, &low.delta, &low.A, &low.Bm, &low.Cm, &low.Dv, &low.z, &low.bias, &low.init};
    tg_tensor **f64[9] = {&in64.u, &in64.delta, &in64.A, &in64.Bm, &in64.Cm, &in64.Dv, &in64.z, &in64.bias, &in64.init};
    for (int i = 0; i < 9; i++) {
        *f64[i] = tg_detach(tape, tg_to_dtype(tape, *lows[i], TG_F64));
        tg_set_requires_grad(*f64[i], true);
    }
    tg_tensor *w = tt_randn(tape, dtype, 3, (int64_t[]){c.B, c.D, c.L});
    tg_tensor *wf = tt_randn(tape, dtype, 3, (int64_t[]){c.B, c.D, c.N});
    tg_tensor *w64 = tg_to_dtype(tape, w, TG_F64), *wf64 = tg_to_dtype(tape, wf, TG_F64);
    tg_tensor *final_low = NULL, *final64 = NULL;
    tg_tensor *out_low = run_scan(tape, &low, &c, &final_low), *out64 = run_scan(tape, &in64, &c, &final64);
    cr_assert(out_low && out64, "%s", tg_last_error());
    char what[200];
    describe(&c, what, sizeof what);
    cr_assert_lt(tt_rel_error(out_low, out64), tol, "%s %s: out", tg_dtype_name(dtype), what);
    cr_assert_lt(tt_rel_error(final_low, final64), tol, "%s %s: final", tg_dtype_name(dtype), what);
    tg_tensor *loss64 =
        tg_add(tape, tg_sum_all(tape, tg_mul(tape, out64, w64)), tg_sum_all(tape, tg_mul(tape, final64, wf64)));
    tg_tensor *loss_low =
        tg_add(tape, tg_sum_all(tape, tg_mul(tape, out_low, w)), tg_sum_all(tape, tg_mul(tape, final_low, wf)));
    cr_assert_eq(tg_backward(tape, loss64), TG_OK, "%s", tg_last_error());
    cr_assert_eq(tg_backward(tape, loss_low), TG_OK, "%s", tg_last_error());
    for (int i = 0; i < 9; i++)
        cr_assert_lt(tt_rel_error((*lows[i])->grad, (*f64[i])->grad), tol, "%s %s: gradient of input %d",
                     tg_dtype_name(dtype), what, i);
    tg_tape_free(tape);
}

/* Four cases: contiguous inputs (the float path's staging by blocks) and strided ones. */
static void check_against_f64(tg_dtype dtype, double tol)
{
    for (int k = 0; k < 4; k++) check_case_against_f64(dtype, tol, k % 2 == 1);
}

Test(scan, f32_matches_f64) { check_against_f64(TG_F32, 1e-5); }

Test(scan, bf16_matches_f64) { check_against_f64(TG_BF16, 1e-2); }

/* ---- bad input ------------------------------------------------------------------------------ */

Test(scan, bad_inputs_fail_cleanly)
{
    const char *op = "tg_selective_scan";
    tg_tape *tape = tg_tape_create();
    tg_tensor *u = tt_leaf(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *delta = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *A = tt_leaf(tape, TG_F32, 2, (int64_t[]){3, 4});
    tg_tensor *Bm = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 4, 5});
    tg_tensor *Cm = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 4, 5});
    tg_tensor *u2d = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 5});
    tg_tensor *A3d = tt_randn(tape, TG_F32, 3, (int64_t[]){3, 4, 1});
    tg_tensor *u_l0 = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 0});
    tg_tensor *delta_long = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 6});
    tg_tensor *A_wrong_d = tt_randn(tape, TG_F32, 2, (int64_t[]){4, 4});
    tg_tensor *A_n0 = tt_randn(tape, TG_F32, 2, (int64_t[]){3, 0});
    tg_tensor *Bm_wrong_n = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 5, 5});
    tg_tensor *Bm_wrong_b = tt_randn(tape, TG_F32, 3, (int64_t[]){1, 4, 5});
    tg_tensor *Cm_wrong_l = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 4, 4});
    tg_tensor *Dv_wrong = tt_randn(tape, TG_F32, 1, (int64_t[]){4});
    tg_tensor *z_wrong = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 4});
    tg_tensor *bias_wrong = tt_randn(tape, TG_F32, 1, (int64_t[]){2});
    tg_tensor *init_wrong = tt_randn(tape, TG_F32, 3, (int64_t[]){2, 3, 5});
    tg_tensor *delta64 = tt_randn(tape, TG_F64, 3, (int64_t[]){2, 3, 5});
    tg_tensor *Dv64 = tt_randn(tape, TG_F64, 1, (int64_t[]){3});
    tg_tensor *ids = tt_ids(tape, 3, (int64_t[]){2, 3, 5}, 4);
    tg_tensor *u_cuda = tt_fake_cuda(tape, u), *Bm_cuda = tt_fake_cuda(tape, Bm);
    tg_tensor *final_state = NULL;
    tt_state s = tt_snapshot(tape);
    typedef tg_selective_scan_options opts;

    tt_assert_failed_with(&s, tg_selective_scan(NULL, u, delta, A, Bm, Cm, NULL), op, "tape", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, NULL, delta, A, Bm, Cm, NULL), op, "u is NULL", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, NULL, A, Bm, Cm, NULL), op, "delta is NULL", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, NULL, Bm, Cm, NULL), op, "A is NULL", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, NULL, Cm, NULL), op, "Bm is NULL", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, NULL, NULL), op, "Cm is NULL", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u2d, delta, A, Bm, Cm, NULL), op, "3 dimensions", "[3, 5]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A3d, Bm, Cm, NULL), op, "2 dimensions", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u_l0, delta, A, Bm, Cm, NULL), op, "L ≥ 1", "[2, 3, 0]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta_long, A, Bm, Cm, NULL), op, "delta", "[2, 3, 5]",
                          "[2, 3, 6]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A_wrong_d, Bm, Cm, NULL), op, "[2, 3, 5]", "[4, 4]",
                          NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A_n0, Bm, Cm, NULL), op, "N ≥ 1", "[3, 0]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm_wrong_n, Cm, NULL), op, "Bm", "[2, 4, 5]",
                          "[2, 5, 5]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm_wrong_b, Cm, NULL), op, "Bm", "[2, 4, 5]",
                          "[1, 4, 5]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, Cm_wrong_l, NULL), op, "Cm", "[2, 4, 5]",
                          "[2, 4, 4]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, Cm, &(opts){.Dv = Dv_wrong}), op, "Dv", "[3]",
                          "[4]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, Cm, &(opts){.z = z_wrong}), op, "z", "[2, 3, 5]",
                          "[2, 3, 4]", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, Cm, &(opts){.delta_bias = bias_wrong}), op,
                          "delta_bias", "[3]", "[2]", NULL);
    tt_assert_failed_with(
        &s,
        tg_selective_scan(tape, u, delta, A, Bm, Cm, &(opts){.initial_state = init_wrong, .final_state = &final_state}),
        op, "initial_state", "[2, 3, 4]", "[2, 3, 5]", NULL);
    cr_assert_null(final_state, "a failed call must not hand out a final state");
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta64, A, Bm, Cm, NULL), op, "dtype", "f64", "f32", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, Cm, &(opts){.Dv = Dv64}), op, "Dv", "f64", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, ids, delta, A, Bm, Cm, NULL), op, "i32", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u_cuda, delta, A, Bm, Cm, NULL), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm_cuda, Cm, NULL), op, "cuda", NULL);
    tt_assert_failed_with(&s, tg_selective_scan(tape, u, delta, A, Bm, Cm, &(opts){.chunk = -1}), op, "chunk", "-1",
                          NULL);
    for (int64_t i = 0; i < tg_numel(u); i++) cr_assert_eq(tg_get_flat(u->grad, i), 0.0);
    for (int64_t i = 0; i < tg_numel(A); i++) cr_assert_eq(tg_get_flat(A->grad, i), 0.0);
    tg_tape_free(tape);
}
