//! docs/FORMAT.md's token file (the server's policy, not the wire's): the documented example
//! and options parse as documented.

const DOC: &str = include_str!("../../../docs/FORMAT.md");

/// Rows of the table under `heading` (storefn-testkit's reader of FORMAT.md tables).
fn rows(heading: &str) -> Vec<Vec<String>> {
    storefn_testkit::doc_table_rows(DOC, heading)
}

#[test]
fn the_token_file_example_and_options_parse_as_documented() {
    use storefn_server::limits::DEFAULT_GROW_QUOTA;
    use storefn_server::{Access, Scope};
    let start = DOC.find("\n### Token file\n").expect("FORMAT.md documents the token file");
    let section = &DOC[start..];
    let section = &section[..section[1..].find("\n### ").unwrap_or(section.len())];
    // The example is the section's last code block.
    let example = section.rsplit("```").nth(1).expect("an example block");
    let dir = std::env::temp_dir().join(format!("storefn-tokdoc-{}", std::process::id()));
    std::fs::write(&dir, example).unwrap();
    let toks = storefn_server::load_tokens(&dir);
    std::fs::remove_file(&dir).unwrap();
    let scopes: Vec<Scope> = toks.unwrap().iter().map(|t| Scope::of(t).unwrap()).collect();
    assert_eq!(scopes[0], Scope::default());
    assert_eq!(scopes[1].write_quota, Some(64 << 30));
    assert_eq!(scopes[1].insn_budget, Some(64 << 10));
    assert_eq!(
        (scopes[2].access, scopes[2].dirs.clone()),
        (Access::ReadOnly, vec!["db".to_string(), "shared/tables".to_string()])
    );
    // Every option of the table is one the parser knows, and the stated defaults are the code's.
    for row in rows("### Token file") {
        for opt in row[0].split(" / ") {
            let example = opt.replace("SUB", "d").replace("SIZE", "1K").replace("=N", "=4096");
            assert!(Scope::parse(&[example.as_str()]).is_ok(), "{opt}");
        }
    }
    assert_eq!(DEFAULT_GROW_QUOTA, 1 << 30);
    assert!(section.contains("| `1G` |"));
}
