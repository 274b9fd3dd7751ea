//! Resolution, provenance and validation, end to end over temporary projects.

use std::path::{Path, PathBuf};

use anyhow::Result;
use toml::Value;

use super::flags::{EmbedFlags, IndexFlags, ServeFlags};
use super::resolve::{leaves, resolve_with, OTHER_VARS};
use super::*;

fn run(file: Option<&str>, env: &[(&str, &str)], flags: Flags) -> Result<Settings> {
    let dir = tempfile::tempdir().unwrap();
    if let Some(text) = file {
        std::fs::write(dir.path().join("rag.toml"), text).unwrap();
    }
    let env: Env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    resolve_with(None, &flags, &env, dir.path(), None, None).map(|mut s| {
        // Make paths comparable across temp dirs.
        s.llm.model = s
            .llm
            .model
            .strip_prefix(dir.path())
            .map(Path::to_path_buf)
            .unwrap_or(s.llm.model);
        s
    })
}

#[test]
fn a_default_model_missing_from_the_project_comes_from_the_users_model_folder() {
    let project = tempfile::tempdir().unwrap();
    let user = tempfile::tempdir().unwrap();
    let small = crate::catalog::SMALL.path;
    std::fs::write(user.path().join(small), b"GGUF").unwrap();
    std::fs::create_dir(user.path().join("minilm")).unwrap();
    let at = |u: Option<&Path>| {
        resolve_with(
            None,
            &Flags::default(),
            &Env::new(),
            project.path(),
            u,
            None,
        )
        .unwrap()
    };
    let s = at(Some(user.path()));
    assert_eq!(s.llm.model, user.path().join(small));
    assert_eq!(s.embed.tokenizer_dir, user.path().join("minilm"));
    // Missing in both: the project's path stays, so the error names where rag looked first.
    assert_eq!(
        s.llm.large_model,
        project
            .path()
            .join(crate::catalog::default_path("llm.large_model").unwrap())
    );
    // The project's own models/ wins; a key set anywhere is never replaced.
    std::fs::create_dir(project.path().join("models")).unwrap();
    std::fs::write(project.path().join("models").join(small), b"GGUF").unwrap();
    assert_eq!(
        at(Some(user.path())).llm.model,
        project.path().join("models").join(small)
    );
    std::fs::remove_file(project.path().join("models").join(small)).unwrap();
    let env: Env = [("RAG_LLM_MODEL".to_string(), "mine.gguf".to_string())].into();
    let s = resolve_with(
        None,
        &Flags::default(),
        &env,
        project.path(),
        Some(user.path()),
        None,
    )
    .unwrap();
    assert_eq!(s.llm.model, project.path().join("mine.gguf"));
    assert_eq!(
        at(None).llm.model,
        project.path().join("models").join(small)
    );
}

#[test]
fn without_home_the_remote_state_comes_from_the_password_database_not_tmp() {
    let home = super::models::passwd_home().expect("this user has a passwd entry");
    assert!(home.is_absolute(), "{}", home.display());
    assert!(
        !home.starts_with(std::env::temp_dir()),
        "{}",
        home.display()
    );
}

#[test]
fn an_object_store_uri_is_kept_and_its_secrets_are_never_shown() {
    let file = "[index]\ndir = \"s3://bucket/team/idx\"\n[index.storage]\naws_access_key_id = \"AKIA1\"\naws_secret_access_key = \"hunter2\"\n";
    let env = [(
        "RAG_INDEX_STORAGE",
        "aws_region=eu-west-1, aws_session_token=tok",
    )];
    let s = run(Some(file), &env, Flags::default()).unwrap();
    assert_eq!(
        s.index.uri(),
        Some("s3://bucket/team/idx"),
        "not made relative"
    );
    assert_eq!(s.index.storage.0["aws_secret_access_key"], "hunter2");
    assert_eq!(
        s.index.storage.0["aws_region"], "eu-west-1",
        "env merges into the file's table"
    );
    let shown = s.to_toml();
    assert!(
        shown.contains("AKIA1") && shown.contains("eu-west-1"),
        "{shown}"
    );
    assert!(
        !shown.contains("hunter2") && !shown.contains("tok\""),
        "{shown}"
    );
    // The local state of a remote index is keyed by its URI; a folder's is the folder.
    let state = s.index.state_dir();
    assert!(state.ends_with(&blake3::hash(b"s3://bucket/team/idx").to_hex()[..16]));
    let local = run(None, &[], Flags::default()).unwrap();
    assert_eq!(local.index.state_dir(), local.index.dir);
    let bad = run(
        None,
        &[("RAG_INDEX_STORAGE", "no-equals-sign")],
        Flags::default(),
    );
    assert!(format!("{:#}", bad.unwrap_err()).contains("RAG_INDEX_STORAGE"));
}

#[test]
fn precedence_is_default_file_env_flag() {
    assert_eq!(run(None, &[], Flags::default()).unwrap().llm.n_ctx, 2048);
    let file = "[llm]\nn_ctx = 1024\ntop_p = 0.5\n";
    assert_eq!(
        run(Some(file), &[], Flags::default()).unwrap().llm.n_ctx,
        1024
    );
    let s = run(Some(file), &[("RAG_LLM_N_CTX", "512")], Flags::default()).unwrap();
    assert_eq!((s.llm.n_ctx, s.llm.top_p), (512, 0.5));
    let s = run(
        Some(file),
        &[("RAG_LLM_N_CTX", "512")],
        llm_flags(|l| l.n_ctx = Some(256)),
    )
    .unwrap();
    assert_eq!(s.llm.n_ctx, 256);
}

/// A flag layer with only `llm` flags, set by `f`.
fn llm_flags(f: impl FnOnce(&mut LlmFlags)) -> Flags {
    let mut flags = Flags::default();
    f(&mut flags.llm);
    flags
}

/// Every field of the flag layer is a settings key of the same type, and wins.
#[test]
fn every_flag_is_a_typed_settings_key() {
    let flags = Flags {
        index: IndexFlags {
            dir: Some("idx".into()),
        },
        embed: EmbedFlags {
            batch_size: Some(3),
        },
        retrieval: RetrievalFlags {
            top_k: Some(4),
            large_top_k: Some(4),
            mode: Some(Mode::Text),
            exact: Some(true),
            expand: None,
            rerank: None,
        },
        llm: LlmFlags {
            route: Some(Route::Large),
            model: Some("m.gguf".into()),
            max_tokens: Some(5),
            seed: Some(6),
            n_ctx: Some(700),
            threads: Some(1),
            threads_batch: Some(2),
            gpu_layers: Some(Layers::Count(3)),
            medium_gpu_layers: Some(Layers::Auto),
            large_gpu_layers: Some(Layers::Count(0)),
            temperature: Some(0.5),
            top_p: Some(0.25),
        },
        serve: ServeFlags {
            addr: Some("127.0.0.1:1".into()),
        },
    };
    let set = leaves(&flags.layer().unwrap());
    assert_eq!(set.len(), 19, "every field set: {set:?}");
    let s = run(None, &[], flags).unwrap();
    for k in &set {
        assert_eq!(s.sources[k], Source::Flag, "{k}");
    }
    assert!(s.index.dir.is_absolute() && s.index.dir.ends_with("idx"));
    assert_eq!((s.embed.batch_size, s.retrieval.top_k), (3, 4));
    assert_eq!(s.retrieval.large_top_k, 4);
    assert_eq!((s.retrieval.mode, s.retrieval.exact), (Mode::Text, true));
    assert_eq!(
        (s.llm.route, s.llm.model.clone()),
        (Route::Large, "m.gguf".into())
    );
    assert_eq!((s.llm.max_tokens, s.llm.seed, s.llm.n_ctx), (5, 6, 700));
    assert_eq!((s.llm.threads, s.llm.threads_batch), (1, 2));
    let layers = (
        s.llm.gpu_layers,
        s.llm.medium_gpu_layers,
        s.llm.large_gpu_layers,
    );
    assert_eq!(layers, (Layers::Count(3), Layers::Auto, Layers::Count(0)));
    assert_eq!((s.llm.temperature, s.llm.top_p), (0.5, 0.25));
    assert_eq!(s.serve.addr, "127.0.0.1:1");
}

#[test]
fn model_flag_is_a_route_or_a_file() {
    let pick = |s: &str| {
        let mut llm = LlmFlags::default();
        ModelChoice::parse(s).unwrap().apply(&mut llm);
        (llm.route, llm.model)
    };
    assert_eq!(pick("auto"), (Some(Route::Auto), None));
    assert_eq!(pick("x.gguf"), (Some(Route::Small), Some("x.gguf".into())));
    assert!(ModelChoice::parse("").is_err());
}

#[test]
fn relative_paths_follow_their_layer() {
    let s = run(Some("[llm]\nmodel = \"m/a.gguf\"\n"), &[], Flags::default()).unwrap();
    assert_eq!(s.llm.model, PathBuf::from("m/a.gguf"));
    let s = run(None, &[("RAG_LLM_MODEL", "/abs/b.gguf")], Flags::default()).unwrap();
    assert_eq!(s.llm.model, PathBuf::from("/abs/b.gguf"));
}

#[test]
fn bad_input_is_a_usage_error_naming_the_thing() {
    let e = run(Some("[llm]\nn_ctxx = 1\n"), &[], Flags::default()).unwrap_err();
    assert!(format!("{e:#}").contains("rag.toml"), "{e:#}");
    assert!(format!("{e:#}").contains("n_ctxx"), "{e:#}");
    let e = run(Some("[llm\n"), &[], Flags::default()).unwrap_err();
    assert!(format!("{e:#}").contains("not valid TOML"), "{e:#}");
    let e = run(None, &[("RAG_LLM_N_CTX", "many")], Flags::default()).unwrap_err();
    assert!(format!("{e:#}").contains("RAG_LLM_N_CTX"), "{e:#}");
    let e = run(
        None,
        &[("RAG_RETRIEVAL_MIN_SIMILARITY", "nan")],
        Flags::default(),
    )
    .unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("retrieval.min_similarity is not a finite number"),
        "{msg}"
    );
    assert!(msg.contains("0.25"), "{msg}");
    let e = run(Some("[llm]\ndry_base = inf\n"), &[], Flags::default()).unwrap_err();
    assert!(format!("{e:#}").contains("llm.dry_base"), "{e:#}");
    for (var, value, key) in [
        (
            "RAG_RETRIEVAL_MIN_SIMILARITY",
            "1.5",
            "retrieval.min_similarity = 1.5 is out of range",
        ),
        ("RAG_RETRIEVAL_RRF_K", "-1", "retrieval.rrf_k"),
        ("RAG_RETRIEVAL_TOP_K", "100000", "retrieval.top_k"),
        (
            "RAG_LLM_PROMPT_CACHE_MB",
            "9223372036854775807",
            "llm.prompt_cache_mb",
        ),
        ("RAG_CHUNK_MAX_TOKENS", "20", "chunk.max_tokens"),
    ] {
        let e = run(None, &[(var, value)], Flags::default()).unwrap_err();
        assert!(format!("{e:#}").contains(key), "{var}={value}: {e:#}");
        assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
    }
    let e = run(None, &[("RAG_EMBED_POOLING", "max")], Flags::default()).unwrap_err();
    assert!(format!("{e:#}").contains("embed.pooling"), "{e:#}");
    let s = run(None, &[], Flags::default()).unwrap();
    assert_eq!(s.rerank.model, PathBuf::new(), "an unset path stays empty");
    let e = run(None, &[("RAG_RETRIEVAL_MODE", "fuzzy")], Flags::default()).unwrap_err();
    assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
}

#[test]
fn the_nearest_rag_toml_up_the_tree_is_the_config_and_its_folder_the_root() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("rag.toml"), "[llm]\nn_ctx = 1024\n").unwrap();
    let sub = dir.path().join("a/b");
    std::fs::create_dir_all(&sub).unwrap();
    let s = resolve_with(None, &Flags::default(), &Env::new(), &sub, None, None).unwrap();
    assert_eq!(s.llm.n_ctx, 1024);
    assert_eq!(s.root, dir.path());
    assert_eq!(s.index.dir, dir.path().join(".rag"));
    assert_eq!(
        s.file.as_deref(),
        Some(dir.path().join("rag.toml").as_path())
    );
    // A path given in the environment stays relative to the current folder.
    let env: Env = [("RAG_INDEX_DIR".to_string(), "idx".to_string())].into();
    let s = resolve_with(None, &Flags::default(), &env, &sub, None, None).unwrap();
    assert_eq!(s.index.dir, sub.join("idx"));
}

#[test]
fn every_setting_says_where_it_came_from() {
    let s = run(
        Some("[llm]\nn_ctx = 1024\ntop_p = 0.5\n"),
        &[("RAG_LLM_TOP_P", "0.7")],
        llm_flags(|l| l.seed = Some(7)),
    )
    .unwrap();
    assert_eq!(s.sources["llm.max_tokens"], Source::Default);
    assert!(matches!(&s.sources["llm.n_ctx"], Source::File(p) if p.ends_with("rag.toml")));
    assert_eq!(s.sources["llm.top_p"], Source::Env("RAG_LLM_TOP_P".into()));
    assert_eq!(s.sources["llm.seed"], Source::Flag);
    let keys = leaves(Value::try_from(&s).unwrap().as_table().unwrap());
    assert_eq!(keys.len(), s.sources.len(), "every key has a source");
}

#[test]
fn unknown_keys_and_variables_name_the_nearest_valid_one() {
    let e = run(Some("[llm]\nmax_token = 9\n"), &[], Flags::default()).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains("unknown key llm.max_token; did you mean llm.max_tokens?"),
        "{msg}"
    );
    let e = run(Some("[retreival]\ntop_k = 9\n"), &[], Flags::default()).unwrap_err();
    assert!(
        format!("{e:#}").contains("did you mean retrieval.top_k?"),
        "{e:#}"
    );
    let e = run(Some("top_k = 9\n"), &[], Flags::default()).unwrap_err();
    assert!(format!("{e:#}").contains("not a [section]"), "{e:#}");
    let e = run(None, &[("RAG_LLM_MAX_TOKEN", "9")], Flags::default()).unwrap_err();
    let msg = format!("{e:#}");
    assert!(
        msg.contains(
            "unknown environment variable RAG_LLM_MAX_TOKEN; did you mean RAG_LLM_MAX_TOKENS?"
        ),
        "{msg}"
    );
    assert_eq!(crate::exit::exit_code_of(&e), crate::exit::Exit::Usage);
    for ok in OTHER_VARS {
        assert!(
            run(None, &[(ok, "1")], Flags::default()).is_ok() || *ok == "RAG_CONFIG",
            "{ok}"
        );
    }
}

#[test]
fn onnx_runtime_is_found_in_the_onnxruntime_package_installed_beside_rag() {
    let tmp = tempfile::tempdir().unwrap();
    let prefix = tmp.path().join("venv");
    let capi = prefix.join("lib/python3.12/site-packages/onnxruntime/capi");
    std::fs::create_dir_all(&capi).unwrap();
    std::fs::create_dir_all(prefix.join("bin")).unwrap();
    for f in [
        "libonnxruntime.so.1.24.2",
        "libonnxruntime_providers_shared.so",
        "onnxruntime_pybind11_state.so",
    ] {
        std::fs::write(capi.join(f), b"ELF").unwrap();
    }
    let exe = prefix.join("bin/rag");
    let system = tmp.path().join("usr-lib");
    std::fs::create_dir_all(&system).unwrap();
    // Versions compare as numbers: 1.20.0 is newer than 1.9.9.
    for f in [
        "libonnxruntime.so.1.9.9",
        "libonnxruntime.so.1.20.0",
        "libonnxruntime.so",
    ] {
        std::fs::write(system.join(f), b"ELF").unwrap();
    }
    let find = |env: Option<&Path>, sys: &[&Path]| {
        super::models::find_ort(Some(&exe), env.map(Path::as_os_str), sys)
    };
    assert_eq!(
        find(None, &[&system]),
        Some(capi.join("libonnxruntime.so.1.24.2"))
    );
    // ORT_DYLIB_PATH comes first where it names a file; a stale one is passed over.
    let mine = tmp.path().join("mine.so");
    std::fs::write(&mine, b"ELF").unwrap();
    assert_eq!(find(Some(&mine), &[&system]), Some(mine.clone()));
    assert_eq!(
        find(Some(&tmp.path().join("gone.so")), &[&system]),
        Some(capi.join("libonnxruntime.so.1.24.2"))
    );
    // No package beside rag: the newest library in the system folders.
    std::fs::remove_dir_all(prefix.join("lib")).unwrap();
    assert_eq!(
        find(None, &[&system]),
        Some(system.join("libonnxruntime.so.1.20.0"))
    );
    assert_eq!(find(None, &[]), None);
}

#[test]
fn a_found_onnx_runtime_is_used_only_where_no_model_folder_has_the_pinned_one() {
    let project = tempfile::tempdir().unwrap();
    let found = project.path().join("elsewhere/libonnxruntime.so.1.30.0");
    let at = |ort: Option<&Path>| {
        resolve_with(
            None,
            &Flags::default(),
            &Env::new(),
            project.path(),
            None,
            ort,
        )
        .unwrap()
        .embed
        .ort_lib
    };
    assert_eq!(at(Some(&found)), found);
    let pinned = project
        .path()
        .join(crate::catalog::default_path("embed.ort_lib").unwrap());
    assert_eq!(at(None), pinned);
    std::fs::create_dir(project.path().join("models")).unwrap();
    std::fs::write(&pinned, b"ELF").unwrap();
    assert_eq!(at(Some(&found)), pinned, "the project's own library wins");
    // A key set anywhere is never replaced.
    let env: Env = [("RAG_EMBED_ORT_LIB".to_string(), "/opt/ort.so".to_string())].into();
    let s = resolve_with(
        None,
        &Flags::default(),
        &env,
        project.path(),
        None,
        Some(&found),
    )
    .unwrap();
    assert_eq!(s.embed.ort_lib, PathBuf::from("/opt/ort.so"));
}

#[test]
fn gpu_layers_are_auto_or_a_count_from_toml_the_environment_and_flags() {
    let toml = "[llm]\ngpu_layers = 12\nlarge_gpu_layers = \"auto\"\n";
    let env = [("RAG_LLM_MEDIUM_GPU_LAYERS", "0")];
    let s = run(Some(toml), &env, Flags::default()).unwrap();
    assert_eq!(s.llm.gpu_layers, Layers::Count(12));
    assert_eq!(s.llm.medium_gpu_layers, Layers::Count(0));
    assert_eq!(s.llm.large_gpu_layers, Layers::Auto);
    // Shown as written, and read back the same.
    assert!(s.to_toml().contains("gpu_layers = 12"), "{}", s.to_toml());
    for bad in [
        "gpu_layers = -1",
        "gpu_layers = \"all\"",
        "gpu_layers = 1.5",
    ] {
        let e = format!(
            "{:#}",
            run(Some(&format!("[llm]\n{bad}\n")), &[], Flags::default()).unwrap_err()
        );
        assert!(e.contains("gpu_layers") && e.contains("auto"), "{bad}: {e}");
    }
    let e = format!(
        "{:#}",
        run(None, &[("RAG_LLM_GPU_LAYERS", "most")], Flags::default()).unwrap_err()
    );
    assert!(
        e.contains("RAG_LLM_GPU_LAYERS") || e.contains("gpu_layers"),
        "{e}"
    );
    assert_eq!("auto".parse::<Layers>(), Ok(Layers::Auto));
    assert_eq!("7".parse::<Layers>(), Ok(Layers::Count(7)));
    assert!("-1".parse::<Layers>().is_err());
}
