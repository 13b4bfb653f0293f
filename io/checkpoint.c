/* io/checkpoint.c: training checkpoints (parameters, optimizer state, step, generator
 * state, config) in one safetensors file.
 *
 * Saving writes a temporary file beside the target and renames it over the target only
 * once it is complete and on disk, so the target is always a whole checkpoint. Loading
 * reads the whole file into scratch memory, checks the CRC-32 of the whole file, the
 * layout (io/safetensors.c), the metadata and every name, dtype and shape against the
 * model, and copies into the model only when all of it passed.
 *
 * Integrity: the metadata entry "file_crc32" holds the CRC-32 of every byte of the file,
 * computed with its own 8 hex digits read as "00000000". Any edit of one byte anywhere
 * (the length, the header, the metadata, the data, the digits themselves) changes the CRC
 * or the digits, and a CRC-32 catches every burst of up to 32 bits. The file stays a
 * plain safetensors file: the record is one more metadata string. Version 1 files carry
 * "data_crc32" (the data section only) and load as before. */
#define _POSIX_C_SOURCE 200809L /* mkstemp, fsync, O_DIRECTORY */
#include "io/internal.h"
#include "io/safetensors.h"
#include "optim/internal.h"
#include "tapegrad/checkpoint.h"
#include "tapegrad/optim.h"
#include "tapegrad/params.h"
#include "tapegrad/rng.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "tensors are written in the host's byte order, and safetensors is little-endian"
#endif

#define FORMAT_NAME "tapegrad.checkpoint"
#define CHUNK ((size_t)1 << 20) /* bytes written (or staged from a device) at a time */
#define FILE_CRC_KEY "\"file_crc32\":\""
#define DATA_CRC_KEY "data_crc32" /* version 1 */
/* Step counts past 2^53 are not exact in the double maths of the schedule and the bias
 * correction; no run takes that many, so a file that says so is damaged. */
#define MAX_STEP ((int64_t)1 << 53)

void (*tg_checkpoint_write_hook)(const char *temp_path, uint64_t written, uint64_t total) = NULL;

/* ---- CRC-32 (IEEE 802.3, reflected, as zlib's crc32) ------------------------------------ */

static void crc_table(uint32_t table[256])
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++) c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
        table[i] = c;
    }
}

/* Continues a CRC (start from 0) over n more bytes. */
static uint32_t crc_update(const uint32_t table[256], uint32_t crc, const unsigned char *bytes, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) crc = table[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
    return ~crc;
}

/* ---- what goes into a file: one entry per tensor ----------------------------------------- */

typedef struct {
    char *name;
    const tg_tensor *param; /* the parameter whose shape it has */
    char *data;             /* its first byte, on the store's device */
    tg_dtype dtype;
    uint64_t bytes, begin;     /* size, and offset in the data section */
    const tg_st_tensor *found; /* loading: the file's tensor of this name */
} entry;

typedef struct {
    entry *entries;
    size_t count;
    tg_device device;
} plan;

static void plan_release(plan *p)
{
    for (size_t i = 0; i < p->count; i++) free(p->entries[i].name);
    free(p->entries);
    *p = (plan){0};
}

static bool add_entry(plan *p, const char *prefix, const char *buffer, const tg_tensor *param, char *data,
                      tg_dtype dtype)
{
    size_t n = strlen(prefix) + strlen(buffer) + strlen(param->name) + 3;
    entry *e = &p->entries[p->count];
    if (!(e->name = malloc(n))) return false;
    snprintf(e->name, n, "%s%s%s%s", prefix, buffer, *buffer ? "." : "", param->name);
    e->param = param;
    e->data = data;
    e->dtype = dtype;
    e->bytes = (uint64_t)tg_numel(param) * tg_dtype_size(dtype);
    p->count++;
    return true;
}

/* The parameters in store order, then each optimizer buffer's slice per parameter. */
static tg_status plan_build(const char *op, tg_params *params, const tg_optim *optim, plan *p)
{
    tg_optim_buffer buffers[TG_OPTIM_MAX_BUFFERS];
    int n_buffers = optim ? tg_optim_buffers(optim, buffers) : 0;
    size_t n_params = tg_params_count(params);
    *p = (plan){.device = tg_params_get(params, 0)->device};
    p->entries = calloc(n_params * (size_t)(1 + n_buffers), sizeof *p->entries);
    bool ok = p->entries != NULL;
    for (size_t i = 0; ok && i < n_params; i++) {
        tg_tensor *t = tg_params_get(params, i);
        ok = add_entry(p, "", "", t, tg_bytes(t), t->dtype);
    }
    for (int b = 0; ok && b < n_buffers; b++)
        for (size_t i = 0; ok && i < n_params; i++) {
            tg_tensor *t = tg_params_get(params, i);
            char *data = (char *)buffers[b].data + t->offset * (int64_t)tg_dtype_size(buffers[b].dtype);
            ok = add_entry(p, "optim.", buffers[b].name, t, data, buffers[b].dtype);
        }
    if (ok) return TG_OK;
    plan_release(p);
    return tg_set_error(TG_ERR_NOMEM, "%s: out of memory listing %zu tensors", op, n_params * (size_t)(1 + n_buffers));
}

/* Data offsets: larger elements first (f64, then f32, then 16-bit), so that every tensor
 * starts at a multiple of its element size (the header ends at a multiple of 8). */
static uint64_t plan_offsets(plan *p)
{
    uint64_t at = 0;
    for (size_t size = 8; size >= 1; size /= 2)
        for (size_t i = 0; i < p->count; i++)
            if (tg_dtype_size(p->entries[i].dtype) == size) {
                p->entries[i].begin = at;
                at += p->entries[i].bytes;
            }
    return at;
}

/* ---- checks shared by save and load ----------------------------------------------------------- */

static tg_status check_params(const char *op, const char *path, tg_params *params, const tg_optim *optim)
{
    if (!path || !params) return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", op, !path ? "path" : "params");
    if (tg_params_count(params) == 0)
        return tg_set_error(TG_ERR_INVALID, "%s: %s: params holds no parameters", op, path);
    for (size_t i = 0; i < tg_params_count(params); i++) {
        const char *name = tg_params_get(params, i)->name, *wrong = tg_st_name_problem(name);
        if (!strncmp(name, "optim.", 6))
            return tg_set_error(TG_ERR_INVALID,
                                "%s: %s: parameter '%s': names starting with 'optim.' are kept for optimizer state", op,
                                path, name);
        if (wrong)
            return tg_set_error(TG_ERR_INVALID, "%s: %s: parameter name '%s' %s, so no checkpoint can hold it", op,
                                path, name, wrong);
    }
    if (optim && tg_optim_params(optim) != params)
        return tg_set_error(TG_ERR_INVALID, "%s: %s: optim belongs to another parameter store than params", op, path);
    return !optim || tg_optim_matches_store(op, optim) ? TG_OK : TG_ERR_STATE;
}

/* ---- saving ---------------------------------------------------------------------------------- */

static cJSON *add_number(cJSON *array, uint64_t value)
{
    char text[24];
    snprintf(text, sizeof text, "%llu", (unsigned long long)value); /* exact, unlike a double */
    cJSON *item = cJSON_CreateRaw(text);
    if (item) cJSON_AddItemToArray(array, item);
    return item;
}

static bool add_tensor(cJSON *root, const entry *e)
{
    cJSON *t = cJSON_AddObjectToObject(root, e->name);
    cJSON *shape = t && cJSON_AddStringToObject(t, "dtype", tg_st_dtype_name(e->dtype))
                       ? cJSON_AddArrayToObject(t, "shape")
                       : NULL;
    bool ok = shape != NULL;
    for (int d = 0; ok && d < e->param->ndim; d++) ok = add_number(shape, (uint64_t)e->param->shape[d]) != NULL;
    cJSON *offsets = ok ? cJSON_AddArrayToObject(t, "data_offsets") : NULL;
    return offsets && add_number(offsets, e->begin) && add_number(offsets, e->begin + e->bytes);
}

static bool add_metadata(cJSON *root, const tg_optim *optim, const tg_checkpoint_info *info, const char *config)
{
    char step[24], optim_step[24], rng[72];
    snprintf(step, sizeof step, "%lld", (long long)(info ? info->step : 0));
    snprintf(optim_step, sizeof optim_step, "%lld", (long long)(optim ? tg_optim_step_count(optim) : 0));
    const uint64_t *s = info ? info->rng.s : (const uint64_t[4]){0};
    snprintf(rng, sizeof rng, "%016llx %016llx %016llx %016llx", (unsigned long long)s[0], (unsigned long long)s[1],
             (unsigned long long)s[2], (unsigned long long)s[3]);
    cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
    return m && cJSON_AddStringToObject(m, "format", FORMAT_NAME) &&
           cJSON_AddStringToObject(m, "format_version", "2") && cJSON_AddStringToObject(m, "step", step) &&
           cJSON_AddStringToObject(m, "rng", rng) &&
           cJSON_AddStringToObject(m, "optimizer",
                                   optim ? tg_optim_kind_name(tg_optim_get_config(optim)->kind) : "none") &&
           cJSON_AddStringToObject(m, "optimizer_step", optim_step) && cJSON_AddStringToObject(m, "config", config) &&
           cJSON_AddStringToObject(m, "file_crc32", "00000000"); /* filled in once the data is written */
}

/* The header text, padded with spaces so that the data section starts at a multiple of 8;
 * *crc_at is where the CRC's 8 hex digits go. */
static char *header_text(const plan *p, const tg_optim *optim, const tg_checkpoint_info *info, const char *config,
                         uint64_t *length, size_t *crc_at)
{
    cJSON *root = cJSON_CreateObject();
    bool ok = root && add_metadata(root, optim, info, config);
    for (size_t i = 0; ok && i < p->count; i++) ok = add_tensor(root, &p->entries[i]);
    char *json = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!json) return NULL;
    size_t n = strlen(json), padded = (n + 7) / 8 * 8;
    char *text = malloc(padded + 1);
    if (text) {
        memcpy(text, json, n);
        memset(text + n, ' ', padded - n);
        text[padded] = '\0';
    }
    free(json);
    const char *crc = text ? strstr(text, FILE_CRC_KEY) : NULL;
    if (!crc) {
        free(text);
        return NULL;
    }
    *crc_at = (size_t)(crc - text) + strlen(FILE_CRC_KEY);
    *length = padded;
    return text;
}

typedef struct {
    const char *op, *path;
    char *temp;
    int fd;
    uint64_t written, total;
} writer;

static tg_status io_error(const writer *w, const char *what)
{
    return tg_set_error(TG_ERR_INVALID, "%s: %s: %s: %s", w->op, w->path, what, strerror(errno));
}

static tg_status write_all(writer *w, const void *bytes, size_t n)
{
    const char *at = bytes;
    while (n > 0) {
        ssize_t done = write(w->fd, at, n);
        if (done < 0 && errno == EINTR) continue;
        if (done < 0) return io_error(w, "cannot write the temporary file");
        at += done;
        n -= (size_t)done;
        w->written += (uint64_t)done;
    }
    if (tg_checkpoint_write_hook) tg_checkpoint_write_hook(w->temp, w->written, w->total);
    return TG_OK;
}

/* Writes the tensors in data-section order (host memory directly, device memory through a
 * staging buffer), carrying *crc on over all of it. */
static tg_status write_data(writer *w, const plan *p, const uint32_t table[256], uint32_t *crc)
{
    unsigned char *stage = p->device == TG_DEVICE_CPU ? NULL : malloc(CHUNK);
    if (p->device != TG_DEVICE_CPU && !stage) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", w->op);
    tg_status status = TG_OK;
    for (size_t size = 8; size >= 1 && status == TG_OK; size /= 2)
        for (size_t i = 0; i < p->count && status == TG_OK; i++) {
            const entry *e = &p->entries[i];
            if (tg_dtype_size(e->dtype) != size) continue;
            for (uint64_t done = 0; done < e->bytes && status == TG_OK; done += CHUNK) {
                size_t n = e->bytes - done < CHUNK ? (size_t)(e->bytes - done) : CHUNK;
                const unsigned char *bytes = (const unsigned char *)e->data + done;
                if (stage) {
                    status = tg_device_memcpy(stage, bytes, n, TG_COPY_DEVICE_TO_HOST);
                    bytes = stage;
                }
                if (status == TG_OK) {
                    *crc = crc_update(table, *crc, bytes, n);
                    status = write_all(w, bytes, n);
                }
            }
        }
    free(stage);
    return status;
}

/* A temporary file's name is ".<base>.tmp.XXXXXX" beside the target, with base cut to
 * TEMP_BASE_MAX bytes so that a long name (up to the 255 bytes a file name may have) still
 * leaves room for the rest. Saves killed before their rename leave such files; a later
 * save of the same target removes those not written to for STALE_SECONDS (a live save's
 * file is written to all along). */
#define TEMP_BASE_MAX 200
#define TEMP_SUFFIX ".tmp.XXXXXX"
#define STALE_SECONDS 3600

/* "<dir>/.<base>.tmp.XXXXXX" beside path; *dir gets the directory ("." for a bare name) and
 * *prefix the name's start, ".<base>.tmp.". */
static char *temp_name(const char *path, char **dir, char **prefix)
{
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dir_length = slash ? (size_t)(slash - path) + (slash == path) : 1;
    const int base_length = strlen(base) > TEMP_BASE_MAX ? TEMP_BASE_MAX : (int)strlen(base);
    const size_t size = dir_length + (size_t)base_length + sizeof TEMP_SUFFIX + 2;
    char *name = malloc(size);
    *dir = malloc(dir_length + 1);
    *prefix = malloc((size_t)base_length + sizeof TEMP_SUFFIX + 1);
    if (!name || !*dir || !*prefix) {
        free(name);
        free(*dir);
        free(*prefix);
        *dir = *prefix = NULL;
        return NULL;
    }
    memcpy(*dir, slash ? path : ".", dir_length);
    (*dir)[dir_length] = '\0';
    snprintf(name, size, "%s/.%.*s" TEMP_SUFFIX, *dir, base_length, base);
    snprintf(*prefix, (size_t)base_length + sizeof TEMP_SUFFIX + 1, ".%.*s.tmp.", base_length, base);
    return name;
}

/* Removes the regular files in dir named prefix + 6 characters (mkstemp's) that nothing
 * has written to for STALE_SECONDS: the leftovers of killed saves of the same target. */
static void remove_stale_temps(const char *dir, const char *prefix)
{
    DIR *d = opendir(dir);
    if (!d) return;
    const size_t n = strlen(prefix), path_size = strlen(dir) + n + 8;
    char *path = malloc(path_size);
    const time_t now = time(NULL);
    for (struct dirent *e; path && (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, n) || strlen(e->d_name) != n + 6) continue;
        snprintf(path, path_size, "%s/%s", dir, e->d_name);
        struct stat st;
        if (!lstat(path, &st) && S_ISREG(st.st_mode) && now - st.st_mtime > STALE_SECONDS) unlink(path);
    }
    free(path);
    closedir(d);
}

/* Writes the whole file under a temporary name, flushes it, renames it over path and
 * flushes the directory (so that the rename itself survives a crash). */
static tg_status write_atomically(writer *w, const char *header, uint64_t header_length, size_t crc_at, const plan *p)
{
    char *dir = NULL, *prefix = NULL;
    if (!(w->temp = temp_name(w->path, &dir, &prefix))) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory", w->op);
    tg_status status = TG_OK;
    if ((w->fd = mkstemp(w->temp)) < 0) {
        status = io_error(w, "cannot create a temporary file beside it");
        goto done;
    }
    uint32_t table[256];
    crc_table(table);
    /* the header as written, its CRC digits still "00000000" */
    uint32_t crc = crc_update(table, crc_update(table, 0, (const unsigned char *)&header_length, 8),
                              (const unsigned char *)header, (size_t)header_length);
    char crc_text[9];
    status = fchmod(w->fd, 0644) ? io_error(w, "cannot set the temporary file's mode") : TG_OK;
    if (status == TG_OK) status = write_all(w, &header_length, 8);
    if (status == TG_OK) status = write_all(w, header, (size_t)header_length);
    if (status == TG_OK) status = write_data(w, p, table, &crc);
    snprintf(crc_text, sizeof crc_text, "%08x", crc);
    if (status == TG_OK && pwrite(w->fd, crc_text, 8, (off_t)(8 + crc_at)) != 8)
        status = io_error(w, "cannot write the checksum");
    if (status == TG_OK && fsync(w->fd)) status = io_error(w, "cannot flush the temporary file to disk");
    if (close(w->fd) && status == TG_OK) status = io_error(w, "cannot close the temporary file");
    if (status == TG_OK && rename(w->temp, w->path)) status = io_error(w, "cannot rename the temporary file over it");
    if (status != TG_OK) {
        unlink(w->temp);
        goto done;
    }
    int dir_fd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dir_fd < 0 || fsync(dir_fd)) status = io_error(w, "saved, but cannot flush its directory to disk");
    if (dir_fd >= 0) close(dir_fd);
    remove_stale_temps(dir, prefix);
done:
    free(dir);
    free(prefix);
    free(w->temp);
    return status;
}

tg_status tg_checkpoint_save(const char *path, tg_params *params, const tg_optim *optim, const tg_checkpoint_info *info)
{
    const char *op = "tg_checkpoint_save";
    tg_status status = check_params(op, path, params, optim);
    if (status != TG_OK) return status;
    if (info && (info->step < 0 || info->step > MAX_STEP))
        return tg_set_error(TG_ERR_INVALID, "%s: %s: info step %lld is outside [0, 2^53]", op, path,
                            (long long)info->step);
    const char *config = info && info->config ? info->config : "{}";
    cJSON *parsed = cJSON_Parse(config);
    cJSON_Delete(parsed);
    if (!parsed) return tg_set_error(TG_ERR_INVALID, "%s: %s: info config is not valid JSON", op, path);
    plan p;
    if ((status = plan_build(op, params, optim, &p)) != TG_OK) return status;
    writer w = {.op = op, .path = path, .fd = -1};
    uint64_t header_length = 0;
    size_t crc_at = 0;
    uint64_t data_size = plan_offsets(&p);
    char *header = header_text(&p, optim, info, config, &header_length, &crc_at);
    if (!header) {
        status = tg_set_error(TG_ERR_NOMEM, "%s: %s: out of memory writing the header", op, path);
    } else {
        w.total = 8 + header_length + data_size;
        status = write_atomically(&w, header, header_length, crc_at, &p);
    }
    free(header);
    plan_release(&p);
    return status;
}

/* ---- loading: metadata ------------------------------------------------------------------------ */

typedef struct {
    int64_t step, optim_step, version;
    tg_rng rng;
    const char *config, *optimizer;
    uint32_t crc; /* of the whole file (version 2) or of the data section (version 1) */
} meta;

static bool parse_int(const char *text, int64_t *out)
{
    if (!text || !*text) return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || *end || v < 0 || (text[0] < '0' || text[0] > '9')) return false;
    *out = v;
    return true;
}

static bool parse_hex(const char *text, size_t digits, uint64_t *out)
{
    uint64_t v = 0;
    for (size_t i = 0; i < digits; i++) {
        char c = text[i];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (d < 0) return false;
        v = v << 4 | (uint64_t)d;
    }
    *out = v;
    return true;
}

/* The format and its version; *problem on failure. */
static bool read_version(const tg_st_header *h, int64_t *v, char *problem, size_t size)
{
    const char *format = tg_st_metadata(h, "format");
    if (!format || strcmp(format, FORMAT_NAME))
        snprintf(problem, size, "it is not a tapegrad checkpoint (no metadata \"format\": \"" FORMAT_NAME "\")");
    else if (!parse_int(tg_st_metadata(h, "format_version"), v))
        snprintf(problem, size, "metadata \"format_version\" is missing or not a number");
    else if (*v < 1 || *v > TG_CHECKPOINT_FORMAT_VERSION)
        snprintf(problem, size, "format version %lld is not supported (this build reads versions 1 to %d)",
                 (long long)*v, TG_CHECKPOINT_FORMAT_VERSION);
    else
        return true;
    return false;
}

/* Reads and checks the metadata this module writes; *problem on failure. */
static bool read_meta(const tg_st_header *h, meta *m, char *problem, size_t size)
{
    if (!read_version(h, &m->version, problem, size)) return false;
    const char *rng = tg_st_metadata(h, "rng");
    const char *crc = tg_st_metadata(h, m->version == 1 ? DATA_CRC_KEY : "file_crc32");
    uint64_t crc_value = 0;
    m->config = tg_st_metadata(h, "config");
    m->optimizer = tg_st_metadata(h, "optimizer");
    const char *wrong = NULL;
    if (!parse_int(tg_st_metadata(h, "step"), &m->step))
        wrong = "metadata \"step\" is missing or not a count";
    else if (m->step > MAX_STEP)
        wrong = "metadata \"step\" is beyond 2^53 (no run takes that many steps)";
    else if (!parse_int(tg_st_metadata(h, "optimizer_step"), &m->optim_step))
        wrong = "metadata \"optimizer_step\" is missing or not a count";
    else if (m->optim_step > MAX_STEP)
        wrong = "metadata \"optimizer_step\" is beyond 2^53 (no run takes that many steps)";
    else if (!rng || strlen(rng) != 67 || rng[16] != ' ' || rng[33] != ' ' || rng[50] != ' ' ||
             !parse_hex(rng, 16, &m->rng.s[0]) || !parse_hex(rng + 17, 16, &m->rng.s[1]) ||
             !parse_hex(rng + 34, 16, &m->rng.s[2]) || !parse_hex(rng + 51, 16, &m->rng.s[3]))
        wrong = "metadata \"rng\" is missing or not four 16-digit hex words";
    else if (!m->optimizer ||
             (strcmp(m->optimizer, "none") && strcmp(m->optimizer, "sgd") && strcmp(m->optimizer, "adamw")))
        wrong = "metadata \"optimizer\" is missing or not one of none, sgd, adamw";
    else if (!crc || strlen(crc) != 8 || !parse_hex(crc, 8, &crc_value))
        wrong = m->version == 1 ? "metadata \"data_crc32\" is missing or not 8 hex digits"
                                : "metadata \"file_crc32\" is missing or not 8 hex digits";
    else if (!m->config)
        wrong = "metadata \"config\" is missing";
    if (wrong) {
        snprintf(problem, size, "%s", wrong);
        return false;
    }
    m->crc = (uint32_t)crc_value;
    cJSON *config = cJSON_Parse(m->config);
    cJSON_Delete(config);
    if (!config) snprintf(problem, size, "metadata \"config\" is not valid JSON");
    return config != NULL;
}

/* Version 2: the CRC-32 of the whole file, its own digits (found as this module writes
 * them, once, in the header) read as "00000000", against the one the file gives. */
static bool file_crc_matches(const unsigned char *file, size_t size, uint64_t header_length, uint32_t want,
                             char *problem, size_t n)
{
    const size_t key = strlen(FILE_CRC_KEY);
    size_t at = 0;
    int found = 0;
    for (size_t i = 8; i + key + 8 <= 8 + header_length; i++)
        if (!memcmp(file + i, FILE_CRC_KEY, key)) at = i + key, found++;
    if (found != 1) {
        snprintf(problem, n, "the header holds %d entries written as \"file_crc32\":\"…\" (one is needed)", found);
        return false;
    }
    uint32_t table[256];
    crc_table(table);
    uint32_t crc = crc_update(table, 0, file, at);
    crc = crc_update(table, crc, (const unsigned char *)"00000000", 8);
    crc = crc_update(table, crc, file + at + 8, size - at - 8);
    if (crc == want) return true;
    snprintf(problem, n, "the file's CRC-32 is %08x but it says %08x (the file is corrupt)", crc, want);
    return false;
}

/* ---- loading: matching the file against the model ------------------------------------------------ */

static int entry_by_name(const void *a, const void *b)
{
    return strcmp(((const entry *)a)->name, ((const entry *)b)->name);
}

static entry *find_entry(plan *p, const char *name)
{
    entry key = {.name = (char *)name};
    return bsearch(&key, p->entries, p->count, sizeof *p->entries, entry_by_name);
}

/* "[2, 3] F32" */
static const char *describe(int ndim, const int64_t *shape, tg_dtype dtype, char *text, size_t size)
{
    char dims[96];
    snprintf(text, size, "%s %s", tg_shape_str(ndim, shape, dims, sizeof dims), tg_st_dtype_name(dtype));
    return text;
}

/* Pairs every file tensor with the model's entry of that name; any tensor the model lacks,
 * any mismatch of dtype or shape, and any entry the file lacks is a problem. */
static bool match(const tg_st_header *h, plan *p, bool ignore_optim, char *problem, size_t size)
{
    qsort(p->entries, p->count, sizeof *p->entries, entry_by_name);
    for (size_t i = 0; i < h->count; i++) {
        const tg_st_tensor *t = &h->tensors[i];
        entry *e = find_entry(p, t->name);
        if (!e && ignore_optim && !strncmp(t->name, "optim.", 6)) continue;
        if (!e) {
            snprintf(problem, size, "tensor '%s' is in the file but not in the %s", t->name,
                     strncmp(t->name, "optim.", 6) ? "model (params)" : "optimizer's state (optim)");
            return false;
        }
        bool same = t->dtype == e->dtype && t->ndim == e->param->ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == e->param->shape[d];
        if (!same) {
            char in_file[128], in_model[128];
            snprintf(problem, size, "tensor '%s' is %s in the file but %s in the model", t->name,
                     describe(t->ndim, t->shape, t->dtype, in_file, sizeof in_file),
                     describe(e->param->ndim, e->param->shape, e->dtype, in_model, sizeof in_model));
            return false;
        }
        e->found = t;
    }
    for (size_t i = 0; i < p->count; i++)
        if (!p->entries[i].found) {
            snprintf(problem, size, "tensor '%s' is missing from the file", p->entries[i].name);
            return false;
        }
    return true;
}

static bool check_optimizer(const meta *m, const tg_optim *optim, char *problem, size_t size)
{
    if (!optim) return true;
    const char *kind = tg_optim_kind_name(tg_optim_get_config(optim)->kind);
    if (!strcmp(m->optimizer, kind)) return true;
    if (!strcmp(m->optimizer, "none"))
        snprintf(problem, size, "it holds no optimizer state, but optim is a %s optimizer to load into", kind);
    else
        snprintf(problem, size, "it holds %s optimizer state, but optim is %s", m->optimizer, kind);
    return false;
}

static tg_status load_fail(const char *op, const char *name, const char *problem)
{
    return tg_set_error(TG_ERR_INVALID, "%s: %s: %s; nothing was changed", op, name, problem);
}

/* Everything is checked before the first byte of the model changes. */
/* file: the whole file (size bytes), whose header h was parsed. */
static tg_status load_parsed(const char *op, const char *name, const tg_st_header *h, const unsigned char *file,
                             size_t size, uint64_t header_length, tg_params *params, tg_optim *optim,
                             tg_checkpoint_info *info)
{
    char problem[512];
    meta m = {0};
    const unsigned char *data = file + 8 + header_length;
    if (!read_meta(h, &m, problem, sizeof problem) ||
        (m.version >= 2 && !file_crc_matches(file, size, header_length, m.crc, problem, sizeof problem)) ||
        !check_optimizer(&m, optim, problem, sizeof problem))
        return load_fail(op, name, problem);
    plan p;
    tg_status status = plan_build(op, params, optim, &p);
    if (status != TG_OK) return status;
    if (!match(h, &p, optim == NULL, problem, sizeof problem)) {
        plan_release(&p);
        return load_fail(op, name, problem);
    }
    uint32_t table[256];
    crc_table(table);
    /* version 1: the data's own CRC-32 (version 2's covered the whole file above) */
    uint32_t crc = m.version == 1 ? crc_update(table, 0, data, (size_t)h->data_size) : m.crc;
    char *config = info ? malloc(strlen(m.config) + 1) : NULL;
    if (crc != m.crc || (info && !config)) {
        plan_release(&p);
        free(config);
        if (crc != m.crc) {
            snprintf(problem, sizeof problem, "the data's CRC-32 is %08x but the file says %08x (the data is corrupt)",
                     crc, m.crc);
            return load_fail(op, name, problem);
        }
        return tg_set_error(TG_ERR_NOMEM, "%s: %s: out of memory", op, name);
    }
    /* Commit: only a failing device copy can stop it now. */
    for (size_t i = 0; i < p.count && status == TG_OK; i++) {
        const entry *e = &p.entries[i];
        const unsigned char *from = data + e->found->begin;
        if (p.device == TG_DEVICE_CPU)
            memcpy(e->data, from, (size_t)e->bytes);
        else
            status = tg_device_memcpy(e->data, from, (size_t)e->bytes, TG_COPY_HOST_TO_DEVICE);
    }
    plan_release(&p);
    if (status != TG_OK) {
        free(config);
        return status;
    }
    if (optim && (status = tg_optim_set_step_count(optim, m.optim_step)) != TG_OK) {
        free(config);
        return status;
    }
    if (info) {
        strcpy(config, m.config);
        *info = (tg_checkpoint_info){.step = m.step, .rng = m.rng, .config = config};
    }
    return TG_OK;
}

/* ---- loading: files and buffers --------------------------------------------------------------------- */

/* Reads the 8-byte header length (first may be NULL when the file is shorter than 8
 * bytes) and checks it against the file's size. */
static bool check_length(const unsigned char *first, uint64_t size, uint64_t *length, char *problem, size_t n)
{
    if (size < 8 || !first) {
        snprintf(problem, n, "the file has %llu bytes, fewer than the 8 of the header length (truncated)",
                 (unsigned long long)size);
        return false;
    }
    memcpy(length, first, 8);
    if (*length > size - 8) {
        snprintf(problem, n, "the header length %llu is more than the %llu bytes that follow it (truncated or corrupt)",
                 (unsigned long long)*length, (unsigned long long)(size - 8));
        return false;
    }
    if (*length > TG_ST_MAX_HEADER) {
        snprintf(problem, n, "the header length %llu is more than the %llu this reader accepts",
                 (unsigned long long)*length, (unsigned long long)TG_ST_MAX_HEADER);
        return false;
    }
    return true;
}

/* tg_checkpoint_load_buffer, with messages that name op. */
static tg_status load_buffer(const char *op, const void *bytes, size_t size, const char *name, tg_params *params,
                             tg_optim *optim, tg_checkpoint_info *info)
{
    tg_status status = check_params(op, name, params, optim);
    if (status != TG_OK) return status;
    if (!bytes) return tg_set_error(TG_ERR_INVALID, "%s: %s: bytes is NULL", op, name);
    char problem[512];
    tg_st_header h;
    uint64_t length;
    if (!check_length(size >= 8 ? bytes : NULL, size, &length, problem, sizeof problem) ||
        !tg_st_parse_header((const char *)bytes + 8, length, size - 8 - length, &h, problem, sizeof problem))
        return load_fail(op, name, problem);
    status = load_parsed(op, name, &h, bytes, size, length, params, optim, info);
    tg_st_header_release(&h);
    return status;
}

tg_status tg_checkpoint_load_buffer(const void *bytes, size_t size, const char *name, tg_params *params,
                                    tg_optim *optim, tg_checkpoint_info *info)
{
    if (!name) return tg_set_error(TG_ERR_INVALID, "tg_checkpoint_load_buffer: name is NULL");
    return load_buffer("tg_checkpoint_load_buffer", bytes, size, name, params, optim, info);
}

/* Opened without blocking (a FIFO would otherwise wait for a writer before the check that
 * refuses it), then checked to be a regular file, then back to blocking reads. */
static tg_status open_regular(const char *op, const char *path, int *fd, uint64_t *size)
{
    struct stat st;
    if ((*fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)) < 0 || fstat(*fd, &st)) {
        tg_status status = tg_set_error(TG_ERR_INVALID, "%s: %s: cannot open: %s", op, path, strerror(errno));
        if (*fd >= 0) close(*fd);
        return status;
    }
    if (!S_ISREG(st.st_mode)) {
        close(*fd);
        return tg_set_error(TG_ERR_INVALID, "%s: %s: not a regular file", op, path);
    }
    int flags = fcntl(*fd, F_GETFL);
    if (flags < 0 || fcntl(*fd, F_SETFL, flags & ~O_NONBLOCK) < 0) {
        tg_status status = tg_set_error(TG_ERR_INVALID, "%s: %s: cannot read: %s", op, path, strerror(errno));
        close(*fd);
        return status;
    }
    *size = (uint64_t)st.st_size;
    return TG_OK;
}

/* Reads the whole file: the scratch copy that is checked before anything is loaded. */
static tg_status read_file(const char *op, const char *path, unsigned char **bytes, size_t *size)
{
    int fd;
    uint64_t file_size;
    tg_status status = open_regular(op, path, &fd, &file_size);
    if (status != TG_OK) return status;
    *size = (size_t)file_size;
    if (!(*bytes = malloc(*size ? *size : 1))) {
        close(fd);
        return tg_set_error(TG_ERR_NOMEM, "%s: %s: out of memory for %zu bytes", op, path, *size);
    }
    size_t got = 0;
    while (got < *size) {
        ssize_t n = read(fd, *bytes + got, *size - got);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    if (got == *size) return TG_OK;
    free(*bytes);
    return tg_set_error(TG_ERR_INVALID, "%s: %s: read %zu of %zu bytes (the file changed or cannot be read)", op, path,
                        got, *size);
}

tg_status tg_checkpoint_load(const char *path, tg_params *params, tg_optim *optim, tg_checkpoint_info *info)
{
    tg_status status = check_params("tg_checkpoint_load", path, params, optim);
    if (status != TG_OK) return status;
    unsigned char *bytes;
    size_t size;
    status = read_file("tg_checkpoint_load", path, &bytes, &size);
    if (status != TG_OK) return status;
    status = load_buffer("tg_checkpoint_load", bytes, size, path, params, optim, info);
    free(bytes);
    return status;
}

tg_status tg_checkpoint_read_info(const char *path, tg_checkpoint_info *info)
{
    const char *op = "tg_checkpoint_read_info";
    if (!path || !info) return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", op, !path ? "path" : "info");
    int fd;
    uint64_t size, length = 0;
    tg_status status = open_regular(op, path, &fd, &size);
    if (status != TG_OK) return status;
    /* Only the length and the header are read; the data section's size follows from the
     * file's, so the layout is checked in full. */
    char problem[512];
    unsigned char first[8];
    char *json = NULL;
    bool ok = size >= 8 && pread(fd, first, 8, 0) == 8;
    ok = ok ? check_length(first, size, &length, problem, sizeof problem)
            : check_length(NULL, size, &length, problem, sizeof problem);
    if (ok && !(json = malloc((size_t)length + 1))) {
        close(fd);
        return tg_set_error(TG_ERR_NOMEM, "%s: %s: out of memory", op, path);
    }
    if (ok && pread(fd, json, (size_t)length, 8) != (ssize_t)length) {
        snprintf(problem, sizeof problem, "cannot read the %llu-byte header: %s", (unsigned long long)length,
                 strerror(errno));
        ok = false;
    }
    close(fd);
    tg_st_header h = {0};
    meta m = {0};
    ok = ok && tg_st_parse_header(json, length, size - 8 - length, &h, problem, sizeof problem) &&
         read_meta(&h, &m, problem, sizeof problem);
    char *config = ok ? malloc(strlen(m.config) + 1) : NULL;
    if (config) strcpy(config, m.config);
    tg_st_header_release(&h);
    free(json);
    if (!ok) return tg_set_error(TG_ERR_INVALID, "%s: %s: %s", op, path, problem);
    if (!config) return tg_set_error(TG_ERR_NOMEM, "%s: %s: out of memory", op, path);
    *info = (tg_checkpoint_info){.step = m.step, .rng = m.rng, .config = config};
    return TG_OK;
}

void tg_checkpoint_info_clear(tg_checkpoint_info *info)
{
    if (!info) {
        tg_set_error(TG_ERR_INVALID, "tg_checkpoint_info_clear: info is NULL");
        return;
    }
    free(info->config);
    info->config = NULL;
}
