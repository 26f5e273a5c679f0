//! The README's client example is `examples/quickstart.rs`, verbatim, and it
//! runs against a real server.

use std::path::Path;
use std::process::Command;

use arbor_tests::TestServer;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
}

#[test]
fn the_readme_example_is_the_quickstart_example() {
    let readme = std::fs::read_to_string(workspace().join("README.md")).expect("README");
    let example =
        std::fs::read_to_string(workspace().join("examples/quickstart.rs")).expect("example");
    let start = readme.find("```rust\n").expect("README has a Rust example") + "```rust\n".len();
    let end = start + readme[start..].find("```").expect("closed code block");
    assert_eq!(
        &readme[start..end],
        example,
        "README and examples/quickstart.rs differ"
    );
}

#[test]
fn the_quickstart_example_runs_against_arbord() {
    let exe = std::env::current_exe().expect("test path");
    let example = exe
        .parent()
        .and_then(Path::parent)
        .expect("target/<profile>/deps")
        .join("examples/quickstart");
    assert!(
        example.exists(),
        "{} missing: `cargo test --workspace` builds examples",
        example.display()
    );
    let server = TestServer::start();
    let output = Command::new(&example)
        .env("ARBOR_SERVER", server.addr())
        .output()
        .expect("example runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "stdout: {stdout}\nstderr: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(stdout.contains("/app = \"v1\" (version 0"), "{stdout}");
    assert!(
        stdout.contains("registered as /app/worker-0000000000"),
        "{stdout}"
    );
    assert!(
        stdout.contains("watch fired: NodeDeleted /app/worker-0000000000"),
        "{stdout}"
    );
}
