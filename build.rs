//! Records the llama.cpp build (the llama-cpp-sys-2 version in Cargo.lock, and the ggml options
//! the Makefile hands it for this CPU: scripts/ggml-flags.sh) so the prompt cache can refuse KV
//! state files written by another llama.cpp: other kernels round differently, and a reused
//! prefix must give the answer a fresh prefill gives. A GPU build (feature `vulkan` or `cuda`)
//! names its backend there too.

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
    // The options llama-cpp-sys-2 forwards to CMake that change ggml's kernels.
    let mut options = Vec::new();
    for name in [
        "GGML_AVX512",
        "GGML_AVX512_VNNI",
        "GGML_AVX512_VBMI",
        "GGML_AVX512_BF16",
        "GGML_CPU_REPACK",
        "GGML_LLAMAFILE",
    ] {
        println!("cargo:rerun-if-env-changed={name}");
        if let Ok(value) = std::env::var(name) {
            options.push(format!("{name}={value}"));
        }
    }
    // A GPU backend computes differently again (and names itself in `rag --version`).
    for (feature, backend) in [
        ("CARGO_FEATURE_CUDA", "CUDA"),
        ("CARGO_FEATURE_VULKAN", "Vulkan"),
    ] {
        if std::env::var_os(feature).is_some() {
            options.insert(0, backend.to_string());
        }
    }
    if std::env::var_os("CARGO_FEATURE_CUDA").is_some() {
        // The CUDA build made from NVIDIA's wheels (scripts/gpu/cuda.sh) makes llama.cpp's
        // libraries shared: rag finds them beside itself, and cuBLAS in the toolkit.
        println!("cargo:rerun-if-env-changed=LLAMA_BUILD_SHARED_LIBS");
        println!("cargo:rerun-if-env-changed=CUDA_PATH");
        if std::env::var("LLAMA_BUILD_SHARED_LIBS").is_ok_and(|v| v == "1" || v == "ON") {
            println!("cargo:rustc-link-arg-bins=-Wl,-rpath,$ORIGIN");
            if let Ok(cuda) = std::env::var("CUDA_PATH") {
                println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{cuda}/lib");
            }
        }
    }
    let options = if options.is_empty() {
        String::new()
    } else {
        format!(" ({})", options.join(", "))
    };
    // Not RAG_*: cargo also sets this in the environment of `cargo test` runs, and rag
    // refuses RAG_* variables it does not know.
    println!("cargo:rustc-env=BUILD_LLAMA_CPP_SYS=llama-cpp-sys-2 {version}{options}");
}
