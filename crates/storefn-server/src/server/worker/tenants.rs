//! The thread's tenants: the names requests are queued and accounted under. Only a tenant
//! that may send requests is recorded (authenticated, or named in HELLO when the server runs
//! without authentication), and an entry no connection or job refers to is reused, so names
//! sent before AUTH never fill the table and a full table frees itself as clients leave.

use crate::server::MAX_TENANTS_PER_THREAD;

#[derive(Debug, Default)]
pub(super) struct Tenants {
    names: Vec<Vec<u8>>,
    /// Connections and jobs holding each entry.
    refs: Vec<u32>,
    /// Each entry's instruction budget per program invocation.
    budgets: Vec<u64>,
    /// Each entry's metrics (set when the entry is given to a name).
    meters: Vec<Option<std::sync::Arc<crate::metrics::TenantMeter>>>,
}

impl Tenants {
    /// The entry of `name`, held once more; `None` when every one of the
    /// `MAX_TENANTS_PER_THREAD` entries is held by another tenant.
    /// `true` beside it: the entry was given to this name now (its past usage is another's).
    pub(super) fn hold_name(&mut self, name: &[u8], budget: u64) -> Option<(u32, bool)> {
        let (t, fresh) = match self.names.iter().position(|n| n == name) {
            Some(t) => (t, false),
            None => {
                let t = match self.refs.iter().position(|&r| r == 0) {
                    Some(t) => t,
                    None if self.names.len() < MAX_TENANTS_PER_THREAD => {
                        self.names.push(Vec::new());
                        self.refs.push(0);
                        self.budgets.push(0);
                        self.names.len() - 1
                    }
                    None => return None,
                };
                self.names[t].clear();
                self.names[t].extend_from_slice(name);
                self.budgets[t] = budget;
                (t, true)
            }
        };
        self.refs[t] += 1;
        Some((u32::try_from(t).expect("MAX_TENANTS_PER_THREAD is small"), fresh))
    }

    /// The instruction budget of tenant `t`'s program invocations.
    pub(super) fn budget(&self, t: u32) -> u64 {
        self.budgets[t as usize]
    }

    /// Entry `t`'s metrics from now on (it was just given to a name).
    pub(super) fn set_meter(&mut self, t: u32, m: std::sync::Arc<crate::metrics::TenantMeter>) {
        let t = t as usize;
        if self.meters.len() <= t {
            self.meters.resize(t + 1, None);
        }
        self.meters[t] = Some(m);
    }

    /// Entry `t`'s metrics.
    pub(super) fn meter(&self, t: u32) -> Option<&crate::metrics::TenantMeter> {
        self.meters.get(t as usize).and_then(Option::as_deref)
    }

    /// One more holder of an entry already held.
    pub(super) fn hold(&mut self, t: u32) {
        self.refs[t as usize] += 1;
    }

    /// A holder let go; an entry nobody holds may be given to another name.
    pub(super) fn release(&mut self, t: u32) {
        let r = &mut self.refs[t as usize];
        debug_assert!(*r > 0, "released a tenant not held");
        *r -= 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_table_reuses_the_entries_nobody_holds() {
        let mut t = Tenants::default();
        let held: Vec<u32> = (0..MAX_TENANTS_PER_THREAD)
            .map(|i| t.hold_name(format!("t{i}").as_bytes(), 1).unwrap().0)
            .collect();
        assert_eq!(t.hold_name(b"late", 1), None, "every entry is held");
        assert_eq!(t.hold_name(b"t7", 1), Some((held[7], false)), "a known name is found");
        t.release(held[3]);
        let late = t.hold_name(b"late", 1).unwrap();
        assert_eq!(late, (held[3], true));
        assert_eq!(t.names.len(), MAX_TENANTS_PER_THREAD);
    }
}
