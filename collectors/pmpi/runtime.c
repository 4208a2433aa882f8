/* ddltrace PMPI runtime.
 *
 * Every rank writes its records straight into a file it has memory-mapped MAP_SHARED
 * ($DDLTRACE_PMPI_DIR/rank-NNNNN.pmpi). The kernel owns those pages, so what was written survives
 * exit without MPI_Finalize, SIGTERM, SIGKILL and os._exit: the file is complete up to the last call.
 * A call is written at its entry (t1 = 0) and completed at its exit, so a rank that dies inside a call
 * shows which call it died in.
 *
 * File layout (little-endian; read by ddltrace.collectors.pmpi.records):
 *   [0, 4096)        header (struct ddlt_header below)
 *   [4096, ...)      64-byte records (struct ddlt_rec), mapped in segments of 65536 records
 *
 * Communicators: each record's comm is an id that is the same on every rank of the communicator (handles are
 * not: Open MPI's are addresses, another in each process), and its peer the partner's MPI_COMM_WORLD rank. The
 * wrappers of the calls that make communicators (each a record of its own, its comm the new one's id) agree the new
 * one's id among its ranks (an 8-byte MPI_Bcast from its rank 0, once per communicator made) and note its ranks'
 * world ranks, in a table from handle to id read without a lock by every recorded call (see "communicator ids"
 * below). A spawned process agrees its parent intercommunicator's id with its parents inside MPI_Init.
 *
 * Timestamps: on x86 the invariant TSC (rdtsc, ~10 ns), with (tick, CLOCK_REALTIME ns) calibration pairs
 * in the header; elsewhere CLOCK_REALTIME ns. Clock offset to rank 0 is measured by ping-pong on a private
 * communicator at MPI_Init and again at MPI_Finalize (drift), and kept in the header.
 */
#define _GNU_SOURCE
#include "runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

#define HEADER_SIZE 4096
#define SEG_SHIFT 16
#define SEG_RECORDS (1u << SEG_SHIFT)
#define MAX_SEGS (1u << 16)
#define SYNC_ROUNDS 10
#define SYNC_TAG 7301

#ifndef DDLT_TABLE_HASH
#define DDLT_TABLE_HASH 0u
#endif
#ifndef DDLT_FN_CLOCK_SYNC
#define DDLT_FN_CLOCK_SYNC 0
#endif
#ifndef DDLT_FN_REQUEST_DONE
#define DDLT_FN_REQUEST_DONE 0
#endif
#ifndef DDLT_FN_SENDRECV_RECEIVED
#define DDLT_FN_SENDRECV_RECEIVED 0
#endif
#ifndef DDLT_MAKERS_HASH
#define DDLT_MAKERS_HASH 0u
#endif

typedef struct ddlt_sync {
    int64_t offset_ns;      /* rank 0's clock minus this rank's clock */
    int64_t uncertainty_ns; /* half the smallest round trip */
    int64_t local_t_ns;     /* this rank's time at the measurement */
    int64_t rtt_ns;         /* smallest round trip */
} ddlt_sync;

typedef struct ddlt_header {
    char magic[8];             /* "DDLTPMPI" */
    uint32_t version;          /* 1 */
    uint32_t header_size;      /* 4096 */
    uint32_t record_size;      /* 64 */
    int32_t rank;
    int32_t world_size;
    int32_t pid;
    volatile uint64_t n_slots; /* record slots handed out (a slot with fn == 0 was never written) */
    volatile uint32_t state;   /* 1 initialized, 2 in MPI_Finalize, 3 finalized */
    uint32_t table_hash;       /* hash of the wrapper table's names, to refuse a mismatched reader */
    int32_t main_tid;          /* thread that called MPI_Init */
    volatile int32_t n_sync;   /* clock measurements done: 0, 1 (init), 2 (init and finalize) */
    ddlt_sync sync[2];
    int64_t test_offset_ns;    /* offset injected by DDLTRACE_TEST_CLOCK_OFFSET_NS (tests only) */
    char hostname[256];
    char library[256];
    uint32_t clock_kind;         /* 0: record times are ns; 1: TSC ticks, converted with cal[] */
    volatile uint32_t n_cal;     /* calibration pairs written (slots 0..61, then 62/63 alternate) */
    volatile int32_t cal_latest; /* slot of the latest of 62/63 once n_cal > 62 */
    int32_t pad;
    int64_t cal[64][2];          /* (tick, ns) pairs */
    uint32_t features;           /* DDLT_FEATURE_* (runtime.h); 0 in files written before it existed */
    uint32_t makers_hash;        /* hash of the list of communicator calls, whose records take the ids after the
                                    call table's (table.py MAKERS); 0 in files written before they were recorded */
} ddlt_header;

_Static_assert(sizeof(ddlt_rec) == 64, "record must be 64 bytes");
_Static_assert(offsetof(ddlt_header, sync) == 56, "header layout");
_Static_assert(offsetof(ddlt_header, hostname) == 128, "header layout");
_Static_assert(offsetof(ddlt_header, clock_kind) == 640, "header layout");
_Static_assert(offsetof(ddlt_header, cal) == 656, "header layout");
_Static_assert(offsetof(ddlt_header, features) == 1680, "header layout");
_Static_assert(offsetof(ddlt_header, makers_hash) == 1684, "header layout");
_Static_assert(sizeof(ddlt_header) == 1688, "header layout");

int ddlt_on = 0;
int ddlt_active = 0;
static int world_rank, world_size = 1;
static ddlt_header *hdr;
static int fd = -1;
static ddlt_rec *segs[MAX_SEGS];
static pthread_mutex_t seg_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread int32_t my_tid;
static __thread ddlt_rec sink; /* where records go when the file cannot grow */
static int grow_failed;         /* the file could not grow (its file system full): every later record is sunk */
static int64_t test_offset;
static MPI_Comm sync_comm = MPI_COMM_NULL;

/* Wall clock in ns (CLOCK_REALTIME; plus the injected test offset). */
int64_t ddlt_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + test_offset;
}

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define CLOCK_KIND 1
/* Record timestamps: the invariant TSC (about 10 ns to read, against about 30 ns for clock_gettime),
 * converted to ns by the reader with the (tick, ns) pairs of calibrate(). */
int64_t ddlt_now(void) { return (int64_t)__rdtsc(); }
#else
#define CLOCK_KIND 0
int64_t ddlt_now(void) { return ddlt_now_ns(); }
#endif

static volatile int cal_busy;

/* Write one (tick, ns) pair into the header; taken at init, after each clock sync, at finalize, and every
 * 16384 records, so that a rank that dies still leaves the pairs that convert its records. */
static void calibrate(void) {
    if (!hdr || CLOCK_KIND == 0 || __atomic_exchange_n(&cal_busy, 1, __ATOMIC_ACQUIRE)) return;
    int64_t a = ddlt_now(), ns = ddlt_now_ns(), b = ddlt_now();
    uint32_t n = hdr->n_cal;
    int slot = n < 62 ? (int)n : (hdr->cal_latest == 62 ? 63 : 62);
    hdr->cal[slot][0] = a + (b - a) / 2;
    hdr->cal[slot][1] = ns;
    if (n < 62) {
        __atomic_store_n(&hdr->n_cal, n + 1, __ATOMIC_RELEASE);
    } else {
        __atomic_store_n(&hdr->cal_latest, slot, __ATOMIC_RELEASE);
        __atomic_store_n(&hdr->n_cal, 63, __ATOMIC_RELEASE);
    }
    __atomic_store_n(&cal_busy, 0, __ATOMIC_RELEASE);
}

static ddlt_rec *map_segment(uint32_t s) {
    pthread_mutex_lock(&seg_lock);
    ddlt_rec *p = __atomic_load_n(&segs[s], __ATOMIC_ACQUIRE);
    if (!p && !grow_failed) {
        off_t off = HEADER_SIZE + (off_t)s * SEG_RECORDS * sizeof(ddlt_rec);
        off_t need = off + (off_t)SEG_RECORDS * sizeof(ddlt_rec);
        off_t size = lseek(fd, 0, SEEK_END);
        /* The segment's pages reserved, not only the file's size set: on a full tmpfs (/dev/shm) ftruncate
         * succeeds and the first store into an unbacked page kills the rank with SIGBUS. The records past the
         * file's end are counted lost by the reader (n_slots against the file's size). */
        if (size < need && posix_fallocate(fd, size, need - size) != 0) {
            grow_failed = 1;
            pthread_mutex_unlock(&seg_lock);
            return NULL;
        }
        void *m = mmap(NULL, SEG_RECORDS * sizeof(ddlt_rec), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, off);
        if (m == MAP_FAILED) {
            pthread_mutex_unlock(&seg_lock);
            return NULL;
        }
        p = (ddlt_rec *)m;
        __atomic_store_n(&segs[s], p, __ATOMIC_RELEASE);
    }
    pthread_mutex_unlock(&seg_lock);
    return p;
}

static inline ddlt_rec *slot(uint64_t i) {
    uint64_t s = i >> SEG_SHIFT;
    if (s >= MAX_SEGS) return NULL;
    ddlt_rec *p = __atomic_load_n(&segs[s], __ATOMIC_ACQUIRE);
    if (__builtin_expect(p == NULL, 0)) p = grow_failed ? NULL : map_segment((uint32_t)s);
    return p ? &p[i & (SEG_RECORDS - 1)] : NULL;
}

ddlt_rec *ddlt_begin(uint16_t fn) {
    if (__builtin_expect(my_tid == 0, 0)) my_tid = (int32_t)syscall(SYS_gettid);
    uint64_t i = __atomic_fetch_add(&hdr->n_slots, 1, __ATOMIC_RELAXED);
    if (__builtin_expect((i & 0x3FFF) == 0x3FFF, 0)) calibrate();
    ddlt_rec *r = slot(i);
    if (!r) r = &sink;
    r->flags = 0;
    r->tid = my_tid;
    r->peer = DDLT_NA32;
    r->tag = DDLT_NA32;
    r->t1 = 0;
    r->bytes = -1;
    r->comm = DDLT_NA64;
    r->request = DDLT_NA64;
    r->aux = DDLT_NA64;
    r->t0 = ddlt_now();
    __atomic_store_n(&r->fn, fn, __ATOMIC_RELEASE);
    return r;
}

void ddlt_end(ddlt_rec *r, int ret, int64_t t1) {
    if (ret != MPI_SUCCESS) r->flags |= DDLT_F_ERROR;
    __atomic_store_n(&r->t1, t1, __ATOMIC_RELEASE);
}

int64_t ddlt_type_bytes(int64_t count, MPI_Datatype type) {
    int size = 0;
    if (count < 0 || type == MPI_DATATYPE_NULL || PMPI_Type_size(type, &size) != MPI_SUCCESS) return -1;
    return count * (int64_t)size;
}

int ddlt_comm_size(MPI_Comm comm) {
    int n = 0;
    if (PMPI_Comm_size(comm, &n) != MPI_SUCCESS) return 0;
    return n;
}

int ddlt_comm_rank(MPI_Comm comm) {
    int r = -1;
    if (PMPI_Comm_rank(comm, &r) != MPI_SUCCESS) return -1;
    return r;
}

int64_t ddlt_sum_bytes_i(const int counts[], MPI_Datatype type, MPI_Comm comm) {
    if (!counts) return -1;
    int n = ddlt_comm_size(comm);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += counts[i];
    return ddlt_type_bytes(total, type);
}

int64_t ddlt_sum_bytes_c(const MPI_Count counts[], MPI_Datatype type, MPI_Comm comm) {
    if (!counts) return -1;
    int n = ddlt_comm_size(comm);
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += (int64_t)counts[i];
    return ddlt_type_bytes(total, type);
}

int64_t ddlt_status_bytes(const MPI_Status *status, MPI_Datatype type) {
    int count = 0;
    if (PMPI_Get_count(status, type, &count) != MPI_SUCCESS || count == MPI_UNDEFINED) return -1;
    return ddlt_type_bytes(count, type);
}

int64_t ddlt_first_request(int n, const MPI_Request reqs[]) {
    for (int i = 0; i < n; i++)
        if (reqs[i] != MPI_REQUEST_NULL) return DDLT_H(reqs[i]);
    return DDLT_NA64;
}

void *ddlt_room(void *local, int n, size_t size) {
    return n <= DDLT_MAX_DONE ? local : malloc((size_t)n * size);
}

void ddlt_unroom(void *room, void *local) {
    if (room != local) free(room);
}

void ddlt_done(MPI_Request req, const MPI_Status *status, int64_t t1) {
    if (req == MPI_REQUEST_NULL) return;
    ddlt_rec *r = ddlt_begin(DDLT_FN_REQUEST_DONE);
    r->t0 = t1;
    r->request = DDLT_H(req);
    if (status != MPI_STATUS_IGNORE) {
        r->aux = ddlt_status_bytes(status, MPI_BYTE);
        r->peer = status->MPI_SOURCE;
        r->tag = status->MPI_TAG;
    }
    ddlt_end(r, MPI_SUCCESS, t1);
}

void ddlt_done_all(const MPI_Request reqs[], int n, const MPI_Status statuses[], int64_t t1) {
    for (int i = 0; i < n; i++)
        ddlt_done(reqs[i], statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[i], t1);
}

void ddlt_done_some(const MPI_Request reqs[], int n, int outcount, const int indices[], const MPI_Status statuses[],
                    int64_t t1) {
    if (outcount == MPI_UNDEFINED) return;
    for (int k = 0; k < outcount; k++)
        if (indices[k] >= 0 && indices[k] < n)
            ddlt_done(reqs[indices[k]], statuses == MPI_STATUSES_IGNORE ? MPI_STATUS_IGNORE : &statuses[k], t1);
}

void ddlt_received(const MPI_Status *status, MPI_Datatype type, const ddlt_comm_info *ci, int64_t t1) {
    ddlt_rec *r = ddlt_begin(DDLT_FN_SENDRECV_RECEIVED);
    r->t0 = t1;
    r->peer = ddlt_peer(r, ci, status->MPI_SOURCE);
    r->tag = status->MPI_TAG;
    r->bytes = ddlt_status_bytes(status, type);
    ddlt_set_comm(r, ci);
    ddlt_end(r, MPI_SUCCESS, t1);
}

/* ---- communicator ids ----
 *
 * A table from handle to ddlt_comm_info, open addressing, read by every recorded call without a lock (a slot's key
 * is published after its info; a table outgrown is replaced whole and kept, since a reader may still be in it) and
 * written under comm_lock by the calls that make and free communicators. A freed communicator's slot keeps its key
 * with no info; a handle made again (MPICH and Open MPI both reuse them) finds its slot and takes its new info. */

typedef struct comm_slot {
    intptr_t key; /* the handle; 0: never used */
    ddlt_comm_info *info; /* NULL: freed */
} comm_slot;
typedef struct comm_table {
    uint64_t mask;
    uint64_t used; /* slots with a key */
    comm_slot slots[];
} comm_table;

/* An MPI_Comm_idup whose communicator has not been used yet: its id waits for the handle at *where (a library may
   write it when the request completes). */
typedef struct pending_idup {
    MPI_Comm *where;
    int64_t id;
    int known;
} pending_idup;
#define MAX_PENDING 256

static comm_table *comms;
static pthread_mutex_t comm_lock = PTHREAD_MUTEX_INITIALIZER;
static pending_idup pending[MAX_PENDING];
static int n_pending;
static uint32_t made; /* ids this rank has made (the low 32 bits of the next) */
static uint64_t process_tag; /* this process's own random bits, for the hashed ids it makes */
static MPI_Group world_group = MPI_GROUP_NULL;
static ddlt_comm_info world_info = {DDLT_COMM_WORLD_ID, 1, 1, 0, NULL, 0};
static ddlt_comm_info self_info = {DDLT_COMM_SELF_ID, 1, 1, 1, NULL, 0};
static ddlt_comm_info null_info = {DDLT_NA64, 0, 0, 0, NULL, 0};
static int self_world[1];

static inline uint64_t mix64(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static void comms_init(void) {
    char host[256] = {0};
    uint64_t h = 0;
    gethostname(host, sizeof host - 1);
    for (const char *c = host; *c; c++) h = h * 131 + (unsigned char)*c;
    process_tag = mix64(h ^ mix64((uint64_t)getpid() << 32 ^ (uint64_t)ddlt_now_ns()));
    self_world[0] = world_rank;
    self_info.world = self_world;
    null_info.id = DDLT_H(MPI_COMM_NULL);
    if (PMPI_Comm_group(MPI_COMM_WORLD, &world_group) != MPI_SUCCESS) world_group = MPI_GROUP_NULL;
}

static ddlt_comm_info *table_find(const comm_table *t, intptr_t key, int *found) {
    *found = 0;
    if (!t) return NULL;
    for (uint64_t i = mix64((uint64_t)key) & t->mask;; i = (i + 1) & t->mask) {
        intptr_t k = __atomic_load_n(&t->slots[i].key, __ATOMIC_ACQUIRE);
        if (k == 0) return NULL;
        if (k == key) {
            *found = 1;
            return __atomic_load_n(&t->slots[i].info, __ATOMIC_ACQUIRE);
        }
    }
}

/* Under comm_lock. Put info under key (a previous info of the key is freed); 0 where the table cannot grow. */
static int table_put(intptr_t key, ddlt_comm_info *info) {
    comm_table *t = comms;
    if (!t || (t->used + 1) * 2 > t->mask + 1) { /* grow (and drop the freed): half the slots stay empty */
        uint64_t live = 0;
        for (uint64_t i = 0; t && i <= t->mask; i++) live += t->slots[i].info != NULL;
        uint64_t cap = 64;
        while (cap < 4 * (live + 1)) cap *= 2;
        comm_table *n = calloc(1, sizeof *n + cap * sizeof(comm_slot));
        if (!n) return 0;
        n->mask = cap - 1;
        for (uint64_t i = 0; t && i <= t->mask; i++) {
            if (!t->slots[i].info) continue;
            uint64_t j = mix64((uint64_t)t->slots[i].key) & n->mask;
            while (n->slots[j].key) j = (j + 1) & n->mask;
            n->slots[j] = t->slots[i];
            n->used++;
        }
        __atomic_store_n(&comms, n, __ATOMIC_RELEASE); /* the old table is kept: a reader may be in it */
        t = n;
    }
    uint64_t i = mix64((uint64_t)key) & t->mask;
    while (t->slots[i].key && t->slots[i].key != key) i = (i + 1) & t->mask;
    ddlt_comm_info *old = t->slots[i].info;
    __atomic_store_n(&t->slots[i].info, info, __ATOMIC_RELEASE);
    if (!t->slots[i].key) {
        __atomic_store_n(&t->slots[i].key, key, __ATOMIC_RELEASE);
        t->used++;
    }
    if (old) {
        free((void *)old->world);
        free(old);
    }
    return 1;
}

/* The world ranks of the group's ranks (-1 for one outside this MPI_COMM_WORLD), malloc'd, their count in *n; NULL
   where they cannot be had. Local calls only. */
static int *world_ranks(MPI_Group g, int *n) {
    int *in = NULL, *out = NULL;
    *n = 0;
    if (world_group == MPI_GROUP_NULL || PMPI_Group_size(g, n) != MPI_SUCCESS || *n <= 0 ||
        !(in = malloc(*n * sizeof(int))) || !(out = malloc(*n * sizeof(int)))) {
        free(in);
        return NULL;
    }
    for (int i = 0; i < *n; i++) in[i] = i;
    if (PMPI_Group_translate_ranks(g, *n, in, world_group, out) != MPI_SUCCESS) {
        free(out);
        out = NULL;
    }
    for (int i = 0; out && i < *n; i++)
        if (out[i] < 0) out[i] = -1; /* MPI_UNDEFINED */
    free(in);
    return out;
}

/* Whether a rank of the group is outside this MPI_COMM_WORLD. */
static int group_spans(MPI_Group g) {
    int n, spans = 0, *w = world_ranks(g, &n);
    for (int i = 0; w && i < n; i++) spans |= w[i] < 0;
    free(w);
    return spans;
}

/* A new info: id, and unless translate is 0 the world ranks of the communicator's ranks (its remote group's for an
   intercommunicator); *spans (where not NULL): whether it has processes outside this MPI_COMM_WORLD. Local calls
   only. */
static ddlt_comm_info *new_info(MPI_Comm c, int64_t id, int known, int translate, int *spans) {
    ddlt_comm_info *ci = calloc(1, sizeof *ci);
    if (!ci) return NULL;
    ci->id = id;
    ci->known = known;
    if (!translate) return ci;
    int inter = 0, n = 0;
    MPI_Group g;
    PMPI_Comm_test_inter(c, &inter);
    if (inter && spans && PMPI_Comm_group(c, &g) == MPI_SUCCESS) { /* its own group may span worlds too */
        *spans = group_spans(g);
        PMPI_Group_free(&g);
    }
    if ((inter ? PMPI_Comm_remote_group(c, &g) : PMPI_Comm_group(c, &g)) != MPI_SUCCESS) return ci;
    int *out = world_ranks(g, &n);
    PMPI_Group_free(&g);
    if (!out) return ci;
    int identity = n == world_size;
    for (int i = 0; i < n; i++) {
        identity &= out[i] == i;
        if (spans) *spans |= out[i] < 0;
    }
    ci->translated = 1;
    ci->size = n;
    if (identity) {
        free(out);
    } else {
        ci->world = out;
    }
    return ci;
}

/* A handle not in the table: an MPI_Comm_idup's communicator used for the first time, else one the wrapper did
   not see made (its handle, flagged: one made around the wrapper by PMPI_ calls). */
static ddlt_comm_info *comm_miss(MPI_Comm c) {
    if (c == MPI_COMM_NULL) return &null_info;
    intptr_t key = (intptr_t)DDLT_H(c);
    pthread_mutex_lock(&comm_lock);
    int found;
    ddlt_comm_info *ci = table_find(comms, key, &found);
    if (!ci) {
        int k = 0;
        while (k < n_pending && *pending[k].where != c) k++;
        if (k < n_pending) {
            ci = new_info(c, pending[k].id, pending[k].known, 1, NULL);
            pending[k] = pending[--n_pending];
        } else {
            ci = new_info(c, DDLT_H(c), 0, 0, NULL);
        }
        if (ci && !table_put(key, ci)) {
            free((void *)ci->world);
            free(ci);
            ci = NULL;
        }
    }
    pthread_mutex_unlock(&comm_lock);
    if (!ci) { /* out of memory: this call's record has the handle */
        static __thread ddlt_comm_info spare;
        spare = (ddlt_comm_info){DDLT_H(c), 0, 0, 0, NULL, 0};
        return &spare;
    }
    return ci;
}

ddlt_comm_info *ddlt_comm(MPI_Comm comm) {
    if (comm == MPI_COMM_WORLD) return &world_info;
    if (comm == MPI_COMM_SELF) return &self_info;
    int found;
    ddlt_comm_info *ci = table_find(__atomic_load_n(&comms, __ATOMIC_ACQUIRE), (intptr_t)DDLT_H(comm), &found);
    return ci ? ci : comm_miss(comm);
}

/* An id of this rank's own, never made before by any rank: its world rank and its count; for a communicator that
   spans worlds (whose world ranks and counts repeat in the other worlds), a hash of this process's tag and its count. */
static int64_t fresh_id(int spans) {
    uint32_t count = __atomic_fetch_add(&made, 1, __ATOMIC_RELAXED);
    if (!spans) return DDLT_COMM_ID_BASE | (int64_t)world_rank << 32 | count;
    return DDLT_COMM_ID_BASE | DDLT_COMM_HASHED_BIT
           | (int64_t)(mix64(process_tag ^ mix64(count + 1ULL)) & (DDLT_COMM_HASHED_BIT - 1));
}

/* The id of communicator c, agreed by its ranks (collective over c). */
static int64_t agree_id(MPI_Comm c, int spans) {
    int inter = 0, rank = -1;
    PMPI_Comm_test_inter(c, &inter);
    PMPI_Comm_rank(c, &rank);
    int64_t mine = rank == 0 ? fresh_id(spans) : 0, theirs = 0, ours = 0;
    if (!inter) { /* rank 0 makes it, tells the others */
        PMPI_Bcast(&mine, 1, MPI_INT64_T, 0, c);
        return mine;
    }
    /* each group's rank 0 makes one; the larger is the communicator's. An intercommunicator's MPI_Allreduce gives
       each group the other group's: once for theirs, once for ours back */
    PMPI_Allreduce(&mine, &theirs, 1, MPI_INT64_T, MPI_MAX, c);
    PMPI_Allreduce(&theirs, &ours, 1, MPI_INT64_T, MPI_MAX, c);
    return theirs > ours ? theirs : ours;
}

int64_t ddlt_comm_made(MPI_Comm c) {
    if (c == MPI_COMM_NULL || c == MPI_COMM_WORLD || c == MPI_COMM_SELF) return DDLT_NA64;
    int spans = 0;
    ddlt_comm_info *ci = new_info(c, 0, 1, 1, &spans);
    int64_t id = agree_id(c, spans); /* (out of memory, ci NULL: this rank still takes part) */
    if (!ci) return id;
    ci->id = id;
    pthread_mutex_lock(&comm_lock);
    if (!table_put((intptr_t)DDLT_H(c), ci)) {
        free((void *)ci->world);
        free(ci);
    }
    pthread_mutex_unlock(&comm_lock);
    return id;
}

int64_t ddlt_comm_idup(MPI_Comm parent, MPI_Comm *newcomm) {
    /* No communication may wait here (the call is non-blocking): the ranks of the parent make its idups in one
       order (MPI's rule for collectives), so its id and its count of them give the same id on each. */
    ddlt_comm_info *p = ddlt_comm(parent);
    uint64_t seq = __atomic_fetch_add(&p->idups, 1, __ATOMIC_RELAXED);
    int64_t id = DDLT_COMM_ID_BASE | DDLT_COMM_HASHED_BIT
                 | (int64_t)(mix64((uint64_t)p->id ^ mix64(seq + 1)) & (DDLT_COMM_HASHED_BIT - 1));
    pthread_mutex_lock(&comm_lock);
    if (n_pending == MAX_PENDING) { /* never used: the oldest goes */
        memmove(pending, pending + 1, (MAX_PENDING - 1) * sizeof *pending);
        n_pending--;
    }
    pending[n_pending++] = (pending_idup){newcomm, id, p->known};
    pthread_mutex_unlock(&comm_lock);
    return id;
}

void ddlt_comm_forget(MPI_Comm c) {
    if (c == MPI_COMM_NULL || c == MPI_COMM_WORLD || c == MPI_COMM_SELF) return;
    intptr_t key = (intptr_t)DDLT_H(c);
    pthread_mutex_lock(&comm_lock);
    comm_table *t = comms;
    for (uint64_t i = t ? mix64((uint64_t)key) & t->mask : 0; t && t->slots[i].key; i = (i + 1) & t->mask) {
        if (t->slots[i].key != key) continue;
        ddlt_comm_info *old = t->slots[i].info;
        __atomic_store_n(&t->slots[i].info, NULL, __ATOMIC_RELEASE);
        if (old) {
            free((void *)old->world);
            free(old);
        }
        break;
    }
    for (int k = 0; k < n_pending; k++)
        if (*pending[k].where == c) pending[k--] = pending[--n_pending];
    pthread_mutex_unlock(&comm_lock);
}

/* ---- matched probes' envelopes ----
 *
 * An MPI_Mrecv names no communicator, only the message a probe matched: the probe's communicator, flags and the world
 * rank of its source are kept by message handle until the MPI_Mrecv takes them. A table of DDLT_ENVELOPES entries,
 * one per handle's hash, under a lock (a handle whose entry a later probe's took reads as unknown). */
#define DDLT_ENVELOPES 1024
static ddlt_envelope envelopes[DDLT_ENVELOPES];
static pthread_mutex_t envelope_lock = PTHREAD_MUTEX_INITIALIZER;

static void envelopes_init(void) {
    for (int i = 0; i < DDLT_ENVELOPES; i++) envelopes[i].message = DDLT_NA64;
}

void ddlt_probed(MPI_Message message, const MPI_Status *status, const ddlt_rec *r) {
    int64_t key = DDLT_H(message);
    pthread_mutex_lock(&envelope_lock);
    envelopes[mix64((uint64_t)key) & (DDLT_ENVELOPES - 1)] = (ddlt_envelope){
        key, r->comm, status->MPI_SOURCE, r->peer, (uint16_t)(r->flags & (DDLT_F_COMM_HANDLE | DDLT_F_PEER_IN_COMM))};
    pthread_mutex_unlock(&envelope_lock);
}

ddlt_envelope ddlt_take_envelope(int64_t message) {
    ddlt_envelope e = {DDLT_NA64, DDLT_NA64, -1, -1, 0};
    pthread_mutex_lock(&envelope_lock);
    ddlt_envelope *slot = &envelopes[mix64((uint64_t)message) & (DDLT_ENVELOPES - 1)];
    if (slot->message == message) {
        e = *slot;
        slot->message = DDLT_NA64;
    }
    pthread_mutex_unlock(&envelope_lock);
    return e;
}

/* Offset of rank 0's clock to ours, by SYNC_ROUNDS ping-pongs per rank, keeping the shortest round trip. */
static void clock_sync(int which) {
    if (sync_comm == MPI_COMM_NULL || which > 1) return;
    /* a rank that could not make its file takes part all the same: rank 0 waits for each */
    ddlt_rec *r = hdr ? ddlt_begin(DDLT_FN_CLOCK_SYNC) : NULL;
    int rank = world_rank, size = world_size;
    ddlt_sync best = {0, 0, ddlt_now_ns(), 0};
    if (rank == 0) {
        for (int peer = 1; peer < size; peer++) {
            for (int k = 0; k < SYNC_ROUNDS; k++) {
                int64_t t2;
                PMPI_Recv(NULL, 0, MPI_BYTE, peer, SYNC_TAG, sync_comm, MPI_STATUS_IGNORE);
                t2 = ddlt_now_ns();
                PMPI_Send(&t2, 1, MPI_INT64_T, peer, SYNC_TAG, sync_comm);
            }
        }
    } else {
        best.rtt_ns = INT64_MAX;
        for (int k = 0; k < SYNC_ROUNDS; k++) {
            int64_t t1 = ddlt_now_ns(), t2 = 0;
            PMPI_Send(NULL, 0, MPI_BYTE, 0, SYNC_TAG, sync_comm);
            PMPI_Recv(&t2, 1, MPI_INT64_T, 0, SYNC_TAG, sync_comm, MPI_STATUS_IGNORE);
            int64_t t3 = ddlt_now_ns();
            if (t3 - t1 < best.rtt_ns) {
                best.rtt_ns = t3 - t1;
                best.local_t_ns = t1 + (t3 - t1) / 2;
                best.offset_ns = t2 - best.local_t_ns;
                best.uncertainty_ns = (t3 - t1 + 1) / 2;
            }
        }
    }
    if (!r) return;
    hdr->sync[which] = best;
    __atomic_store_n(&hdr->n_sync, which + 1, __ATOMIC_RELEASE);
    r->aux = which;
    ddlt_end(r, MPI_SUCCESS, ddlt_now());
    calibrate();
}

static int64_t parse_node_test_offset(void) {
    /* DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS="HOST:NS[,HOST:NS...]": shift the clock of every rank on node HOST
       (tests only; the node agent reads the same variable). */
    const char *spec = getenv("DDLTRACE_TEST_NODE_CLOCK_OFFSET_NS");
    char host[256] = {0};
    if (!spec || gethostname(host, sizeof host - 1) != 0) return 0;
    size_t n = strlen(host);
    for (const char *p = spec; *p;) {
        const char *colon = strchr(p, ':');
        if (!colon) break;
        if ((size_t)(colon - p) == n && strncmp(p, host, n) == 0) return strtoll(colon + 1, NULL, 10);
        const char *comma = strchr(colon, ',');
        if (!comma) break;
        p = comma + 1;
    }
    return 0;
}

static int64_t parse_test_offset(int rank) {
    /* DDLTRACE_TEST_CLOCK_OFFSET_NS="RANK:NS[,RANK:NS...]": shift this rank's clock (tests only), added to
       its node's offset. */
    const char *spec = getenv("DDLTRACE_TEST_CLOCK_OFFSET_NS");
    int64_t node = parse_node_test_offset();
    if (!spec) return node;
    const char *p = spec;
    while (*p) {
        char *end;
        long r = strtol(p, &end, 10);
        if (*end != ':') break;
        long long ns = strtoll(end + 1, &end, 10);
        if (r == rank) return node + ns;
        if (*end != ',') break;
        p = end + 1;
    }
    return node;
}

/* This rank's record file, header written; 0 where it cannot be made (the rank then records nothing). A process
   spawned by the job (spawned: it has a parent) is of another MPI world: its file is an extra one. */
static int open_file(const char *dir, int spawned) {
    char path[4096];
    snprintf(path, sizeof path, "%s/rank-%05d.pmpi", dir, world_rank);
    fd = spawned ? -1 : open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (spawned || (fd < 0 && errno == EEXIST)) { /* another MPI world (a singleton the job started): keep it apart */
        snprintf(path, sizeof path, "%s/extra-%05d-%d.pmpi", dir, world_rank, (int)getpid());
        fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    }
    if (fd < 0 || posix_fallocate(fd, 0, HEADER_SIZE) != 0) {
        fprintf(stderr, "ddltrace pmpi: rank %d: cannot create %s (%s); not recording\n", world_rank, path,
                strerror(errno));
        return 0;
    }
    void *m = mmap(NULL, HEADER_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        fprintf(stderr, "ddltrace pmpi: rank %d: cannot map %s (%s); not recording\n", world_rank, path,
                strerror(errno));
        return 0;
    }
    hdr = (ddlt_header *)m;
    hdr->version = 1;
    hdr->header_size = HEADER_SIZE;
    hdr->record_size = sizeof(ddlt_rec);
    hdr->rank = world_rank;
    hdr->world_size = world_size;
    hdr->pid = (int32_t)getpid();
    hdr->table_hash = DDLT_TABLE_HASH;
    hdr->main_tid = (int32_t)syscall(SYS_gettid);
    hdr->test_offset_ns = test_offset;
    hdr->features = DDLT_FEATURE_COMM_IDS | DDLT_FEATURE_WORLD_PEERS;
    hdr->makers_hash = DDLT_MAKERS_HASH;
    gethostname(hdr->hostname, sizeof hdr->hostname - 1);
    int len = 0;
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    if (PMPI_Get_library_version(lib, &len) == MPI_SUCCESS) {
        lib[strcspn(lib, "\n")] = 0;
        snprintf(hdr->library, sizeof hdr->library, "%.255s", lib);
    }
    hdr->clock_kind = CLOCK_KIND;
    calibrate();
    if (CLOCK_KIND) { /* a second pair 1 ms later: a rate even if the rank dies before the next one */
        int64_t until = ddlt_now_ns() + 1000000;
        while (ddlt_now_ns() < until) {
        }
        calibrate();
    }
    memcpy(hdr->magic, "DDLTPMPI", 8);
    hdr->state = 1;
    return 1;
}

void ddlt_after_init(int64_t t0, int64_t t1, uint16_t fn, int ret) {
    if (ret != MPI_SUCCESS) return;
    const char *dir = getenv("DDLTRACE_PMPI_DIR");
    /* The wrapper's collective work (the ids of communicators, the clock sync) needs every rank: all of them agree
       whether it runs (every rank with the wrapper loaded takes part in this, recording or not). */
    int want = dir && *dir, all = 0;
    if (PMPI_Allreduce(&want, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD) != MPI_SUCCESS || !all) return;
    PMPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
    PMPI_Comm_size(MPI_COMM_WORLD, &world_size);
    comms_init();
    envelopes_init();
    ddlt_active = 1;
    test_offset = parse_test_offset(world_rank);
    MPI_Comm parent = MPI_COMM_NULL;
    PMPI_Comm_get_parent(&parent);
    if (open_file(dir, parent != MPI_COMM_NULL)) {
        ddlt_on = 1;
        ddlt_rec *r = ddlt_begin(fn);
        r->t0 = CLOCK_KIND ? t0 : t0 + test_offset;
        ddlt_end(r, ret, CLOCK_KIND ? t1 : t1 + test_offset);
    }
    if (PMPI_Comm_dup(MPI_COMM_WORLD, &sync_comm) != MPI_SUCCESS) sync_comm = MPI_COMM_NULL;
    clock_sync(0);
    /* a spawned process: its parents agree the intercommunicator's id as MPI_Comm_spawn returns (the wrapper's) */
    ddlt_comm_made(parent);
}

void ddlt_before_finalize(void) {
    if (hdr) hdr->state = 2;
    clock_sync(1);
    if (sync_comm != MPI_COMM_NULL) PMPI_Comm_free(&sync_comm);
    if (world_group != MPI_GROUP_NULL) PMPI_Group_free(&world_group);
}

void ddlt_after_finalize(ddlt_rec *r, int ret) {
    ddlt_active = 0;
    if (!r) return;
    ddlt_end(r, ret, ddlt_now());
    calibrate();
    hdr->state = 3;
    ddlt_on = 0;
}
