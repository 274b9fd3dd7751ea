//! A temporary project: a rag.toml pointing at the repository's models, a copy of the
//! fixtures, and a `rag` command with a cleared environment.

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use tempfile::TempDir;

/// A server the test started: killed and reaped when the test ends, a failed one included.
pub struct Started(pub std::process::Child);

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nothing listens on now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free loopback port")
}

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub struct Project {
    pub dir: TempDir,
}

impl Project {
    /// An empty project whose rag.toml uses the repository's models.
    pub fn empty() -> Project {
        let dir = tempfile::tempdir().expect("temp dir");
        let models = repo().join("models");
        let config = format!(
            "[embed]\nmodel = {:?}\ntokenizer_dir = {:?}\nort_lib = {:?}\n\n[llm]\nmodel = {:?}\nmax_tokens = 48\n",
            models.join("all-MiniLM-L6-v2-int8.onnx"),
            models.join("minilm"),
            models.join("libonnxruntime.so.1.31.1"),
            models.join("SmolLM2-135M-Instruct.Q4_1.gguf"),
        );
        std::fs::write(dir.path().join("rag.toml"), config).expect("write rag.toml");
        Project { dir }
    }

    /// A project with fixtures/docs copied to docs/.
    pub fn with_docs() -> Project {
        let p = Project::empty();
        copy_dir(&repo().join("fixtures/docs"), &p.path().join("docs"));
        p
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes `docs/NAME` (creating docs/), for tests that build their own documents.
    pub fn doc(&self, name: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = self.path().join("docs").join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, content).unwrap();
        path
    }

    pub fn rag(&self) -> Command {
        let mut cmd = Command::cargo_bin("rag").expect("the rag binary");
        // No user model folder: a generator installed for the user (`make install`) must not
        // change which one `auto` routes to in a test.
        cmd.current_dir(self.path())
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("XDG_DATA_HOME", self.path().join(".no-user-data"))
            // The same threads for every run: with `llm.threads = 0` a busy machine gives a
            // run fewer (engine::load::fit), other threads split the sums otherwise, and tests
            // that compare two answers byte for byte (prompt cache, batch, speculation) saw a
            // near tie flip with an eval beside them. A test may still set its own.
            .env("RAG_LLM_THREADS", "2")
            .env("RAG_LLM_THREADS_BATCH", "2");
        cmd
    }

    /// Runs `rag ARGS` and returns (exit code, stdout, stderr).
    pub fn run(&self, args: &[&str]) -> (i32, String, String) {
        self.run_env(&[], args)
    }

    /// [`Project::run`] with environment variables set.
    pub fn run_env(&self, env: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
        let out = self
            .rag()
            .envs(env.iter().copied())
            .args(args)
            .output()
            .expect("run rag");
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    pub fn json(&self, args: &[&str]) -> serde_json::Value {
        self.json_env(&[], args)
    }

    /// [`Project::json`] with environment variables set.
    pub fn json_env(&self, env: &[(&str, &str)], args: &[&str]) -> serde_json::Value {
        let (code, out, err) = self.run_env(env, args);
        assert!(
            code == 0 || code == 7,
            "rag {args:?} exited {code}\nstdout: {out}\nstderr: {err}"
        );
        serde_json::from_str(out.trim())
            .unwrap_or_else(|e| panic!("rag {args:?}: not JSON ({e}): {out}"))
    }

    pub fn ingest(&self) -> serde_json::Value {
        self.json(&["ingest", "--json", "docs"])
    }
}

/// Every file below `dir` (hidden ones too), relative to it, sorted.
pub fn files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// The `path` of every hit of a `rag search --json` result, in rank order.
pub fn hit_paths(v: &serde_json::Value) -> Vec<String> {
    v["hits"]
        .as_array()
        .expect("hits")
        .iter()
        .map(|h| h["path"].as_str().expect("path").to_string())
        .collect()
}
