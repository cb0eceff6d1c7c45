//! The server's log: one line per connection event and per refused request on stderr, as
//! text for people or as one JSON object per line for log collectors (`--log-format json`).
//! Every call site goes through [`Logger`], so both formats carry the same facts.

use std::fmt::Write as _;
use std::net::SocketAddr;

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// `storefn serve: [t0] conn 3 127.0.0.1:5000: closed: peer closed`.
    #[default]
    Text,
    /// `{"ts":...,"thread":0,"event":"closed","conn":3,"peer":"127.0.0.1:5000",...}`.
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "text" => Ok(Self::Text),
            "json" => Ok(Self::Json),
            _ => Err(format!("{s:?}: expected text or json")),
        }
    }
}

/// One log line's facts; absent ones are left out (text) or `null` (JSON).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Event<'a> {
    pub thread: usize,
    /// `connected`, `hello`, `authenticated`, `closed`, `refused_connection`, `refused`, ...
    pub event: &'a str,
    pub conn: Option<u64>,
    pub peer: Option<SocketAddr>,
    pub tenant: Option<&'a [u8]>,
    pub op: Option<&'a str>,
    pub status: Option<&'a str>,
    pub reason: &'a str,
}

/// Where and how the server logs (`Copy`: every thread and tenant meter holds one).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Logger {
    pub on: bool,
    pub format: LogFormat,
}

impl Logger {
    pub(crate) fn log(&self, e: &Event<'_>) {
        if self.on {
            eprintln!("{}", self.line(e));
        }
    }

    /// The line `e` is written as (without the newline).
    pub(crate) fn line(&self, e: &Event<'_>) -> String {
        match self.format {
            LogFormat::Text => text_line(e),
            LogFormat::Json => json_line(e),
        }
    }
}

fn text_line(e: &Event<'_>) -> String {
    let mut s = format!("storefn serve: [t{}]", e.thread);
    if let Some(c) = e.conn {
        let _ = write!(s, " conn {c}");
    }
    if let Some(p) = e.peer {
        let _ = write!(s, " {p}");
    }
    let _ = write!(s, ": {}", e.event);
    if let Some(t) = e.tenant {
        let _ = write!(s, ", tenant {:?}", String::from_utf8_lossy(t));
    }
    if let (Some(op), Some(st)) = (e.op, e.status) {
        let _ = write!(s, ", {op} {st}");
    }
    if !e.reason.is_empty() {
        let _ = write!(s, ": {}", e.reason);
    }
    s
}

fn json_line(e: &Event<'_>) -> String {
    let ts = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64());
    let mut s = format!("{{\"ts\":{ts:.6},\"thread\":{},\"event\":", e.thread);
    json_str(&mut s, e.event.as_bytes());
    s.push_str(",\"conn\":");
    match e.conn {
        Some(c) => {
            let _ = write!(s, "{c}");
        }
        None => s.push_str("null"),
    }
    let peer = e.peer.map(|p| p.to_string());
    for (k, v) in [
        ("peer", peer.as_deref().map(str::as_bytes)),
        ("tenant", e.tenant),
        ("op", e.op.map(str::as_bytes)),
        ("status", e.status.map(str::as_bytes)),
        ("reason", Some(e.reason.as_bytes())),
    ] {
        let _ = write!(s, ",\"{k}\":");
        match v {
            Some(v) => json_str(&mut s, v),
            None => s.push_str("null"),
        }
    }
    s.push('}');
    s
}

/// Appends `v` as a JSON string: bytes that are not UTF-8 (a tenant name is any bytes) are
/// replaced, control characters escaped.
fn json_str(s: &mut String, v: &[u8]) {
    s.push('"');
    for ch in String::from_utf8_lossy(v).chars() {
        match ch {
            '"' => s.push_str("\\\""),
            '\\' => s.push_str("\\\\"),
            '\n' => s.push_str("\\n"),
            c if u32::from(c) < 0x20 || c == '\u{7f}' => {
                let _ = write!(s, "\\u{:04x}", u32::from(c));
            }
            c => s.push(c),
        }
    }
    s.push('"');
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_lines_carry_every_key_and_escape_what_a_client_chose() {
        let l = Logger { on: false, format: LogFormat::Json };
        let e = Event {
            thread: 1,
            event: "refused",
            conn: Some(7),
            peer: Some("127.0.0.1:9".parse().unwrap()),
            tenant: Some(b"a\"b\n\x01\xff"),
            op: Some("READ"),
            status: Some("FORBIDDEN"),
            reason: "outside \\ scope",
        };
        let line = l.line(&e);
        assert!(!line.contains('\n'), "one line: {line}");
        for key in ["\"tenant\":\"a\\\"b\\n\\u0001\u{fffd}\"", "\"peer\":\"127.0.0.1:9\""] {
            assert!(line.contains(key), "{key} in {line}");
        }
        assert!(line.contains("\"op\":\"READ\",\"status\":\"FORBIDDEN\""), "{line}");
        assert!(line.contains("\"reason\":\"outside \\\\ scope\""), "{line}");
        let none = l.line(&Event { event: "connected", ..Event::default() });
        assert!(none.contains("\"tenant\":null,\"op\":null,\"status\":null"), "{none}");
        let text = Logger { on: false, format: LogFormat::Text }.line(&e);
        assert!(text.starts_with("storefn serve: [t1] conn 7 127.0.0.1:9: refused"), "{text}");
    }
}
