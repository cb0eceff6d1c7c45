//! 512 B nodes on a 4 KiB-logical-block device: the engine widens every read to the 4 KiB block
//! that holds the node and points `data` at it. Needs root (loop device + mount); skips otherwise
//! and always tears down what it set up.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use storefn_io::{Engine, EngineConfig, IoMode};

/// Undoes the set-up in reverse order on drop, whatever happened.
#[derive(Default)]
struct Setup {
    image: Option<PathBuf>,
    loopdev: Option<String>,
    mnt: Option<PathBuf>,
    mounted: bool,
}

impl Drop for Setup {
    fn drop(&mut self) {
        if let (true, Some(m)) = (self.mounted, &self.mnt) {
            // A just-closed file can keep the mount busy for a moment: retry briefly.
            for _ in 0..50 {
                let ok = Command::new("umount").arg(m).status().is_ok_and(|s| s.success());
                if ok {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
        }
        if let Some(m) = &self.mnt {
            let _ = std::fs::remove_dir(m);
        }
        if let Some(d) = &self.loopdev {
            let _ = Command::new("losetup").arg("-d").arg(d).status();
        }
        if let Some(i) = &self.image {
            let _ = std::fs::remove_file(i);
        }
    }
}

fn run(cmd: &mut Command) -> Option<String> {
    let out = cmd.output().ok()?;
    if !out.status.success() {
        common::skip(&format!("{cmd:?} failed: {}", String::from_utf8_lossy(&out.stderr)));
        return None;
    }
    Some(String::from_utf8_lossy(&out.stdout).trim().to_owned())
}

fn mount_4k(s: &mut Setup) -> Option<PathBuf> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        common::skip("needs root for losetup/mount");
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let image = dir.join(format!("sector4k-{}.img", std::process::id()));
    std::fs::write(&image, b"").ok()?;
    s.image = Some(image.clone());
    std::fs::File::options().write(true).open(&image).ok()?.set_len(64 << 20).ok()?;
    let dev =
        run(Command::new("losetup").args(["-f", "--show", "--sector-size", "4096"]).arg(&image))?;
    s.loopdev = Some(dev.clone());
    run(Command::new("mkfs.ext4").args(["-q", "-F", "-b", "4096"]).arg(&dev))?;
    let mnt = dir.join(format!("sector4k-{}.mnt", std::process::id()));
    std::fs::create_dir_all(&mnt).ok()?;
    s.mnt = Some(mnt.clone());
    run(Command::new("mount").arg(&dev).arg(&mnt))?;
    s.mounted = true;
    Some(mnt)
}

#[test]
fn small_nodes_on_4k_sector_device_are_widened_to_the_block() {
    let mut setup = Setup::default();
    let Some(mnt) = mount_4k(&mut setup) else { return };
    let lists = random_lists(31, 3000, 60, 200);
    let path = mnt.join("lists");
    std::fs::write(&path, &lists.bytes).unwrap();
    let mut e = Engine::new(EngineConfig::default()).unwrap();
    let id = e.open(&path, IoMode::Direct).unwrap();
    assert_eq!(e.file_align(id), Some(4096), "loop device with 4 KiB logical blocks");
    let mut walker = list_walker();
    for &head in &lists.heads {
        let mut scratch = [0u8; 16];
        e.read_xrp(id, head, 16, &mut walker, &mut scratch).unwrap();
        assert_eq!((get_u64(&scratch, 0), get_u64(&scratch, 8)), walk_list(&lists.bytes, head));
    }
    let tree = random_tree(32, 2000, 8);
    let tpath = mnt.join("tree");
    std::fs::write(&tpath, &tree.bytes).unwrap();
    let tid = e.open(&tpath, IoMode::Direct).unwrap();
    for (&k, &v) in tree.map.iter().step_by(37) {
        let mut at = tree.root;
        let mut got = None;
        let mut buf = [0u8; NODE];
        // One hop at a time with plain reads (the KV store's `uring` path).
        for _ in 0..tree.depth {
            e.read(tid, at, &mut buf).unwrap();
            match node_step(&buf, k) {
                Ok(child) => at = child,
                Err(found) => {
                    got = found;
                    break;
                }
            }
        }
        assert_eq!(got, Some(v));
    }
    drop(e);
}
