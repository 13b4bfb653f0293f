/* core/device.c: device memory for core/: the CUDA caching allocator, raw copies, and the
 * answers a build without CUDA gives. Nothing outside core/ calls cudaMalloc.
 *
 * The cache keeps freed blocks in one list, newest last. An allocation rounds its size
 * up (512 bytes below 1 MiB, then whole MiB) and takes the newest free block of exactly
 * that size, else asks CUDA for a new one (and, when CUDA is out of memory, gives every
 * cached block back and asks once more). Exact sizes and newest-first make repeated
 * identical steps reuse identical addresses. Single-threaded, like the rest of core. */
#include "internal.h"

#ifdef TG_HAVE_CUDA
#include "kernels/cuda_api.h"
#endif

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

/* Host memory is counted too (heap tensors, gradients, tape chunks), without a cache. */
static struct {
    size_t in_use, peak;
} host;

void tg_host_memory_account(size_t bytes, bool allocated)
{
    if (allocated) {
        host.in_use += bytes;
        if (host.in_use > host.peak) host.peak = host.in_use;
    } else {
        host.in_use -= bytes;
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
    return TG_OK;
#else
    (void)bytes;
    return no_cuda("device allocation");
#endif
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
    if (cache.n_free == cache.capacity) {
        size_t capacity = cache.capacity ? cache.capacity * 2 : 64;
        tg_block *grown = realloc(cache.free_blocks, capacity * sizeof *grown);
        if (!grown) { /* cannot cache it: give it back to the driver */
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

tg_status tg_device_memcpy(void *dst, const void *src, size_t bytes, tg_copy_direction direction)
{
#ifdef TG_HAVE_CUDA
    return tg_cuda_memcpy(dst, src, bytes, direction);
#else
    (void)dst, (void)src, (void)bytes, (void)direction;
    return no_cuda("device copy");
#endif
}

tg_status tg_device_zero(tg_device device, void *ptr, size_t bytes)
{
    if (device == TG_DEVICE_CPU) {
        memset(ptr, 0, bytes);
        return TG_OK;
    }
#ifdef TG_HAVE_CUDA
    return tg_cuda_memset_zero(ptr, bytes);
#else
    return no_cuda("device memset");
#endif
}

/* ---- public: memory statistics and synchronisation ---------------------------------------- */

tg_status tg_memory_stats_get(tg_device device, tg_memory_stats *stats)
{
    if (!stats) return tg_set_error(TG_ERR_INVALID, "tg_memory_stats_get: stats is NULL");
    if (tg_device_resolve(device) == TG_DEVICE_CPU) {
        *stats = (tg_memory_stats){host.in_use, host.peak, host.in_use};
        return TG_OK;
    }
    *stats = (tg_memory_stats){cache.in_use, cache.peak, cache.reserved};
    return TG_OK;
}

void tg_memory_reset_peak(void)
{
    cache.peak = cache.in_use;
    host.peak = host.in_use;
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
    if (tg_device_resolve(device) != TG_DEVICE_CUDA) return TG_OK;
#ifdef TG_HAVE_CUDA
    return tg_cuda_synchronize();
#else
    return no_cuda("tg_synchronize");
#endif
}
