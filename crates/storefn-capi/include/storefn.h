/*
 * storefn.h: the C API of libstorefn (link with -lstorefn; pkg-config storefn).
 *
 * Generated from crates/storefn-capi by cbindgen; do not edit: the comments below are the
 * reference.
 *
 * Conventions:
 * - Every function returns a storefn_status; STOREFN_STATUS_OK (0) is success.
 *   On failure storefn_last_error() gives this thread's message naming what was wrong.
 * - No failure leaves a handle half-made: an out-pointer is written only on success.
 * - Pointer arguments are borrowed for the call only unless the function says otherwise;
 *   handles (storefn_prog, storefn_engine, storefn_client, storefn_kv) are owned by the
 *   caller from the call that creates them until the matching *_free.
 * - storefn_prog is immutable and may be shared by threads. storefn_engine and storefn_kv are
 *   used only by the thread that created them, storefn_client by one thread at a time:
 *   create one per thread.
 * - A Rust panic never crosses this boundary: it becomes STOREFN_STATUS_PANIC.
 */

#ifndef STOREFN_H
#define STOREFN_H

#include <stddef.h>
#include <stdint.h>

// Most bytes of scratch a chain carries (XRP's 4 KiB); a larger scratch is refused with
// STOREFN_STATUS_SCRATCH_TOO_LARGE.
#define STOREFN_SCRATCH_BYTES 4096

// Bytes of a BPF-KV value.
#define STOREFN_VALUE_BYTES 64

// What a call did. `STOREFN_STATUS_OK` is 0; every other value names a class of failure, and
// `storefn_last_error()` on the same thread says what exactly was wrong.
typedef enum storefn_status {
  // Success.
  STOREFN_STATUS_OK = 0,
  // A bad argument: a NULL pointer where one is required, a length out of range, a
  // string that is not UTF-8, a program of the wrong type for the call.
  STOREFN_STATUS_ARG = 1,
  // The ELF object could not be loaded (not ELF, not BPF, no such section, bad relocation).
  STOREFN_STATUS_LOAD = 2,
  // The verifier refused the program; the message is the verifier's.
  STOREFN_STATUS_VERIFY = 3,
  // The file descriptor is not open (closed, or never was).
  STOREFN_STATUS_BAD_FD = 4,
  // The scratch buffer is larger than the 4096 bytes a chain carries.
  STOREFN_STATUS_SCRATCH_TOO_LARGE = 5,
  // An operating-system error (open, read, write, ring setup); the message names it.
  STOREFN_STATUS_IO = 6,
  // The chain failed: the program faulted or ran past its budget, a request left the file,
  // the hop limit was reached, a read failed.
  STOREFN_STATUS_CHAIN = 7,
  // Every chain slot of the engine is taken (reap first), or its file table is full.
  STOREFN_STATUS_FULL = 8,
  // The server answered with an error status (its name and message are in the last error).
  STOREFN_STATUS_REMOTE = 9,
  // The connection to the server failed or broke (the next call reconnects).
  STOREFN_STATUS_CONN = 10,
  // The KV store could not be opened or read (corrupt node, bad shape).
  STOREFN_STATUS_KV = 11,
  // A bug inside libstorefn (a Rust panic, caught at the boundary). Please report it.
  STOREFN_STATUS_PANIC = 12,
} storefn_status;

// What a program is for: the context it is verified against.
typedef enum storefn_prog_type {
  // XRP's `struct bpf_xrp`: runs on every block a chain reads (`storefn_read_xrp`).
  STOREFN_PROG_TYPE_XRP = 0,
  // λ-IO's `struct context`: runs over a byte range into an output (`storefn_pread_lambda`).
  STOREFN_PROG_TYPE_LAMBDA = 1,
} storefn_prog_type;

// Kinds of pipelined request (`storefn_remote_req.kind`).
typedef enum storefn_req_kind {
  // READ `count` bytes at `offset` into `buf` (`buf_len` >= `count`).
  STOREFN_REQ_KIND_READ = 0,
  // XRP: run `prog`'s chain from `[offset, +count)` on the server; `buf[0..buf_len)` is the
  // scratch, sent and overwritten with the final scratch.
  STOREFN_REQ_KIND_XRP = 1,
  // LAMBDA: run `prog` over `[offset, +count)` on the server; its output goes to
  // `buf[0..buf_len)`.
  STOREFN_REQ_KIND_LAMBDA = 2,
} storefn_req_kind;

// A connection to a storefn server (opaque). Owned by one thread at a time.
typedef struct storefn_client storefn_client;

// An engine (opaque), used only by the thread that created it (create one per thread).
typedef struct storefn_engine storefn_engine;

// A BPF-KV store (opaque), local or remote. Used only by the thread that opened it.
typedef struct storefn_kv storefn_kv;

// A verified program (opaque). Immutable once loaded: it may be shared between threads.
typedef struct storefn_prog storefn_prog;

// How to build an engine. Zero in a field means that field's default
// (`storefn_engine_config_default` fills in the defaults explicitly).
typedef struct storefn_engine_config {
  // io_uring submission-queue entries (default 256, at most 16384); must be >= `buffers`.
  uint32_t ring_depth;
  // Registered block buffers = most block reads in flight (default 256).
  uint32_t buffers;
  // Chain slots = most chains submitted and not yet reaped (default 1024).
  uint32_t chains;
  // Reads one chain may issue, the first included (default 64).
  uint32_t max_hops;
} storefn_engine_config;

// One finished chain, as `storefn_reap` reports it.
typedef struct storefn_completion {
  // The token given to `storefn_submit_xrp`.
  uint64_t token;
  // A `storefn_status` value: STOREFN_STATUS_OK, or why the chain failed (the last error
  // holds the message of the last failed chain of the reap). An int, not the enum, so the
  // caller's array may hold anything before the call.
  int32_t status;
  // Blocks the chain read.
  uint32_t hops;
} storefn_completion;

// One request of `storefn_client_call`. The caller fills the inputs; the call fills
// `status`, `result_len` and `hops`.
typedef struct storefn_remote_req {
  // A `storefn_req_kind` value.
  int32_t kind;
  // File path relative to the server's served directory (NUL-terminated).
  const char *path;
  uint64_t offset;
  uint32_t count;
  // The program (XRP and LAMBDA; ignored for READ; pushed on first use).
  const struct storefn_prog *prog;
  // READ data / XRP scratch (in and out) / LAMBDA output.
  uint8_t *buf;
  size_t buf_len;
  // Out: this request's outcome, a `storefn_status` value (the call returns OK when every
  // reply arrived). An int, not the enum, so the caller may leave it uninitialised.
  int32_t status;
  // Out: bytes written into `buf`.
  size_t result_len;
  // Out: blocks an XRP chain read.
  uint32_t hops;
} storefn_remote_req;

#ifdef __cplusplus
extern "C" {
#endif // __cplusplus

// Fills `*out` with the default engine configuration.
//
// # Safety
// `out` is writable.
enum storefn_status storefn_engine_config_default(struct storefn_engine_config *out);

// Creates an engine: one io_uring ring with its registered buffers and chain slots.
//
// Threads: use an engine only on the thread that created it (its ring and registered
// buffers are that thread's); create one per thread.
// Ownership: `cfg` (NULL: defaults) is read during the call. `*out` receives an engine owned
// by the caller; release it with `storefn_engine_free`.
//
// Errors: STOREFN_STATUS_ARG (a field out of range: the message names it and its bounds),
// STOREFN_STATUS_IO (the kernel refused the ring or the buffer registration).
//
// # Safety
// `cfg` is NULL or readable; `out` is writable.
enum storefn_status storefn_engine_new(const struct storefn_engine_config *cfg,
                                       struct storefn_engine **out);

// Releases an engine: waits for its reads in flight, closes its own references to the files
// (the caller's descriptors stay open). Chains not reaped are dropped (their scratch is not
// written back). NULL is a no-op.
//
// # Safety
// `engine` is NULL or came from `storefn_engine_new` and was not freed before.
void storefn_engine_free(struct storefn_engine *engine);

// Registers the file behind `fd` with the engine now (it is otherwise registered on first
// use) and gives its engine-local number in `*file` (NULL: not wanted), for
// `storefn_read_xrp_file`. The engine keeps its own reference: closing `fd` afterwards does
// not unregister it (call `storefn_engine_forget`).
//
// Errors: STOREFN_STATUS_BAD_FD (not open), STOREFN_STATUS_FULL (64 files registered),
// STOREFN_STATUS_IO (open, O_DIRECT refused, probe read).
//
// # Safety
// `engine` is a live engine; `file` NULL or writable.
enum storefn_status storefn_engine_register(struct storefn_engine *engine,
                                            int32_t fd,
                                            uint32_t *file);

// Drops the engine's registration of `fd` (its reference to the file is closed).
//
// Errors: STOREFN_STATUS_ARG (not registered), STOREFN_STATUS_FULL (chains in flight).
//
// # Safety
// `engine` is a live engine.
enum storefn_status storefn_engine_forget(struct storefn_engine *engine,
                                          int32_t fd);

// XRP's `read_xrp(fd, buf, count, offset, prog, scratch)`: reads `count` bytes at `offset`
// of the file behind `fd`, runs `prog` on the block, follows the reads it asks for
// (`next_addr[]`/`size[]`) until it sets `done`, and returns. The chain's scratch starts as
// `scratch[0..scratch_len)` (the rest of its 4096 bytes zero) and is copied back into
// `scratch` at the end: results come back there.
//
// `fd` is checked on every call (fstat): a closed descriptor fails; a number that now names
// another file is registered anew. `prog` must be an XRP program.
//
// Ownership: every pointer is borrowed for the call only. `buf` (NULL, or `count` writable
// bytes) receives the last block the chain read (its first `count` bytes). `scratch` (NULL
// only with `scratch_len` 0) is read and written. `hops` (NULL: not wanted) receives the
// blocks read.
//
// Errors: STOREFN_STATUS_BAD_FD, STOREFN_STATUS_SCRATCH_TOO_LARGE (over 4096 bytes),
// STOREFN_STATUS_CHAIN (program fault, budget, a request outside the file, hop limit; the
// message says which hop and offset), STOREFN_STATUS_IO, STOREFN_STATUS_ARG (wrong program
// type, NULL), STOREFN_STATUS_FULL (batched chains are in flight on this engine).
//
// # Safety
// `engine` and `prog` are live handles; the buffers are as stated above.
enum storefn_status storefn_read_xrp(struct storefn_engine *engine,
                                     int32_t fd,
                                     uint8_t *buf,
                                     size_t count,
                                     uint64_t offset,
                                     const struct storefn_prog *prog,
                                     uint8_t *scratch,
                                     size_t scratch_len,
                                     uint32_t *hops);

// `storefn_read_xrp` on a file registered with `storefn_engine_register` (its `*file`),
// without the per-call descriptor check: the engine reads through its own reference.
//
// # Safety
// As `storefn_read_xrp`.
enum storefn_status storefn_read_xrp_file(struct storefn_engine *engine,
                                          uint32_t file,
                                          uint8_t *buf,
                                          size_t count,
                                          uint64_t offset,
                                          const struct storefn_prog *prog,
                                          uint8_t *scratch,
                                          size_t scratch_len,
                                          uint32_t *hops);

// Submits one chain without waiting (the batched form of `storefn_read_xrp`): `count`
// bytes at `offset` of the file behind `fd`, then `prog`'s reads. Reap it with
// `storefn_reap`, which reports `token`. Chains of different programs may be in flight
// together.
//
// Ownership: `scratch` (NULL only with `scratch_len` 0) is read now, and the chain's final
// scratch is written back into it when the chain is reaped: it must stay valid, and the
// caller must not use it, until `storefn_reap` reports `token` (or the engine is freed).
//
// Errors: as `storefn_read_xrp`; STOREFN_STATUS_FULL when every chain slot is taken.
//
// # Safety
// `engine` and `prog` are live handles; `scratch` as stated above.
enum storefn_status storefn_submit_xrp(struct storefn_engine *engine,
                                       int32_t fd,
                                       size_t count,
                                       uint64_t offset,
                                       const struct storefn_prog *prog,
                                       uint8_t *scratch,
                                       size_t scratch_len,
                                       uint64_t token);

// Reaps finished chains into `out[0..cap)`, blocking until at least `min` were reported or
// none is in flight (`min` 0: never blocks). `*n` receives how many entries were written.
// A failed chain has a non-OK `status` (the last error holds the last failure's message);
// the call itself still returns STOREFN_STATUS_OK.
//
// Ownership: `out` (NULL only with `cap` 0) and `n` are written during the call.
//
// # Safety
// `engine` is a live engine; `out` holds `cap` writable entries; `n` is writable.
enum storefn_status storefn_reap(struct storefn_engine *engine,
                                 size_t min,
                                 struct storefn_completion *out,
                                 size_t cap,
                                 size_t *n);

// Chains submitted and not yet reported by `storefn_reap`, into `*n`.
//
// # Safety
// `engine` is a live engine; `n` writable.
enum storefn_status storefn_in_flight(const struct storefn_engine *engine,
                                      size_t *n);

// λ-IO's `pread_λ(fd, buf, count, off, λ)`: reads `count` bytes at `offset` of the file
// behind `fd` (through the engine's ring, O_DIRECT if `fd` is), runs the λ program `prog`
// once over them into `out[0..out_cap)`, and stores the output bytes (the program's return
// value, checked against `out_cap`) in `*out_len`.
//
// Ownership: `out` (NULL only with `out_cap` 0) and `out_len` are written during the call.
//
// Errors: STOREFN_STATUS_BAD_FD, STOREFN_STATUS_ARG (range outside the file or over 64 MiB,
// wrong program type), STOREFN_STATUS_CHAIN (program fault, output over `out_cap`),
// STOREFN_STATUS_IO.
//
// # Safety
// `engine` and `prog` are live handles; the buffers as stated above.
enum storefn_status storefn_pread_lambda(struct storefn_engine *engine,
                                         int32_t fd,
                                         uint8_t *out,
                                         size_t out_cap,
                                         size_t count,
                                         uint64_t offset,
                                         const struct storefn_prog *prog,
                                         size_t *out_len);

// λ-IO's `pwrite_λ`: runs the λ program `prog` over `input[0..input_len)` into
// `staging[0..staging_cap)`, writes its output at `offset` through `fd` and makes it durable
// (fdatasync) before returning; `*written` receives the bytes written.
//
// Ownership: `input` is read and `staging` written during the call only (NULL only with a
// zero length); `fd` stays the caller's.
//
// Errors: STOREFN_STATUS_BAD_FD, STOREFN_STATUS_CHAIN (fault, output over `staging_cap`),
// STOREFN_STATUS_IO (write or sync; e.g. `fd` not open for writing), STOREFN_STATUS_ARG.
//
// # Safety
// `engine` and `prog` are live handles; the buffers as stated above.
enum storefn_status storefn_pwrite_lambda(struct storefn_engine *engine,
                                          int32_t fd,
                                          const uint8_t *input,
                                          size_t input_len,
                                          uint64_t offset,
                                          const struct storefn_prog *prog,
                                          uint8_t *staging,
                                          size_t staging_cap,
                                          size_t *written);

// Opens the BPF-KV store `db` (its tree file; the log beside it is read too) for lookups on
// this machine, through XRP chains on an engine of its own. `cache_levels` top levels are
// kept in memory. Read-only: nothing is written, locked against writers or repaired.
//
// Ownership: `db` is read during the call; `*out` receives a store owned by the caller,
// released with `storefn_kv_free`. Threads: use it only on the thread that opened it (a
// local store drives an io_uring engine of that thread); open one per thread.
//
// Errors: STOREFN_STATUS_KV (missing, damaged or not a BPF-KV store; the message names the
// file).
//
// # Safety
// `db` NUL-terminated; `out` writable.
enum storefn_status storefn_kv_open(const char *db,
                                    uint32_t cache_levels,
                                    struct storefn_kv **out);

// Opens the BPF-KV store `db` (relative to the server's served directory) on the server at
// `addr`, authenticating with `token_file` (NULL: none); lookups are pushed down (one XRP
// request per lookup, a multiget's in one frame).
//
// Ownership: as `storefn_kv_open`.
//
// Errors: STOREFN_STATUS_CONN, STOREFN_STATUS_REMOTE, STOREFN_STATUS_KV, STOREFN_STATUS_ARG.
//
// # Safety
// `addr`, `db` NUL-terminated; `token_file` NULL or NUL-terminated; `out` writable.
enum storefn_status storefn_kv_open_remote(const char *addr,
                                           const char *token_file,
                                           const char *db,
                                           uint32_t cache_levels,
                                           struct storefn_kv **out);

// BPF-KV's `get`: looks `key` up; `*found` receives 1 and `value[0..64)` the value (a
// NUL-terminated decimal string in a store `storefn kv create` built), or 0 (value
// untouched) for a miss.
//
// Ownership: `value` (64 writable bytes) and `found` are written during the call.
//
// Errors: STOREFN_STATUS_KV (damaged node), STOREFN_STATUS_IO, STOREFN_STATUS_CONN, ...
//
// # Safety
// `kv` a live store; `value` 64 writable bytes; `found` writable.
enum storefn_status storefn_kv_get(struct storefn_kv *kv,
                                   uint64_t key,
                                   uint8_t *value,
                                   int32_t *found);

// BPF-KV's multiget: looks `keys[0..n)` up together (chains in flight together locally, one
// frame remotely); for key i, `found[i]` is 1 and `values[64*i .. 64*i+64)` its value, or
// `found[i]` is 0.
//
// Ownership: `keys` is read and `values` (64*n bytes), `found` (n bytes) written during the
// call (NULL only with n 0).
//
// # Safety
// `kv` a live store; the arrays as stated above.
enum storefn_status storefn_kv_multiget(struct storefn_kv *kv,
                                        const uint64_t *keys,
                                        size_t n,
                                        uint8_t *values,
                                        uint8_t *found);

// Releases a store (and its engine or connection). NULL is a no-op.
//
// # Safety
// `kv` is NULL or came from `storefn_kv_open*` and was not freed before.
void storefn_kv_free(struct storefn_kv *kv);

// Loads the program `section` (NULL: the object's only program) of the BPF ELF object
// `elf[0..len)` as a program of type `prog_type` (a `storefn_prog_type`) and verifies it.
//
// Ownership: `elf` and `section` are borrowed for the call only (the bytes are copied). On
// success `*out` receives a new program owned by the caller: release it with
// `storefn_prog_free`. On failure `*out` is untouched.
//
// Errors: STOREFN_STATUS_LOAD (not an ELF BPF object, no such section, bad relocation),
// STOREFN_STATUS_VERIFY (the verifier's message names the instruction), STOREFN_STATUS_ARG.
//
// # Safety
// `elf` points at `len` readable bytes; `section` is NULL or a NUL-terminated string; `out`
// is writable.
enum storefn_status storefn_prog_load(const uint8_t *elf,
                                      size_t len,
                                      const char *section,
                                      int32_t prog_type,
                                      struct storefn_prog **out);

// `storefn_prog_load` on the contents of the file at `path` (a clang `-target bpf` object).
//
// Ownership: as `storefn_prog_load`; `path` is borrowed for the call.
//
// Errors: STOREFN_STATUS_IO (the file cannot be read; the message names it), and as
// `storefn_prog_load` (messages prefixed with the path).
//
// # Safety
// `path` is a NUL-terminated string; `section` NULL or one; `out` writable.
enum storefn_status storefn_prog_load_path(const char *path,
                                           const char *section,
                                           int32_t prog_type,
                                           struct storefn_prog **out);

// The program's type (`STOREFN_PROG_TYPE_XRP` or `STOREFN_PROG_TYPE_LAMBDA`) into `*out`.
//
// # Safety
// `prog` is NULL or a live program; `out` writable.
enum storefn_status storefn_prog_get_type(const struct storefn_prog *prog,
                                          enum storefn_prog_type *out);

// Instructions of the verified program (after linking subprograms) into `*out`.
//
// # Safety
// `prog` is NULL or a live program; `out` writable.
enum storefn_status storefn_prog_insns(const struct storefn_prog *prog,
                                       size_t *out);

// Releases a program. NULL is a no-op. Engines and clients that ran it keep their own
// prepared copy, so it may be freed while they live; the pointer is invalid afterwards.
//
// # Safety
// `prog` is NULL or came from `storefn_prog_load*` and was not freed before.
void storefn_prog_free(struct storefn_prog *prog);

// Connects to a storefn server at `addr` ("HOST:PORT"), authenticating with the first
// `TENANT SECRET` line of `token_file` (NULL: no authentication). `timeout_ms` bounds
// connect, send and receive (0: 10 s). A connection that breaks is re-made on the next call.
//
// Threads: a client belongs to one thread at a time.
// Ownership: `addr` and `token_file` are read during the call. `*out` receives a client
// owned by the caller; release it with `storefn_client_free`.
//
// Errors: STOREFN_STATUS_CONN (connect, HELLO or AUTH failed), STOREFN_STATUS_ARG (bad token
// file).
//
// # Safety
// `addr` is a NUL-terminated string, `token_file` NULL or one; `out` writable.
enum storefn_status storefn_client_connect(const char *addr,
                                           const char *token_file,
                                           uint32_t timeout_ms,
                                           struct storefn_client **out);

// Closes the connection and releases the client. NULL is a no-op.
//
// # Safety
// `client` is NULL or came from `storefn_client_connect` and was not freed before.
void storefn_client_free(struct storefn_client *client);

// Pushes `prog` to the server (LOAD_PROG: the server verifies it again). Calls that run a
// program push it themselves on first use; this reports a refusal early.
//
// Errors: STOREFN_STATUS_VERIFY (the server's verifier refused it: its message),
// STOREFN_STATUS_REMOTE, STOREFN_STATUS_CONN.
//
// # Safety
// `client` and `prog` are live handles.
enum storefn_status storefn_client_push(struct storefn_client *client,
                                        const struct storefn_prog *prog);

// Pipelined calls: sends `reqs[0..n)` in one frame, waits for every reply and fills each
// request's `status`, `result_len` and `hops` (and its `buf`). Returns OK when every reply
// arrived, whatever each request's own status.
//
// Ownership: `reqs` and everything its entries point at are borrowed for the call only.
//
// Errors: STOREFN_STATUS_CONN (no reply: the connection failed; the requests' statuses are
// not set), STOREFN_STATUS_ARG (a bad request; nothing was sent), STOREFN_STATUS_VERIFY.
//
// # Safety
// `client` is a live client; `reqs` holds `n` entries whose pointers are valid as
// `storefn_remote_req` describes.
enum storefn_status storefn_client_call(struct storefn_client *client,
                                        struct storefn_remote_req *reqs,
                                        size_t n);

// XRP pushed down: the server reads `count` bytes at `offset` of `path` (relative to its
// served directory), runs `prog`'s chain next to the data and returns the final scratch into
// `scratch[0..scratch_len)` (sent as the chain's initial scratch). `hops` (NULL: not wanted)
// receives the blocks the server read. One round trip per call.
//
// Errors: STOREFN_STATUS_REMOTE (the server's status and message: a fault, a path outside
// the served directory), STOREFN_STATUS_CONN, STOREFN_STATUS_SCRATCH_TOO_LARGE,
// STOREFN_STATUS_VERIFY.
//
// # Safety
// `client`, `prog` live handles; `path` NUL-terminated; `scratch` holds `scratch_len`
// bytes (NULL only with 0); `hops` NULL or writable.
enum storefn_status storefn_client_read_xrp(struct storefn_client *client,
                                            const char *path,
                                            uint32_t count,
                                            uint64_t offset,
                                            const struct storefn_prog *prog,
                                            uint8_t *scratch,
                                            size_t scratch_len,
                                            uint32_t *hops);

// LAMBDA on the server: `prog` runs over `[offset, +count)` of `path` there and only its
// output crosses the network, into `out[0..out_cap)`; `*out_len` receives its length.
//
// Errors: as `storefn_client_read_xrp`.
//
// # Safety
// `client`, `prog` live handles; `path` NUL-terminated; `out` holds `out_cap` bytes (NULL
// only with 0); `out_len` writable.
enum storefn_status storefn_client_lambda(struct storefn_client *client,
                                          const char *path,
                                          uint32_t count,
                                          uint64_t offset,
                                          const struct storefn_prog *prog,
                                          uint8_t *out,
                                          size_t out_cap,
                                          size_t *out_len);

// READ: `count` bytes at `offset` of `path` on the server into `buf` (which holds
// `count` bytes); `*got` receives the bytes read (fewer at the end of the file).
//
// Errors: STOREFN_STATUS_REMOTE, STOREFN_STATUS_CONN.
//
// # Safety
// `client` live; `path` NUL-terminated; `buf` holds `count` writable bytes; `got` writable.
enum storefn_status storefn_client_read(struct storefn_client *client,
                                        const char *path,
                                        uint8_t *buf,
                                        uint32_t count,
                                        uint64_t offset,
                                        size_t *got);

// The message of the last failed call made on the calling thread, as a NUL-terminated UTF-8
// string; "" before any failure.
//
// Ownership: the string belongs to libstorefn. It stays valid and unchanged until the next
// failing storefn call on the same thread; copy it to keep it longer. Never free it.
const char *storefn_last_error(void);

// The enumerator's name for a status value (`"STOREFN_STATUS_VERIFY"`, ...), or
// `"STOREFN_STATUS_UNKNOWN"` for a value that is none; never NULL, static storage.
const char *storefn_status_name(int32_t status);

#ifdef __cplusplus
}  // extern "C"
#endif  // __cplusplus

#endif  /* STOREFN_H */
