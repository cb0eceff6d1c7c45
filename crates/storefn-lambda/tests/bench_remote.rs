//! The remote bench harness end to end on loopback: a minimal in-test λ server (TCP, one
//! thread per connection, its own engine and instance built from the ELF bytes it is sent),
//! the delay proxy in front of it, and the sweep of (workload, condition, RTT, where). The
//! real transport is storefn-server's client; this one only has to move the same bytes.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::thread;

use storefn_io::IoMode;
use storefn_lambda::bench::{BenchConfig, Condition};
use storefn_lambda::bench_remote::{run_remote, RemoteBenchConfig};
use storefn_lambda::{
    DispatchConfig, LambdaError, LambdaProg, LambdaTransport, LocalFile, Where, Workload,
};
use storefn_vm::Engine;

/// Test wire: LOAD = `u32 elf_len, elf` -> `u8 0`; LAMBDA = `u16 name_len, name, u64 off,
/// u64 len, u32 out_cap` -> `u64 n` (u64::MAX: failed), then n output bytes.
fn serve(mut s: TcpStream, dir: &Path) {
    s.set_nodelay(true).unwrap();
    let mut u32b = [0u8; 4];
    if s.read_exact(&mut u32b).is_err() {
        return;
    }
    let mut elf = vec![0u8; u32::from_le_bytes(u32b) as usize];
    s.read_exact(&mut elf).unwrap();
    let mut inst = LambdaProg::from_elf("sent", &elf, None).instance(Engine::Jit).unwrap();
    s.write_all(&[0]).unwrap();
    let mut file: Option<(String, LocalFile)> = None;
    loop {
        let mut u16b = [0u8; 2];
        if s.read_exact(&mut u16b).is_err() {
            return;
        }
        let mut name = vec![0u8; usize::from(u16::from_le_bytes(u16b))];
        let mut hdr = [0u8; 20];
        s.read_exact(&mut name).unwrap();
        s.read_exact(&mut hdr).unwrap();
        let name = String::from_utf8(name).unwrap();
        let off = u64::from_le_bytes(hdr[..8].try_into().unwrap());
        let len = u64::from_le_bytes(hdr[8..16].try_into().unwrap());
        let cap = u32::from_le_bytes(hdr[16..].try_into().unwrap()) as usize;
        if file.as_ref().is_none_or(|(n, _)| *n != name) {
            file =
                Some((name.clone(), LocalFile::open(&dir.join(&name), IoMode::Buffered).unwrap()));
        }
        let mut out = vec![0u8; cap];
        let f = &mut file.as_mut().unwrap().1;
        match f.pread_lambda(off, len, &mut inst, &mut out) {
            Ok((n, _)) => {
                // One write per reply: two small ones would meet Nagle and a delayed ACK.
                let mut reply = (n as u64).to_le_bytes().to_vec();
                reply.extend_from_slice(&out[..n]);
                s.write_all(&reply).unwrap();
            }
            Err(_) => s.write_all(&u64::MAX.to_le_bytes()).unwrap(),
        }
    }
}

struct Tcp {
    s: TcpStream,
    addr: SocketAddr,
}

impl Tcp {
    fn err(
        &self,
        file: &str,
        e: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> LambdaError {
        LambdaError::Remote { server: self.addr.to_string(), file: file.into(), source: e.into() }
    }
}

impl LambdaTransport for Tcp {
    type Handle = ();

    fn load(&mut self, prog: &LambdaProg) -> Result<(), LambdaError> {
        let mut msg = (prog.elf().len() as u32).to_le_bytes().to_vec();
        msg.extend_from_slice(prog.elf());
        self.s.write_all(&msg).map_err(|e| self.err(prog.name(), e))?;
        let mut ack = [1u8];
        self.s.read_exact(&mut ack).map_err(|e| self.err(prog.name(), e))?;
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
        let mut msg = (file.len() as u16).to_le_bytes().to_vec();
        msg.extend_from_slice(file.as_bytes());
        msg.extend_from_slice(&off.to_le_bytes());
        msg.extend_from_slice(&len.to_le_bytes());
        msg.extend_from_slice(&(out.len() as u32).to_le_bytes());
        self.s.write_all(&msg).map_err(|e| self.err(file, e))?;
        let mut nb = [0u8; 8];
        self.s.read_exact(&mut nb).map_err(|e| self.err(file, e))?;
        let n = u64::from_le_bytes(nb);
        if n == u64::MAX {
            return Err(self.err(file, "the server's function failed"));
        }
        let n = n as usize;
        self.s.read_exact(&mut out[..n]).map_err(|e| self.err(file, e))?;
        Ok(n)
    }
}

#[test]
fn sweep_through_the_delay_proxy() {
    let dir = std::env::temp_dir().join(format!("storefn-lambda-remote-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let workloads = vec![Workload::Stats64, Workload::Knn];
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let server = l.local_addr().unwrap();
    let d = dir.clone();
    let n_conns = workloads.len();
    let srv = thread::spawn(move || {
        let hs: Vec<_> = (0..n_conns)
            .map(|_| {
                let (s, _) = l.accept().unwrap();
                let d = d.clone();
                thread::spawn(move || serve(s, &d))
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    });
    let cfg = RemoteBenchConfig {
        base: BenchConfig {
            dir: dir.clone(),
            workloads,
            conditions: vec![Condition::Cold, Condition::Warm],
            requests: 20,
            request_bytes: 64 << 10,
            file_bytes: 2 << 20,
            seed: 3,
            engine: Engine::Jit,
        },
        server,
        served_prefix: String::new(),
        rtts_us: vec![0, 3000],
        changes: true,
        dispatch: DispatchConfig::default(),
    };
    let rows = run_remote(
        &cfg,
        |addr| {
            let s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            Ok(Tcp { s, addr })
        },
        |r| {
            eprintln!(
                "{} {} {} mean {:.0} p50 {:.0} server_share {:.2}",
                r.workload, r.condition, r.r#where, r.us_per_request, r.p50_us, r.server_share
            );
        },
    )
    .unwrap();
    srv.join().unwrap();
    // Per workload: 2 RTTs x (cold, warm, cold->warm, warm->cold) + the RTT rise = 9
    // conditions x 3 sides.
    assert_eq!(rows.len(), 2 * 9 * 3);
    let conds: Vec<&str> = rows
        .iter()
        .filter(|r| r.workload == Workload::Knn && r.r#where == Where::Auto)
        .map(|r| r.condition.as_str())
        .collect();
    assert_eq!(
        conds,
        [
            "cold-rtt0",
            "warm-rtt0",
            "cold->warm-rtt0",
            "warm->cold-rtt0",
            "cold-rtt3000",
            "warm-rtt3000",
            "cold->warm-rtt3000",
            "warm->cold-rtt3000",
            "warm-rtt0->3000"
        ]
    );
    for r in &rows {
        assert_eq!(r.requests, 20);
        assert!(r.us_per_request > 0.0);
        match r.r#where {
            Where::Local => assert_eq!(r.server_share, 0.0),
            Where::Server => assert_eq!(r.server_share, 1.0),
            Where::Auto => assert!((0.0..=1.0).contains(&r.server_share)),
        }
        // The proxy holds every byte for the RTT: no server request can beat it.
        if r.r#where == Where::Server && r.condition.ends_with("-rtt3000") {
            assert!(r.p50_us >= 3000.0, "{r:?}");
        }
        // Every round ran every side; the halves (10 requests each) average to the row.
        assert_eq!(r.round_us.len(), 12, "{r:?}");
        assert!(r.round_us.iter().all(|&u| u > 0.0), "{r:?}");
        let halves = (r.half_us[0] + r.half_us[1]) / 2.0;
        assert!((halves - r.us_per_request).abs() <= 1e-6 * r.us_per_request, "{r:?}");
    }
    // The RTT rise shows in the server's second half.
    for r in rows.iter().filter(|r| r.condition == "warm-rtt0->3000" && r.r#where == Where::Server)
    {
        assert!(r.half_us[1] >= 3000.0 && r.half_us[0] < r.half_us[1], "{r:?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
