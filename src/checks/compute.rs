//! The checks of where llama.cpp computes: the threads it runs on, the GPU backend this build
//! has, the devices it found with their memory, and the layers each local generator puts
//! on them.

use super::{check, Check, Status};
use crate::config::{Backend, Settings, Tier};
use crate::llm::device::{self, Device, BACKEND};

pub(super) fn compute(s: &Settings, out: &mut Vec<Check>) {
    out.push(threads(s));
    let Some(backend) = BACKEND else {
        out.push(check(
            "gpu",
            Status::Ok,
            "this build computes on the CPU; a GPU build: `make build GPU=vulkan` or `GPU=cuda` (docs/gpu.md)",
        ));
        return;
    };
    let devices = device::devices();
    if devices.is_empty() {
        out.push(check(
            "gpu",
            Status::Warn,
            format!(
                "a {backend} build, but llama.cpp found no {backend} device: the generators answer on the CPU ({})",
                no_device_hint(backend)
            ),
        ));
        return;
    }
    let layers = offloads(s);
    out.push(check(
        "gpu",
        Status::Ok,
        format!(
            "{backend}: {}; {}",
            devices.iter().map(said).collect::<Vec<_>>().join(", "),
            if layers.is_empty() {
                "no local generator".into()
            } else {
                layers.join(", ")
            }
        ),
    ));
}

/// `decode 2 and prefill 2 threads (physical cores: 2, logical: 4)`
fn threads(s: &Settings) -> Check {
    let (t, tb) = (
        crate::config::threads(s.llm.threads),
        crate::config::threads(s.llm.threads_batch),
    );
    check(
        "threads",
        Status::Ok,
        format!(
            "llama.cpp decodes on up to {t} and prefills on up to {tb} threads (this machine: {} physical cores, {} CPUs this process may use){}",
            num_cpus::get_physical(),
            num_cpus::get(),
            if s.llm.threads == 0 || s.llm.threads_batch == 0 {
                "; llm.threads = 0 takes the physical cores rag may use, less those other processes keep busy when a question comes"
            } else {
                ""
            }
        ),
    )
}

fn said(d: &Device) -> String {
    format!(
        "{} {} ({} MiB, {} MiB free)",
        d.name,
        d.description,
        d.memory_total >> 20,
        d.memory_free >> 20
    )
}

/// `small 31/31 layers` for each local generator whose file is there, from its GGUF header.
fn offloads(s: &Settings) -> Vec<String> {
    let mut said = Vec::new();
    for tier in Tier::ALL {
        let (backend, path) = s.generator(tier);
        if backend != Backend::Local || !path.is_file() {
            continue;
        }
        let Some(blocks) = crate::gguf::read(path).ok().and_then(|m| m.block_count) else {
            continue;
        };
        let want = device::requested(s.gpu_layers(tier), true);
        let (on, of) = device::offloaded(want, blocks.min(u32::MAX as u64) as u32);
        said.push(format!(
            "{} {on}/{of} layers ({})",
            tier.name(),
            s.gpu_layers(tier)
        ));
    }
    said
}

/// What to try when a GPU build finds no device.
fn no_device_hint(backend: &str) -> &'static str {
    match backend {
        "Vulkan" => "`vulkaninfo --summary` lists what the Vulkan loader sees; llama.cpp passes over CPU-type devices such as Mesa's lavapipe unless GGML_VK_VISIBLE_DEVICES names them",
        _ => "`nvidia-smi` lists what the driver sees; CUDA_VISIBLE_DEVICES may hide them",
    }
}
