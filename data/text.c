/* data/text.c: a character-level text corpus (API and choices in include/tapegrad/data.h).
 *
 * The whole file becomes one array of int32 ids, so a batch is a few memcpy calls and
 * the training and validation splits are two ranges of that array. Ids are indices into
 * the sorted list of the file's characters; a character-to-id table over every possible
 * character (0x110000 code points, or 256 bytes) exists only while loading, after which
 * lookups are binary searches in the sorted list. */
#define _POSIX_C_SOURCE 200809L /* open flags, fdopen */
#include "core/internal.h"
#include "tapegrad/data.h"
#include "tapegrad/rng.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

struct tg_text {
    tg_text_unit unit;
    int64_t length;  /* characters in the file */
    int64_t n_train; /* the first n_train form the training split, the rest validation */
    int32_t *ids;    /* length ids */
    int64_t vocab;
    int32_t *chars; /* vocab characters, ascending: chars[id] */
};

enum { CODE_POINTS = 0x110000, READ_CHUNK = 1 << 20 };

/* ---- UTF-8 ---------------------------------------------------------------------------- */

/* The code point that starts at s[*pos] (advancing *pos past it), or -1 when the bytes
 * there are not well-formed UTF-8: a stray continuation byte, a truncated sequence, an
 * overlong form, a surrogate or a value above U+10FFFF. */
static int32_t utf8_next(const unsigned char *s, size_t size, size_t *pos)
{
    static const int32_t smallest[5] = {0, 0, 0x80, 0x800, 0x10000}; /* below: overlong */
    unsigned char lead = s[*pos];
    int n = lead < 0x80                   ? 1
            : lead >= 0xC0 && lead < 0xE0 ? 2
            : lead >= 0xE0 && lead < 0xF0 ? 3
            : lead >= 0xF0 && lead < 0xF8 ? 4
                                          : 0;
    if (n == 0 || size - *pos < (size_t)n) return -1;
    int32_t cp = n == 1 ? lead : lead & (0x7F >> n);
    for (int i = 1; i < n; i++) {
        unsigned char next = s[*pos + (size_t)i];
        if ((next & 0xC0) != 0x80) return -1;
        cp = (cp << 6) | (next & 0x3F);
    }
    if (cp < smallest[n] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return -1;
    *pos += (size_t)n;
    return cp;
}

/* Writes the UTF-8 form of cp to out (when non-NULL); returns its length in bytes. */
static int utf8_put(int32_t cp, char *out)
{
    unsigned char b[4];
    int n;
    if (cp < 0x80) {
        b[0] = (unsigned char)cp, n = 1;
    } else if (cp < 0x800) {
        b[0] = (unsigned char)(0xC0 | cp >> 6), b[1] = (unsigned char)(0x80 | (cp & 0x3F)), n = 2;
    } else if (cp < 0x10000) {
        b[0] = (unsigned char)(0xE0 | cp >> 12), b[1] = (unsigned char)(0x80 | (cp >> 6 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp & 0x3F)), n = 3;
    } else {
        b[0] = (unsigned char)(0xF0 | cp >> 18), b[1] = (unsigned char)(0x80 | (cp >> 12 & 0x3F));
        b[2] = (unsigned char)(0x80 | (cp >> 6 & 0x3F)), b[3] = (unsigned char)(0x80 | (cp & 0x3F)), n = 4;
    }
    if (out) memcpy(out, b, (size_t)n);
    return n;
}

/* The next character of s in the given unit, or -1 (invalid UTF-8). */
static int32_t next_char(tg_text_unit unit, const unsigned char *s, size_t size, size_t *pos)
{
    if (unit == TG_TEXT_BYTES) return s[(*pos)++];
    return utf8_next(s, size, pos);
}

/* "U+00E9" for a code point, "byte 0xE9" for a byte, plus the character itself when it is
 * printable ASCII. */
static const char *describe_char(tg_text_unit unit, int64_t c, char *buf, size_t size)
{
    int used = unit == TG_TEXT_BYTES ? snprintf(buf, size, "byte 0x%02llX", (long long)c)
                                     : snprintf(buf, size, "U+%04llX", (long long)c);
    if (c >= 0x20 && c < 0x7F && used > 0 && (size_t)used < size)
        snprintf(buf + used, size - (size_t)used, " '%c'", (char)c);
    return buf;
}

/* ---- loading ---------------------------------------------------------------------------- */

tg_text_options tg_text_defaults(void) { return (tg_text_options){.unit = TG_TEXT_UTF8, .val_fraction = 0.1}; }

static tg_status check_options(const char *fn, const tg_text_options *o)
{
    if (o->unit != TG_TEXT_UTF8 && o->unit != TG_TEXT_BYTES)
        return tg_set_error(TG_ERR_INVALID, "%s: unit %d is neither TG_TEXT_UTF8 nor TG_TEXT_BYTES", fn, (int)o->unit);
    if (!(o->val_fraction >= 0.0 && o->val_fraction < 1.0))
        return tg_set_error(TG_ERR_INVALID, "%s: val_fraction %g is outside [0, 1)", fn, o->val_fraction);
    return TG_OK;
}

/* Decodes the bytes into text->ids (characters, for now) and marks each character seen
 * in `table`. */
static tg_status decode_all(const char *fn, const char *name, tg_text *text, const unsigned char *s, size_t size,
                            int32_t *table)
{
    size_t pos = 0;
    int64_t n = 0;
    while (pos < size) {
        size_t at = pos;
        int32_t c = next_char(text->unit, s, size, &pos);
        if (c < 0)
            return tg_set_error(TG_ERR_INVALID,
                                "%s: %s is not valid UTF-8 at byte %zu (load it with unit TG_TEXT_BYTES to read "
                                "it as bytes)",
                                fn, name, at);
        text->ids[n++] = c;
        table[c] = 1;
    }
    text->length = n;
    return TG_OK;
}

/* Turns the marks in `table` into ids (ascending characters get ascending ids), fills
 * text->chars, and rewrites text->ids from characters to ids. */
static tg_status assign_ids(const char *fn, tg_text *text, int32_t *table, int64_t range)
{
    text->vocab = 0;
    for (int64_t c = 0; c < range; c++)
        if (table[c])
            table[c] = (int32_t)text->vocab++;
        else
            table[c] = -1;
    text->chars = malloc((size_t)text->vocab * sizeof *text->chars);
    if (!text->chars) return tg_set_error(TG_ERR_NOMEM, "%s: out of memory for the vocabulary", fn);
    for (int64_t c = 0; c < range; c++)
        if (table[c] >= 0) text->chars[table[c]] = (int32_t)c;
    for (int64_t i = 0; i < text->length; i++) text->ids[i] = table[text->ids[i]];
    return TG_OK;
}

static tg_text *build(const char *fn, const char *name, const unsigned char *s, size_t size,
                      const tg_text_options *options)
{
    tg_text_options o = options ? *options : tg_text_defaults();
    if (check_options(fn, &o) != TG_OK) return NULL;
    if (size == 0) return tg_set_error(TG_ERR_INVALID, "%s: %s is empty (size 0)", fn, name), NULL;
    if (size > (size_t)INT64_MAX / sizeof(int32_t))
        return tg_set_error(TG_ERR_OVERFLOW, "%s: %s is too large (%zu bytes)", fn, name, size), NULL;
    int64_t range = o.unit == TG_TEXT_BYTES ? 256 : CODE_POINTS;
    tg_text *text = calloc(1, sizeof *text);
    int32_t *table = calloc((size_t)range, sizeof *table);  /* character → mark, then → id */
    if (text) text->ids = malloc(size * sizeof *text->ids); /* at most one character per byte */
    tg_status status = TG_OK;
    if (!text || !table || !text->ids)
        status = tg_set_error(TG_ERR_NOMEM, "%s: out of memory for %s (%zu bytes)", fn, name, size);
    if (status == TG_OK) {
        text->unit = o.unit;
        status = decode_all(fn, name, text, s, size, table);
    }
    if (status == TG_OK) status = assign_ids(fn, text, table, range);
    free(table);
    if (status != TG_OK) {
        tg_text_free(text);
        return NULL;
    }
    int32_t *fitted = realloc(text->ids, (size_t)text->length * sizeof *text->ids); /* multibyte text */
    if (fitted) text->ids = fitted;
    int64_t n_val = (int64_t)floor((double)text->length * o.val_fraction);
    text->n_train = text->length - n_val;
    return text;
}

tg_text *tg_text_from_memory(const char *data, size_t size, const tg_text_options *options)
{
    if (!data) return tg_set_error(TG_ERR_INVALID, "tg_text_from_memory: data is NULL"), NULL;
    return build("tg_text_from_memory", "data", (const unsigned char *)data, size, options);
}

/* Reads a whole file into a malloc'd buffer, in chunks, so that pipes and files whose
 * size is not known in advance work too. */
static unsigned char *read_file(const char *path, size_t *size)
{
    /* Opened without waiting: a FIFO that no writer holds open reads as empty instead of
     * blocking here forever; a pipe that has a writer is then read as usual. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || S_ISDIR(st.st_mode) || fcntl(fd, F_SETFL, 0) != 0) {
        const char *why = fd >= 0 && S_ISDIR(st.st_mode) ? "it is a directory" : strerror(errno);
        tg_set_error(TG_ERR_INVALID, "tg_text_load: cannot open '%s': %s", path, why);
        if (fd >= 0) close(fd);
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        return tg_set_error(TG_ERR_INVALID, "tg_text_load: cannot open '%s': %s", path, strerror(errno)), NULL;
    }
    unsigned char *buf = NULL;
    size_t used = 0, capacity = 0;
    bool failed = false;
    for (;;) {
        unsigned char *grown = realloc(buf, capacity + READ_CHUNK);
        if (!grown) {
            tg_set_error(TG_ERR_NOMEM, "tg_text_load: out of memory reading '%s' (%zu bytes so far)", path, used);
            failed = true;
            break;
        }
        buf = grown, capacity += READ_CHUNK;
        size_t got = fread(buf + used, 1, READ_CHUNK, f);
        used += got;
        if (got < READ_CHUNK) break; /* the end of the file, or an error */
    }
    if (!failed && ferror(f)) {
        tg_set_error(TG_ERR_INVALID, "tg_text_load: cannot read '%s': %s", path, strerror(errno));
        failed = true;
    }
    fclose(f);
    if (failed) {
        free(buf);
        return NULL;
    }
    *size = used;
    return buf;
}

tg_text *tg_text_load(const char *path, const tg_text_options *options)
{
    if (!path) return tg_set_error(TG_ERR_INVALID, "tg_text_load: path is NULL"), NULL;
    size_t size = 0;
    unsigned char *bytes = read_file(path, &size);
    if (!bytes) return NULL;
    char name[512];
    snprintf(name, sizeof name, "'%s'", path);
    tg_text *text = build("tg_text_load", name, bytes, size, options);
    free(bytes);
    return text;
}

void tg_text_free(tg_text *text)
{
    if (!text) return;
    free(text->ids);
    free(text->chars);
    free(text);
}

/* ---- the vocabulary --------------------------------------------------------------------- */

/* text is a corpus (and split one of its splits, when check_split); else the error names op. */
static bool check_text(const char *op, const tg_text *text, bool check_split, tg_text_split split)
{
    if (!text) {
        tg_set_error(TG_ERR_INVALID, "%s: text is NULL", op);
        return false;
    }
    if (!check_split || split == TG_TEXT_TRAIN || split == TG_TEXT_VAL) return true;
    tg_set_error(TG_ERR_INVALID, "%s: split %d is neither TG_TEXT_TRAIN nor TG_TEXT_VAL", op, (int)split);
    return false;
}

int64_t tg_text_vocab_size(const tg_text *text)
{
    return check_text("tg_text_vocab_size", text, false, 0) ? text->vocab : -1;
}

int64_t tg_text_length(const tg_text *text, tg_text_split split)
{
    if (!check_text("tg_text_length", text, true, split)) return -1;
    return split == TG_TEXT_TRAIN ? text->n_train : text->length - text->n_train;
}

const int32_t *tg_text_ids(const tg_text *text, tg_text_split split)
{
    if (!check_text("tg_text_ids", text, true, split)) return NULL;
    return split == TG_TEXT_TRAIN ? text->ids : text->ids + text->n_train;
}

int64_t tg_text_char(const tg_text *text, int32_t id)
{
    if (!check_text("tg_text_char", text, false, 0)) return -1;
    if (id >= 0 && id < text->vocab) return text->chars[id];
    tg_set_error(TG_ERR_INVALID, "tg_text_char: id %d is outside the vocabulary [0, %lld)", id, (long long)text->vocab);
    return -1;
}

/* The id of a character, or -1 (no message). */
static int32_t lookup_id(const tg_text *text, int64_t character)
{
    int64_t low = 0, high = text->vocab; /* the answer, if any, is in [low, high) */
    while (low < high) {
        int64_t mid = low + (high - low) / 2;
        if (text->chars[mid] < character)
            low = mid + 1;
        else
            high = mid;
    }
    return low < text->vocab && text->chars[low] == character ? (int32_t)low : -1;
}

int32_t tg_text_id(const tg_text *text, int64_t character)
{
    if (!check_text("tg_text_id", text, false, 0)) return -1;
    int32_t id = lookup_id(text, character);
    if (id < 0)
        tg_set_error(TG_ERR_INVALID, "tg_text_id: character %lld is not in the vocabulary", (long long)character);
    return id;
}

/* ---- encode and decode -------------------------------------------------------------------- */

/* Encodes str into ids (when ids is not NULL, with room for all of them) and counts them
 * into *n; the message names fn and the first character that fails. */
static tg_status encode(const char *fn, const tg_text *text, const unsigned char *s, size_t size, int32_t *ids,
                        int64_t *n)
{
    size_t pos = 0;
    *n = 0;
    while (pos < size) {
        size_t at = pos;
        int32_t c = next_char(text->unit, s, size, &pos);
        if (c < 0) return tg_set_error(TG_ERR_INVALID, "%s: str is not valid UTF-8 at byte %zu", fn, at);
        int32_t id = lookup_id(text, c);
        char what[32];
        if (id < 0)
            return tg_set_error(TG_ERR_INVALID, "%s: %s at byte %zu of str is not in the vocabulary", fn,
                                describe_char(text->unit, c, what, sizeof what), at);
        if (ids) ids[*n] = id;
        ++*n;
    }
    return TG_OK;
}

tg_status tg_text_encode(const tg_text *text, const char *str, size_t size, int32_t *ids, int64_t capacity,
                         int64_t *n_ids)
{
    static const char *const fn = "tg_text_encode";
    if (!text || !ids || !n_ids || (!str && size > 0))
        return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn,
                            !text    ? "text"
                            : !ids   ? "ids"
                            : !n_ids ? "n_ids"
                                     : "str");
    /* A first pass checks the whole string and counts, so that a refused call writes nothing. */
    int64_t n;
    tg_status status = encode(fn, text, (const unsigned char *)str, size, NULL, &n);
    if (status != TG_OK) return status;
    if (n > capacity)
        return tg_set_error(TG_ERR_INVALID, "%s: str holds %lld characters, more than capacity %lld", fn, (long long)n,
                            (long long)capacity);
    status = encode(fn, text, (const unsigned char *)str, size, ids, &n);
    if (status == TG_OK) *n_ids = n;
    return status;
}

tg_status tg_text_decode(const tg_text *text, const int32_t *ids, int64_t n_ids, char *out, size_t capacity,
                         size_t *n_bytes)
{
    static const char *const fn = "tg_text_decode";
    if (!text || (!ids && n_ids > 0) || !n_bytes)
        return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn, !text ? "text" : !n_bytes ? "n_bytes" : "ids");
    if (n_ids < 0) return tg_set_error(TG_ERR_INVALID, "%s: n_ids is %lld", fn, (long long)n_ids);
    size_t need = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        if (ids[i] < 0 || ids[i] >= text->vocab)
            return tg_set_error(TG_ERR_INVALID, "%s: ids[%lld] = %d is outside the vocabulary [0, %lld)", fn,
                                (long long)i, ids[i], (long long)text->vocab);
        need += text->unit == TG_TEXT_BYTES ? 1 : (size_t)utf8_put(text->chars[ids[i]], NULL);
    }
    *n_bytes = need;
    if (!out) return TG_OK;
    if (capacity <= need)
        return tg_set_error(TG_ERR_INVALID, "%s: the text needs %zu bytes and a NUL, capacity is %zu", fn, need,
                            capacity);
    size_t used = 0;
    for (int64_t i = 0; i < n_ids; i++) {
        int32_t c = text->chars[ids[i]];
        if (text->unit == TG_TEXT_BYTES)
            out[used++] = (char)(unsigned char)c;
        else
            used += (size_t)utf8_put(c, out + used);
    }
    out[used] = '\0';
    return TG_OK;
}

/* ---- batches ------------------------------------------------------------------------------- */

static const char *split_name(tg_text_split split) { return split == TG_TEXT_TRAIN ? "train" : "val"; }

static tg_status check_window_args(const char *fn, const tg_text *text, tg_text_split split, int64_t batch,
                                   int64_t seq_len, const int32_t *inputs, const int32_t *targets)
{
    int64_t total;
    if (!text || !inputs || !targets)
        return tg_set_error(TG_ERR_INVALID, "%s: %s is NULL", fn, !text ? "text" : !inputs ? "inputs" : "targets");
    if (split != TG_TEXT_TRAIN && split != TG_TEXT_VAL)
        return tg_set_error(TG_ERR_INVALID, "%s: split %d is neither TG_TEXT_TRAIN nor TG_TEXT_VAL", fn, (int)split);
    if (batch < 1 || seq_len < 1)
        return tg_set_error(TG_ERR_INVALID, "%s: batch %lld and seq_len %lld must both be ≥ 1", fn, (long long)batch,
                            (long long)seq_len);
    if (tg_mul_overflows(batch, seq_len, &total))
        return tg_set_error(TG_ERR_OVERFLOW, "%s: batch %lld × seq_len %lld overflows", fn, (long long)batch,
                            (long long)seq_len);
    return TG_OK;
}

tg_status tg_text_batch(const tg_text *text, tg_text_split split, tg_rng *rng, int64_t batch, int64_t seq_len,
                        int32_t *inputs, int32_t *targets)
{
    static const char *const fn = "tg_text_batch";
    tg_status status = check_window_args(fn, text, split, batch, seq_len, inputs, targets);
    if (status != TG_OK) return status;
    if (!rng) return tg_set_error(TG_ERR_INVALID, "%s: rng is NULL", fn);
    int64_t n = tg_text_length(text, split);
    if (n - 1 < seq_len)
        return tg_set_error(TG_ERR_INVALID,
                            "%s: the %s split has %lld characters, fewer than one window of seq_len + 1 = %lld", fn,
                            split_name(split), (long long)n, (long long)seq_len + 1);
    const int32_t *ids = tg_text_ids(text, split);
    for (int64_t b = 0; b < batch; b++) {
        int64_t start = tg_rng_below(rng, n - seq_len); /* start + seq_len ≤ n − 1: the last target exists */
        memcpy(inputs + b * seq_len, ids + start, (size_t)seq_len * sizeof *ids);
        memcpy(targets + b * seq_len, ids + start + 1, (size_t)seq_len * sizeof *ids);
    }
    return TG_OK;
}

int64_t tg_text_window_count(const tg_text *text, tg_text_split split, int64_t seq_len)
{
    const char *op = "tg_text_window_count";
    if (!check_text(op, text, true, split)) return -1;
    if (seq_len < 1) {
        tg_set_error(TG_ERR_INVALID, "%s: seq_len must be ≥ 1 (got %lld)", op, (long long)seq_len);
        return -1;
    }
    int64_t n = tg_text_length(text, split);
    return n < 2 ? 0 : (n - 1 + seq_len - 1) / seq_len; /* ⌈(n − 1) / seq_len⌉: n − 1 characters are scored */
}

tg_status tg_text_windows(const tg_text *text, tg_text_split split, int64_t first, int64_t batch, int64_t seq_len,
                          int32_t *inputs, int32_t *targets, int64_t *n_rows)
{
    static const char *const fn = "tg_text_windows";
    tg_status status = check_window_args(fn, text, split, batch, seq_len, inputs, targets);
    if (status != TG_OK) return status;
    int64_t n = tg_text_length(text, split), count = tg_text_window_count(text, split, seq_len);
    if (count == 0)
        return tg_set_error(TG_ERR_INVALID, "%s: the %s split has %lld characters; a window needs at least 2", fn,
                            split_name(split), (long long)n);
    if (first < 0 || first >= count)
        return tg_set_error(TG_ERR_INVALID, "%s: first window %lld is outside [0, %lld) (%s split, seq_len %lld)", fn,
                            (long long)first, (long long)count, split_name(split), (long long)seq_len);
    const int32_t *ids = tg_text_ids(text, split);
    for (int64_t b = 0; b < batch; b++) {
        int32_t *in = inputs + b * seq_len, *tgt = targets + b * seq_len;
        /* Characters start … start + scored − 1 are inputs here; the rest of the row pads. */
        int64_t start = first + b < count ? (first + b) * seq_len : n - 1;
        int64_t scored = n - 1 - start < seq_len ? n - 1 - start : seq_len;
        for (int64_t j = 0; j < scored; j++) in[j] = ids[start + j], tgt[j] = ids[start + j + 1];
        for (int64_t j = scored; j < seq_len; j++) in[j] = 0, tgt[j] = TG_IGNORE_INDEX;
    }
    if (n_rows) *n_rows = first + batch < count ? batch : count - first;
    return TG_OK;
}
