//! Who may talk to the page server: the server's token file (every connection authenticates
//! with HMAC-SHA256 before READ, WRITE, LOAD_PROG or OFFLOAD), or, only when the operator says
//! so, nobody is asked (`--insecure-no-auth`). The page server's only use of storefn-server's
//! token API is here.

use crate::limits::GENERATED_SECRET_BYTES;
use storefn_server::ServerConfig;
use storefn_server::{load_tokens, Token, TokenError};
use storefn_wire::ClientConfig;

/// The tenant of a generated token.
pub const GENERATED_TENANT: &str = "pageserver";

/// How the page server authenticates its clients.
#[derive(Debug, Clone)]
pub enum PageServerAuth {
    /// Every connection must authenticate as one of these tenants.
    Tokens(Vec<Token>),
    /// Anyone who can connect may read, write, load programs and get pages. Only on the
    /// operator's explicit request; the server logs a warning.
    InsecureNoAuth,
}

impl PageServerAuth {
    /// The tenants of a token file (`TENANT SECRET` lines; docs/FORMAT.md).
    ///
    /// # Errors
    /// The token file's errors, naming the file and line.
    pub fn from_token_file(path: &std::path::Path) -> Result<Self, TokenError> {
        Ok(Self::Tokens(load_tokens(path)?))
    }

    /// One tenant with a fresh random secret (a server and its clients in one process: the
    /// spawn bench, tests).
    #[must_use]
    pub fn generated() -> Self {
        use rand::Rng;
        let secret: Vec<u8> = rand::thread_rng()
            .sample_iter(rand::distributions::Alphanumeric)
            .take(GENERATED_SECRET_BYTES)
            .collect();
        Self::Tokens(vec![Token {
            tenant: GENERATED_TENANT.into(),
            secret,
            options: Vec::new(),
            line: 0,
        }])
    }

    /// A client configuration that authenticates as the first tenant (none: insecure).
    #[must_use]
    pub fn client_config(&self) -> ClientConfig {
        match self {
            Self::Tokens(t) => t.first().map_or_else(ClientConfig::default, |t| ClientConfig {
                tenant: t.tenant.clone(),
                secret: Some(t.secret.clone()),
                ..ClientConfig::default()
            }),
            Self::InsecureNoAuth => ClientConfig::default(),
        }
    }

    /// Sets the server's tenants.
    pub(crate) fn apply(&self, cfg: &mut ServerConfig) {
        cfg.tokens = match self {
            Self::Tokens(t) => Some(t.clone()),
            Self::InsecureNoAuth => {
                eprintln!(
                    "storefn pageserver: WARNING: --insecure-no-auth: any client that can \
                     connect may read and write the served files, load programs and get pages"
                );
                None
            }
        };
    }
}

/// A client's configuration from the first line of a token file.
///
/// # Errors
/// The token file's errors.
pub fn client_config_from_token_file(path: &std::path::Path) -> Result<ClientConfig, TokenError> {
    storefn_server::client_config(path)
}
