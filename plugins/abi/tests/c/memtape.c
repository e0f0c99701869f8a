/*
 * memtape: a memory-backed reel plugin written in C, against include/reel_plugin.h only.
 *
 * One drive (element 256, index 0), a picker (1) and six storage slots (1024..1029): two
 * read-write cartridges, one WORM cartridge, three empty slots. Records, filemarks, LBP
 * (CRC32C), MAM, statistics, unit attention after load, and the test-control requests
 * test.early_warning_after / test.end_of_medium_after. Import/export, geometry, RAO and tape
 * alerts are left NULL (unsupported). Built and loaded by tests/c_plugin.rs; it exists to prove
 * the ABI is C, and to run the contract kit through dlopen.
 */
#include "reel_plugin.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The C compiler must agree with tests/layout.rs. */
_Static_assert(sizeof(ReelStatus) == 288, "ReelStatus size");
_Static_assert(offsetof(ReelStatus, message) == 32, "ReelStatus.message offset");
_Static_assert(sizeof(ReelElement) == 64, "ReelElement size");
_Static_assert(sizeof(ReelPosition) == 32, "ReelPosition size");
_Static_assert(sizeof(ReelGeometry) == 48, "ReelGeometry size");
_Static_assert(offsetof(ReelPluginV1, library_open) == 40, "first slot offset");
_Static_assert(offsetof(ReelPluginV1, drive_rao) == 248, "last 1.0 slot offset");
#ifdef MEMTAPE_ABI_V1_0 /* built against the frozen v1.0 header, tests/c/v1_0/ */
_Static_assert(REEL_ABI_MINOR == 0, "the v1.0 header");
_Static_assert(sizeof(ReelPluginV1) == 256, "ReelPluginV1 size (1.0)");
_Static_assert(sizeof(ReelDriveInfo) == 128, "ReelDriveInfo size (1.0)");
_Static_assert(sizeof(ReelDriveStats) == 136, "ReelDriveStats size (1.0)");
#else
_Static_assert(sizeof(ReelDriveStats) == 168, "ReelDriveStats size (1.3: error counters)");
_Static_assert(sizeof(ReelLibraryInfo) == 120, "ReelLibraryInfo size");
_Static_assert(sizeof(ReelDriveInfo) == 136, "ReelDriveInfo size (1.2)");
_Static_assert(sizeof(ReelPluginV1) == 280, "ReelPluginV1 size");
_Static_assert(sizeof(ReelWriteRecord) == 24, "ReelWriteRecord size (1.4)");
_Static_assert(offsetof(ReelPluginV1, library_info) == 256, "1.1 slot offset");
_Static_assert(offsetof(ReelPluginV1, set_log) == 264, "1.2 slot offset");
_Static_assert(offsetof(ReelPluginV1, drive_write_records) == 272, "last slot offset (1.4)");
#endif

#define MEMTAPE_CAPS                                                                     \
    (REEL_CAP_CHANGER | REEL_CAP_LBP | REEL_CAP_MAM | REEL_CAP_WORM | REEL_CAP_STATISTICS | \
     REEL_CAP_EARLY_WARNING | REEL_CAP_IMMEDIATE_FILEMARKS | REEL_CAP_SPACE_BACKWARD |      \
     REEL_CAP_TEST_CONTROL)

#ifndef MEMTAPE_ABI_V1_0
/* ABI 1.2: the host's log sink, given once before any other call. */
static ReelLogFn host_log;
static void *host_log_context;
static uint32_t host_log_max;

static void mt_set_log(ReelLogFn log, void *context, uint32_t max_level) {
    host_log = log;
    host_log_context = context;
    host_log_max = max_level;
}

static void mt_log(uint32_t level, const char *message) {
    if (host_log && level <= host_log_max) host_log(host_log_context, level, "memtape", message);
}
#else
static void mt_log(uint32_t level, const char *message) {
    (void)level;
    (void)message;
}
#endif

#define N_SLOTS 6
#define N_CARTS 3
#define PICKER_ADDR 1
#define DRIVE_ADDR 256
#define SLOT_BASE 1024
#define MAX_ATTRS 32
#define MAX_ATTR_LEN 1024
#define MAX_RECORD (16u * 1024u * 1024u)

typedef struct {
    int is_filemark;
    uint8_t *data;
    size_t len;
    uint32_t crc;
} Object;

typedef struct {
    uint16_t id;
    size_t len;
    uint8_t value[MAX_ATTR_LEN];
} Attribute;

typedef struct {
    char barcode[REEL_BARCODE_LEN];
    int worm;
    uint32_t home;
    Object *objects;
    size_t count, cap;
    Attribute attrs[MAX_ATTRS];
    size_t n_attrs;
} Cartridge;

struct ReelLibrary {
    pthread_mutex_t lock;
    Cartridge carts[N_CARTS];
    int slot[N_SLOTS]; /* cartridge index or -1 */
    int drive_cart;    /* cartridge index in the drive or -1 */
    int loaded;
    int unit_attention;
    size_t pos;
    uint32_t lbp;
    int64_t ew_left, eom_left; /* -1: off */
    int in_ew;
    ReelDriveStats stats;
};

struct ReelDrive {
    struct ReelLibrary *lib;
};

/* ---- helpers ------------------------------------------------------------------------------ */

/* Every call resets the status, and writes no more of it than the caller's struct_size. */
static void reset(ReelStatus *st) {
    uint32_t size = st->struct_size;
    memset(st, 0, size < sizeof *st ? size : sizeof *st);
    st->struct_size = size;
}

/* The message, cut to what the caller's struct_size leaves of it (nothing, before 1.0's end). */
static void put_message(ReelStatus *st, const char *msg) {
    size_t at = offsetof(ReelStatus, message);
    if (st->struct_size <= at) return;
    size_t room = st->struct_size - at;
    snprintf(st->message, room < REEL_MESSAGE_LEN ? room : REEL_MESSAGE_LEN, "%s", msg);
}

static int fail(ReelStatus *st, uint8_t key, uint8_t asc, uint8_t ascq, uint32_t flags,
                const char *msg) {
    st->sense_key = key;
    st->asc = asc;
    st->ascq = ascq;
    st->flags |= flags | REEL_FLAG_SENSE_VALID;
    put_message(st, msg);
    return REEL_E_CHECK_CONDITION;
}

static int error(ReelStatus *st, int code, const char *msg) {
    put_message(st, msg);
    return code;
}

static void set_residue(ReelStatus *st, int64_t residue) {
    st->residue = residue;
    st->flags |= REEL_FLAG_RESIDUE_VALID;
}

static uint32_t crc32c(const uint8_t *p, size_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int k = 0; k < 8; k++) crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1u)));
    }
    return ~crc;
}

static Cartridge *mounted(struct ReelLibrary *l) {
    return l->drive_cart >= 0 ? &l->carts[l->drive_cart] : NULL;
}

/* Common entry for commands that need a loaded medium: NOT READY, then UNIT ATTENTION once. */
static int medium_ready(struct ReelLibrary *l, ReelStatus *st) {
    if (!l->loaded || l->drive_cart < 0)
        return fail(st, REEL_SENSE_NOT_READY, 0x3A, 0x00, 0, "no medium loaded");
    if (l->unit_attention) {
        l->unit_attention = 0;
        return fail(st, REEL_SENSE_UNIT_ATTENTION, 0x28, 0x00, 0,
                    "not ready to ready change, medium may have changed");
    }
    return REEL_OK;
}

static uint64_t file_number(const Cartridge *c, size_t pos) {
    uint64_t n = 0;
    for (size_t i = 0; i < pos && i < c->count; i++) n += (uint64_t)c->objects[i].is_filemark;
    return n;
}

static void truncate_at(Cartridge *c, size_t pos) {
    for (size_t i = pos; i < c->count; i++) free(c->objects[i].data);
    if (pos < c->count) c->count = pos;
}

/* Writes go at the position and erase what follows; WORM only appends at EOD. */
static int prepare_write(struct ReelLibrary *l, Cartridge *c, ReelStatus *st) {
    if (c->worm && c->count > 0 && l->pos != c->count)
        return fail(st, REEL_SENSE_DATA_PROTECT, 0x30, 0x0C, 0,
                    "WORM medium, overwrite attempted");
    truncate_at(c, l->pos);
    if (c->count == c->cap) {
        size_t cap = c->cap ? c->cap * 2 : 16;
        Object *o = realloc(c->objects, cap * sizeof *o);
        if (!o) return error(st, REEL_E_INTERNAL, "out of memory");
        c->objects = o;
        c->cap = cap;
    }
    return REEL_OK;
}

static int elem_index(uint32_t addr) {
    if (addr == DRIVE_ADDR) return -2;
    if (addr >= SLOT_BASE && addr < SLOT_BASE + N_SLOTS) return (int)(addr - SLOT_BASE);
    return -3;
}

static int *elem_ref(struct ReelLibrary *l, uint32_t addr) {
    int i = elem_index(addr);
    if (i == -2) return &l->drive_cart;
    if (i >= 0) return &l->slot[i];
    return NULL;
}

/* ---- library ------------------------------------------------------------------------------ */

static int32_t mt_library_open(const char *config, ReelLibrary **out, ReelStatus *st) {
    reset(st);
    if (!out || !config) return error(st, REEL_E_INVALID_ARG, "null argument");
    struct ReelLibrary *l = calloc(1, sizeof *l);
    if (!l) return error(st, REEL_E_INTERNAL, "out of memory");
    pthread_mutex_init(&l->lock, NULL);
    static const char *barcodes[N_CARTS] = {"MEM001L9", "MEM002L9", "MEM003LW"};
    for (int i = 0; i < N_CARTS; i++) {
        snprintf(l->carts[i].barcode, REEL_BARCODE_LEN, "%s", barcodes[i]);
        l->carts[i].worm = (i == 2);
        l->carts[i].home = SLOT_BASE + (uint32_t)i;
    }
    for (int i = 0; i < N_SLOTS; i++) l->slot[i] = i < N_CARTS ? i : -1;
    mt_log(3 /* REEL_LOG_INFO, 1.2 */, "memtape library open: 1 drive, 6 slots, 3 cartridges");
    /* Config `worm_prewritten=1`: the WORM cartridge already holds two records (a reused one). */
    if (strstr(config, "worm_prewritten=1")) {
        Cartridge *w = &l->carts[2];
        w->objects = calloc(2, sizeof *w->objects);
        if (!w->objects) {
            free(l);
            return error(st, REEL_E_INTERNAL, "out of memory");
        }
        w->cap = 2;
        for (int i = 0; i < 2; i++) {
            uint8_t *data = malloc(4);
            if (!data) {
                free(w->objects[0].data);
                free(w->objects);
                free(l);
                return error(st, REEL_E_INTERNAL, "out of memory");
            }
            memcpy(data, i ? "old1" : "old0", 4);
            w->objects[i] = (Object){0, data, 4, crc32c(data, 4)};
            w->count++;
        }
    }
    l->drive_cart = -1;
    l->ew_left = l->eom_left = -1;
    l->stats.struct_size = sizeof l->stats;
    /* valid: bytes/records written and read, filemarks, locates, mounts (field order bits) */
    l->stats.valid = (1u << 4) | (1u << 5) | (1u << 6) | (1u << 7) | (1u << 8) | (1u << 9) |
                     (1u << 13);
#ifdef MEMTAPE_STRAY_STATS_BITS /* a careless older plugin: bits past its struct's fields */
    l->stats.valid |= 0xF0000u;
#endif
    *out = l;
    return REEL_OK;
}

static void mt_library_close(ReelLibrary *l) {
    if (!l) return;
    for (int i = 0; i < N_CARTS; i++) {
        truncate_at(&l->carts[i], 0);
        free(l->carts[i].objects);
    }
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static void fill_element(ReelElement *e, uint32_t kind, uint32_t addr, uint32_t index,
                         const struct ReelLibrary *l, int cart) {
    memset(e, 0, sizeof *e);
    e->kind = kind;
    e->address = addr;
    e->index = index;
    if (cart >= 0) {
        e->flags = REEL_ELEMENT_FULL | (l->carts[cart].worm ? REEL_ELEMENT_WORM : 0);
        e->source_address = l->carts[cart].home;
        snprintf(e->barcode, REEL_BARCODE_LEN, "%s", l->carts[cart].barcode);
    }
}

static int32_t mt_library_inventory(ReelLibrary *l, ReelElement *elements, uint32_t capacity,
                                    uint32_t *out_count, ReelStatus *st) {
    reset(st);
    if (!l || !out_count || (!elements && capacity)) return error(st, REEL_E_INVALID_ARG, "null");
    const uint32_t total = 2 + N_SLOTS;
    *out_count = total;
    if (capacity < total) {
        set_residue(st, total);
        return error(st, REEL_E_BUFFER_TOO_SMALL, "inventory needs more elements");
    }
    pthread_mutex_lock(&l->lock);
    fill_element(&elements[0], REEL_ELEMENT_PICKER, PICKER_ADDR, 0, l, -1);
    fill_element(&elements[1], REEL_ELEMENT_DRIVE, DRIVE_ADDR, 0, l, l->drive_cart);
    if (l->drive_cart >= 0 && l->loaded) elements[1].flags |= REEL_ELEMENT_LOADED;
    for (uint32_t i = 0; i < N_SLOTS; i++)
        fill_element(&elements[2 + i], REEL_ELEMENT_SLOT, SLOT_BASE + i, i, l, l->slot[i]);
    pthread_mutex_unlock(&l->lock);
    return REEL_OK;
}

static int32_t mt_library_move(ReelLibrary *l, uint32_t source, uint32_t destination,
                               ReelStatus *st) {
    reset(st);
    if (!l) return error(st, REEL_E_INVALID_ARG, "null library");
    pthread_mutex_lock(&l->lock);
    int rc = REEL_OK;
    int *src = elem_ref(l, source), *dst = elem_ref(l, destination);
    if (!src || !dst)
        rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x21, 0x01, 0, "invalid element address");
    else if (*src < 0)
        rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x3B, 0x0E, 0, "medium source element empty");
    else if (*dst >= 0)
        rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x3B, 0x0D, 0,
                  "medium destination element full");
    else if (source == DRIVE_ADDR && l->loaded)
        rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x53, 0x02, 0,
                  "medium removal prevented: unload the drive first");
    else {
        if (source != DRIVE_ADDR) l->carts[*src].home = source;
        *dst = *src;
        *src = -1;
    }
    pthread_mutex_unlock(&l->lock);
    return rc;
}

/* Find `"key"` in a flat JSON object and return the text after its colon. */
static const char *json_value(const char *json, const char *key) {
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    const char *p = strstr(json, quoted);
    if (!p) return NULL;
    p += strlen(quoted);
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    if (*p != ':') return NULL;
    p++;
    while (*p == ' ' || *p == '\t' || *p == '\n') p++;
    return p;
}

static int32_t mt_control(ReelLibrary *l, const char *request, char *response, size_t capacity,
                          size_t *out_len, ReelStatus *st) {
    reset(st);
    if (!l || !request || !out_len || (!response && capacity))
        return error(st, REEL_E_INVALID_ARG, "null argument");
    const char *op = json_value(request, "op");
    const char *bytes = json_value(request, "bytes");
    const char *drive = json_value(request, "drive");
    int ew = op && strncmp(op, "\"test.early_warning_after\"", 26) == 0;
    int eom = op && strncmp(op, "\"test.end_of_medium_after\"", 26) == 0;
    if (!ew && !eom) return error(st, REEL_E_UNSUPPORTED, "unknown control op");
    if (!bytes || !drive || strtol(drive, NULL, 10) != 0)
        return error(st, REEL_E_INVALID_ARG, "need \"drive\":0 and \"bytes\":N");
    const char *ok = "{\"ok\":true}";
    *out_len = strlen(ok);
    if (capacity < *out_len + 1) {
        *out_len = strlen(ok) + 1; /* the capacity that then succeeds */
        return error(st, REEL_E_BUFFER_TOO_SMALL, "response buffer");
    }
    pthread_mutex_lock(&l->lock);
    int rc = REEL_OK;
    if (!l->loaded) {
        rc = error(st, REEL_E_INVALID_ARG, "no medium loaded in drive 0");
    } else if (ew) {
        l->ew_left = (int64_t)strtoll(bytes, NULL, 10);
        l->in_ew = 0;
    } else {
        l->eom_left = (int64_t)strtoll(bytes, NULL, 10);
    }
    pthread_mutex_unlock(&l->lock);
    if (rc == REEL_OK) memcpy(response, ok, *out_len + 1);
    return rc;
}

/* ---- drive -------------------------------------------------------------------------------- */

static int32_t mt_drive_open(ReelLibrary *l, uint32_t index, ReelDrive **out, ReelStatus *st) {
    reset(st);
    if (!l || !out) return error(st, REEL_E_INVALID_ARG, "null argument");
    if (index != 0) return error(st, REEL_E_INVALID_ARG, "memtape has one drive, index 0");
    struct ReelDrive *d = calloc(1, sizeof *d);
    if (!d) return error(st, REEL_E_INTERNAL, "out of memory");
    d->lib = l;
    *out = d;
    return REEL_OK;
}

static void mt_drive_close(ReelDrive *d) { free(d); }

/* Lock the library behind a drive handle and reset the status; bail out on a null handle. */
#define DRIVE_ENTER(d, st)                                                   \
    reset(st);                                                               \
    if (!(d)) return error(st, REEL_E_INVALID_ARG, "null drive handle");     \
    struct ReelLibrary *l = (d)->lib;                                        \
    pthread_mutex_lock(&l->lock);                                            \
    int rc = REEL_OK

#define DRIVE_LEAVE()               \
    pthread_mutex_unlock(&l->lock); \
    return rc

#ifndef MEMTAPE_ABI_V1_0
/* ABI 1.1: the library's identity; writes at most the caller's struct_size. */
static int32_t mt_library_info(ReelLibrary *l, ReelLibraryInfo *out, ReelStatus *st) {
    reset(st);
    if (!l || !out) return error(st, REEL_E_INVALID_ARG, "null argument");
    ReelLibraryInfo info;
    memset(&info, 0, sizeof info);
    snprintf(info.vendor, sizeof info.vendor, "REEL");
    snprintf(info.product, sizeof info.product, "MEMTAPE");
    snprintf(info.serial, sizeof info.serial, "MTLIB0001");
    uint32_t size = out->struct_size < sizeof info ? out->struct_size : (uint32_t)sizeof info;
    info.struct_size = out->struct_size;
    memcpy(out, &info, size);
    return REEL_OK;
}
#endif

static int32_t mt_drive_info(ReelDrive *d, ReelDriveInfo *out, ReelStatus *st) {
    reset(st);
    if (!d || !out) return error(st, REEL_E_INVALID_ARG, "null argument");
    ReelDriveInfo info;
    memset(&info, 0, sizeof info);
    snprintf(info.vendor, sizeof info.vendor, "REEL");
    snprintf(info.product, sizeof info.product, "MEMTAPE");
    snprintf(info.serial, sizeof info.serial, "MT0000");
    info.max_record_bytes = MAX_RECORD;
#ifndef MEMTAPE_ABI_V1_0
    info.capabilities = MEMTAPE_CAPS; /* ABI 1.2: its one drive can do all the library can */
#endif
    uint32_t size = out->struct_size < sizeof info ? out->struct_size : (uint32_t)sizeof info;
    info.struct_size = out->struct_size;
    memcpy(out, &info, size);
    return REEL_OK;
}

static int32_t mt_drive_test_ready(ReelDrive *d, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    rc = medium_ready(l, st);
    DRIVE_LEAVE();
}

static int32_t mt_drive_load(ReelDrive *d, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (l->drive_cart < 0) {
        rc = fail(st, REEL_SENSE_NOT_READY, 0x3A, 0x00, 0, "no cartridge in the drive");
    } else if (!l->loaded) {
        l->loaded = 1;
#ifndef MEMTAPE_BREAK_UNIT_ATTENTION /* a deliberately broken variant for tests/c_plugin.rs */
        l->unit_attention = 1;
#endif
        l->pos = 0;
        l->ew_left = l->eom_left = -1;
        l->in_ew = 0;
        l->stats.mounts++;
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_unload(ReelDrive *d, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    l->loaded = 0;
    l->unit_attention = 0;
    l->pos = 0;
    l->ew_left = l->eom_left = -1;
    l->in_ew = 0;
    DRIVE_LEAVE();
}

static int32_t mt_drive_rewind(ReelDrive *d, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    rc = medium_ready(l, st);
    if (rc == REEL_OK) l->pos = 0;
    DRIVE_LEAVE();
}

static int32_t mt_drive_locate(ReelDrive *d, uint64_t block, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    rc = medium_ready(l, st);
    if (rc == REEL_OK) {
        Cartridge *c = mounted(l);
        l->stats.locates++;
        if (block > c->count) {
            l->pos = c->count;
            rc = fail(st, REEL_SENSE_BLANK_CHECK, 0x00, 0x05, 0, "locate beyond end of data");
        } else {
            l->pos = (size_t)block;
        }
    }
    DRIVE_LEAVE();
}

static int space_forward(struct ReelLibrary *l, Cartridge *c, uint32_t kind, int64_t n,
                         ReelStatus *st) {
    for (int64_t done = 0; done < n;) {
        if (l->pos >= c->count) {
            set_residue(st, n - done);
            return fail(st, REEL_SENSE_BLANK_CHECK, 0x00, 0x05, 0, "end of data");
        }
        int fm = c->objects[l->pos].is_filemark;
        l->pos++;
        if (kind == REEL_SPACE_RECORDS && fm) {
            set_residue(st, n - done);
            return fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x01, REEL_FLAG_FILEMARK,
                        "filemark detected");
        }
        if (kind == REEL_SPACE_RECORDS || fm) done++;
    }
    return REEL_OK;
}

static int space_backward(struct ReelLibrary *l, Cartridge *c, uint32_t kind, int64_t n,
                          ReelStatus *st) {
    for (int64_t done = 0; done < n;) {
        if (l->pos == 0) {
            set_residue(st, -(n - done));
            return fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x04, REEL_FLAG_EOM,
                        "beginning of partition detected");
        }
        l->pos--;
        int fm = c->objects[l->pos].is_filemark;
        if (kind == REEL_SPACE_RECORDS && fm) {
            set_residue(st, -(n - done));
            return fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x01, REEL_FLAG_FILEMARK,
                        "filemark detected");
        }
        if (kind == REEL_SPACE_RECORDS || fm) done++;
    }
    return REEL_OK;
}

static int32_t mt_drive_space(ReelDrive *d, uint32_t kind, int64_t count, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    rc = medium_ready(l, st);
    if (rc == REEL_OK) {
        Cartridge *c = mounted(l);
        l->stats.locates++;
        if (kind == REEL_SPACE_EOD)
            l->pos = c->count;
        else if (kind != REEL_SPACE_RECORDS && kind != REEL_SPACE_FILEMARKS)
            rc = error(st, REEL_E_INVALID_ARG, "unknown space kind");
        else if (count >= 0)
            rc = space_forward(l, c, kind, count, st);
        else
            rc = space_backward(l, c, kind, -count, st);
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_read_position(ReelDrive *d, ReelPosition *out, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (!out) rc = error(st, REEL_E_INVALID_ARG, "null position");
    if (rc == REEL_OK) rc = medium_ready(l, st);
    if (rc == REEL_OK) {
        Cartridge *c = mounted(l);
        memset(out, 0, sizeof *out);
        out->block = l->pos;
        out->file = file_number(c, l->pos);
        out->flags = (l->pos == 0 ? REEL_POS_BOP : 0) | (l->in_ew ? REEL_POS_EOP : 0);
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_write_record(ReelDrive *d, const uint8_t *data, size_t len, uint32_t crc,
                                     uint32_t flags, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (!data && len) rc = error(st, REEL_E_INVALID_ARG, "null data");
    else if (len > MAX_RECORD) rc = error(st, REEL_E_INVALID_ARG, "record too large");
    if (rc == REEL_OK) rc = medium_ready(l, st);
    Cartridge *c = mounted(l);
    uint32_t actual = rc == REEL_OK ? crc32c(data, len) : 0;
#ifdef MEMTAPE_BREAK_LBP /* a deliberately broken variant: accepts any CRC */
    crc = actual;
#endif
    if (rc == REEL_OK && l->lbp == REEL_LBP_CRC32C && (flags & REEL_WRITE_HAS_CRC) && crc != actual)
        rc = fail(st, REEL_SENSE_ABORTED_COMMAND, 0x10, 0x01, 0,
                  "logical block guard check failed: CRC32C mismatch");
    if (rc == REEL_OK && l->eom_left >= 0 && (int64_t)len > l->eom_left)
        rc = fail(st, REEL_SENSE_VOLUME_OVERFLOW, 0x00, 0x02, REEL_FLAG_EOM,
                  "end of medium: record not written");
#ifdef MEMTAPE_BREAK_EARLY_WARNING /* a deliberately broken variant: refuses writes in EW */
    if (rc == REEL_OK && l->in_ew)
        rc = fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x02, REEL_FLAG_EOM, "early warning");
#endif
    if (rc == REEL_OK) rc = prepare_write(l, c, st);
    if (rc == REEL_OK) {
        uint8_t *copy = malloc(len ? len : 1);
        if (!copy) {
            rc = error(st, REEL_E_INTERNAL, "out of memory");
        } else {
            if (len) memcpy(copy, data, len);
            c->objects[c->count++] = (Object){0, copy, len, actual};
            l->pos = c->count;
            l->stats.bytes_written += len;
            l->stats.records_written++;
            if (l->eom_left >= 0) l->eom_left -= (int64_t)len;
            if (l->ew_left >= 0) {
                if ((int64_t)len > l->ew_left) {
                    l->ew_left = 0;
                    l->in_ew = 1;
                } else {
                    l->ew_left -= (int64_t)len;
                }
            }
            if (l->in_ew)
                rc = fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x02, REEL_FLAG_EOM,
                          "early warning: record written");
        }
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_write_filemarks(ReelDrive *d, uint32_t count, uint32_t immediate,
                                        ReelStatus *st) {
    (void)immediate; /* memory is always "on the medium" */
    DRIVE_ENTER(d, st);
    rc = medium_ready(l, st);
    Cartridge *c = mounted(l);
    for (uint32_t i = 0; rc == REEL_OK && i < count; i++) {
        rc = prepare_write(l, c, st);
        if (rc == REEL_OK) {
            c->objects[c->count++] = (Object){1, NULL, 0, 0};
            l->pos = c->count;
            l->stats.filemarks_written++;
        }
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_read_record(ReelDrive *d, uint8_t *buffer, size_t capacity,
                                    size_t *out_len, uint32_t *out_crc, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (!out_len || (!buffer && capacity)) rc = error(st, REEL_E_INVALID_ARG, "null argument");
    if (rc == REEL_OK) {
        *out_len = 0;
        rc = medium_ready(l, st);
    }
    if (rc == REEL_OK) {
        Cartridge *c = mounted(l);
        if (l->pos >= c->count) {
            rc = fail(st, REEL_SENSE_BLANK_CHECK, 0x00, 0x05, 0, "end of data");
        } else {
            Object *o = &c->objects[l->pos++];
            if (o->is_filemark) {
                rc = fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x01, REEL_FLAG_FILEMARK,
                          "filemark detected");
            } else {
                size_t n = o->len < capacity ? o->len : capacity;
                if (n) memcpy(buffer, o->data, n);
                *out_len = n;
                if (out_crc) *out_crc = o->crc;
                l->stats.bytes_read += n;
                l->stats.records_read++;
                if (o->len > capacity) {
                    set_residue(st, (int64_t)capacity - (int64_t)o->len);
                    rc = fail(st, REEL_SENSE_NO_SENSE, 0x00, 0x00, REEL_FLAG_ILI,
                              "record longer than the buffer");
                }
            }
        }
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_set_lbp(ReelDrive *d, uint32_t mode, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (mode != REEL_LBP_OFF && mode != REEL_LBP_CRC32C)
        rc = error(st, REEL_E_INVALID_ARG, "unknown LBP mode");
    else
        l->lbp = mode;
    DRIVE_LEAVE();
}

static Attribute *find_attr(Cartridge *c, uint16_t id) {
    for (size_t i = 0; i < c->n_attrs; i++)
        if (c->attrs[i].id == id) return &c->attrs[i];
    return NULL;
}

static int32_t mt_drive_mam_read(ReelDrive *d, uint16_t attribute, uint8_t *buffer,
                                 size_t capacity, size_t *out_len, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (!out_len || (!buffer && capacity)) rc = error(st, REEL_E_INVALID_ARG, "null argument");
    if (rc == REEL_OK) rc = medium_ready(l, st);
    if (rc == REEL_OK) {
        Attribute *a = find_attr(mounted(l), attribute);
        if (!a) {
            rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x24, 0x00, 0, "attribute not set");
        } else {
            *out_len = a->len;
            if (a->len > capacity) {
                set_residue(st, (int64_t)a->len);
                rc = error(st, REEL_E_BUFFER_TOO_SMALL, "attribute larger than the buffer");
            } else if (a->len) {
                memcpy(buffer, a->value, a->len);
            }
        }
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_mam_write(ReelDrive *d, uint16_t attribute, const uint8_t *data,
                                  size_t len, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (!data && len) rc = error(st, REEL_E_INVALID_ARG, "null data");
    if (rc == REEL_OK) rc = medium_ready(l, st);
    if (rc == REEL_OK && len > MAX_ATTR_LEN)
        rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x1A, 0x00, 0, "attribute too long");
    if (rc == REEL_OK) {
        Cartridge *c = mounted(l);
        Attribute *a = find_attr(c, attribute);
        if (!a && c->n_attrs < MAX_ATTRS) a = &c->attrs[c->n_attrs++];
        if (!a) {
            rc = fail(st, REEL_SENSE_ILLEGAL_REQUEST, 0x26, 0x00, 0, "MAM full");
        } else {
            a->id = attribute;
            a->len = len;
            if (len) memcpy(a->value, data, len);
        }
    }
    DRIVE_LEAVE();
}

static int32_t mt_drive_statistics(ReelDrive *d, ReelDriveStats *out, ReelStatus *st) {
    DRIVE_ENTER(d, st);
    if (!out) {
        rc = error(st, REEL_E_INVALID_ARG, "null statistics");
    } else {
        ReelDriveStats s = l->stats;
        uint32_t size = out->struct_size < sizeof s ? out->struct_size : (uint32_t)sizeof s;
        s.struct_size = out->struct_size;
        memcpy(out, &s, size);
    }
    DRIVE_LEAVE();
}

static const ReelPluginV1 MEMTAPE = {
    REEL_PLUGIN_HEADER_INIT("memtape", "1.0.0", MEMTAPE_CAPS),
    .library_open = mt_library_open,
    .library_close = mt_library_close,
    .library_inventory = mt_library_inventory,
    .library_move = mt_library_move,
    .control = mt_control,
    .drive_open = mt_drive_open,
    .drive_close = mt_drive_close,
    .drive_info = mt_drive_info,
    .drive_test_ready = mt_drive_test_ready,
    .drive_load = mt_drive_load,
    .drive_unload = mt_drive_unload,
    .drive_rewind = mt_drive_rewind,
    .drive_locate = mt_drive_locate,
    .drive_space = mt_drive_space,
    .drive_read_position = mt_drive_read_position,
    .drive_write_record = mt_drive_write_record,
    .drive_write_filemarks = mt_drive_write_filemarks,
    .drive_read_record = mt_drive_read_record,
    .drive_set_lbp = mt_drive_set_lbp,
    .drive_mam_read = mt_drive_mam_read,
    .drive_mam_write = mt_drive_mam_write,
    .drive_statistics = mt_drive_statistics,
#ifndef MEMTAPE_ABI_V1_0
    .library_info = mt_library_info,
    .set_log = mt_set_log,
#endif
};

REEL_REGISTER_PLUGIN(MEMTAPE)
