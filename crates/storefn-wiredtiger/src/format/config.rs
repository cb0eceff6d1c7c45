//! WiredTiger's text layouts: configuration strings (the metadata's values) and the turtle file.
//!
//! A configuration string is `key=value` pairs separated by commas; a value is a bare word, a
//! `"quoted string"`, or a nested `( ... )` / `[ ... ]` list of the same grammar.

use super::Malformed;
use crate::limits::MAX_CONFIG_NESTING;

/// The top-level `(key, value)` pairs of a configuration string, values with their quotes or
/// outer brackets removed.
///
/// # Errors
/// Unbalanced brackets or quotes, or nesting deeper than WiredTiger writes.
pub fn config_entries(s: &str) -> Result<Vec<(&str, &str)>, Malformed> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let key_start = i;
        let key_end = scan_item(b, &mut i, true)?;
        let key = unquote(&s[key_start..key_end]);
        let mut value = "";
        if b.get(i) == Some(&b'=') || b.get(i) == Some(&b':') {
            i += 1;
            let v_start = i;
            let v_end = scan_item(b, &mut i, false)?;
            value = unwrap(&s[v_start..v_end]);
        }
        if !key.is_empty() {
            out.push((key, value));
        }
        match b.get(i) {
            None => break,
            Some(b',') => i += 1,
            Some(&c) => {
                return Err(Malformed::new(i, format!("configuration: unexpected {:?}", c as char)))
            }
        }
    }
    Ok(out)
}

/// The value of top-level `key` in configuration string `s`.
///
/// # Errors
/// As [`config_entries`].
pub fn config_get<'a>(s: &'a str, key: &str) -> Result<Option<&'a str>, Malformed> {
    Ok(config_entries(s)?.into_iter().find(|(k, _)| *k == key).map(|(_, v)| v))
}

/// Advances `*i` over one key (stops at `=`/`:`) or value, returning where it ends.
fn scan_item(b: &[u8], i: &mut usize, is_key: bool) -> Result<usize, Malformed> {
    let mut depth = 0usize;
    while let Some(&c) = b.get(*i) {
        match c {
            b'"' => {
                let start = *i;
                *i += 1;
                while b.get(*i).is_some_and(|&c| c != b'"') {
                    *i += 1;
                }
                if *i >= b.len() {
                    return Err(Malformed::new(start, "configuration: unterminated quote"));
                }
            }
            b'(' | b'[' => {
                depth += 1;
                if depth > MAX_CONFIG_NESTING {
                    return Err(Malformed::new(*i, "configuration nested too deep"));
                }
            }
            b')' | b']' => {
                depth = depth
                    .checked_sub(1)
                    .ok_or_else(|| Malformed::new(*i, "configuration: unbalanced bracket"))?;
            }
            b',' if depth == 0 => return Ok(*i),
            b'=' | b':' if depth == 0 && is_key => return Ok(*i),
            _ => {}
        }
        *i += 1;
    }
    if depth != 0 {
        return Err(Malformed::new(b.len(), "configuration: unclosed bracket"));
    }
    Ok(b.len())
}

fn unquote(s: &str) -> &str {
    s.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(s)
}

fn unwrap(s: &str) -> &str {
    s.strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .or_else(|| s.strip_prefix('[').and_then(|s| s.strip_suffix(']')))
        .unwrap_or_else(|| unquote(s))
}

/// `WiredTiger.turtle`: the release that wrote the database and the metadata file's own
/// configuration (with its checkpoint), as alternating key and value lines.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Turtle {
    /// `(major, minor, patch)` from the `WiredTiger version` line.
    pub version: (u32, u32, u32),
    /// The value of the `file:WiredTiger.wt` line.
    pub metadata_config: String,
}

impl Turtle {
    /// Parses the turtle file's text.
    ///
    /// # Errors
    /// A missing `WiredTiger version` or `file:WiredTiger.wt` entry, or a damaged version line.
    pub fn parse(text: &str) -> Result<Self, Malformed> {
        let lines: Vec<&str> = text.lines().collect();
        let value_of = |key: &str| {
            lines
                .iter()
                .position(|l| *l == key)
                .and_then(|i| lines.get(i + 1).copied())
                .ok_or_else(|| Malformed::new(0, format!("turtle has no {key:?} entry")))
        };
        let v = value_of("WiredTiger version")?;
        let num = |k: &str| -> Result<u32, Malformed> {
            config_get(v, k)?
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| Malformed::new(0, format!("turtle version line {v:?} has no {k}")))
        };
        let version = (num("major")?, num("minor")?, num("patch")?);
        let metadata_config = value_of("file:WiredTiger.wt")?.to_string();
        Ok(Turtle { version, metadata_config })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nested_and_quoted_values() {
        let s = r#"a=1,checkpoint=(WiredTigerCheckpoint.3=(addr="01,(x)",order=3)),b="q,r",c,d=[x=(1)]"#;
        let e = config_entries(s).unwrap();
        assert_eq!(e[0], ("a", "1"));
        assert_eq!(e[1], ("checkpoint", r#"WiredTigerCheckpoint.3=(addr="01,(x)",order=3)"#));
        assert_eq!(e[2], ("b", "q,r"));
        assert_eq!(e[3], ("c", ""));
        assert_eq!(e[4], ("d", "x=(1)"));
        let ck = config_entries(e[1].1).unwrap();
        assert_eq!(config_get(ck[0].1, "addr").unwrap(), Some("01,(x)"));
    }

    #[test]
    fn rejects_unbalanced() {
        assert!(config_entries("a=(1").is_err());
        assert!(config_entries("a=1)").is_err());
        assert!(config_entries("a=\"x").is_err());
        assert!(config_entries(&"(".repeat(100)).is_err());
    }
}
