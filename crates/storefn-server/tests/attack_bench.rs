//! The attack measurement (`storefn attack`) runs every attack end to end and reports each
//! one's figures; its timing goals live in the benchmark's own runs, not here.

use storefn_server::attack::{run, to_json, AttackConfig, ATTACKS};

#[test]
fn every_attack_runs_and_is_reported() {
    let dir = std::env::temp_dir().join(format!("storefn-attack-test-{}", std::process::id()));
    let cfg = AttackConfig { dir: dir.clone(), rounds: 1, reads: 50, only: Vec::new() };
    let results = run(&cfg).unwrap();
    assert_eq!(results.iter().map(|r| r.attack).collect::<Vec<_>>(), ATTACKS);
    for r in &results {
        println!("{r:?}");
        assert!(r.idle_p99_us > 0.0 && r.attacked_p99_us > 0.0, "{r:?}");
        assert!(r.ratio.is_finite(), "{r:?}");
        assert!(r.attacker_ops > 0, "the attack {} did something: {r:?}", r.attack);
    }
    let json = to_json(&cfg, &results);
    for key in ["\"bench\":\"server_attacks\"", "\"idle_p99_us\"", "\"ratio\"", "\"cpu_flood\""] {
        assert!(json.contains(key), "{key} in {json}");
    }
    assert!(!dir.exists(), "the scratch directory is removed");
}
