//! A table's lookups as a user asks them: the storefn reader answers, and what it hands back as
//! a fallback is answered by WiredTiger's own API (opened read-only on first need).

use crate::db::Table;
use crate::error::WtError;
use crate::tree::Outcome;
use std::path::{Path, PathBuf};

/// A lookup's final answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer {
    /// The value (as stored) is in the caller's buffer.
    Found,
    NotFound,
}

/// How a lookup reads pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ReadPath {
    /// Plain reads in this process, one page at a time.
    #[default]
    Read,
    /// One storage-function chain per lookup on the io engine.
    Xrp,
}

/// Counts of how lookups were answered.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupStats {
    pub lookups: u64,
    /// Answered by WiredTiger's own API because the storefn reader could not.
    pub fallbacks: u64,
    /// `xrp`: lookups the storage function handed back to the plain reader.
    pub function_fallbacks: u64,
}

/// Lookups in one table with WiredTiger as the fallback.
#[derive(Debug)]
pub struct Lookups {
    dir: PathBuf,
    table: Table,
    xrp: Option<crate::xrp::XrpTree>,
    uri: String,
    #[cfg(feature = "native")]
    key: Vec<u8>,
    #[cfg(feature = "native")]
    native: Option<crate::native::Native>,
    pub stats: LookupStats,
}

impl Lookups {
    /// Opens `table` of `dir` read-only, reading pages by `path`.
    ///
    /// # Errors
    /// As [`Table::open`].
    pub fn open(dir: &Path, table: &str, path: ReadPath) -> Result<Self, WtError> {
        let t = Table::open(dir, table)?;
        let xrp = match path {
            ReadPath::Read => None,
            ReadPath::Xrp => Some(crate::xrp::XrpTree::open(t.tree())?),
        };
        Ok(Lookups {
            dir: dir.into(),
            table: t,
            xrp,
            uri: format!("table:{table}"),
            #[cfg(feature = "native")]
            key: Vec::new(),
            #[cfg(feature = "native")]
            native: None,
            stats: LookupStats::default(),
        })
    }

    /// The table read.
    #[must_use]
    pub fn table(&self) -> &Table {
        &self.table
    }

    /// Looks a user's key up, copying the stored value into `value`.
    ///
    /// # Errors
    /// Damage on the read path, or WiredTiger's own error on a fallback.
    pub fn get(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        self.stats.lookups += 1;
        if let Some(x) = &mut self.xrp {
            #[cfg(feature = "native")]
            let key = &mut self.key;
            #[cfg(not(feature = "native"))]
            let key = &mut Vec::new();
            self.table.key_format.encode(user_key, key)?;
            match x.get(self.table.tree(), key, value)? {
                Outcome::Found => return Ok(Answer::Found),
                Outcome::NotFound => return Ok(Answer::NotFound),
                Outcome::Fallback(_) => self.stats.function_fallbacks += 1,
            }
        }
        match self.table.get(user_key, value)? {
            Outcome::Found => Ok(Answer::Found),
            Outcome::NotFound => Ok(Answer::NotFound),
            Outcome::Fallback(_) => {
                self.stats.fallbacks += 1;
                self.fallback(user_key, value)
            }
        }
    }

    #[cfg(feature = "native")]
    fn fallback(&mut self, user_key: &[u8], value: &mut Vec<u8>) -> Result<Answer, WtError> {
        if self.native.is_none() {
            self.native = Some(crate::native::Native::open(&self.dir, "readonly=true")?);
        }
        let native = self.native.as_ref().expect("opened above");
        self.table.key_format.encode(user_key, &mut self.key)?;
        let found = native.cursor(&self.uri)?.search(&self.key, value)?;
        Ok(if found { Answer::Found } else { Answer::NotFound })
    }

    #[cfg(not(feature = "native"))]
    fn fallback(&mut self, _user_key: &[u8], _value: &mut Vec<u8>) -> Result<Answer, WtError> {
        Err(WtError::Unsupported {
            path: self.dir.clone(),
            what: format!(
                "{}: this key needs WiredTiger's own API (build with the `native` feature)",
                self.uri
            ),
        })
    }
}
