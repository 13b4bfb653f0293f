/* kernels/cpu/scan.c: the selective scan forward and backward on the CPU, in double, for
 * f64 (the reference the gradient checks use); other dtypes go to kernels/cpu/scan_float.c.
 *
 * Each (b, d) row is a sequential recurrence over t on a state of N doubles. Inputs are
 * read element by element through their strides, so any layout works. The backward
 * walks the chunks of a row from last to first: it recomputes the chunk's states from
 * the saved start state into a (chunk + 1)·N scratch buffer (row 0 holds the state
 * before the chunk), then runs the reverse scan over the chunk. Both directions split
 * the batch rows b over CPU threads (core/parallel.c), in a way that leaves every result
 * the same bits for any number of threads. */
#include "kernels/scan.h"
#include "kernels/cpu/scan_sums.h"
#include "kernels/unary_math.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>

static double at1(const tg_tensor *t, int64_t i0) { return tg_load(tg_bytes(t), t->dtype, i0 * t->strides[0]); }

static double at2(const tg_tensor *t, int64_t i0, int64_t i1)
{
    return tg_load(tg_bytes(t), t->dtype, i0 * t->strides[0] + i1 * t->strides[1]);
}

static double at3(const tg_tensor *t, int64_t i0, int64_t i1, int64_t i2)
{
    return tg_load(tg_bytes(t), t->dtype, i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2]);
}

static void put3(tg_tensor *t, int64_t i0, int64_t i1, int64_t i2, double v)
{
    tg_store(tg_bytes(t), t->dtype, i0 * t->strides[0] + i1 * t->strides[1] + i2 * t->strides[2], v);
}

/* chunk_states[b, d, n, c] */
static int64_t state_index(const tg_tensor *s, int64_t b, int64_t d, int64_t n, int64_t c)
{
    return b * s->strides[0] + d * s->strides[1] + n * s->strides[2] + c * s->strides[3];
}

/* softplus(v) = log(1 + e^v), in the form whose exp cannot overflow. */
static double softplus(double v) { return v > 0 ? v + log1p(exp(-v)) : log1p(exp(v)); }

/* What one (b, d) row needs besides the per-step inputs. */
typedef struct {
    const tg_scan_args *a;
    int64_t b, d, N;
    const double *A; /* row d of A */
    double bias;     /* delta_bias[d] or 0 */
    double skip;     /* Dv[d] or 0 */
} scan_row;

static void load_channel(const tg_scan_args *a, int64_t d, int64_t N, double *A_row, double *bias, double *skip)
{
    for (int64_t n = 0; n < N; n++) A_row[n] = at2(a->A, d, n);
    *bias = a->delta_bias ? at1(a->delta_bias, d) : 0.0;
    *skip = a->Dv ? at1(a->Dv, d) : 0.0;
}

/* dt at step t, and d(dt)/d(delta) in *slope (σ(v) through softplus, else 1). */
static double step_dt(const scan_row *r, int64_t t, double *slope)
{
    double v = at3(r->a->delta, r->b, r->d, t) + r->bias;
    if (!r->a->delta_softplus) {
        *slope = 1.0;
        return v;
    }
    *slope = tg_sigmoid_of(v);
    return softplus(v);
}

/* h ← exp(dt·A) ⊙ h + dt·u·Bm_t; returns Cm_t·h (the new state's readout). */
static double advance(const scan_row *r, int64_t t, double dt, double u, double *h)
{
    double readout = 0.0;
    for (int64_t n = 0; n < r->N; n++) {
        h[n] = exp(dt * r->A[n]) * h[n] + dt * u * at3(r->a->Bm, r->b, n, t);
        readout += at3(r->a->Cm, r->b, n, t) * h[n];
    }
    return readout;
}

static double silu(double x) { return x * tg_sigmoid_of(x); }

static void scan_row_forward(const scan_row *r, double *h, tg_tensor *out, tg_tensor *final_state,
                             tg_tensor *chunk_states)
{
    const tg_scan_args *a = r->a;
    const int64_t L = a->u->shape[2];
    for (int64_t n = 0; n < r->N; n++) h[n] = a->initial_state ? at3(a->initial_state, r->b, r->d, n) : 0.0;
    for (int64_t t = 0; t < L; t++) {
        if (chunk_states && t % a->chunk == 0)
            for (int64_t n = 0; n < r->N; n++)
                tg_store(tg_bytes(chunk_states), chunk_states->dtype,
                         state_index(chunk_states, r->b, r->d, n, t / a->chunk), h[n]);
        double slope, dt = step_dt(r, t, &slope), u = at3(a->u, r->b, r->d, t);
        double y = advance(r, t, dt, u, h) + r->skip * u;
        put3(out, r->b, r->d, t, a->z ? y * silu(at3(a->z, r->b, r->d, t)) : y);
    }
    for (int64_t n = 0; final_state && n < r->N; n++) put3(final_state, r->b, r->d, n, h[n]);
}

/* The batch rows are split over CPU threads (tg_parallel_ranges): each (b, d) row is its
 * own recurrence and writes only its own outputs, so the split changes no result. */
typedef struct {
    const tg_scan_args *a;
    tg_tensor *out, *final_state, *chunk_states;
    atomic_bool out_of_memory; /* set by a range that could not get its buffers */
} forward_job;

static void forward_rows(void *context, int64_t b_begin, int64_t b_end)
{
    forward_job *job = context;
    const tg_scan_args *a = job->a;
    const int64_t D = a->u->shape[1], N = a->A->shape[1];
    double *h = malloc(sizeof(double) * (size_t)N), *A_row = malloc(sizeof(double) * (size_t)N);
    if (!h || !A_row) {
        atomic_store(&job->out_of_memory, true);
    } else {
        for (int64_t b = b_begin; b < b_end; b++)
            for (int64_t d = 0; d < D; d++) {
                scan_row r = {a, b, d, N, A_row, 0.0, 0.0};
                load_channel(a, d, N, A_row, &r.bias, &r.skip);
                scan_row_forward(&r, h, job->out, job->final_state, job->chunk_states);
            }
    }
    free(h);
    free(A_row);
}

tg_status tg_cpu_selective_scan_fwd(const tg_scan_args *a, tg_tensor *out, tg_tensor *final_state,
                                    tg_tensor *chunk_states)
{
    if (a->u->dtype != TG_F64) return tg_cpu_selective_scan_fwd_float(a, out, final_state, chunk_states);
    forward_job job = {a, out, final_state, chunk_states, false};
    tg_parallel_ranges(a->u->shape[0], 1, forward_rows, &job);
    if (atomic_load(&job.out_of_memory))
        return tg_set_error(TG_ERR_NOMEM, "tg_selective_scan: out of memory for a state buffer");
    return TG_OK;
}

/* ---- backward ---------------------------------------------------------------------------- */

/* One thread's scratch for the backward, and the sums of the row it is on. */
typedef struct {
    double *H;     /* (chunk + 1)·N: H[0] the state before the chunk, H[k+1] the state after step t0+k */
    double *y;     /* chunk: the pre-gate output of each step in the chunk */
    double *carry; /* N: exp(dt_{t+1}·A)·δh_{t+1}, the state gradient flowing back into step t */
    double *A_row; /* N */
    double *dA;    /* N: Σ_t of the current (b, d) row */
    double *dBm;   /* B·N·L, Σ_d (or NULL); shared, each thread adds only into its rows b */
    double *dCm;   /* B·N·L, Σ_d (or NULL); likewise */
    double dDv, dbias;
} scan_scratch;

static void free_scratch(scan_scratch *s)
{
    free(s->H);
    free(s->y);
    free(s->carry);
    free(s->A_row);
    free(s->dA);
}

static bool alloc_scratch(scan_scratch *s, const tg_scan_args *a)
{
    const int64_t N = a->A->shape[1], L = a->u->shape[2], len = a->chunk < L ? a->chunk : L;
    *s = (scan_scratch){0};
    s->H = malloc(sizeof(double) * (size_t)((len + 1) * N));
    s->y = malloc(sizeof(double) * (size_t)len);
    s->carry = malloc(sizeof(double) * (size_t)N);
    s->A_row = malloc(sizeof(double) * (size_t)N);
    s->dA = malloc(sizeof(double) * (size_t)N);
    return s->H && s->y && s->carry && s->A_row && s->dA;
}

/* Reruns the forward over steps [t0, t1) from chunk c's saved start state into s->H and s->y. */
static void recompute_chunk(const scan_row *r, const tg_tensor *chunk_states, int64_t c, int64_t t0, int64_t t1,
                            scan_scratch *s)
{
    const int64_t N = r->N;
    for (int64_t n = 0; n < N; n++)
        s->H[n] = tg_load(tg_bytes(chunk_states), chunk_states->dtype, state_index(chunk_states, r->b, r->d, n, c));
    for (int64_t t = t0; t < t1; t++) {
        double *h = s->H + (t - t0 + 1) * N;
        for (int64_t n = 0; n < N; n++) h[n] = h[n - N];
        double slope, dt = step_dt(r, t, &slope), u = at3(r->a->u, r->b, r->d, t);
        s->y[t - t0] = advance(r, t, dt, u, h) + r->skip * u;
    }
}

/* One step of the reverse scan at time t (inside the chunk starting at t0). With
 * dy = dout·silu(z) and δh = Cm_t·dy + carry (the total gradient of h_t):
 *   dCm_t += dy·h_t        dBm_t += δh·dt·u      du = Σ_n δh·dt·Bm_t + Dv·dy
 *   ddt = Σ_n δh·(Bm_t·u + A·Ā·h_{t−1})          dA += δh·dt·Ā·h_{t−1}
 *   dDv += dy·u            dz = dout·y·silu'(z)  ddelta = ddt·slope, dbias += ddelta
 * and the carry into step t−1 becomes Ā·δh (Ā = exp(dt·A)). */
static void reverse_step(const scan_row *r, const tg_tensor *dout, const tg_scan_grads *g, int64_t t, int64_t t0,
                         scan_scratch *s)
{
    const tg_scan_args *a = r->a;
    const int64_t N = r->N, L = a->u->shape[2], b = r->b, d = r->d;
    const double *h_prev = s->H + (t - t0) * N, *h = h_prev + N;
    double slope, dt = step_dt(r, t, &slope), u = at3(a->u, b, d, t);
    double grad_out = dout ? at3(dout, b, d, t) : 0.0, dy = grad_out;
    if (a->z) {
        double z = at3(a->z, b, d, t);
        dy = grad_out * silu(z);
        if (g->dz) put3(g->dz, b, d, t, grad_out * s->y[t - t0] * tg_silu_derivative(z));
    }
    double du = r->skip * dy, ddt = 0.0;
    for (int64_t n = 0; n < N; n++) {
        double Bn = at3(a->Bm, b, n, t), Cn = at3(a->Cm, b, n, t), decay = exp(dt * r->A[n]);
        double dh = Cn * dy + s->carry[n];
        int64_t sum_index = (b * N + n) * L + t;
        if (s->dCm) s->dCm[sum_index] += dy * h[n];
        if (s->dBm) s->dBm[sum_index] += dh * dt * u;
        du += dh * dt * Bn;
        ddt += dh * (Bn * u + r->A[n] * decay * h_prev[n]);
        s->dA[n] += dh * dt * decay * h_prev[n];
        s->carry[n] = decay * dh;
    }
    s->dDv += dy * u;
    s->dbias += ddt * slope;
    if (g->du) put3(g->du, b, d, t, du);
    if (g->ddelta) put3(g->ddelta, b, d, t, ddt * slope);
}

static void scan_row_backward(const scan_row *r, const tg_tensor *chunk_states, const tg_tensor *dout,
                              const tg_tensor *dfinal, const tg_scan_grads *g, scan_scratch *s)
{
    const int64_t L = r->a->u->shape[2], chunk = r->a->chunk, n_chunks = (L - 1) / chunk + 1;
    for (int64_t n = 0; n < r->N; n++) s->carry[n] = dfinal ? at3(dfinal, r->b, r->d, n) : 0.0;
    for (int64_t c = n_chunks - 1; c >= 0; c--) {
        int64_t t0 = c * chunk, t1 = t0 + chunk < L ? t0 + chunk : L;
        recompute_chunk(r, chunk_states, c, t0, t1, s);
        for (int64_t t = t1 - 1; t >= t0; t--) reverse_step(r, dout, g, t, t0, s);
    }
    /* h_{−1} enters step 0 as Ā_0·h_{−1}: its gradient is the carry left after step 0. */
    for (int64_t n = 0; g->dinitial_state && n < r->N; n++) put3(g->dinitial_state, r->b, r->d, n, s->carry[n]);
}

/* The backward splits the batch rows over CPU threads, as the forward does. Sums over d
 * (dBm, dCm) stay inside a row b, so the thread that owns b adds them in the order d = 0,
 * 1, ... Sums over b (dA, dDv, ddelta_bias) are kept per (b, d) and added over b in order
 * after the threads are done: the same bits for any number of threads. */
static void backward_rows(void *context, int64_t b_begin, int64_t b_end)
{
    scan_backward_job *job = context;
    const tg_scan_args *a = job->a;
    const int64_t D = a->u->shape[1], N = a->A->shape[1];
    scan_scratch s;
    if (!alloc_scratch(&s, a)) {
        atomic_store(&job->out_of_memory, true);
        free_scratch(&s);
        return;
    }
    s.dBm = job->sums.dBm;
    s.dCm = job->sums.dCm;
    for (int64_t b = b_begin; b < b_end; b++)
        for (int64_t d = 0; d < D; d++) {
            scan_row r = {a, b, d, N, s.A_row, 0.0, 0.0};
            load_channel(a, d, N, s.A_row, &r.bias, &r.skip);
            for (int64_t n = 0; n < N; n++) s.dA[n] = 0.0;
            s.dDv = s.dbias = 0.0;
            scan_row_backward(&r, job->chunk_states, job->dout, job->dfinal, job->g, &s);
            for (int64_t n = 0; n < N; n++) job->sums.dA[(b * D + d) * N + n] = s.dA[n];
            job->sums.dDv[b * D + d] = s.dDv;
            job->sums.dbias[b * D + d] = s.dbias;
        }
    free_scratch(&s);
}

tg_status tg_cpu_selective_scan_bwd(const tg_scan_args *a, const tg_tensor *chunk_states, const tg_tensor *dout,
                                    const tg_tensor *dfinal, const tg_scan_grads *g)
{
    if (a->u->dtype != TG_F64) return tg_cpu_selective_scan_bwd_float(a, chunk_states, dout, dfinal, g);
    return scan_backward_run(a, chunk_states, dout, dfinal, g, backward_rows, false);
}
