//! A pushdown batch split into its send and its answers, so a caller holding several
//! [`RemoteKv`]s (one per shard of a sharded keyspace) puts every batch in flight before it
//! waits for the first answer.

use storefn_wire::{ClientError, Request, StatusCode};

use super::{lookup_scratch, xrp_req, RemoteKv, RemoteKvError, RemotePath, VALUE_BYTES};
use crate::store::Step;

type Value = Option<[u8; VALUE_BYTES]>;

/// A pushdown batch sent by [`RemoteKv::push_send`] and not yet answered.
#[derive(Debug)]
#[must_use = "a sent batch is answered by RemoteKv::push_finish"]
pub struct PushSent {
    /// The request id of the first lookup sent; the others follow it.
    first: u64,
    /// (key index, the node offset its chain starts at), in id order.
    sent: Vec<(usize, u64)>,
    /// Keys answered the slow way after the replies (all levels cached, a reply from another
    /// version, the program's `err` flag, an evicted program).
    redo: Vec<usize>,
    keys: usize,
}

impl RemoteKv {
    /// Sends the pushdown lookups of `keys` in one frame without waiting for the answers.
    ///
    /// # Errors
    /// Connection errors; a corrupt cached level.
    pub fn push_send(&mut self, keys: &[u64]) -> Result<PushSent, RemoteKvError> {
        let hash = self.prog()?;
        let mut p = PushSent {
            first: 0,
            sent: Vec::with_capacity(keys.len()),
            redo: Vec::new(),
            keys: keys.len(),
        };
        for (i, &k) in keys.iter().enumerate() {
            match self.start(k)? {
                Step::Node { offset, .. } => p.sent.push((i, offset)),
                _ => p.redo.push(i),
            }
        }
        if !p.sent.is_empty() {
            let scratch: Vec<_> = p.sent.iter().map(|&(i, _)| lookup_scratch(keys[i])).collect();
            let len = self.node_len();
            let reqs: Vec<Request<'_>> = p
                .sent
                .iter()
                .zip(&scratch)
                .map(|(&(_, off), s)| xrp_req(&self.db, len, off, &hash, s))
                .collect();
            p.first = self.client.send(&reqs)?;
            self.stats.round_trips += 1;
        }
        Ok(p)
    }

    /// Waits for the answers of `p` (sent for `keys`) and finishes the lookups that need more.
    ///
    /// # Errors
    /// Connection and protocol errors (a reply to a request not sent, a missing reply); a
    /// refusal (the reply's status, e.g. a fencing refusal); a corrupt tree.
    pub fn push_finish(&mut self, keys: &[u64], p: PushSent) -> Result<Vec<Value>, RemoteKvError> {
        assert_eq!(keys.len(), p.keys, "push_finish gets the keys push_send got");
        self.stats.lookups += keys.len() as u64;
        let mut out = vec![None; keys.len()];
        let mut answered = vec![false; p.sent.len()];
        let (mut left, mut redo) = (p.sent.len(), p.redo);
        let mut got = Vec::new();
        // Every frame answers at least one request, so as many frames as requests at most.
        for _ in 0..p.sent.len() {
            if left == 0 {
                break;
            }
            got.clear();
            self.client.recv(|id, r| got.push((id, r)))?;
            for (id, r) in got.drain(..) {
                let k = id.checked_sub(p.first).map_or(usize::MAX, |k| k as usize);
                if k >= answered.len() || answered[k] {
                    self.client.disconnect();
                    return Err(ClientError::UnknownId(id).into());
                }
                answered[k] = true;
                left -= 1;
                let i = p.sent[k].0;
                if r.status != 0 && r.status != StatusCode::UnknownProg as u16 {
                    // A refusal: the other replies of the frame are not read, so the
                    // connection's ids would be out of step.
                    self.client.disconnect();
                    return Err(r.ok("XRP").expect_err("a status").into());
                }
                if r.status != 0 || r.version != self.version {
                    redo.push(i);
                    continue;
                }
                self.stats.hops += u64::from(r.hops);
                match self.parse_xrp(&r.data)? {
                    Some(v) => out[i] = v,
                    None => {
                        self.stats.fallbacks += 1;
                        redo.push(i);
                    }
                }
            }
        }
        if left > 0 {
            self.client.disconnect();
            return Err(ClientError::Io(std::io::Error::other(format!(
                "{left} pushdown replies missing"
            )))
            .into());
        }
        if !redo.is_empty() {
            let ks: Vec<u64> = redo.iter().map(|&i| keys[i]).collect();
            let vals = self.get_many(&ks, RemotePath::Pushdown)?;
            self.stats.lookups -= ks.len() as u64; // counted above already
            for (i, v) in redo.into_iter().zip(vals) {
                out[i] = v;
            }
        }
        Ok(out)
    }
}
