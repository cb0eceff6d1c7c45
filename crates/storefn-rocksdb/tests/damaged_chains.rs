//! A damaged data block on every chain path: the host's checksum check (local chains), the
//! function's own CRC-32C (local with `verify_in_function`, and pushed down), and rpc-read's
//! walk. Each Get answers what RocksDB answers from an undamaged twin, or fails naming the
//! damaged file; none answers a wrong value.

mod support;

use storefn_rocksdb::remote::{RemoteConfig, RemoteDb, RemotePath};
use storefn_rocksdb::{Db, Lookup, RocksError, Source, XrpConfig, XrpDb};
use storefn_server::{Server, ServerConfig};
use storefn_wire::{Client, ClientConfig};
use support::{build_with, key, rocksdb_gets, TempDir};

type Get<'a> = Box<dyn FnMut(&[u8]) -> Result<(Lookup, Source), RocksError> + 'a>;

/// Checks every answer; returns the errors' messages.
fn check(
    name: &str,
    mut get: Get<'_>,
    keys: &[Vec<u8>],
    want: &[Option<Vec<u8>>],
    sst: &str,
) -> Vec<String> {
    let mut errors = Vec::new();
    for (k, w) in keys.iter().zip(want) {
        match get(k) {
            Ok((Lookup::Value(v), _)) => assert_eq!(Some(v), *w, "{name}"),
            Ok((Lookup::NotFound, _)) => assert_eq!(None, *w, "{name}"),
            Ok((Lookup::Fallback(r), _)) => panic!("{name}: fallback {r:?}"),
            Err(e @ (RocksError::Checksum { .. } | RocksError::Corrupt { .. })) => {
                assert!(e.to_string().contains(sst), "{name}: {e}");
                errors.push(e.to_string());
            }
            Err(e) => panic!("{name}: unexpected error {e}"),
        }
    }
    assert!(!errors.is_empty(), "{name}: the damaged block was never read");
    errors
}

#[test]
fn a_damaged_data_block_is_an_error_naming_its_file_on_every_chain_path() {
    let twin = TempDir::new("rocks-chains-twin");
    build_with(&twin.0, 6, 2_000, 4096, "no", "crc32c");
    let keys: Vec<Vec<u8>> = (0..2_000).map(key).collect();
    let want = rocksdb_gets(&twin.0, &keys);
    let d = TempDir::new("rocks-chains-damaged");
    let dir = d.0.join("db");
    std::fs::create_dir_all(&dir).unwrap();
    build_with(&dir, 6, 2_000, 4096, "no", "crc32c");
    let sst = Db::open(&dir).unwrap().levels()[0][0].table.path().to_path_buf();
    let mut b = std::fs::read(&sst).unwrap();
    b[100] ^= 0x40; // inside the first data block
    std::fs::write(&sst, b).unwrap();
    let name = sst.file_name().unwrap().to_str().unwrap().to_string();

    let db = Db::open(&dir).unwrap();
    for verify_in_function in [false, true] {
        let cfg = XrpConfig { verify_in_function, index_cached: false, ..XrpConfig::default() };
        let mut x = XrpDb::new(&db, cfg).unwrap();
        let get: Get<'_> = Box::new(|k| x.get(&db, k));
        let e = check(&format!("xrp {verify_in_function}"), get, &keys, &want, &name);
        // The function's own check names itself; the host's is a checksum mismatch.
        let by_function = e.iter().all(|m| m.contains("storage function"));
        assert_eq!(by_function, verify_in_function, "{e:?}");
    }
    let server = Server::start("127.0.0.1:0", ServerConfig::new(&d.0)).unwrap();
    let addr = server.local_addr().to_string();
    for path in [RemotePath::Pushdown, RemotePath::RpcRead] {
        let c = Client::connect(&addr, ClientConfig::default()).unwrap();
        let cfg = RemoteConfig { path, cache_fraction: 0.01, ..RemoteConfig::default() };
        let mut r = RemoteDb::open(c, &addr, "db", cfg).unwrap();
        let get: Get<'_> = Box::new(|k| r.get(k));
        let e = check(&format!("{path:?}"), get, &keys, &want, &name);
        let by_function = e.iter().all(|m| m.contains("storage function"));
        assert_eq!(by_function, path == RemotePath::Pushdown, "{e:?}");
    }
    server.stop();
}
