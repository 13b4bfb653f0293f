/* core/device.c: device memory for core/: the CUDA caching allocator, raw copies, and the
 * answers a build without CUDA gives. Nothing outside core/ calls cudaMalloc.
 *
 * The cache keeps freed blocks in one list, newest last. An allocation rounds its size
 * up (512 bytes below 1 MiB, then whole MiB) and takes the newest free block of exactly
 * that size, else asks CUDA for a new one (and, when CUDA is out of memory, gives every
 * cached block back and asks once more). Exact sizes and newest-first make repeated
 * identical steps reuse identical addresses. Unlocked: CUDA work comes from one thread at a time.
 *
 * CUDA graphs (core/graph.c). While a step is captured, every block handed out or given
 * back is recorded; when the capture ends, the graph reserves those blocks: its replays
 * write them, so none may go to another tensor while the graph lives. A reserved block
 * that is given back is parked (still counted in use) instead of cached, and returns to
 * the cache when its graph is freed. */
#include "internal.h"

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    void *ptr;
    size_t size;
} tg_block;

static struct {
    tg_block *free_blocks;
    size_t n_free, capacity;
    size_t in_use, peak, reserved;
} cache;

/* A block a graph holds: parked once given back, else still with its tensor. */
typedef struct {
    void *ptr;
    size_t size;
    const void *owner;
    bool parked;
} tg_graph_block;

static struct {
    tg_graph_block *blocks;
    size_t n, capacity;
} graph_blocks;

/* The blocks handed out or given back while a capture runs. */
static struct {
    tg_block *blocks;
    size_t n, capacity;
    bool on;
} captured;

/* Host memory is counted too (heap tensors, gradients, tape chunks), without a cache. The
 * counters are atomic: tensors may be made and freed on several threads at once. */
static struct {
    _Atomic size_t in_use, peak;
} host;

void tg_host_memory_account(size_t bytes, bool allocated)
{
    if (!allocated) {
        atomic_fetch_sub(&host.in_use, bytes);
        return;
    }
    const size_t now = atomic_fetch_add(&host.in_use, bytes) + bytes;
    size_t peak = atomic_load(&host.peak);
    while (now > peak && !atomic_compare_exchange_weak(&host.peak, &peak, now)) {
    }
}

static size_t round_size(size_t bytes)
{
    const size_t small = 512, large = (size_t)1 << 20;
    if (bytes < large) return (bytes + small - 1) / small * small + (bytes == 0 ? small : 0);
    return (bytes + large - 1) / large * large;
}

#ifndef TG_HAVE_CUDA
static tg_status no_cuda(const char *what)
{
    return tg_set_error(TG_ERR_DEVICE, "%s: this build has no CUDA backend", what);
}
#endif

/* Appends a block to a growing array of `element` bytes; false when out of memory. */
static bool append(void **array, size_t *n, size_t *capacity, size_t element, const void *item)
{
    if (*n == *capacity) {
        size_t grown_capacity = *capacity ? 2 * *capacity : 64;
        void *grown = realloc(*array, grown_capacity * element);
        if (!grown) return false;
        *array = grown, *capacity = grown_capacity;
    }
    memcpy((char *)*array + *n * element, item, element);
    (*n)++;
    return true;
}

static void note_captured(void *ptr, size_t size)
{
    if (!captured.on) return;
    for (size_t i = 0; i < captured.n; i++)
        if (captured.blocks[i].ptr == ptr) return;
    tg_block block = {ptr, size};
    if (!append((void **)&captured.blocks, &captured.n, &captured.capacity, sizeof block, &block))
        captured.on = false; /* tg_device_reserve_captured reports it */
}

static tg_graph_block *graph_block_of(const void *ptr)
{
    for (size_t i = 0; i < graph_blocks.n; i++)
        if (graph_blocks.blocks[i].ptr == ptr) return &graph_blocks.blocks[i];
    return NULL;
}

#ifdef TG_HAVE_CUDA
static bool take_cached(size_t size, void **out)
{
    for (size_t i = cache.n_free; i-- > 0;) {
        if (cache.free_blocks[i].size != size) continue;
        *out = cache.free_blocks[i].ptr;
        /* shift the newer blocks down: the list stays in the order blocks were freed */
        memmove(&cache.free_blocks[i], &cache.free_blocks[i + 1], (cache.n_free - i - 1) * sizeof(tg_block));
        cache.n_free--;
        return true;
    }
    return false;
}

static void release_cached(void)
{
    for (size_t i = 0; i < cache.n_free; i++) {
        tg_cuda_free(cache.free_blocks[i].ptr);
        cache.reserved -= cache.free_blocks[i].size;
    }
    cache.n_free = 0;
}
#endif

tg_status tg_device_alloc(tg_device device, size_t bytes, void **out)
{
    if (device == TG_DEVICE_CPU) {
        *out = malloc(bytes ? bytes : 1);
        if (!*out) return tg_set_error(TG_ERR_NOMEM, "out of host memory for %zu bytes", bytes);
        tg_host_memory_account(bytes, true);
        return TG_OK;
    }
#ifdef TG_HAVE_CUDA
    size_t size = round_size(bytes);
    if (!take_cached(size, out)) {
        if (tg_cuda_malloc(out, size) != TG_OK) {
            release_cached();
            if (tg_cuda_malloc(out, size) != TG_OK)
                return tg_set_error(TG_ERR_NOMEM, "out of CUDA memory for %zu bytes (%zu in use)", bytes, cache.in_use);
        }
        cache.reserved += size;
    }
    cache.in_use += size;
    if (cache.in_use > cache.peak) cache.peak = cache.in_use;
    note_captured(*out, size);
    return TG_OK;
#else
    (void)bytes;
    return no_cuda("device allocation");
#endif
}

/* Puts a device block in the cache (or, when the cache's list cannot grow, back to the driver). */
static void cache_block(void *ptr, size_t size)
{
    if (cache.n_free == cache.capacity) {
        size_t capacity = cache.capacity ? cache.capacity * 2 : 64;
        tg_block *grown = realloc(cache.free_blocks, capacity * sizeof *grown);
        if (!grown) {
#ifdef TG_HAVE_CUDA
            tg_cuda_free(ptr);
#endif
            cache.reserved -= size;
            cache.in_use -= size;
            return;
        }
        cache.free_blocks = grown;
        cache.capacity = capacity;
    }
    cache.free_blocks[cache.n_free++] = (tg_block){ptr, size};
    cache.in_use -= size;
}

void tg_device_free(tg_device device, void *ptr, size_t bytes)
{
    if (!ptr) return;
    if (device == TG_DEVICE_CPU) {
        free(ptr);
        tg_host_memory_account(bytes, false);
        return;
    }
    size_t size = round_size(bytes);
    note_captured(ptr, size);
    tg_graph_block *held = graph_block_of(ptr);
    if (held) { /* a graph's: it stays in use until the graph is freed */
        held->parked = true;
        return;
    }
    cache_block(ptr, size);
}

tg_status tg_device_memcpy(void *dst, const void *src, size_t bytes, tg_copy_direction direction)
{
#ifdef TG_HAVE_CUDA
    return tg_cuda_memcpy(dst, src, bytes, direction);
#else
    (void)dst, (void)src, (void)bytes, (void)direction;
    return no_cuda("device copy");
#endif
}

/* Every byte of the buffer ← value. */
static tg_status fill_bytes(tg_device device, void *ptr, int value, size_t bytes)
{
    if (bytes == 0) return TG_OK; /* an empty buffer may be NULL, which memset may not be given */
    if (device == TG_DEVICE_CPU) {
        memset(ptr, value, bytes);
        return TG_OK;
    }
#ifdef TG_HAVE_CUDA
    return tg_cuda_memset(ptr, value, bytes);
#else
    return no_cuda("device memset");
#endif
}

tg_status tg_device_poison(tg_device device, void *ptr, size_t bytes) { return fill_bytes(device, ptr, 0xff, bytes); }

tg_status tg_device_zero(tg_device device, void *ptr, size_t bytes) { return fill_bytes(device, ptr, 0, bytes); }

/* ---- CUDA graphs' memory ------------------------------------------------------------------------ */

void tg_device_capture_track(bool on)
{
    captured.on = on;
    captured.n = 0;
}

/* Takes a cached block out of the cache; false when it is not there. */
static bool take_from_cache(const void *ptr)
{
    for (size_t i = 0; i < cache.n_free; i++) {
        if (cache.free_blocks[i].ptr != ptr) continue;
        memmove(&cache.free_blocks[i], &cache.free_blocks[i + 1], (cache.n_free - i - 1) * sizeof(tg_block));
        cache.n_free--;
        return true;
    }
    return false;
}

tg_status tg_device_reserve_captured(const void *owner)
{
    bool complete = captured.on;
    for (size_t i = 0; complete && i < captured.n; i++) {
        const tg_block *b = &captured.blocks[i];
        if (graph_block_of(b->ptr)) continue; /* an earlier graph's already (never shared) */
        tg_graph_block held = {b->ptr, b->size, owner, false};
        if (!append((void **)&graph_blocks.blocks, &graph_blocks.n, &graph_blocks.capacity, sizeof held, &held)) {
            complete = false;
            break;
        }
        if (take_from_cache(b->ptr)) { /* given back during the capture: parked from now on */
            graph_blocks.blocks[graph_blocks.n - 1].parked = true;
            cache.in_use += b->size;
            if (cache.in_use > cache.peak) cache.peak = cache.in_use;
        }
    }
    tg_device_capture_track(false);
    if (complete) return TG_OK;
    tg_device_release_reserved(owner);
    return tg_set_error(TG_ERR_NOMEM, "out of host memory for the list of a graph's device blocks");
}

void tg_device_release_reserved(const void *owner)
{
    size_t kept = 0;
    for (size_t i = 0; i < graph_blocks.n; i++) {
        tg_graph_block b = graph_blocks.blocks[i];
        if (b.owner != owner)
            graph_blocks.blocks[kept++] = b;
        else if (b.parked)
            cache_block(b.ptr, b.size);
        /* a block still with its tensor goes to the cache when that tensor is freed */
    }
    graph_blocks.n = kept;
}

/* ---- public: memory statistics and synchronisation ---------------------------------------- */

tg_status tg_memory_stats_get(tg_device device, tg_memory_stats *stats)
{
    if (!tg_check_device_value("tg_memory_stats_get", device)) return tg_last_status();
    if (!stats) return tg_set_error(TG_ERR_INVALID, "tg_memory_stats_get: stats is NULL");
    if (tg_device_resolve(device) == TG_DEVICE_CPU) {
        const size_t in_use = atomic_load(&host.in_use);
        *stats = (tg_memory_stats){in_use, atomic_load(&host.peak), in_use};
        return TG_OK;
    }
    *stats = (tg_memory_stats){cache.in_use, cache.peak, cache.reserved};
    return TG_OK;
}

void tg_memory_reset_peak(void)
{
    cache.peak = cache.in_use;
    atomic_store(&host.peak, atomic_load(&host.in_use));
}

tg_status tg_memory_empty_cache(void)
{
#ifdef TG_HAVE_CUDA
    release_cached();
#endif
    return TG_OK;
}

tg_status tg_synchronize(tg_device device)
{
    if (!tg_check_device_value("tg_synchronize", device)) return tg_last_status();
    if (tg_device_resolve(device) != TG_DEVICE_CUDA) return TG_OK;
#ifdef TG_HAVE_CUDA
    return tg_cuda_synchronize();
#else
    return no_cuda("tg_synchronize");
#endif
}
