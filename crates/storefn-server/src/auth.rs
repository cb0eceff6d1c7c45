//! Token auth: HMAC-SHA256 challenge-response (the crypto is storefn-wire's). The server sends
//! a fresh random challenge in its HELLO response; the client answers
//! HMAC-SHA256(secret, challenge || tenant). The secret never crosses the wire.
//!
//! Token file: one tenant per line, `TENANT SECRET [OPTION ...]` (whitespace-separated; `#`
//! starts a comment). The options are the tenant's scope, parsed by the server
//! ([`crate::access::Scope`]); a line without options has the default scope. The server loads
//! every line; a client uses the first line's tenant and secret.

use std::path::{Path, PathBuf};

use storefn_wire::limits::MAX_TENANT_BYTES;

use crate::limits::MIN_SECRET_BYTES;
// The worker answers HELLO and AUTH with the wire's challenge-response.
pub(crate) use storefn_wire::{challenge, verify};

/// Why a token file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    #[error("token file {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("token file {path}, line {line}: {why}")]
    Bad { path: PathBuf, line: usize, why: &'static str },
    #[error("token file {path}: no tenant")]
    Empty { path: PathBuf },
}

/// One tenant's name and secret.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub tenant: String,
    pub secret: Vec<u8>,
    /// The words after the secret: the tenant's scope ([`crate::access::Scope::parse`]).
    pub options: Vec<String>,
    /// 1-based line of the token file (0 when not read from a file), for error messages.
    pub line: usize,
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Token")
            .field("tenant", &self.tenant)
            .field("options", &self.options)
            .field("line", &self.line)
            .finish_non_exhaustive()
    }
}

/// Reads every `TENANT SECRET [OPTION ...]` line of `path` (the options are kept unparsed).
///
/// # Errors
/// I/O errors; a line without two fields, a tenant over 64 bytes, a secret under 16 bytes,
/// a repeated tenant; a file with no tenant.
pub fn load_tokens(path: &Path) -> Result<Vec<Token>, TokenError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| TokenError::Io { path: path.to_path_buf(), source })?;
    let mut out: Vec<Token> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why| TokenError::Bad { path: path.to_path_buf(), line: i + 1, why };
        let mut it = line.split_whitespace();
        let (Some(t), Some(s)) = (it.next(), it.next()) else {
            return Err(bad("expected `TENANT SECRET [OPTION ...]`"));
        };
        if t.len() > MAX_TENANT_BYTES {
            return Err(bad("tenant name longer than 64 bytes"));
        }
        if s.len() < MIN_SECRET_BYTES {
            return Err(bad("secret shorter than 16 bytes"));
        }
        if out.iter().any(|x| x.tenant == t) {
            return Err(bad("tenant listed twice"));
        }
        out.push(Token {
            tenant: t.to_string(),
            secret: s.as_bytes().to_vec(),
            options: it.map(str::to_string).collect(),
            line: i + 1,
        });
    }
    if out.is_empty() {
        return Err(TokenError::Empty { path: path.to_path_buf() });
    }
    Ok(out)
}

/// The client's side of a token file: the tenant and secret of its first line.
///
/// # Errors
/// As [`load_tokens`].
pub fn client_config(path: &Path) -> Result<storefn_wire::ClientConfig, TokenError> {
    let t = load_tokens(path)?.swap_remove(0);
    Ok(storefn_wire::ClientConfig::with_secret(t.tenant, t.secret))
}
