//! Authorization: what a tenant may reach and how much it may write. The token file gives each
//! tenant a scope after its secret (`TENANT SECRET [OPTION ...]`, docs/FORMAT.md, "Token
//! file"):
//!
//! - `ro` or `rw`: read-only or read-write (default `rw`);
//! - `dir=SUB` (repeatable): the subdirectories of the served directory it may reach (default:
//!   the whole directory);
//! - `write_quota=SIZE`: bytes its writes may write while the server runs (default unlimited);
//! - `grow_quota=SIZE`: bytes by which its writes may extend files, summed over its writes
//!   while the server runs (default [`DEFAULT_GROW_QUOTA`]);
//! - `insns=N`: instructions each of its program invocations may run (an XRP hop, a λ run
//!   before the VM's per-byte allowance, a LAMBDA_WRITE; default: the server's
//!   `--insn-budget`, [`crate::limits::DEFAULT_TENANT_INSN_BUDGET`] unless set).
//!
//! `SIZE` is a byte count with an optional `K`, `M`, `G` or `T` suffix (powers of 1024), or
//! `unlimited`. A line with no option (the old `TENANT SECRET` format) has [`Scope::default`].
//!
//! [`Scope::check`] is a pure check of a request's path against the scope: it names the scope
//! directory the path is in and the rest of the path. A server must then resolve that rest
//! beneath the directory itself (the storage server opens it with `openat2(RESOLVE_BENEATH)`
//! from the directory's descriptor), so `..` and symlinks cannot leave the scope. [`Quota`]
//! counts a tenant's writes against its quotas; it is shared by all of a tenant's connections.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::auth::Token;
use storefn_wire::limits::MAX_PATH_BYTES;

use crate::limits::{DEFAULT_GROW_QUOTA, MAX_SCOPE_DIRS};

/// Read-only or read-write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Access {
    ReadOnly,
    #[default]
    ReadWrite,
}

/// What a request does with its file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Intent {
    /// READ, STAT, XRP, LAMBDA: sees the file.
    Read,
    /// WRITE, LAMBDA_WRITE: changes it.
    Write,
}

/// One tenant's scope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scope {
    pub access: Access,
    /// Directories reachable, relative to the served directory, normalized (no `.`, `..` or
    /// empty component, no leading or trailing `/`); empty = the whole served directory.
    pub dirs: Vec<String>,
    /// Bytes the tenant may write; `None` = unlimited.
    pub write_quota: Option<u64>,
    /// Bytes by which the tenant's writes may extend files; `None` = unlimited.
    pub grow_quota: Option<u64>,
    /// Instructions per program invocation; `None` = the server's default budget.
    pub insn_budget: Option<u64>,
}

impl Default for Scope {
    /// Read-write, the whole served directory, no write quota, [`DEFAULT_GROW_QUOTA`].
    fn default() -> Self {
        Self {
            access: Access::ReadWrite,
            dirs: Vec::new(),
            write_quota: None,
            grow_quota: Some(DEFAULT_GROW_QUOTA),
            insn_budget: None,
        }
    }
}

/// Why an option is not a scope.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScopeError {
    #[error("option `{option}`: {why}")]
    Bad { option: String, why: &'static str },
    #[error("token file line {line}, tenant {tenant:?}: {source}")]
    Token { line: usize, tenant: String, source: Box<ScopeError> },
}

/// Why a request is refused by its tenant's scope (answered `FORBIDDEN`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Denied {
    #[error("the path is outside the tenant's scope")]
    OutsideScope,
    #[error("the tenant is read-only")]
    ReadOnly,
}

/// Where an allowed path is: `dir` is the index of the scope directory in [`Scope::dirs`]
/// (`None`: the served directory itself) and `rest` the path beneath it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Located<'p> {
    pub dir: Option<usize>,
    pub rest: &'p [u8],
}

impl Scope {
    /// Parses a token line's options (see the module).
    ///
    /// # Errors
    /// An unknown option, a bad size or directory, `ro` with `rw`, too many directories.
    pub fn parse<S: AsRef<str>>(options: &[S]) -> Result<Self, ScopeError> {
        let mut s = Self::default();
        let mut access = None;
        for o in options {
            let o = o.as_ref();
            let bad = |why| ScopeError::Bad { option: o.to_string(), why };
            let (key, value) = o.split_once('=').unwrap_or((o, ""));
            match key {
                "ro" | "rw" if value.is_empty() => {
                    let a = if key == "ro" { Access::ReadOnly } else { Access::ReadWrite };
                    if access.is_some_and(|x| x != a) {
                        return Err(bad("both `ro` and `rw`"));
                    }
                    access = Some(a);
                }
                "dir" => {
                    let d = normalize_dir(value).map_err(bad)?;
                    if s.dirs.len() == MAX_SCOPE_DIRS {
                        return Err(bad("more than 64 `dir=` options"));
                    }
                    s.dirs.push(d);
                }
                "write_quota" => s.write_quota = parse_size(value).map_err(bad)?,
                "grow_quota" => s.grow_quota = parse_size(value).map_err(bad)?,
                "insns" => s.insn_budget = Some(parse_insns(value).map_err(bad)?),
                _ => {
                    return Err(bad(
                        "unknown option (expected ro, rw, dir=, write_quota=, grow_quota=, insns=)",
                    ))
                }
            }
        }
        s.access = access.unwrap_or_default();
        // `dir=.` names the whole directory: the other directories add nothing.
        if s.dirs.iter().any(String::is_empty) {
            s.dirs.clear();
        }
        Ok(s)
    }

    /// The scope of a token file line, errors naming the line and tenant.
    ///
    /// # Errors
    /// As [`Scope::parse`].
    pub fn of(token: &Token) -> Result<Self, ScopeError> {
        Self::parse(&token.options).map_err(|e| ScopeError::Token {
            line: token.line,
            tenant: token.tenant.clone(),
            source: Box::new(e),
        })
    }

    /// Where `path` (relative to the served directory, as a request names it) lies in the
    /// scope, if `intent` is allowed there. A path is inside a scope directory when it starts
    /// with the directory's name followed by `/`. Allocation-free (it runs on every request).
    ///
    /// # Errors
    /// [`Denied::ReadOnly`] for a write by a read-only tenant; [`Denied::OutsideScope`].
    pub fn check<'p>(&self, path: &'p [u8], intent: Intent) -> Result<Located<'p>, Denied> {
        if intent == Intent::Write && self.access == Access::ReadOnly {
            return Err(Denied::ReadOnly);
        }
        if self.dirs.is_empty() {
            return Ok(Located { dir: None, rest: path });
        }
        for (i, d) in self.dirs.iter().enumerate() {
            let d = d.as_bytes();
            if path.len() > d.len() && path.starts_with(d) && path[d.len()] == b'/' {
                return Ok(Located { dir: Some(i), rest: &path[d.len() + 1..] });
            }
        }
        Err(Denied::OutsideScope)
    }
}

fn normalize_dir(v: &str) -> Result<String, &'static str> {
    if v.starts_with('/') {
        return Err("the directory must be relative to the served directory");
    }
    if v.len() > MAX_PATH_BYTES {
        return Err("the directory is longer than a path may be");
    }
    let mut parts = Vec::new();
    for c in v.split('/') {
        match c {
            "" | "." => {}
            ".." => return Err("`..` in a scope directory"),
            c => parts.push(c),
        }
    }
    if v.is_empty() {
        return Err("empty directory (use `dir=.` for the whole served directory)");
    }
    Ok(parts.join("/"))
}

fn parse_size(v: &str) -> Result<Option<u64>, &'static str> {
    if v == "unlimited" {
        return Ok(None);
    }
    let (digits, shift) = match v.as_bytes().last() {
        Some(b'K') => (&v[..v.len() - 1], 10),
        Some(b'M') => (&v[..v.len() - 1], 20),
        Some(b'G') => (&v[..v.len() - 1], 30),
        Some(b'T') => (&v[..v.len() - 1], 40),
        _ => (v, 0),
    };
    let n: u64 =
        digits.parse().map_err(|_| "expected a byte count, e.g. 4096, 64M, 1G, unlimited")?;
    n.checked_mul(1u64 << shift).map(Some).ok_or("size overflows 64 bits")
}

/// An instruction budget: a count above 0, with an optional `K` or `M` suffix (powers of 1024).
fn parse_insns(v: &str) -> Result<u64, &'static str> {
    let why = "expected an instruction count above 0, e.g. 65536 or 256K";
    match parse_size(v) {
        Ok(Some(n)) if n > 0 && !v.ends_with(['G', 'T']) => Ok(n),
        Ok(_) | Err(_) => Err(why),
    }
}

/// Why a token file cannot be used: its tokens or one of its scopes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenFileError {
    #[error(transparent)]
    Token(#[from] crate::auth::TokenError),
    #[error("token file {path}: {source}")]
    Scope { path: std::path::PathBuf, source: ScopeError },
}

/// Every tenant of a token file with its scope: what a server needs to authenticate and
/// authorize (the storage server does the same through [`crate::ServerConfig::tokens`]).
///
/// # Errors
/// As [`crate::auth::load_tokens`]; a bad scope, naming the line and tenant.
pub fn load_token_file(path: &std::path::Path) -> Result<Vec<(Token, Scope)>, TokenFileError> {
    let tokens = crate::auth::load_tokens(path)?;
    tokens
        .into_iter()
        .map(|t| match Scope::of(&t) {
            Ok(s) => Ok((t, s)),
            Err(source) => Err(TokenFileError::Scope { path: path.to_path_buf(), source }),
        })
        .collect()
}

/// A tenant's writes so far, against its scope's quotas. Shared by every connection of the
/// tenant (all server threads).
#[derive(Debug, Default)]
pub struct Quota {
    written: AtomicU64,
    grown: AtomicU64,
}

/// Why a write is over quota (answered `QUOTA_EXCEEDED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum QuotaError {
    #[error("write quota: {used} of {quota} bytes written, this write adds {bytes}")]
    Written { used: u64, quota: u64, bytes: u64 },
    #[error("growth quota: files grown by {used} of {quota} bytes, this write grows by {bytes}")]
    Grown { used: u64, quota: u64, bytes: u64 },
}

impl Quota {
    /// Takes `bytes` written and `growth` (bytes past the file's end before the write) from
    /// the quotas, all or nothing. Give them back with [`Quota::refund`] if the write fails.
    ///
    /// # Errors
    /// The first quota the write would exceed.
    pub fn charge(&self, scope: &Scope, bytes: u64, growth: u64) -> Result<(), QuotaError> {
        take(&self.written, scope.write_quota, bytes)
            .map_err(|(used, quota)| QuotaError::Written { used, quota, bytes })?;
        if let Err((used, quota)) = take(&self.grown, scope.grow_quota, growth) {
            self.written.fetch_sub(bytes, Ordering::Relaxed);
            return Err(QuotaError::Grown { used, quota, bytes: growth });
        }
        Ok(())
    }

    /// Gives back a charge whose write failed.
    pub fn refund(&self, bytes: u64, growth: u64) {
        self.written.fetch_sub(bytes, Ordering::Relaxed);
        self.grown.fetch_sub(growth, Ordering::Relaxed);
    }

    /// (bytes written, bytes grown) so far.
    #[must_use]
    pub fn used(&self) -> (u64, u64) {
        (self.written.load(Ordering::Relaxed), self.grown.load(Ordering::Relaxed))
    }
}

/// Adds `n` to `counter` unless that passes `limit`; `Err((used, limit))` otherwise.
fn take(counter: &AtomicU64, limit: Option<u64>, n: u64) -> Result<(), (u64, u64)> {
    // Relaxed: the counter is the only shared state, and compare_exchange alone keeps two
    // writers from both taking the last bytes; nothing else is published with it.
    let mut used = counter.load(Ordering::Relaxed);
    loop {
        let next = used.checked_add(n).filter(|&x| limit.is_none_or(|l| x <= l));
        let Some(next) = next else { return Err((used, limit.unwrap_or(u64::MAX))) };
        match counter.compare_exchange_weak(used, next, Ordering::Relaxed, Ordering::Relaxed) {
            Ok(_) => return Ok(()),
            Err(now) => used = now,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_parse_into_a_scope_and_bad_ones_are_named() {
        let s = Scope::parse(&["ro", "dir=a/./b/", "dir=c", "write_quota=64M", "grow_quota=0"])
            .unwrap();
        assert_eq!(s.access, Access::ReadOnly);
        assert_eq!(s.dirs, ["a/b", "c"]);
        assert_eq!((s.write_quota, s.grow_quota), (Some(64 << 20), Some(0)));
        assert_eq!(Scope::parse::<&str>(&[]).unwrap(), Scope::default());
        assert!(Scope::parse(&["dir=.", "dir=x"]).unwrap().dirs.is_empty());
        assert_eq!(Scope::parse(&["write_quota=unlimited"]).unwrap().write_quota, None);
        for (bad, why) in [
            ("dir=../x", "`..`"),
            ("dir=/etc", "relative"),
            ("dir=", "empty"),
            ("size=1", "unknown option"),
            ("write_quota=1X", "byte count"),
            ("grow_quota=99999999T", "overflows"),
        ] {
            let e = Scope::parse(&[bad]).unwrap_err().to_string();
            assert!(e.contains(bad) && e.contains(why), "{bad}: {e}");
        }
        assert!(Scope::parse(&["ro", "rw"]).is_err());
    }

    #[test]
    fn paths_are_located_in_scope_directories_by_whole_components() {
        let s = Scope::parse(&["dir=a/b", "dir=c"]).unwrap();
        let at = |p: &'static str, i| s.check(p.as_bytes(), i);
        assert_eq!(at("a/b/x", Intent::Write), Ok(Located { dir: Some(0), rest: b"x" }));
        assert_eq!(at("c/d/e", Intent::Read), Ok(Located { dir: Some(1), rest: b"d/e" }));
        for out in ["a/bc/x", "a/b", "c", "cx/y", "a/x", "x", "/c/x"] {
            assert_eq!(at(out, Intent::Read), Err(Denied::OutsideScope), "{out}");
        }
        let ro = Scope::parse(&["ro"]).unwrap();
        assert_eq!(ro.check(b"f", Intent::Write), Err(Denied::ReadOnly));
        assert_eq!(ro.check(b"f", Intent::Read), Ok(Located { dir: None, rest: b"f" }));
    }

    #[test]
    fn quotas_are_all_or_nothing() {
        let s = Scope::parse(&["write_quota=100", "grow_quota=10"]).unwrap();
        let q = Quota::default();
        q.charge(&s, 60, 10).unwrap();
        assert!(matches!(q.charge(&s, 50, 0), Err(QuotaError::Written { used: 60, .. })));
        assert!(matches!(q.charge(&s, 10, 1), Err(QuotaError::Grown { used: 10, .. })));
        assert_eq!(q.used(), (60, 10), "a refused charge takes nothing");
        q.refund(60, 10);
        q.charge(&s, 100, 10).unwrap();
    }
}
