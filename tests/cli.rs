//! End-to-end tests of the `rag` binary with the real models. One test binary (modules under
//! tests/cli/), so the large link happens once.

#[path = "cli/support.rs"]
mod support;

#[path = "cli/ask.rs"]
mod ask;
#[path = "cli/browser.rs"]
mod browser;
#[path = "cli/dist.rs"]
mod dist;
#[path = "cli/errors.rs"]
mod errors;
#[path = "cli/eval.rs"]
mod eval;
#[path = "cli/faults.rs"]
mod faults;
#[path = "cli/hostile.rs"]
mod hostile;
#[path = "cli/hub.rs"]
mod hub;
#[path = "cli/ingest.rs"]
mod ingest;
#[path = "cli/install.rs"]
mod install;
#[path = "cli/mcp.rs"]
mod mcp;
#[path = "cli/models.rs"]
mod models;
#[path = "cli/object_storage.rs"]
mod object_storage;
#[path = "cli/project.rs"]
mod project;
#[path = "cli/prompt.rs"]
mod prompt;
#[path = "cli/remote.rs"]
mod remote;
#[path = "cli/retrieval.rs"]
mod retrieval;
#[path = "cli/safety.rs"]
mod safety;
#[path = "cli/serve.rs"]
mod serve;
#[path = "cli/speculate.rs"]
mod speculate;
