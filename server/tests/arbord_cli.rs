//! The `arbord` binary refuses bad settings with a clear message. (Also makes
//! `cargo test --workspace` build `arbord` for the cross-crate tests.)

use std::process::Command;

#[test]
fn invalid_limits_are_refused_before_listening() {
    // A data limit larger than the frame limit can never be honoured.
    let output = Command::new(env!("CARGO_BIN_EXE_arbord"))
        .args([
            "--listen",
            "127.0.0.1:0",
            "--max-frame-bytes",
            "65536",
            "--max-data-bytes",
            "65536",
        ])
        .args([
            "--data-dir",
            &std::env::temp_dir()
                .join("arbord-cli-test")
                .to_string_lossy(),
        ])
        .output()
        .expect("arbord runs");
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("data limit"), "stderr: {stderr}");
    assert!(output.stdout.is_empty(), "nothing listened");
}

#[test]
fn help_names_every_documented_flag() {
    let output = Command::new(env!("CARGO_BIN_EXE_arbord"))
        .arg("--help")
        .output()
        .expect("arbord runs");
    let help = String::from_utf8_lossy(&output.stdout);
    for flag in [
        "--listen",
        "--data-dir",
        "--tick-ms",
        "--max-frame-bytes",
        "--max-connections",
        "--max-connections-per-ip",
        "--zk-listen",
    ] {
        assert!(help.contains(flag), "{flag} missing from --help");
    }
}
