/* ddltrace PMPI runtime: crash-safe per-rank record file (see runtime.c and records.py for the layout). */
#ifndef DDLT_RUNTIME_H
#define DDLT_RUNTIME_H

#include <mpi.h>
#include <stddef.h>
#include <stdint.h>

#define DDLT_NA32 INT32_MIN
#define DDLT_NA64 INT64_MIN

/* Record flags */
#define DDLT_F_ERROR 1u     /* the call returned an error code */
#define DDLT_F_COMPLETED 2u /* a Test* / Iprobe / Improbe found something */
#define DDLT_F_COMM_HANDLE 4u  /* comm is this rank's own handle, no id (the wrapper did not see it made) */
#define DDLT_F_PEER_IN_COMM 8u /* peer is a rank in comm, not in MPI_COMM_WORLD (not translated: the comm was not
                                  seen made, or that rank is outside this MPI_COMM_WORLD: spawned, connected) */

/* Header features (ddlt_header.features): what the columns of this file's records hold. Files written before
   had none (0): comm was the handle, peer the rank in comm. */
#define DDLT_FEATURE_COMM_IDS 1u    /* comm is the communicator's id, the same on each of its ranks */
#define DDLT_FEATURE_WORLD_PEERS 2u /* peer (a root, a status's source) is the partner's MPI_COMM_WORLD rank */

/* Communicator ids. MPI_COMM_WORLD and MPI_COMM_SELF have fixed ones (MPICH's handles, which the files of MPICH
   jobs held before); a communicator the job makes gets one agreed by its ranks when it is made (runtime.c,
   ddlt_comm_made): DDLT_COMM_ID_BASE | creator's world rank << 32 | the creator's count; a hashed one,
   DDLT_COMM_ID_BASE | DDLT_COMM_HASHED_BIT | 61 bits of hash, for MPI_Comm_idup (of the parent's id and its count of
   idups) and for a communicator with processes of several MPI_COMM_WORLDs (spawned, connected: of the creator's
   random process tag and its count; world ranks and counts repeat across worlds). Either is above every handle
   (MPICH's are C ints, Open MPI's user-space addresses). */
#define DDLT_COMM_WORLD_ID 0x44000000LL
#define DDLT_COMM_SELF_ID 0x44000001LL
#define DDLT_COMM_ID_BASE (1LL << 62)
#define DDLT_COMM_HASHED_BIT (1LL << 61)

/* One intercepted call: 64 bytes, written into the memory-mapped record file. */
typedef struct ddlt_rec {
    volatile uint16_t fn;    /* 1-based index in the wrapper table; 0 = empty slot */
    uint16_t flags;
    int32_t tid;             /* Linux thread id of the caller */
    int32_t peer;            /* peer's MPI_COMM_WORLD rank (or a collective's root's; with DDLT_F_PEER_IN_COMM
                                its rank in comm); negative: none (MPI_PROC_NULL, MPI_ANY_SOURCE, not in the
                                world); DDLT_NA32 if none */
    int32_t tag;             /* tag of a point-to-point call; DDLT_NA32 if none */
    int64_t t0;              /* enter: ddlt_now() (TSC ticks on x86, else CLOCK_REALTIME ns) */
    volatile int64_t t1;     /* exit, same clock; 0 while the call is in progress */
    int64_t bytes;           /* payload bytes; -1 if unknown (MPI_Sendrecv: sent; its receive half's: received) */
    int64_t comm;            /* communicator id (DDLT_COMM_*; with DDLT_F_COMM_HANDLE the handle); DDLT_NA64 if
                                none */
    int64_t request;         /* request handle (made by I-calls, completed by Wait/Test); DDLT_NA64 if none */
    int64_t aux;             /* number of requests of Waitall/Waitsome/Testall/..., message handle of Imrecv,
                                status bytes of Wait (of a Test that completed; -1 if unknown) and of a
                                ddltrace_request_done record; DDLT_NA64 if none */
} ddlt_rec;

extern int ddlt_on;     /* this rank records */
extern int ddlt_active; /* every rank runs the wrapper's collective work (ids of communicators, clock sync) */

/* What the wrapper knows of a communicator: its id, and its ranks' MPI_COMM_WORLD ranks (an intercommunicator's:
   its remote group's, which its peers name; -1 for a rank outside this process's MPI_COMM_WORLD). */
typedef struct ddlt_comm_info {
    int64_t id;
    int known;         /* 1: id agreed by the ranks; 0: the handle (not seen made): DDLT_F_COMM_HANDLE */
    int translated;    /* 1: world[] (or the identity) gives world ranks; 0: DDLT_F_PEER_IN_COMM */
    int size;          /* entries of world[] */
    const int *world;  /* world rank of each rank (-1: none, outside this world); NULL: the identity */
    int64_t idups;     /* MPI_Comm_idup calls on it so far */
} ddlt_comm_info;

/* The communicator's info (for a handle the wrapper did not see made: its handle, flagged). */
ddlt_comm_info *ddlt_comm(MPI_Comm comm);
/* For record r: the world rank of rank in the communicator (a negative rank, MPI_ROOT and the like, as it is); a rank
   with none (outside this MPI_COMM_WORLD) as it is, r flagged DDLT_F_PEER_IN_COMM. */
static inline int32_t ddlt_peer(ddlt_rec *r, const ddlt_comm_info *ci, int rank) {
    if (rank < 0 || !ci->world || rank >= ci->size) return rank;
    if (ci->world[rank] >= 0) return ci->world[rank];
    r->flags |= DDLT_F_PEER_IN_COMM;
    return rank;
}
/* In a generated wrapper with a communicator (its info in ddlt_ci) and its record r: a rank in it as a world rank. */
#define DDLT_PEER(x) ddlt_peer(r, ddlt_ci, (x))
/* The record's comm and its flags, from the info. */
static inline void ddlt_set_comm(ddlt_rec *r, const ddlt_comm_info *ci) {
    r->comm = ci->id;
    if (!ci->known) r->flags |= DDLT_F_COMM_HANDLE;
    if (!ci->translated) r->flags |= DDLT_F_PEER_IN_COMM;
}
/* After a call made newcomm: agree its id with its other ranks (collective over it); the id (DDLT_NA64 for
   MPI_COMM_NULL: none made). */
int64_t ddlt_comm_made(MPI_Comm newcomm);
/* After MPI_Comm_idup: the id of *newcomm, from the parent's, taken when it is first used; the id. */
int64_t ddlt_comm_idup(MPI_Comm parent, MPI_Comm *newcomm);
/* Before MPI_Comm_free / MPI_Comm_disconnect: forget the communicator (its handle may come back for another). */
void ddlt_comm_forget(MPI_Comm comm);

int64_t ddlt_now(void);    /* record timestamp: TSC ticks on x86, else ns */
int64_t ddlt_now_ns(void); /* CLOCK_REALTIME ns */
ddlt_rec *ddlt_begin(uint16_t fn);
void ddlt_end(ddlt_rec *r, int ret, int64_t t1);
int64_t ddlt_type_bytes(int64_t count, MPI_Datatype type);
int64_t ddlt_sum_bytes_i(const int counts[], MPI_Datatype type, MPI_Comm comm);
int64_t ddlt_sum_bytes_c(const MPI_Count counts[], MPI_Datatype type, MPI_Comm comm);
int64_t ddlt_status_bytes(const MPI_Status *status, MPI_Datatype type);
int64_t ddlt_first_request(int n, const MPI_Request reqs[]);
/* A call completing several requests copies its array of requests (and lends an array of statuses where the job
   passed MPI_STATUSES_IGNORE) to write a ddltrace_request_done record per request: on the stack up to DDLT_MAX_DONE
   requests, on the heap beyond (where malloc fails: the first DDLT_MAX_DONE requests, and no statuses lent). */
#define DDLT_MAX_DONE 64
/* Room for n items of size bytes: local (an array of DDLT_MAX_DONE) where they fit, else malloc's (NULL if it
   failed); ddlt_unroom frees what ddlt_room took from the heap. */
void *ddlt_room(void *local, int n, size_t size);
void ddlt_unroom(void *room, void *local);
/* One ddltrace_request_done record for req (a copy taken before the call freed it), with its status's source, tag
   and size (status may be MPI_STATUS_IGNORE); nothing for MPI_REQUEST_NULL. */
void ddlt_done(MPI_Request req, const MPI_Status *status, int64_t t1);
void ddlt_done_all(const MPI_Request reqs[], int n, const MPI_Status statuses[], int64_t t1);
void ddlt_done_some(const MPI_Request reqs[], int n, int outcount, const int indices[], const MPI_Status statuses[],
                    int64_t t1);
/* The receive half of an MPI_Sendrecv / MPI_Sendrecv_replace, after the call's own record (its send half): a
   ddltrace_sendrecv_received record with its status's source, tag and size in bytes of type (-1 unknown). */
void ddlt_received(const MPI_Status *status, MPI_Datatype type, const ddlt_comm_info *ci, int64_t t1);
/* A matched probe's message (MPI_Mprobe, MPI_Improbe): its communicator, flags and source as the probe's record r
   has them (the source's world rank), kept by message handle for the MPI_Mrecv that receives it. */
typedef struct ddlt_envelope {
    int64_t message; /* the handle; DDLT_NA64: not known (no probe of it seen, or its entry taken by another) */
    int64_t comm;
    int32_t source;  /* the status's source: a rank in comm */
    int32_t peer;    /* its world rank (or as flagged) */
    uint16_t flags;  /* DDLT_F_COMM_HANDLE, DDLT_F_PEER_IN_COMM */
} ddlt_envelope;
/* After a probe that matched message (status: its status, r: its record): keep its envelope. */
void ddlt_probed(MPI_Message message, const MPI_Status *status, const ddlt_rec *r);
/* Before MPI_Mrecv of message (a handle read before the call): its envelope, taken from the table. */
ddlt_envelope ddlt_take_envelope(int64_t message);
/* An MPI_Mrecv's record r: the comm and flags of its envelope (unknown: no comm, peer flagged DDLT_F_PEER_IN_COMM). */
static inline void ddlt_set_envelope(ddlt_rec *r, const ddlt_envelope *e) {
    r->comm = e->comm;
    r->flags |= e->message == DDLT_NA64 ? DDLT_F_PEER_IN_COMM : e->flags;
}
/* The peer of an MPI_Mrecv whose status names source: the probe's world rank of it where the envelope is known. */
static inline int32_t ddlt_envelope_peer(const ddlt_envelope *e, int source) {
    return e->message != DDLT_NA64 && source == e->source ? e->peer : source;
}
int ddlt_comm_size(MPI_Comm comm);
int ddlt_comm_rank(MPI_Comm comm);
void ddlt_after_init(int64_t t0, int64_t t1, uint16_t fn, int ret);
void ddlt_before_finalize(void);
void ddlt_after_finalize(ddlt_rec *r, int ret);

#define DDLT_H(x) ((int64_t)(intptr_t)(x))

#endif
