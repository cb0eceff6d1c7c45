//! Where a λ request's file is: a path on this machine, or `ADDR:FILE` on a storage server
//! (FILE relative to the directory the server serves). `lambda run` parses its FILE argument
//! into this.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;

/// A λ request's file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    /// `ADDR:FILE`: the server at `addr`, `file` beneath its served directory.
    Remote {
        addr: SocketAddr,
        file: String,
    },
}

impl FromStr for Location {
    type Err = String;

    /// `HOST:PORT:FILE` or `[V6]:PORT:FILE` is remote when the part before the last `:` that
    /// leaves a non-empty FILE parses as a socket address; anything else is a local path (so a
    /// local name with a colon still works, and `./a:b` always does).
    fn from_str(s: &str) -> Result<Self, String> {
        if s.is_empty() {
            return Err("empty file argument".into());
        }
        for (i, _) in s.match_indices(':') {
            if let Ok(addr) = s[..i].parse::<SocketAddr>() {
                let file = &s[i + 1..];
                if file.is_empty() {
                    return Err(format!("{s:?}: no file after the server address {addr}"));
                }
                return Ok(Location::Remote { addr, file: file.to_string() });
            }
        }
        Ok(Location::Local(PathBuf::from(s)))
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Remote { addr, file } => write!(f, "{addr}:{file}"),
        }
    }
}

/// Parses `OFF:LEN` (decimal or 0x hex, each) into a byte range.
///
/// # Errors
/// A message naming the bad part.
pub fn parse_range(s: &str) -> Result<(u64, u64), String> {
    let (o, l) = s.split_once(':').ok_or_else(|| format!("range {s:?}: expected OFF:LEN"))?;
    let num = |t: &str, what: &str| {
        let r = match t.strip_prefix("0x") {
            Some(h) => u64::from_str_radix(h, 16),
            None => t.parse(),
        };
        r.map_err(|e| format!("range {s:?}: {what} {t:?}: {e}"))
    };
    let (off, len) = (num(o, "offset")?, num(l, "length")?);
    off.checked_add(len).ok_or_else(|| format!("range {s:?}: offset + length overflows"))?;
    Ok((off, len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_parse() {
        assert_eq!("data/x.dat".parse(), Ok(Location::Local("data/x.dat".into())));
        assert_eq!("a:b".parse(), Ok(Location::Local("a:b".into())));
        assert_eq!(
            "127.0.0.1:7000:db/x.dat".parse(),
            Ok(Location::Remote {
                addr: "127.0.0.1:7000".parse().unwrap(),
                file: "db/x.dat".into()
            })
        );
        assert_eq!(
            "[::1]:7000:x:y".parse(),
            Ok(Location::Remote { addr: "[::1]:7000".parse().unwrap(), file: "x:y".into() })
        );
        assert!("127.0.0.1:7000:".parse::<Location>().unwrap_err().contains("no file"));
        assert!("".parse::<Location>().is_err());
    }

    #[test]
    fn ranges_parse() {
        assert_eq!(parse_range("0:4096"), Ok((0, 4096)));
        assert_eq!(parse_range("0x1000:0x20"), Ok((4096, 32)));
        assert!(parse_range("12").unwrap_err().contains("expected OFF:LEN"));
        assert!(parse_range("1:x").unwrap_err().contains("length \"x\""));
        assert!(parse_range("18446744073709551615:1").unwrap_err().contains("overflows"));
    }
}
