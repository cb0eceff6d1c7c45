//! Every bound of the cluster in one place, each with its reason. Bounds that are another
//! crate's (the wire's chunk sizes) are derived from it, never re-typed.

use std::time::Duration;

/// A server's membership lease, seconds: short enough that a dead server's shards are routed
/// around and re-replicated within a few seconds, long enough that a loaded 2-core machine's
/// scheduling hiccups do not expire a live server.
pub const LEASE_TTL_SECS: i64 = 3;
/// How often the lease is renewed: three renewals per TTL, so one lost renewal never expires it.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_millis(1000);
/// A server stops answering for its shards this long after its last renewal etcd acknowledged,
/// before etcd could expire the lease (TTL minus a margin for clock rates and the renewal's
/// own round trip): a partitioned server never serves after the cluster moved on without it.
pub const SELF_FENCE_AFTER: Duration = Duration::from_millis(2500);
/// Every etcd call (connect, get, put, txn) gives up after this, so a dead etcd never hangs a
/// lookup, a command or a server's agent.
pub const ETCD_CALL_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts of one lookup batch on the replicas of its shard (a connection error or a fencing
/// refusal moves it to the next replica): the retry budget. Spaced by [`RETRY_BACKOFF`]
/// doubling up to [`RETRY_BACKOFF_MAX`], they span about 4.6 s: more than a lease TTL, so a
/// batch outlasts the moment every replica of its shard is briefly fenced (etcd restarting).
pub const MAX_ATTEMPTS: u32 = 10;
/// The pause before the second attempt; it doubles with each further one.
pub const RETRY_BACKOFF: Duration = Duration::from_millis(25);
/// The longest pause between two attempts.
pub const RETRY_BACKOFF_MAX: Duration = Duration::from_secs(1);
/// One lease renewal gives up after this (a renewal that cannot reach etcd is retried soon,
/// instead of holding the agent past the next one).
pub const RENEW_TIMEOUT: Duration = Duration::from_millis(800);
/// The pause before retrying a renewal that failed.
pub const RENEW_RETRY: Duration = Duration::from_millis(200);
/// Wall-clock budget of one lookup batch over all its attempts.
pub const RETRY_BUDGET: Duration = Duration::from_secs(8);
/// A replica that failed is tried last for this long.
pub const SUSPECT_FOR: Duration = Duration::from_secs(2);
/// Connect/send/receive timeout of the cluster client's and copier's connections: a dead
/// server costs one attempt this long at most.
pub const SERVER_TIMEOUT: Duration = Duration::from_millis(1500);
/// How long a copier waits for the target's agent to prepare the file (a placement watch
/// event and a file creation away).
pub const READY_WAIT: Duration = Duration::from_secs(15);
/// Bytes per WRITE of a shard copy: the wire's bound.
pub const COPY_CHUNK_BYTES: usize = storefn_wire::limits::MAX_WRITE_BYTES as usize;
/// Bytes per READ of a copy's read-back and of a leader's copy from a surviving replica.
pub const READ_CHUNK_BYTES: u32 = storefn_wire::limits::MAX_READ_BYTES;
/// Shards of one collection: etcd keeps each record in one key, and a placement snapshot is
/// one range read (etcd's default request limit is 1.5 MiB).
pub const MAX_SHARDS: u32 = 1024;
/// Replicas of one shard.
pub const MAX_REPLICAS: u32 = 16;
/// How often the leader re-plans (and a follower re-campaigns after losing etcd).
pub const LEADER_TICK: Duration = Duration::from_millis(500);
/// Bytes of a node id and a collection name (they are etcd key segments and file names).
pub const MAX_NAME_BYTES: usize = 64;
