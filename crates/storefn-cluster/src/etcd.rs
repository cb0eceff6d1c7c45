//! A blocking face over the async etcd v3 client (`etcd-client`, gRPC): the rest of the crate
//! and the server's threads are synchronous, so each [`Etcd`] owns a small runtime and every
//! call is bounded by [`ETCD_CALL_TIMEOUT`].
//!
//! One member at a time: the connection goes to the first member of the list that answers,
//! and a call that fails moves it to the next one (the gRPC balancer over every endpoint kept
//! sending lease renewals to a killed member long enough for leases to expire).

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, GetOptions, PutOptions, Txn, TxnOp, WatchOptions,
};

use crate::limits::{ETCD_CALL_TIMEOUT, RENEW_TIMEOUT};
use crate::ClusterError;

/// One key's value and its modification revision (the guard of a compare-and-swap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub mod_revision: i64,
}

/// A guard of a transaction: the key's modification revision (0 = the key must not exist).
#[derive(Debug, Clone)]
pub struct Guard {
    pub key: String,
    pub mod_revision: i64,
}

/// One write of a transaction.
#[derive(Debug, Clone)]
pub enum Op {
    Put { key: String, value: Vec<u8>, lease: Option<i64> },
    Delete { key: String },
}

/// A connection to an etcd cluster.
pub struct Etcd {
    rt: tokio::runtime::Runtime,
    conn: Arc<Conn>,
    endpoints: String,
}

/// The member connected to, shared with the watch tasks.
struct Conn {
    urls: Vec<String>,
    /// Index into `urls` of the member `client` talks to; moves on a failure.
    at: AtomicUsize,
    client: Mutex<Client>,
}

fn connect_opts() -> ConnectOptions {
    ConnectOptions::new()
        .with_connect_timeout(ETCD_CALL_TIMEOUT)
        .with_timeout(ETCD_CALL_TIMEOUT)
        .with_keep_alive(Duration::from_secs(1), ETCD_CALL_TIMEOUT)
}

/// The first member from `urls[from]` on (wrapping) that accepts a connection.
async fn connect_from(urls: &[String], from: usize) -> Result<(usize, Client), String> {
    let mut last = String::from("no endpoint");
    for k in 0..urls.len() {
        let i = (from + k) % urls.len();
        // The client connects lazily: a status call proves the member answers.
        let probe = async {
            let mut c = Client::connect([urls[i].clone()], Some(connect_opts())).await?;
            c.status().await?;
            Ok::<_, etcd_client::Error>(c)
        };
        match tokio::time::timeout(ETCD_CALL_TIMEOUT, probe).await {
            Ok(Ok(c)) => return Ok((i, c)),
            Ok(Err(e)) => last = format!("{}: {e}", urls[i]),
            Err(e) => last = format!("{}: {e}", urls[i]),
        }
    }
    Err(last)
}

impl Conn {
    fn client(&self) -> (usize, Client) {
        // Relaxed: `at` only names which member; the client under the lock is what is used.
        let c = self.client.lock().unwrap_or_else(PoisonError::into_inner).clone();
        (self.at.load(Ordering::Relaxed), c)
    }

    /// After a failure on member `seen`: the next member that answers (once per failure:
    /// another caller may have moved already).
    async fn fail_over(&self, seen: usize) {
        if self.urls.len() < 2 || self.at.load(Ordering::Relaxed) != seen {
            return;
        }
        if let Ok((i, c)) = connect_from(&self.urls, seen + 1).await {
            let mut g = self.client.lock().unwrap_or_else(PoisonError::into_inner);
            if self.at.load(Ordering::Relaxed) == seen {
                *g = c;
                self.at.store(i, Ordering::Relaxed);
            }
        }
    }
}

impl std::fmt::Debug for Etcd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Etcd").field("endpoints", &self.endpoints).finish_non_exhaustive()
    }
}

fn err(endpoints: &str, what: &str, e: impl std::fmt::Display) -> ClusterError {
    ClusterError::Etcd {
        endpoints: endpoints.to_string(),
        what: what.to_string(),
        why: e.to_string(),
    }
}

/// `http://`-prefixed endpoints from a comma-separated list (`host:port` or URLs).
#[must_use]
pub fn endpoint_urls(endpoints: &str) -> Vec<String> {
    endpoints
        .split(',')
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(|e| if e.contains("://") { e.to_string() } else { format!("http://{e}") })
        .collect()
}

impl Etcd {
    /// Connects to `endpoints` (comma-separated `host:port`).
    ///
    /// # Errors
    /// No endpoint, the runtime, or no member answering within [`ETCD_CALL_TIMEOUT`].
    pub fn connect(endpoints: &str) -> Result<Etcd, ClusterError> {
        let urls = endpoint_urls(endpoints);
        if urls.is_empty() {
            return Err(err(endpoints, "connect", "no endpoint given"));
        }
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .map_err(|e| err(endpoints, "runtime", e))?;
        let (at, client) =
            rt.block_on(connect_from(&urls, 0)).map_err(|e| err(endpoints, "connect", e))?;
        let conn = Arc::new(Conn { urls, at: AtomicUsize::new(at), client: Mutex::new(client) });
        Ok(Etcd { rt, conn, endpoints: endpoints.to_string() })
    }

    /// The endpoints this connection was made with.
    #[must_use]
    pub fn endpoints(&self) -> &str {
        &self.endpoints
    }

    fn run<T, F: Future<Output = Result<T, etcd_client::Error>>>(
        &self,
        what: &str,
        f: impl FnOnce(Client) -> F,
    ) -> Result<T, ClusterError> {
        let (at, c) = self.conn.client();
        let r = self
            .rt
            .block_on(async { tokio::time::timeout(ETCD_CALL_TIMEOUT, f(c)).await })
            .map_err(|e| err(&self.endpoints, what, e))
            .and_then(|r| r.map_err(|e| err(&self.endpoints, what, e)));
        self.after(at, &r);
        r
    }

    /// Moves to the next member after a failed call (not after an answer that is an error
    /// status of etcd's own, like the election's "no leader").
    fn after<T>(&self, at: usize, r: &Result<T, ClusterError>) {
        if let Err(ClusterError::Etcd { why, .. }) = r {
            if !why.contains("no leader") {
                self.rt.block_on(self.conn.fail_over(at));
            }
        }
    }

    /// Every key under `prefix`, sorted by key.
    ///
    /// # Errors
    /// etcd unreachable or refusing.
    pub fn get_prefix(&self, prefix: &str) -> Result<Vec<Kv>, ClusterError> {
        let p = prefix.to_string();
        let r = self.run("get", |mut c| async move {
            c.get(p, Some(GetOptions::new().with_prefix())).await
        })?;
        Ok(r.kvs()
            .iter()
            .map(|kv| Kv {
                key: String::from_utf8_lossy(kv.key()).into_owned(),
                value: kv.value().to_vec(),
                mod_revision: kv.mod_revision(),
            })
            .collect())
    }

    /// One key, if present.
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn get(&self, key: &str) -> Result<Option<Kv>, ClusterError> {
        let k = key.to_string();
        let r = self.run("get", |mut c| async move { c.get(k, None).await })?;
        Ok(r.kvs().first().map(|kv| Kv {
            key: key.to_string(),
            value: kv.value().to_vec(),
            mod_revision: kv.mod_revision(),
        }))
    }

    /// Puts `key`, bound to `lease` when given (the key vanishes with the lease).
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> Result<(), ClusterError> {
        let (k, v) = (key.to_string(), value.to_vec());
        let opts = lease.map(|l| PutOptions::new().with_lease(l));
        self.run("put", |mut c| async move { c.put(k, v, opts).await }).map(|_| ())
    }

    /// Applies `ops` atomically when every guard holds; `false` when one did not (nothing
    /// was written).
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn txn(&self, guards: &[Guard], ops: &[Op]) -> Result<bool, ClusterError> {
        let cmp: Vec<Compare> = guards
            .iter()
            .map(|g| Compare::mod_revision(g.key.clone(), CompareOp::Equal, g.mod_revision))
            .collect();
        let ops: Vec<TxnOp> = ops
            .iter()
            .map(|o| match o {
                Op::Put { key, value, lease } => TxnOp::put(
                    key.clone(),
                    value.clone(),
                    lease.map(|l| PutOptions::new().with_lease(l)),
                ),
                Op::Delete { key } => TxnOp::delete(key.clone(), None),
            })
            .collect();
        let txn = Txn::new().when(cmp).and_then(ops);
        self.run("txn", |mut c| async move { c.txn(txn).await }).map(|r| r.succeeded())
    }

    /// Grants a lease of `ttl` seconds.
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn lease_grant(&self, ttl: i64) -> Result<i64, ClusterError> {
        self.run("lease grant", |mut c| async move { c.lease_grant(ttl, None).await })
            .map(|r| r.id())
    }

    /// Renews `lease` once; `false` when etcd no longer knows it (it expired).
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn lease_renew(&self, lease: i64) -> Result<bool, ClusterError> {
        let (at, mut c) = self.conn.client();
        let f = async move {
            let (mut keeper, mut stream) = c.lease_keep_alive(lease).await?;
            keeper.keep_alive().await?;
            Ok::<_, etcd_client::Error>(stream.message().await?.is_some_and(|r| r.ttl() > 0))
        };
        let r = self
            .rt
            .block_on(async { tokio::time::timeout(RENEW_TIMEOUT, f).await })
            .map_err(|e| err(&self.endpoints, "lease keepalive", e))
            .and_then(|r| r.map_err(|e| err(&self.endpoints, "lease keepalive", e)));
        self.after(at, &r);
        r
    }

    /// Revokes `lease`: every key bound to it is deleted now.
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn lease_revoke(&self, lease: i64) -> Result<(), ClusterError> {
        self.run("lease revoke", |mut c| async move { c.lease_revoke(lease).await }).map(|_| ())
    }

    /// Campaigns in election `name` with `value` under `lease`; returns once this campaigner
    /// is the leader, or `Ok(false)` after `wait` without winning (campaign again later).
    ///
    /// # Errors
    /// etcd unreachable.
    pub fn campaign(
        &self,
        name: &str,
        value: &str,
        lease: i64,
        wait: Duration,
    ) -> Result<bool, ClusterError> {
        let (n, v) = (name.to_string(), value.to_string());
        let (at, mut c) = self.conn.client();
        match self.rt.block_on(async { tokio::time::timeout(wait, c.campaign(n, v, lease)).await })
        {
            Err(_) => Ok(false),
            Ok(Ok(_)) => Ok(true),
            Ok(Err(e)) => {
                let r = Err(err(&self.endpoints, "campaign", e));
                self.after(at, &r);
                r
            }
        }
    }

    /// The current value of election `name`'s leader, if any.
    ///
    /// # Errors
    /// As [`Etcd::get_prefix`].
    pub fn leader(&self, name: &str) -> Result<Option<String>, ClusterError> {
        let n = name.to_string();
        match self.run("leader", |mut c| async move { c.leader(n).await }) {
            Ok(r) => Ok(r.kv().map(|kv| String::from_utf8_lossy(kv.value()).into_owned())),
            // No leader yet is an error status in etcd's election API.
            Err(ClusterError::Etcd { why, .. }) if why.contains("no leader") => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Watches `prefix` on the runtime: sends `()` on `tx` after every change (and after
    /// the watch is re-established following an error), until `tx`'s receiver is gone.
    pub fn watch_prefix(&self, prefix: &str, tx: Sender<()>) {
        let (p, c) = (prefix.to_string(), Arc::clone(&self.conn));
        self.rt.spawn(watch_loop(c, p, tx));
    }
}

async fn watch_loop(conn: Arc<Conn>, prefix: String, tx: Sender<()>) {
    loop {
        let (at, mut c) = conn.client();
        let opts = WatchOptions::new().with_prefix();
        if let Ok(Ok(mut stream)) =
            tokio::time::timeout(ETCD_CALL_TIMEOUT, c.watch(prefix.clone(), Some(opts))).await
        {
            // Changes that happened while the watch was down: reload once it is back.
            if tx.send(()).is_err() {
                return;
            }
            while let Ok(Some(_)) = stream.message().await {
                if tx.send(()).is_err() {
                    return;
                }
            }
        }
        conn.fail_over(at).await;
        tokio::time::sleep(Duration::from_millis(300)).await;
        if tx.send(()).is_err() {
            return;
        }
    }
}
