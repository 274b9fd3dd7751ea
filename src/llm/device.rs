//! Where llama.cpp computes: the GPU backend this build was compiled with (Cargo features
//! `vulkan`, `cuda`), the devices it found, and how many of a generator's layers go to them.
//!
//! A GPU build on a machine without a usable device keeps every layer on the CPU; nothing
//! here fails for want of a GPU.

use crate::config::Layers;

/// The GPU backend compiled into this binary, if any.
pub const BACKEND: Option<&str> = if cfg!(feature = "cuda") {
    Some("CUDA")
} else if cfg!(feature = "vulkan") {
    Some("Vulkan")
} else {
    None
};

/// A device llama.cpp can put layers on (never the CPU itself).
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    /// llama.cpp's name for it: `Vulkan0`, `CUDA0`.
    pub name: String,
    /// What the driver calls it: `NVIDIA GeForce RTX 4090`, `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub description: String,
    pub memory_total: u64,
    pub memory_free: u64,
}

/// The GPUs (and other accelerators) llama.cpp found; empty on a CPU build. Initialises the
/// llama.cpp backend, which enumerates them.
pub fn devices() -> Vec<Device> {
    if BACKEND.is_none() || super::backend().is_err() {
        return Vec::new();
    }
    use llama_cpp_2::LlamaBackendDeviceType as Kind;
    llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .filter(|d| !matches!(d.device_type, Kind::Cpu | Kind::Unknown))
        .map(|d| Device {
            name: d.name,
            description: d.description,
            memory_total: d.memory_total as u64,
            memory_free: d.memory_free as u64,
        })
        .collect()
}

/// The `n_gpu_layers` handed to llama.cpp for `layers`: `auto` is every layer (llama.cpp
/// caps the count at the model's) where a device is present, else none.
pub fn requested(layers: Layers, have_device: bool) -> u32 {
    match (layers, have_device) {
        (_, false) => 0,
        (Layers::Auto, true) => u32::MAX,
        (Layers::Count(n), true) => n,
    }
}

/// Layers on the GPU out of those a model of `n_layer` blocks has: llama.cpp counts the
/// output layer as one more (`offloaded 29/29 layers to GPU` for a 28-block model).
pub fn offloaded(requested: u32, n_layer: u32) -> (u32, u32) {
    let of = n_layer.saturating_add(1);
    (requested.min(of), of)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_offloads_every_layer_only_where_a_device_is() {
        assert_eq!(requested(Layers::Auto, false), 0);
        assert_eq!(requested(Layers::Count(12), false), 0);
        assert_eq!(offloaded(requested(Layers::Auto, true), 28), (29, 29));
        assert_eq!(offloaded(requested(Layers::Count(12), true), 28), (12, 29));
        assert_eq!(offloaded(requested(Layers::Count(0), true), 28), (0, 29));
    }

    #[test]
    fn a_cpu_build_lists_no_device() {
        if BACKEND.is_none() {
            assert!(devices().is_empty());
        }
    }
}
