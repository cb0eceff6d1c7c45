//! Shard copies over the wire: a shard's file and sidecar are written to the target server
//! with WRITE requests (each durable before it is answered), read back and checked against
//! the shard record's CRC-32s, and only then published in the placement (one transaction that
//! adds the replica and moves the shard's version). A replica is never listed before its copy
//! is complete; a copy that fails leaves the placement as it was.

use std::time::Instant;

use storefn_wire::{Client, ClientConfig, Request};

use crate::etcd::{Etcd, Guard, Op};
use crate::layout::{decode, encode, ready_key, shard_key, NodeRecord, ShardRecord};
use crate::limits::{COPY_CHUNK_BYTES, READY_WAIT, READ_CHUNK_BYTES, SERVER_TIMEOUT};
use crate::ClusterError;

/// A shard's bytes: the tree file and its sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardBytes {
    pub file: Vec<u8>,
    pub meta: Vec<u8>,
}

/// The sidecar path of a shard file.
#[must_use]
pub fn meta_of(file: &str) -> String {
    format!("{file}{}", storefn_kv::layout::tree::META_SUFFIX)
}

/// Who the cluster's copiers and clients are to servers started with a token file: a tenant
/// and its secret, or nobody (servers without tokens).
#[derive(Clone, Default)]
pub struct Creds(Option<(String, Vec<u8>)>);

impl std::fmt::Debug for Creds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_tuple("Creds").field(&self.0.as_ref().map(|t| &t.0)).finish()
    }
}

impl Creds {
    /// Tenant `tenant` holding `secret`.
    #[must_use]
    pub fn token(tenant: impl Into<String>, secret: impl Into<Vec<u8>>) -> Creds {
        Creds(Some((tenant.into(), secret.into())))
    }

    /// The first token of a token file (`TENANT SECRET ...` lines, as `storefn serve
    /// --token-file` reads them): a server copies with its own first token.
    ///
    /// # Errors
    /// The file does not read or holds no valid token.
    pub fn from_token_file(path: &std::path::Path) -> Result<Creds, ClusterError> {
        let t = storefn_server::load_tokens(path)
            .map_err(|e| ClusterError::Invalid(e.to_string()))?
            .into_iter()
            .next()
            .ok_or_else(|| ClusterError::Invalid(format!("{}: no token", path.display())))?;
        Ok(Creds::token(t.tenant, t.secret))
    }

    fn config(&self) -> ClientConfig {
        let base = match &self.0 {
            Some((t, s)) => ClientConfig::with_secret(t.clone(), s.clone()),
            None => ClientConfig::default(),
        };
        ClientConfig { timeout: SERVER_TIMEOUT, ..base }
    }
}

/// A client of the cluster's servers: short timeouts, the default tenant.
///
/// # Errors
/// Connect failures.
pub fn connect(addr: &str) -> Result<Client, ClusterError> {
    connect_as(addr, &Creds::default())
}

/// A client of the cluster's servers as `creds`.
///
/// # Errors
/// Connect (and authentication) failures.
pub fn connect_as(addr: &str, creds: &Creds) -> Result<Client, ClusterError> {
    Client::connect(addr, creds.config()).map_err(|e| ClusterError::server(addr, "connect", &e))
}

/// Reads `len` bytes of `path` from a server in READ-sized pieces (pipelined).
///
/// # Errors
/// Connection errors, a non-OK status, a short file.
pub fn read_all(c: &mut Client, path: &str, len: u64) -> Result<Vec<u8>, ClusterError> {
    let addr = c.addr().to_string();
    let chunk = u64::from(READ_CHUNK_BYTES);
    let reqs: Vec<Request<'_>> = (0..len.div_ceil(chunk))
        .map(|i| Request::Read {
            path: path.as_bytes(),
            offset: i * chunk,
            len: (len - i * chunk).min(chunk) as u32,
        })
        .collect();
    let mut out = Vec::with_capacity(usize::try_from(len).unwrap_or(0));
    for batch in reqs.chunks(256) {
        for r in c.call(batch).map_err(|e| ClusterError::server(&addr, path, &e))? {
            let r = r.ok("READ").map_err(|e| ClusterError::server(&addr, path, &e))?;
            out.extend_from_slice(&r.data);
        }
    }
    if out.len() as u64 != len {
        return Err(ClusterError::CopyFailed {
            what: format!("{addr}:{path}"),
            why: format!("read {} bytes, expected {len}", out.len()),
        });
    }
    Ok(out)
}

fn write_all(c: &mut Client, path: &str, data: &[u8]) -> Result<(), ClusterError> {
    let addr = c.addr().to_string();
    let reqs: Vec<Request<'_>> = data
        .chunks(COPY_CHUNK_BYTES)
        .enumerate()
        .map(|(i, d)| Request::Write {
            path: path.as_bytes(),
            offset: (i * COPY_CHUNK_BYTES) as u64,
            data: d,
        })
        .collect();
    for batch in reqs.chunks(8) {
        for r in c.call(batch).map_err(|e| ClusterError::server(&addr, path, &e))? {
            r.ok("WRITE").map_err(|e| ClusterError::server(&addr, path, &e))?;
        }
    }
    Ok(())
}

/// Reads shard `s` from one of its servers (`addr`), checked against the record's CRC-32s.
///
/// # Errors
/// As [`read_all`]; `CopyFailed` on a checksum mismatch.
pub fn fetch(addr: &str, s: &ShardRecord, creds: &Creds) -> Result<ShardBytes, ClusterError> {
    let mut c = connect_as(addr, creds)?;
    let file = read_all(&mut c, &s.file, s.bytes)?;
    let meta = read_all(&mut c, &meta_of(&s.file), s.meta_bytes)?;
    verify(addr, s, &file, &meta)?;
    Ok(ShardBytes { file, meta })
}

fn verify(addr: &str, s: &ShardRecord, file: &[u8], meta: &[u8]) -> Result<(), ClusterError> {
    let (a, b) = (crc32fast::hash(file), crc32fast::hash(meta));
    if a != s.crc32 || b != s.meta_crc32 {
        return Err(ClusterError::CopyFailed {
            what: format!("{addr}:{}", s.file),
            why: format!(
                "checksums {a:08x}/{b:08x}, the record says {:08x}/{:08x}",
                s.crc32, s.meta_crc32
            ),
        });
    }
    Ok(())
}

/// Changes shard record `key` with `f` under a compare-and-swap on its revision (retried on
/// a race, a bounded number of times). `f` returns `false` to leave the record alone.
///
/// # Errors
/// etcd unreachable; `Conflict` after too many races; the record vanished.
pub fn update_shard(
    etcd: &Etcd,
    key: &str,
    extra: &[Op],
    mut f: impl FnMut(&mut ShardRecord) -> bool,
) -> Result<ShardRecord, ClusterError> {
    for _ in 0..32 {
        let kv = etcd.get(key)?.ok_or_else(|| ClusterError::BadRecord {
            key: key.to_string(),
            why: "vanished".into(),
        })?;
        let mut s: ShardRecord = decode(key, &kv.value)?;
        if !f(&mut s) {
            return Ok(s);
        }
        let mut ops = vec![Op::Put { key: key.to_string(), value: encode(&s), lease: None }];
        ops.extend_from_slice(extra);
        let guard = Guard { key: key.to_string(), mod_revision: kv.mod_revision };
        if etcd.txn(&[guard], &ops)? {
            return Ok(s);
        }
    }
    Err(ClusterError::Conflict(key.to_string()))
}

/// Copies shard `id` of collection `c` to `target` and publishes it there: pending, wait for
/// the target's agent to prepare the file, WRITE, read back and check, publish.
///
/// # Errors
/// Any step's failure; the target is then dropped from `pending` (best effort).
pub fn copy_to(
    etcd: &Etcd,
    c: &str,
    id: u32,
    target: &NodeRecord,
    bytes: &ShardBytes,
    creds: &Creds,
) -> Result<ShardRecord, ClusterError> {
    let key = shard_key(c, id);
    let s = update_shard(etcd, &key, &[], |s| {
        let add = !s.replicas.contains(&target.id) && !s.pending.contains(&target.id);
        if add {
            s.pending.push(target.id.clone());
        }
        add
    })?;
    if !s.replicas.contains(&target.id) && !s.pending.contains(&target.id) {
        return Err(ClusterError::Conflict(key));
    }
    if s.replicas.contains(&target.id) {
        return Ok(s);
    }
    let res = push(etcd, c, &s, target, bytes, creds);
    let rk = ready_key(c, id, &target.id);
    let done = res.is_ok();
    let publish = update_shard(etcd, &key, &[Op::Delete { key: rk }], |s| {
        s.pending.retain(|p| p != &target.id);
        if done && !s.replicas.contains(&target.id) {
            s.replicas.push(target.id.clone());
            s.version += 1;
        }
        true
    });
    res?;
    publish
}

fn push(
    etcd: &Etcd,
    c: &str,
    s: &ShardRecord,
    target: &NodeRecord,
    bytes: &ShardBytes,
    creds: &Creds,
) -> Result<(), ClusterError> {
    verify("source", s, &bytes.file, &bytes.meta)?;
    let rk = ready_key(c, s.id, &target.id);
    let t0 = Instant::now();
    while etcd.get(&rk)?.is_none() {
        if t0.elapsed() > READY_WAIT {
            return Err(ClusterError::CopyFailed {
                what: format!("{}:{}", target.id, s.file),
                why: format!("the server did not prepare the file within {READY_WAIT:?}"),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let mut cl = connect_as(&target.addr, creds)?;
    // The sidecar last: a reader that finds it finds the whole tree before it.
    write_all(&mut cl, &s.file, &bytes.file)?;
    write_all(&mut cl, &meta_of(&s.file), &bytes.meta)?;
    let file = read_all(&mut cl, &s.file, s.bytes)?;
    let meta = read_all(&mut cl, &meta_of(&s.file), s.meta_bytes)?;
    verify(&target.addr, s, &file, &meta)
}
