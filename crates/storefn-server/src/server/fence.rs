//! Fencing of a cluster's shard files, as seen from the server: the server knows nothing of
//! the cluster (etcd, placement, leases live above this crate, in storefn-cluster); a request
//! may name the placement version its client routed it by (the wire's fenced flag), and a
//! [`Fence`] plug-in decides whether this server may answer it. A refusal is answered
//! `STALE_PLACEMENT` and the request is not run.

use storefn_wire::{Request, StatusCode};

/// The server's side of a cluster's fencing. Implemented by storefn-cluster; shared by every
/// server thread, so [`Fence::admit`] must be cheap and never block on the network.
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// May a request for `path` (relative to the served directory) routed by placement
    /// version `fence` (`None`: the client named none) be answered here? `Err` carries the
    /// refusal's message (which shard, which versions).
    ///
    /// # Errors
    /// The refusal, answered `STALE_PLACEMENT`.
    fn admit(&self, path: &[u8], fence: Option<u64>) -> Result<(), String>;
}

/// The path a request reads or writes; `None` for requests that name no file.
#[must_use]
pub fn request_path<'a>(r: &Request<'a>) -> Option<&'a [u8]> {
    match *r {
        Request::Read { path, .. }
        | Request::Xrp { path, .. }
        | Request::Lambda { path, .. }
        | Request::Write { path, .. }
        | Request::Stat { path }
        | Request::LambdaWrite { path, .. } => Some(path),
        Request::Hello { .. }
        | Request::Auth { .. }
        | Request::LoadProg { .. }
        | Request::Offload { .. } => None,
    }
}

/// The refusal of request `r` fenced by `fence` under the server's plug-in, if any.
pub(crate) fn refusal(
    plugin: Option<&dyn Fence>,
    r: &Request<'_>,
    fence: Option<u64>,
) -> Option<(StatusCode, String)> {
    let (plugin, path) = (plugin?, request_path(r)?);
    plugin.admit(path, fence).err().map(|why| (StatusCode::StalePlacement, why))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Refuses `held` at any fence above 3; admits everything else.
    #[derive(Debug)]
    struct Upto3;
    impl Fence for Upto3 {
        fn admit(&self, path: &[u8], fence: Option<u64>) -> Result<(), String> {
            match fence {
                Some(v) if path == b"held" && v > 3 => Err(format!("fence {v}")),
                _ => Ok(()),
            }
        }
    }

    #[test]
    fn only_requests_naming_a_file_reach_the_plugin() {
        let p: &dyn Fence = &Upto3;
        let read = Request::Read { path: b"held", offset: 0, len: 8 };
        assert_eq!(refusal(Some(p), &read, Some(3)), None);
        let (st, why) = refusal(Some(p), &read, Some(4)).unwrap();
        assert_eq!((st, why.as_str()), (StatusCode::StalePlacement, "fence 4"));
        assert_eq!(refusal(None, &read, Some(4)), None, "no plug-in: fences are ignored");
        assert_eq!(refusal(Some(p), &Request::Hello { tenant: b"t" }, Some(4)), None);
        assert_eq!(request_path(&Request::Stat { path: b"held" }), Some(&b"held"[..]));
    }
}
