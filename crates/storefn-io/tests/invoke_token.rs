//! `StorageFn::invoke`: the engine tells the function which chain (token) a block
//! belongs to, so one engine can run chains of different programs (the server's dispatcher).

mod common;

use common::*;
use storefn_io::{StorageFn, VmError, XrpCtx};

/// Writes its token into scratch and stops: a function that needs the token to do its job.
struct ByToken {
    seen: Vec<u64>,
}

impl StorageFn for ByToken {
    fn invoke(
        &mut self,
        token: u64,
        ctx: &mut XrpCtx,
        _data: &[u8],
        scratch: &mut [u8],
    ) -> Result<u64, VmError> {
        self.seen.push(token);
        scratch[..8].copy_from_slice(&token.to_le_bytes());
        ctx.done = 1;
        Ok(0)
    }
}

#[test]
fn chains_are_invoked_with_their_token() {
    let f = tmp_file("token", &vec![0u8; 8192]);
    let (mut e, id) = engine(&f);
    for t in [7u64, 900, 3] {
        e.submit_chain(id, 0, 512, t, |_| {}).unwrap();
    }
    let mut p = ByToken { seen: Vec::new() };
    let mut done = Vec::new();
    e.wait(3, &mut p, |c| {
        done.push((c.token, u64::from_le_bytes(c.scratch[..8].try_into().unwrap())));
    })
    .unwrap();
    done.sort_unstable();
    assert_eq!(done, vec![(3, 3), (7, 7), (900, 900)]);
    p.seen.sort_unstable();
    assert_eq!(p.seen, vec![3, 7, 900]);
}
