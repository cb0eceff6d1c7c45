//! `storefn attack`: the server-attack measurement from the command line, as JSON.

use std::process::Command;

#[test]
fn attack_reports_each_attack_it_ran_as_json() {
    let dir = std::env::temp_dir().join(format!("storefn-attack-cli-{}", std::process::id()));
    let out = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["attack", "--rounds", "1", "--reads", "20", "--json"])
        .args(["--only", "stat_flood", "--only", "connection_flood", "--dir"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["bench"], "server_attacks");
    let attacks = v["attacks"].as_array().unwrap();
    let names: Vec<&str> = attacks.iter().map(|a| a["attack"].as_str().unwrap()).collect();
    assert_eq!(names, ["stat_flood", "connection_flood"]);
    for a in attacks {
        assert!(a["idle_p99_us"].as_f64().unwrap() > 0.0, "{a}");
        assert!(a["ratio"].as_f64().unwrap().is_finite(), "{a}");
        assert!(a["attacker_ops"].as_u64().unwrap() > 0, "{a}");
    }
    assert!(!dir.exists(), "the scratch directory is removed");
}

#[test]
fn an_unknown_attack_is_named_in_the_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["attack", "--only", "teleport"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--only teleport") && err.contains("cpu_flood"), "{err}");
}
