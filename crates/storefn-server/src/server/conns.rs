//! Connection counts shared by the server threads: in all, per peer address, and before
//! authentication, checked at accept against [`ConnLimits`].

use std::collections::HashMap;
use std::net::IpAddr;

use super::ConnLimits;

#[derive(Debug, Default)]
pub(crate) struct ConnCounts {
    total: usize,
    preauth: usize,
    /// (connections, of which not authenticated) per peer address; no entry at zero.
    peers: HashMap<IpAddr, (usize, usize)>,
}

/// Why a connection was refused at accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Total,
    Peer,
    Preauth,
    PreauthPeer,
}

impl Refused {
    pub(crate) fn why(self) -> &'static str {
        match self {
            Refused::Total => "the server's connection limit",
            Refused::Peer => "this address's connection limit",
            Refused::Preauth => "the limit of connections not yet authenticated",
            Refused::PreauthPeer => "this address's limit of connections not yet authenticated",
        }
    }
}

impl ConnCounts {
    /// Counts a new (unauthenticated) connection from `peer`, or says which limit refuses it.
    pub(crate) fn admit(&mut self, peer: IpAddr, l: &ConnLimits) -> Result<(), Refused> {
        let (n, pre) = self.peers.get(&peer).copied().unwrap_or((0, 0));
        if self.total >= l.total {
            return Err(Refused::Total);
        }
        if n >= l.per_peer {
            return Err(Refused::Peer);
        }
        if self.preauth >= l.preauth {
            return Err(Refused::Preauth);
        }
        if pre >= l.preauth_per_peer {
            return Err(Refused::PreauthPeer);
        }
        self.total += 1;
        self.preauth += 1;
        self.peers.insert(peer, (n + 1, pre + 1));
        Ok(())
    }

    /// Connections open, and of them not yet authenticated (the metrics' gauges).
    pub(crate) fn totals(&self) -> (usize, usize) {
        (self.total, self.preauth)
    }

    /// A connection from `peer` authenticated.
    pub(crate) fn authenticated(&mut self, peer: IpAddr) {
        self.preauth -= 1;
        let e = self.peers.get_mut(&peer).expect("counted at accept");
        e.1 -= 1;
    }

    /// A connection from `peer` closed (`authed`: it had authenticated).
    pub(crate) fn closed(&mut self, peer: IpAddr, authed: bool) {
        self.total -= 1;
        let e = self.peers.get_mut(&peer).expect("counted at accept");
        e.0 -= 1;
        if !authed {
            self.preauth -= 1;
            e.1 -= 1;
        }
        if e.0 == 0 {
            self.peers.remove(&peer);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_apply_per_peer_and_before_authentication() {
        let l = ConnLimits {
            total: 6,
            per_thread: 6,
            per_peer: 4,
            preauth: 5,
            preauth_per_peer: 2,
            ..ConnLimits::default()
        };
        let (a, b): (IpAddr, IpAddr) = ("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap());
        let mut c = ConnCounts::default();
        c.admit(a, &l).unwrap();
        c.admit(a, &l).unwrap();
        assert_eq!(c.admit(a, &l), Err(Refused::PreauthPeer));
        c.authenticated(a);
        c.authenticated(a);
        c.admit(a, &l).unwrap();
        c.admit(a, &l).unwrap();
        assert_eq!(c.admit(a, &l), Err(Refused::Peer));
        c.admit(b, &l).unwrap();
        c.admit(b, &l).unwrap();
        assert_eq!(c.admit(b, &l), Err(Refused::Total));
        c.closed(a, true);
        c.closed(a, false);
        assert_eq!(c.admit(b, &l), Err(Refused::PreauthPeer));
        c.authenticated(b);
        c.admit(b, &l).unwrap();
        c.closed(a, true);
        c.closed(a, false);
        assert!(!c.peers.contains_key(&a), "a peer with no connection leaves the table");
    }
}
