//! Each tenant's scope on this server: its scope directories held open (paths are resolved
//! beneath them, so `..` and symlinks cannot leave a scope) and its quota counters, shared by
//! every thread. Without a token file every client has the default scope, and its quotas are
//! counted for all clients together (a tenant name that is not authenticated names no one).

use crate::access::{Denied, Intent, Quota, Scope};
use crate::auth::Token;
use crate::confine::Root;
use storefn_wire::StatusCode;

use super::files::FileFail;

/// Where a request's file is to be resolved: `base` identifies the directory (0 = the served
/// directory; open files are cached per base and path) and `rest` is the path beneath it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Resolved<'s, 'p> {
    pub base: u32,
    pub dir: &'s Root,
    pub rest: &'p [u8],
}

#[derive(Debug)]
struct Tenant {
    scope: Scope,
    /// Per scope directory, its base id (index into `Policy::dirs`, plus one).
    bases: Vec<u32>,
    quota: Quota,
}

/// Scopes by tenant index: the token's index in the token file, or 0 without one.
#[derive(Debug)]
pub(crate) struct Policy {
    /// Scope directories, each opened once beneath the served directory.
    dirs: Vec<(String, Root)>,
    tenants: Vec<Tenant>,
}

/// Why the scopes cannot be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PolicyError {
    #[error(transparent)]
    Scope(#[from] crate::access::ScopeError),
    #[error("token file line {line}, tenant {tenant:?}: dir={dir}: {source}")]
    Dir { line: usize, tenant: String, dir: String, source: crate::confine::ConfineError },
}

impl Policy {
    pub(crate) fn new(root: &Root, tokens: Option<&[Token]>) -> Result<Self, PolicyError> {
        let Some(tokens) = tokens else {
            let t = Tenant { scope: Scope::default(), bases: Vec::new(), quota: Quota::default() };
            return Ok(Self { dirs: Vec::new(), tenants: vec![t] });
        };
        let mut p = Self { dirs: Vec::new(), tenants: Vec::with_capacity(tokens.len()) };
        for tok in tokens {
            let scope = Scope::of(tok)?;
            let mut bases = Vec::with_capacity(scope.dirs.len());
            for d in &scope.dirs {
                let i = match p.dirs.iter().position(|(n, _)| n == d) {
                    Some(i) => i,
                    None => {
                        let r = root.subdir(d.as_bytes()).map_err(|source| PolicyError::Dir {
                            line: tok.line,
                            tenant: tok.tenant.clone(),
                            dir: d.clone(),
                            source,
                        })?;
                        p.dirs.push((d.clone(), r));
                        p.dirs.len() - 1
                    }
                };
                bases.push(u32::try_from(i + 1).expect("bounded by the token file"));
            }
            p.tenants.push(Tenant { scope, bases, quota: Quota::default() });
        }
        Ok(p)
    }

    /// The instruction budget tenant `t`'s scope gives it, if it names one (`insns=`).
    pub(crate) fn insn_budget(&self, t: u32) -> Option<u64> {
        self.tenants.get(t as usize).and_then(|x| x.scope.insn_budget)
    }

    /// Where `path` is for tenant `t`, if its scope allows `intent` there.
    ///
    /// # Errors
    /// `FORBIDDEN` with the reason.
    pub(crate) fn resolve<'s, 'p>(
        &'s self,
        root: &'s Root,
        t: u32,
        path: &'p [u8],
        intent: Intent,
    ) -> Result<Resolved<'s, 'p>, FileFail> {
        let tenant = &self.tenants[t as usize];
        let at = tenant.scope.check(path, intent).map_err(|e: Denied| forbidden(e))?;
        Ok(match at.dir {
            None => Resolved { base: 0, dir: root, rest: at.rest },
            Some(i) => {
                let base = tenant.bases[i];
                Resolved { base, dir: &self.dirs[base as usize - 1].1, rest: at.rest }
            }
        })
    }

    /// Charges a write of `bytes` at `offset` of a file of `size` bytes to tenant `t`.
    ///
    /// # Errors
    /// `QUOTA_EXCEEDED`, or `OUT_OF_RANGE` when the write's end overflows.
    pub(crate) fn charge(
        &self,
        t: u32,
        offset: u64,
        bytes: u64,
        size: u64,
    ) -> Result<u64, FileFail> {
        let end = offset
            .checked_add(bytes)
            .ok_or((StatusCode::OutOfRange, "offset + length overflows".to_string()))?;
        let growth = end.saturating_sub(size);
        let tenant = &self.tenants[t as usize];
        tenant
            .quota
            .charge(&tenant.scope, bytes, growth)
            .map_err(|e| (StatusCode::QuotaExceeded, e.to_string()))?;
        Ok(growth)
    }

    /// Gives back a charge whose write failed.
    pub(crate) fn refund(&self, t: u32, bytes: u64, growth: u64) {
        self.tenants[t as usize].quota.refund(bytes, growth);
    }
}

fn forbidden(e: Denied) -> FileFail {
    (StatusCode::Forbidden, e.to_string())
}
