//! Records the llama.cpp build (the llama-cpp-sys-2 version in Cargo.lock) so the prompt
//! cache can refuse KV state files written by another llama.cpp.

fn main() {
    println!("cargo:rerun-if-changed=Cargo.lock");
    let lock = std::fs::read_to_string("Cargo.lock").unwrap_or_default();
    let mut version = "unknown";
    let mut lines = lock.lines();
    while let Some(line) = lines.next() {
        if line.trim() == "name = \"llama-cpp-sys-2\"" {
            if let Some(v) = lines
                .next()
                .and_then(|l| l.trim().strip_prefix("version = "))
            {
                version = v.trim_matches('"');
            }
            break;
        }
    }
    // Not RAG_*: cargo also sets this in the environment of `cargo test` runs, and rag
    // refuses RAG_* variables it does not know.
    println!("cargo:rustc-env=BUILD_LLAMA_CPP_SYS=llama-cpp-sys-2 {version}");
}
