//! Caps a process's CPU with a cgroup v1 `cpu` group (`cpu.cfs_quota_us` over
//! `cpu.cfs_period_us`): the bench's "weak device core" for the storage server. Needs root.
//! The group is removed on drop, after the process is moved back to the group it came from.

use crate::limits::MIN_CFS_QUOTA_US;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Where the cgroup v1 `cpu` controller is mounted.
pub const CPU_CGROUP_ROOT: &str = "/sys/fs/cgroup/cpu";

/// CFS period of a group capped to `percent` of one CPU, µs: the shortest whose quota is the
/// kernel's minimum (5 ms at 20%). The cap plays a weak device core, one that is slow all the
/// time; with the kernel's default 100 ms period a 20% cap is a full-speed core that stops
/// for up to 80 ms once its 20 ms are spent, and those stalls fell on one side's requests or
/// another's within a bench row (per-stretch ratios 0.36-4.8 in one row). With 5 ms the
/// stalls are at most 4 ms and every stretch of a row sees hundreds of periods.
#[must_use]
pub fn cfs_period_us(percent: u32) -> u64 {
    (MIN_CFS_QUOTA_US * 100).div_ceil(u64::from(percent.max(1)))
}

/// A live cap; dropping it removes the group.
#[derive(Debug)]
pub struct CpuCap {
    group: PathBuf,
    /// The process's group before the cap (relative to [`CPU_CGROUP_ROOT`]).
    home: PathBuf,
    pid: u32,
}

/// The process's `cpu` group from `/proc/PID/cgroup` (relative path, `/` for the root).
fn cpu_group_of(pid: u32) -> io::Result<PathBuf> {
    let s = fs::read_to_string(format!("/proc/{pid}/cgroup"))?;
    for line in s.lines() {
        let mut it = line.splitn(3, ':');
        let (_, ctrls, path) = (it.next(), it.next().unwrap_or(""), it.next().unwrap_or(""));
        if ctrls.split(',').any(|c| c == "cpu") {
            return Ok(PathBuf::from(path.trim_start_matches('/')));
        }
    }
    Err(io::Error::other(format!("/proc/{pid}/cgroup: no cgroup v1 cpu controller")))
}

fn write(path: &Path, v: &str) -> io::Result<()> {
    fs::write(path, v).map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))
}

impl CpuCap {
    /// Moves process `pid` (all its threads) into a new group allowed `percent` of one CPU.
    ///
    /// # Errors
    /// Not root, no cgroup v1 cpu controller, or `percent` not in 1..=100; nothing is left
    /// behind on error.
    pub fn new(pid: u32, percent: u32) -> io::Result<Self> {
        if !(1..=100).contains(&percent) {
            return Err(io::Error::other(format!("cpu cap {percent}%: not in 1..=100")));
        }
        let home = cpu_group_of(pid)?;
        let group = Path::new(CPU_CGROUP_ROOT).join(format!("storefn-lambda-cap-{pid}"));
        fs::create_dir(&group)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", group.display())))?;
        // From here on, drop removes the group.
        let cap = Self { group, home, pid };
        let period_us = cfs_period_us(percent);
        write(&cap.group.join("cpu.cfs_period_us"), &period_us.to_string())?;
        let quota = period_us * u64::from(percent) / 100;
        debug_assert!(quota >= MIN_CFS_QUOTA_US, "{percent}%: quota {quota} µs");
        write(&cap.group.join("cpu.cfs_quota_us"), &quota.to_string())?;
        write(&cap.group.join("cgroup.procs"), &pid.to_string())?;
        Ok(cap)
    }

    /// The group's directory.
    #[must_use]
    pub fn group(&self) -> &Path {
        &self.group
    }
}

impl Drop for CpuCap {
    fn drop(&mut self) {
        let home = Path::new(CPU_CGROUP_ROOT).join(&self.home).join("cgroup.procs");
        // The process may have exited; either way the group must end up empty to be removed.
        let _ = write(&home, &self.pid.to_string());
        if let Ok(tasks) = fs::read_to_string(self.group.join("tasks")) {
            for t in tasks.lines() {
                let _ = write(&home, t);
            }
        }
        let _ = fs::remove_dir(&self.group);
    }
}
