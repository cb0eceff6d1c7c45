//! `storefn plot`: renders bench JSON (both accepted layouts) into a readable PNG.

use std::path::PathBuf;
use std::process::Command;

fn dir() -> PathBuf {
    let d = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("plot_render");
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn run_json(path: &str, layers: u32, threads: u32, ops: f64, mean: f64) -> String {
    format!(
        r#"{{"path":"{path}","layers":{layers},"threads":{threads},"batch":1,"requests":1000,"ops_per_sec":{ops},"mean_us":{mean},"p50_us":{mean},"p99_us":{mean},"p999_us":{mean},"cpu_us_per_op":3.0,"ios_per_op":{layers},"fallbacks":0}}"#
    )
}

/// Counts pixels of one exact colour in an RGB PNG.
fn count_colour(png_path: &PathBuf, rgb: [u8; 3]) -> (usize, usize) {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    assert_eq!((info.width, info.height), (1400, 1000));
    let px = info.color_type.samples();
    let data = &buf[..info.buffer_size()];
    let hits = data.chunks(px).filter(|p| p[..3] == rgb).count();
    let non_white = data.chunks(px).filter(|p| p[..3] != [255, 255, 255]).count();
    (hits, non_white)
}

#[test]
fn renders_lines_and_arrays_into_a_png_with_every_series() {
    let d = dir();
    // File 1: one object per line (what `kv bench --json` appends).
    let mut lines = String::new();
    for (p, base) in [("read", 14.0), ("xrp", 11.0)] {
        for l in 1..=5 {
            let mean = base * f64::from(l);
            lines += &run_json(p, l, 1, 1e6 / mean, mean);
            lines.push('\n');
        }
    }
    std::fs::write(d.join("layers.json"), lines).unwrap();
    // File 2: a JSON array of thread runs.
    let threads: Vec<String> = [1u32, 2, 4, 8, 16]
        .iter()
        .flat_map(|&t| {
            let t_f = f64::from(t.min(2));
            [
                run_json("read", 5, t, 14_000.0 * t_f, 70.0),
                run_json("xrp", 5, t, 20_000.0 * t_f, 55.0),
            ]
        })
        .collect();
    std::fs::write(d.join("threads.json"), format!("[{}]", threads.join(","))).unwrap();
    let out = d.join("fig.png");
    let _ = std::fs::remove_file(&out);
    let st = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .args(["plot"])
        .arg(d.join("layers.json"))
        .arg(d.join("threads.json"))
        .arg("-o")
        .arg(&out)
        .output()
        .unwrap();
    assert!(st.status.success(), "stderr: {}", String::from_utf8_lossy(&st.stderr));
    assert!(String::from_utf8_lossy(&st.stdout).contains("20 runs"));
    // Series colours of plot.rs's palette: "read" is first (blue), "xrp" second (orange).
    let (blue, non_white) = count_colour(&out, [31, 119, 180]);
    let (orange, _) = count_colour(&out, [255, 127, 14]);
    assert!(blue > 500 && orange > 500, "series pixels: blue {blue} orange {orange}");
    assert!(non_white > 20_000, "only {non_white} non-white pixels");
}

#[test]
fn bad_input_is_a_clear_error_naming_the_file() {
    let d = dir();
    let bad = d.join("bad.json");
    std::fs::write(&bad, r#"{"path":"read","layers":1}"#).unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .arg("plot")
        .arg(&bad)
        .args(["-o", d.join("bad.png").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(!st.status.success());
    let err = String::from_utf8_lossy(&st.stderr);
    assert!(err.contains("bad.json") && err.contains("missing field `threads`"), "{err}");
    let empty = d.join("empty.json");
    std::fs::write(&empty, "\n").unwrap();
    let st = Command::new(env!("CARGO_BIN_EXE_storefn"))
        .arg("plot")
        .arg(&empty)
        .args(["-o", d.join("empty.png").to_str().unwrap()])
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&st.stderr).contains("no bench runs"));
}
