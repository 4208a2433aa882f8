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

/* One intercepted call: 64 bytes, written into the memory-mapped record file. */
typedef struct ddlt_rec {
    volatile uint16_t fn;    /* 1-based index in the wrapper table; 0 = empty slot */
    uint16_t flags;
    int32_t tid;             /* Linux thread id of the caller */
    int32_t peer;            /* peer rank in comm (or root of a collective); DDLT_NA32 if none */
    int32_t tag;             /* tag of a point-to-point call; DDLT_NA32 if none */
    int64_t t0;              /* enter: ddlt_now() (TSC ticks on x86, else CLOCK_REALTIME ns) */
    volatile int64_t t1;     /* exit, same clock; 0 while the call is in progress */
    int64_t bytes;           /* payload bytes; -1 if unknown (MPI_Sendrecv: sent; its receive half's: received) */
    int64_t comm;            /* communicator handle; DDLT_NA64 if none */
    int64_t request;         /* request handle (made by I-calls, completed by Wait/Test); DDLT_NA64 if none */
    int64_t aux;             /* number of requests of Waitall/Waitsome/Testall/..., message handle of Imrecv,
                                status bytes of Wait (of a Test that completed; -1 if unknown) and of a
                                ddltrace_request_done record; DDLT_NA64 if none */
} ddlt_rec;

extern int ddlt_on;

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
void ddlt_received(const MPI_Status *status, MPI_Datatype type, MPI_Comm comm, int64_t t1);
int ddlt_comm_size(MPI_Comm comm);
int ddlt_comm_rank(MPI_Comm comm);
void ddlt_after_init(int64_t t0, int64_t t1, uint16_t fn, int ret);
void ddlt_before_finalize(void);
void ddlt_after_finalize(ddlt_rec *r, int ret);

#define DDLT_H(x) ((int64_t)(intptr_t)(x))

#endif
