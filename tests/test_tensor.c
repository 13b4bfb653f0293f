/* Tensors: creation, dtypes and bf16 conversion, strides and views, host copies, size
 * overflow, the errors of the creation functions, the host memory count under threads, the
 * default CPU thread count and the control groups' CPU quota it respects. */
#define _GNU_SOURCE /* sched_setaffinity, CPU_SET */
#include "test_util.h"

#include <pthread.h>
#ifdef __linux__
#include <sched.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#endif

#include "core/internal.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

Test(tensor, creation_shapes_strides_and_fill)
{
    tg_tape *tape = tg_tape_create();
    for (int ndim = 1; ndim <= TG_MAX_DIMS; ndim++) {
        int64_t shape[TG_MAX_DIMS], numel = 1;
        for (int i = 0; i < ndim; i++) numel *= shape[i] = tt_randint(1, 4);
        double value = tg_rng_normal(tt_rng());
        tg_tensor *t = tg_full(tape, TG_F64, TG_DEVICE_CPU, ndim, shape, value);
        cr_assert(t, "%s", tg_last_error());
        cr_assert_eq(tg_numel(t), numel);
        cr_assert(tg_is_contiguous(t));
        cr_assert_eq(t->strides[ndim - 1], 1);
        for (int i = 0; i + 1 < ndim; i++) cr_assert_eq(t->strides[i], t->strides[i + 1] * shape[i + 1]);
        for (int64_t e = 0; e < numel; e++) cr_assert_eq(tg_get_flat(t, e), value);
        tg_tensor *z = tg_zeros(tape, TG_F32, TG_DEVICE_CPU, ndim, shape);
        for (int64_t e = 0; e < numel; e++) cr_assert_eq(tg_get_flat(z, e), 0.0);
    }
    tg_tape_free(tape);
}

Test(tensor, dtypes_round_trip_through_host_copies)
{
    tg_tape *tape = tg_tape_create();
    int64_t n = tt_randint(1, 100);
    double *values = malloc(sizeof(double) * (size_t)n), *back = malloc(sizeof(double) * (size_t)n);
    for (int64_t i = 0; i < n; i++) values[i] = tg_rng_normal(tt_rng()) * 100;
    const tg_dtype dtypes[3] = {TG_F32, TG_F64, TG_BF16};
    const double tolerance[3] = {1e-7, 0, 1.0 / 256};
    for (int d = 0; d < 3; d++) {
        tg_tensor *t = tg_empty(tape, dtypes[d], TG_DEVICE_CPU, 1, &n);
        cr_assert_eq(tg_copy_from_host(t, values, TG_F64), TG_OK);
        cr_assert_eq(tg_copy_to_host(t, back, TG_F64), TG_OK);
        for (int64_t i = 0; i < n; i++)
            cr_assert_leq(fabs(back[i] - values[i]), tolerance[d] * fabs(values[i]), "%s: %g vs %g",
                          tg_dtype_name(dtypes[d]), back[i], values[i]);
    }
    int32_t ids[3] = {0, 7, -4};
    tg_tensor *t = tg_from_data(tape, TG_I32, TG_DEVICE_CPU, 1, (int64_t[]){3}, ids);
    cr_assert_eq(tg_get_flat(t, 2), -4.0);
    free(values);
    free(back);
    tg_tape_free(tape);
}

Test(tensor, bf16_rounds_to_nearest_even_and_keeps_specials)
{
    for (int i = 0; i < 10000; i++) {
        float v = (float)(tg_rng_normal(tt_rng()) * pow(10, tt_randint(-20, 20)));
        float r = tg_bf16_to_f32(tg_f32_to_bf16(v));
        /* The nearest bf16: |r − v| is at most half a unit in the last of 8 significant bits. */
        cr_assert_leq(fabsf(r - v), fabsf(v) * (1.0f / 256), "%g → %g", v, r);
        uint16_t below = tg_f32_to_bf16(v);
        float lower = tg_bf16_to_f32(below), other = tg_bf16_to_f32((uint16_t)(below ^ 1u));
        cr_assert_leq(fabsf(lower - v), fabsf(other - v), "%g should round to the nearer neighbour", v);
    }
    cr_assert(isnan(tg_bf16_to_f32(tg_f32_to_bf16(NAN))));
    cr_assert(isinf(tg_bf16_to_f32(tg_f32_to_bf16(INFINITY))));
    cr_assert_eq(tg_bf16_to_f32(tg_f32_to_bf16(1.0f)), 1.0f);
    /* 1 + 2^-8 lies exactly between 1 and 1 + 2^-7: ties go to the even neighbour, 1. */
    cr_assert_eq(tg_bf16_to_f32(tg_f32_to_bf16(1.0f + 1.0f / 256)), 1.0f);
}

Test(tensor, strided_views_read_and_write_through)
{
    tg_tape *tape = tg_tape_create();
    int64_t R = tt_randint(2, 5), C = tt_randint(2, 5);
    tg_tensor *base = tt_randn(tape, TG_F64, 2, (int64_t[]){R, C});
    /* The transpose as a view: element (j, i) is base (i, j); no copy. */
    tg_tensor *t = tg_view(tape, base, 2, (int64_t[]){C, R}, (int64_t[]){1, C}, 0);
    cr_assert(!tg_is_contiguous(t));
    for (int64_t i = 0; i < R; i++)
        for (int64_t j = 0; j < C; j++) cr_assert_eq(tg_get(t, (int64_t[]){j, i}), tg_get(base, (int64_t[]){i, j}));
    tg_set(t, (int64_t[]){1, 0}, 99.0);
    cr_assert_eq(tg_get(base, (int64_t[]){0, 1}), 99.0);
    /* A contiguous copy keeps the values in row-major order of the view. */
    tg_tensor *c = tg_contiguous(tape, t);
    cr_assert(tg_is_contiguous(c) && c != t);
    for (int64_t e = 0; e < R * C; e++) cr_assert_eq(tg_get_flat(c, e), tg_get_flat(t, e));
    cr_assert_eq(tg_contiguous(tape, c), c, "a contiguous tensor is returned as is");
    char text[128];
    cr_assert(strstr(tg_describe(t, text, sizeof text), "strided"), "%s", text);
    tg_tape_free(tape);
}

Test(tensor, heap_tensors_and_their_gradients)
{
    tg_tensor *t = tg_tensor_new(TG_F32, TG_DEVICE_CPU, 2, (int64_t[]){3, 4});
    cr_assert(t && !t->tape && !t->grad);
    for (int64_t e = 0; e < 12; e++) cr_assert_eq(tg_get_flat(t, e), 0.0);
    cr_assert_eq(tg_set_requires_grad(t, true), TG_OK);
    cr_assert(t->grad && tg_same_shape(t->grad, t));
    tg_tensor_free(t); /* frees the gradient too (ASan would report a leak) */
    tg_tensor_free(NULL);
}

Test(tensor, creation_errors)
{
    tg_tape *tape = tg_tape_create();
    tt_state s = tt_snapshot(tape);
    tt_assert_failed_with(&s, tg_empty(tape, TG_F32, TG_DEVICE_CPU, 2, (int64_t[]){INT64_MAX / 2, 3}), "tg_empty",
                          "overflow", NULL);
    tt_assert_failed_with(&s, tg_empty(tape, TG_F32, TG_DEVICE_CPU, 2, (int64_t[]){(int64_t)1 << 40, (int64_t)1 << 40}),
                          "tg_empty", "overflow", NULL);
    tt_assert_failed_with(&s, tg_empty(tape, TG_F32, TG_DEVICE_CPU, 2, (int64_t[]){2, -3}), "tg_empty", "negative",
                          NULL);
    tt_assert_failed_with(&s, tg_empty(tape, TG_F32, TG_DEVICE_CPU, 0, (int64_t[]){2}), "tg_empty", "ndim", NULL);
    tt_assert_failed_with(&s, tg_empty(tape, TG_F32, TG_DEVICE_CPU, TG_MAX_DIMS + 1, (int64_t[]){1, 1, 1, 1, 1, 1, 1}),
                          "tg_empty", "ndim", NULL);
    tt_assert_failed_with(&s, tg_empty(tape, (tg_dtype)42, TG_DEVICE_CPU, 1, (int64_t[]){2}), "tg_empty", "dtype",
                          NULL);
    tt_assert_failed_with(&s, tg_empty(NULL, TG_F32, TG_DEVICE_CPU, 1, (int64_t[]){2}), "tg_empty", "tape", NULL);
    if (!tg_device_available(TG_DEVICE_CUDA))
        cr_assert_eq(tg_device_resolve(TG_DEVICE_AUTO), TG_DEVICE_CPU, "AUTO falls back to the CPU without a GPU");
    tt_assert_failed_with(&s, tg_from_data(tape, TG_F32, TG_DEVICE_CPU, 1, (int64_t[]){2}, NULL), "tg_from_data",
                          "NULL", NULL);
    cr_assert_null(tg_tensor_new(TG_F32, TG_DEVICE_CPU, 1, (int64_t[]){INT64_MAX}));
    cr_assert(strstr(tg_last_error(), "tg_tensor_new") && strstr(tg_last_error(), "overflow"), "%s", tg_last_error());
    /* Marking: only float leaves. */
    tg_tensor *ids = tt_ids(tape, 1, (int64_t[]){3}, 5);
    cr_assert_eq(tg_set_requires_grad(ids, true), TG_ERR_DTYPE);
    cr_assert(strstr(tg_last_error(), "i32"), "%s", tg_last_error());
    tg_tensor *x = tt_leaf(tape, TG_F64, 1, (int64_t[]){3});
    cr_assert_eq(tg_set_requires_grad(tg_exp(tape, x), false), TG_ERR_STATE);
    cr_assert(strstr(tg_last_error(), "leaves"), "%s", tg_last_error());
    tg_tape_free(tape);
}

Test(tensor, f16_conversion_is_exact_where_representable_and_rounds_to_nearest)
{
    /* Every one of the 65536 half values survives f16 → f32 → f16 (NaNs stay NaN). */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = tg_f16_to_f32((uint16_t)h);
        if (isnan(f)) {
            cr_assert(isnan(tg_f16_to_f32(tg_f32_to_f16(f))));
            continue;
        }
        cr_assert_eq(tg_f32_to_f16(f), (uint16_t)h, "half 0x%04x → %g → 0x%04x", h, f, tg_f32_to_f16(f));
    }
    cr_assert_eq(tg_f16_to_f32(0x3c00), 1.0f);
    cr_assert_eq(tg_f16_to_f32(0x7bff), 65504.0f);
    cr_assert_eq(tg_f16_to_f32(0x0001), 0x1p-24f);
    cr_assert(isinf(tg_f16_to_f32(tg_f32_to_f16(70000.0f))));
    for (int i = 0; i < 10000; i++) { /* random floats go to the nearer neighbour */
        float v = (float)(tg_rng_normal(tt_rng()) * pow(2, tt_randint(-26, 15)));
        uint16_t h = tg_f32_to_f16(v);
        float r = tg_f16_to_f32(h), up = tg_f16_to_f32((uint16_t)(h + 1)), down = tg_f16_to_f32((uint16_t)(h - 1));
        if ((h & 0x7fffu) != 0 && (h & 0x7fffu) < 0x7bff) {
            cr_assert_leq(fabsf(r - v), fabsf(up - v), "%g → %g (next up %g)", v, r, up);
            cr_assert_leq(fabsf(r - v), fabsf(down - v), "%g → %g (next down %g)", v, r, down);
        }
    }
}

/* The element accessors and the generator answer bad arguments with an error and their
 * documented value (NaN, -1, nothing changed) instead of reading or writing out of bounds. */
Test(tensor, element_access_and_the_generator_refuse_bad_arguments)
{
    tg_tape *tape = tg_tape_create();
    int64_t shape[2] = {tt_randint(1, 4), tt_randint(1, 5)};
    tg_tensor *t = tt_randn(tape, TG_F32, 2, shape);
    const int64_t n = shape[0] * shape[1];
    float *before = malloc(sizeof *before * (size_t)n), *after = malloc(sizeof *after * (size_t)n);
    tg_copy_to_host(t, before, TG_F32);
    const struct {
        int64_t flat;
        const char *word;
    } flats[3] = {{-1, "outside"}, {n, "outside"}, {INT64_MAX, "outside"}};
    for (int i = 0; i < 3; i++) {
        cr_assert(isnan(tg_get_flat(t, flats[i].flat)), "flat index %lld", (long long)flats[i].flat);
        cr_assert(strstr(tg_last_error(), "tg_get_flat") && strstr(tg_last_error(), flats[i].word), "%s",
                  tg_last_error());
        tg_set_flat(t, flats[i].flat, 7.0);
        cr_assert(strstr(tg_last_error(), "tg_set_flat"), "%s", tg_last_error());
    }
    cr_assert(isnan(tg_get(t, (int64_t[]){0, shape[1]})));
    cr_assert(strstr(tg_last_error(), "index[1]"), "%s", tg_last_error());
    tg_set(t, (int64_t[]){shape[0], 0}, 7.0);
    cr_assert(strstr(tg_last_error(), "index[0]"), "%s", tg_last_error());
    tg_set(t, NULL, 7.0);
    cr_assert(strstr(tg_last_error(), "index is NULL"), "%s", tg_last_error());
    cr_assert(isnan(tg_get_flat(NULL, 0)) && strstr(tg_last_error(), "NULL"));
    tg_copy_to_host(t, after, TG_F32);
    cr_assert_eq(memcmp(before, after, sizeof *before * (size_t)n), 0, "a refused set changed the tensor");
    if (n != 1) {
        cr_assert(isnan(tg_item(t)));
        cr_assert(strstr(tg_last_error(), "one element"), "%s", tg_last_error());
    }
    tg_rng rng;
    tg_rng_seed(&rng, 5);
    cr_assert_eq(tg_rng_below(&rng, 0), -1);
    cr_assert(strstr(tg_last_error(), "bound"), "%s", tg_last_error());
    cr_assert_eq(tg_rng_below(NULL, 3), -1);
    cr_assert(isnan(tg_rng_uniform(NULL)) && isnan(tg_rng_normal(NULL)));
    cr_assert_neq(tg_fill_normal(t, &rng, 0.0, -1.0), TG_OK);
    cr_assert(strstr(tg_last_error(), "stddev"), "%s", tg_last_error());
    cr_assert_neq(tg_fill_uniform(t, &rng, 1.0, -1.0), TG_OK);
    cr_assert_neq(tg_fill_uniform(t, &rng, NAN, 1.0), TG_OK);
    cr_assert_neq(tg_fill_normal(t, &rng, INFINITY, 1.0), TG_OK);
    tg_copy_to_host(t, after, TG_F32);
    cr_assert_eq(memcmp(before, after, sizeof *before * (size_t)n), 0, "a refused fill changed the tensor");
    free(before), free(after);
    tg_tape_free(tape);
}

/* Heap tensors made and freed on several threads at once: the host memory count ends where
 * it started, and its peak covers what the threads held together. */
static void *make_and_free(void *arg)
{
    const int64_t elements = *(const int64_t *)arg;
    for (int i = 0; i < 20000; i++) {
        tg_tensor *t = tg_tensor_new(TG_F32, TG_DEVICE_CPU, 1, &elements);
        if (!t) return (void *)1;
        tg_tensor_free(t);
    }
    return NULL;
}

Test(tensor, host_memory_count_holds_under_threads)
{
    tg_memory_stats before, after;
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CPU, &before), TG_OK);
    tg_memory_reset_peak();
    enum { THREADS = 4 };
    pthread_t threads[THREADS];
    int64_t elements[THREADS];
    for (int i = 0; i < THREADS; i++) {
        elements[i] = tt_randint(1, 4096);
        cr_assert_eq(pthread_create(&threads[i], NULL, make_and_free, &elements[i]), 0);
    }
    for (int i = 0; i < THREADS; i++) {
        void *failed;
        cr_assert_eq(pthread_join(threads[i], &failed), 0);
        cr_assert_null(failed, "a thread could not make a tensor");
    }
    cr_assert_eq(tg_memory_stats_get(TG_DEVICE_CPU, &after), TG_OK);
    cr_assert_eq(after.bytes_in_use, before.bytes_in_use, "%zu bytes in use after, %zu before", after.bytes_in_use,
                 before.bytes_in_use);
    int64_t largest = 0;
    for (int i = 0; i < THREADS; i++) largest = elements[i] > largest ? elements[i] : largest;
    cr_assert_geq(after.peak_bytes_in_use, before.bytes_in_use + (size_t)largest * 4);
}

#ifdef __linux__
/* tg_num_threads() in a child process allowed only `cpus` of the CPUs this one may use,
 * without TG_NUM_THREADS: the library counts the CPUs once, so the count must come from a
 * process that has not asked yet. */
static int default_threads_on(int cpus)
{
    cpu_set_t allowed, fewer;
    cr_assert_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    CPU_ZERO(&fewer);
    for (int c = 0, taken = 0; c < CPU_SETSIZE && taken < cpus; c++)
        if (CPU_ISSET(c, &allowed)) CPU_SET(c, &fewer), taken++;
    pid_t child = fork();
    cr_assert_geq(child, 0, "fork failed");
    if (child == 0) {
        unsetenv("TG_NUM_THREADS");
        _exit(sched_setaffinity(0, sizeof fewer, &fewer) == 0 ? tg_num_threads() : 255);
    }
    int status;
    cr_assert_eq(waitpid(child, &status, 0), child);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) != 255, "the child could not set its CPUs");
    return WEXITSTATUS(status);
}
#endif

Test(tensor, the_default_thread_count_is_the_cpus_the_process_may_run_on)
{
#ifdef __linux__
    cpu_set_t allowed;
    cr_assert_eq(sched_getaffinity(0, sizeof allowed, &allowed), 0);
    cr_assert_eq(default_threads_on(1), 1, "one CPU allowed");
    const int64_t quota = tg_cgroup_cpu_limit("/proc/self/cgroup", "/sys/fs/cgroup");
    if (CPU_COUNT(&allowed) >= 2)
        cr_assert_eq(default_threads_on(2), quota == 1 ? 1 : 2, "two CPUs allowed (a quota of %lld)", (long long)quota);
#else
    cr_skip_test("CPU affinity: Linux only");
#endif
}

/* ---- control groups' CPU quota ------------------------------------------------------------- */

#ifdef __linux__
/* Writes text to root/relative, making its directories. */
static void write_at(const char *root, const char *relative, const char *text)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s", root, relative);
    for (char *slash = strchr(path + strlen(root) + 1, '/'); slash; slash = strchr(slash + 1, '/')) {
        *slash = '\0';
        mkdir(path, 0700);
        *slash = '/';
    }
    FILE *f = fopen(path, "w");
    cr_assert_not_null(f, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

static void remove_tree(const char *root)
{
    char command[600];
    snprintf(command, sizeof command, "rm -rf '%s'", root);
    cr_assert_eq(system(command), 0);
}

static char *fresh_directory(void)
{
    static char dir[64];
    strcpy(dir, "/tmp/tg-cgroup-XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    return dir;
}
#endif

Test(tensor, cgroup_cpu_quotas_are_read_as_the_tightest_on_the_path_rounded_up)
{
#ifdef __linux__
    for (int trial = 0; trial < 20; trial++) {
        const char *root = fresh_directory();
        char cgroup[256], fs[256], text[64];
        snprintf(cgroup, sizeof cgroup, "%s/cgroup", root);
        snprintf(fs, sizeof fs, "%s/fs", root);
        const int64_t period = tt_randint(1000, 1000000);
        const int64_t parent_quota = tt_randint(1, 64 * period), child_quota = tt_randint(1, 64 * period);
        const bool v2 = trial % 2 == 0;
        if (v2) {
            write_at(root, "cgroup", "0::/a/b\n");
            snprintf(text, sizeof text, "%lld %lld\n", (long long)parent_quota, (long long)period);
            write_at(root, "fs/a/cpu.max", text);
            snprintf(text, sizeof text, "%lld %lld\n", (long long)child_quota, (long long)period);
            write_at(root, "fs/a/b/cpu.max", trial % 4 == 0 ? "max 100000\n" : text);
        } else {
            write_at(root, "cgroup", "5:memory:/a/b\n3:cpu,cpuacct:/a/b\n");
            snprintf(text, sizeof text, "%lld\n", (long long)period);
            write_at(root, "fs/cpu,cpuacct/a/cpu.cfs_period_us", text);
            write_at(root, "fs/cpu,cpuacct/a/b/cpu.cfs_period_us", text);
            snprintf(text, sizeof text, "%lld\n", (long long)parent_quota);
            write_at(root, "fs/cpu,cpuacct/a/cpu.cfs_quota_us", text);
            snprintf(text, sizeof text, "%lld\n", (long long)child_quota);
            write_at(root, "fs/cpu,cpuacct/a/b/cpu.cfs_quota_us", trial % 4 == 1 ? "-1\n" : text);
        }
        const bool child_unlimited = trial % 4 < 2;
        const int64_t tightest = child_unlimited || parent_quota < child_quota ? parent_quota : child_quota;
        const int64_t expected = (tightest + period - 1) / period; /* whole CPUs, rounded up */
        cr_assert_eq(tg_cgroup_cpu_limit(cgroup, fs), expected, "quota %lld of %lld (%s)", (long long)tightest,
                     (long long)period, v2 ? "v2" : "v1");
        remove_tree(root);
    }
#else
    cr_skip_test("control groups: Linux only");
#endif
}

Test(tensor, cgroups_without_a_quota_or_a_readable_hierarchy_set_no_limit)
{
#ifdef __linux__
    const char *root = fresh_directory();
    char cgroup[256], fs[256];
    snprintf(cgroup, sizeof cgroup, "%s/cgroup", root);
    snprintf(fs, sizeof fs, "%s/fs", root);
    cr_assert_eq(tg_cgroup_cpu_limit(cgroup, fs), 0, "no /proc/self/cgroup");
    write_at(root, "cgroup", "0::/a\n1:cpu:/a\n");
    cr_assert_eq(tg_cgroup_cpu_limit(cgroup, fs), 0, "no hierarchy");
    write_at(root, "fs/a/cpu.max", "max 100000\n");
    write_at(root, "fs/cpu/a/cpu.cfs_quota_us", "-1\n");
    write_at(root, "fs/cpu/a/cpu.cfs_period_us", "100000\n");
    cr_assert_eq(tg_cgroup_cpu_limit(cgroup, fs), 0, "unlimited in both versions");
    /* A container's own path is not visible inside it: its limit is at the hierarchy's root. */
    write_at(root, "cgroup", "0::/docker/0123abcd\n");
    write_at(root, "fs/cpu.max", "250000 100000\n");
    cr_assert_eq(tg_cgroup_cpu_limit(cgroup, fs), 3, "2.5 CPUs at the root");
    remove_tree(root);
#else
    cr_skip_test("control groups: Linux only");
#endif
}
