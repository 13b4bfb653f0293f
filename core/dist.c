/* core/dist.c: data-parallel training over MPI (tapegrad/dist.h). Built with MPI when CMake
 * finds it (TG_HAVE_MPI); without it, a world of one process. Every collective is started
 * non-blocking and waited for with a deadline, so a rank that died or hangs turns into an
 * error on the others instead of a silent hang. */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, nanosleep */

#include "internal.h"
#include "tapegrad/dist.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifdef TG_HAVE_MPI
#include <stddef.h> /* Open MPI's mpi.h uses ptrdiff_t */

#include <mpi.h>
#endif

struct tg_dist {
    tg_dist_options options;
    int rank, size;
    bool started_mpi; /* tg_dist_init called MPI_Init (so finalize calls MPI_Finalize) */
};

tg_dist_options tg_dist_defaults(void) { return (tg_dist_options){.mode = TG_DIST_DETERMINISTIC, .timeout_s = 300}; }

bool tg_dist_mpi_built(void)
{
#ifdef TG_HAVE_MPI
    return true;
#else
    return false;
#endif
}

int tg_dist_rank(const tg_dist *dist)
{
    if (!dist) tg_set_error(TG_ERR_INVALID, "tg_dist_rank: dist is NULL");
    return dist ? dist->rank : 0;
}

int tg_dist_world_size(const tg_dist *dist)
{
    if (!dist) tg_set_error(TG_ERR_INVALID, "tg_dist_world_size: dist is NULL");
    return dist ? dist->size : 1;
}

/* The checks every call makes; false (error set) when dist or params is not usable. */
static bool usable(const char *fn, const tg_dist *dist, const tg_params *params)
{
    if (!dist) return tg_set_error(TG_ERR_INVALID, "%s: dist is NULL", fn), false;
    if (!params) return tg_set_error(TG_ERR_INVALID, "%s: params is NULL", fn), false;
    if (tg_params_count(params) > 0 && tg_params_get(params, 0)->device != TG_DEVICE_CPU)
        return tg_set_error(TG_ERR_DEVICE, "%s: params: the store is on %s; only CPU stores are supported", fn,
                            tg_device_name(tg_params_get(params, 0)->device)),
               false;
    return true;
}

#ifdef TG_HAVE_MPI

static tg_dtype store_dtype(const tg_params *params)
{
    return tg_params_count(params) ? tg_params_get(params, 0)->dtype : TG_F32;
}

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *bytes, size_t n)
{
    const unsigned char *p = bytes;
    for (size_t i = 0; i < n; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static const uint64_t FNV_START = 1469598103934665603ull;

/* What tg_dist_check_params compares: the count, the elements and a hash of every name,
 * dtype and shape. */
typedef struct {
    uint64_t count, numel, layout;
} params_layout;

static params_layout layout_of(const tg_params *params)
{
    params_layout l = {tg_params_count(params), (uint64_t)tg_params_numel(params), FNV_START};
    for (size_t i = 0; i < l.count; i++) {
        const tg_tensor *p = tg_params_get(params, i);
        l.layout = fnv(l.layout, p->name, strlen(p->name) + 1);
        l.layout = fnv(l.layout, &p->dtype, sizeof p->dtype);
        l.layout = fnv(l.layout, p->shape, sizeof(int64_t) * (size_t)p->ndim);
    }
    return l;
}

/* acc ← acc + g over n elements of the store's dtype, each sum rounded to it. */
static void add_into(void *acc, const void *g, tg_dtype dtype, int64_t n)
{
    if (dtype == TG_F32) {
        float *a = acc;
        const float *b = g;
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    } else if (dtype == TG_F64) {
        double *a = acc;
        const double *b = g;
        for (int64_t i = 0; i < n; i++) a[i] += b[i];
    } else {
        for (int64_t i = 0; i < n; i++)
            tg_store(acc, dtype, i, (float)tg_load(acc, dtype, i) + (float)tg_load(g, dtype, i));
    }
}

static double seconds(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Waits for the request until the deadline: TG_OK, or TG_ERR_STATE naming fn. */
static tg_status wait_for(const char *fn, const tg_dist *dist, MPI_Request *request)
{
    const double start = seconds();
    for (int done = 0;;) {
        if (MPI_Test(request, &done, MPI_STATUS_IGNORE) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "%s: MPI failed on rank %d", fn, dist->rank);
        if (done) return TG_OK;
        if (seconds() - start > dist->options.timeout_s)
            return tg_set_error(TG_ERR_STATE,
                                "%s: rank %d waited %.0f s for the other ranks (timeout_s): one has failed, "
                                "died or is stuck",
                                fn, dist->rank, dist->options.timeout_s);
        struct timespec pause = {0, 20000}; /* a short pause: MPI makes progress inside MPI_Test */
        nanosleep(&pause, NULL);
    }
}

/* Every rank's `bytes` bytes at `mine` into `all` (rank order). */
static tg_status allgather(const char *fn, const tg_dist *dist, const void *mine, void *all, size_t bytes)
{
    if (bytes > INT32_MAX)
        return tg_set_error(TG_ERR_OVERFLOW, "%s: %zu bytes per rank is more than MPI takes", fn, bytes);
    MPI_Request request;
    if (MPI_Iallgather(mine, (int)bytes, MPI_BYTE, all, (int)bytes, MPI_BYTE, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
        return tg_set_error(TG_ERR_STATE, "%s: MPI_Iallgather failed on rank %d", fn, dist->rank);
    return wait_for(fn, dist, &request);
}

/* values (n of dtype) ← every rank's values added in rank order: rank 0's, plus rank 1's, …,
 * the same bits on every rank. */
static tg_status sum_in_rank_order(const char *fn, const tg_dist *dist, void *values, tg_dtype dtype, int64_t n)
{
    const size_t bytes = (size_t)n * tg_dtype_size(dtype);
    char *all = malloc(bytes * (size_t)dist->size + 1);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %d ranks' values", fn, dist->size);
    tg_status status = allgather(fn, dist, values, all, bytes);
    if (status == TG_OK) {
        memcpy(values, all, bytes);
        for (int r = 1; r < dist->size; r++) add_into(values, all + (size_t)r * bytes, dtype, n);
    }
    free(all);
    return status;
}

#else

/* The world size a launcher announced in the environment (Open MPI, MPICH/PMI, Slurm), or 1. */
static int launched_size(void)
{
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = getenv(names[i]);
        if (v && atoi(v) > 1) return atoi(v);
    }
    return 1;
}

#endif

tg_dist *tg_dist_init(const tg_dist_options *options)
{
    tg_dist_options opt = options ? *options : tg_dist_defaults();
    if ((opt.mode != TG_DIST_DETERMINISTIC && opt.mode != TG_DIST_FAST) || !(opt.timeout_s > 0) ||
        !isfinite(opt.timeout_s)) {
        tg_set_error(TG_ERR_INVALID, "tg_dist_init: options: %s",
                     opt.mode != TG_DIST_DETERMINISTIC && opt.mode != TG_DIST_FAST
                         ? "mode is not a tg_dist_mode"
                         : "timeout_s must be finite and > 0");
        return NULL;
    }
    tg_dist *dist = calloc(1, sizeof *dist);
    if (!dist) return tg_set_error(TG_ERR_NOMEM, "tg_dist_init: out of memory"), NULL;
    *dist = (tg_dist){opt, 0, 1, false};
#ifdef TG_HAVE_MPI
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
        int provided;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
            free(dist);
            return tg_set_error(TG_ERR_STATE, "tg_dist_init: MPI_Init_thread failed"), NULL;
        }
        dist->started_mpi = true;
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &dist->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &dist->size);
#else
    if (launched_size() > 1) {
        free(dist);
        tg_set_error(TG_ERR_STATE,
                     "tg_dist_init: started as one of %d processes, but this build has no MPI (install Open MPI "
                     "and build again)",
                     launched_size());
        return NULL;
    }
#endif
    return dist;
}

void tg_dist_finalize(tg_dist *dist)
{
    if (!dist) return;
#ifdef TG_HAVE_MPI
    if (dist->started_mpi) MPI_Finalize();
#endif
    free(dist);
}

tg_status tg_dist_barrier(tg_dist *dist)
{
    if (!dist) return tg_set_error(TG_ERR_INVALID, "tg_dist_barrier: dist is NULL");
#ifdef TG_HAVE_MPI
    if (dist->size > 1) {
        MPI_Request request;
        if (MPI_Ibarrier(MPI_COMM_WORLD, &request) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "tg_dist_barrier: MPI_Ibarrier failed on rank %d", dist->rank);
        return wait_for("tg_dist_barrier", dist, &request);
    }
#endif
    return TG_OK;
}

tg_status tg_dist_check_params(tg_dist *dist, const tg_params *params)
{
    const char *fn = "tg_dist_check_params";
    if (!usable(fn, dist, params)) return TG_ERR_INVALID;
    if (dist->size == 1) return TG_OK;
#ifdef TG_HAVE_MPI
    params_layout mine = layout_of(params), *all = malloc(sizeof *all * (size_t)dist->size);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", fn);
    tg_status status = allgather(fn, dist, &mine, all, sizeof mine);
    for (int r = 1; status == TG_OK && r < dist->size; r++) {
        if (!memcmp(&all[r], &all[0], sizeof mine)) continue;
        status = tg_set_error(TG_ERR_INVALID,
                              "%s: rank %d has %llu parameters of %llu elements, rank 0 %llu of %llu%s: the ranks must "
                              "build the same model",
                              fn, r, (unsigned long long)all[r].count, (unsigned long long)all[r].numel,
                              (unsigned long long)all[0].count, (unsigned long long)all[0].numel,
                              all[r].count == all[0].count && all[r].numel == all[0].numel
                                  ? " (their names, dtypes or shapes differ)"
                                  : "");
    }
    free(all);
    return status;
#else
    return TG_OK;
#endif
}

tg_status tg_dist_broadcast_params(tg_dist *dist, tg_params *params)
{
    const char *fn = "tg_dist_broadcast_params";
    if (!usable(fn, dist, params)) return TG_ERR_INVALID;
    if (dist->size == 1) return TG_OK;
#ifdef TG_HAVE_MPI
    tg_status status = tg_dist_check_params(dist, params);
    if (status != TG_OK) return status;
    const size_t bytes = (size_t)tg_params_numel(params) * tg_dtype_size(store_dtype(params));
    if (bytes > INT32_MAX) return tg_set_error(TG_ERR_OVERFLOW, "%s: %zu bytes is more than MPI takes", fn, bytes);
    MPI_Request request;
    if (MPI_Ibcast(tg_params_data(params), (int)bytes, MPI_BYTE, 0, MPI_COMM_WORLD, &request) != MPI_SUCCESS)
        return tg_set_error(TG_ERR_STATE, "%s: MPI_Ibcast failed on rank %d", fn, dist->rank);
    return wait_for(fn, dist, &request);
#else
    return TG_OK;
#endif
}

tg_status tg_dist_allreduce_grads(tg_dist *dist, tg_params *params)
{
    const char *fn = "tg_dist_allreduce_grads";
    if (!usable(fn, dist, params)) return TG_ERR_INVALID;
    if (dist->size == 1) return TG_OK;
#ifdef TG_HAVE_MPI
    const tg_dtype dtype = store_dtype(params);
    const int64_t n = tg_params_numel(params);
    void *grad = tg_params_grad(params);
    if (dist->options.mode == TG_DIST_FAST && (dtype == TG_F32 || dtype == TG_F64)) {
        if (n > INT32_MAX)
            return tg_set_error(TG_ERR_OVERFLOW, "%s: %lld elements is more than MPI takes", fn, (long long)n);
        MPI_Request request;
        if (MPI_Iallreduce(MPI_IN_PLACE, grad, (int)n, dtype == TG_F32 ? MPI_FLOAT : MPI_DOUBLE, MPI_SUM,
                           MPI_COMM_WORLD, &request) != MPI_SUCCESS)
            return tg_set_error(TG_ERR_STATE, "%s: MPI_Iallreduce failed on rank %d", fn, dist->rank);
        return wait_for(fn, dist, &request);
    }
    return sum_in_rank_order(fn, dist, grad, dtype, n);
#else
    return TG_OK;
#endif
}

tg_status tg_dist_allreduce_sum(tg_dist *dist, double *values, int64_t n)
{
    const char *fn = "tg_dist_allreduce_sum";
    if (!dist) return tg_set_error(TG_ERR_INVALID, "%s: dist is NULL", fn);
    if (n < 0 || (n > 0 && !values))
        return tg_set_error(TG_ERR_INVALID, "%s: %s", fn, n < 0 ? "n is negative" : "values is NULL");
    if (dist->size == 1 || n == 0) return TG_OK;
#ifdef TG_HAVE_MPI
    return sum_in_rank_order(fn, dist, values, TG_F64, n);
#else
    return TG_OK;
#endif
}

tg_status tg_dist_check_same_values(tg_dist *dist, const tg_params *params)
{
    const char *fn = "tg_dist_check_same_values";
    if (!usable(fn, dist, params)) return TG_ERR_INVALID;
    if (dist->size == 1) return TG_OK;
#ifdef TG_HAVE_MPI
    const size_t bytes = (size_t)tg_params_numel(params) * tg_dtype_size(store_dtype(params));
    uint64_t mine = fnv(FNV_START, tg_params_data((tg_params *)params), bytes),
             *all = malloc(sizeof mine * (size_t)dist->size);
    if (!all) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", fn);
    tg_status status = allgather(fn, dist, &mine, all, sizeof mine);
    for (int r = 1; status == TG_OK && r < dist->size; r++)
        if (all[r] != all[0])
            status = tg_set_error(TG_ERR_STATE, "%s: rank %d's parameter values differ from rank 0's", fn, r);
    free(all);
    return status;
#else
    return TG_OK;
#endif
}
