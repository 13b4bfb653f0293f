/* core/graph.c: capturing a step into a CUDA graph and replaying it (tapegrad/graph.h).
 * The CUDA calls are in kernels/cuda/runtime.cu; the memory a graph keeps is the
 * allocator's business (core/device.c). */
#include "internal.h"
#include "tapegrad/graph.h"

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

#include <stdio.h>
#include <stdlib.h>

struct tg_graph {
    void *exec; /* cudaGraphExec_t */
    size_t n_nodes;
};

#ifdef TG_HAVE_CUDA

/* Prefixes the message that a failed call left with fn's name. */
static tg_status failed(const char *fn, tg_status status)
{
    char inner[900];
    snprintf(inner, sizeof inner, "%s", tg_last_error());
    return tg_set_error(status, "%s: %s", fn, inner);
}

tg_status tg_graph_begin(tg_device device)
{
    const char *fn = "tg_graph_begin";
    if (!tg_check_device_value(fn, device)) return tg_last_status();
    if (tg_device_resolve(device) != TG_DEVICE_CUDA || !tg_device_has_tensors(TG_DEVICE_CUDA))
        return tg_set_error(TG_ERR_DEVICE,
                            "%s: graphs are recorded on a CUDA device, not on %s (run a CPU step "
                            "directly)",
                            fn, tg_device_name(tg_device_resolve(device)));
    if (tg_cuda_capturing()) return tg_set_error(TG_ERR_STATE, "%s: a capture is already running", fn);
    if (!tg_cuda_bad_input_record()) return failed(fn, TG_ERR_DEVICE);
    tg_device_capture_track(true);
    tg_status status = tg_cuda_capture_begin();
    if (status != TG_OK) {
        tg_device_capture_track(false);
        return failed(fn, status);
    }
    return TG_OK;
}

tg_graph *tg_graph_end(void)
{
    const char *fn = "tg_graph_end";
    if (!tg_cuda_capturing()) {
        tg_set_error(TG_ERR_STATE, "%s: no capture is running (tg_graph_begin starts one)", fn);
        return NULL;
    }
    tg_graph *graph = calloc(1, sizeof *graph);
    tg_status status =
        tg_cuda_capture_end(graph ? &graph->exec : &(void *){NULL}, graph ? &graph->n_nodes : &(size_t){0});
    if (status == TG_OK && !graph) status = tg_set_error(TG_ERR_NOMEM, "%s: out of host memory", fn);
    if (status == TG_OK) status = tg_device_reserve_captured(graph);
    if (status == TG_OK) return graph;
    tg_device_capture_track(false);
    if (graph) tg_cuda_graph_destroy(graph->exec);
    free(graph);
    failed(fn, status);
    return NULL;
}

tg_status tg_graph_replay(tg_graph *graph)
{
    if (!graph) return tg_set_error(TG_ERR_INVALID, "tg_graph_replay: graph is NULL");
    tg_status status = tg_cuda_graph_launch(graph->exec);
    return status == TG_OK ? TG_OK : failed("tg_graph_replay", status);
}

void tg_graph_free(tg_graph *graph)
{
    if (!graph) return;
    tg_cuda_graph_destroy(graph->exec); /* waits for the graph's runs that are still queued */
    tg_device_release_reserved(graph);
    free(graph);
}

bool tg_graph_capturing(void) { return tg_cuda_capturing(); }

tg_status tg_device_check_errors(tg_device device)
{
    if (!tg_check_device_value("tg_device_check_errors", device)) return tg_last_status();
    if (tg_device_resolve(device) != TG_DEVICE_CUDA || !tg_device_has_tensors(TG_DEVICE_CUDA)) return TG_OK;
    tg_bad_input bad;
    tg_status status = tg_cuda_take_bad_input(&bad);
    if (status != TG_OK) return failed("tg_device_check_errors", status);
    switch (bad.kind) {
    case TG_BAD_EMBEDDING_ID:
        return tg_set_error(TG_ERR_INVALID,
                            "tg_embedding: id %d at flat position %lld is outside [0, %lld) (found "
                            "on the device in a captured step; the optimizer step after it changed "
                            "nothing)",
                            (int)bad.value, (long long)bad.position, (long long)bad.limit);
    case TG_BAD_TARGET:
        return tg_set_error(TG_ERR_INVALID,
                            "tg_cross_entropy: target %d at flat position %lld is outside [0, V) "
                            "with V = %lld (found on the device in a captured step; the optimizer "
                            "step after it changed nothing)",
                            (int)bad.value, (long long)bad.position, (long long)bad.limit);
    default: return TG_OK;
    }
}

#else /* no CUDA in this build */

tg_status tg_graph_begin(tg_device device)
{
    if (!tg_check_device_value("tg_graph_begin", device)) return tg_last_status();
    return tg_set_error(TG_ERR_DEVICE,
                        "tg_graph_begin: graphs are recorded on a CUDA device, and this build has "
                        "no CUDA backend (device %s)",
                        tg_device_name(tg_device_resolve(device)));
}

tg_graph *tg_graph_end(void)
{
    tg_set_error(TG_ERR_STATE, "tg_graph_end: no capture is running (this build has no CUDA backend)");
    return NULL;
}

tg_status tg_graph_replay(tg_graph *graph)
{
    (void)graph;
    return tg_set_error(TG_ERR_INVALID, "tg_graph_replay: graph is NULL (this build has no CUDA backend)");
}

void tg_graph_free(tg_graph *graph) { free(graph); }

bool tg_graph_capturing(void) { return false; }

tg_status tg_device_check_errors(tg_device device)
{
    return tg_check_device_value("tg_device_check_errors", device) ? TG_OK : TG_ERR_DEVICE;
}

#endif

size_t tg_graph_node_count(const tg_graph *graph)
{
    if (graph) return graph->n_nodes;
    tg_set_error(TG_ERR_INVALID, "tg_graph_node_count: graph is NULL");
    return 0;
}
