//! Shared by the tests that pin code constants to docs/FORMAT.md.

/// The text of FORMAT.md's section whose heading starts with `heading` (up to the next `## `).
pub fn format_section(heading: &str) -> String {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/FORMAT.md"))
        .unwrap();
    let section =
        doc.split(heading).nth(1).unwrap_or_else(|| panic!("FORMAT.md has no `{heading}`"));
    section.split("\n## ").next().unwrap().to_string()
}

/// Every (offset, field) has a table row starting `| offset |` that names `` `field` ``.
pub fn assert_rows(heading: &str, rows: &[(usize, &str)]) {
    let section = format_section(heading);
    for (offset, name) in rows {
        let row = format!("| {offset} |");
        assert!(
            section.lines().any(|l| l.starts_with(&row) && l.contains(&format!("`{name}`"))),
            "FORMAT.md `{heading}`: no row `{row} ... `{name}`"
        );
    }
}
