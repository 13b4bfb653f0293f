/* bench/step_profile.c: kernel times by name, launches, copies and host waits through CUPTI
 * (see step_profile.h). Kernel, copy and memset records come from CUPTI's activity API in
 * buffers it hands back; runtime calls are counted by a callback on their entry. */
#include "bench/step_profile.h"

#include <cuda_runtime.h>
#include <cupti.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BUFFER_BYTES (8u << 20)
#define NAME_MAX_CHARS 96

/* The C++ runtime's demangler (the program links it through the CUDA runtime). */
char *__cxa_demangle(const char *mangled, char *buffer, size_t *length, int *status);

typedef struct {
    char name[NAME_MAX_CHARS];
    double total_ns;
    long calls;
} kernel_row;

/* What the host waited for, and the copies, by kind. */
enum {
    WAIT_DEVICE_SYNC,
    WAIT_STREAM_SYNC,
    WAIT_EVENT_SYNC,
    WAIT_COPY_TO_HOST,
    WAIT_FREE,
    COPY_FROM_HOST_BLOCKING,
    GRAPH_LAUNCH,
    N_CALL_KINDS
};
static const char *const call_kind_names[N_CALL_KINDS] = {"cudaDeviceSynchronize",
                                                          "cudaStreamSynchronize",
                                                          "cudaEventSynchronize",
                                                          "cudaMemcpy to host",
                                                          "cudaFree",
                                                          "cudaMemcpy from host (blocking)",
                                                          "cudaGraphLaunch"};
/* The calls that make the host wait for the device. */
static bool waits(int kind) { return kind != COPY_FROM_HOST_BLOCKING && kind != GRAPH_LAUNCH; }

static struct {
    bool active;
    CUpti_SubscriberHandle subscriber;
    kernel_row *rows;
    int n_rows, capacity;
    long launches, copies[5], memsets;
    double copy_ns, memset_ns;
    long calls[N_CALL_KINDS];
} profile;

/* "void ns::kernel<float, 4>(args)" → "kernel<float, 4>": no return type, namespace or
 * parameter list, so kernels that differ only there share a row. */
static void short_name(const char *mangled, char *out, size_t size)
{
    int status = -1;
    char *demangled = mangled && mangled[0] == '_' ? __cxa_demangle(mangled, NULL, NULL, &status) : NULL;
    const char *name = status == 0 && demangled ? demangled : (mangled ? mangled : "?");
    const char *end = name + strlen(name);
    /* cut the parameter list: the first '(' at template depth 0 that does not open
     * "(anonymous namespace)" */
    static const char anonymous[] = "(anonymous namespace)";
    int depth = 0;
    for (const char *p = name; *p; p++) {
        if (strncmp(p, anonymous, sizeof anonymous - 1) == 0)
            p += sizeof anonymous - 2;
        else if (*p == '<')
            depth++;
        else if (*p == '>')
            depth--;
        else if (*p == '(' && depth == 0) {
            end = p;
            break;
        }
    }
    /* cut a return type and namespaces: after the last ' ' or "::" at depth 0 before end */
    const char *start = name;
    depth = 0;
    for (const char *p = name; p < end; p++) {
        if (*p == '<')
            depth++;
        else if (*p == '>')
            depth--;
        else if (depth == 0 && *p == ' ')
            start = p + 1;
        else if (depth == 0 && p[0] == ':' && p[1] == ':')
            start = p + 2;
    }
    size_t n = (size_t)(end - start) < size - 1 ? (size_t)(end - start) : size - 1;
    memcpy(out, start, n);
    out[n] = '\0';
    free(demangled);
}

static void add_kernel(const char *mangled, double ns)
{
    char name[NAME_MAX_CHARS];
    short_name(mangled, name, sizeof name);
    profile.launches++;
    for (int i = 0; i < profile.n_rows; i++)
        if (!strcmp(profile.rows[i].name, name)) {
            profile.rows[i].total_ns += ns;
            profile.rows[i].calls++;
            return;
        }
    if (profile.n_rows == profile.capacity) {
        int capacity = profile.capacity ? 2 * profile.capacity : 256;
        kernel_row *grown = realloc(profile.rows, (size_t)capacity * sizeof *grown);
        if (!grown) return;
        profile.rows = grown, profile.capacity = capacity;
    }
    kernel_row *row = &profile.rows[profile.n_rows++];
    snprintf(row->name, sizeof row->name, "%s", name);
    row->total_ns = ns;
    row->calls = 1;
}

static void CUPTIAPI buffer_requested(uint8_t **buffer, size_t *size, size_t *max_records)
{
    *buffer = aligned_alloc(8, BUFFER_BYTES);
    *size = *buffer ? BUFFER_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext context, uint32_t stream, uint8_t *buffer, size_t size, size_t valid)
{
    (void)context, (void)stream, (void)size;
    CUpti_Activity *record = NULL;
    while (cuptiActivityGetNextRecord(buffer, valid, &record) == CUPTI_SUCCESS) {
        if (record->kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record->kind == CUPTI_ACTIVITY_KIND_KERNEL) {
            const CUpti_ActivityKernel10 *k = (const CUpti_ActivityKernel10 *)record;
            add_kernel(k->name, (double)(k->end - k->start));
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)record;
            int kind = m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_HTOD   ? 0
                       : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOH ? 1
                       : m->copyKind == CUPTI_ACTIVITY_MEMCPY_KIND_DTOD ? 2
                                                                        : 3;
            profile.copies[kind]++;
            profile.copy_ns += (double)(m->end - m->start);
        } else if (record->kind == CUPTI_ACTIVITY_KIND_MEMSET) {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)record;
            profile.memsets++;
            profile.memset_ns += (double)(m->end - m->start);
        }
    }
    free(buffer);
}

static void CUPTIAPI on_runtime_call(void *user, CUpti_CallbackDomain domain, CUpti_CallbackId id, const void *data)
{
    (void)user;
    const CUpti_CallbackData *call = data;
    if (domain != CUPTI_CB_DOMAIN_RUNTIME_API || call->callbackSite != CUPTI_API_ENTER) return;
    switch (id) {
    case CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020: profile.calls[WAIT_DEVICE_SYNC]++; break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000: profile.calls[WAIT_STREAM_SYNC]++; break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020: profile.calls[WAIT_EVENT_SYNC]++; break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaFree_v3020: profile.calls[WAIT_FREE]++; break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
    case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000: profile.calls[GRAPH_LAUNCH]++; break;
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020:
    case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000: { /* the same parameters */
        const cudaMemcpy_v3020_params *p = call->functionParams;
        if (p->kind == cudaMemcpyDeviceToHost)
            profile.calls[WAIT_COPY_TO_HOST]++;
        else if (p->kind == cudaMemcpyHostToDevice)
            profile.calls[COPY_FROM_HOST_BLOCKING]++;
        break;
    }
    default: break;
    }
}

static bool cupti_ok(CUptiResult result, const char *what)
{
    if (result == CUPTI_SUCCESS) return true;
    const char *text = NULL;
    cuptiGetResultString(result, &text);
    fprintf(stderr, "step_profile: %s: %s\n", what, text ? text : "unknown CUPTI error");
    return false;
}

static const CUpti_ActivityKind activity_kinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                                                    CUPTI_ACTIVITY_KIND_MEMSET};

bool step_profile_start(void)
{
    if (profile.active) return true;
    profile.n_rows = 0;
    profile.launches = profile.memsets = 0;
    profile.copy_ns = profile.memset_ns = 0;
    memset(profile.copies, 0, sizeof profile.copies);
    memset(profile.calls, 0, sizeof profile.calls);
    cudaDeviceSynchronize();
    if (!cupti_ok(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "registering buffers"))
        return false;
    for (size_t i = 0; i < sizeof activity_kinds / sizeof activity_kinds[0]; i++)
        if (!cupti_ok(cuptiActivityEnable(activity_kinds[i]), "enabling activity records")) return false;
    if (!cupti_ok(cuptiSubscribe(&profile.subscriber, (CUpti_CallbackFunc)on_runtime_call, NULL), "subscribing") ||
        !cupti_ok(cuptiEnableDomain(1, profile.subscriber, CUPTI_CB_DOMAIN_RUNTIME_API), "runtime callbacks"))
        return false;
    profile.active = true;
    return true;
}

void step_profile_stop(void)
{
    if (!profile.active) return;
    cuptiUnsubscribe(profile.subscriber); /* before the sync below, which is not the step's */
    cudaDeviceSynchronize();
    for (size_t i = 0; i < sizeof activity_kinds / sizeof activity_kinds[0]; i++)
        cuptiActivityDisable(activity_kinds[i]);
    cuptiActivityFlushAll(1);
    profile.active = false;
}

static int by_time(const void *a, const void *b)
{
    double x = ((const kernel_row *)a)->total_ns, y = ((const kernel_row *)b)->total_ns;
    return x < y ? 1 : x > y ? -1 : 0;
}

step_profile_totals step_profile_get_totals(int steps)
{
    step_profile_totals t = {0};
    double ns = 0;
    for (int i = 0; i < profile.n_rows; i++) ns += profile.rows[i].total_ns;
    long waits_total = 0;
    for (int k = 0; k < N_CALL_KINDS; k++)
        if (waits(k)) waits_total += profile.calls[k];
    t.kernel_us = ns / 1e3 / steps;
    t.launches = (double)profile.launches / steps;
    t.host_waits = (double)waits_total / steps;
    return t;
}

void step_profile_report(FILE *out, const char *title, int steps, int top)
{
    qsort(profile.rows, (size_t)profile.n_rows, sizeof *profile.rows, by_time);
    step_profile_totals t = step_profile_get_totals(steps);
    fprintf(out, "\n%s: per step, %.1f kernels, %.1f us of kernels, %.2f host waits\n", title, t.launches, t.kernel_us,
            t.host_waits);
    fprintf(out, "  %-64s %8s %10s %6s\n", "kernel", "calls", "us", "%");
    double rest_ns = 0;
    long rest_calls = 0;
    for (int i = 0; i < profile.n_rows; i++) {
        const kernel_row *r = &profile.rows[i];
        if (i >= top) {
            rest_ns += r->total_ns, rest_calls += r->calls;
            continue;
        }
        fprintf(out, "  %-64.64s %8.1f %10.1f %6.1f\n", r->name, (double)r->calls / steps, r->total_ns / 1e3 / steps,
                100 * r->total_ns / 1e3 / steps / t.kernel_us);
    }
    if (rest_calls)
        fprintf(out, "  %-64s %8.1f %10.1f %6.1f\n", "(the other kernels)", (double)rest_calls / steps,
                rest_ns / 1e3 / steps, 100 * rest_ns / 1e3 / steps / t.kernel_us);
    fprintf(out,
            "  copies per step: %.1f host to device, %.1f device to host, %.1f on the device (%.1f us); "
            "memsets %.1f (%.1f us)\n",
            (double)profile.copies[0] / steps, (double)profile.copies[1] / steps, (double)profile.copies[2] / steps,
            profile.copy_ns / 1e3 / steps, (double)profile.memsets / steps, profile.memset_ns / 1e3 / steps);
    fprintf(out, "  runtime calls per step:");
    for (int k = 0; k < N_CALL_KINDS; k++)
        if (profile.calls[k]) fprintf(out, " %s %.1f;", call_kind_names[k], (double)profile.calls[k] / steps);
    fprintf(out, "\n");
}
