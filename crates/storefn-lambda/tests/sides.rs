//! Both sides run the same function object and return the same bytes; the dispatcher mixes
//! them freely. The server side here is `RemoteSide` over an in-process transport (a second
//! engine and instance, built from the ELF bytes the transport was handed, run by the
//! interpreter while the local side uses the JIT); storefn-server's client is the real one.

use std::os::unix::fs::FileExt;
use std::path::PathBuf;

use storefn_io::IoMode;
use storefn_lambda::bench::ensure_data;
use storefn_lambda::{
    DispatchConfig, Dispatcher, LambdaError, LambdaProg, LambdaTransport, LocalFile, LocalSide,
    Profiling, RemoteSide, Side, SideKind, Workload,
};
use storefn_vm::{Engine, Instance};

/// "Serves" the files under `dir`, with the one program it was sent.
struct InProcess {
    dir: PathBuf,
    open: Option<(String, LocalFile)>,
    inst: Option<Instance>,
}

impl LambdaTransport for InProcess {
    type Handle = ();

    fn load(&mut self, prog: &LambdaProg) -> Result<(), LambdaError> {
        // Only the ELF bytes cross: the "server" verifies and prepares its own instance.
        let sent = prog.elf().to_vec();
        self.inst = Some(LambdaProg::from_elf(prog.name(), &sent, None).instance(Engine::Interp)?);
        Ok(())
    }

    fn lambda(
        &mut self,
        file: &str,
        (): &(),
        off: u64,
        len: u64,
        out: &mut [u8],
    ) -> Result<usize, LambdaError> {
        if self.open.as_ref().is_none_or(|(f, _)| f != file) {
            self.open =
                Some((file.to_string(), LocalFile::open(&self.dir.join(file), IoMode::Buffered)?));
        }
        let (_, f) = self.open.as_mut().unwrap();
        let inst = self.inst.as_mut().expect("load before lambda");
        f.pread_lambda(off, len, inst, out).map(|(n, _)| n)
    }
}

fn dir(test: &str) -> PathBuf {
    let d =
        std::env::temp_dir().join(format!("storefn-lambda-sides-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn local_and_server_sides_return_the_same_bytes_under_the_dispatcher() {
    let d = dir("mixed");
    for w in [Workload::Stats64, Workload::Knn, Workload::Grep, Workload::TpchQ6] {
        let size = if w == Workload::TpchQ6 { 20 * 40960 } else { 1 << 20 };
        let path = ensure_data(&d, w, size, 11).unwrap();
        let prog = LambdaProg::from_elf(w.prog_name(), storefn_progs::must(w.prog_name()), None);
        let mut local = LocalSide {
            file: LocalFile::open(&path, IoMode::Buffered).unwrap(),
            prog: prog.instance(Engine::Jit).unwrap(),
        };
        let name = path.file_name().unwrap().to_str().unwrap();
        let mut server =
            RemoteSide::new(InProcess { dir: d.clone(), open: None, inst: None }, name, &prog)
                .unwrap();
        // λ-IO's fixed profiling with a short window: both sides run many requests.
        let cfg = DispatchConfig {
            profiling: Profiling::Fixed { window: 20, probes: 5 },
            ..DispatchConfig::default()
        };
        let mut disp = Dispatcher::new(cfg);
        let raw = std::fs::File::open(&path).unwrap();
        let unit = w.unit_bytes();
        let len = (65536 / unit).max(1) * unit;
        let records = local.file.size_bytes() / unit;
        let (mut ran_local, mut ran_server) = (0, 0);
        for i in 0..60u64 {
            let off = (i * 7 % (records - len / unit)) * unit;
            let cap = w.out_cap(len as usize);
            let mut got = vec![0u8; cap];
            let (side, run) = disp.run(&mut local, &mut server, off, len, &mut got).unwrap();
            let mut input = vec![0u8; len as usize];
            raw.read_exact_at(&mut input, off).unwrap();
            let mut want = vec![0u8; cap];
            let n = w.native(&input, &mut want);
            assert_eq!(run.out_bytes, n, "{w} on {side:?} at {off}");
            assert_eq!(got[..n], want[..n], "{w} on {side:?} at {off}");
            match side {
                SideKind::Local => ran_local += 1,
                SideKind::Server => ran_server += 1,
            }
        }
        assert!(ran_local >= 5 && ran_server >= 5, "{w}: local {ran_local} server {ran_server}");
        // And side by side on one range.
        let mut a = vec![0u8; w.out_cap(len as usize)];
        let mut b = a.clone();
        let ra = local.run(unit, len, &mut a).unwrap();
        let rb = server.run(unit, len, &mut b).unwrap();
        assert_eq!((ra.out_bytes, &a[..ra.out_bytes]), (rb.out_bytes, &b[..rb.out_bytes]), "{w}");
    }
    std::fs::remove_dir_all(&d).unwrap();
}
